// Writes the reader fuzzer's seed corpus into a directory: sound files of several shapes and
// one file per builder defect, so the fuzzer starts from every branch the tests know.
#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <vector>

#include "gguf_builder.h"

namespace {

using gguf::testing::Defect;
using gguf::testing::DefectKind;
using gguf::testing::GgufBuilder;
using gguf::testing::Tag;

GgufBuilder base() {
  GgufBuilder b;
  b.string("general.architecture", "deepseek2")
      .u32("general.quantization_version", 2)
      .string_array("tokenizer.ggml.tokens", {"a", "bc", ""})
      .array("a.f32", Tag::kF32, std::vector<float>{1.5f, -2})
      .u16("split.count", 1)
      .tensor("token_embd.weight", 0, {8, 4})
      .tensor("blk.0.attn_q.weight", 2, {64, 2})
      .tensor("blk.1.ffn_gate_exps.weight", 16, {256, 1, 2})
      .tensor("blk.1.ffn_up_exps.weight", 12, {256, 1, 2})
      .tensor("blk.1.ffn_down_exps.weight", 29, {256, 1, 1})
      .tensor("output.weight", 1, {16});
  return b;
}

GgufBuilder every_value_type() {
  GgufBuilder b;
  b.u8("u8", 1).i8("i8", -1).u16("u16", 2).i16("i16", -2).u32("u32", 3).i32("i32", -3);
  b.f32("f32", 0.5f).boolean("bool", true).string("s", "x\x1b").u64("u64", 4).i64("i64", -4);
  b.f64("f64", 0.25).array("a.u64", Tag::kU64, std::vector<uint64_t>{1, 2});
  b.alignment(64).tensor("t", 30, {4}).tensor("u", 15, {256}).tensor("v", 28, {2});
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    fmt::print(stderr, "usage: {} DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  std::vector<std::pair<std::string, GgufBuilder>> seeds = {
      {"base", base()}, {"values", every_value_type()}, {"empty", GgufBuilder()}};
  const std::vector<std::pair<const char*, Defect>> defects = {
      {"magic", {DefectKind::kBadMagic}},
      {"v1", {DefectKind::kVersion, 1}},
      {"bigendian", {DefectKind::kBigEndian}},
      {"truncated", {DefectKind::kTruncate, 100}},
      {"ntensors", {DefectKind::kHugeTensorCount, 1000}},
      {"nkv", {DefectKind::kHugeKvCount, 1000}},
      {"string", {DefectKind::kStringPastEof, 0}},
      {"keylen", {DefectKind::kKeyPastEof, 1}},
      {"emptykey", {DefectKind::kEmptyKey, 1}},
      {"dupkey", {DefectKind::kDuplicateKey, 2}},
      {"valtype", {DefectKind::kUnknownValueType, 1}},
      {"nested", {DefectKind::kNestedArray, 3}},
      {"arraycount", {DefectKind::kArrayCountPastEof, 2}},
      {"aligntype", {DefectKind::kAlignmentWrongType}},
      {"alignzero", {DefectKind::kAlignmentZero}},
      {"align48", {DefectKind::kAlignmentNotPowerOf2}},
      {"dims5", {DefectKind::kTooManyDims, 1}},
      {"negdim", {DefectKind::kNegativeDim, 0}},
      {"elements", {DefectKind::kElementCountOverflow, 2}},
      {"bytes", {DefectKind::kByteSizeOverflow, 2}},
      {"row", {DefectKind::kRowNotBlockMultiple, 0}},
      {"type99", {DefectKind::kUnknownTypeId, 1}},
      {"type4", {DefectKind::kRemovedTypeId, 1}},
      {"dupname", {DefectKind::kDuplicateTensorName, 2}},
      {"emptyname", {DefectKind::kEmptyTensorName, 1}},
      {"longname", {DefectKind::kLongTensorName, 0}},
      {"misaligned", {DefectKind::kMisalignedOffset, 1}},
      {"offset", {DefectKind::kOffsetPastEof, 1}},
      {"data", {DefectKind::kDataPastEof}},
      {"shared", {DefectKind::kSharedData, 1}},
      {"overlap", {DefectKind::kOverlap, 1}},
      {"gap", {DefectKind::kGap, 1}},
      {"reorder", {DefectKind::kReorder, 0}},
  };
  for (const auto& [name, d] : defects) seeds.emplace_back(name, base().defect(d));
  for (const auto& [name, b] : seeds) b.write_file(fmt::format("{}/{}.gguf", dir, name));
  fmt::print("{} seeds in {}\n", seeds.size(), dir);
  return 0;
}
