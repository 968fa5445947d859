// k-quant codecs (q2_K..q8_K): hand-built blocks decoded independently of ggml, and
// conformance with ggml's own library: encoder bytes and decoder float bits.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "codec_conformance.h"
#include "codecs/codec_kquants_common.h"
#include "distributions.h"
#include "ggml_ref.h"
#include "gguf/base/fp16.h"
#include "gguf/codecs/codecs.h"

namespace gguf {
namespace {

using testing::Dist;
using testing::GgmlRef;

std::vector<float> decode(GgmlType t, const std::vector<uint8_t>& bytes, size_t n) {
  std::vector<float> out(n);
  dequantize(t, bytes, out);
  return out;
}

template <class Block>
std::vector<uint8_t> bytes_of(const Block& b) {
  std::vector<uint8_t> v(sizeof b);
  std::memcpy(v.data(), &b, sizeof b);
  return v;
}

// ---------------------------------------------------------------- ggml-independent tests

TEST(kquants, nearest_int_rounds_half_to_even) {
  using detail::kq::nearest_int;
  EXPECT_EQ(nearest_int(0.5f), 0);
  EXPECT_EQ(nearest_int(1.5f), 2);
  EXPECT_EQ(nearest_int(2.5f), 2);
  EXPECT_EQ(nearest_int(-0.5f), 0);
  EXPECT_EQ(nearest_int(-1.5f), -2);
  EXPECT_EQ(nearest_int(-2.4999f), -2);
  EXPECT_EQ(nearest_int(4194303.0f), 4194303);
}

TEST(kquants, decodes_hand_built_q4_K_block) {
  detail::kq::BlockQ4_K b{};
  b.d = fp32_to_fp16(0.5f);
  b.dmin = fp32_to_fp16(0.25f);
  // Group j gets scale j+1 and min 2j; groups 4..7 need the split 6-bit encoding.
  const uint8_t sc[8] = {1, 2, 3, 4, 37, 46, 55, 63};
  const uint8_t mn[8] = {0, 2, 4, 6, 40, 50, 60, 33};
  detail::kq::pack_scales_mins(sc, mn, b.scales);
  for (int i = 0; i < 128; ++i) b.qs[i] = static_cast<uint8_t>((i % 16) | ((15 - i % 16) << 4));
  const auto y = decode(GgmlType::Q4_K, bytes_of(b), 256);
  for (int e = 0; e < 256; ++e) {
    const int g = e / 32, l = e % 32;
    const int q = (g % 2 == 0) ? l % 16 : 15 - l % 16;
    const float expect = 0.5f * sc[g] * q - 0.25f * mn[g];
    ASSERT_EQ(y[e], expect) << "element " << e;
  }
}

TEST(kquants, decodes_hand_built_q6_K_block) {
  detail::kq::BlockQ6_K b{};
  b.d = fp32_to_fp16(0.125f);
  for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<int8_t>(j * 9 - 70);
  // Element e gets the 6-bit code e % 64: low nibble in ql, top two bits in qh.
  for (int e = 0; e < 256; ++e) {
    const int code = e % 64, h = e / 128, plane = (e / 32) % 4, l = e % 32;
    b.ql[64 * h + 32 * (plane % 2) + l] |= static_cast<uint8_t>((code & 0xF) << (4 * (plane / 2)));
    b.qh[32 * h + l] |= static_cast<uint8_t>((code >> 4) << (2 * plane));
  }
  const auto y = decode(GgmlType::Q6_K, bytes_of(b), 256);
  for (int e = 0; e < 256; ++e)
    ASSERT_EQ(y[e],
              0.125f * static_cast<float>((e / 16) * 9 - 70) * static_cast<float>(e % 64 - 32))
        << "element " << e;
}

TEST(kquants, decodes_hand_built_q3_K_block) {
  detail::kq::BlockQ3_K b{};
  b.d = fp32_to_fp16(2.0f);
  int ls[16];
  for (int j = 0; j < 16; ++j) ls[j] = j * 4;  // signed scale 4j - 32
  detail::kq::pack_q3_scales(ls, b.scales);
  // Element e gets code e % 8 (value code - 4): bit 2 in hmask, the rest in qs planes.
  for (int e = 0; e < 256; ++e) {
    const int code = e % 8, h = e / 128, plane = (e / 32) % 4, l = e % 32;
    b.qs[32 * h + l] |= static_cast<uint8_t>((code & 3) << (2 * plane));
    if (code & 4) b.hmask[l] |= static_cast<uint8_t>(1u << (e / 32));
  }
  const auto y = decode(GgmlType::Q3_K, bytes_of(b), 256);
  for (int e = 0; e < 256; ++e)
    ASSERT_EQ(y[e], 2.0f * static_cast<float>(4 * (e / 16) - 32) * static_cast<float>(e % 8 - 4))
        << "element " << e;
}

TEST(kquants, decodes_hand_built_q2_K_and_q8_K_blocks) {
  detail::kq::BlockQ2_K b{};
  b.d = fp32_to_fp16(1.0f);
  b.dmin = fp32_to_fp16(0.5f);
  for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<uint8_t>((j % 16) | ((15 - j) << 4));
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, plane = (e / 32) % 4, l = e % 32;
    b.qs[32 * h + l] |= static_cast<uint8_t>((e % 4) << (2 * plane));
  }
  const auto y = decode(GgmlType::Q2_K, bytes_of(b), 256);
  for (int e = 0; e < 256; ++e) {
    const int g = e / 16;
    ASSERT_EQ(y[e], static_cast<float>(g * (e % 4)) - 0.5f * static_cast<float>(15 - g)) << e;
  }

  detail::kq::BlockQ8_K q8{};
  q8.d = 0.75f;
  for (int i = 0; i < 256; ++i) q8.qs[i] = static_cast<int8_t>(i - 128);
  const auto z = decode(GgmlType::Q8_K, bytes_of(q8), 256);
  for (int i = 0; i < 256; ++i) ASSERT_EQ(z[i], 0.75f * static_cast<float>(i - 128));
}

// Round trip error stays within what each bit width allows, so an encoder that packs the
// right-looking bytes into the wrong places fails even without ggml.
TEST(kquants, round_trip_error_shrinks_with_bits) {
  // Fixed data: the limits hold for these rows, not necessarily for every salted draw.
  const auto x = testing::make_rows(Dist::kUniform, 16, 256, testing::Fixed{7});
  const auto imp = testing::make_importance(256, testing::Fixed{7});
  const GgmlType types[] = {GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K,
                            GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_K};
  const double limit[] = {0.17, 0.09, 0.042, 0.021, 0.0105, 0.003};
  for (int k = 0; k < 6; ++k) {
    for (bool use_imp : {false, true}) {
      SCOPED_TRACE(std::string(traits(types[k]).name) + (use_imp ? " imatrix" : ""));
      std::vector<uint8_t> q(*row_bytes(types[k], 256) * 16);
      quantize(types[k], x, 16, 256,
               use_imp ? std::span<const float>(imp) : std::span<const float>{}, q);
      const auto y = decode(types[k], q, x.size());
      double se = 0;
      for (size_t i = 0; i < x.size(); ++i) se += (x[i] - y[i]) * (x[i] - y[i]);
      EXPECT_LT(std::sqrt(se / x.size()), limit[k]);
    }
  }
}

TEST(kquants, zero_rows_encode_to_zero_values) {
  const std::vector<float> x(512, 0.0f);
  for (GgmlType t : {GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                     GgmlType::Q8_K}) {
    std::vector<uint8_t> q(*row_bytes(t, 512));
    quantize(t, x, 1, 512, {}, q);
    for (float v : decode(t, q, 512)) ASSERT_EQ(v, 0.0f) << traits(t).name;
  }
}

// ---------------------------------------------------------------- SIMD forms vs scalar forms

// Groups that stress the searches: every distribution, exact ties at .5 steps, signed zeros,
// subnormals, values near the float limits, infinities and NaN.
std::vector<std::vector<float>> search_inputs(int n) {
  std::vector<std::vector<float>> groups;
  constexpr int kPerDist = 120;
  uint64_t seed = 500;
  for (Dist d : testing::all_dists()) {
    const auto rows = testing::make_rows(d, kPerDist, n, ++seed);
    for (int r = 0; r < kPerDist; ++r)
      groups.emplace_back(rows.begin() + r * n, rows.begin() + (r + 1) * n);
  }
  std::mt19937_64 rng(testing::salted(77));
  for (int r = 0; r < 400; ++r) {
    std::vector<float> g(n);
    const float step = std::ldexp(1.0f, static_cast<int>(rng() % 40) - 20);
    for (auto& v : g) v = step * 0.5f * static_cast<float>(static_cast<int>(rng() % 17) - 8);
    groups.push_back(g);
  }
  const float specials[] = {0.0f,     -0.0f,     1e-45f,        -1e-40f, 1e-38f,
                            3e38f,    -3e38f,    1e30f,         1e-30f,  65504.0f,
                            INFINITY, -INFINITY, std::nanf(""), 1.0f,    -1.0f};
  for (int r = 0; r < 400; ++r) {
    std::vector<float> g(n);
    for (auto& v : g)
      v = (rng() % 3 == 0) ? specials[rng() % std::size(specials)]
                           : static_cast<float>(static_cast<int>(rng() % 2001) - 1000) * 1e-3f;
    groups.push_back(g);
  }
  return groups;
}

// Equal bits, except that any two NaNs match: which NaN payload survives an operation with
// two NaN operands depends on the compiler's operand order, in ggml as in here.
bool same_float(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b) ||
         (std::isnan(a) && std::isnan(b));
}

std::vector<float> search_weights(const std::vector<float>& x, int kind, uint64_t seed) {
  std::vector<float> w(x.size());
  const auto imp = testing::make_importance(static_cast<int64_t>(x.size()), seed);
  for (size_t i = 0; i < x.size(); ++i)
    w[i] = kind == 0 ? std::fabs(x[i]) : kind == 1 ? imp[i] : kind == 2 ? 0.0f : 1.0f;
  return w;
}

TEST(kquants, simd_symmetric_search_equals_scalar) {
  using namespace detail::kq;
  int checked = 0;
  for (const auto& x : search_inputs(16)) {
    for (int nmax : {4, 32}) {
      for (int kind : {-1, 1, 2}) {
        const auto w = search_weights(x, kind, checked);
        const float* wp = kind < 0 ? nullptr : w.data();
        int8_t a[16], b[16];
        const float sa = search_symmetric(16, nmax, x.data(), wp, a);
        const float sb = search_symmetric_scalar(16, nmax, x.data(), wp, b);
        ASSERT_TRUE(same_float(sa, sb))
            << "group " << checked << ": " << sa << " vs " << sb << testing::salt_note();
        ASSERT_EQ(0, std::memcmp(a, b, 16)) << "group " << checked << testing::salt_note();
        ++checked;
      }
    }
  }
}

// The configurations the encoders use (q2_K ref, q4_K ref, q5_K ref, imatrix paths), and one
// without steps (the first guess stands).
struct AffineConfig {
  int n, nmax;
  detail::kq::AffineSearch p;
};
constexpr AffineConfig kAffineConfigs[] = {
    {16, 3, {-0.5f, 0.1f, 15, true}},    {32, 15, {-1.0f, 0.1f, 20, false}},
    {32, 31, {-0.5f, 0.1f, 15, false}},  {16, 3, {-0.9f, 0.05f, 36, false}},
    {32, 15, {-0.9f, 0.05f, 36, false}}, {32, 31, {-0.9f, 0.05f, 36, false}},
    {16, 3, {-0.5f, 0.1f, 0, true}}};

TEST(kquants, simd_affine_search_equals_scalar) {
  int checked = 0;
  for (const auto& c : kAffineConfigs) {
    for (const auto& x : search_inputs(c.n)) {
      for (int kind : {0, 1, 2, 3}) {
        const auto w = search_weights(x, kind, checked);
        uint8_t a[32], b[32];
        float ma = 0, mb = 0;
        const float sa = detail::kq::search_affine(c.n, c.nmax, x.data(), w.data(), a, &ma, c.p);
        const float sb =
            detail::kq::search_affine_scalar(c.n, c.nmax, x.data(), w.data(), b, &mb, c.p);
        ASSERT_TRUE(same_float(sa, sb))
            << "group " << checked << ": " << sa << " vs " << sb << testing::salt_note();
        ASSERT_TRUE(same_float(ma, mb))
            << "group " << checked << ": " << ma << " vs " << mb << testing::salt_note();
        ASSERT_EQ(0, std::memcmp(a, b, c.n)) << "group " << checked << testing::salt_note();
        ++checked;
      }
    }
  }
}

// The lane-per-group AVX-512 search against the scalar one, group by group, in batches of 16
// (q2_K's super-block) and of 8 and 5 (partly used registers).
TEST(kquants, avx512_affine_groups_equal_scalar) {
  if (!detail::codec_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU, or GGUF_CODEC_SCALAR set";
  int checked = 0;
  for (const auto& c : kAffineConfigs) {
    const auto groups = search_inputs(c.n);
    for (int kind : {0, 1, 2, 3}) {
      for (int batch : {16, 8, 5}) {
        for (size_t first = 0; first + batch <= groups.size(); first += batch) {
          std::vector<float> x;
          for (size_t g = first; g < first + batch; ++g)
            x.insert(x.end(), groups[g].begin(), groups[g].end());
          const auto w = search_weights(x, kind, first);
          uint8_t a[16 * 32];
          float sa[16], ma[16];
          detail::kq::search_affine_groups_avx512(batch, c.n, c.nmax, x.data(), w.data(), a, sa, ma,
                                                  c.p);
          for (int g = 0; g < batch; ++g) {
            uint8_t b[32];
            float mb = 0;
            const float sb = detail::kq::search_affine_scalar(c.n, c.nmax, x.data() + c.n * g,
                                                              w.data() + c.n * g, b, &mb, c.p);
            ASSERT_TRUE(same_float(sa[g], sb) && same_float(ma[g], mb))
                << "group " << first + g << ": scale " << sa[g] << " vs " << sb << ", min " << ma[g]
                << " vs " << mb << testing::salt_note();
            ASSERT_EQ(0, std::memcmp(a + c.n * g, b, c.n))
                << "group " << first + g << testing::salt_note();
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 10000);
}

// make_qp_quants with its trial scales in lanes against the portable loop.
TEST(kquants, avx512_positive_search_equals_scalar) {
  if (!detail::codec_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU, or GGUF_CODEC_SCALAR set";
  int checked = 0;
  for (int n : {16, 32}) {
    for (const auto& x : search_inputs(n)) {
      for (int nmax : {4, 15, 63}) {
        const auto w = search_weights(x, checked % 4, checked);
        uint8_t a[32], b[32];
        const float sa = detail::kq::search_positive(n, nmax, x.data(), a, w.data());
        float sb = 0;
        {
          testing::PortableCodecs portable;
          sb = detail::kq::search_positive(n, nmax, x.data(), b, w.data());
        }
        ASSERT_TRUE(same_float(sa, sb))
            << "group " << checked << ": " << sa << " vs " << sb << testing::salt_note();
        ASSERT_EQ(0, std::memcmp(a, b, n)) << "group " << checked << testing::salt_note();
        ++checked;
      }
    }
  }
}

TEST(kquants, simd_q3_block_search_equals_scalar) {
  const auto groups = search_inputs(16);
  for (size_t first = 0; first + 16 <= groups.size(); first += 16) {
    std::vector<float> x;
    for (size_t g = first; g < first + 16; ++g)
      x.insert(x.end(), groups[g].begin(), groups[g].end());
    int8_t a[256], b[256];
    float sa[16];
    detail::kq::search_q3_block(x.data(), a, sa);
    for (int g = 0; g < 16; ++g) {
      const float sb = detail::kq::search_q3(x.data() + 16 * g, b + 16 * g);
      ASSERT_TRUE(same_float(sa[g], sb))
          << "block " << first / 16 << " group " << g << testing::salt_note();
    }
    ASSERT_EQ(0, std::memcmp(a, b, 256)) << "block " << first / 16 << testing::salt_note();
  }
}

// ---------------------------------------------------------------- conformance with ggml

// Float bits, so NaN payloads and signed zeros count.
std::string first_float_diff(const std::vector<float>& ours, const std::vector<float>& ref) {
  for (size_t i = 0; i < ours.size(); ++i) {
    const uint32_t a = std::bit_cast<uint32_t>(ours[i]), b = std::bit_cast<uint32_t>(ref[i]);
    if (a != b)
      return fmt::format("element {}: ours {} ({:#010x}), ggml {} ({:#010x})", i, ours[i], a,
                         ref[i], b);
  }
  return {};
}

// Bytes block by block; `defined` says which bytes count (null: all).
std::string first_byte_diff(const std::vector<uint8_t>& ours, const std::vector<uint8_t>& ref,
                            size_t block_bytes, const std::vector<bool>* defined = nullptr) {
  size_t bad_blocks = 0;
  std::string first;
  for (size_t b = 0; b * block_bytes < ours.size(); ++b) {
    for (size_t k = 0; k < block_bytes; ++k) {
      const size_t i = b * block_bytes + k;
      if (defined && !(*defined)[i]) continue;
      if (ours[i] != ref[i]) {
        if (first.empty())
          first =
              fmt::format("block {} byte {}: ours {:#04x}, ggml {:#04x}", b, k, ours[i], ref[i]);
        ++bad_blocks;
        break;
      }
    }
  }
  if (first.empty()) return {};
  return fmt::format("{} of {} blocks differ; first: {}", bad_blocks, ours.size() / block_bytes,
                     first);
}

// ggml's q8_K reference leaves the bsums of an all-zero block unwritten.
std::vector<bool> q8_K_defined_bytes(const std::vector<float>& x) {
  using detail::kq::BlockQ8_K;
  const size_t nblocks = x.size() / 256;
  std::vector<bool> defined(nblocks * sizeof(BlockQ8_K), true);
  for (size_t b = 0; b < nblocks; ++b) {
    bool zero = true;
    for (size_t i = 0; i < 256; ++i) zero = zero && x[b * 256 + i] == 0.0f;
    if (!zero) continue;
    for (size_t k = offsetof(BlockQ8_K, bsums); k < sizeof(BlockQ8_K); ++k)
      defined[b * sizeof(BlockQ8_K) + k] = false;
  }
  return defined;
}

enum class Importance { kNone, kRandom, kZero };

const char* importance_name(Importance m) {
  switch (m) {
    case Importance::kNone:
      return "no imatrix";
    case Importance::kRandom:
      return "imatrix";
    case Importance::kZero:
      return "all-zero imatrix";
  }
  return "?";
}

struct Shape {
  int64_t n_per_row, nrows;
};
// Row lengths 256, 512, 4096 and 11 blocks; short rows get more of them so each length
// contributes a similar number of blocks.
constexpr Shape kShapes[] = {{256, 160}, {512, 48}, {4096, 6}, {11 * 256, 8}};

// A type, and whether its portable path runs (types with AVX-512 kernels are checked both ways).
struct EncodeCase {
  GgmlType type;
  bool portable = false;
};

class KquantEncode : public ::testing::TestWithParam<EncodeCase> {
 protected:
  void SetUp() override {
    if (GetParam().portable) portable_.emplace();
  }
  std::optional<testing::PortableCodecs> portable_;
};

TEST_P(KquantEncode, bytes_and_decoded_bits_match_ggml) {
  GGUF_REQUIRE_GGML();
  const GgmlRef& g = GgmlRef::get();
  const GgmlType t = GetParam().type;
  const int id = static_cast<int>(t);
  const size_t block_bytes = traits(t).type_size;
  int64_t rows_checked = 0;
  uint64_t seed = 1;
  for (Dist d : testing::all_dists()) {
    for (const Shape& s : kShapes) {
      for (Importance mode : {Importance::kNone, Importance::kRandom, Importance::kZero}) {
        ++seed;
        // ggml has no importance path for q8_K (an activation type).
        if (t == GgmlType::Q8_K && mode != Importance::kNone) continue;
        SCOPED_TRACE(fmt::format("{}, {} rows of {}, {}", testing::dist_name(d), s.nrows,
                                 s.n_per_row, importance_name(mode)));
        const auto x = testing::make_rows(d, s.nrows, s.n_per_row, seed);
        std::vector<float> imp;
        if (mode == Importance::kRandom) imp = testing::make_importance(s.n_per_row, seed);
        if (mode == Importance::kZero) imp.assign(s.n_per_row, 0.0f);
        const size_t nbytes = *row_bytes(t, s.n_per_row) * s.nrows;
        std::vector<uint8_t> ours(nbytes), ref(nbytes, 0xAB);
        quantize(t, x, s.nrows, s.n_per_row, imp, ours);
        std::vector<bool> defined;
        if (t == GgmlType::Q8_K) {
          // Not reachable through ggml_quantize_chunk; its row function is the reference.
          ASSERT_TRUE(g.quantize_row_ref(id, x.data(), ref.data(), x.size()));
          defined = q8_K_defined_bytes(x);
        } else {
          ASSERT_EQ(g.quantize_chunk(id, x.data(), ref.data(), 0, s.nrows, s.n_per_row,
                                     imp.empty() ? nullptr : imp.data()),
                    nbytes);
        }
        const std::string bytes_diff =
            first_byte_diff(ours, ref, block_bytes, defined.empty() ? nullptr : &defined);
        EXPECT_TRUE(bytes_diff.empty()) << bytes_diff << testing::salt_note();
        // Decoding ggml's bytes must give ggml's floats.
        std::vector<float> ref_y(x.size());
        ASSERT_TRUE(g.dequantize_row(id, ref.data(), ref_y.data(), x.size()));
        const std::string float_diff = first_float_diff(decode(t, ref, x.size()), ref_y);
        EXPECT_TRUE(float_diff.empty()) << float_diff << testing::salt_note();
        if (!bytes_diff.empty() || !float_diff.empty()) return;  // one report per type
        rows_checked += s.nrows;
      }
    }
  }
  RecordProperty("rows_checked", static_cast<int>(rows_checked));
}

// Rows salted with extreme finite values, infinities and NaN: ggml's bytes depend on its
// rounding trick's garbage for out-of-range inputs, and ours must reproduce them.
TEST_P(KquantEncode, extreme_and_non_finite_inputs_match_ggml) {
  GGUF_REQUIRE_GGML();
  const GgmlRef& g = GgmlRef::get();
  const GgmlType t = GetParam().type;
  const int id = static_cast<int>(t);
  const float extremes[] = {0.0f,  -0.0f,  1e-45f,   -1e-40f, 1e-38f, 3e38f,    -3e38f,
                            1e30f, 1e-30f, 65504.0f, 1e20f,   -1e15f, INFINITY, -INFINITY};
  constexpr int64_t kN = 512, kRows = 400;
  std::mt19937_64 rng(testing::salted(3));
  std::vector<float> x(kN * kRows);
  for (auto& v : x) {
    const auto r = rng() % 40;
    v = r == 0   ? extremes[rng() % std::size(extremes)]
        : r == 1 ? std::nanf("")
                 : static_cast<float>(static_cast<int>(rng() % 2001) - 1000) * 1e-3f;
  }
  const auto imp = testing::make_importance(kN, 3);
  for (bool use_imp : {false, true}) {
    if (t == GgmlType::Q8_K && use_imp) continue;
    SCOPED_TRACE(use_imp ? "imatrix" : "no imatrix");
    std::vector<uint8_t> ours(*row_bytes(t, kN) * kRows), ref(ours.size());
    quantize(t, x, kRows, kN, use_imp ? std::span<const float>(imp) : std::span<const float>{},
             ours);
    std::vector<bool> defined;
    if (t == GgmlType::Q8_K) {
      ASSERT_TRUE(g.quantize_row_ref(id, x.data(), ref.data(), x.size()));
      defined = q8_K_defined_bytes(x);
    } else {
      g.quantize_chunk(id, x.data(), ref.data(), 0, kRows, kN, use_imp ? imp.data() : nullptr);
    }
    const std::string diff =
        first_byte_diff(ours, ref, traits(t).type_size, defined.empty() ? nullptr : &defined);
    EXPECT_TRUE(diff.empty()) << diff << testing::salt_note();
    std::vector<float> ref_y(x.size());
    ASSERT_TRUE(g.dequantize_row(id, ref.data(), ref_y.data(), x.size()));
    const std::string float_diff = first_float_diff(decode(t, ref, x.size()), ref_y);
    EXPECT_TRUE(float_diff.empty()) << float_diff << testing::salt_note();
  }
}

// q8_K keeps the first element of largest magnitude (its sign sets the scale's): blocks where
// +m and -m both reach it, in either order, around NaNs and zeros, give ggml's reference bytes.
TEST(kquants, q8_K_magnitude_ties_of_opposite_sign_match_ggml) {
  GGUF_REQUIRE_GGML();
  const GgmlRef& g = GgmlRef::get();
  constexpr int64_t kN = 256, kBlocks = 600;
  std::mt19937_64 rng(testing::salted(41));
  std::vector<float> x(kN * kBlocks);
  for (int64_t b = 0; b < kBlocks; ++b) {
    float* xb = x.data() + kN * b;
    const float m = static_cast<float>(1 + rng() % 1000) * 1e-3f;
    for (int64_t i = 0; i < kN; ++i)
      xb[i] = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) * 1e-3f * m;
    const int64_t first = static_cast<int64_t>(rng() % kN);
    int64_t second = static_cast<int64_t>(rng() % kN);
    if (second == first) second = (first + 1) % kN;
    const float sign = rng() % 2 ? 1.0f : -1.0f;
    xb[first] = sign * m;
    xb[second] = b % 5 == 0 ? sign * m : -sign * m;  // same sign in every fifth block
    if (b % 3 == 0) xb[rng() % kN] = std::nanf("");
    if (b % 7 == 0)
      for (int64_t i = 0; i < kN; ++i)
        if (i != first && i != second) xb[i] = 0.0f;
  }
  std::vector<uint8_t> ours(*row_bytes(GgmlType::Q8_K, kN) * kBlocks), ref(ours.size());
  quantize(GgmlType::Q8_K, x, kBlocks, kN, {}, ours);
  ASSERT_TRUE(g.quantize_row_ref(static_cast<int>(GgmlType::Q8_K), x.data(), ref.data(),
                                 static_cast<int64_t>(x.size())));
  const std::string diff = first_byte_diff(ours, ref, traits(GgmlType::Q8_K).type_size);
  EXPECT_TRUE(diff.empty()) << diff << testing::salt_note();
}

// Without weights, NaNs of any sign and payload next to huge values give ggml's bytes: there
// the payload of a NaN that meets another NaN decides codes (x86 returns the first operand's
// NaN, and the rounding trick turns a payload into a code), so the order of operands matters.
// (Known divergence: weighted encodes of blocks with two different NaNs, see gguf-requant(1).)
TEST_P(KquantEncode, nan_payloads_without_weights_match_ggml) {
  GGUF_REQUIRE_GGML();
  const GgmlRef& g = GgmlRef::get();
  const GgmlType t = GetParam().type;
  if (t == GgmlType::Q8_K) GTEST_SKIP() << "compared with ggml's _ref row elsewhere";
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_UNDEFINED__)
  // q4_K/q5_K keep the plain x + dm, whose NaN follows GCC's vectorisation of the loop: the
  // optimised build matches ggml's, a sanitized build vectorises differently.
  if (t == GgmlType::Q4_K || t == GgmlType::Q5_K)
    GTEST_SKIP() << "NaN choice follows the vectoriser, which the sanitizers change";
#endif
  constexpr int64_t kN = 256, kRows = 2000;
  std::mt19937_64 rng(testing::salted(11));
  std::vector<float> x(kN * kRows, 0.0f);
  for (int64_t r = 0; r < kRows; ++r) {
    float* row = x.data() + r * kN;
    for (int k = 0; k < 1 + static_cast<int>(rng() % 3); ++k)  // NaNs, random sign and payload
      row[rng() % kN] = std::bit_cast<float>(0x7f800001u | static_cast<uint32_t>(rng()) |
                                             (rng() % 2 ? 0x80000000u : 0u));
    for (int k = 0; k < static_cast<int>(rng() % 3); ++k)  // huge values of either sign
      row[rng() % kN] =
          (rng() % 2 ? 1.0f : -1.0f) * std::ldexp(1.0f, 90 + static_cast<int>(rng() % 37));
    for (int k = 0; k < static_cast<int>(rng() % 8); ++k)
      row[rng() % kN] = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) * 1e-3f;
  }
  std::vector<uint8_t> ours(*row_bytes(t, kN) * kRows), ref(ours.size());
  quantize(t, x, kRows, kN, {}, ours);
  g.quantize_chunk(static_cast<int>(t), x.data(), ref.data(), 0, kRows, kN, nullptr);
  const std::string diff = first_byte_diff(ours, ref, traits(t).type_size, nullptr);
  EXPECT_TRUE(diff.empty()) << diff << testing::salt_note();
}

// Arbitrary payloads (NaN/inf/subnormal scales included) decode to ggml's exact bits.
TEST_P(KquantEncode, random_bytes_decode_like_ggml) {
  GGUF_REQUIRE_GGML();
  const GgmlRef& g = GgmlRef::get();
  const GgmlType t = GetParam().type;
  constexpr size_t kBlocks = 4096;
  const auto bytes = testing::random_bytes(kBlocks * traits(t).type_size, 99 + traits(t).id);
  std::vector<float> ref_y(kBlocks * 256);
  ASSERT_TRUE(g.dequantize_row(static_cast<int>(t), bytes.data(), ref_y.data(), ref_y.size()));
  const std::string diff = first_float_diff(decode(t, bytes, ref_y.size()), ref_y);
  EXPECT_TRUE(diff.empty()) << diff << testing::salt_note();
}

std::string type_param_name(const ::testing::TestParamInfo<EncodeCase>& info) {
  return std::string(traits(info.param.type).name) + (info.param.portable ? "_portable" : "");
}

INSTANTIATE_TEST_SUITE_P(kquants, KquantEncode,
                         ::testing::Values(EncodeCase{GgmlType::Q2_K}, EncodeCase{GgmlType::Q3_K},
                                           EncodeCase{GgmlType::Q4_K}, EncodeCase{GgmlType::Q5_K},
                                           EncodeCase{GgmlType::Q6_K}, EncodeCase{GgmlType::Q8_K},
                                           EncodeCase{GgmlType::Q2_K, true}),
                         type_param_name);

}  // namespace
}  // namespace gguf
