// Test fixtures shared by diff_test.cpp and diff_cli_test.cpp: a small DeepSeek-style model
// as data (so each test changes exactly what it wants), and float helpers with known values.
#pragma once

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli_run.h"
#include "gguf/ops/diff.h"
#include "gguf_builder.h"

namespace gguf::diff_fixture {

using testing::GgufBuilder;
using testing::TempDir;

constexpr uint32_t kF32 = 0, kQ8_0 = 8, kBF16 = 30;

// A fixture as data, so that each test changes exactly what it wants before building.
struct FixtureTensor {
  std::string name;
  uint32_t type;
  std::vector<int64_t> shape;
  std::vector<uint8_t> payload;
};

inline std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// Multiples of 1/8 below 16 in magnitude: exact in bf16 and in q8_0 with scale 1/8.
inline std::vector<float> eighths(size_t n, int seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<float>(static_cast<int>((i * 37 + seed * 11) % 201) - 100) / 8.0f;
  return v;
}

inline std::vector<float> perturbed(const std::vector<float>& v, double amount, int seed) {
  std::vector<float> out(v);
  for (size_t i = 0; i < v.size(); ++i)
    out[i] += static_cast<float>(amount * std::sin(static_cast<double>(i * 7 + seed)));
  return out;
}

struct Fixture {
  std::vector<std::pair<std::string, uint32_t>> u32s = {{"deepseek2.block_count", 2}};
  std::string name = "tiny";
  std::vector<std::string> tokens = {"a", "b", "c"};
  std::vector<FixtureTensor> tensors;

  Fixture() {
    tensors.push_back({"token_embd.weight", kF32, {8, 4}, f32_bytes(eighths(32, 1))});
    tensors.push_back({"blk.0.attn_q.weight", kF32, {8, 8}, f32_bytes(eighths(64, 2))});
    tensors.push_back({"blk.1.ffn_up_exps.weight", kF32, {8, 4, 3}, f32_bytes(eighths(96, 3))});
    tensors.push_back({"output_norm.weight", kF32, {8}, f32_bytes(eighths(8, 4))});
  }
  FixtureTensor& tensor(std::string_view n) {
    for (auto& t : tensors)
      if (t.name == n) return t;
    throw std::runtime_error("no tensor " + std::string(n));
  }
  GgufBuilder builder() const {
    GgufBuilder b;
    b.string("general.architecture", "deepseek2").string("general.name", name);
    for (const auto& [k, v] : u32s) b.u32(k, v);
    b.string_array("tokenizer.ggml.tokens", tokens);
    for (const auto& t : tensors) b.tensor(t.name, t.type, t.shape, t.payload);
    return b;
  }
  std::string write(const TempDir& dir, const std::string& file) const {
    builder().write_file(dir.file(file));
    return dir.file(file);
  }
};

inline DiffReport diff(const Fixture& fa, const Fixture& fb, DiffOptions o = {}) {
  TempDir dir;
  const Model a = Model::open(fa.write(dir, "a.gguf"));
  const Model b = Model::open(fb.write(dir, "b.gguf"));
  o.threads = 2;
  return diff_models(a, b, o);
}

inline const TensorDiff& find(const DiffReport& r, std::string_view name) {
  for (const auto& t : r.tensors)
    if (t.name == name) return t;
  throw std::runtime_error("no tensor " + std::string(name) + " in the report");
}

inline std::vector<float> floats_of(const FixtureTensor& t) {
  std::vector<float> v(t.payload.size() / 4);
  std::memcpy(v.data(), t.payload.data(), t.payload.size());
  return v;
}

inline nlohmann::json manifest_of(const Fixture& f) {
  nlohmann::json m = {{"files", {"recorded.gguf"}}, {"architecture", "deepseek2"}};
  m["metadata"] = {{{"key", "general.architecture"}, {"type", "string"}, {"value", "deepseek2"}},
                   {{"key", "general.name"}, {"type", "string"}, {"value", f.name}}};
  for (const auto& [k, v] : f.u32s)
    m["metadata"].push_back({{"key", k}, {"type", "u32"}, {"value", v}});
  m["metadata"].push_back({{"key", "tokenizer.ggml.tokens"},
                           {"type", "array"},
                           {"element_type", "string"},
                           {"value", f.tokens}});
  m["tensors"] = nlohmann::json::array();
  const char* names[] = {"f32", "f16"};
  for (const auto& t : f.tensors) {
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx",
                  static_cast<unsigned long long>(XXH3_64bits(t.payload.data(), t.payload.size())));
    m["tensors"].push_back({{"name", t.name},
                            {"type", names[t.type]},
                            {"shape", t.shape},
                            {"bytes", t.payload.size()},
                            {"xxh3", hex}});
  }
  return m;
}

// The metrics, written out independently of the library.
struct Expected {
  double rmse = 0, max_abs = 0, rel = 0, cosine = 0, snr_db = 0, wrmse = 0, wrel = 0;
};

inline Expected expected(const std::vector<float>& base, const std::vector<float>& x,
                         const std::vector<double>& w = {}) {
  double d2 = 0, b2 = 0, x2 = 0, dot = 0, wd2 = 0, wb2 = 0, sw = 0;
  Expected e;
  for (size_t i = 0; i < base.size(); ++i) {
    const double d = static_cast<double>(x[i]) - static_cast<double>(base[i]);
    d2 += d * d;
    b2 += static_cast<double>(base[i]) * base[i];
    x2 += static_cast<double>(x[i]) * x[i];
    dot += static_cast<double>(base[i]) * x[i];
    e.max_abs = std::max(e.max_abs, std::abs(d));
    if (!w.empty()) {
      wd2 += w[i] * d * d;
      wb2 += w[i] * base[i] * base[i];
      sw += w[i];
    }
  }
  e.rmse = std::sqrt(d2 / static_cast<double>(base.size()));
  e.rel = std::sqrt(d2) / std::sqrt(b2);
  e.cosine = dot / (std::sqrt(b2) * std::sqrt(x2));
  e.snr_db = 10 * std::log10(b2 / d2);
  if (!w.empty()) e.wrmse = std::sqrt(wd2 / sw), e.wrel = std::sqrt(wd2 / wb2);
  return e;
}

// The fast sum kernels add float partials of 16 terms into double (see diff_metrics.cpp):
// relative error under 1e-6 by construction; the double kernel (number 0) is held to 1e-12.
constexpr double kFloatSums = 1e-6, kDoubleSums = 1e-12;

inline void expect_metrics(const ErrorMetrics& m, const Expected& e, bool weighted = false,
                           double tolerance = kFloatSums) {
  const auto near = [&](double got, double want, const char* what) {
    EXPECT_NEAR(got, want, tolerance * std::abs(want)) << what;
  };
  near(m.rmse(), e.rmse, "rmse");
  near(m.max_abs, e.max_abs, "max_abs");
  near(m.rel(), e.rel, "rel");
  near(m.cosine(), e.cosine, "cosine");
  near(m.snr_db(), e.snr_db, "snr_db");
  if (weighted) {
    near(m.weighted_rmse(), e.wrmse, "weighted_rmse");
    near(m.weighted_rel(), e.wrel, "weighted_rel");
  }
}

}  // namespace gguf::diff_fixture
