// The writer's output file: an unnamed file (O_TMPFILE) in the final path's directory, or a
// named temp file where that is not supported, written with plain write() and
// copy_file_range(), fsync'd, then named and renamed into place; removed on any failure.
#include "io/output_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "gguf/base/errno_text.h"
#include "gguf/base/error.h"
#include "gguf/base/escape.h"
#include "gguf/io/signals.h"

namespace gguf::detail {
namespace {

// The process umask without changing it (umask(2) can only be read by setting it, which
// would race with other threads creating files).
mode_t current_umask() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("Umask:", 0) == 0)
      return static_cast<mode_t>(std::stoul(line.substr(6), nullptr, 8));
  return 022;
}

// Gives a file a second, unused name of the pattern: make(name) links or renames the file
// to name (0 or -1 and errno, as the system calls); returns the name. The pattern's trailing
// XXXXXX become random characters; a name that is taken (EEXIST) is skipped. No probe file is
// created first, so a process killed here leaves nothing behind.
template <class Make>
std::string fresh_name(const std::string& pattern, Make make, const auto& fail) {
  static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}() ^ static_cast<uint64_t>(::getpid())};
  for (int attempt = 0; attempt < 1000; ++attempt) {
    std::string name = pattern;
    for (size_t i = name.size() - 6; i < name.size(); ++i)
      name[i] = kChars[rng() % (sizeof kChars - 1)];
    if (make(name.c_str()) == 0) return name;
    if (errno != EEXIST) fail(errno);
  }
  fail(EEXIST);
  return {};
}

// Termination signals that arrive while a set of outputs is being renamed into place wait
// until the set is complete (or rolled back): see SignalsDeferred.
std::atomic<int> g_defer_depth{0};
std::atomic<int> g_pending_signal{0};

// Temp names that exist right now, for signal handlers: a fixed table of pointers to the
// OutputFiles' own strings (a string is not changed while its slot holds it).
constexpr int kTempSlots = 1 << 17;  // more than the 65535 shards a split set can have
std::atomic<const char*> g_temp_names[kTempSlots];

int register_temp(const char* name) {
  static std::atomic<int> hint{0};
  const int start = hint.load(std::memory_order_relaxed);
  for (int k = 0; k < kTempSlots; ++k) {
    const int i = (start + k) % kTempSlots;
    const char* expected = nullptr;
    if (g_temp_names[i].compare_exchange_strong(expected, name)) {
      hint.store((i + 1) % kTempSlots, std::memory_order_relaxed);
      return i;
    }
  }
  return -1;  // best effort: the destructor still removes it on ordinary failures
}

void unregister_temp(int& slot) {
  if (slot >= 0) g_temp_names[slot].store(nullptr);
  slot = -1;
}

}  // namespace
}  // namespace gguf::detail

namespace gguf {

void remove_temp_files_from_signal_handler() noexcept {
  for (auto& slot : detail::g_temp_names)
    if (const char* name = slot.load()) ::unlink(name);
}

bool defer_termination_signal(int sig) noexcept {
  if (detail::g_defer_depth.load() == 0) return false;
  detail::g_pending_signal.store(sig);
  if (detail::g_defer_depth.load() != 0) return true;
  // The commit ended meanwhile: if it has not taken the signal, it is handled now.
  return detail::g_pending_signal.exchange(0) == 0;
}

}  // namespace gguf

namespace gguf::detail {

SignalsDeferred::SignalsDeferred() { g_defer_depth.fetch_add(1); }

SignalsDeferred::~SignalsDeferred() {
  if (g_defer_depth.fetch_sub(1) != 1) return;
  // Delivered again, now to the handler's ordinary course (which ends the process).
  if (const int sig = g_pending_signal.exchange(0)) ::raise(sig);
}

OutputFile::OutputFile(std::string final_path, bool unnamed) : final_(std::move(final_path)) {
  // Preferably an unnamed file (O_TMPFILE): a process killed while writing leaves nothing
  // behind. It gets its temp name only in commit(), just before the rename. Linking it needs
  // /proc (linkat with AT_EMPTY_PATH would need a capability).
  fd_ = unnamed ? ::open(parent_dir(final_).c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0666) : -1;
  if (fd_ >= 0) {
    proc_ = fmt::format("/proc/self/fd/{}", fd_);
    if (::access(proc_.c_str(), F_OK) == 0) return;  // the mode is 0666 less the umask
    ::close(fd_);
    proc_.clear();
  }
  // File systems without O_TMPFILE: a named temp file from the start.
  temp_ = hidden_name_pattern(final_);
  fd_ = ::mkostemp(temp_.data(), O_CLOEXEC);
  if (fd_ < 0)
    throw Error(final_, {}, std::nullopt,
                fmt::format("cannot create a temporary file in '{}': {}",
                            escape_for_terminal(parent_dir(final_)), errno_text(errno)));
  slot_ = register_temp(temp_.c_str());
  // mkstemp creates 0600; the output should get the mode any new file would get.
  if (::fchmod(fd_, 0666 & ~current_umask()) != 0) {
    const int err = errno;
    remove();
    ::close(fd_);
    fd_ = -1;
    fail("cannot set the temporary file's mode", err);
  }
}

OutputFile::~OutputFile() {
  if (!committed_) remove();
  if (fd_ >= 0) ::close(fd_);
}

void OutputFile::fail(const std::string& what, int err) const {
  // Once everything is written, failures (fsync, close, rename) concern the whole file.
  throw Error(final_, object_, written_ ? std::nullopt : std::optional<uint64_t>(pos_),
              fmt::format("{}: {}", what, errno_text(err)));
}

void OutputFile::write(std::span<const uint8_t> bytes) {
  const uint8_t* p = bytes.data();
  uint64_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, static_cast<size_t>(std::min<uint64_t>(left, 1u << 30)));
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write failed", errno);
    }
    // A write that makes no progress and reports no error is a full device in practice.
    if (n == 0) fail("write failed", ENOSPC);
    p += n;
    left -= static_cast<uint64_t>(n);
    pos_ += static_cast<uint64_t>(n);
  }
  start_writeback();
}

void OutputFile::write_zeros(uint64_t n) {
  static const std::array<uint8_t, 64 * 1024> kZeros{};
  while (n > 0) {
    const uint64_t k = std::min<uint64_t>(n, kZeros.size());
    write({kZeros.data(), static_cast<size_t>(k)});
    n -= k;
  }
}

uint64_t OutputFile::copy_range(int src_fd, const std::string& src_name, uint64_t src_offset,
                                uint64_t n) {
  uint64_t done = 0;
  while (done < n) {
    loff_t in = static_cast<loff_t>(src_offset + done);
    const size_t want = static_cast<size_t>(std::min<uint64_t>(n - done, 1u << 30));
    const ssize_t k = ::copy_file_range(src_fd, &in, fd_, nullptr, want, 0);
    if (k < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      if (err == EXDEV || err == EINVAL || err == ENOSYS || err == EOPNOTSUPP || err == EBADF)
        return done;
      fail(fmt::format("copying from '{}' failed", escape_for_terminal(src_name)), err);
    }
    if (k == 0)
      throw Error(final_, object_, pos_,
                  fmt::format("copying from '{}' failed: source ended at byte {}, {} bytes early",
                              escape_for_terminal(src_name), src_offset + done, n - done));
    done += static_cast<uint64_t>(k);
    pos_ += static_cast<uint64_t>(k);
  }
  start_writeback();
  return done;
}

// Asks the kernel to start writing what has been written so far, every 64 MiB, without
// waiting for it: the disk works while the copy goes on, and the final fsync has little left
// to do (on a virtio disk, 4.4 GiB spliced in 3.2-3.6 s instead of 3.7-4.8 s).
void OutputFile::start_writeback() {
  constexpr uint64_t kStep = uint64_t{64} << 20;
  if (pos_ - flushed_ < kStep) return;
  ::sync_file_range(fd_, static_cast<off_t>(flushed_), static_cast<off_t>(pos_ - flushed_),
                    SYNC_FILE_RANGE_WRITE);
  flushed_ = pos_;
}

// Links the anonymous file to a fresh temp name (linkat cannot replace, so a name taken in
// the meantime is simply skipped).
void OutputFile::name_temp() {
  temp_ = fresh_name(
      hidden_name_pattern(final_),
      [&](const char* name) {
        return ::linkat(AT_FDCWD, proc_.c_str(), AT_FDCWD, name, AT_SYMLINK_FOLLOW);
      },
      [&](int err) { fail("cannot name the temporary file", err); });
  slot_ = register_temp(temp_.c_str());
}

// A second name for the file at the final path (a symbolic link itself, not its target),
// so that remove() can put it back. Where the file system has no hard links, or when
// move_aside, the file is moved aside instead (the final path is then free).
void OutputFile::keep_replaced_file(bool move_aside) {
  struct stat st {};
  if (::lstat(final_.c_str(), &st) != 0) {
    if (errno == ENOENT) return;
    fail("cannot look at the file to be replaced", errno);
  }
  if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) return;  // rename() refuses these anyway
  backup_ = fresh_name(
      hidden_name_pattern(final_, "old"),
      [&](const char* name) {
        if (!move_aside) {
          if (::linkat(AT_FDCWD, final_.c_str(), AT_FDCWD, name, 0) == 0) return 0;
          if (errno != EPERM && errno != EOPNOTSUPP && errno != EMLINK && errno != ENOSYS)
            return -1;
        }
        // Never over a file that has this name already (EEXIST: another name is tried).
        int rc = ::renameat2(AT_FDCWD, final_.c_str(), AT_FDCWD, name, RENAME_NOREPLACE);
        if (rc != 0 && (errno == EINVAL || errno == ENOSYS)) rc = ::rename(final_.c_str(), name);
        backup_moved_ = rc == 0;
        return backup_moved_ ? 0 : -1;
      },
      [&](int err) {
        fail(
            "cannot keep a second name for the file being replaced (to put it back if the set "
            "cannot be completed)",
            err);
      });
}

void OutputFile::drop_replaced_file() noexcept {
  if (committed_ && !backup_.empty()) ::unlink(backup_.c_str());
  backup_.clear();
}

void OutputFile::finish() {
  object_.clear();
  written_ = true;
  if (::fsync(fd_) != 0) fail("fsync failed", errno);
}

void OutputFile::close_checked() {
  const int fd = fd_;
  fd_ = -1;
  // close() can report a deferred write error (e.g. on NFS).
  if (::close(fd) != 0) fail("close failed", errno);
}

void OutputFile::commit(bool replace, bool keep_replaced) {
  object_.clear();
  written_ = true;
  if (temp_.empty()) name_temp();
  if (fd_ >= 0) close_checked();
  // Without --force, a file created at the output path since it was checked must survive.
  if (!replace) {
    if (::renameat2(AT_FDCWD, temp_.c_str(), AT_FDCWD, final_.c_str(), RENAME_NOREPLACE) == 0) {
      committed_ = true;
      unregister_temp(slot_);
      return;
    }
    if (errno == EEXIST)
      throw Error(final_, {}, std::nullopt, "output file exists; use --force to replace it",
                  Error::Kind::kUsage);
    if (errno != EINVAL && errno != ENOSYS)
      fail(fmt::format("cannot rename '{}' to the output path", escape_for_terminal(temp_)), errno);
  }
  if (keep_replaced) keep_replaced_file();
  if (::rename(temp_.c_str(), final_.c_str()) != 0)
    fail(fmt::format("cannot rename '{}' to the output path", escape_for_terminal(temp_)), errno);
  committed_ = true;
  unregister_temp(slot_);
}

void OutputFile::remove() noexcept {
  if (removed_) return;
  removed_ = true;
  // An anonymous file goes away with its descriptor. A committed one gives its path back to
  // the file it replaced, if that was kept.
  if (committed_ && backup_.empty())
    ::unlink(final_.c_str());
  else if (!committed_ && !temp_.empty())
    ::unlink(temp_.c_str());
  if (!backup_.empty()) {
    // Where the rename fails, the replaced file stays under its hidden name.
    if (committed_ || backup_moved_)
      ::rename(backup_.c_str(), final_.c_str());
    else
      ::unlink(backup_.c_str());  // still at the final path as well
    backup_.clear();
  }
  unregister_temp(slot_);
}

std::string hidden_name_pattern(const std::string& final_path, const char* tag) {
  const std::filesystem::path p(final_path);
  const std::string base = p.filename().string().substr(0, 200);
  return (p.parent_path() / fmt::format(".{}.{}.XXXXXX", base, tag)).string();
}

std::string parent_dir(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

void sync_parent_directory(const std::string& path) {
  const std::string dir = parent_dir(path);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    throw Error(path, {}, std::nullopt,
                fmt::format("cannot open directory '{}' to sync it: {}", escape_for_terminal(dir),
                            errno_text(errno)));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some file systems cannot sync a directory (EINVAL); the rename itself has happened.
  if (rc != 0 && err != EINVAL)
    throw Error(path, {}, std::nullopt,
                fmt::format("fsync of directory '{}' failed: {}", escape_for_terminal(dir),
                            errno_text(err)));
}

void commit_set(std::vector<std::unique_ptr<OutputFile>>& outs, bool force,
                const std::function<void(size_t)>& committed) {
  SignalsDeferred deferred;
  try {
    // A set replacing another is never left mixed, even by SIGKILL: the old files are all set
    // aside first (the first shard last), then the new ones put in place (the first shard
    // first). A process killed between two renames leaves one set with a shard missing, which
    // the reader names, and the old files under hidden names beside it.
    const bool set_aside = force && outs.size() > 1;
    if (set_aside)
      for (size_t i = outs.size(); i-- > 0;) outs[i]->set_aside_replaced_file();
    for (size_t i = 0; i < outs.size(); ++i) {
      outs[i]->commit(force, outs.size() > 1 && !set_aside);
      if (committed) committed(i);
    }
  } catch (...) {
    for (auto& out : outs) out->remove();
    throw;
  }
  for (auto& out : outs) out->drop_replaced_file();
}

}  // namespace gguf::detail
