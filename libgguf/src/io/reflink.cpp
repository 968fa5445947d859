// FIEMAP (ioctl FS_IOC_FIEMAP) over file ranges, and the proof built on it that a range of the
// output shares its physical blocks with the input range it was copied from.
#include "io/reflink.h"

#include <fmt/format.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/vfs.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <memory>

namespace gguf::detail {
namespace {

constexpr uint32_t kBatch = 256;  // extents per ioctl

// Flags under which an extent's physical address does not locate its bytes: still to be
// allocated (delalloc, unknown), read as zeros whatever the blocks hold (unwritten),
// transformed on the way to the page (encoded, encrypted), or packed with other data (inline,
// tail, not aligned).
constexpr uint32_t kNotOnDevice = FIEMAP_EXTENT_UNKNOWN | FIEMAP_EXTENT_DELALLOC |
                                  FIEMAP_EXTENT_ENCODED | FIEMAP_EXTENT_DATA_ENCRYPTED |
                                  FIEMAP_EXTENT_NOT_ALIGNED | FIEMAP_EXTENT_DATA_INLINE |
                                  FIEMAP_EXTENT_DATA_TAIL | FIEMAP_EXTENT_UNWRITTEN;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// The extent of list holding byte `at`, or nullptr (a hole). list is sorted by logical offset.
const Extent* extent_at(const std::vector<Extent>& list, uint64_t at) {
  auto it = std::upper_bound(list.begin(), list.end(), at,
                             [](uint64_t v, const Extent& e) { return v < e.logical; });
  if (it == list.begin()) return nullptr;
  --it;
  return at - it->logical < it->length ? &*it : nullptr;
}

std::string flags_text(uint32_t flags) {
  std::string out;
  const std::pair<uint32_t, const char*> names[] = {{FIEMAP_EXTENT_UNKNOWN, "unknown"},
                                                    {FIEMAP_EXTENT_DELALLOC, "delalloc"},
                                                    {FIEMAP_EXTENT_ENCODED, "encoded"},
                                                    {FIEMAP_EXTENT_DATA_ENCRYPTED, "encrypted"},
                                                    {FIEMAP_EXTENT_NOT_ALIGNED, "not aligned"},
                                                    {FIEMAP_EXTENT_DATA_INLINE, "inline"},
                                                    {FIEMAP_EXTENT_DATA_TAIL, "tail"},
                                                    {FIEMAP_EXTENT_UNWRITTEN, "unwritten"},
                                                    {FIEMAP_EXTENT_SHARED, "shared"}};
  for (const auto& [bit, name] : names)
    if (flags & bit) out += fmt::format("{}{}", out.empty() ? "" : ",", name);
  return out.empty() ? "none" : out;
}

}  // namespace

uint64_t share_block_size(int fd) {
  struct statfs st {};
  if (::fstatfs(fd, &st) != 0 || st.f_bsize <= 0) return 0;
  const auto bs = static_cast<uint64_t>(st.f_bsize);
  return (bs & (bs - 1)) == 0 ? bs : 0;
}

std::optional<std::vector<Extent>> file_extents(int fd, uint64_t offset, uint64_t len, bool sync) {
  std::vector<Extent> out;
  if (len == 0) return out;
  const size_t size = sizeof(fiemap) + kBatch * sizeof(fiemap_extent);
  std::unique_ptr<fiemap, FreeDeleter> fm(static_cast<fiemap*>(std::calloc(1, size)));
  if (!fm) return std::nullopt;
  const uint64_t end = offset + len;
  for (uint64_t at = offset; at < end;) {
    std::fill_n(reinterpret_cast<char*>(fm.get()), size, 0);
    fm->fm_start = at;
    fm->fm_length = end - at;
    fm->fm_flags = sync ? FIEMAP_FLAG_SYNC : 0;
    fm->fm_extent_count = kBatch;
    if (::ioctl(fd, FS_IOC_FIEMAP, fm.get()) != 0) return std::nullopt;
    if (fm->fm_mapped_extents == 0) break;  // the rest is a hole
    bool last = false;
    for (uint32_t i = 0; i < fm->fm_mapped_extents; ++i) {
      const fiemap_extent& e = fm->fm_extents[i];
      out.push_back({e.fe_logical, e.fe_physical, e.fe_length, e.fe_flags});
      last = (e.fe_flags & FIEMAP_EXTENT_LAST) != 0;
    }
    const Extent& tail = out.back();
    // Fewer than asked for: the range has no more. A file system that reports no progress
    // would loop forever.
    if (last || fm->fm_mapped_extents < kBatch || tail.logical + tail.length <= at) break;
    at = tail.logical + tail.length;
  }
  return out;
}

bool range_is_shared(int fd, uint64_t offset, uint64_t len) {
  const auto list = file_extents(fd, offset, len, false);
  if (!list) return false;
  for (uint64_t at = offset; at < offset + len;) {
    const Extent* e = extent_at(*list, at);
    if (!e || !(e->flags & FIEMAP_EXTENT_SHARED) || (e->flags & kNotOnDevice)) return false;
    at = e->logical + e->length;
  }
  return true;
}

std::optional<std::string> why_not_same_extents(int a, uint64_t a_offset, int b, uint64_t b_offset,
                                                uint64_t len) {
  const auto la = file_extents(a, a_offset, len);
  const auto lb = file_extents(b, b_offset, len);
  if (!la || !lb) return std::string("the file system gives no extent map (FIEMAP)");
  return why_not_same_extents(*la, a_offset, *lb, b_offset, len);
}

std::optional<std::string> why_not_same_extents(const std::vector<Extent>& la, uint64_t a_offset,
                                                const std::vector<Extent>& lb, uint64_t b_offset,
                                                uint64_t len) {
  // Walks both ranges together, one stretch at a time: a stretch ends where either file's
  // extent does, so extents split differently in the two files are compared piece by piece.
  for (uint64_t k = 0; k < len;) {
    const Extent* ea = extent_at(la, a_offset + k);
    const Extent* eb = extent_at(lb, b_offset + k);
    if (!ea || !eb)
      return fmt::format("byte {} of the range is in a hole of the {}", k,
                         !ea ? "input" : "output");
    for (const Extent* e : {ea, eb})
      if ((e->flags & kNotOnDevice) || !(e->flags & FIEMAP_EXTENT_SHARED))
        return fmt::format("byte {} of the range is in an extent of the {} flagged {}", k,
                           e == ea ? "input" : "output", flags_text(e->flags));
    const uint64_t pa = ea->physical + (a_offset + k - ea->logical);
    const uint64_t pb = eb->physical + (b_offset + k - eb->logical);
    if (pa != pb)
      return fmt::format("byte {} of the range is at device byte {} in the input, {} in the output",
                         k, pa, pb);
    const uint64_t left_a = ea->logical + ea->length - (a_offset + k);
    const uint64_t left_b = eb->logical + eb->length - (b_offset + k);
    k += std::min({left_a, left_b, len - k});
  }
  return std::nullopt;
}

}  // namespace gguf::detail
