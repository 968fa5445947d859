// gguf-inspect --imatrix: coverage of a model's quantizable tensors by an importance matrix in
// both formats (entry present, length, experts never routed), as a report and through the CLI.
#include "gguf/ops/imatrix_coverage.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "gguf/write/plan.h"
#include "gguf/write/writer.h"

namespace gguf {
namespace {

using testing::run_cli;
using testing::TempDir;

PlanTensor zeros(std::string name, std::vector<int64_t> shape) {
  PlanTensor t;
  t.name = std::move(name);
  t.type_id = static_cast<uint32_t>(GgmlType::F32);
  t.shape = std::move(shape);
  t.bytes = expected_bytes(t);
  t.source = MemoryBytes{std::make_shared<std::vector<uint8_t>>(t.bytes)};
  return t;
}

PlanTensor floats(std::string name, std::vector<int64_t> shape, std::vector<float> v) {
  PlanTensor t = zeros(std::move(name), std::move(shape));
  auto bytes = std::make_shared<std::vector<uint8_t>>(v.size() * 4);
  std::memcpy(bytes->data(), v.data(), bytes->size());
  t.source = MemoryBytes{bytes};
  return t;
}

// A llama-shaped model: attention, a norm (not quantizable), 4 routed experts, an output.
std::string write_model(const TempDir& dir) {
  Plan p;
  p.metadata.set("general.architecture", Value::string("llama"));
  p.tensors.push_back(zeros("blk.0.attn_q.weight", {64, 64}));
  p.tensors.push_back(zeros("blk.0.attn_norm.weight", {64}));
  p.tensors.push_back(zeros("blk.0.ffn_up_exps.weight", {64, 32, 4}));
  p.tensors.push_back(zeros("blk.0.ffn_down_exps.weight", {32, 64, 4}));
  p.tensors.push_back(zeros("output.weight", {64, 100}));
  return write_plan(p, dir.file("model.gguf"), {}).paths.front();
}

// A GGUF imatrix: attn_q dense, ffn_up one matrix per expert (experts 1 and 3 never routed),
// ffn_down cut for 48 columns (a misfit), output missing, and an entry for no tensor.
std::string write_gguf_imatrix(const TempDir& dir, bool misfit = true) {
  Plan p;
  p.metadata.set("general.type", Value::string("imatrix"));
  p.metadata.set("imatrix.datasets", Value::string_array({"wiki.txt"}));
  p.metadata.set("imatrix.chunk_count", Value::u32(10));
  const auto entry = [&](const std::string& name, int64_t ne0, std::vector<float> counts) {
    const auto n = static_cast<int64_t>(counts.size());
    p.tensors.push_back(floats(name + ".in_sum2", {ne0, n},
                               std::vector<float>(static_cast<size_t>(ne0 * n), 2.0f)));
    p.tensors.push_back(floats(name + ".counts", {1, n}, counts));
  };
  entry("blk.0.attn_q.weight", 64, {10});
  entry("blk.0.ffn_up_exps.weight", 64, {5, 0, 3, 0});
  entry("blk.0.ffn_down_exps.weight", misfit ? 48 : 32, {1, 1, 1, 1});
  entry("blk.9.attn_k.weight", 64, {1});
  return write_plan(p, dir.file(misfit ? "imatrix.gguf" : "fit.gguf"), {}).paths.front();
}

// A legacy .dat: values stored as sums over ncall calls, no per-expert counts.
std::string write_legacy_imatrix(const TempDir& dir) {
  const std::string path = dir.file("imatrix.dat");
  std::ofstream f(path, std::ios::binary);
  const auto i32 = [&](int32_t v) { f.write(reinterpret_cast<const char*>(&v), 4); };
  const std::vector<std::pair<std::string, size_t>> entries = {
      {"blk.0.attn_q.weight", 64}, {"blk.0.ffn_up_exps.weight", 4 * 64}};
  i32(static_cast<int32_t>(entries.size()));
  for (const auto& [name, n] : entries) {
    i32(static_cast<int32_t>(name.size()));
    f.write(name.data(), static_cast<std::streamsize>(name.size()));
    i32(3);
    i32(static_cast<int32_t>(n));
    for (size_t i = 0; i < n; ++i) {
      const float v = 1.5f;
      f.write(reinterpret_cast<const char*>(&v), 4);
    }
  }
  return path;
}

const CoverageRow& row(const CoverageReport& r, const std::string& name) {
  for (const auto& x : r.rows)
    if (x.name == name) return x;
  throw std::runtime_error("no row " + name);
}

TEST(imatrix_coverage, gguf_matrix_entries_lengths_and_unrouted_experts) {
  TempDir dir;
  const Model m = Model::open(write_model(dir));
  const CoverageReport r = imatrix_coverage(m, Imatrix::load(write_gguf_imatrix(dir)));
  ASSERT_EQ(r.rows.size(), 4u);  // the norm is not quantizable
  EXPECT_FALSE(r.legacy);
  EXPECT_EQ(r.datasets, std::vector<std::string>{"wiki.txt"});
  EXPECT_EQ(r.entries, 4u);
  const auto& q = row(r, "blk.0.attn_q.weight");
  EXPECT_EQ(q.coverage, Coverage::kCovered);
  EXPECT_EQ(q.routing, Routing::kNotExperts);
  const auto& up = row(r, "blk.0.ffn_up_exps.weight");
  EXPECT_EQ(up.coverage, Coverage::kCovered);
  EXPECT_EQ(up.matrices, 4);
  EXPECT_EQ(up.entry_matrices, 4);
  EXPECT_EQ(up.routing, Routing::kKnown);
  EXPECT_EQ(up.unrouted, (std::vector<int64_t>{1, 3}));
  const auto& down = row(r, "blk.0.ffn_down_exps.weight");
  EXPECT_EQ(down.coverage, Coverage::kMisfit);
  EXPECT_EQ(down.routing, Routing::kUnknown);
  EXPECT_EQ(down.problem,
            "importance entry has 192 values; expected 32 (columns) or 128 (4 experts x 32 "
            "columns)");
  EXPECT_EQ(row(r, "output.weight").coverage, Coverage::kMissing);
  EXPECT_EQ(r.unused, std::vector<std::string>{"blk.9.attn_k.weight"});
  EXPECT_EQ(r.total.tensors, 4u);
  EXPECT_EQ(r.total.covered, 2u);
  EXPECT_EQ(r.total.missing, 1u);
  EXPECT_EQ(r.total.misfit, 1u);
  EXPECT_EQ(r.total.experts, 4u);
  EXPECT_EQ(r.total.unrouted, 2u);
  EXPECT_EQ(r.total.unknown, 1u);
  ASSERT_EQ(r.by_role.size(), 4u);
  EXPECT_EQ(r.by_role[0].key, "routed-up");
  ASSERT_EQ(r.by_layer.size(), 2u);
  EXPECT_EQ(r.by_layer[0].key, "0");
  EXPECT_EQ(r.by_layer[0].tensors, 3u);
  EXPECT_EQ(r.by_layer[1].key, "-");
}

TEST(imatrix_coverage, legacy_dat_has_no_per_expert_counts) {
  TempDir dir;
  const Model m = Model::open(write_model(dir));
  const CoverageReport r = imatrix_coverage(m, Imatrix::load(write_legacy_imatrix(dir)));
  EXPECT_TRUE(r.legacy);
  const auto& up = row(r, "blk.0.ffn_up_exps.weight");
  EXPECT_EQ(up.coverage, Coverage::kCovered);
  EXPECT_EQ(up.routing, Routing::kUnknown);
  EXPECT_EQ(up.entry_values, 256u);
  EXPECT_EQ(row(r, "blk.0.ffn_down_exps.weight").coverage, Coverage::kMissing);
  EXPECT_EQ(r.total.unknown, 1u);
  EXPECT_EQ(r.total.experts, 0u);
}

TEST(imatrix_coverage, cli_reports_and_exits_1_on_a_misfit) {
  TempDir dir;
  const std::string model = write_model(dir), im = write_gguf_imatrix(dir);
  auto r = run_cli("gguf-inspect", {"--imatrix", im, model});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_TRUE(r.out.starts_with("imatrix: '" + im +
                                "' (GGUF; 4 entries, 10 chunks; dataset wiki.txt)\nmodel:   '" +
                                model + "'\n\n"))
      << r.out;
  const std::string table =
      "tensor                      type  role         layer  entry    values   needs  experts "
      "never routed\n"
      "blk.0.attn_q.weight         f32   attn-proj        0  covered      64      64  -\n"
      "blk.0.ffn_up_exps.weight    f32   routed-up        0  covered  4 x 64  4 x 64  2 of 4 (1 "
      "3)\n"
      "blk.0.ffn_down_exps.weight  f32   routed-down      0  misfit   4 x 48  4 x 32  unknown\n"
      "output.weight               f32   output           -  missing       -      64  -\n";
  EXPECT_NE(r.out.find(table), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("entries that do not fit their tensor:\n  blk.0.ffn_down_exps.weight: "
                       "importance entry has 192 values; expected 32 (columns) or 128 (4 experts "
                       "x 32 columns)\n"),
            std::string::npos)
      << r.out;
  EXPECT_TRUE(r.out.ends_with(
      "coverage: 2 of 4 quantizable tensors covered, 1 missing, 1 misfit\n"
      "experts never routed: 2 of 4, unknown in 1 tensor (entries of one vector for all experts "
      "have no per-expert counts)\n"
      "entries naming no tensor of the model: 1 ('blk.9.attn_k.weight')\n"))
      << r.out;
  // Entries that fit: exit 0 (a missing entry is reported, not a failure).
  r = run_cli("gguf-inspect", {"--imatrix", write_gguf_imatrix(dir, false), model, "--json"});
  EXPECT_EQ(r.code, 0) << r.err;
  const auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["fits"], true);
  EXPECT_EQ(doc["imatrix"]["format"], "gguf");
  EXPECT_EQ(doc["summary"]["covered"], 3);
  EXPECT_EQ(doc["tensors"][1]["experts_never_routed"], nlohmann::json::array({1, 3}));
  EXPECT_EQ(doc["tensors"][1]["routing"], "known");
  EXPECT_EQ(doc["tensors"][3]["coverage"], "missing");
  // The legacy format says "unknown".
  r = run_cli("gguf-inspect", {"--imatrix", write_legacy_imatrix(dir), model});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("experts never routed: unknown in 1 tensor (a legacy .dat has no "
                       "per-expert counts)\n"),
            std::string::npos)
      << r.out;
  // Selectors narrow the tensors; other views do not combine with it.
  r = run_cli("gguf-inspect", {"--imatrix", im, model, "--role", "output", "--json"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["tensors"].size(), 1u);
  r = run_cli("gguf-inspect", {"--imatrix", im, model, "-t"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gguf-inspect: error: --imatrix prints a coverage report alone (no -m, -t, --full, "
            "--check, --hashes, --map)\nTry 'gguf-inspect --help' for more information.\n");
  // --map drew nothing with --imatrix (exit 0, no SVG): it is refused like the other views,
  // before the map path is looked at, and nothing is written.
  r = run_cli("gguf-inspect", {"--imatrix", im, model, "--map", dir.file("m.svg")});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gguf-inspect: error: --imatrix prints a coverage report alone (no -m, -t, --full, "
            "--check, --hashes, --map)\nTry 'gguf-inspect --help' for more information.\n");
  EXPECT_FALSE(std::filesystem::exists(dir.file("m.svg")));
}

}  // namespace
}  // namespace gguf
