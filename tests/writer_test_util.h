// Helpers shared by the writer tests: a scratch directory, deterministic payload bytes and
// plan tensors built from them.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli_run.h"
#include "gguf/format/types.h"
#include "gguf/write/plan.h"

namespace gguf::testing {

using ScratchDir = TempDir;

// Deterministic pseudo-random bytes (splitmix64), different for each seed.
inline std::vector<uint8_t> pattern_bytes(uint64_t n, uint64_t seed) {
  std::vector<uint8_t> out(static_cast<size_t>(n));
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < out.size(); i += 8) {
    x += 0x9E3779B97F4A7C15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    for (size_t k = 0; k < 8 && i + k < out.size(); ++k)
      out[i + k] = static_cast<uint8_t>(z >> (8 * k));
  }
  return out;
}

inline uint64_t xxh3_of(const std::vector<uint8_t>& b) { return XXH3_64bits(b.data(), b.size()); }

// A tensor whose payload is held in memory: pattern bytes of the size type and shape imply.
inline PlanTensor memory_tensor(std::string name, GgmlType type, std::vector<int64_t> shape,
                                uint64_t seed = 1) {
  PlanTensor t;
  t.name = std::move(name);
  t.type_id = static_cast<uint32_t>(type);
  t.shape = std::move(shape);
  t.bytes = expected_bytes(t);
  t.source =
      MemoryBytes{std::make_shared<const std::vector<uint8_t>>(pattern_bytes(t.bytes, seed))};
  return t;
}

// The payload of a memory tensor (for comparisons).
inline const std::vector<uint8_t>& payload_of(const PlanTensor& t) {
  return *std::get<MemoryBytes>(t.source).data;
}

}  // namespace gguf::testing
