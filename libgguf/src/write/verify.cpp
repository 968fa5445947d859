// Verification of a written file: re-opened through the validated reader, compared with the
// plan key by key and tensor by tensor, every payload read back and hashed, except ranges a
// copy-on-write file system shares with their input, which FIEMAP proves instead.
#include "write/verify.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <string>
#include <vector>

#include "base/xxh3.h"
#include "gguf/base/escape.h"
#include "io/reflink.h"

namespace gguf::detail {

constexpr uint64_t kReadPiece = uint64_t{4} << 20;  // pread step of the read-back

namespace {

uint64_t hash_range(const ByteSource& src, uint64_t start, uint64_t size) {
  Xxh3 hash;
  hash.reset();
  thread_local std::vector<uint8_t> buf;
  for (uint64_t done = 0; done < size; done += kReadPiece)
    hash.update(src.stream(start + done, std::min(kReadPiece, size - done), buf));
  return hash.digest();
}

}  // namespace

std::shared_ptr<const GgufFile> open_written(const OutputFile& out) {
  std::shared_ptr<const ByteSource> source;
  try {
    source = open_file_source(out.temp_path());
  } catch (const Error& e) {
    // Out of descriptors or address space (ulimit -n, ulimit -v): nothing is known to be wrong
    // with the file, but it could not be checked, so it is not kept.
    throw Error(out.path(), {}, std::nullopt,
                fmt::format("cannot read the written file back to verify it: {}", e.message()));
  }
  try {
    return GgufFile::parse(source);
  } catch (const Error& e) {
    throw Error(
        out.path(), e.object(), e.offset(),
        fmt::format("verification failed: the written file does not parse: {}", e.message()));
  }
}

// Compares a re-opened written file with the plan.
void verify_file(const OutputFile& out, const GgufFile* f, const Shard& sh, uint32_t version,
                 std::span<const WrittenPayload> payloads) {
  auto fail = [&](std::string object, std::string msg) {
    throw Error(out.path(), std::move(object), std::nullopt,
                fmt::format("verification failed: {}", msg));
  };
  if (f->version() != version) fail({}, fmt::format("version {}, wrote {}", f->version(), version));
  if (f->alignment() != sh.layout.alignment)
    fail({}, fmt::format("alignment {}, wrote {}", f->alignment(), sh.layout.alignment));
  if (f->data_offset() != sh.layout.data_offset)
    fail({}, fmt::format("data section at byte {}, wrote it at {}", f->data_offset(),
                         sh.layout.data_offset));
  if (f->file_size() != sh.layout.file_size)
    fail({}, fmt::format("file is {} bytes, wrote {}", f->file_size(), sh.layout.file_size));
  const auto& kvs = f->metadata().entries();
  if (kvs.size() != sh.metadata.size())
    fail({}, fmt::format("{} keys, wrote {}", kvs.size(), sh.metadata.size()));
  for (size_t i = 0; i < kvs.size(); ++i) {
    const KeyValue& want = sh.metadata.entries()[i];
    if (kvs[i].key != want.key || !(kvs[i].value == want.value))
      fail(key_object(want.key), fmt::format("key #{} reads back as {} = {}", i,
                                             key_object(kvs[i].key), format_value(kvs[i].value)));
  }
  const auto& ts = f->tensors();
  if (ts.size() != sh.tensors.size())
    fail({}, fmt::format("{} tensors, wrote {}", ts.size(), sh.tensors.size()));
  for (size_t i = 0; i < ts.size(); ++i) {
    const PlanTensor& want = *sh.tensors[i];
    const TensorInfo& got = ts[i];
    const std::string object = tensor_object(want.name);
    if (got.name != want.name)
      fail(object, fmt::format("tensor #{} reads back as {}", i, tensor_object(got.name)));
    if (got.type_id != want.type_id || got.shape != want.shape)
      fail(object, fmt::format("reads back as {} [{}], wrote {} [{}]", type_name(got.type_id),
                               fmt::join(got.shape, ", "), type_name(want.type_id),
                               fmt::join(want.shape, ", ")));
    if (got.offset != sh.layout.offsets[i] || got.bytes != want.bytes)
      fail(object, fmt::format("offset/size read back as {}/{}, wrote {}/{}", got.offset,
                               got.bytes.value_or(0), sh.layout.offsets[i], want.bytes));
  }
  // The hashed pieces are read back on all cores, largest first, in pieces read through the
  // reader's source of the written file (pread of the page cache) so memory stays bounded.
  // The first failing tensor in file order is reported.
  struct Item {
    size_t tensor;
    const WrittenPiece* piece;
  };
  std::vector<Item> items;
  for (size_t i = 0; i < ts.size(); ++i)
    for (const WrittenPiece& p : payloads[i])
      if (p.xxh3) items.push_back({i, &p});
  std::stable_sort(items.begin(), items.end(),
                   [](const Item& x, const Item& y) { return x.piece->bytes > y.piece->bytes; });
  std::vector<std::string> problems(ts.size());
  const ByteSource& src = f->source();
  tbb::parallel_for(size_t{0}, items.size(), [&](size_t k) {
    const auto [i, p] = items[k];
    const uint64_t start = f->data_start(ts[i]) + p->offset;
    uint64_t got = 0;
    try {
      got = hash_range(src, start, p->bytes);
    } catch (const Error& e) {  // named after the output, not its temp file
      problems[i] = fmt::format("cannot read the payload back at byte {}: {}",
                                e.offset().value_or(start), e.message());
      return;
    }
    if (got == *p->xxh3) return;
    const bool whole = p->offset == 0 && p->bytes == sh.tensors[i]->bytes;
    problems[i] = fmt::format(
        "{} back with xxh3 {:016x}, wrote {:016x}",
        whole ? "payload reads"
              : fmt::format("bytes [{}, {}) of the payload read", p->offset, p->offset + p->bytes),
        got, *p->xxh3);
    // A payload copied from an input file: the likeliest cause is that file changing under
    // the copy (its bytes are hashed and copied in separate passes).
    if (const auto* r = std::get_if<FileRange>(&sh.tensors[i]->source); r && r->source)
      problems[i] += fmt::format(
          "; it was copied from '{}' at byte {}: did that file change during the write?",
          escape_for_terminal(r->source->name()), r->offset + p->offset);
  });
  for (size_t i = 0; i < ts.size(); ++i)
    if (!problems[i].empty()) fail(tensor_object(sh.tensors[i]->name), problems[i]);
}

ShareTally check_unread_ranges(const OutputFile& out, const GgufFile* f, const Shard& sh,
                               std::span<const WrittenPayload> payloads) {
  struct Item {
    size_t tensor;
    const WrittenPiece* piece;
    uint64_t at;  // in the output
  };
  ShareTally tally;
  std::vector<Item> unproven;
  for (size_t i = 0; i < payloads.size(); ++i)
    for (const WrittenPiece& p : payloads[i]) {
      if (p.xxh3) continue;
      const uint64_t at = sh.layout.data_offset + sh.layout.offsets[i] + p.offset;
      if (!why_not_same_extents(p.source->fd(), p.source_offset, out.fd(), at, p.bytes)) {
        tally.shared += p.bytes;
        continue;
      }
      tally.copied += p.bytes;
      unproven.push_back({i, &p, at});
    }
  if (!f) return tally;
  // Not proven shared: the range was copied after all (or its input changed since), so both
  // sides are read and hashed, as any other copied range.
  std::vector<std::string> problems(payloads.size());
  tbb::parallel_for(size_t{0}, unproven.size(), [&](size_t k) {
    const auto [i, p, at] = unproven[k];
    uint64_t want = 0, got = 0;
    try {
      want = hash_range(*p->source, p->source_offset, p->bytes);
      got = hash_range(f->source(), at, p->bytes);
    } catch (const Error& e) {
      problems[i] = fmt::format(
          "cannot read bytes [{}, {}) of the payload and its input to "
          "compare them: {}",
          p->offset, p->offset + p->bytes, e.message());
      return;
    }
    if (want != got)
      problems[i] = fmt::format(
          "bytes [{}, {}) of the payload read back with xxh3 {:016x}, but '{}' at byte {} has "
          "{:016x}: did that file change during the write?",
          p->offset, p->offset + p->bytes, got, escape_for_terminal(p->source->name()),
          p->source_offset, want);
  });
  for (size_t i = 0; i < payloads.size(); ++i)
    if (!problems[i].empty())
      throw Error(out.path(), tensor_object(sh.tensors[i]->name), std::nullopt,
                  fmt::format("verification failed: {}", problems[i]));
  return tally;
}

}  // namespace gguf::detail
