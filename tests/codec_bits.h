// Test helpers for the float and legacy codec tests: bit-exact comparison of float and byte
// vectors with a message naming the first difference.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <span>
#include <string>

namespace gguf::testing {

// Success when a and b hold the same float bit patterns (so NaN equals NaN only by payload).
inline ::testing::AssertionResult same_float_bits(std::span<const float> a,
                                                  std::span<const float> b) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << "sizes " << a.size() << " and " << b.size();
  size_t diffs = 0, first = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i]) && diffs++ == 0) first = i;
  }
  if (diffs == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << fmt::format(
             "{} of {} floats differ; first at {} (block of 32: {}): 0x{:08x} ({}) vs "
             "0x{:08x} ({})",
             diffs, a.size(), first, first / 32, std::bit_cast<uint32_t>(a[first]), a[first],
             std::bit_cast<uint32_t>(b[first]), b[first]);
}

// Success when a and b are the same bytes; block_bytes locates the first differing block.
inline ::testing::AssertionResult same_bytes(std::span<const uint8_t> a, std::span<const uint8_t> b,
                                             size_t block_bytes) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << "sizes " << a.size() << " and " << b.size();
  size_t diffs = 0, first = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i] && diffs++ == 0) first = i;
  }
  if (diffs == 0) return ::testing::AssertionSuccess();
  const size_t blk = first / block_bytes;
  std::string ours, theirs;
  for (size_t i = blk * block_bytes; i < (blk + 1) * block_bytes && i < a.size(); ++i) {
    ours += fmt::format("{:02x}", a[i]);
    theirs += fmt::format("{:02x}", b[i]);
  }
  return ::testing::AssertionFailure()
         << fmt::format("{} of {} bytes differ; first at {} in block {}:\n  {}\n  {}", diffs,
                        a.size(), first, blk, ours, theirs);
}

}  // namespace gguf::testing
