// gguf-diff's library half: every kind of difference on builder fixtures, and the numeric
// metrics against values computed here with plain loops in double.
#include "gguf/ops/diff.h"

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
#include "gguf_builder.h"
#include "ops/diff_internal.h"

namespace gguf {
namespace {

using testing::GgufBuilder;
using testing::Tag;
using testing::TempDir;
using namespace diff_fixture;

// The metrics, written out independently of the library.
struct Expected {
  double rmse = 0, max_abs = 0, rel = 0, cosine = 0, snr_db = 0, wrmse = 0, wrel = 0;
};

Expected expected(const std::vector<float>& base, const std::vector<float>& x,
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

void expect_metrics(const ErrorMetrics& m, const Expected& e, bool weighted = false,
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

TEST(diff, identical_files_are_identical) {
  const DiffReport r = diff(Fixture{}, Fixture{});
  EXPECT_TRUE(r.identical);
  EXPECT_TRUE(r.metadata.empty());
  EXPECT_EQ(r.counts.same, 4u);
  EXPECT_EQ(r.counts.changed(), 0u);
  EXPECT_EQ(r.hashed_bytes, 2u * (32 + 64 + 96 + 8) * 4);
  for (const auto& t : r.tensors) {
    ASSERT_TRUE(t.a && t.b && t.a->xxh3 && t.b->xxh3);
    EXPECT_EQ(*t.a->xxh3, *t.b->xxh3);
  }
}

TEST(diff, metadata_changes_are_reported_exactly) {
  Fixture a, b;
  a.name = "tiny";
  b.name = "tiny-2";
  a.u32s.push_back({"only.in.a", 1});
  b.u32s.push_back({"only.in.b", 2});
  b.tokens = {"a", "x", "c", "d"};
  const DiffReport r = diff(a, b);
  EXPECT_FALSE(r.identical);
  EXPECT_EQ(r.counts.changed(), 0u);
  ASSERT_EQ(r.metadata.size(), 4u);
  EXPECT_EQ(r.metadata[0].key, "general.name");
  EXPECT_EQ(r.metadata[0].change, MetadataChange::kChanged);
  EXPECT_EQ(*r.metadata[0].a->as_string(), "tiny");
  EXPECT_EQ(*r.metadata[0].b->as_string(), "tiny-2");
  EXPECT_EQ(r.metadata[0].first_difference, 4u);  // the byte after "tiny"
  EXPECT_EQ(r.metadata[1].key, "only.in.a");
  EXPECT_EQ(r.metadata[1].change, MetadataChange::kRemoved);
  EXPECT_FALSE(r.metadata[1].b);
  EXPECT_EQ(r.metadata[2].key, "tokenizer.ggml.tokens");
  EXPECT_EQ(r.metadata[2].first_difference, 1u);
  EXPECT_EQ(r.metadata[3].key, "only.in.b");
  EXPECT_EQ(r.metadata[3].change, MetadataChange::kAdded);
  EXPECT_EQ(*r.metadata[3].b->as_uint(), 2u);
}

// An empty array that changed its element type has no element to point at.
TEST(diff, empty_array_with_another_element_type_has_no_first_difference) {
  TempDir dir;
  GgufBuilder a, b;
  a.array("k.empty", Tag::kU32, std::vector<uint32_t>{});
  b.array("k.empty", Tag::kF32, std::vector<float>{});
  a.write_file(dir.file("a.gguf"));
  b.write_file(dir.file("b.gguf"));
  const Model ma = Model::open(dir.file("a.gguf")), mb = Model::open(dir.file("b.gguf"));
  const DiffReport r = diff_models(ma, mb, {});
  ASSERT_EQ(r.metadata.size(), 1u);
  EXPECT_EQ(r.metadata[0].change, MetadataChange::kChanged);
  EXPECT_FALSE(r.metadata[0].first_difference);
}

TEST(diff, value_type_and_array_changes) {
  TempDir dir;
  GgufBuilder a, b;
  a.u32("k.type", 7).array("k.prefix", Tag::kI32, std::vector<int32_t>{1, 2, 3});
  a.array("k.elem", Tag::kU32, std::vector<uint32_t>{1, 2});
  b.i32("k.type", 7).array("k.prefix", Tag::kI32, std::vector<int32_t>{1, 2, 3, 4});
  b.array("k.elem", Tag::kI32, std::vector<int32_t>{1, 2});
  a.write_file(dir.file("a.gguf"));
  b.write_file(dir.file("b.gguf"));
  const DiffReport r =
      diff_models(Model::open(dir.file("a.gguf")), Model::open(dir.file("b.gguf")), {});
  ASSERT_EQ(r.metadata.size(), 3u);
  EXPECT_EQ(r.metadata[0].a->type(), ValueType::kU32);
  EXPECT_EQ(r.metadata[0].b->type(), ValueType::kI32);
  EXPECT_EQ(r.metadata[1].first_difference, 3u);  // a prefix of the other
  EXPECT_EQ(r.metadata[2].first_difference, 0u);  // element type changed
  const std::string text = render_diff_text(r, {});
  EXPECT_EQ(
      text.substr(text.find("metadata:")),
      "metadata: 3 changed, 0 added, 0 removed\n"
      "  key       change   a                 b                    note\n"
      "  k.type    changed  u32 7             i32 7                value type changed\n"
      "  k.prefix  changed  i32[3] [1, 2, 3]  i32[4] [1, 2, 3, 4]  first difference at index 3\n"
      "  k.elem    changed  u32[2] [1, 2]     i32[2] [1, 2]        element type changed\n"
      "tensors: 0 compared\n"
      "different\n");
}

TEST(diff, each_tensor_change_is_detected) {
  Fixture a, b;
  a.tensors.push_back({"blk.1.ffn_down_exps.weight", kF32, {4}, f32_bytes({1, 2, 3, 4})});
  b.tensors.push_back({"blk.1.ffn_gate_exps.weight", kF32, {4}, f32_bytes({1, 2, 3, 4})});
  b.tensor("token_embd.weight").shape = {4, 8};  // shape
  b.tensor("blk.0.attn_q.weight").type = kBF16;  // type (half bytes)
  b.tensor("blk.0.attn_q.weight").payload.resize(64 * 2);
  b.tensor("blk.1.ffn_up_exps.weight").payload[5] ^= 1;  // bytes
  const DiffReport r = diff(a, b);
  EXPECT_FALSE(r.identical);
  EXPECT_EQ(find(r, "token_embd.weight").change, TensorChange::kShape);
  EXPECT_EQ(find(r, "blk.0.attn_q.weight").change, TensorChange::kType);
  EXPECT_EQ(find(r, "blk.0.attn_q.weight").a->bytes, 256u);
  EXPECT_EQ(find(r, "blk.0.attn_q.weight").b->bytes, 128u);
  EXPECT_EQ(find(r, "blk.1.ffn_up_exps.weight").change, TensorChange::kBytes);
  EXPECT_EQ(find(r, "output_norm.weight").change, TensorChange::kSame);
  EXPECT_EQ(find(r, "blk.1.ffn_down_exps.weight").change, TensorChange::kOnlyA);
  EXPECT_FALSE(find(r, "blk.1.ffn_down_exps.weight").b);
  EXPECT_EQ(find(r, "blk.1.ffn_gate_exps.weight").change, TensorChange::kOnlyB);
  EXPECT_EQ(r.tensors.back().name, "blk.1.ffn_gate_exps.weight");  // B-only tensors come last
  EXPECT_EQ(r.counts.same, 1u);
  EXPECT_EQ(r.counts.only_a + r.counts.only_b + r.counts.shape + r.counts.type + r.counts.bytes,
            5u);
  EXPECT_EQ(r.bytes_a, (32 + 64 + 96 + 8 + 4) * 4u);
  EXPECT_EQ(r.bytes_b, (32 + 96 + 8 + 4) * 4u + 128);
}

// Zero-element tensors of different types: --values has nothing to decode and must not divide
// by a zero row length.
TEST(diff, values_of_empty_tensors_of_different_types) {
  Fixture a, b;
  a.tensors.push_back({"blk.0.attn_k.weight", kF32, {0, 4}, {}});
  b.tensors.push_back({"blk.0.attn_k.weight", kBF16, {0, 4}, {}});
  DiffOptions o;
  o.values = true;
  const DiffReport r = diff(a, b, o);
  EXPECT_EQ(find(r, "blk.0.attn_k.weight").change, TensorChange::kType);
  EXPECT_FALSE(r.identical);
}

TEST(diff, shape_change_takes_precedence_over_type) {
  Fixture a, b;
  b.tensor("token_embd.weight").shape = {16, 2};
  b.tensor("token_embd.weight").type = kBF16;
  b.tensor("token_embd.weight").payload.resize(64);
  EXPECT_EQ(find(diff(a, b), "token_embd.weight").change, TensorChange::kShape);
}

// gguf-py keeps trailing dimensions of 1 that ggml's writer drops; ggml and llama.cpp see one
// shape, and so does the diff: the same bytes are identical, other bytes are measured.
TEST(diff, trailing_dimensions_of_one_are_the_same_shape) {
  Fixture a, b;
  a.tensor("output_norm.weight").shape = {8, 1};
  b.tensor("output_norm.weight").shape = {8, 1, 1, 1};
  a.tensor("blk.0.attn_q.weight").shape = {8, 8, 1};
  b.tensor("blk.0.attn_q.weight").payload = f32_bytes(eighths(64, 5));
  DiffOptions o;
  o.values = true;
  const DiffReport r = diff(a, b, o);
  EXPECT_EQ(find(r, "output_norm.weight").change, TensorChange::kSame);
  const TensorDiff& q = find(r, "blk.0.attn_q.weight");
  EXPECT_EQ(q.change, TensorChange::kBytes);
  ASSERT_TRUE(q.metrics);
  EXPECT_EQ(q.metrics->count, 64u);
  EXPECT_EQ(q.a->shape, (std::vector<int64_t>{8, 8, 1}));
  EXPECT_EQ(q.b->shape, (std::vector<int64_t>{8, 8}));
  Fixture c;
  c.tensor("output_norm.weight").shape = {8, 1, 1, 1};
  EXPECT_TRUE(diff(Fixture(), c).identical);
  c.tensor("output_norm.weight").shape = {1, 8};  // a leading 1 is another shape
  EXPECT_EQ(find(diff(Fixture(), c), "output_norm.weight").change, TensorChange::kShape);
}

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

TEST(diff, every_sum_kernel_agrees_with_plain_loops) {
  const auto base = perturbed(eighths(1000, 3), 0.4, 1);
  const auto x = perturbed(base, 0.02, 5);
  std::vector<float> w(base.size());
  std::vector<double> wd(base.size());
  for (size_t i = 0; i < w.size(); ++i) wd[i] = w[i] = 0.25f * static_cast<float>(1 + i % 9);
  ASSERT_GE(detail::sum_kernel_count(), 1u);
  for (size_t k = 0; k < detail::sum_kernel_count(); ++k) {
    SCOPED_TRACE(k);
    ErrorMetrics m;
    // In pieces of uneven length, as rows arrive.
    for (size_t at = 0, len = 1; at < base.size(); at += len, len = len * 3 % 97 + 1)
      detail::accumulate_with(k, base.data() + at, x.data() + at, std::min(len, base.size() - at),
                              w.data() + at, m);
    EXPECT_EQ(m.count, base.size());
    expect_metrics(m, expected(base, x, wd), true, k == 0 ? kDoubleSums : kFloatSums);
  }
}

// Rows whose weights repeat (one slice of an importance matrix for a run of rows) are summed
// in one pass: the same metrics as the plain loops, for row lengths that are and are not a
// multiple of the kernels' 64-element steps, runs shorter and longer than their blocks, a
// chunk with a NaN (the careful path must index the weights by column) and tiny values (the
// double path).
TEST(diff, every_sum_kernel_sums_runs_of_rows_with_repeating_weights) {
  for (const size_t ne0 : {64u, 256u, 320u, 96u, 37u, 2048u}) {
    for (const size_t rows : {1u, 2u, 7u, 40u}) {
      for (const int kind : {0, 1, 2}) {  // plain, a NaN in the middle, tiny values
        SCOPED_TRACE(::testing::Message() << ne0 << " x " << rows << " kind " << kind);
        auto base = perturbed(eighths(ne0 * rows, 3), 0.4, 1);
        auto x = perturbed(base, 0.02, 5);
        if (kind == 2)
          for (size_t i = 0; i < base.size(); ++i) base[i] *= 1e-22f, x[i] *= 1e-22f;
        std::vector<float> w(ne0);
        for (size_t c = 0; c < ne0; ++c) w[c] = 0.25f * static_cast<float>(1 + (c * 7) % 11);
        const size_t nan_at = base.size() / 2 + 3;
        if (kind == 1) x[nan_at] = std::numeric_limits<float>::quiet_NaN();
        std::vector<float> fb, fx;
        std::vector<double> wd;
        for (size_t i = 0; i < base.size(); ++i) {
          if (kind == 1 && i == nan_at) continue;
          fb.push_back(base[i]);
          fx.push_back(x[i]);
          wd.push_back(w[i % ne0]);
        }
        double w_sum = 0;
        for (const float v : w) w_sum += v;
        for (size_t k = 0; k < detail::sum_kernel_count(); ++k) {
          SCOPED_TRACE(k);
          ErrorMetrics m;
          detail::accumulate_rows_with(k, base.data(), x.data(), rows, ne0, w.data(), w_sum, m);
          EXPECT_EQ(m.count, fb.size());
          EXPECT_EQ(m.nan_x, kind == 1 ? 1u : 0u);
          expect_metrics(m, expected(fb, fx, wd), true,
                         k == 0 || kind != 0 ? kDoubleSums : kFloatSums);
        }
      }
    }
  }
}

// The cosine stays accurate when the norms differ a lot or the vectors are nearly orthogonal,
// where a dot product derived from the sums of squares cancels (B = 1e5 A gave 0.99924).
TEST(diff, every_sum_kernel_keeps_the_cosine_accurate_when_norms_differ) {
  const auto base = perturbed(eighths(5000, 3), 0.4, 1);
  const auto other = perturbed(eighths(5000, 11), 0.3, 7);
  for (const double factor : {1e5, 1e3, 30.0, 1e-4}) {
    for (const bool orthogonal : {false, true}) {
      SCOPED_TRACE(::testing::Message() << factor << (orthogonal ? " unrelated" : " parallel"));
      std::vector<float> x(base.size());
      for (size_t i = 0; i < x.size(); ++i)
        x[i] = static_cast<float>((orthogonal ? other[i] : base[i]) * factor);
      const Expected want = expected(base, x);
      for (size_t k = 0; k < detail::sum_kernel_count(); ++k) {
        SCOPED_TRACE(k);
        ErrorMetrics m;
        for (size_t at = 0; at < base.size(); at += 4096)
          detail::accumulate_with(k, base.data() + at, x.data() + at,
                                  std::min<size_t>(4096, base.size() - at), nullptr, m);
        EXPECT_NEAR(m.cosine(), want.cosine, 2e-6);
      }
    }
  }
}

// Float squares underflow below about 1e-19 and overflow above 1e19: such chunks must be
// summed in double (or on the careful path) by every kernel, to double precision.
TEST(diff, every_sum_kernel_is_exact_for_tiny_and_huge_values) {
  for (const double scale : {1e-22, 1e-12, 1e21}) {
    SCOPED_TRACE(scale);
    auto base = perturbed(eighths(3000, 3), 0.4, 1);
    auto x = perturbed(base, 0.02, 5);
    for (float& v : base) v = static_cast<float>(v * scale);
    for (float& v : x) v = static_cast<float>(v * scale);
    std::vector<float> w(base.size());
    std::vector<double> wd(base.size());
    for (size_t i = 0; i < w.size(); ++i) wd[i] = w[i] = 0.5f * static_cast<float>(1 + i % 5);
    for (size_t k = 0; k < detail::sum_kernel_count(); ++k) {
      SCOPED_TRACE(k);
      for (const bool weighted : {false, true}) {
        ErrorMetrics m;
        detail::accumulate_with(k, base.data(), x.data(), base.size(),
                                weighted ? w.data() : nullptr, m);
        EXPECT_EQ(m.count, base.size());
        EXPECT_EQ(m.nan_base + m.inf_base + m.nan_x + m.inf_x, 0u);
        // 1e-12 is tighter than any float sum could be: only double sums pass.
        expect_metrics(m, weighted ? expected(base, x, wd) : expected(base, x), weighted,
                       scale == 1e-12 ? kFloatSums : kDoubleSums);
      }
    }
  }
}

// Importance weights so large that weighted float squares overflow (1e37 x 16 terms of 1)
// send the chunk to the double path, as huge values do: no infinity reaches a weighted sum.
TEST(diff, every_sum_kernel_survives_huge_importance_weights) {
  for (const auto& [wscale, vscale] :
       std::vector<std::pair<double, double>>{{1e37, 1}, {1e30, 1e5}, {1e20, 1e10}, {3e38, 1e-3}}) {
    SCOPED_TRACE(fmt::format("weights {} values {}", wscale, vscale));
    auto base = perturbed(eighths(3000, 3), 0.4, 1);
    auto x = perturbed(base, 0.02, 5);
    for (float& v : base) v = static_cast<float>(v * vscale);
    for (float& v : x) v = static_cast<float>(v * vscale);
    std::vector<float> w(base.size());
    std::vector<double> wd(base.size());
    for (size_t i = 0; i < w.size(); ++i)
      wd[i] = w[i] = static_cast<float>(wscale * (1 + static_cast<double>(i % 5)) / 5);
    for (size_t k = 0; k < detail::sum_kernel_count(); ++k) {
      SCOPED_TRACE(k);
      ErrorMetrics m;
      detail::accumulate_with(k, base.data(), x.data(), base.size(), w.data(), m);
      ASSERT_TRUE(std::isfinite(m.sum_w_sq_diff) && std::isfinite(m.sum_w_sq_base));
      expect_metrics(m, expected(base, x, wd), true);
    }
  }
}

// q4_K rows are decoded inside the sum kernel (AVX-512) or first (elsewhere, or when asked), on
// either side or both: the metrics must be those of decoding first, to the bit, for every shape
// the values diff hands over
// (whole slices unweighted, runs of rows weighted, lengths that leave a rest after the kernel's
// 1024-pair blocks), and for blocks whose scales make values non-finite (the careful path),
// tiny (the double path) or zero.
TEST(diff, q4_K_decoded_in_the_sum_kernel_gives_the_same_bits) {
  const auto bits = [](double v) { return std::bit_cast<uint64_t>(v); };
  const auto expect_same = [&](const ErrorMetrics& got, const ErrorMetrics& want) {
    EXPECT_EQ(got.count, want.count);
    EXPECT_EQ(bits(got.sum_sq_diff), bits(want.sum_sq_diff));
    EXPECT_EQ(bits(got.sum_sq_base), bits(want.sum_sq_base));
    EXPECT_EQ(bits(got.sum_sq_x), bits(want.sum_sq_x));
    EXPECT_EQ(bits(got.sum_dot), bits(want.sum_dot));
    EXPECT_EQ(bits(got.max_abs), bits(want.max_abs));
    EXPECT_EQ(got.nan_base, want.nan_base);
    EXPECT_EQ(got.inf_base, want.inf_base);
    EXPECT_EQ(got.nan_x, want.nan_x);
    EXPECT_EQ(got.inf_x, want.inf_x);
    EXPECT_EQ(got.weighted, want.weighted);
    EXPECT_EQ(bits(got.sum_w), bits(want.sum_w));
    EXPECT_EQ(bits(got.sum_w_sq_diff), bits(want.sum_w_sq_diff));
    EXPECT_EQ(bits(got.sum_w_sq_base), bits(want.sum_w_sq_base));
    EXPECT_EQ(got.too_large, want.too_large);
  };
  if (!detail::fused_q4_K())
    std::cout << "[   NOTE   ] no AVX-512 here: q4_K sides are decoded first on this CPU\n";
  constexpr size_t kBlockBytes = 144;
  for (const size_t ne0 : {256u, 512u, 768u, 2048u}) {
    for (const size_t rows : {1u, 3u, 8u}) {
      // plain; one block's d = inf, or dmin = NaN (the careful path); one block's scales
      // subnormal; x all zero (the double path); x 1000 times larger (the dot product summed
      // directly: derived, it would cancel)
      for (const int kind : {0, 1, 2, 3, 4, 5}) {
        SCOPED_TRACE(::testing::Message() << ne0 << " x " << rows << " kind " << kind);
        const size_t n = ne0 * rows;
        // Each side as floats and as q4_K blocks (the floats of the blocks: decoded first).
        const auto encode = [&](std::vector<float> values, size_t blk, bool is_x) {
          std::vector<uint8_t> q(n / 256 * kBlockBytes);
          quantize(GgmlType::Q4_K, values, static_cast<int64_t>(rows), static_cast<int64_t>(ne0),
                   {}, q);
          const auto set_half = [&](size_t at, uint16_t h) { std::memcpy(&q[at], &h, 2); };
          blk *= kBlockBytes;
          if (kind == 1) set_half(blk, 0x7c00);
          if (kind == 2) set_half(blk + 2, 0x7e00);
          if (kind == 3) set_half(blk, 0x0001), set_half(blk + 2, 0x0003);
          if (kind == 4 && is_x)
            for (size_t at = 0; at < q.size(); at += kBlockBytes)
              set_half(at, 0), set_half(at + 2, 0);
          std::vector<float> decoded(n);
          dequantize(GgmlType::Q4_K, q, decoded);
          return std::pair{std::move(q), std::move(decoded)};
        };
        const auto base_values = perturbed(eighths(n, 3), 0.4, 1);
        auto x_values = perturbed(base_values, 0.05, 7);
        if (kind == 5)
          for (float& v : x_values) v *= 1000;
        const auto [qb, base] = encode(base_values, 0, false);  // the first block
        const auto [qx, x] = encode(x_values, n / 512, true);   // one in the middle
        std::vector<float> w(ne0);
        for (size_t c = 0; c < ne0; ++c) w[c] = 0.25f * static_cast<float>(1 + (c * 7) % 11);
        double w_sum = 0;
        for (const float v : w) w_sum += v;
        for (const bool weighted : {false, true}) {
          ErrorMetrics want;
          if (weighted)
            detail::accumulate_rows(base.data(), x.data(), rows, ne0, w.data(), w_sum, want);
          else
            detail::accumulate_rows(base.data(), x.data(), 1, n, nullptr, 0, want);
          if (kind == 1 || kind == 2) {
            EXPECT_GT(want.nonfinite(), 0u);
          } else {
            EXPECT_EQ(want.count, n);
          }
          for (const int blocks : {1, 2, 3}) {        // which sides are given as blocks
            for (const bool fused : {true, false}) {  // decoded in the kernel, or first
              SCOPED_TRACE(::testing::Message() << (weighted ? "weighted" : "unweighted")
                                                << ", blocks " << blocks << ", fused " << fused);
              const detail::SumSide sb = blocks & 1 ? detail::SumSide{nullptr, qb.data()}
                                                    : detail::SumSide{base.data(), nullptr};
              const detail::SumSide sx = blocks & 2 ? detail::SumSide{nullptr, qx.data()}
                                                    : detail::SumSide{x.data(), nullptr};
              ErrorMetrics got;
              if (weighted)
                detail::accumulate_rows(sb, sx, rows, ne0, w.data(), w_sum, got, fused);
              else
                detail::accumulate_rows(sb, sx, 1, n, nullptr, 0, got, fused);
              expect_same(got, want);
            }
          }
        }
      }
    }
  }
}

// f64, i32 and i64 hold values float cannot: such tensors are measured in double, so values
// beyond float's range are not infinities and differences below its precision are seen.
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

TEST(diff, selectors_restrict_the_tensors) {
  Fixture a, b;
  b.tensor("blk.0.attn_q.weight").payload[0] ^= 1;
  DiffOptions o;
  o.selector = parse_selector({"1"}, {}, {});
  const DiffReport r = diff(a, b, o);
  EXPECT_TRUE(r.identical);
  ASSERT_EQ(r.tensors.size(), 1u);
  EXPECT_EQ(r.tensors[0].name, "blk.1.ffn_up_exps.weight");
  o.selector = parse_selector({}, {"attn-proj"}, {});
  EXPECT_FALSE(diff(a, b, o).identical);
  o.selector = parse_selector({"7"}, {}, {});
  EXPECT_THROW(diff(a, b, o), Error);
}

// Roles count dimensions as ggml does: [8, 1] is a vector like [8], so a 1-D tensor of a
// matrix kind is "other" whichever way a writer stored it, and which side is A does not change
// what --role selects (found by the logic audit: attn_sinks [4, 1] was "attn").
TEST(diff, roles_do_not_count_trailing_ones) {
  Fixture a, b;
  a.tensors.push_back({"blk.0.attn_sinks.weight", kF32, {8}, f32_bytes(eighths(8, 5))});
  b.tensors.push_back({"blk.0.attn_sinks.weight", kF32, {8, 1}, f32_bytes(eighths(8, 5))});
  DiffOptions o;
  o.selector = parse_selector({}, {"other"}, {});
  for (const bool swapped : {false, true}) {
    SCOPED_TRACE(swapped);
    const DiffReport r = swapped ? diff(b, a, o) : diff(a, b, o);
    EXPECT_TRUE(r.identical);
    ASSERT_EQ(r.tensors.size(), 1u);
    EXPECT_EQ(r.tensors[0].name, "blk.0.attn_sinks.weight");
    EXPECT_EQ(r.tensors[0].role, Role::kOther);
  }
  EXPECT_EQ(classify_tensor("blk.0.attn_sinks.weight", "deepseek2", ggml_dims({8, 1})).role,
            Role::kOther);
  EXPECT_EQ(ggml_dims({}), 1);
  EXPECT_EQ(ggml_dims({8, 1, 1}), 1);
  EXPECT_EQ(ggml_dims({8, 1, 3}), 3);
}

// The selection is made on the tensors of both sides; a layer with no matching tensor (layer
// 0 here, like DeepSeek's dense first layers) is passed over, and messages name both files.
TEST(diff, selection_errors_name_both_files) {
  TempDir dir;
  Fixture fa, fb;
  fb.tensors.push_back({"blk.2.attn_q.weight", kF32, {8, 8}, f32_bytes(eighths(64, 5))});
  const Model a = Model::open(fa.write(dir, "a.gguf"));
  const Model b = Model::open(fb.write(dir, "b.gguf"));
  DiffOptions o;
  o.threads = 2;
  o.selector = parse_selector({"0-1"}, {"routed"}, {});
  DiffReport r = diff_models(a, b, o);
  ASSERT_EQ(r.tensors.size(), 1u);
  EXPECT_EQ(r.tensors[0].name, "blk.1.ffn_up_exps.weight");
  // A layer that only B has is there to compare.
  o.selector = parse_selector({"2"}, {}, {});
  r = diff_models(a, b, o);
  ASSERT_EQ(r.tensors.size(), 1u);
  EXPECT_EQ(r.tensors[0].change, TensorChange::kOnlyB);
  const auto message = [&](const Selector& s) {
    o.selector = s;
    try {
      diff_models(a, b, o);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), Error::Kind::kInput);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(
      message(parse_selector({"7-9"}, {}, {})),
      fmt::format("layers 7-9 do not exist in '{}' or '{}' (layers 0-2)", a.path(), b.path()));
  EXPECT_EQ(
      message(parse_selector({}, {}, {"nothing"})),
      fmt::format("no tensor in '{}' or '{}' is selected by match 'nothing'", a.path(), b.path()));
}

TEST(diff, stop_early_skips_the_rest) {
  Fixture a, b;
  b.tensor("blk.0.attn_q.weight").payload[0] ^= 1;
  DiffOptions o;
  o.stop_early = true;
  const DiffReport r = diff(a, b, o);
  EXPECT_FALSE(r.identical);
  EXPECT_TRUE(r.stopped_early);
  b = a;
  b.name = "other";
  const DiffReport m = diff(a, b, o);
  EXPECT_TRUE(m.stopped_early);
  EXPECT_EQ(m.hashed_bytes, 0u);
  EXPECT_FALSE(diff(a, a, o).stopped_early);
}

TEST(diff, paranoid_confirms_equal_hashes) {
  DiffOptions o;
  o.paranoid = true;
  const DiffReport r = diff(Fixture{}, Fixture{}, o);
  EXPECT_TRUE(r.identical);
  EXPECT_EQ(r.counts.same, 4u);
}

TEST(diff, split_set_equals_merged_file) {
  TempDir dir;
  const Fixture f;
  f.write(dir, "merged.gguf");
  GgufBuilder s1, s2;
  s1.string("general.architecture", "deepseek2").string("general.name", f.name);
  s1.u16("split.no", 0).u16("split.count", 2).i32("split.tensors.count", 4);
  for (const auto& [k, v] : f.u32s) s1.u32(k, v);
  s1.string_array("tokenizer.ggml.tokens", f.tokens);
  s2.u16("split.no", 1).u16("split.count", 2).i32("split.tensors.count", 4);
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    const auto& t = f.tensors[i];
    (i < 2 ? s1 : s2).tensor(t.name, t.type, t.shape, t.payload);
  }
  s1.write_file(dir.file("m-00001-of-00002.gguf"));
  s2.write_file(dir.file("m-00002-of-00002.gguf"));
  const Model split = Model::open(dir.file("m-00001-of-00002.gguf"));
  const Model merged = Model::open(dir.file("merged.gguf"));
  EXPECT_TRUE(diff_models(split, merged, {}).identical);
  EXPECT_TRUE(diff_models(merged, split, {}).identical);
}

TEST(diff, manifest_matches_its_file) {
  TempDir dir;
  Fixture f;
  const Model m = Model::open(f.write(dir, "m.gguf"));
  nlohmann::json doc = manifest_of(f);
  EXPECT_TRUE(diff_manifest(parse_manifest(doc.dump(), "m.json"), m, {}).identical);
  doc["tensors"][1]["xxh3"] = "0123456789abcdef";
  doc["metadata"][1]["value"] = "renamed";
  const DiffReport r = diff_manifest(parse_manifest(doc.dump(), "m.json"), m, {});
  EXPECT_FALSE(r.identical);
  EXPECT_EQ(r.manifest, "m.json");
  EXPECT_EQ(find(r, "blk.0.attn_q.weight").change, TensorChange::kBytes);
  ASSERT_EQ(r.metadata.size(), 1u);
  EXPECT_EQ(r.metadata[0].key, "general.name");
  doc["tensors"][1].erase("xxh3");
  try {
    diff_manifest(parse_manifest(doc.dump(), "m.json"), m, {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "m.json: tensor 'blk.0.attn_q.weight': the manifest has no xxh3 for this "
                 "tensor; write it with gguf-inspect --hashes --json");
  }
}

TEST(diff, manifest_errors_name_the_problem) {
  const auto error_of = [](std::string_view text) -> std::string {
    try {
      parse_manifest(text, "m.json");
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_EQ(error_of("{\"tensors\": ["),
            "m.json: at byte 13: not a JSON document; expected the output of gguf-inspect "
            "--hashes --json");
  EXPECT_EQ(error_of("{}"),
            "m.json: no \"tensors\" array; expected the output of gguf-inspect --hashes --json");
  // A binary file is not JSON at its first byte, whatever brackets it holds further on (a
  // GGUF's were counted as 33 levels of nesting).
  const std::string brackets(40, '[');
  EXPECT_EQ(error_of("GGUF\x03" + brackets),
            "m.json: at byte 0: a GGUF file, not a manifest; expected the output of gguf-inspect "
            "--hashes --json");
  // A NUL byte ends nothing: what follows it is not taken as past the end of the document.
  EXPECT_EQ(error_of(std::string("{\"tensors\": []}\0garbage{", 24)),
            "m.json: at byte 15: not a JSON document (a NUL byte); expected the output of "
            "gguf-inspect --hashes --json");
  // A UTF-8 byte-order mark is skipped, as the JSON parser skips it.
  EXPECT_EQ(error_of("\xEF\xBB\xBF {}"),
            "m.json: no \"tensors\" array; expected the output of gguf-inspect --hashes --json");
  EXPECT_EQ(error_of(" \n\x01" + brackets),
            "m.json: at byte 2: not a JSON document; expected the output of gguf-inspect "
            "--hashes --json");
  // Deep nesting is refused before parsing (a million nested arrays in a shape, or a deep
  // value printed into a message, overflowed the stack), at the bracket one level too deep;
  // brackets inside strings do not count.
  {
    const std::string deep = std::string(100000, '[') + std::string(100000, ']');
    EXPECT_EQ(error_of(R"({"tensors": [{"name": "x", "type": "f32", "shape": )" + deep + "}]}"),
              "m.json: at byte 80: nests deeper than 32 levels; expected the output of "
              "gguf-inspect --hashes --json");
    // A string ending in an escaped backslash ends there; the brackets after it count.
    EXPECT_EQ(error_of(R"({"tensors": [], "k": "a\\", "x": )" + deep + "}"),
              "m.json: at byte 64: nests deeper than 32 levels; expected the output of "
              "gguf-inspect --hashes --json");
    // A text cut inside a string after a backslash is the parser's to report.
    EXPECT_EQ(error_of(R"({"tensors": ["\)"),
              "m.json: at byte 15: not a JSON document; expected the output of gguf-inspect "
              "--hashes --json");
    const std::string ok_deep = std::string(29, '[') + std::string(29, ']');
    EXPECT_EQ(error_of(R"({"tensors": [{"name": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"[[", )"
                       R"("type": "f32", "shape": [4], "x": )" +
                       ok_deep + "}]}"),
              "(no error)");
  }
  // A number too large for a double is not a syntax error to nlohmann, but still no manifest
  // (found by manifest_fuzz: it escaped as an uncaught exception).
  EXPECT_EQ(error_of(R"({"tensors": [{"name": "x", "type": "f32", "shape": [2e56000]}]})"),
            "m.json: not a JSON document gguf-diff can read ([json.exception.out_of_range.406] "
            "number overflow parsing '2e56000'); expected the output of gguf-inspect --hashes "
            "--json");
  EXPECT_EQ(error_of(R"({"tensors": [{"name": "x", "type": "q9_Z", "shape": [4]}]})"),
            "m.json: tensor 'x': unknown tensor type \"q9_Z\"");
  EXPECT_EQ(error_of(R"({"tensors": [{"name": "x", "type": "f32", "shape": [4], "xxh3": "12"}]})"),
            "m.json: tensor 'x': xxh3 \"12\" is not 16 hex digits");
  EXPECT_EQ(error_of(R"({"tensors": [], "metadata": [{"key": "k", "type": "u8", "value": 300}]})"),
            "m.json: key 'k': value 300 does not fit type u8");
  // A tampered entry: the type name against type_id, bytes against type and shape.
  EXPECT_EQ(error_of(R"({"tensors": [{"name": "x", "type": "q4_K", "type_id": 0, "shape": [4]}]})"),
            "m.json: tensor 'x': type \"q4_K\" disagrees with type_id 0");
  EXPECT_EQ(error_of(R"({"tensors": [{"name": "x", "type_id": -1, "shape": [4]}]})"),
            "m.json: tensor 'x': type_id -1 is not a type number");
  EXPECT_EQ(error_of(R"({"tensors": [{"name": "x", "type": "f32", "shape": [4], "bytes": -5}]})"),
            "m.json: tensor 'x': bytes -5 is not a byte count");
  EXPECT_EQ(
      error_of(R"({"tensors": [{"name": "x", "type": "f32", "shape": [4, 2], "bytes": 16}]})"),
      "m.json: tensor 'x': bytes 16 do not fit type f32 and shape [4,2]");
  EXPECT_EQ(
      error_of(R"({"tensors": [{"name": "x", "type": "q8_0", "shape": [32, 2], "bytes": 68}]})"),
      "(no error)");
}

TEST(diff, manifest_needs_no_values) {
  TempDir dir;
  const Fixture f;
  const Model m = Model::open(f.write(dir, "m.gguf"));
  DiffOptions o;
  o.values = true;
  EXPECT_THROW(diff_manifest(parse_manifest(manifest_of(f).dump(), "m.json"), m, o), Error);
}

// Stopping at the first difference (--quiet) must not skip what makes a run trouble: here the
// metadata already differs, and a selection error or a manifest without hashes is still an
// error, as it is without stop_early.
TEST(diff, stop_early_still_reports_trouble) {
  Fixture a, b;
  b.name = "other";
  DiffOptions o;
  o.stop_early = true;
  o.selector = parse_selector({"7"}, {}, {});
  EXPECT_THROW(diff(a, b, o), Error);
  o.selector = parse_selector({}, {}, {"nothing"});
  EXPECT_THROW(diff(a, b, o), Error);
  o.selector = {};
  EXPECT_TRUE(diff(a, b, o).stopped_early);
  TempDir dir;
  const Model m = Model::open(b.write(dir, "m.gguf"));
  nlohmann::json doc = manifest_of(a);
  doc["tensors"][1].erase("xxh3");
  EXPECT_THROW(diff_manifest(parse_manifest(doc.dump(), "m.json"), m, o), Error);
}

// An importance entry that fits no slicing of its tensor is an error whatever differs: also
// when that tensor is identical in A and B, and with stop_early.
TEST(diff, importance_entry_that_does_not_fit_is_an_error_even_when_unused) {
  Fixture a, b;
  Imatrix im;
  im.add("blk.1.ffn_up_exps.weight", {1, 5, std::vector<float>(5, 1.0f), {}, {}});
  DiffOptions o;
  o.values = true;
  o.importance = &im;
  EXPECT_THROW(diff(a, b, o), Error);
  b.name = "other";
  o.stop_early = true;
  EXPECT_THROW(diff(a, b, o), Error);
}

// A summary group whose measured tensors the importance matrix covers only in part has no
// weighted error: pooling the covered ones alone would leave the others' error out (a
// per-layer CI gate on weighted_rel would pass while an uncovered tensor got worse).
TEST(diff, partly_weighted_groups_have_no_weighted_error) {
  Fixture a, b;
  a.tensors.push_back({"blk.1.ffn_down_exps.weight", kF32, {4, 8, 3}, f32_bytes(eighths(96, 5))});
  b.tensors.push_back(a.tensors.back());
  const auto up = floats_of(a.tensor("blk.1.ffn_up_exps.weight"));
  const auto down = floats_of(a.tensor("blk.1.ffn_down_exps.weight"));
  b.tensor("blk.1.ffn_up_exps.weight").payload = f32_bytes(perturbed(up, 0.01, 1));
  b.tensor("blk.1.ffn_down_exps.weight").payload = f32_bytes(perturbed(down, 0.5, 2));
  Imatrix im;
  im.add("blk.1.ffn_up_exps.weight", {1, 8, std::vector<float>(8, 2.0f), {}, {}});
  DiffOptions o;
  o.values = true;
  o.importance = &im;
  const DiffReport r = diff(a, b, o);
  const auto group = [](const std::vector<DiffGroup>& gs, std::string_view key) {
    for (const auto& g : gs)
      if (g.key == key) return g;
    throw std::runtime_error("no group " + std::string(key));
  };
  const DiffGroup l1 = group(r.by_layer, "1");
  EXPECT_EQ(l1.measured, 2u);
  EXPECT_TRUE(std::isfinite(l1.metrics.rel()));
  EXPECT_TRUE(std::isnan(l1.metrics.weighted_rel()));
  EXPECT_TRUE(std::isnan(l1.metrics.weighted_rmse()));
  // A group covered in full keeps its weighted error.
  const DiffGroup up_group = group(r.by_role, "routed-up");
  const ErrorMetrics& t = *find(r, "blk.1.ffn_up_exps.weight").metrics;
  EXPECT_DOUBLE_EQ(up_group.metrics.weighted_rel(), t.weighted_rel());
  EXPECT_DOUBLE_EQ(up_group.metrics.weighted_rmse(), t.weighted_rmse());
}

}  // namespace
}  // namespace gguf
