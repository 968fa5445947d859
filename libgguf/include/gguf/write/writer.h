// The one canonical writer: executes a plan into a verified file (or split set) that appears
// at its path complete, or not at all.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gguf/write/plan.h"

namespace gguf {

class Model;

struct WriteOptions {
  bool force = false;              // replace an existing output
  bool verify = true;              // re-open the output and compare every payload's xxh3
  uint64_t split_max_size = 0;     // bytes per shard (0 = no limit)
  uint64_t split_max_tensors = 0;  // tensors per shard (0 = no limit)
  // A split set of exactly these shards: the number of plan tensors in each, in plan order
  // (zeros allowed: a shard of metadata only, as llama-gguf-split --no-tensor-first-split
  // writes). With it the two limits above must be 0. --keep-split gives an input's shards.
  std::vector<uint64_t> split_tensor_counts;
  // Paths the output must not resolve to (same device and inode): the inputs.
  std::vector<std::string> inputs;
  // Called with (bytes done, bytes total) as payloads are written; may be empty.
  std::function<void(uint64_t, uint64_t)> progress;
  // Called with the written files, opened by the validated reader as one model, after they are
  // complete (and verified) and before they reach their paths: a check that throws here leaves
  // nothing behind, like any other failure. May be empty.
  std::function<void(const Model& written)> before_commit;
};

struct WrittenTensor {
  std::string name;
  size_t shard = 0;
  uint64_t offset = 0;  // absolute offset of the payload in its shard
  uint64_t bytes = 0;
  // Of the payload as written, when it was hashed whole: not when part of it was handed to the
  // kernel unread so that a copy-on-write file system could share it (see WriteResult).
  std::optional<uint64_t> xxh3;
};

struct WriteResult {
  std::vector<std::string> paths;  // one, or every shard of a split set
  uint64_t bytes = 0;              // total bytes written
  // How those bytes got there (the three sum to `bytes`): shared with an input's blocks by a
  // copy-on-write file system (XFS with reflink, btrfs: block-aligned copy_file_range), proven
  // by FIEMAP to lie on the input's physical extents; copied from inputs; or written (headers,
  // padding, encoded and in-memory payloads).
  uint64_t bytes_shared = 0, bytes_copied = 0, bytes_written = 0;
  std::vector<WrittenTensor> tensors;
  // Every byte checked: shared ranges by that proof, the rest read back and hashed.
  bool verified = false;
};

// Serialises the header (magic ... tensor infos, padded to the alignment) for metadata and
// tensors whose offsets are laid out canonically; used by the writer and by tests.
std::vector<uint8_t> serialize_header(const Metadata& metadata, uint32_t version,
                                      const std::vector<PlanTensor>& tensors);

// What write_plan checks before it writes anything, for --dry-run: the plan is valid, a split
// set fits split.count (at most 65535 shards), and, when path is not empty, no output path is
// an input or exists without force (nor is a directory, device or FIFO). Returns the paths
// that would be written (shard names made from "out.gguf" when path is empty) and their total
// size, every shard's header and padding included.
struct PlannedWrite {
  std::vector<std::string> paths;
  uint64_t bytes = 0;
};
PlannedWrite check_plan(const Plan& plan, const std::string& path, const WriteOptions& options);

// Writes plan to path. Layout is canonical: each tensor's offset is the running sum of the
// previous payload sizes padded to the alignment, in plan order.
WriteResult write_plan(const Plan& plan, const std::string& path, const WriteOptions& options);

// Writes bytes that are not a GGUF (a safetensors file, say) to path with write_plan's
// guarantees: refused, before anything is written, when path is one of options.inputs or exists
// without options.force (or is a directory, device or FIFO); written to a file beside it,
// synced, and renamed into place, so it appears complete or not at all. Only force and inputs
// of options apply.
void write_file(const std::string& path, std::span<const uint8_t> bytes,
                const WriteOptions& options);
// write_file's checks of path alone, to refuse before the work that makes the bytes.
void check_output(const std::string& path, const WriteOptions& options);
// Whether two output paths name one file, so that one output would replace the other: the same
// path once symbolic links, "." and ".." are resolved (neither needs to exist), or two names
// (hard links) of one existing file.
bool same_output_file(const std::string& a, const std::string& b);

}  // namespace gguf
