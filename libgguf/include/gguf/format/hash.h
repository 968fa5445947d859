// Streaming xxh3-64 of tensor payloads, split-aware and multi-threaded over tensors.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "gguf/format/model.h"

namespace gguf {

// xxh3-64 of bytes, read in chunks so pages stream through once.
uint64_t xxh3(std::span<const uint8_t> bytes);
// xxh3-64 of a metadata value as the GGUF header stores it (u32 type, then the encoding): a
// manifest records it so that a diff against it is exact where JSON is not (NaN, infinities,
// -0.0, a string's bytes).
uint64_t value_xxh3(const Value& v);
// "0123456789abcdef": 16 lower-case hex digits, as manifests print them.
std::string hex64(uint64_t h);

// xxh3-64 of one tensor's payload, read a piece (1 MiB) at a time through its source's
// stream() so memory stays bounded. After each piece, piece_done(its size) is called; when it
// returns false the reading stops (the result is then of the bytes read so far).
uint64_t hash_payload(const TensorRef& t, const std::function<bool(uint64_t)>& piece_done);

// Hashes the payloads of model.tensors()[i] for each i in indices (all tensors when empty),
// in parallel with up to threads workers (0 = hardware concurrency). Result is indexed like
// indices. progress gets (bytes done, bytes total).
std::vector<uint64_t> hash_tensors(const Model& model, const std::vector<size_t>& indices,
                                   unsigned threads = 0,
                                   const std::function<void(uint64_t, uint64_t)>& progress = {});

}  // namespace gguf
