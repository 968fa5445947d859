// gguf-splice's metadata surgery end to end: golden CLI output of --set/--set-file/--delete and
// of every refusal, edited files that ggml's reader and llama.cpp load with every tensor
// byte-identical, and malformed bases refused with nothing written.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "cli_run.h"
#include "ggml_ref.h"
#include "gguf/format/model.h"
#include "gguf/ops/diff.h"
#include "llama_ref.h"
#include "reader_fixture.h"
#include "splice_test_util.h"

namespace gguf {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;
using testing::TempDir;

const std::string kTry = "Try 'gguf-splice --help' for more information.\n";

// A Mixtral-style model llama.cpp runs (q8_0, so quantized payloads are copied too).
struct LlamaFixture {
  TempDir dir;
  std::string model = dir.file("m.gguf");
  LlamaFixture() {
    const auto r = run_cli("../examples/make_tiny_moe",
                           {"--arch", "llama", "--recipe", "q8_0", "--layers", "2", "-o", model});
    EXPECT_EQ(r.code, 0) << r.err;
  }
};
const LlamaFixture& llama_fx() {
  static LlamaFixture f;
  return f;
}

testing::CliResult splice_cli(std::vector<std::string> args) {
  return run_cli("gguf-splice", args);
}

std::set<std::string> changed_keys(const Metadata& a, const Metadata& b) {
  std::set<std::string> out;
  for (const auto& c : metadata_changes(a, b)) out.insert(c.key);
  return out;
}

const std::set<std::string> kProvenance = {"splice.base",         "splice.donors",
                                           "splice.selectors",    "splice.donor_header_xxh3",
                                           "splice.tensor_count", "splice.edits"};

TEST(splice_edit, help_lists_the_edit_options) {
  const auto r = splice_cli({"--help"});
  EXPECT_EQ(r.code, 0);
  for (const char* o : {"--set arg", "--set-file arg", "--delete arg", "--force-keys"})
    EXPECT_NE(r.out.find(o), std::string::npos) << o;
  EXPECT_NE(r.out.find("[--set KEY=VALUE ...] [--set-file KEY=PATH ...] [--delete KEY ...]"),
            std::string::npos);
}

TEST(splice_edit, no_donor_and_no_edit_is_nothing_to_do) {
  TempDir dir;
  const auto r = splice_cli({llama_fx().model, "-o", dir.file("o.gguf")});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "gguf-splice: error: nothing to do: give a donor (--donor or --take), a key edit "
            "(--set, --set-file, --delete) or --align\n" +
                kTry);
  EXPECT_TRUE(dir.entries().empty());
}

TEST(splice_edit, dry_run_shows_the_key_diff_as_gguf_diff_does) {
  TempDir dir;
  const auto r =
      splice_cli({llama_fx().model, "--set", "general.name=Fixed", "--set", "my.list:[i16]=1,-2",
                  "--delete", "tokenizer.ggml.eos_token_id", "--dry-run"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const std::string keys =
      "metadata: 1 changed, 7 added, 1 removed\n"
      "  key                          change   a                      b\n"
      "  general.name                 changed  string \"tiny-mixtral\"  string \"Fixed\"\n"
      "  tokenizer.ggml.eos_token_id  removed  u32 2                  -\n"
      "  my.list                      added    -                      i16[2] [1, -2]\n"
      "  splice.base                  added    -                      string \"m.gguf\"\n"
      "  splice.donors                added    -                      string[0] []\n"
      "  splice.donor_header_xxh3     added    -                      string[0] []\n"
      "  splice.selectors             added    -                      string[0] []\n"
      "  splice.tensor_count          added    -                      u32 0\n"
      "  splice.edits                 added    -                      string[3] [\"set "
      "general.name\", \"set my.list\", \"d...\n"
      "no donor: 23 tensors copied from '" +
      llama_fx().model + "'\n";
  EXPECT_TRUE(r.out.starts_with(keys)) << r.out;
  EXPECT_TRUE(r.out.ends_with("dry run: no GGUF written\n")) << r.out;
  // gguf-diff prints the same section for the file the edit writes.
  const std::string out = dir.file("out.gguf");
  ASSERT_EQ(
      splice_cli({llama_fx().model, "--set", "general.name=Fixed", "--set", "my.list:[i16]=1,-2",
                  "--delete", "tokenizer.ggml.eos_token_id", "-o", out, "-q"})
          .code,
      0);
  const auto d = run_cli("gguf-diff", {llama_fx().model, out});
  EXPECT_EQ(d.code, 1);
  const std::string diff_keys = keys.substr(0, keys.find("no donor:"));
  EXPECT_NE(d.out.find(diff_keys), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("tensors: 23 compared, all same\n"), std::string::npos) << d.out;
}

TEST(splice_edit, json_has_the_key_diff) {
  const auto r = splice_cli({llama_fx().model, "--set", "general.name=J", "--dry-run", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto doc = nlohmann::json::parse(r.out);
  ASSERT_TRUE(doc["metadata"].is_array());
  EXPECT_EQ(doc["metadata"][0], nlohmann::json({{"key", "general.name"},
                                                {"change", "changed"},
                                                {"a", "tiny-mixtral"},
                                                {"b", "J"},
                                                {"a_type", "string"},
                                                {"b_type", "string"},
                                                {"first_difference", 0}}));
  EXPECT_EQ(doc["spliced"], 0);
  EXPECT_EQ(doc["output"], nullptr);
}

// The acceptance test of a metadata edit: ggml's reader and llama.cpp load the file, it
// computes what the base computes, gguf-diff shows only the edited keys and the provenance,
// and every tensor is byte-identical.
TEST(splice_edit, edited_file_loads_and_only_the_edited_keys_differ) {
  TempDir dir;
  const std::string tmpl = dir.file("chat.jinja"), out = dir.file("out.gguf");
  std::ofstream(tmpl, std::ios::binary)
      << "{% for message in messages %}{{ message['content'] }}\n{% endfor %}";
  const auto r = splice_cli({llama_fx().model, "--set", "general.name=Edited", "--set-file",
                             "tokenizer.chat_template=" + tmpl, "--set",
                             "llama.rope.freq_base=10000", "--set", "my.flags:[bool]=true,false",
                             "--delete", "tokenizer.ggml.unknown_token_id", "-o", out});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("every payload verified"), std::string::npos) << r.out;
  const Model base = Model::open(llama_fx().model), edited = Model::open(out);
  std::set<std::string> want = {"general.name", "tokenizer.chat_template", "my.flags",
                                "tokenizer.ggml.unknown_token_id"};
  want.insert(kProvenance.begin(), kProvenance.end());
  EXPECT_EQ(changed_keys(base.metadata(), edited.metadata()), want);
  EXPECT_EQ(*edited.metadata().get_string("tokenizer.chat_template"),
            "{% for message in messages %}{{ message['content'] }}\n{% endfor %}");
  DiffOptions o;
  o.metadata = false;
  const DiffReport d = diff_models(base, edited, o);
  EXPECT_TRUE(d.identical);
  EXPECT_EQ(d.counts.same, base.tensors().size());
  for (size_t i = 0; i < base.tensors().size(); ++i) {
    const auto& a = base.tensors()[i];
    const auto& b = edited.tensors()[i];
    ASSERT_EQ(a.name(), b.name());
    std::vector<uint8_t> sa, sb;
    EXPECT_TRUE(std::ranges::equal(a.file->source().stream(a.data_start(), *a.info->bytes, sa),
                                   b.file->source().stream(b.data_start(), *b.info->bytes, sb)))
        << a.name();
  }
  if (testing::GgmlRef::get().available()) {
    EXPECT_TRUE(testing::GgmlRef::get().gguf_accepts(out, true));
  }
  if (!testing::LlamaRef::get().available())
    GTEST_SKIP() << "llama.cpp not available: " << testing::LlamaRef::get().reason();
  const std::vector<int> prompt = {1, 72, 108, 300};
  const auto ra = testing::LlamaRef::get().run(llama_fx().model, prompt);
  const auto rb = testing::LlamaRef::get().run(out, prompt);
  ASSERT_TRUE(rb.loaded) << rb.log;
  EXPECT_EQ(ra.logits, rb.logits);
}

TEST(splice_edit, donors_and_edits_combine_in_one_run) {
  using splice_test::fx;
  TempDir dir;
  const std::string out = dir.file("out.gguf");
  const auto r = splice_cli({fx().base, "--donor", fx().donor, "--layers", "3", "--set",
                             "general.name=mixed", "-o", out, "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  const Model base = Model::open(fx().base), m = Model::open(out);
  EXPECT_EQ(m.metadata().get_string("general.name"), "mixed");
  EXPECT_EQ(m.metadata().get_uint("splice.tensor_count"), 3u);
  EXPECT_EQ(m.metadata().find("splice.edits")->strings(),
            std::vector<std::string>{"set general.name"});
  EXPECT_TRUE(changed_keys(base.metadata(), m.metadata()).contains("general.name"));
}

TEST(splice_edit, align_relays_a_file_without_changing_a_payload) {
  TempDir dir;
  const std::string out = dir.file("a4k.gguf"), back = dir.file("back.gguf");
  ASSERT_EQ(splice_cli({llama_fx().model, "--align", "4096", "-o", out, "-q"}).code, 0);
  const Model base = Model::open(llama_fx().model), m = Model::open(out);
  EXPECT_EQ(m.metadata().get_uint("general.alignment"), 4096u);
  EXPECT_EQ(m.first().data_offset() % 4096, 0u);
  for (const auto& t : m.tensors()) EXPECT_EQ(t.data_start() % 4096, 0u) << t.name();
  std::set<std::string> want = {"general.alignment"};
  want.insert(kProvenance.begin(), kProvenance.end());
  want.erase("splice.edits");
  EXPECT_EQ(changed_keys(base.metadata(), m.metadata()), want);
  DiffOptions o;
  o.metadata = false;
  o.paranoid = true;
  EXPECT_TRUE(diff_models(base, m, o).identical);
  // A splice without --align keeps the base's alignment.
  ASSERT_EQ(splice_cli({out, "--set", "general.name=again", "-o", back, "-q"}).code, 0);
  EXPECT_EQ(Model::open(back).metadata().get_uint("general.alignment"), 4096u);
  if (testing::GgmlRef::get().available()) {
    EXPECT_TRUE(testing::GgmlRef::get().gguf_accepts(out, true));
  }
  if (testing::LlamaRef::get().available()) {
    const std::vector<int> prompt = {1, 72, 108, 300};
    const auto ra = testing::LlamaRef::get().run(llama_fx().model, prompt);
    const auto rb = testing::LlamaRef::get().run(out, prompt);
    ASSERT_TRUE(rb.loaded) << rb.log;
    EXPECT_EQ(ra.logits, rb.logits);
  }
  for (const char* bad : {"48", "16", "0", "4294967296"}) {
    const auto r = splice_cli({llama_fx().model, "--align", bad, "-o", dir.file("x.gguf")});
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.err, fmt::format("gguf-splice: error: --align {}: the alignment must be a power "
                                 "of two from 32 to 2147483648 (e.g. 4096)\n{}",
                                 bad, kTry));
  }
}

struct Refusal {
  std::vector<std::string> args;
  std::string err;
};

TEST(splice_edit, refusals_are_usage_errors_and_write_nothing) {
  const std::string m = llama_fx().model;
  const std::vector<Refusal> cases = {
      {{"--set", "general.alignment=64"},
       "key 'general.alignment': a layout key, set with --align"},
      {{"--delete", "split.count"},
       "key 'split.count': a layout key, written for split outputs (--split-max-size, "
       "--split-max-tensors, --keep-split)"},
      {{"--set", "splice.base=x"},
       "key 'splice.base': written by gguf-splice as the splice's provenance"},
      {{"--set", "my.k:u9=1"},
       "key 'my.k': unknown type 'u9' (GGUF's types: u8, i8, u16, i16, u32, i32, u64, i64, f32, "
       "f64, bool, str; [TYPE] for an array)"},
      {{"--set", "llama.context_length=4294967296"},
       "key 'llama.context_length': value '4294967296' is out of range for u32 (0 to "
       "4294967295)"},
      {{"--set", "general.name=a", "--delete", "general.name"},
       "key 'general.name': both set and deleted (--set and --delete of one key)"},
      {{"--delete", std::string(65536, 'k')},
       "key of 65536 bytes ('kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk...'): a key holds at most 65535 "
       "bytes"},
      {{"--set", "no.such=1"},
       m + ": key 'no.such': not in the file; a new key needs its type (--set "
           "no.such:TYPE=VALUE)"},
      {{"--delete", "no.such"}, m + ": key 'no.such': not in the file; nothing to delete"},
      {{"--delete", "llama.block_count"},
       "key 'llama.block_count': llama.cpp's loader refuses a model without it; --force-keys "
       "deletes it anyway"},
      {{"--set", "llama.block_count:i32=2"},
       "key 'llama.block_count': llama.cpp reads it as u32, not i32; --force-keys sets it "
       "anyway"},
      {{"--set", "general.name"},
       "invalid --set value 'general.name': expected KEY=VALUE, KEY:TYPE=VALUE or "
       "KEY:[TYPE]=V1,V2"},
  };
  for (const Refusal& c : cases) {
    SCOPED_TRACE(c.err);
    TempDir dir;
    std::vector<std::string> args = {m, "-o", dir.file("o.gguf")};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const auto r = splice_cli(args);
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err, "gguf-splice: error: " + c.err + "\n" + kTry);
    EXPECT_TRUE(dir.entries().empty());
  }
  // --force-keys lets a required key go (the file is then the user's to keep).
  TempDir dir;
  const auto r = splice_cli(
      {m, "--delete", "llama.block_count", "--force-keys", "-o", dir.file("o.gguf"), "-q"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(Model::open(dir.file("o.gguf")).metadata().find("llama.block_count"));
}

TEST(splice_edit, set_file_that_cannot_be_read_is_an_input_error) {
  TempDir dir;
  const auto r = splice_cli(
      {llama_fx().model, "--set-file", "k=" + dir.file("none"), "-o", dir.file("o.gguf")});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "gguf-splice: error: " + dir.file("none") +
                       ": cannot open: No such file or directory\n");
  EXPECT_TRUE(dir.entries().empty());
}

// The file a --set-file value comes from is an input: -o naming it (even with --force) is
// refused and leaves it as it was.
TEST(splice_edit, output_that_is_a_set_file_is_refused) {
  TempDir dir;
  const std::string tmpl = dir.file("chat.jinja");
  std::ofstream(tmpl, std::ios::binary) << "{{ messages }}";
  const auto r = splice_cli(
      {llama_fx().model, "--set-file", "tokenizer.chat_template=" + tmpl, "-o", tmpl, "--force"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, fmt::format("gguf-splice: error: {0}: output is the same file as input '{0}'; "
                               "refusing to overwrite an input (choose another output path)\n",
                               tmpl) +
                       kTry);
  std::ifstream in(tmpl, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "{{ messages }}");
}

// The reader's corpus of malformed files, each as the base of a metadata edit: the files the
// reader refuses are refused with nothing written; the non-canonical layouts the lenient
// reader reads (ggml refuses them) are written canonically, with a warning, and then load.
TEST(splice_edit, malformed_bases_are_refused_with_no_output) {
  using reader_test::base;
  using testing::Defect;
  using testing::DefectKind;
  using K = DefectKind;
  const std::vector<Defect> refused = {
      {K::kBadMagic},
      {K::kVersion, 1},
      {K::kVersion, 4},
      {K::kBigEndian},
      {K::kTruncate, 30},
      {K::kHugeTensorCount, 1u << 30},
      {K::kHugeKvCount, 1u << 30},
      {K::kStringPastEof, 0},
      {K::kStringPastEof, 2},
      {K::kKeyPastEof, 1},
      {K::kEmptyKey, 1},
      {K::kDuplicateKey, 2},
      {K::kUnknownValueType, 1},
      {K::kNestedArray, 3},
      {K::kArrayCountPastEof, 3},
      {K::kAlignmentWrongType},
      {K::kAlignmentZero},
      {K::kAlignmentNotPowerOf2},
      {K::kTooManyDims, 0},
      {K::kNegativeDim, 0},
      {K::kElementCountOverflow, 0},
      {K::kByteSizeOverflow, 0},
      {K::kRowNotBlockMultiple, 1},
      {K::kUnknownTypeId, 1},
      {K::kElementTotalOverflow, 2},
      {K::kRemovedTypeId, 1},
      {K::kDuplicateTensorName, 1},
      {K::kEmptyTensorName, 1},
      {K::kLongTensorName, 2},
      {K::kMisalignedOffset, 1},
      {K::kOffsetPastEof, 1},
      {K::kDataPastEof},
  };
  const std::vector<Defect> repaired = {
      {K::kSharedData, 1}, {K::kOverlap, 1}, {K::kGap, 1}, {K::kReorder, 0}};
  TempDir dir;
  for (const Defect& d : refused) {
    SCOPED_TRACE(static_cast<int>(d.kind));
    const std::string in = testing::write_bytes(dir.file("bad.gguf"), base().defect(d).build());
    const std::string out = dir.file("out.gguf");
    const auto r = splice_cli({in, "--set", "general.name:str=x", "-o", out});
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_TRUE(r.err.starts_with("gguf-splice: error: " + in + ": ")) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(fs::exists(out));
    EXPECT_EQ(dir.entries(), std::vector<std::string>{"bad.gguf"});
  }
  for (const Defect& d : repaired) {
    SCOPED_TRACE(static_cast<int>(d.kind));
    const std::string in = testing::write_bytes(dir.file("odd.gguf"), base().defect(d).build());
    const std::string out = dir.file("fixed.gguf");
    const auto r = splice_cli({in, "--set", "general.name:str=x", "-o", out, "--force", "-q"});
    EXPECT_EQ(r.code, 0) << r.err;
    // Shared and overlapping data are worth a warning; a gap or another order is only a layout.
    if (d.kind == K::kSharedData || d.kind == K::kOverlap) {
      EXPECT_NE(r.err.find("warning: '" + in + "': tensor '"), std::string::npos) << r.err;
    } else {
      EXPECT_EQ(r.err, "");
    }
    if (testing::GgmlRef::get().available()) {
      EXPECT_TRUE(testing::GgmlRef::get().gguf_accepts(out, true));
    }
  }
}

}  // namespace
}  // namespace gguf
