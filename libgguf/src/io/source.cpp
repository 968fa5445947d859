// mmap-backed and in-memory byte sources.
#include "gguf/io/source.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "gguf/base/errno_text.h"
#include "gguf/base/error.h"
#include "gguf/base/escape.h"
#include "gguf/io/signals.h"
#include "io/mapped_registry.h"

namespace gguf {

std::span<const uint8_t> ByteSource::bytes(uint64_t offset, uint64_t len) const {
  if (offset > size() || len > size() - offset)
    throw Error(name(), {}, offset,
                fmt::format("range of {} bytes runs past end of file ({} bytes left)", len,
                            offset > size() ? 0 : size() - offset));
  return {base() + offset, static_cast<size_t>(len)};
}

std::span<const uint8_t> ByteSource::stream(uint64_t offset, uint64_t len,
                                            std::vector<uint8_t>& scratch) const {
  const auto in_place = bytes(offset, len);  // the range check
  if (!read_into(offset, len, scratch)) return in_place;
  return {scratch.data(), static_cast<size_t>(len)};
}

namespace detail {
namespace {

struct MapSlot {
  std::atomic<bool> taken{false};
  std::atomic<const uint8_t*> base{nullptr};  // set last, cleared first: a slot is read by it
  std::atomic<uint64_t> size{0};
  std::atomic<const char*> name{nullptr};
};
std::array<MapSlot, 1024> g_maps;

size_t append(char* buf, size_t size, size_t at, const char* s, size_t n) noexcept {
  const size_t k = at < size ? std::min(n, size - at) : 0;
  std::memcpy(buf + at, s, k);
  return at + k;
}

}  // namespace

int register_mapping(const uint8_t* base, uint64_t size, const char* name) noexcept {
  for (size_t i = 0; i < g_maps.size(); ++i) {
    bool expected = false;
    if (!g_maps[i].taken.compare_exchange_strong(expected, true)) continue;
    g_maps[i].size.store(size);
    g_maps[i].name.store(name);
    g_maps[i].base.store(base);
    return static_cast<int>(i);
  }
  return -1;
}

void unregister_mapping(int slot) noexcept {
  if (slot < 0) return;
  g_maps[static_cast<size_t>(slot)].base.store(nullptr);
  g_maps[static_cast<size_t>(slot)].taken.store(false);
}

}  // namespace detail

size_t describe_mapped_address(const void* addr, char* buf, size_t size) noexcept {
  const auto* p = static_cast<const uint8_t*>(addr);
  for (const auto& m : detail::g_maps) {
    const uint8_t* base = m.base.load();
    if (!base || p < base || static_cast<uint64_t>(p - base) >= m.size.load()) continue;
    const char* name = m.name.load();
    size_t at = detail::append(buf, size, 0, name, std::strlen(name));
    at = detail::append(buf, size, at, ": at byte ", 10);
    char digits[24];
    size_t n = 0;
    for (uint64_t v = static_cast<uint64_t>(p - base); n == 0 || v > 0; v /= 10)
      digits[n++] = static_cast<char>('0' + v % 10);
    while (n > 0) at = detail::append(buf, size, at, &digits[--n], 1);
    return at;
  }
  return 0;
}

namespace {

class FileSource final : public ByteSource {
 public:
  explicit FileSource(const std::string& path) : name_(path) {
    // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below like any
    // other file that is not a regular one (the flag means nothing for regular files).
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd_ < 0)
      throw Error(path, {}, std::nullopt, fmt::format("cannot open: {}", std::strerror(errno)));
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd_);
      throw Error(path, {}, std::nullopt, "not a regular file");
    }
    size_ = static_cast<uint64_t>(st.st_size);
    dev_ = st.st_dev;
    ino_ = st.st_ino;
    // The map is made from the descriptor just checked, not from the path again (which could
    // name another file by now), and needs no descriptor of its own.
    if (size_ > 0) {
      // Before the map: nothing after it may throw.
      try {
        bus_name_ = escape_for_terminal(path);
      } catch (...) {
        ::close(fd_);
        throw;
      }
      void* p = ::mmap(nullptr, static_cast<size_t>(size_), PROT_READ, MAP_SHARED, fd_, 0);
      if (p == MAP_FAILED) {
        const int err = errno;
        ::close(fd_);
        throw Error(path, {}, std::nullopt, fmt::format("cannot map: {}", std::strerror(err)));
      }
      map_ = static_cast<const uint8_t*>(p);
      map_slot_ = detail::register_mapping(map_, size_, bus_name_.c_str());
    }
  }
  ~FileSource() override {
    detail::unregister_mapping(map_slot_);
    if (map_) ::munmap(const_cast<uint8_t*>(map_), static_cast<size_t>(size_));
    ::close(fd_);
  }
  const std::string& name() const override { return name_; }
  uint64_t size() const override { return size_; }
  int fd() const override { return fd_; }
  void release(uint64_t offset, uint64_t len) const override {
    if (!map_ || offset >= size_) return;
    len = std::min(len, size_ - offset);
    // Rounded out to 2 MiB windows: a read fault maps the cached pages around it (fault-around,
    // and whole large page-cache folios, up to 2 MiB), so pages just before a range (released
    // with the previous one) or after it would come back and stay. Measured: requant releasing
    // 70 KiB row chunks kept 40 % of its input mapped with page rounding, a few MiB with this.
    constexpr uint64_t kWindow = 2 * 1024 * 1024;
    const uint64_t lo = offset & ~(kWindow - 1);
    const uint64_t hi = std::min(size_, (offset + len + kWindow - 1) & ~(kWindow - 1));
    ::madvise(const_cast<uint8_t*>(map_) + lo, static_cast<size_t>(hi - lo), MADV_DONTNEED);
  }
  std::optional<std::pair<uint64_t, uint64_t>> identity() const override {
    return std::pair<uint64_t, uint64_t>(dev_, ino_);
  }

 protected:
  bool read_into(uint64_t offset, uint64_t len, std::vector<uint8_t>& scratch) const override {
    if (len > scratch.size()) scratch.resize(static_cast<size_t>(len));
    size_t got = 0;
    while (got < len) {
      const ssize_t n = ::pread(fd_, scratch.data() + got, static_cast<size_t>(len) - got,
                                static_cast<off_t>(offset + got));
      if (n < 0) {
        const int err = errno;
        if (err == EINTR) continue;
        throw Error(name_, {}, offset + got, fmt::format("cannot read: {}", errno_text(err)));
      }
      if (n == 0)
        throw Error(name_, {}, offset + got,
                    "a file being read was truncated: was an input changed while in use?");
      got += static_cast<size_t>(n);
    }
    return true;
  }

 protected:
  const uint8_t* base() const override { return map_; }

 private:
  std::string name_;
  int fd_ = -1;
  uint64_t size_ = 0, dev_ = 0, ino_ = 0;
  const uint8_t* map_ = nullptr;
  std::string bus_name_;  // the path escaped, for a SIGBUS message (see mapped_registry.h)
  int map_slot_ = -1;
};

class MemorySource final : public ByteSource {
 public:
  MemorySource(std::vector<uint8_t> bytes, std::string name)
      : bytes_(std::move(bytes)), name_(std::move(name)) {}
  const std::string& name() const override { return name_; }
  uint64_t size() const override { return bytes_.size(); }

 protected:
  const uint8_t* base() const override { return bytes_.data(); }

 private:
  std::vector<uint8_t> bytes_;
  std::string name_;
};

}  // namespace

std::shared_ptr<const ByteSource> open_file_source(const std::string& path) {
  return std::make_shared<FileSource>(path);
}

void reserve_open_files(uint64_t needed) {
  // On top of what the process holds open already (other models, outputs, the thread pool).
  uint64_t open_now = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end;
       it.increment(ec))
    ++open_now;
  constexpr uint64_t kSpare = 64;
  const uint64_t want = open_now + needed + kSpare;
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= want) return;
  rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? static_cast<rlim_t>(want)
                                             : std::min(rl.rlim_max, static_cast<rlim_t>(want));
  ::setrlimit(RLIMIT_NOFILE, &rl);
}

std::shared_ptr<const ByteSource> memory_source(std::vector<uint8_t> bytes, std::string name) {
  return std::make_shared<MemorySource>(std::move(bytes), std::move(name));
}

}  // namespace gguf
