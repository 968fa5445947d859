// gguf-requant --target-size / --target-bpw: golden runs of the binary and every refusal.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_run.h"
#include "gguf/format/file.h"
#include "gguf/write/writer.h"
#include "requant_fixture.h"

namespace gguf {
namespace {

using testing::run_cli;
using testing::TempDir;

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(planner_cli, refusals_are_usage_errors_with_exact_messages) {
  TempDir dir;
  const std::string in = testing::write_f16_model(dir), out = dir.file("o.gguf");
  const auto expect = [&](std::vector<std::string> args, const std::string& message) {
    args.insert(args.begin(), {in, "-o", out});
    const auto r = run_cli("gguf-requant", args);
    EXPECT_EQ(r.code, 2) << message;
    EXPECT_EQ(r.err, "gguf-requant: error: " + message +
                         "\nTry 'gguf-requant --help' for more information.\n");
    EXPECT_EQ(r.out, "");
  };
  expect({"--target-size", "1m", "--target-bpw", "3"},
         "--target-size and --target-bpw exclude each other");
  expect({"--target-size", "1m", "--type", "q4_K"},
         "--type and --target-size exclude each other: the plan chooses the types (pin tensors "
         "with --tensor-type or --role-type)");
  expect({"--target-bpw", "3", "--exact"},
         "--exact and --target-bpw exclude each other (the plan is one file)");
  expect({"--target-size", "1m", "--split-max-size", "1m"},
         "--split-max-size and --target-size exclude each other (the plan is one file)");
  expect({"--type", "q4_K", "--candidates", "q2_K"},
         "--candidates belongs to a planned mix: give a budget, --target-size or --target-bpw");
  expect({"--type", "q4_K", "--donor", in},
         "--donor belongs to a planned mix: give a budget, --target-size or --target-bpw");
  expect({"--type", "q4_K", "--untie-gate-up"},
         "--untie-gate-up belongs to a planned mix: give a budget, --target-size or "
         "--target-bpw");
  expect({"--type", "q4_K", "--plan-out", dir.file("p.txt")},
         "--plan-out belongs to a planned mix: give a budget, --target-size or --target-bpw");
  expect({"--target-size", "4gb"},
         "invalid --target-size value '4gb': unknown unit 'gb' (units: b, k or kib, m or mib, g "
         "or gib, t or tib (any case; powers of 1024))");
  expect({"--target-bpw", "-2"},
         "invalid --target-bpw value '-2': expected bits per weight, a number greater than 0 "
         "(e.g. 2.5)");
  expect({"--target-bpw", "3", "--candidates", "q4_K,Q4_K_M"},
         "--candidates: 'Q4_K_M' is a llama-quantize preset (a mix of types), not a ggml type: "
         "use --candidates q4_K");
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(planner_cli, a_budget_out_of_reach_names_the_range) {
  TempDir dir;
  const std::string in = testing::write_f16_model(dir), out = dir.file("o.gguf");
  const auto r = run_cli("gguf-requant",
                         {in, "-o", out, "--target-size", "1k", "--candidates", "q2_K,q8_0", "-q"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "gguf-requant: error: " + in +
                       ": --target-size 1024 bytes (0.00 MiB) is outside the reachable range: "
                       "1187712 to 3774592 bytes (1.13 MiB to 3.60 MiB) with these candidates\n");
  const auto b = run_cli("gguf-requant",
                         {in, "-o", out, "--target-bpw", "9", "--candidates", "q2_K,q8_0", "-q"});
  EXPECT_EQ(b.code, 1);
  EXPECT_EQ(b.err, "gguf-requant: error: " + in +
                       ": --target-bpw 9 is outside the reachable range: 2.6699 to 8.5359 bits "
                       "per weight (1177424 to 3764304 bytes of tensor data) with these "
                       "candidates\n");
  EXPECT_FALSE(std::filesystem::exists(out));
}

// A tensor no candidate can take is named with the reason per candidate: blocks that do not
// divide its rows, or types that need an importance matrix entry it does not have (those fit
// the rows: "no type fits its rows" would send the user after the wrong cause).
TEST(planner_cli, a_tensor_no_candidate_can_take_says_why) {
  TempDir dir;
  const std::string in = testing::write_f16_model(dir), odd = testing::write_odd_row_model(dir);
  auto r = run_cli("gguf-requant",
                   {in, "--dry-run", "--target-bpw", "3", "--candidates", "iq2_xxs,iq1_s", "-q"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "gguf-requant: error: " + in +
                       ": tensor 'token_embd.weight': no candidate type can encode it "
                       "(candidates: iq2_xxs,iq1_s): iq2_xxs,iq1_s need an importance matrix "
                       "entry for it (no --imatrix)\n");
  r = run_cli("gguf-requant",
              {odd, "--dry-run", "--target-bpw", "3", "--candidates", "q4_K,iq2_xxs", "-q"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "gguf-requant: error: " + odd +
                       ": tensor 'blk.0.attn_q.weight': no candidate type can encode it "
                       "(candidates: q4_K,iq2_xxs): q4_K,iq2_xxs do not divide its rows of 96\n");
}

// A candidate's encoder that refuses a sampled row (a NaN: ggml's iq2_s search aborts on it)
// is named as the write path names it: the byte and the row in the input, and the candidate.
TEST(planner_cli, a_row_a_candidate_refuses_is_named_with_its_byte) {
  TempDir dir;
  Plan p;
  p.metadata.set("general.architecture", Value::string("llama"));
  std::vector<float> v(256 * 4);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(static_cast<float>(i));
  v[256 + 3] = std::nanf("");
  auto data = std::make_shared<std::vector<uint8_t>>(v.size() * 4);
  std::memcpy(data->data(), v.data(), data->size());
  p.tensors.push_back({"blk.0.attn_q.weight", 0, {256, 4}, data->size(), MemoryBytes{data}});
  const std::string in = write_plan(p, dir.file("nan.gguf"), {}).paths.front();
  const auto f = GgufFile::open(in);
  const uint64_t row1 = f->data_start(f->tensors()[0]) + 1024;
  const auto r = run_cli(
      "gguf-requant", {in, "--dry-run", "--target-bpw", "9", "--candidates", "iq2_s,q8_0", "-q"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, fmt::format("gguf-requant: error: {}: tensor 'blk.0.attn_q.weight': at byte "
                               "{}: row 1: measuring iq2_s: i-quant lattice search found no "
                               "neighbour (non-finite input?)\n",
                               in, row1));
}

TEST(planner_cli, plans_writes_the_recipe_and_the_file_of_the_predicted_size) {
  TempDir dir;
  const std::string in = testing::write_f16_model(dir), out = dir.file("o.gguf");
  const std::string recipe = dir.file("plan.txt");
  const auto r = run_cli(
      "gguf-requant", {in, "-o", out, "--target-size", "1.5m", "--candidates", "q2_K,q4_K,q8_0",
                       "--plan-out", recipe, "--json", "--tensor-type", "attn_kv=q8_0", "-j", "2"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto doc = nlohmann::json::parse(r.out);
  const uint64_t predicted = doc["plan"]["predicted_file_bytes"];
  EXPECT_EQ(std::filesystem::file_size(out), predicted);
  EXPECT_EQ(doc["bytes_after"], predicted);
  EXPECT_LE(predicted, uint64_t{3} << 19);
  EXPECT_EQ(doc["plan"]["budget"], uint64_t{3} << 19);
  EXPECT_GE(doc["plan"]["predicted_error"].get<double>(), doc["plan"]["lp_bound"].get<double>());
  for (const auto& t : doc["tensors"]) {
    const std::string name = t["name"];
    if (name.find("attn_kv") != std::string::npos && !t["predicted_error"].is_null()) {
      EXPECT_EQ(t["type_after"], "q8_0");
      EXPECT_EQ(t["decided_by"], "--tensor-type 'attn_kv=q8_0'");
    }
  }
  // The recipe: a PATTERN=TYPE rule for every re-encodable tensor; it reproduces the types.
  const std::string text = read_text(recipe);
  EXPECT_NE(text.find("=q2_K\n"), std::string::npos) << text;
  EXPECT_EQ(text.find(' '), std::string::npos);
  // A dry run plans the same and writes no GGUF; with --plan-out it writes the same recipe, and
  // says so.
  const std::string dry_recipe = dir.file("dry-plan.txt");
  const auto d =
      run_cli("gguf-requant", {in, "-o", dir.file("d.gguf"), "--target-size", "1.5m",
                               "--candidates", "q2_K,q4_K,q8_0", "--dry-run", "--tensor-type",
                               "attn_kv=q8_0", "--plan-out", dry_recipe});
  ASSERT_EQ(d.code, 0) << d.err;
  EXPECT_NE(d.out.find(fmt::format("predicted: {} bytes", predicted)), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("dry run: no GGUF written\nwrote recipe '" + dry_recipe + "'\n"),
            std::string::npos)
      << d.out;
  EXPECT_FALSE(std::filesystem::exists(dir.file("d.gguf")));
  EXPECT_EQ(read_text(dry_recipe), text);
}

// The recipe and the model cannot share a file: whichever came second would replace the other.
// Refused before anything is read or written, however the two paths are spelled.
TEST(planner_cli, a_plan_out_that_is_the_output_is_a_usage_error) {
  TempDir dir;
  const std::string in = testing::write_f16_model(dir), out = dir.file("o.gguf");
  std::filesystem::create_directory(dir.file("sub"));
  std::filesystem::create_directory_symlink(dir.path(), dir.file("link"));
  for (const std::string& plan :
       {out, dir.file("sub/../o.gguf"), dir.file("./o.gguf"), dir.file("link/o.gguf")}) {
    SCOPED_TRACE(plan);
    const auto r = run_cli("gguf-requant", {in, "-o", out, "--target-size", "1.5m", "--plan-out",
                                            plan, "--candidates", "q2_K,q8_0"});
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.err, "gguf-requant: error: --plan-out and -o name the same file ('" + plan +
                         "'): give the recipe a path of its own\nTry 'gguf-requant --help' for "
                         "more information.\n");
    EXPECT_EQ(r.out, "");
    EXPECT_FALSE(std::filesystem::exists(out));
  }
  // Two names of one existing file (a hard link): with --force either would replace it.
  { std::ofstream(out) << "keep"; }
  std::filesystem::create_hard_link(out, dir.file("hard.txt"));
  const auto h =
      run_cli("gguf-requant", {in, "-o", out, "--target-size", "1.5m", "--plan-out",
                               dir.file("hard.txt"), "--force", "--candidates", "q2_K,q8_0"});
  EXPECT_EQ(h.code, 2);
  EXPECT_NE(h.err.find("--plan-out and -o name the same file"), std::string::npos) << h.err;
  EXPECT_EQ(read_text(out), "keep");
}

// The recipe is written last, after the model is written and verified: a write that fails
// leaves neither (here the output exists, without --force, which only the write finds out).
TEST(planner_cli, a_failed_write_leaves_no_recipe) {
  TempDir dir;
  const std::string in = testing::write_f16_model(dir), out = dir.file("o.gguf");
  const std::string recipe = dir.file("plan.txt");
  { std::ofstream(out) << "keep"; }
  const auto before = dir.entries();
  const auto r = run_cli("gguf-requant", {in, "-o", out, "--target-size", "1.5m", "--plan-out",
                                          recipe, "--candidates", "q2_K,q8_0", "-q"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "gguf-requant: error: " + out +
                       ": output file exists; use --force to replace it\nTry 'gguf-requant "
                       "--help' for more information.\n");
  EXPECT_EQ(dir.entries(), before);  // no recipe, no temporary file
  EXPECT_EQ(read_text(out), "keep");
  // With --force, both appear, the recipe naming the types the model holds.
  const auto f = run_cli("gguf-requant", {in, "-o", out, "--target-size", "1.5m", "--plan-out",
                                          recipe, "--candidates", "q2_K,q8_0", "-q", "--force"});
  ASSERT_EQ(f.code, 0) << f.err;
  EXPECT_NE(read_text(recipe).find("=q2_K\n"), std::string::npos);
  EXPECT_NE(read_text(out), "keep");
}

}  // namespace
}  // namespace gguf
