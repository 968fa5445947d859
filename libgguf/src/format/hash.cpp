// xxh3 hashing of payloads, read in bounded pieces (ByteSource::stream).
#include "gguf/format/hash.h"

#include <fmt/format.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <xxhash.h>

#include <atomic>
#include <memory>
#include <vector>

#include "base/xxh3.h"
#include "format/encoder.h"
#include "gguf/base/threads.h"
#include "gguf/io/source.h"

namespace gguf {

uint64_t xxh3(std::span<const uint8_t> bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

uint64_t value_xxh3(const Value& v) { return xxh3(detail::encode_value(v)); }

std::string hex64(uint64_t h) { return fmt::format("{:016x}", h); }

uint64_t hash_payload(const TensorRef& t, const std::function<bool(uint64_t)>& piece_done) {
  const uint64_t size = t.data().size();
  constexpr uint64_t kPiece = uint64_t{1} << 20;
  thread_local std::vector<uint8_t> buf;
  detail::Xxh3 hash;
  for (uint64_t off = 0; off < size; off += kPiece) {
    const auto piece =
        t.file->source().stream(t.data_start() + off, std::min(kPiece, size - off), buf);
    hash.update(piece);
    if (!piece_done(piece.size())) break;
  }
  return hash.digest();
}

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
  threads = thread_count(threads);
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads);
  tbb::parallel_for(size_t{0}, which.size(), [&](size_t k) {
    out[k] = hash_payload(model.tensors()[which[k]], [&](uint64_t n) {
      const uint64_t d = done.fetch_add(n) + n;
      if (progress) progress(d, total);
      return true;
    });
  });
  return out;
}

}  // namespace gguf
