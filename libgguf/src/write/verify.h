// Internal: the read-back verification of written files (verify.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "gguf/format/file.h"
#include "io/output_file.h"
#include "write/shards.h"

namespace gguf::detail {

// Re-opens a written file through the validated reader (its own descriptor and mapping, so
// it stays readable while the writer's descriptor is synced and closed).
std::shared_ptr<const GgufFile> open_written(const OutputFile& out);

// How one payload reached the output, piece by piece in order: pieces hashed as they were
// written, and block-aligned ranges of an input handed to the kernel unread so that a
// copy-on-write file system could share them. A piece may run on into the payload's padding
// (an input's zero padding shared with it).
struct WrittenPiece {
  uint64_t offset = 0;  // in the payload
  uint64_t bytes = 0;
  std::optional<uint64_t> xxh3;        // of the bytes as written; nothing for an unread range
  const ByteSource* source = nullptr;  // an unread range: the input it was copied from
  uint64_t source_offset = 0;
};
using WrittenPayload = std::vector<WrittenPiece>;

// Compares a re-opened written file with its shard of the plan: header, layout, and each
// hashed piece's xxh3 (read back on all cores); throws naming the first difference.
void verify_file(const OutputFile& out, const GgufFile* f, const Shard& sh, uint32_t version,
                 std::span<const WrittenPayload> payloads);

// The unread ranges of a synced output (out still open): each proven by FIEMAP to lie on the
// physical blocks of its input range (shared), or else copied; a copied one, when f (the
// re-opened output) is given, is read and hashed on both sides, and a difference throws.
struct ShareTally {
  uint64_t shared = 0, copied = 0;
};
ShareTally check_unread_ranges(const OutputFile& out, const GgufFile* f, const Shard& sh,
                               std::span<const WrittenPayload> payloads);

}  // namespace gguf::detail
