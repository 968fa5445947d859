// Internal: a streaming xxh3-64 hash whose state frees itself, even when an exception passes
// (xxHash's C API leaves that to the caller).
#pragma once

#include <xxhash.h>

#include <cstdint>
#include <new>
#include <span>

namespace gguf::detail {

class Xxh3 {
 public:
  Xxh3() : state_(XXH3_createState()) {
    if (!state_) throw std::bad_alloc();
    reset();
  }
  ~Xxh3() { XXH3_freeState(state_); }
  Xxh3(const Xxh3&) = delete;
  Xxh3& operator=(const Xxh3&) = delete;
  // Starts a new hash (a new Xxh3 starts as reset).
  void reset() { XXH3_64bits_reset(state_); }
  void update(std::span<const uint8_t> b) { XXH3_64bits_update(state_, b.data(), b.size()); }
  uint64_t digest() const { return XXH3_64bits_digest(state_); }

 private:
  XXH3_state_t* state_;
};

}  // namespace gguf::detail
