// Internal: extent sharing on copy-on-write file systems (XFS with reflink=1, btrfs, ...): the
// block size copy_file_range shares in, and FIEMAP proofs that two file ranges lie on the same
// physical blocks, and so hold the same bytes, without reading them (reflink.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gguf::detail {

// The file system block of the file open at fd (statfs), the unit in which copy_file_range
// can share extents: a shared range starts at a multiple of it in both files. 0 when unknown.
uint64_t share_block_size(int fd);

// One FIEMAP extent: file bytes [logical, logical + length) at device bytes [physical, ...).
struct Extent {
  uint64_t logical = 0, physical = 0, length = 0;
  uint32_t flags = 0;  // FIEMAP_EXTENT_*
};

// The extents of fd that overlap [offset, offset + len) (holes have none), after the file's
// dirty pages are written when sync (FIEMAP_FLAG_SYNC): nullopt when the file system has no
// FIEMAP or it fails.
std::optional<std::vector<Extent>> file_extents(int fd, uint64_t offset, uint64_t len,
                                                bool sync = true);

// Whether every byte of [offset, offset + len) of fd lies in an extent marked shared: the quick
// check, right after a copy_file_range, that the kernel shared rather than copied. Without a
// sync (which would stall the write): a shared range is mapped at once, a copied one is not
// (delayed allocation).
bool range_is_shared(int fd, uint64_t offset, uint64_t len);

// The proof that [a_offset, a_offset + len) of file a and [b_offset, b_offset + len) of file b
// hold the same bytes because each byte of one lies on the same physical byte as its
// counterpart in the other, in extents marked shared whose data is on the device (not delayed,
// unwritten, inline, encoded or of unknown location). Extents may split differently in the two
// files, and the range may end inside a block. Returns nothing when proven, else why not.
std::optional<std::string> why_not_same_extents(int a, uint64_t a_offset, int b, uint64_t b_offset,
                                                uint64_t len);
// The same on extent lists already read (sorted by logical offset, as FIEMAP gives them).
std::optional<std::string> why_not_same_extents(const std::vector<Extent>& a, uint64_t a_offset,
                                                const std::vector<Extent>& b, uint64_t b_offset,
                                                uint64_t len);

}  // namespace gguf::detail
