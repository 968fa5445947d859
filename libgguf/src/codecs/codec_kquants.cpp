// Codecs of the k-quant family (q2_K..q8_K): q6_K and q8_K here, the registration of all six;
// q2_K/q3_K and q4_K/q5_K live in codec_kquants_q2q3.cpp and codec_kquants_q4q5.cpp.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "codecs/codec_absmax.h"
#include "codecs/codec_kquants_common.h"
#include "codecs/codec_registry.h"

namespace gguf::detail {
namespace kq {

namespace {

// Shared tail of both q6_K paths: int8 group scales, final codes, packing.
void finish_q6(const float* x, const float* scales, float max_scale, int8_t* L, BlockQ6_K& b) {
  const float iscale = -128.0f / max_scale;
  b.d = fp32_to_fp16(1 / iscale);
  for (int j = 0; j < 16; ++j)
    b.scales[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[j])));
  const float d_all = fp16_to_fp32(b.d);
  for (int j = 0; j < 16; ++j) {
    const float d = d_all * static_cast<float>(b.scales[j]);
    // A zero scale keeps the search's codes, as ggml does.
    if (d == 0) continue;
    for (int i = 0; i < 16; ++i)
      L[16 * j + i] = static_cast<int8_t>(std::clamp(nearest_int(x[16 * j + i] / d), -32, 31) + 32);
  }
  for (int h = 0; h < 2; ++h) {
    const int8_t* Lh = L + 128 * h;
    uint8_t* ql = b.ql + 64 * h;
    uint8_t* qh = b.qh + 32 * h;
    for (int l = 0; l < 32; ++l) {
      const int q0 = Lh[l], q1 = Lh[l + 32], q2 = Lh[l + 64], q3 = Lh[l + 96];
      ql[l] = static_cast<uint8_t>((q0 & 0xF) | ((q2 & 0xF) << 4));
      ql[l + 32] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
      qh[l] =
          static_cast<uint8_t>((q0 >> 4) | ((q1 >> 4) << 2) | ((q2 >> 4) << 4) | ((q3 >> 4) << 6));
    }
  }
}

// Both q6_K paths: the symmetric search per group (weights x^2, or the importance weights as
// given, unscaled), then the shared tail.
void encode_q6(const float* x, uint8_t* dst, int64_t n, const float* qw) {
  for (int64_t ib = 0; ib < n / kQK; ++ib, x += kQK, dst += sizeof(BlockQ6_K)) {
    BlockQ6_K b{};
    int8_t L[kQK];
    float scales[16];
    float max_scale = 0, max_abs = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = search_symmetric(16, 32, x + 16 * j, qw ? qw + 16 * j : nullptr, L + 16 * j);
      const float a = std::fabs(scales[j]);
      if (a > max_abs) {
        max_abs = a;
        max_scale = scales[j];
      }
    }
    if (qw) qw += kQK;
    if (!(max_abs < kGroupMaxEps)) finish_q6(x, scales, max_scale, L, b);
    store_block(b, dst);
  }
}

}  // namespace

void encode_q6_K_ref(const float* x, uint8_t* dst, int64_t n) { encode_q6(x, dst, n, nullptr); }

void encode_q6_K_imatrix(const float* x, uint8_t* dst, int64_t n, const float* qw) {
  encode_q6(x, dst, n, qw);
}

void decode_q6_K(const uint8_t* src, float* y, int64_t n) {
  for (int64_t ib = 0; ib < n / kQK; ++ib, src += sizeof(BlockQ6_K)) {
    const auto b = load_block<BlockQ6_K>(src);
    const float d = fp16_to_fp32(b.d);
    // Per 128 elements: planes 0/1 in the low nibbles of ql[0..31]/ql[32..63], planes 2/3 in
    // their high nibbles, the top two bits of plane p at bits 2p of qh.
    for (int h = 0; h < 2; ++h, y += 128) {
      const uint8_t* ql = b.ql + 64 * h;
      const uint8_t* qh = b.qh + 32 * h;
      for (int part = 0; part < 2; ++part) {
        const int8_t* sc = b.scales + 8 * h + part;
        const float d0 = d * static_cast<float>(sc[0]), d1 = d * static_cast<float>(sc[2]);
        const float d2 = d * static_cast<float>(sc[4]), d3 = d * static_cast<float>(sc[6]);
        for (int l = 16 * part; l < 16 * part + 16; ++l) {
          const int q0 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
          const int q1 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
          const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
          const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
          y[l] = d0 * static_cast<float>(q0);
          y[l + 32] = d1 * static_cast<float>(q1);
          y[l + 64] = d2 * static_cast<float>(q2);
          y[l + 96] = d3 * static_cast<float>(q3);
        }
      }
    }
  }
}

void encode_q8_K(const float* x, uint8_t* dst, int64_t n) {
  for (int64_t ib = 0; ib < n / kQK; ++ib, x += kQK, dst += sizeof(BlockQ8_K)) {
    BlockQ8_K b{};
    const float max = signed_absmax<kQK>(x);
    // ggml leaves bsums of an all-zero block unwritten; ours are zero.
    if (max != 0) {
      const float iscale = -127.0f / max;
      for (int i = 0; i < kQK; ++i)
        b.qs[i] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[i])));
      for (int j = 0; j < 16; ++j) {
        int sum = 0;
        for (int i = 0; i < 16; ++i) sum += b.qs[16 * j + i];
        b.bsums[j] = static_cast<int16_t>(sum);
      }
      b.d = 1 / iscale;
    }
    store_block(b, dst);
  }
}

GGUF_DECODE_CLONES void decode_q8_K(const uint8_t* src, float* y, int64_t n) {
  for (int64_t ib = 0; ib < n / kQK; ++ib, src += sizeof(BlockQ8_K), y += kQK) {
    float d;
    std::memcpy(&d, src + offsetof(BlockQ8_K, d), sizeof d);
    // Read in place: int8_t may alias the payload bytes.
    const int8_t* __restrict qs = reinterpret_cast<const int8_t*>(src + offsetof(BlockQ8_K, qs));
    float* __restrict out = y;
    for (int i = 0; i < kQK; ++i) out[i] = d * static_cast<float>(qs[i]);
  }
}

}  // namespace kq

namespace {

using RefRow = void (*)(const float*, uint8_t*, int64_t);
using ImatrixRow = void (*)(const float*, uint8_t*, int64_t, const float*);

// Without importance ggml quantizes the chunk as one long row; with it, row by row with the
// same n_per_row weights. Both are block-local, so row-by-row is equivalent for the former.
template <RefRow kRef, ImatrixRow kImatrix, size_t kBlockBytes>
void encode_rows(const float* src, uint8_t* dst, int64_t nrows, int64_t n_per_row,
                 const float* imatrix) {
  const int64_t row_bytes = n_per_row / kq::kQK * static_cast<int64_t>(kBlockBytes);
  if (!imatrix) {
    kRef(src, dst, nrows * n_per_row);
    return;
  }
  for (int64_t r = 0; r < nrows; ++r)
    kImatrix(src + r * n_per_row, dst + r * row_bytes, n_per_row, imatrix);
}

// q8_K has no importance path in ggml; weights are ignored.
void encode_q8_K_rows(const float* src, uint8_t* dst, int64_t nrows, int64_t n_per_row,
                      const float*) {
  kq::encode_q8_K(src, dst, nrows * n_per_row);
}

}  // namespace

void register_kquant_codecs(CodecTable& t) {
  using namespace kq;
  entry(t, GgmlType::Q2_K) = {decode_q2_K,
                              encode_rows<encode_q2_K_ref, encode_q2_K_imatrix, sizeof(BlockQ2_K)>};
  entry(t, GgmlType::Q3_K) = {decode_q3_K,
                              encode_rows<encode_q3_K_ref, encode_q3_K_imatrix, sizeof(BlockQ3_K)>};
  entry(t, GgmlType::Q4_K) = {decode_q4_K,
                              encode_rows<encode_q4_K_ref, encode_q4_K_imatrix, sizeof(BlockQ4_K)>};
  entry(t, GgmlType::Q5_K) = {decode_q5_K,
                              encode_rows<encode_q5_K_ref, encode_q5_K_imatrix, sizeof(BlockQ5_K)>};
  entry(t, GgmlType::Q6_K) = {decode_q6_K,
                              encode_rows<encode_q6_K_ref, encode_q6_K_imatrix, sizeof(BlockQ6_K)>};
  entry(t, GgmlType::Q8_K) = {decode_q8_K, encode_q8_K_rows};
}

}  // namespace gguf::detail
