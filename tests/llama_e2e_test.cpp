// End to end against real llama.cpp: models written by the library and by the tools (requant,
// splice, split output) must load in llama.cpp's own loader and compute what they should.
// The model is a small Mixtral-style MoE (3-D routed-expert tensors) that llama.cpp runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "cli_run.h"
#include "gguf/base/fp16.h"
#include "gguf/format/model.h"
#include "gguf/format/types.h"
#include "gguf/inputs/safetensors.h"
#include "gguf/ops/check.h"
#include "gguf/ops/requant.h"
#include "gguf/ops/synth.h"
#include "gguf/write/plan.h"
#include "gguf/write/writer.h"
#include "llama_ref.h"

namespace gguf {
namespace {

using testing::LlamaRef;
using testing::run_cli;
using testing::TempDir;

const std::vector<int> kPrompt = {1, 72, 108, 300, 411, 108, 500, 7};

void write_model(const LlamaMoeSpec& spec, const std::string& path) {
  write_plan(synth_llama_moe_plan(spec), path, {});
}

LlamaRef::Result run_model(const std::string& path) {
  auto r = LlamaRef::get().run(path, kPrompt);
  EXPECT_TRUE(r.loaded) << path << " did not load or run in llama.cpp:\n" << r.log;
  return r;
}

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) ab += a[i] * b[i], aa += a[i] * a[i], bb += b[i] * b[i];
  return ab / std::sqrt(aa * bb);
}

void expect_finite_and_varied(const std::vector<float>& logits, int n_vocab) {
  ASSERT_EQ(logits.size(), static_cast<size_t>(n_vocab));
  float lo = logits[0], hi = logits[0];
  for (float v : logits) {
    ASSERT_TRUE(std::isfinite(v));
    lo = std::min(lo, v), hi = std::max(hi, v);
  }
  EXPECT_GT(hi - lo, 0.1f) << "logits are flat: the model computes nothing";
}

TEST(LlamaE2E, SyntheticModelRunsInLlamaCpp) {
  GGUF_REQUIRE_LLAMA();
  TempDir dir;
  LlamaMoeSpec spec;
  write_model(spec, dir.file("f32.gguf"));
  const auto r = run_model(dir.file("f32.gguf"));
  expect_finite_and_varied(r.logits, spec.vocab);
  // The same file twice: the CPU backend is deterministic, so bitwise comparisons below hold.
  EXPECT_EQ(run_model(dir.file("f32.gguf")).logits, r.logits);
}

// The example generator's Mixtral-style model (what a user makes to try the tools on a file
// llama.cpp runs), requantized by the tool, loads and computes.
TEST(LlamaE2E, ExampleGeneratorsLlamaModelRuns) {
  GGUF_REQUIRE_LLAMA();
  TempDir dir;
  const auto gen =
      run_cli("../examples/make_tiny_moe",
              {"--arch", "llama", "--recipe", "f16", "--layers", "3", "-o", dir.file("f16.gguf")});
  ASSERT_EQ(gen.code, 0) << gen.err;
  const auto cli =
      run_cli("gguf-requant", {dir.file("f16.gguf"), "-o", dir.file("q4k.gguf"), "--type", "q4_K"});
  ASSERT_EQ(cli.code, 0) << cli.err;
  for (const char* f : {"f16.gguf", "q4k.gguf"}) {
    SCOPED_TRACE(f);
    expect_finite_and_varied(run_model(dir.file(f)).logits, LlamaMoeSpec().vocab);
  }
}

// gguf-requant's output of every encoder family (the i-quants that need no importance matrix
// included: with a matrix the direct build below would weigh differently) loads, computes exactly
// what a model built directly at that type from the same weights computes (the same bytes, so the
// same logits), and stays close to the f32 model, less so with fewer bits.
TEST(LlamaE2E, RequantOutputsRunAndStayClose) {
  GGUF_REQUIRE_LLAMA();
  TempDir dir;
  LlamaMoeSpec spec;
  write_model(spec, dir.file("f32.gguf"));
  const auto ref = run_model(dir.file("f32.gguf"));
  struct Case {
    GgmlType type;
    // Measured on this random network: f16 1.0, q8_0 0.9999, q4_K 0.986, iq4_xs 0.984,
    // iq3_s 0.95, q4_0 0.92, iq3_xxs 0.89, iq2_s 0.85, q2_K 0.73, iq1_m 0.51.
    double min_cosine;
  };
  for (const Case c :
       {Case{GgmlType::F16, 0.99999}, Case{GgmlType::BF16, 0.9995}, Case{GgmlType::Q8_0, 0.9995},
        Case{GgmlType::Q6_K, 0.998}, Case{GgmlType::Q5_1, 0.99}, Case{GgmlType::Q4_K, 0.97},
        Case{GgmlType::Q4_0, 0.85}, Case{GgmlType::Q3_K, 0.85}, Case{GgmlType::Q2_K, 0.6},
        Case{GgmlType::IQ4_XS, 0.97}, Case{GgmlType::IQ4_NL, 0.97}, Case{GgmlType::IQ3_S, 0.9},
        Case{GgmlType::IQ3_XXS, 0.8}, Case{GgmlType::IQ2_S, 0.7}, Case{GgmlType::IQ1_M, 0.3}}) {
    const std::string name = type_name(static_cast<uint32_t>(c.type));
    SCOPED_TRACE(name);
    const std::string out = dir.file(name + ".gguf");
    const auto cli = run_cli("gguf-requant", {dir.file("f32.gguf"), "-o", out, "--type", name});
    ASSERT_EQ(cli.code, 0) << cli.err;
    const auto r = run_model(out);
    expect_finite_and_varied(r.logits, spec.vocab);
    LlamaMoeSpec direct = spec;
    direct.weights = c.type;
    write_model(direct, dir.file("direct-" + name + ".gguf"));
    EXPECT_EQ(r.logits, run_model(dir.file("direct-" + name + ".gguf")).logits);
    const double cos = cosine(r.logits, ref.logits);
    EXPECT_GE(cos, c.min_cosine);
    EXPECT_LT(cos, 1.0);
  }
}

// The reference recipe on the MoE: routed gate/up at iq2_xxs (importance from the weights'
// column energy, as no imatrix is given), routed down at q2_K, everything else at q8_0, by
// three gguf-requant runs and by one with per-tensor types; llama.cpp runs the result, and it
// is still the same network.
TEST(LlamaE2E, Ds4RecipeRuns) {
  GGUF_REQUIRE_LLAMA();
  TempDir dir;
  LlamaMoeSpec spec;
  write_model(spec, dir.file("f32.gguf"));
  const auto ref = run_model(dir.file("f32.gguf"));
  const std::vector<std::vector<std::string>> steps = {
      {"f32.gguf", "a.gguf", "--type", "iq2_xxs", "--role", "routed-gate", "--role", "routed-up"},
      {"a.gguf", "b.gguf", "--type", "q2_K", "--role", "routed-down"},
      {"b.gguf", "ds4.gguf", "--type", "q8_0", "--role", "attn-proj", "--role", "embedding",
       "--role", "output"}};
  for (const auto& step : steps) {
    std::vector<std::string> args = {dir.file(step[0]), "-o", dir.file(step[1])};
    args.insert(args.end(), step.begin() + 2, step.end());
    const auto cli = run_cli("gguf-requant", args);
    ASSERT_EQ(cli.code, 0) << cli.err;
  }
  const auto r = run_model(dir.file("ds4.gguf"));
  expect_finite_and_varied(r.logits, spec.vocab);
  const double cos = cosine(r.logits, ref.logits);
  EXPECT_GT(cos, 0.8) << "measured 0.936 on this random network";
  EXPECT_LT(cos, 0.99);
  // The same recipe in one run, spelt as for llama-quantize: the same file, the same logits.
  const auto one =
      run_cli("gguf-requant", {dir.file("f32.gguf"), "-o", dir.file("one.gguf"), "--tensor-type",
                               "ffn_(gate|up)_exps=IQ2_XXS", "--tensor-type", "ffn_down_exps=q2_k",
                               "--tensor-type", "attn_(q|k|v|output)=q8_0",
                               "--token-embedding-type", "q8_0", "--output-tensor-type", "q8_0"});
  ASSERT_EQ(one.code, 0) << one.err;
  EXPECT_EQ(run_cli("gguf-diff", {dir.file("ds4.gguf"), dir.file("one.gguf")}).code, 0);
  EXPECT_EQ(run_model(dir.file("one.gguf")).logits, r.logits);
}

// A model without output.weight computes its logits with the token embedding (tied
// embeddings): --output-tensor-type gives that table its type, as llama-quantize does, and
// llama.cpp computes what a model built with those types directly computes.
TEST(LlamaE2E, OutputTypeOnTiedEmbeddingsRuns) {
  GGUF_REQUIRE_LLAMA();
  TempDir dir;
  const auto write_tied = [](const LlamaMoeSpec& spec, const std::string& path) {
    Plan plan = synth_llama_moe_plan(spec);
    std::erase_if(plan.tensors, [](const PlanTensor& t) { return t.name == "output.weight"; });
    write_plan(plan, path, {});
  };
  LlamaMoeSpec spec;
  write_tied(spec, dir.file("f32.gguf"));
  const auto cli =
      run_cli("gguf-requant", {dir.file("f32.gguf"), "-o", dir.file("q.gguf"), "--type", "q4_0",
                               "--output-tensor-type", "q8_0", "--json"});
  ASSERT_EQ(cli.code, 0) << cli.err;
  size_t embeddings = 0;
  const auto report = nlohmann::json::parse(cli.out);  // outlives the loop
  for (const auto& t : report["tensors"]) {
    if (t["name"] == "token_embd.weight") {
      ++embeddings;
      EXPECT_EQ(t["type_after"], "q8_0");
    }
  }
  EXPECT_EQ(embeddings, 1u);
  const auto r = run_model(dir.file("q.gguf"));
  expect_finite_and_varied(r.logits, spec.vocab);
  LlamaMoeSpec direct = spec;
  direct.weights = GgmlType::Q4_0;
  direct.types["token_embd.weight"] = GgmlType::Q8_0;
  write_tied(direct, dir.file("direct.gguf"));
  EXPECT_EQ(r.logits, run_model(dir.file("direct.gguf")).logits);
}

// The recipe's splice: routed experts of the last layer taken byte for byte from a q8_0 donor
// into a q4_0 base give exactly the model one would have built with those types directly
// (same tensors, so llama.cpp computes bit-identical logits), and differ from both inputs.
TEST(LlamaE2E, SplicedRoutedExpertsEqualADirectBuild) {
  GGUF_REQUIRE_LLAMA();
  TempDir dir;
  LlamaMoeSpec base, donor, direct;
  base.weights = GgmlType::Q4_0;
  donor.weights = GgmlType::Q8_0;
  direct.weights = GgmlType::Q4_0;
  for (const char* kind : {"gate", "up", "down"})
    direct.types[std::string("blk.1.ffn_") + kind + "_exps.weight"] = GgmlType::Q8_0;
  write_model(base, dir.file("base.gguf"));
  write_model(donor, dir.file("donor.gguf"));
  write_model(direct, dir.file("direct.gguf"));
  const auto cli = run_cli("gguf-splice", {dir.file("base.gguf"), "--donor", dir.file("donor.gguf"),
                                           "--layers", "1", "-o", dir.file("mixed.gguf")});
  ASSERT_EQ(cli.code, 0) << cli.err;
  const auto mixed = run_model(dir.file("mixed.gguf"));
  expect_finite_and_varied(mixed.logits, base.vocab);
  EXPECT_EQ(mixed.logits, run_model(dir.file("direct.gguf")).logits);
  EXPECT_NE(mixed.logits, run_model(dir.file("base.gguf")).logits);
  EXPECT_NE(mixed.logits, run_model(dir.file("donor.gguf")).logits);
}

// An in-house 4-bit affine format (one f16 scale and min per 64 columns, as a quantizer would
// make them here: min and (max - min) / 15 per group) for every routed expert and attention
// projection of the model, published through gguf-requant's packed-affine import on top of
// the f32 model: llama.cpp runs the q4_1 file, gguf-diff --values finds every value equal to
// the f32 import of the same file (max |a - b| = 0), and the two compute nearly the same logits
// (q4_1 matmuls quantize activations, so not bit for bit).
TEST(LlamaE2E, PackedAffineImportRunsWithTheSameValues) {
  GGUF_REQUIRE_LLAMA();
  TempDir dir;
  LlamaMoeSpec spec;
  write_model(spec, dir.file("f32.gguf"));
  const Model base = Model::open(dir.file("f32.gguf"));
  std::vector<SafetensorsEntry> entries;
  nlohmann::json packed = nlohmann::json::object();
  constexpr uint64_t kGroup = 64;
  for (const TensorRef& t : base.tensors()) {
    const std::string& name = t.name();
    if (name.find("_exps.") == std::string::npos && name.find("attn_q.") == std::string::npos &&
        name.find("attn_output.") == std::string::npos)
      continue;
    const uint64_t cols = static_cast<uint64_t>(t.info->shape[0]), n = t.info->n_elements;
    std::vector<float> w(n);
    std::memcpy(w.data(), t.data().data(), n * 4);
    std::vector<uint8_t> codes((n + 1) / 2);
    std::vector<uint16_t> scales, mins;
    for (uint64_t g = 0; g < n / kGroup; ++g) {
      const auto [lo, hi] =
          std::minmax_element(w.begin() + g * kGroup, w.begin() + (g + 1) * kGroup);
      const uint16_t m = fp32_to_fp16(*lo), d = fp32_to_fp16((*hi - *lo) / 15);
      scales.push_back(d);
      mins.push_back(m);
      const float fd = fp16_to_fp32(d), fm = fp16_to_fp32(m);
      for (uint64_t i = g * kGroup; i < (g + 1) * kGroup; ++i) {
        const int q =
            fd > 0 ? std::clamp(static_cast<int>(std::lround((w[i] - fm) / fd)), 0, 15) : 0;
        codes[i / 2] = static_cast<uint8_t>(codes[i / 2] | (q << (4 * (i % 2))));
      }
    }
    std::vector<int64_t> shape(t.info->shape.rbegin(), t.info->shape.rend());
    std::vector<int64_t> sshape = shape;
    sshape.back() = static_cast<int64_t>(cols / kGroup);
    const auto bytes16 = [](const std::vector<uint16_t>& v) {
      std::vector<uint8_t> b(v.size() * 2);
      std::memcpy(b.data(), v.data(), b.size());
      return b;
    };
    entries.push_back({name + ".codes", "U8", {static_cast<int64_t>(codes.size())}, codes});
    entries.push_back({name + ".scales", "F16", sshape, bytes16(scales)});
    entries.push_back({name + ".mins", "F16", sshape, bytes16(mins)});
    packed[name] = {{"bits", 4},
                    {"group", kGroup},
                    {"shape", shape},
                    {"codes", name + ".codes"},
                    {"scales", name + ".scales"},
                    {"mins", name + ".mins"}};
  }
  ASSERT_EQ(packed.size(), static_cast<size_t>(spec.n_layers * 5));
  const auto file = serialize_safetensors(
      entries, {{"packed_affine", nlohmann::json{{"version", 1}, {"tensors", packed}}.dump()}});
  const std::string in = dir.file("inhouse.safetensors");
  {
    std::ofstream out(in, std::ios::binary);
    out.write(reinterpret_cast<const char*>(file.data()),
              static_cast<std::streamsize>(file.size()));
  }
  for (const char* type : {"q4_1", "f32"}) {
    const auto cli =
        run_cli("gguf-requant", {in, "--base", dir.file("f32.gguf"), "--type", type, "-o",
                                 dir.file(std::string("imported-") + type + ".gguf")});
    ASSERT_EQ(cli.code, 0) << cli.err;
  }
  const auto diff = run_cli("gguf-diff", {"--values", "--json", dir.file("imported-q4_1.gguf"),
                                          dir.file("imported-f32.gguf")});
  ASSERT_EQ(diff.code, 1) << diff.err;  // the types differ
  size_t compared = 0;
  const auto report = nlohmann::json::parse(diff.out);
  for (const auto& t : report["tensors"]) {
    if (!t.contains("metrics")) continue;
    ++compared;
    EXPECT_EQ(t["metrics"]["max_abs"], 0.0) << t["name"];
  }
  EXPECT_EQ(compared, packed.size());
  const auto q = run_model(dir.file("imported-q4_1.gguf"));
  expect_finite_and_varied(q.logits, spec.vocab);
  const auto f = run_model(dir.file("imported-f32.gguf"));
  EXPECT_GT(cosine(q.logits, f.logits), 0.999);
  EXPECT_NE(f.logits, run_model(dir.file("f32.gguf")).logits);  // it was quantized
}

// Split sets written by the tools load through their first shard, and compute what the
// single file does.
TEST(LlamaE2E, SplitOutputLoadsLikeTheSingleFile) {
  GGUF_REQUIRE_LLAMA();
  TempDir dir;
  LlamaMoeSpec spec;
  write_model(spec, dir.file("f32.gguf"));
  const auto single =
      run_cli("gguf-requant", {dir.file("f32.gguf"), "-o", dir.file("q8.gguf"), "--type", "q8_0"});
  ASSERT_EQ(single.code, 0) << single.err;
  const auto split = run_cli("gguf-requant", {dir.file("f32.gguf"), "-o", dir.file("q8s.gguf"),
                                              "--type", "q8_0", "--split-max-tensors", "7"});
  ASSERT_EQ(split.code, 0) << split.err;
  const auto shards = dir.entries();
  const std::string first = dir.file("q8s-00001-of-00004.gguf");
  ASSERT_NE(std::find(shards.begin(), shards.end(), "q8s-00001-of-00004.gguf"), shards.end())
      << ::testing::PrintToString(shards);
  EXPECT_EQ(run_model(first).logits, run_model(dir.file("q8.gguf")).logits);
}

// Tensors of `theirs` that `ours` holds at the same type must have the same bytes; returns how
// many tensors of type `type` were compared, and lists the tensors whose types differ.
size_t expect_same_bytes_where_types_agree(const std::string& theirs, const std::string& ours,
                                           GgmlType type, std::string& differing_types) {
  const Model a = Model::open(theirs), b = Model::open(ours);
  EXPECT_EQ(a.tensors().size(), b.tensors().size());
  size_t compared = 0;
  for (const TensorRef& t : a.tensors()) {
    const TensorRef* u = b.find(t.name());
    if (!u) {
      ADD_FAILURE() << t.name() << " is missing from " << ours;
      continue;
    }
    EXPECT_EQ(t.info->shape, u->info->shape) << t.name();
    if (t.info->type_id != u->info->type_id) {
      differing_types += " " + t.name() + " (" + type_name(t.info->type_id) + " vs " +
                         type_name(u->info->type_id) + ")";
      continue;
    }
    const auto x = t.data(), y = u->data();
    EXPECT_TRUE(x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin()))
        << t.name() << " (" << type_name(t.info->type_id) << ") differs from " << ours;
    if (t.info->type_id == static_cast<uint32_t>(type)) ++compared;
  }
  return compared;
}

// Runs llama.cpp's quantizer (--pure, with `imatrix` if given) and gguf-requant --type T (with
// `requant_args`) on dir/from, writing dir/llama-STEM.gguf and dir/ours-STEM.gguf.
void quantize_both(const TempDir& dir, const std::string& from, const std::string& stem, int ftype,
                   GgmlType type, const std::vector<std::string>& requant_args,
                   const LlamaRef::Importance* imatrix = nullptr,
                   const std::vector<LlamaRef::Override>& overrides = {}) {
  std::string log;
  ASSERT_TRUE(LlamaRef::get().quantize(dir.file(from), dir.file("llama-" + stem + ".gguf"), ftype,
                                       /*pure=*/true, /*allow_requantize=*/from != "f32.gguf", log,
                                       imatrix, overrides))
      << log;
  std::vector<std::string> args = {dir.file(from), "-o", dir.file("ours-" + stem + ".gguf"),
                                   "--type", type_name(static_cast<uint32_t>(type))};
  args.insert(args.end(), requant_args.begin(), requant_args.end());
  const auto cli = run_cli("gguf-requant", args);
  ASSERT_EQ(cli.code, 0) << cli.err;
}

// Files written by another tool, llama.cpp's own quantizer (llama_model_quantize, which is what
// llama-quantize --pure runs): gguf-inspect --check accepts them, and gguf-requant --type T of
// the same f32 model writes the same bytes for every tensor; both choose the same types (every
// weight matrix at T but the MoE router, which stays f32 like the norms), and gguf-diff finds
// the two files identical, metadata included.
// Then from a quantized start: llama.cpp requantizing its q8_0 file (allow_requantize) and
// gguf-requant doing the same agree too (both decode to f32 first).
TEST(LlamaE2E, LlamaQuantizeAndRequantWriteTheSameTensors) {
  GGUF_REQUIRE_LLAMA();
  TempDir dir;
  LlamaMoeSpec spec;
  write_model(spec, dir.file("f32.gguf"));
  const Model f32 = Model::open(dir.file("f32.gguf"));
  const size_t matrices = static_cast<size_t>(
      std::count_if(f32.tensors().begin(), f32.tensors().end(),
                    [](const TensorRef& t) { return t.info->shape.size() >= 2; }));
  const size_t routers = static_cast<size_t>(std::count_if(
      f32.tensors().begin(), f32.tensors().end(),
      [](const TensorRef& t) { return t.name().find("ffn_gate_inp") != std::string::npos; }));
  ASSERT_GT(routers, 0u);
  struct Case {
    int ftype;  // llama_ftype
    GgmlType type;
    std::string from = "f32.gguf";
  };
  for (const Case& c :
       {Case{1, GgmlType::F16}, Case{32, GgmlType::BF16}, Case{7, GgmlType::Q8_0},
        Case{2, GgmlType::Q4_0}, Case{3, GgmlType::Q4_1}, Case{8, GgmlType::Q5_0},
        Case{9, GgmlType::Q5_1}, Case{10, GgmlType::Q2_K}, Case{12, GgmlType::Q3_K},
        Case{15, GgmlType::Q4_K}, Case{17, GgmlType::Q5_K}, Case{18, GgmlType::Q6_K},
        Case{25, GgmlType::IQ4_NL}, Case{30, GgmlType::IQ4_XS},
        Case{15, GgmlType::Q4_K, "llama-q8_0.gguf"}, Case{3, GgmlType::Q4_1, "llama-q8_0.gguf"}}) {
    const std::string name = type_name(static_cast<uint32_t>(c.type));
    SCOPED_TRACE(name + " from " + c.from);
    const std::string stem = c.from == "f32.gguf" ? name : name + "-from-q8_0";
    const std::string theirs = dir.file("llama-" + stem + ".gguf");
    const std::string ours = dir.file("ours-" + stem + ".gguf");
    quantize_both(dir, c.from, stem, c.ftype, c.type, {});
    if (HasFatalFailure()) return;
    const auto check = run_cli("gguf-inspect", {"--check", theirs});
    EXPECT_EQ(check.code, 0) << check.out << check.err;
    std::string differing;
    const size_t compared = expect_same_bytes_where_types_agree(theirs, ours, c.type, differing);
    EXPECT_EQ(differing, "") << "tensors at different types";
    EXPECT_EQ(compared + routers, matrices);
    // The whole files agree: metadata included (general.file_type too, given the ftype
    // gguf-requant writes for its type: Q3_K_M, Q4_K_M, Q5_K_M for the k-quants).
    const auto diff = run_cli("gguf-diff", {theirs, ours});
    EXPECT_EQ(diff.code, 0) << diff.out << diff.err;
  }
}

// An imatrix GGUF as llama-imatrix writes it (sums of squared activations and counts per
// matrix) for every weight matrix of `model`, one expert of each 3-D tensor never routed to
// (count 0); and the same matrix as llama-quantize --imatrix hands it to llama.cpp: sums /
// count, and 1 for a matrix that saw no token (rules restated here, not taken from the library).
LlamaRef::Importance write_imatrix(const Model& model, const std::string& path, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mean_sq(0.05f, 4.0f);
  Plan p;
  p.metadata.set("general.type", Value::string("imatrix"));
  p.metadata.set("imatrix.datasets", Value::string_array({"calibration.txt"}));
  p.metadata.set("imatrix.chunk_count", Value::u32(10));
  p.metadata.set("imatrix.chunk_size", Value::u32(512));
  LlamaRef::Importance importance;
  const auto payload = [](const std::vector<float>& v) {
    auto b = std::make_shared<std::vector<uint8_t>>(v.size() * 4);
    std::memcpy(b->data(), v.data(), b->size());
    return MemoryBytes{b};
  };
  for (const TensorRef& t : model.tensors()) {
    if (t.info->shape.size() < 2) continue;
    const int64_t ne0 = t.info->shape[0], n_mat = t.info->shape.size() > 2 ? t.info->shape[2] : 1;
    std::vector<float> sums(ne0 * n_mat), counts(n_mat), values(ne0 * n_mat);
    for (int64_t m = 0; m < n_mat; ++m) {
      counts[m] = n_mat > 1 && m == 1 ? 0.0f : static_cast<float>(3 + rng() % 40);
      for (int64_t i = 0; i < ne0; ++i) {
        const float v = mean_sq(rng);
        sums[m * ne0 + i] = counts[m] > 0 ? v * counts[m] : 0.0f;
        values[m * ne0 + i] = counts[m] > 0 ? sums[m * ne0 + i] / counts[m] : 1.0f;
      }
    }
    p.tensors.push_back({t.name() + ".in_sum2", 0, {ne0, n_mat}, sums.size() * 4, payload(sums)});
    p.tensors.push_back({t.name() + ".counts", 0, {1, n_mat}, counts.size() * 4, payload(counts)});
    importance[t.name()] = std::move(values);
  }
  write_plan(p, path, {});
  return importance;
}

// With an importance matrix, for ten codecs that use one (the ds4 recipe's iq2_xxs and q2_K
// among them): llama.cpp's quantizer given the matrix as llama-quantize loads it, and
// gguf-requant --imatrix given the file, write the same bytes for every tensor (each expert
// of the 3-D tensors with its own slice). Given the keys llama-quantize adds for the matrix
// (quantize.imatrix.*, as kv_overrides), llama.cpp's file and ours are identical, metadata
// included. The first case also runs without the matrix, to show the matrix changed the bytes.
// (The other importance codecs passed too when tried; iq1_s, iq2_xs and iq2_s take 8-19 s each
// here, so the codec tests compare them with ggml directly.)
TEST(LlamaE2E, LlamaQuantizeAndRequantAgreeWithAnImatrix) {
  GGUF_REQUIRE_LLAMA();
  TempDir dir;
  LlamaMoeSpec spec;
  write_model(spec, dir.file("f32.gguf"));
  const Model f32 = Model::open(dir.file("f32.gguf"));
  const auto importance = write_imatrix(f32, dir.file("imatrix.gguf"),
                                        /*seed=*/20261130);
  struct Case {
    int ftype;  // llama_ftype
    GgmlType type;
  };
  // What llama-quantize --imatrix FILE adds (tools/quantize: the file as given, the first
  // dataset, the number of entries, the chunk count).
  const std::vector<LlamaRef::Override> keys = {
      {"quantize.imatrix.file", dir.file("imatrix.gguf")},
      {"quantize.imatrix.dataset", std::string("calibration.txt")},
      {"quantize.imatrix.entries_count", static_cast<int64_t>(importance.size())},
      {"quantize.imatrix.chunks_count", int64_t{10}}};
  // The ftypes gguf-requant writes for these types (Q4_K_M, Q3_K_M: --pure gives every matrix
  // the same type either way).
  for (const Case& c :
       {Case{15, GgmlType::Q4_K}, Case{19, GgmlType::IQ2_XXS}, Case{10, GgmlType::Q2_K},
        Case{23, GgmlType::IQ3_XXS}, Case{31, GgmlType::IQ1_M}, Case{12, GgmlType::Q3_K},
        Case{18, GgmlType::Q6_K}, Case{2, GgmlType::Q4_0}, Case{9, GgmlType::Q5_1},
        Case{30, GgmlType::IQ4_XS}}) {
    const std::string name = type_name(static_cast<uint32_t>(c.type));
    SCOPED_TRACE(name);
    const std::string theirs = dir.file("llama-" + name + ".gguf");
    const std::string ours = dir.file("ours-" + name + ".gguf");
    quantize_both(dir, "f32.gguf", name, c.ftype, c.type, {"--imatrix", dir.file("imatrix.gguf")},
                  &importance, keys);
    if (HasFatalFailure()) return;
    std::string differing;
    const size_t compared = expect_same_bytes_where_types_agree(theirs, ours, c.type, differing);
    EXPECT_EQ(differing, "") << "tensors at different types";
    EXPECT_GT(compared, 10u);
    const auto diff = run_cli("gguf-diff", {theirs, ours});
    EXPECT_EQ(diff.code, 0) << diff.out << diff.err;
    if (c.type == GgmlType::Q4_K) {
      std::string log2;
      ASSERT_TRUE(LlamaRef::get().quantize(dir.file("f32.gguf"), dir.file("plain.gguf"), c.ftype,
                                           true, false, log2));
      const Model plain = Model::open(dir.file("plain.gguf")), with = Model::open(ours);
      const auto x = plain.find("blk.1.ffn_up_exps.weight")->data();
      const auto y = with.find("blk.1.ffn_up_exps.weight")->data();
      EXPECT_FALSE(std::equal(x.begin(), x.end(), y.begin(), y.end()));
    }
  }
}

// gguf-inspect --check's table of keys llama.cpp reads with an exact type, against llama.cpp:
// each key a llama model reaches, retyped, makes libllama refuse the model naming the key, and
// --check report it; the keys llama.cpp does not type-check load, and --check says nothing.
TEST(LlamaE2E, CheckFlagsExactlyTheKeyTypesLlamaCppRefuses) {
  GGUF_REQUIRE_LLAMA();
  TempDir dir;
  LlamaMoeSpec spec;
  spec.n_layers = 2;
  const Plan plan = synth_llama_moe_plan(spec);
  const std::vector<int32_t> one_i32 = {1};
  const std::vector<uint32_t> one_u32 = {1}, three = {256, 256, 256};
  // Another type than the rule's (any other is refused alike).
  const auto retyped = [&](const KeyTypeRule& rule) -> Value {
    switch (rule.form) {
      case KeyForm::kPerLayer:
        return Value::i32(1);
      case KeyForm::kArray:
        return rule.type == ValueType::kString
                   ? Value::array_of<int32_t>(ValueType::kI32, one_i32)
                   : Value::array_of<uint32_t>(ValueType::kU32, one_u32);
      case KeyForm::kScalar:
        break;
    }
    switch (rule.type) {
      case ValueType::kU32:
        return Value::i32(1);
      case ValueType::kF32:
        return Value::f64(1);
      case ValueType::kBool:
        return Value::u8(1);
      default:
        return Value::string_array({"x"});
    }
  };
  std::vector<std::pair<std::string, Value>> refused;
  for (const KeyTypeRule& rule : llama_key_type_rules()) {
    // Merges are read only by BPE tokenizers (this model's is SentencePiece).
    if ((rule.archs != kAnyArch && !(rule.archs & kArchLlama)) ||
        rule.key == "tokenizer.ggml.merges")
      continue;
    refused.emplace_back(
        rule.key.starts_with('.') ? "llama" + std::string(rule.key) : std::string(rule.key),
        retyped(rule));
  }
  ASSERT_GT(refused.size(), 60u);
  // A per-layer array of the wrong length.
  refused.emplace_back("llama.feed_forward_length",
                       Value::array_of<uint32_t>(ValueType::kU32, three));
  const std::string path = dir.file("retyped.gguf");
  WriteOptions replace;
  replace.force = true;
  for (const auto& [key, value] : refused) {
    SCOPED_TRACE(key + " as " + std::string(value_type_name(value.type())));
    Plan p = plan;
    p.metadata.set(key, value);
    write_plan(p, path, replace);
    const auto r = LlamaRef::get().run(path, kPrompt);
    EXPECT_FALSE(r.loaded) << "llama.cpp loaded it";
    EXPECT_NE(r.log.find(key), std::string::npos) << "llama.cpp refused it for another reason:\n"
                                                  << r.log;
    size_t about_key = 0;
    for (const Problem& pr : check_model(Model::open(path)))
      if (pr.object == "key '" + key + "'" && pr.severity == std::string("error")) ++about_key;
    EXPECT_EQ(about_key, 1u);
  }
  // Not type-checked by llama.cpp (cls_token_id, chat_template, merges of a SentencePiece
  // vocabulary), or accepted in this form (a per-layer array of i32).
  Plan p = plan;
  p.metadata.set("tokenizer.ggml.cls_token_id", Value::u64(1));
  p.metadata.set("tokenizer.chat_template", Value::u32(1));
  p.metadata.set("tokenizer.ggml.merges", Value::u32(1));
  const std::vector<int32_t> per_layer = {256, 256};
  p.metadata.set("llama.feed_forward_length", Value::array_of<int32_t>(ValueType::kI32, per_layer));
  write_plan(p, path, replace);
  run_model(path);
  EXPECT_EQ(check_model(Model::open(path)).size(), 0u);
}

// The keys --check says a language model cannot do without: each removed, llama.cpp refuses
// the model, and --check reports that key as an error. general.quantization_version removed
// from a quantized model: llama.cpp loads it, and --check gives only a warning.
TEST(LlamaE2E, CheckFlagsExactlyTheRequiredKeysLlamaCppRefuses) {
  GGUF_REQUIRE_LLAMA();
  TempDir dir;
  LlamaMoeSpec spec;
  spec.n_layers = 2;
  const Plan plan = synth_llama_moe_plan(spec);
  const std::string path = dir.file("without.gguf");
  WriteOptions replace;
  replace.force = true;
  for (const char* key : {"llama.context_length", "llama.embedding_length", "llama.block_count",
                          "llama.attention.layer_norm_rms_epsilon", "tokenizer.ggml.model",
                          "tokenizer.ggml.tokens"}) {
    SCOPED_TRACE(key);
    Plan p = plan;
    ASSERT_TRUE(p.metadata.erase(key));
    write_plan(p, path, replace);
    const auto r = LlamaRef::get().run(path, kPrompt);
    EXPECT_FALSE(r.loaded) << "llama.cpp loaded it";
    const std::string why =
        std::string_view(key) == "tokenizer.ggml.tokens" ? "cannot find tokenizer vocab" : key;
    EXPECT_NE(r.log.find(why), std::string::npos) << "llama.cpp refused it for another reason:\n"
                                                  << r.log;
    const auto problems = check_model(Model::open(path));
    ASSERT_EQ(problems.size(), 1u);
    EXPECT_EQ(problems[0].object, "key '" + std::string(key) + "'");
    EXPECT_EQ(problems[0].severity, std::string("error"));
  }
  // A gpt2 vocabulary without merges.
  Plan p = plan;
  p.metadata.set("tokenizer.ggml.model", Value::string("gpt2"));
  write_plan(p, path, replace);
  auto r = LlamaRef::get().run(path, kPrompt);
  EXPECT_FALSE(r.loaded) << "llama.cpp loaded it";
  EXPECT_NE(r.log.find("merges"), std::string::npos) << r.log;
  auto problems = check_model(Model::open(path));
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].object, "key 'tokenizer.ggml.merges'");
  // A quantized model without general.quantization_version loads.
  RequantOptions o;
  o.type = GgmlType::Q8_0;
  write_plan(plan, dir.file("f32.gguf"), {});
  const Model f32 = Model::open(dir.file("f32.gguf"));
  Plan q = requant(f32, o).plan;
  ASSERT_TRUE(q.metadata.erase("general.quantization_version"));
  write_plan(q, path, replace);
  run_model(path);
  problems = check_model(Model::open(path));
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].object, "key 'general.quantization_version'");
  EXPECT_EQ(problems[0].severity, std::string("warning"));
}

// A damaged output would be refused by llama.cpp; this checks the harness itself can fail.
TEST(LlamaE2E, HarnessReportsAFileLlamaCppRefuses) {
  GGUF_REQUIRE_LLAMA();
  TempDir dir;
  write_model(LlamaMoeSpec{}, dir.file("f32.gguf"));
  std::filesystem::resize_file(dir.file("f32.gguf"), 4096);
  const auto r = LlamaRef::get().run(dir.file("f32.gguf"), kPrompt);
  EXPECT_FALSE(r.loaded);
  EXPECT_FALSE(r.log.empty());
}

}  // namespace
}  // namespace gguf
