// xxh3 hashing of payloads straight from the mapping.
#include "gguf/hash.h"

#include <fmt/format.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <xxhash.h>

#include <atomic>
#include <thread>

#include "gguf/source.h"
#include "writer_internal.h"

namespace gguf {

uint64_t xxh3(std::span<const uint8_t> bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

uint64_t value_xxh3(const Value& v) { return xxh3(detail::encode_value(v)); }

std::string hex64(uint64_t h) { return fmt::format("{:016x}", h); }

std::vector<uint64_t> hash_tensors(const Model& model, const std::vector<size_t>& indices,
                                   unsigned threads,
                                   const std::function<void(uint64_t, uint64_t)>& progress) {
  std::vector<size_t> which = indices;
  if (which.empty())
    for (size_t i = 0; i < model.tensors().size(); ++i) which.push_back(i);
  uint64_t total = 0;
  for (size_t i : which) {
    const TensorRef& t = model.tensors()[i];
    total += t.info->require_bytes(t.file->path());
  }
  std::vector<uint64_t> out(which.size());
  std::atomic<uint64_t> done{0};
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads);
  tbb::parallel_for(size_t{0}, which.size(), [&](size_t k) {
    const TensorRef& t = model.tensors()[which[k]];
    const auto data = t.data();
    // Stream in 16 MiB pieces so progress moves and pages are touched once, in order.
    constexpr size_t kChunk = size_t{16} << 20;
    XXH3_state_t* state = XXH3_createState();
    XXH3_64bits_reset(state);
    SequentialRelease read;
    for (size_t off = 0; off < data.size(); off += kChunk) {
      const size_t n = std::min(kChunk, data.size() - off);
      XXH3_64bits_update(state, data.data() + off, n);
      read.done(t.file->source(), t.data_start() + off, n);
      const uint64_t d = done.fetch_add(n) + n;
      if (progress) progress(d, total);
    }
    out[k] = XXH3_64bits_digest(state);
    XXH3_freeState(state);
  });
  return out;
}

}  // namespace gguf
