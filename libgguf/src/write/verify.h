// Internal: the read-back verification of written files (verify.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "gguf/format/file.h"
#include "io/output_file.h"
#include "write/shards.h"

namespace gguf::detail {

// Re-opens a written file through the validated reader (its own descriptor and mapping, so
// it stays readable while the writer's descriptor is synced and closed).
std::shared_ptr<const GgufFile> open_written(const OutputFile& out);

// Compares a re-opened written file with its shard of the plan: header, layout, and each
// payload's xxh3 against hashes (read back on all cores); throws naming the first difference.
void verify_file(const OutputFile& out, const GgufFile* f, const Shard& sh, uint32_t version,
                 std::span<const uint64_t> hashes);

}  // namespace gguf::detail
