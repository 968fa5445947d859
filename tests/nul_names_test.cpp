// Keys and tensor names that differ only after a NUL byte ("w\0a", "w\0b"): our reader keeps them
// apart, ggml reads them up to the NUL and so as one. Every writer path refuses such an output
// naming both, --check reports them, and ggml's reader is shown to refuse what we refuse.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "cli_run.h"
#include "ggml_ref.h"
#include "gguf/format/file.h"
#include "gguf/format/metadata.h"
#include "gguf/format/model.h"
#include "gguf/ops/check.h"
#include "gguf/write/plan.h"
#include "gguf/write/writer.h"
#include "gguf_builder.h"

namespace gguf {
namespace {

using testing::GgufBuilder;
using testing::run_cli;
using testing::TempDir;

const std::string kAttnQ = "blk.0.attn_q.weight";
const std::string kWa("w\0a", 3), kWb("w\0b", 3), kKa("k\0a", 3), kKb("k\0b", 3);

const std::string kTensorWhy =
    "ggml reads names up to a NUL byte: this one and tensor 'w\\x00a' both read as 'w', and its "
    "reader refuses two tensors of one name";
const std::string kKeyWhy =
    "ggml reads keys up to a NUL byte: this one and key 'k\\x00a' both read as 'k', and its "
    "lookups by name find only the first";
const std::string kTensorMessage = "tensor 'w\\x00b': " + kTensorWhy;
const std::string kKeyMessage = "key 'k\\x00b': " + kKeyWhy;

// A file our reader accepts: two tensors (or keys, with keys) that ggml reads as one name, and
// a tensor 'blk.0.attn_q.weight' a donor can replace.
GgufBuilder twins(bool keys) {
  GgufBuilder b;
  b.string("general.architecture", "llama");
  if (keys) {
    b.u32(kKa, 1).u32(kKb, 2);
    b.tensor("w", 0, {32});
  } else {
    b.tensor(kWa, 0, {32}).tensor(kWb, 0, {32});
  }
  b.tensor("blk.0.attn_q.weight", 0, {32, 2});
  return b;
}

std::string error_of(const auto& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(nul_names, the_reader_accepts_both_and_keeps_them_apart) {
  const auto f = GgufFile::parse(memory_source(twins(false).build(), "mem.gguf"));
  ASSERT_EQ(f->tensors().size(), 3u);
  EXPECT_EQ(f->tensors()[0].name, kWa);
  EXPECT_EQ(f->tensors()[1].name, kWb);
  EXPECT_EQ(as_ggml_reads(kWb), "w");
  EXPECT_EQ(as_ggml_reads("w"), "w");
}

// A plan of f32 [32] tensors named names (zeros) with metadata keys (u32 values).
Plan plan_of(const std::vector<std::string>& keys, const std::vector<std::string>& names) {
  Plan p;
  p.metadata.set("general.architecture", Value::string("llama"));
  for (const auto& k : keys) p.metadata.set(k, Value::u32(1));
  const auto zeros = std::make_shared<const std::vector<uint8_t>>(128, 0);
  for (const auto& n : names) p.tensors.push_back({n, 0, {32}, 128, MemoryBytes{zeros}});
  return p;
}

TEST(nul_names, the_writer_refuses_tensors_ggml_reads_as_one) {
  TempDir dir;
  const Plan plan = plan_of({}, {kWa, kWb});
  EXPECT_EQ(error_of([&] { write_plan(plan, dir.file("out.gguf"), {}); }),
            dir.file("out.gguf") + ": " + kTensorMessage);
  EXPECT_EQ(error_of([&] { serialize_header(plan.metadata, plan.version, plan.tensors); }),
            kTensorMessage);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{});
  // A name without a NUL byte is read as itself: it collides with one that reads like it.
  EXPECT_EQ(
      error_of([&] {
        serialize_header(plan_of({}, {"w", kWb}).metadata, 3, plan_of({}, {"w", kWb}).tensors);
      }),
      "tensor 'w\\x00b': ggml reads names up to a NUL byte: this one and tensor 'w' both "
      "read as 'w', and its reader refuses two tensors of one name");
  // One name with a NUL byte alone is ggml's to read (as 'w'): --check reports it, the writer
  // takes it, and so does ggml (ggml_refuses_the_tensors_and_shadows_the_second_key).
  EXPECT_NO_THROW(write_plan(plan_of({}, {kWa, "x"}), dir.file("one.gguf"), {}));
}

TEST(nul_names, the_writer_refuses_keys_ggml_reads_as_one) {
  TempDir dir;
  const Plan plan = plan_of({kKa, kKb}, {"w"});
  EXPECT_EQ(error_of([&] { write_plan(plan, dir.file("out.gguf"), {}); }),
            dir.file("out.gguf") + ": " + kKeyMessage);
  // A dry run without an output path names no file.
  EXPECT_EQ(error_of([&] { check_plan(plan, "", {}); }), kKeyMessage);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{});
}

TEST(nul_names, check_reports_both) {
  for (const bool keys : {false, true}) {
    SCOPED_TRACE(keys);
    const GgufBuilder b = twins(keys);
    const Model m = Model::from_files({GgufFile::parse(memory_source(b.build(), "mem.gguf"))});
    CheckOptions o;
    o.scan_data = false;
    std::vector<std::string> got;
    for (const Problem& p : check_model(m, o))
      if (p.message.starts_with("ggml reads")) got.push_back(format_problem(p));
    const auto& l = b.layout();
    const uint64_t at = keys ? l.kv_offsets[2] : l.tensor_info_offsets[1];
    EXPECT_EQ(got, std::vector<std::string>{fmt::format("mem.gguf: {}: at byte {}: {}",
                                                        keys ? "key 'k\\x00b'" : "tensor 'w\\x00b'",
                                                        at, keys ? kKeyWhy : kTensorWhy)});
  }
}

TEST(nul_names, requant_and_splice_refuse_and_leave_nothing) {
  TempDir dir;
  const std::string donor = dir.file("donor.gguf");
  GgufBuilder d;
  d.string("general.architecture", "llama").tensor("blk.0.attn_q.weight", 0, {32, 2});
  d.write_file(donor);
  for (const bool keys : {false, true}) {
    SCOPED_TRACE(keys);
    const std::string in = dir.file(keys ? "keys.gguf" : "names.gguf");
    twins(keys).write_file(in);
    const std::string msg = keys ? kKeyMessage : kTensorMessage;
    const std::string out = dir.file("out.gguf");
    auto r = run_cli("gguf-requant", {in, "-o", out, "--type", "f16"});
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err, "gguf-requant: error: " + out + ": " + msg + "\n");
    r = run_cli("gguf-requant", {in, "--dry-run", "--type", "f16"});
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(r.err, "gguf-requant: error: " + msg + "\n");
    r = run_cli("gguf-splice", {in, "--donor", donor, "--match", kAttnQ, "-o", out});
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err, "gguf-splice: error: " + msg + "\n");  // refused while planning
    r = run_cli("gguf-splice", {in, "--donor", donor, "--match", kAttnQ, "--dry-run"});
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(r.err, "gguf-splice: error: " + msg + "\n");
  }
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"donor.gguf", "keys.gguf", "names.gguf"}));
}

// ggml is the judge: it refuses the tensors we refuse; it takes the keys, but its lookup finds
// the first for either name, so the second key cannot be read by name at all.
TEST(nul_names, ggml_refuses_the_tensors_and_shadows_the_second_key) {
  GGUF_REQUIRE_GGML();
  const auto& g = testing::GgmlRef::get();
  TempDir dir;
  twins(false).write_file(dir.file("names.gguf"));
  twins(true).write_file(dir.file("keys.gguf"));
  EXPECT_FALSE(g.gguf_accepts(dir.file("names.gguf")));
  ASSERT_TRUE(g.gguf_accepts(dir.file("keys.gguf")));

  const auto find_key =
      reinterpret_cast<int64_t (*)(const void*, const char*)>(g.symbol("gguf_find_key"));
  ASSERT_NE(find_key, nullptr);
  const testing::GgmlGguf ggml(dir.file("keys.gguf"));
  void* ctx = ggml.ctx();
  ASSERT_NE(ctx, nullptr);
  EXPECT_EQ(find_key(ctx, kKa.c_str()), 1);  // key 0 is general.architecture
  EXPECT_EQ(find_key(ctx, kKb.c_str()), 1);
}

}  // namespace
}  // namespace gguf
