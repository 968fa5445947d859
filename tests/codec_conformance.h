// Test helpers for codec conformance: decode the same bytes with gguf::dequantize and with
// ggml's dequantize_row_<name> and compare the floats bit for bit (NaNs included); encode the
// same floats with gguf::quantize and ggml_quantize_chunk and compare the bytes.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <vector>

#include "codecs/codec_simd.h"
#include "distributions.h"
#include "ggml_ref.h"
#include "gguf/codecs/codecs.h"
#include "gguf/format/types.h"

namespace gguf::testing {

// Within its scope the codecs run their portable paths (the AVX-512 kernels off), so tests can
// check that both give ggml's bytes.
class PortableCodecs {
 public:
  PortableCodecs() : was_(detail::codec_avx512()) { detail::set_codec_avx512(false); }
  ~PortableCodecs() { detail::set_codec_avx512(was_); }
  PortableCodecs(const PortableCodecs&) = delete;
  PortableCodecs& operator=(const PortableCodecs&) = delete;

 private:
  bool was_;
};

inline int type_id(GgmlType t) { return static_cast<int>(static_cast<uint32_t>(t)); }

// Bytes of n elements of t.
inline size_t bytes_for(GgmlType t, int64_t n) {
  return static_cast<size_t>(*row_bytes(t, static_cast<uint64_t>(n)));
}

// Expects our decode of bytes (n elements of t) to equal ggml's bit for bit.
inline void expect_decode_matches_ggml(GgmlType t, std::span<const uint8_t> bytes, int64_t n,
                                       const std::string& what) {
  std::vector<float> ours(static_cast<size_t>(n)), ref(static_cast<size_t>(n));
  dequantize(t, bytes, ours);
  ASSERT_TRUE(GgmlRef::get().dequantize_row(type_id(t), bytes.data(), ref.data(), n))
      << "ggml has no row decoder for " << traits(t).name;
  int64_t mismatches = 0, first = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (std::bit_cast<uint32_t>(ours[i]) != std::bit_cast<uint32_t>(ref[i])) {
      if (first < 0) first = i;
      ++mismatches;
    }
  }
  if (first >= 0) {
    const int64_t bs = traits(t).block_size;
    ADD_FAILURE() << traits(t).name << " " << what << ": " << mismatches << " of " << n
                  << " values differ; first at " << first << " (block " << first / bs << ")"
                  << std::hex << ": ours 0x" << std::bit_cast<uint32_t>(ours[first]) << ", ggml 0x"
                  << std::bit_cast<uint32_t>(ref[first]) << std::dec << " (" << ours[first]
                  << " vs " << ref[first] << ")" << salt_note();
  }
}

// Quantizes rows with ggml_quantize_chunk, then checks our decoder on ggml's bytes.
inline void check_decode_of_ggml_quant(GgmlType t, const std::vector<float>& src, int64_t nrows,
                                       int64_t n_per_row, const float* imatrix,
                                       const std::string& what) {
  std::vector<uint8_t> q(bytes_for(t, n_per_row) * static_cast<size_t>(nrows));
  const size_t written =
      GgmlRef::get().quantize_chunk(type_id(t), src.data(), q.data(), 0, nrows, n_per_row, imatrix);
  ASSERT_EQ(written, q.size()) << what << salt_note();
  expect_decode_matches_ggml(t, q, nrows * n_per_row, what);
}

// Checks our decoder against ggml's on nblocks blocks of random bytes.
inline void check_decode_of_random_bytes(GgmlType t, int64_t nblocks, uint64_t seed) {
  const int64_t n = nblocks * traits(t).block_size;
  const auto bytes = random_bytes(bytes_for(t, n), seed);
  expect_decode_matches_ggml(t, bytes, n, "random bytes seed " + std::to_string(seed));
}

// Expects gguf::quantize to produce ggml_quantize_chunk's bytes for the same rows and imatrix.
inline void expect_encode_matches_ggml(GgmlType t, const std::vector<float>& src, int64_t nrows,
                                       int64_t n_per_row, const float* imatrix,
                                       const std::string& what) {
  const size_t size = bytes_for(t, n_per_row) * static_cast<size_t>(nrows);
  std::vector<uint8_t> ours(size), ref(size);
  const std::span<const float> importance =
      imatrix ? std::span<const float>(imatrix, static_cast<size_t>(n_per_row))
              : std::span<const float>();
  try {
    quantize(t, src, nrows, n_per_row, importance, ours);
  } catch (const std::exception& e) {
    FAIL() << traits(t).name << " " << what << ": " << e.what() << salt_note();
  }
  ASSERT_EQ(GgmlRef::get().quantize_chunk(type_id(t), src.data(), ref.data(), 0, nrows, n_per_row,
                                          imatrix),
            size)
      << what << salt_note();
  if (ours == ref) return;
  size_t first = 0;
  while (ours[first] == ref[first]) ++first;
  size_t count = 0;
  for (size_t i = 0; i < size; ++i) count += ours[i] != ref[i];
  const size_t block = traits(t).type_size;
  ADD_FAILURE() << traits(t).name << " " << what << ": " << count << " of " << size
                << " bytes differ; first at byte " << first << " (block " << first / block
                << ", byte " << first % block << "): ours " << int{ours[first]} << ", ggml "
                << int{ref[first]} << salt_note();
}

// Our decode of one hand-built block.
inline std::vector<float> decode_block(GgmlType t, std::span<const uint8_t> block) {
  std::vector<float> out(traits(t).block_size);
  dequantize(t, block, out);
  return out;
}

}  // namespace gguf::testing
