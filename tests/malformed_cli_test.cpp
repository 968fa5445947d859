// The reader's malformed-file cases (reader_test.cpp's Defect fixtures) through every tool: for
// each input the reader refuses, gguf-requant and gguf-splice exit 1, gguf-diff exits 2 and
// gguf-inspect exits 1, each with the reader's message naming the file, leaving nothing in the
// output folder. Inputs the reader accepts although ggml would not (non-canonical layouts, odd
// names and types) either come out as files ggml's reader loads, or are refused as cleanly.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "cli_run.h"
#include "ggml_ref.h"
#include "gguf/format/file.h"
#include "reader_fixture.h"

namespace gguf {
namespace {

using reader_test::base;
using reader_test::Defect;
using reader_test::DefectKind;
using reader_test::GgufBuilder;
using testing::run_cli;
using testing::TempDir;

struct Case {
  std::string name;  // the defect class, for the test's name
  Defect defect;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// One case per defect class the reader refuses (each is asserted message by message in
// reader_test.cpp).
std::vector<Case> refused_cases() {
  const auto info = base().layout().tensor_info_offsets;
  return {
      {"bad_magic", {DefectKind::kBadMagic}},
      {"version_1", {DefectKind::kVersion, 1}},
      {"version_4", {DefectKind::kVersion, 4}},
      {"big_endian", {DefectKind::kBigEndian}},
      {"shorter_than_a_header", {DefectKind::kTruncate, 10}},
      {"empty_file", {DefectKind::kTruncate, 0}},
      {"huge_tensor_count", {DefectKind::kHugeTensorCount, reader_test::kHuge}},
      {"huge_kv_count", {DefectKind::kHugeKvCount, ~uint64_t{0}}},
      {"key_past_eof", {DefectKind::kKeyPastEof, 1}},
      {"string_past_eof", {DefectKind::kStringPastEof, 0}},
      {"string_array_element_past_eof", {DefectKind::kStringPastEof, 2}},
      {"empty_key", {DefectKind::kEmptyKey, 1}},
      {"duplicate_key", {DefectKind::kDuplicateKey, 2}},
      {"unknown_value_type", {DefectKind::kUnknownValueType, 1}},
      {"nested_array", {DefectKind::kNestedArray, 3}},
      {"array_count_past_eof", {DefectKind::kArrayCountPastEof, 3}},
      {"alignment_wrong_type", {DefectKind::kAlignmentWrongType}},
      {"alignment_zero", {DefectKind::kAlignmentZero}},
      {"alignment_not_power_of_2", {DefectKind::kAlignmentNotPowerOf2}},
      {"too_many_dims", {DefectKind::kTooManyDims, 1}},
      {"negative_dim", {DefectKind::kNegativeDim, 0}},
      {"element_count_overflow", {DefectKind::kElementCountOverflow, 2}},
      {"byte_size_overflow", {DefectKind::kByteSizeOverflow, 2}},
      {"row_not_block_multiple", {DefectKind::kRowNotBlockMultiple, 0}},
      {"element_total_overflow", {DefectKind::kElementTotalOverflow, 2}},
      {"duplicate_tensor_name", {DefectKind::kDuplicateTensorName, 2}},
      {"tensor_name_past_eof", {DefectKind::kTruncate, info[1] + 10}},
      {"misaligned_offset", {DefectKind::kMisalignedOffset, 1}},
      {"offset_past_eof", {DefectKind::kOffsetPastEof, 1}},
      {"data_past_eof", {DefectKind::kDataPastEof}},
  };
}

// A folder with a sound model (good.gguf, the reader fixture's base) and the defective one
// (bad.gguf), and an empty folder for outputs.
class MalformedInput : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    base().write_file(good_);
    testing::write_bytes(bad_, base().defect(GetParam().defect).build());
  }

  // What the reader says of bad.gguf: the message every tool must print.
  std::string reader_error() const {
    try {
      GgufFile::open(bad_);
    } catch (const Error& e) {
      return e.what();
    }
    ADD_FAILURE() << "the reader accepts " << bad_;
    return {};
  }

  void expect_refused(const std::string& tool, const std::vector<std::string>& args, int code,
                      bool partial_output = false) {
    SCOPED_TRACE(fmt::format("{} {}", tool, fmt::join(args, " ")));
    const auto r = run_cli(tool, args);
    EXPECT_EQ(r.code, code);
    const std::string want = reader_error();
    ASSERT_TRUE(want.starts_with(bad_ + ": ")) << want;  // names the file
    if (partial_output) {
      // gguf-inspect shows what it could read on stdout, then fails with the reader's error.
      EXPECT_TRUE(r.err.ends_with(tool + ": error: " + want + "\n")) << r.err;
    } else {
      EXPECT_EQ(r.out, "");
      EXPECT_EQ(r.err, tool + ": error: " + want + "\n");
    }
    EXPECT_EQ(out_dir_.entries(), std::vector<std::string>{});
  }

  TempDir dir_, out_dir_;
  const std::string good_ = dir_.file("good.gguf"), bad_ = dir_.file("bad.gguf");
  const std::string out_ = out_dir_.file("out.gguf");
};

TEST_P(MalformedInput, requant_exits_1) {
  expect_refused("gguf-requant", {bad_, "-o", out_, "--type", "q8_0"}, 1);
  expect_refused("gguf-requant", {bad_, "--dry-run", "--type", "q8_0"}, 1);
}

TEST_P(MalformedInput, splice_exits_1) {
  expect_refused("gguf-splice",
                 {bad_, "--donor", good_, "--match", "blk.0.attn_q.weight", "-o", out_}, 1);
  expect_refused("gguf-splice",
                 {good_, "--donor", bad_, "--match", "blk.0.attn_q.weight", "-o", out_}, 1);
  expect_refused("gguf-splice", {good_, "--take", bad_ + ":match=output", "--dry-run"}, 1);
}

TEST_P(MalformedInput, diff_exits_2) {
  expect_refused("gguf-diff", {bad_, good_}, 2);
  expect_refused("gguf-diff", {good_, bad_, "--values"}, 2);
}

TEST_P(MalformedInput, inspect_exits_1) {
  expect_refused("gguf-inspect", {bad_}, 1, true);
  expect_refused("gguf-inspect", {"--check", bad_}, 1, true);
}

INSTANTIATE_TEST_SUITE_P(malformed_cli, MalformedInput, ::testing::ValuesIn(refused_cases()),
                         [](const auto& info) { return info.param.name; });

// Inputs the reader accepts although ggml's reader refuses them or they are odd: the layout is
// not canonical (shared, overlapping, gapped, reordered data), a name is empty or too long for
// ggml, a type has no known size. Each tool either writes a file ggml's reader loads, or
// refuses as cleanly as above (exit 1, nothing left behind).
struct Accepted {
  std::string name;
  Defect defect;
  int requant_code, splice_code;        // the tools' exit codes
  std::string requant_err, splice_err;  // their stderr, "IN" for the input's path
};

void PrintTo(const Accepted& c, std::ostream* os) { *os << c.name; }

std::vector<Accepted> accepted_cases() {
  const std::string empty =
      "IN: tensor '': at byte 327: empty tensor name; no output can carry it (llama.cpp's loader "
      "refuses a tensor it does not know)\n";
  const std::string long_name =
      "IN: tensor 'output.weightxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx': at byte 327: "
      "tensor name is 64 bytes; ggml allows at most 63, so ggml could not load a file written "
      "with it\n";
  const std::string unknown =
      "IN: tensor 'blk.0.attn_q.weight': at byte 315: type 99 (unknown id) has no known size; "
      "this operation needs it\n";
  const std::string removed =
      "IN: tensor 'token_embd.weight': at byte 256: type 4 (removed from ggml) has no known "
      "size; this operation needs it\n";
  return {
      {"shared_data", {DefectKind::kSharedData, 1}, 0, 0, "", ""},
      {"overlap", {DefectKind::kOverlap, 1}, 0, 0, "", ""},
      {"gap", {DefectKind::kGap, 1}, 0, 0, "", ""},
      {"reorder", {DefectKind::kReorder, 0}, 0, 0, "", ""},
      {"empty_tensor_name",
       {DefectKind::kEmptyTensorName, 2},
       1,
       1,
       "gguf-requant: error: " + empty,
       "gguf-splice: error: " + empty},
      {"long_tensor_name",
       {DefectKind::kLongTensorName, 2},
       1,
       1,
       "gguf-requant: error: " + long_name,
       "gguf-splice: error: " + long_name},
      {"unknown_type_id",
       {DefectKind::kUnknownTypeId, 1},
       1,
       1,
       "gguf-requant: error: " + unknown,
       "gguf-splice: error: " + unknown},
      {"removed_type_id",
       {DefectKind::kRemovedTypeId, 0},
       1,
       1,
       "gguf-requant: error: " + removed,
       "gguf-splice: error: " + removed},
  };
}

class AcceptedInput : public ::testing::TestWithParam<Accepted> {
 protected:
  void SetUp() override {
    base().write_file(good_);
    testing::write_bytes(odd_, base().defect(GetParam().defect).build());
  }

  // Runs tool; on success its output must load in ggml's reader, on failure nothing is left.
  void expect_sound(const std::string& tool, const std::vector<std::string>& args, int code,
                    const std::string& err) {
    SCOPED_TRACE(fmt::format("{} {}", tool, fmt::join(args, " ")));
    const auto r = run_cli(tool, args);
    ASSERT_EQ(r.code, code) << r.err;
    std::string e = r.err;
    for (size_t at; (at = e.find(odd_)) != std::string::npos;) e.replace(at, odd_.size(), "IN");
    if (code != 0) {
      EXPECT_EQ(e, err);
      EXPECT_EQ(out_dir_.entries(), std::vector<std::string>{});
      return;
    }
    EXPECT_EQ(out_dir_.entries(), std::vector<std::string>{"out.gguf"});
    EXPECT_NO_THROW(GgufFile::open(out_));
    EXPECT_TRUE(testing::GgmlRef::get().gguf_accepts(out_)) << "ggml refuses " << out_;
    std::filesystem::remove(out_);
  }

  TempDir dir_, out_dir_;
  const std::string good_ = dir_.file("good.gguf"), odd_ = dir_.file("odd.gguf");
  const std::string out_ = out_dir_.file("out.gguf");
};

TEST_P(AcceptedInput, requant_writes_what_ggml_loads_or_refuses) {
  GGUF_REQUIRE_GGML();
  expect_sound("gguf-requant", {odd_, "-o", out_, "--type", "f16"}, GetParam().requant_code,
               GetParam().requant_err);
}

TEST_P(AcceptedInput, splice_writes_what_ggml_loads_or_refuses) {
  GGUF_REQUIRE_GGML();
  expect_sound("gguf-splice",
               {odd_, "--donor", good_, "--match", "blk.0.attn_q.weight", "-o", out_},
               GetParam().splice_code, GetParam().splice_err);
}

INSTANTIATE_TEST_SUITE_P(malformed_cli, AcceptedInput, ::testing::ValuesIn(accepted_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace gguf
