// gguf-diff --values' sum kernels: every kernel this CPU runs against plain loops in double,
// on runs of rows, norms far apart, tiny and huge values, huge weights; and q4_K decoded inside
// the AVX-512 kernel, bit for bit the sums of decoding first.
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
}  // namespace
}  // namespace gguf
