// gguf-diff --values: the numeric metrics against values computed here with plain loops in
// double, per type and shape, weights, references and summaries; the sum kernels are
// diff_kernels_test.cpp.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <xxhash.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>

#include "diff_fixture.h"
#include "gguf/codecs/codecs.h"
#include "gguf/ops/diff.h"
#include "gguf_builder.h"
#include "ops/diff_internal.h"

namespace gguf {
namespace {

using testing::GgufBuilder;
using testing::Tag;
using testing::TempDir;
using namespace diff_fixture;

TEST(diff, metrics_match_plain_loops) {
  Fixture a, b;
  const auto base = floats_of(a.tensor("blk.0.attn_q.weight"));
  const auto x = perturbed(base, 0.01, 3);
  b.tensor("blk.0.attn_q.weight").payload = f32_bytes(x);
  DiffOptions o;
  o.values = true;
  const DiffReport r = diff(a, b, o);
  const TensorDiff& t = find(r, "blk.0.attn_q.weight");
  ASSERT_TRUE(t.metrics);
  EXPECT_EQ(t.metrics->count, 64u);
  expect_metrics(*t.metrics, expected(base, x));
  // Tensors identical in bytes are not decoded.
  EXPECT_FALSE(find(r, "token_embd.weight").metrics);
  EXPECT_EQ(r.decoded_elements, 2u * 64);
}

TEST(diff, metrics_cover_rows_of_any_length) {
  // 37 columns: every vector lane width leaves a remainder in each row.
  Fixture a, b;
  const auto base = perturbed(eighths(37 * 5, 6), 0.3, 2);
  const auto x = perturbed(base, 0.01, 8);
  a.tensors.push_back({"blk.1.ffn_down_exps.weight", kF32, {37, 5}, f32_bytes(base)});
  b.tensors.push_back({"blk.1.ffn_down_exps.weight", kF32, {37, 5}, f32_bytes(x)});
  DiffOptions o;
  o.values = true;
  const DiffReport r = diff(a, b, o);
  expect_metrics(*find(r, "blk.1.ffn_down_exps.weight").metrics, expected(base, x));
  Imatrix im;
  std::vector<float> w(37);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 1.0f + static_cast<float>(i % 4);
  im.add("blk.1.ffn_down_exps.weight", {1, 37, w, {}, {}});
  std::vector<double> per_element(base.size());
  for (size_t i = 0; i < base.size(); ++i) per_element[i] = w[i % 37];
  o.importance = &im;
  const DiffReport rw = diff(a, b, o);
  expect_metrics(*find(rw, "blk.1.ffn_down_exps.weight").metrics, expected(base, x, per_element),
                 true);
}

// A row longer than a work item (2^20 elements) is measured in pieces of whole blocks of every
// side (memory bounded by the pieces, not the row): the same figures as plain loops over the
// rows, with each expert's weights, and against a reference.
TEST(diff, rows_longer_than_a_work_item_are_measured_in_pieces) {
  const int64_t ne0 = (int64_t{1} << 20) + 96;  // q8_0 blocks: a last piece of 96 elements
  const size_t n = static_cast<size_t>(2 * ne0);
  const std::string name = "blk.1.ffn_down_exps.weight";
  const auto base = perturbed(eighths(n, 5), 0.3, 1);
  std::vector<uint8_t> q8(*row_bytes(GgmlType::Q8_0, static_cast<uint64_t>(ne0)) * 2);
  quantize(GgmlType::Q8_0, base, 2, ne0, {}, q8);
  std::vector<float> xa(n);
  dequantize(GgmlType::Q8_0, q8, xa);
  const auto xb = perturbed(base, 0.05, 2);
  Fixture ref, a, b;
  ref.tensors.push_back({name, kF32, {ne0, 1, 2}, f32_bytes(base)});
  a.tensors.push_back({name, static_cast<uint32_t>(GgmlType::Q8_0), {ne0, 1, 2}, q8});
  b.tensors.push_back({name, kF32, {ne0, 1, 2}, f32_bytes(xb)});
  std::vector<float> w(n);  // 2 experts x ne0, expert-major
  for (size_t i = 0; i < n; ++i) w[i] = 0.25f + static_cast<float>((i * 13) % 17);
  Imatrix im;
  im.add(name, {2, ne0, w, {}, {}});
  const std::vector<double> per_element(w.begin(), w.end());  // one row per expert
  TempDir dir;
  const Model rm = Model::open(ref.write(dir, "ref.gguf"));
  for (const bool weighted : {false, true}) {
    SCOPED_TRACE(weighted);
    DiffOptions o;
    o.values = true;
    o.reference = &rm;
    o.threads = 2;
    if (weighted) o.importance = &im;
    const DiffReport r = diff(a, b, o);
    const TensorDiff& t = find(r, name);
    ASSERT_TRUE(t.metrics && t.ref_a && t.ref_b);
    const std::vector<double> none;
    const auto& ew = weighted ? per_element : none;
    EXPECT_EQ(t.metrics->count, n);
    expect_metrics(*t.metrics, expected(xa, xb, ew), weighted);
    expect_metrics(*t.ref_a, expected(base, xa, ew), weighted);
    expect_metrics(*t.ref_b, expected(base, xb, ew), weighted);
  }
}

// The double path (an f64 side) in both shapes of work: long rows in pieces, and whole rows of
// 3-D experts, each with and without importance weights per expert, and three-way.
TEST(diff, f64_sides_are_measured_in_pieces_and_per_expert_slices) {
  const auto f64_bytes = [](const std::vector<float>& v) {
    std::vector<uint8_t> out(v.size() * 8);
    for (size_t i = 0; i < v.size(); ++i) {
      const double d = v[i];
      std::memcpy(out.data() + i * 8, &d, 8);
    }
    return out;
  };
  constexpr uint32_t kF64 = 28;
  struct Case {
    std::string name;
    int64_t ne0, ne1;
  };
  // A row of 2^20 + 96 elements (q8_0 pieces, a short last one), and 3 experts of 4 x 64.
  for (const Case& c : {Case{"blk.1.ffn_down_exps.weight", (int64_t{1} << 20) + 96, 1},
                        Case{"blk.1.ffn_up_exps.weight", 64, 4}}) {
    SCOPED_TRACE(c.name);
    const int64_t experts = c.ne1 == 1 ? 2 : 3;
    const size_t n = static_cast<size_t>(c.ne0 * c.ne1 * experts);
    const auto base = perturbed(eighths(n, 5), 0.3, 1);
    const uint64_t rows = static_cast<uint64_t>(c.ne1 * experts);
    std::vector<uint8_t> q8(*row_bytes(GgmlType::Q8_0, static_cast<uint64_t>(c.ne0)) * rows);
    quantize(GgmlType::Q8_0, base, static_cast<int64_t>(rows), c.ne0, {}, q8);
    std::vector<float> xa(n);
    dequantize(GgmlType::Q8_0, q8, xa);
    const auto xb = perturbed(base, 0.05, 2);
    Fixture ref, a, b;
    const std::vector<int64_t> shape = {c.ne0, c.ne1, experts};
    const auto put = [&](Fixture& f, uint32_t type, std::vector<uint8_t> payload) {
      std::erase_if(f.tensors, [&](const FixtureTensor& t) { return t.name == c.name; });
      f.tensors.push_back({c.name, type, shape, std::move(payload)});
    };
    put(ref, kF64, f64_bytes(base));
    put(a, static_cast<uint32_t>(GgmlType::Q8_0), q8);
    put(b, kF64, f64_bytes(xb));
    const size_t slice = static_cast<size_t>(c.ne0) * static_cast<size_t>(experts);
    std::vector<float> w(slice);  // experts x ne0, expert-major
    for (size_t i = 0; i < w.size(); ++i) w[i] = 0.25f + static_cast<float>((i * 13) % 17);
    Imatrix im;
    im.add(c.name, {experts, c.ne0, w, {}, {}});
    std::vector<double> per_element(n);
    for (size_t i = 0; i < n; ++i) {
      const size_t col = i % static_cast<size_t>(c.ne0);
      const size_t expert = i / (static_cast<size_t>(c.ne0) * static_cast<size_t>(c.ne1));
      per_element[i] = w[expert * static_cast<size_t>(c.ne0) + col];
    }
    TempDir dir;
    const Model rm = Model::open(ref.write(dir, "ref.gguf"));
    for (const bool weighted : {false, true}) {
      SCOPED_TRACE(weighted);
      DiffOptions o;
      o.values = true;
      o.reference = &rm;
      o.threads = 2;
      if (weighted) o.importance = &im;
      const DiffReport r = diff(a, b, o);
      const TensorDiff& t = find(r, c.name);
      ASSERT_TRUE(t.metrics && t.ref_a && t.ref_b);
      const std::vector<double> none;
      const auto& ew = weighted ? per_element : none;
      EXPECT_EQ(t.metrics->count, n);
      EXPECT_EQ(t.metrics->weighted, weighted);
      expect_metrics(*t.metrics, expected(xa, xb, ew), weighted);
      expect_metrics(*t.ref_a, expected(base, xa, ew), weighted);
      expect_metrics(*t.ref_b, expected(base, xb, ew), weighted);
    }
  }
}

// Every comparison of a three-way diff with q4_K sides (decoded inside the sum kernel where the
// CPU allows): A and B q4_K, the reference f32, an expert tensor with per-expert weights, and
// a pair with one q4_K side, against sums computed here from the decoded values.
TEST(diff, q4_K_sides_measure_like_their_decoded_values) {
  constexpr int64_t ne0 = 512, ne1 = 6, experts = 3;
  const size_t n = static_cast<size_t>(ne0 * ne1 * experts);
  const std::string name = "blk.1.ffn_gate_exps.weight";
  const auto base = perturbed(eighths(n, 5), 0.3, 1);
  const auto encode = [&](const std::vector<float>& v) {
    std::vector<uint8_t> q(*row_bytes(GgmlType::Q4_K, ne0) * ne1 * experts);
    quantize(GgmlType::Q4_K, v, ne1 * experts, ne0, {}, q);
    std::vector<float> decoded(n);
    dequantize(GgmlType::Q4_K, q, decoded);
    return std::pair{q, decoded};
  };
  const auto [qa, xa] = encode(perturbed(base, 0.02, 2));
  const auto [qb, xb] = encode(perturbed(base, 0.05, 3));
  std::vector<float> w(static_cast<size_t>(ne0 * experts));
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.5f + static_cast<float>((i * 7) % 13);
  Imatrix im;
  im.add(name, {experts, ne0, w, {}, {}});
  std::vector<double> per_element(n);
  for (size_t i = 0; i < n; ++i)
    per_element[i] = w[i / static_cast<size_t>(ne0 * ne1) * ne0 + i % static_cast<size_t>(ne0)];
  const std::vector<int64_t> shape = {ne0, ne1, experts};
  const auto model = [&](uint32_t type, std::vector<uint8_t> payload) {
    Fixture f;
    std::erase_if(f.tensors, [&](const FixtureTensor& t) { return t.name == name; });
    f.tensors.push_back({name, type, shape, std::move(payload)});
    return f;
  };
  const auto q4 = static_cast<uint32_t>(GgmlType::Q4_K);
  Fixture ref = model(kF32, f32_bytes(base)), a = model(q4, qa), b = model(q4, qb);
  Fixture b_f32 = model(kF32, f32_bytes(xb));
  TempDir dir;
  const Model rm = Model::open(ref.write(dir, "ref.gguf"));
  for (const bool weighted : {false, true}) {
    SCOPED_TRACE(weighted);
    const std::vector<double> none;
    const auto& ew = weighted ? per_element : none;
    DiffOptions o;
    o.values = true;
    o.threads = 2;
    if (weighted) o.importance = &im;
    {
      DiffOptions three = o;
      three.reference = &rm;
      const DiffReport r = diff(a, b, three);
      const TensorDiff& t = find(r, name);
      ASSERT_TRUE(t.metrics && t.ref_a && t.ref_b);
      EXPECT_EQ(t.metrics->count, n);
      expect_metrics(*t.metrics, expected(xa, xb, ew), weighted);
      expect_metrics(*t.ref_a, expected(base, xa, ew), weighted);
      expect_metrics(*t.ref_b, expected(base, xb, ew), weighted);
    }
    for (const bool a_is_q4 : {true, false}) {  // q4_K : f32, and f32 : q4_K
      SCOPED_TRACE(a_is_q4 ? "q4_K : f32" : "f32 : q4_K");
      const DiffReport r = a_is_q4 ? diff(a, b_f32, o) : diff(b_f32, a, o);
      const TensorDiff& t = find(r, name);
      ASSERT_TRUE(t.metrics);
      expect_metrics(*t.metrics, a_is_q4 ? expected(xa, xb, ew) : expected(xb, xa, ew), weighted);
    }
  }
}

TEST(diff, f64_i32_and_i64_tensors_are_measured_in_double) {
  const auto bytes_of = [](const auto& v) {
    std::vector<uint8_t> out(v.size() * sizeof(v[0]));
    std::memcpy(out.data(), v.data(), out.size());
    return out;
  };
  std::vector<double> fa(64), fb(64), ia(64), ib(64), la(64), lb(64);
  std::vector<int32_t> i32a(64), i32b(64);
  std::vector<int64_t> i64a(64), i64b(64);
  for (size_t i = 0; i < 64; ++i) {
    fa[i] = (static_cast<double>(i) - 31.5) * 1e100;  // beyond float, squares within double
    fb[i] = fa[i] * (1 + 1e-12 * static_cast<double>(i % 3));
    i32a[i] = (1 << 30) + static_cast<int32_t>(i);
    i32b[i] = i32a[i] + static_cast<int32_t>(i % 2);  // float cannot tell these apart
    i64a[i] = (int64_t{1} << 50) - static_cast<int64_t>(i) * 1000;
    i64b[i] = i64a[i] + static_cast<int64_t>(i % 4) - 1;
    ia[i] = i32a[i], ib[i] = i32b[i], la[i] = static_cast<double>(i64a[i]),
    lb[i] = static_cast<double>(i64b[i]);
  }
  Fixture a, b;
  a.tensors.push_back({"f64.weight", 28, {8, 8}, bytes_of(fa)});
  b.tensors.push_back({"f64.weight", 28, {8, 8}, bytes_of(fb)});
  a.tensors.push_back({"i32.weight", 26, {8, 8}, bytes_of(i32a)});
  b.tensors.push_back({"i32.weight", 26, {8, 8}, bytes_of(i32b)});
  a.tensors.push_back({"i64.weight", 27, {8, 8}, bytes_of(i64a)});
  b.tensors.push_back({"i64.weight", 27, {8, 8}, bytes_of(i64b)});
  // An f64 side against an f32 side: the f32 values widened.
  a.tensors.push_back({"mixed.weight", 28, {8, 8}, bytes_of(ia)});
  std::vector<float> mixed(ia.begin(), ia.end());
  b.tensors.push_back({"mixed.weight", kF32, {8, 8}, f32_bytes(mixed)});
  DiffOptions o;
  o.values = true;
  const DiffReport r = diff(a, b, o);
  const auto check = [&](const char* name, const std::vector<double>& x0,
                         const std::vector<double>& x1) {
    SCOPED_TRACE(name);
    const TensorDiff& t = find(r, name);
    ASSERT_TRUE(t.metrics);
    EXPECT_EQ(t.metrics->nonfinite(), 0u);
    EXPECT_EQ(t.metrics->count, 64u);
    double d2 = 0, b2 = 0, x2 = 0, dot = 0, mx = 0;
    for (size_t i = 0; i < 64; ++i) {
      const double d = x1[i] - x0[i];
      d2 += d * d, b2 += x0[i] * x0[i], x2 += x1[i] * x1[i], dot += x0[i] * x1[i];
      mx = std::max(mx, std::abs(d));
    }
    ASSERT_GT(d2, 0);
    EXPECT_NEAR(t.metrics->rmse(), std::sqrt(d2 / 64), 1e-12 * std::sqrt(d2 / 64));
    EXPECT_EQ(t.metrics->max_abs_diff(), mx);
    EXPECT_NEAR(t.metrics->rel(), std::sqrt(d2 / b2), 1e-12 * std::sqrt(d2 / b2));
    EXPECT_NEAR(t.metrics->snr_db(), 10 * std::log10(b2 / d2), 1e-9);
    EXPECT_NEAR(t.metrics->cosine(), dot / (std::sqrt(b2) * std::sqrt(x2)), 1e-12);
  };
  check("f64.weight", fa, fb);
  check("i32.weight", ia, ib);
  check("i64.weight", la, lb);
  check("mixed.weight", ia, std::vector<double>(mixed.begin(), mixed.end()));

  // An f64 pair whose square overflows double is left out and counted, not summed as infinity.
  Fixture c, d;
  std::vector<double> ca(fa), cd(fb);
  ca[5] = cd[5] = 1e200;
  cd[6] = -1e300;
  c.tensors.push_back({"f64.weight", 28, {8, 8}, bytes_of(ca)});
  d.tensors.push_back({"f64.weight", 28, {8, 8}, bytes_of(cd)});
  const DiffReport big = diff(c, d, o);
  const TensorDiff& t = find(big, "f64.weight");
  ASSERT_TRUE(t.metrics);
  EXPECT_EQ(t.metrics->too_large, 2u);
  EXPECT_EQ(t.metrics->count, 62u);
  EXPECT_EQ(t.metrics->nonfinite(), 0u);
  EXPECT_TRUE(std::isfinite(t.metrics->rel()) && std::isfinite(t.metrics->cosine()));
}

// f64 sums far apart overflow as a product (1e8 x 1e302), and sums of many huge squares
// overflow themselves: the cosine stays right in the first case, and no metric built on an
// infinite sum reads as 0 (orthogonal), 1 or infinity in the second.
TEST(diff, metrics_survive_norms_far_apart_and_overflowed_sums) {
  const auto bytes_of = [](const std::vector<double>& v) {
    std::vector<uint8_t> out(v.size() * sizeof(double));
    std::memcpy(out.data(), v.data(), out.size());
    return out;
  };
  std::vector<float> small(64);
  std::vector<double> scaled(64), near_limit(64);
  for (size_t i = 0; i < 64; ++i) {
    small[i] = static_cast<float>(1000.0 + 37.0 * static_cast<double>(i % 11));
    scaled[i] = 1e150 * small[i];  // parallel to A: cosine 1
    near_limit[i] = (i % 8 == 0 ? 3e153 : -1.5e153) * (i < 32 ? 1 : -1);
  }
  Fixture a, b;
  a.tensors.clear(), b.tensors.clear();
  a.tensors.push_back({"blk.5.attn_q.weight", kF32, {8, 8}, f32_bytes(small)});
  b.tensors.push_back({"blk.5.attn_q.weight", 28, {8, 8}, bytes_of(scaled)});
  // Each square is finite (9e306) but their sum is not.
  a.tensors.push_back({"blk.5.attn_k.weight", kF32, {8, 8}, f32_bytes(small)});
  b.tensors.push_back({"blk.5.attn_k.weight", 28, {8, 8}, bytes_of(near_limit)});
  DiffOptions o;
  o.values = true;
  const DiffReport r = diff(a, b, o);
  const ErrorMetrics& q = *find(r, "blk.5.attn_q.weight").metrics;
  EXPECT_EQ(q.too_large, 0u);
  ASSERT_TRUE(std::isfinite(q.sum_sq_x));
  EXPECT_NEAR(q.cosine(), 1.0, 1e-12);
  EXPECT_GT(q.rel(), 1e149);
  const ErrorMetrics& k = *find(r, "blk.5.attn_k.weight").metrics;
  EXPECT_EQ(k.too_large, 0u);
  EXPECT_EQ(k.count, 64u);
  ASSERT_TRUE(std::isinf(k.sum_sq_x));
  EXPECT_TRUE(std::isnan(k.cosine())) << k.cosine();
  // Pooled in a group, the first tensor's cosine against a plain f32 pair: the sums of
  // squares are 1e8-ish and 1e302-ish, and the pooled cosine is their true ratio.
  ASSERT_EQ(r.by_role.size(), 1u);
  EXPECT_TRUE(std::isnan(r.by_role[0].metrics.cosine()));  // k's infinite sum is pooled in
  ErrorMetrics plain;  // an equal pair of f32 tensors, pooled with q as a group would
  plain.count = 64;
  plain.sum_dot = plain.sum_sq_x = plain.sum_sq_base = 4e8;
  plain.merge(q);
  EXPECT_NEAR(plain.cosine(),
              (4e8 + q.sum_dot) / std::sqrt(4e8 + q.sum_sq_base) / std::sqrt(4e8 + q.sum_sq_x),
              1e-15);
  EXPECT_GT(plain.cosine(), 1e-6);
  // Tiny norms whose product underflows.
  ErrorMetrics tiny;
  tiny.count = 1;
  tiny.sum_sq_base = tiny.sum_sq_x = 1e-200;
  tiny.sum_dot = 0.5e-200;
  EXPECT_NEAR(tiny.cosine(), 0.5, 1e-15);
  // With an overflowed difference sum, no error metric is known.
  ErrorMetrics inf_sums;
  inf_sums.count = 2;
  inf_sums.sum_sq_base = 1;
  inf_sums.sum_sq_x = 1;
  inf_sums.sum_sq_diff = std::numeric_limits<double>::infinity();
  inf_sums.weighted = true;
  inf_sums.sum_w = 2;
  inf_sums.sum_w_sq_base = 1;
  inf_sums.sum_w_sq_diff = std::numeric_limits<double>::infinity();
  for (double v : {inf_sums.rmse(), inf_sums.rel(), inf_sums.snr_db(), inf_sums.weighted_rmse(),
                   inf_sums.weighted_rel()})
    EXPECT_TRUE(std::isnan(v)) << v;
}

TEST(diff, values_compare_bytes_and_decode_only_what_differs) {
  Fixture a, b;
  b.tensor("blk.0.attn_q.weight").payload = f32_bytes(perturbed(eighths(64, 2), 0.1, 3));
  DiffOptions o;
  o.values = true;
  const DiffReport r = diff(a, b, o);
  EXPECT_EQ(r.counts.same, 3u);
  EXPECT_EQ(r.counts.bytes, 1u);
  EXPECT_EQ(r.hashed_bytes, 0u);
  EXPECT_EQ(r.decoded_elements, 2u * 64);
  for (const auto& t : r.tensors) {
    EXPECT_FALSE(t.a->xxh3) << t.name;  // compared, not hashed
    EXPECT_EQ(t.metrics.has_value(), t.name == "blk.0.attn_q.weight") << t.name;
  }
}

TEST(diff, results_do_not_depend_on_the_thread_count) {
  // 2.2M elements: several work items of about 1M elements, each of many slices.
  Fixture a, b;
  const auto base = perturbed(eighths(1100 * 2000, 4), 0.3, 1);
  const auto x = perturbed(base, 0.01, 2);
  a.tensors.push_back({"blk.1.ffn_down_exps.weight", kF32, {1100, 2000}, f32_bytes(base)});
  b.tensors.push_back({"blk.1.ffn_down_exps.weight", kF32, {1100, 2000}, f32_bytes(x)});
  TempDir dir;
  const Model ma = Model::open(a.write(dir, "a.gguf")), mb = Model::open(b.write(dir, "b.gguf"));
  DiffOptions o;
  o.values = true;
  std::vector<ErrorMetrics> runs;
  for (unsigned threads : {1u, 2u, 3u}) {
    o.threads = threads;
    runs.push_back(*find(diff_models(ma, mb, o), "blk.1.ffn_down_exps.weight").metrics);
  }
  for (const ErrorMetrics& m : runs) {
    EXPECT_EQ(m.sum_sq_diff, runs[0].sum_sq_diff);
    EXPECT_EQ(m.sum_sq_base, runs[0].sum_sq_base);
    EXPECT_EQ(m.sum_dot, runs[0].sum_dot);
  }
  expect_metrics(runs[0], expected(base, x));
}

TEST(diff, metrics_across_types_bf16_and_q8_0) {
  Fixture a, b;
  const auto base = floats_of(a.tensor("blk.0.attn_q.weight"));
  const auto x = perturbed(base, 0.3, 1);
  a.tensor("blk.0.attn_q.weight").payload = f32_bytes(x);
  // B: bf16 of the exact eighths (their low 16 bits are zero).
  auto& tb = b.tensor("blk.0.attn_q.weight");
  tb.type = kBF16;
  tb.payload.clear();
  for (float f : base) {
    const uint32_t bits = std::bit_cast<uint32_t>(f);
    ASSERT_EQ(bits & 0xFFFF, 0u);
    tb.payload.push_back(static_cast<uint8_t>(bits >> 16));
    tb.payload.push_back(static_cast<uint8_t>(bits >> 24));
  }
  // And a q8_0 tensor (ne0 a multiple of 32): scale 1/8 (f16 0x3000), codes k, values k/8.
  a.tensor("blk.1.ffn_up_exps.weight").shape = {32, 3};
  b.tensor("blk.1.ffn_up_exps.weight").shape = {32, 3};
  const auto q8_values = floats_of(b.tensor("blk.1.ffn_up_exps.weight"));
  auto& tq = b.tensor("blk.1.ffn_up_exps.weight");
  tq.type = kQ8_0;
  tq.payload.clear();
  for (size_t blk = 0; blk < q8_values.size() / 32; ++blk) {
    tq.payload.push_back(0x00);
    tq.payload.push_back(0x30);
    for (size_t i = 0; i < 32; ++i)
      tq.payload.push_back(static_cast<uint8_t>(static_cast<int8_t>(q8_values[blk * 32 + i] * 8)));
  }
  const auto up_a = perturbed(q8_values, 0.05, 9);
  a.tensor("blk.1.ffn_up_exps.weight").payload = f32_bytes(up_a);
  DiffOptions o;
  o.values = true;
  const DiffReport r = diff(a, b, o);
  const TensorDiff& q = find(r, "blk.0.attn_q.weight");
  EXPECT_EQ(q.change, TensorChange::kType);
  ASSERT_TRUE(q.metrics);
  expect_metrics(*q.metrics, expected(x, base));
  const TensorDiff& up = find(r, "blk.1.ffn_up_exps.weight");
  ASSERT_TRUE(up.metrics);
  expect_metrics(*up.metrics, expected(up_a, q8_values));
}

TEST(diff, nan_and_inf_are_counted_and_left_out) {
  Fixture a, b;
  auto base = floats_of(a.tensor("blk.0.attn_q.weight"));
  auto x = perturbed(base, 0.01, 5);
  base[3] = std::numeric_limits<float>::quiet_NaN();
  base[9] = std::numeric_limits<float>::quiet_NaN();
  x[9] = -std::numeric_limits<float>::infinity();
  x[20] = std::numeric_limits<float>::infinity();
  a.tensor("blk.0.attn_q.weight").payload = f32_bytes(base);
  b.tensor("blk.0.attn_q.weight").payload = f32_bytes(x);
  DiffOptions o;
  o.values = true;
  const ErrorMetrics m = *find(diff(a, b, o), "blk.0.attn_q.weight").metrics;
  EXPECT_EQ(m.nan_base, 2u);
  EXPECT_EQ(m.inf_base, 0u);
  EXPECT_EQ(m.nan_x, 0u);
  EXPECT_EQ(m.inf_x, 2u);
  EXPECT_EQ(m.count, 61u);
  std::vector<float> fb, fx;
  for (size_t i = 0; i < base.size(); ++i)
    if (std::isfinite(base[i]) && std::isfinite(x[i])) fb.push_back(base[i]), fx.push_back(x[i]);
  expect_metrics(m, expected(fb, fx));
}

// With no finite pair left (every value of A NaN), no metric is known: all are NaN (null in
// JSON, "-" in text), never a perfect-looking 0.
TEST(diff, metrics_of_no_finite_pair_are_unknown) {
  Fixture a, b;
  auto base = floats_of(a.tensor("blk.0.attn_q.weight"));
  const auto x = perturbed(base, 0.01, 5);
  std::fill(base.begin(), base.end(), std::numeric_limits<float>::quiet_NaN());
  a.tensor("blk.0.attn_q.weight").payload = f32_bytes(base);
  b.tensor("blk.0.attn_q.weight").payload = f32_bytes(x);
  DiffOptions o;
  o.values = true;
  const ErrorMetrics m = *find(diff(a, b, o), "blk.0.attn_q.weight").metrics;
  EXPECT_EQ(m.count, 0u);
  EXPECT_EQ(m.nan_base, base.size());
  for (double v : {m.rmse(), m.rel(), m.cosine(), m.snr_db(), m.max_abs_diff()})
    EXPECT_TRUE(std::isnan(v)) << v;
  // All-zero importance weights say nothing either.
  ErrorMetrics w;
  w.weighted = true;
  w.count = 4;
  w.sum_sq_diff = w.sum_sq_base = 1;
  EXPECT_TRUE(std::isnan(w.weighted_rel()));
  EXPECT_TRUE(std::isnan(w.weighted_rmse()));
}

TEST(diff, importance_weights_columns_per_expert) {
  Fixture a, b;
  const auto base = floats_of(a.tensor("blk.1.ffn_up_exps.weight"));
  const auto x = perturbed(base, 0.02, 4);
  b.tensor("blk.1.ffn_up_exps.weight").payload = f32_bytes(x);
  b.tensor("blk.0.attn_q.weight").payload[0] ^= 0x40;
  std::vector<float> w(3 * 8);  // 3 experts x ne0 = 8, expert-major
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.5f + static_cast<float>(i % 7) * (i < 8 ? 1 : 3);
  Imatrix im;
  im.add("blk.1.ffn_up_exps.weight", {3, 8, w, {}, {}});
  std::vector<double> per_element(96);
  for (int e = 0; e < 3; ++e)
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 8; ++c) per_element[c + 8 * (r + 4 * e)] = w[e * 8 + c];
  DiffOptions o;
  o.values = true;
  o.importance = &im;
  const DiffReport r = diff(a, b, o);
  const TensorDiff& t = find(r, "blk.1.ffn_up_exps.weight");
  ASSERT_TRUE(t.metrics && t.metrics->weighted);
  expect_metrics(*t.metrics, expected(base, x, per_element), true);
  EXPECT_EQ(find(r, "blk.0.attn_q.weight").note, "not in the importance matrix");
  EXPECT_FALSE(find(r, "blk.0.attn_q.weight").metrics->weighted);

  // One slice of ne0 weights is shared by all experts.
  im.add("blk.1.ffn_up_exps.weight", {1, 8, {w.begin(), w.begin() + 8}, {}, {}});
  for (size_t i = 0; i < 96; ++i) per_element[i] = w[i % 8];
  const DiffReport shared = diff(a, b, o);
  expect_metrics(*find(shared, "blk.1.ffn_up_exps.weight").metrics, expected(base, x, per_element),
                 true);

  im.add("blk.1.ffn_up_exps.weight", {1, 5, {w.begin(), w.begin() + 5}, {}, {}});
  try {
    diff(a, b, o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "tensor 'blk.1.ffn_up_exps.weight': importance entry has 5 values; expected 8 "
                 "(columns) or 24 (3 experts x 8 columns)");
  }
}

TEST(diff, reference_says_which_is_closer) {
  Fixture ref, a, b;
  const auto base = floats_of(ref.tensor("blk.0.attn_q.weight"));
  const auto xa = perturbed(base, 0.01, 1), xb = perturbed(base, 0.05, 2);
  a.tensor("blk.0.attn_q.weight").payload = f32_bytes(xa);
  b.tensor("blk.0.attn_q.weight").payload = f32_bytes(xb);
  const auto up = floats_of(ref.tensor("blk.1.ffn_up_exps.weight"));
  const auto up_x = perturbed(up, 0.1, 3);
  a.tensor("blk.1.ffn_up_exps.weight").payload = f32_bytes(up_x);
  b.tensor("blk.1.ffn_up_exps.weight").payload = f32_bytes(up_x);
  a.tensor("token_embd.weight").payload =
      f32_bytes(perturbed(floats_of(ref.tensor("token_embd.weight")), 0.2, 1));
  TempDir dir;
  const Model rm = Model::open(ref.write(dir, "ref.gguf"));
  DiffOptions o;
  o.reference = &rm;
  o.values = true;
  const DiffReport r = diff(a, b, o);
  ASSERT_TRUE(r.reference);
  const TensorDiff& q = find(r, "blk.0.attn_q.weight");
  ASSERT_TRUE(q.closer);
  EXPECT_EQ(*q.closer, Closer::kA);
  expect_metrics(*q.ref_a, expected(base, xa));
  expect_metrics(*q.ref_b, expected(base, xb));
  ASSERT_TRUE(q.metrics);  // B against A as well
  expect_metrics(*q.metrics, expected(xa, xb));
  const TensorDiff& u = find(r, "blk.1.ffn_up_exps.weight");  // A == B: not decoded
  EXPECT_EQ(u.change, TensorChange::kSame);
  EXPECT_FALSE(u.closer || u.ref_a || u.ref_b || u.metrics);
  EXPECT_EQ(*find(r, "token_embd.weight").closer, Closer::kB);
  EXPECT_EQ(r.decoded_elements, 3u * (64 + 32));
}

TEST(diff, summaries_pool_errors_by_role_and_layer) {
  Fixture a, b;
  const auto q = floats_of(a.tensor("blk.0.attn_q.weight"));
  const auto up = floats_of(a.tensor("blk.1.ffn_up_exps.weight"));
  const auto qx = perturbed(q, 0.1, 1), upx = perturbed(up, 0.2, 2);
  b.tensor("blk.0.attn_q.weight").payload = f32_bytes(qx);
  b.tensor("blk.1.ffn_up_exps.weight").payload = f32_bytes(upx);
  b.tensors.push_back({"blk.1.ffn_down_exps.weight", kF32, {4, 8, 3}, f32_bytes(eighths(96, 5))});
  DiffOptions o;
  o.values = true;
  const DiffReport r = diff(a, b, o);
  std::vector<std::string> roles, layers;
  for (const auto& g : r.by_role) roles.push_back(g.key);
  for (const auto& g : r.by_layer) layers.push_back(g.key);
  EXPECT_EQ(roles, (std::vector<std::string>{"routed-up", "routed-down", "attn-proj", "embedding",
                                             "norm"}));
  EXPECT_EQ(layers, (std::vector<std::string>{"0", "1", "-"}));
  const DiffGroup& l1 = r.by_layer[1];
  EXPECT_EQ(l1.tensors, 2u);
  EXPECT_EQ(l1.changed, 2u);
  EXPECT_EQ(l1.measured, 1u);
  EXPECT_EQ(l1.bytes_a, 96u * 4);
  EXPECT_EQ(l1.bytes_b, 2u * 96 * 4);
  expect_metrics(l1.metrics, expected(up, upx));
  // Pooled over both measured tensors: sqrt(sum d^2 / sum a^2) over all their elements.
  std::vector<float> all_a = q, all_b = qx;
  all_a.insert(all_a.end(), up.begin(), up.end());
  all_b.insert(all_b.end(), upx.begin(), upx.end());
  ErrorMetrics pooled;
  for (const auto& g : r.by_layer) pooled.merge(g.metrics);
  EXPECT_NEAR(pooled.rel(), expected(all_a, all_b).rel, kFloatSums * pooled.rel());
}

}  // namespace
}  // namespace gguf
