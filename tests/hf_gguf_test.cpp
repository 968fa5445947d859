// Our files read by another implementation: Hugging Face's GGUF parser (@huggingface/gguf from
// the npm registry, the one the Hub runs on every uploaded GGUF) must read what the tools write
// exactly as libgguf reads it: every key with its value type and value, every tensor's name,
// type, shape and offset, and where the data section starts. Skips when node or the package is
// missing (it is installed at configure time, next to ggml's library; GGUF_HF_GGUF_DIR points
// elsewhere), or fails then with GGUF_REQUIRE_REFERENCES set.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "affine_fixture.h"
#include "cli_run.h"
#include "ggml_ref.h"
#include "gguf/format/file.h"
#include "gguf/format/model.h"
#include "gguf/ops/synth.h"
#include "gguf/write/plan.h"
#include "gguf/write/writer.h"
#include "gguf_builder.h"

namespace gguf {
namespace {

using nlohmann::json;
using testing::AffineFile;
using testing::GgufBuilder;
using testing::run_cli;
using testing::run_program;
using testing::Tag;
using testing::TempDir;

// Where npm installed the package: GGUF_HF_GGUF_DIR in the environment (CI's sanitized build
// borrows the main build's copy), else the build's own.
const std::string kPrefix = [] {
  const char* env = std::getenv("GGUF_HF_GGUF_DIR");
  return std::string(env && *env ? env : GGUF_HF_GGUF_DIR);
}();
const std::string kDump = std::string(GGUF_SOURCE_DIR) + "/tests/support/hf_gguf_dump.mjs";

std::optional<std::string> hf_unavailable() {
  if (!std::filesystem::exists(kPrefix + "/node_modules/@huggingface/gguf/dist/index.mjs"))
    return "@huggingface/gguf is not installed under " + kPrefix + " (npm failed at configure)";
  if (run_program("node", {"--version"}).code != 0) return "node is not on PATH";
  return std::nullopt;
}

// A scalar as the dump prints it: 64-bit integers as decimal strings, non-finite floats as
// "nan"/"inf"/"-inf".
json scalar_json(const Value& v) {
  switch (v.type()) {
    case ValueType::kU64:
      return std::to_string(*v.as_uint());
    case ValueType::kI64:
      return std::to_string(*v.as_int());
    case ValueType::kBool:
      return *v.as_bool();
    case ValueType::kF32:
    case ValueType::kF64: {
      const double d = *v.as_double();
      if (std::isnan(d)) return "nan";
      if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
      return d;
    }
    case ValueType::kString:
      return *v.as_string();
    default:
      return *v.as_int();
  }
}

json value_json(const Value& v) {
  if (!v.is_array()) return scalar_json(v);
  json out = json::array();
  if (v.array_type() == ValueType::kString) {
    for (const auto& s : v.strings()) out.push_back(s);
  } else {
    for (uint64_t i = 0; i < v.array_size(); ++i) out.push_back(scalar_json(v.element(i)));
  }
  return out;
}

// Compares Hugging Face's reading of one GGUF file (a whole file, or one shard) with ours.
void expect_hf_reads_as_we_do(const std::string& path) {
  SCOPED_TRACE(path);
  const auto ours = GgufFile::open(path);
  const auto r = run_program("node", {kDump, kPrefix, path});
  ASSERT_EQ(r.code, 0) << "Hugging Face's parser failed on " << path << ":\n" << r.err;
  const json hf = json::parse(r.out);

  EXPECT_EQ(hf["version"], ours->version());
  EXPECT_EQ(hf["little_endian"], true);
  EXPECT_EQ(hf["tensor_data_offset"], std::to_string(ours->data_offset()));

  const auto& kvs = ours->metadata().entries();
  const json& meta = hf["metadata"];
  ASSERT_EQ(meta.size(), kvs.size());
  for (size_t i = 0; i < kvs.size(); ++i) {
    SCOPED_TRACE(kvs[i].key);
    EXPECT_EQ(meta[i]["key"], kvs[i].key);
    EXPECT_EQ(meta[i]["type"], static_cast<uint32_t>(kvs[i].value.type()));
    if (kvs[i].value.is_array()) {
      EXPECT_EQ(meta[i]["sub_type"], static_cast<uint32_t>(kvs[i].value.array_type()));
    }
    EXPECT_EQ(meta[i]["value"], value_json(kvs[i].value));
  }

  const auto& tensors = ours->tensors();
  const json& infos = hf["tensors"];
  ASSERT_EQ(infos.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(infos[i]["name"], t.name);
    EXPECT_EQ(infos[i]["dtype"], t.type_id);
    json shape = json::array();
    for (int64_t d : t.shape) shape.push_back(std::to_string(d));
    EXPECT_EQ(infos[i]["shape"], shape);
    EXPECT_EQ(infos[i]["offset"], std::to_string(t.offset));
  }
}

MoeSpec small_moe() {
  MoeSpec s;
  s.n_layers = 4;
  s.n_experts = 4;
  s.vocab = 512;
  return s;
}

TEST(hf_gguf, reads_every_value_type_as_we_do_before_and_after_a_rewrite) {
  if (auto why = hf_unavailable()) GGUF_MISSING_REFERENCE(*why);
  TempDir dir;
  const float inf = std::numeric_limits<float>::infinity();
  GgufBuilder b;
  b.alignment(64)
      .string("general.architecture", "llama")
      .string("general.name", "every type: \xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80 \"quoted\"\n")
      .u8("t.u8", 250)
      .i8("t.i8", -7)
      .u16("t.u16", 65535)
      .i16("t.i16", -32768)
      .u32("t.u32", 4000000000u)
      .i32("t.i32", -2000000000)
      .f32("t.f32", 0.1f)
      .f32("t.f32_inf", -inf)
      .f32("t.f32_nan", std::numeric_limits<float>::quiet_NaN())
      .boolean("t.bool", true)
      .u64("t.u64", 18446744073709551615ull)
      .i64("t.i64", -9007199254740993ll)  // not a double: must survive as an integer
      .f64("t.f64", 1e300)
      .string("t.empty", "")
      .array<uint8_t>("a.u8", Tag::kU8, {0, 1, 255})
      .array<int8_t>("a.i8", Tag::kI8, {-128, 0, 127})
      .array<uint16_t>("a.u16", Tag::kU16, {1, 65535})
      .array<int16_t>("a.i16", Tag::kI16, {-1, 2})
      .array<uint32_t>("a.u32", Tag::kU32, {7, 4294967295u})
      .array<int32_t>("a.i32", Tag::kI32, {-5, 5, 0})
      .array<float>("a.f32", Tag::kF32, {1.5f, -0.0f, 3e38f, inf})
      .array<uint8_t>("a.bool", Tag::kBool, {1, 0, 1})
      .array<uint64_t>("a.u64", Tag::kU64, {0, 9007199254740993ull})
      .array<int64_t>("a.i64", Tag::kI64, {-1, 9223372036854775807ll})
      .array<double>("a.f64", Tag::kF64, {2.5, -1e-300})
      .array<float>("a.empty", Tag::kF32, {})
      .string_array("a.str", {"", "<s>", "\xC4\xA0the", "tab\there"})
      .tensor("token_embd.weight", 0, {256, 8})
      .tensor("blk.0.attn_q.weight", 1, {256, 16})
      .tensor("blk.0.ffn_up_exps.weight", 12, {256, 4, 3})
      .tensor("blk.0.ffn_norm.weight", 30, {256})
      .tensor("output.weight", 8, {256, 8});
  const std::string in = dir.file("in.gguf");
  b.write_file(in);
  expect_hf_reads_as_we_do(in);

  // Our writer, through a tool: every value type re-serialised, the tensors re-encoded.
  const std::string out = dir.file("out.gguf");
  const auto r =
      run_cli("gguf-requant", {in, "-o", out, "--type", "q8_0", "--match", ".*attn.*", "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  expect_hf_reads_as_we_do(out);
}

TEST(hf_gguf, reads_what_splice_and_requant_write_as_we_do) {
  if (auto why = hf_unavailable()) GGUF_MISSING_REFERENCE(*why);
  TempDir dir;
  const std::string base = dir.file("base.gguf"), donor = dir.file("donor.gguf"),
                    f16 = dir.file("f16.gguf");
  write_plan(synth_moe_plan(ds4_recipe(small_moe())), base, {});
  write_plan(synth_moe_plan(uniform_types(small_moe(), GgmlType::Q4_K)), donor, {});
  write_plan(synth_moe_plan(uniform_types(small_moe(), GgmlType::F16)), f16, {});

  const std::string spliced = dir.file("spliced.gguf");
  auto r = run_cli("gguf-splice", {base, "--donor", donor, "--layers", "2-3", "-o", spliced, "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  expect_hf_reads_as_we_do(spliced);

  const std::string requant = dir.file("requant.gguf");
  r = run_cli("gguf-requant", {f16, "--type", "q2_K", "--role", "routed", "-o", requant, "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  expect_hf_reads_as_we_do(requant);
}

TEST(hf_gguf, reads_every_shard_of_a_split_output_as_we_do) {
  if (auto why = hf_unavailable()) GGUF_MISSING_REFERENCE(*why);
  TempDir dir;
  const std::string f16 = dir.file("f16.gguf");
  write_plan(synth_moe_plan(uniform_types(small_moe(), GgmlType::F16)), f16, {});
  const auto r = run_cli("gguf-requant", {f16, "--type", "q4_K", "--split-max-tensors", "25", "-o",
                                          dir.file("split.gguf"), "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  int shards = 0;
  for (const auto& name : dir.entries()) {
    if (name.rfind("split-", 0) != 0) continue;
    ++shards;
    expect_hf_reads_as_we_do(dir.file(name));
  }
  EXPECT_GE(shards, 3);
}

TEST(hf_gguf, reads_a_packed_affine_import_as_we_do) {
  if (auto why = hf_unavailable()) GGUF_MISSING_REFERENCE(*why);
  TempDir dir;
  AffineFile af(11);
  af.add_packed("blk.0.ffn_up.weight", 3, 64, {32, 256});
  af.add_packed("blk.0.ffn_down.weight", 4, 32, {256, 64});
  af.add_plain("blk.0.ffn_norm.weight", "F32", {256});
  const std::string st = af.write(dir.file("in.safetensors")), out = dir.file("out.gguf");
  const auto r = run_cli("gguf-requant", {st, "-o", out, "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  expect_hf_reads_as_we_do(out);
}

}  // namespace
}  // namespace gguf
