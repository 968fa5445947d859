// Internal: the output file of every writer (output_file.cpp): a temp file renamed into place
// once complete, the set commit of split outputs, and the signal plumbing that removes temp files.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace gguf::detail {

// A temp file in the directory of the final path: unnamed (O_TMPFILE) while it is written,
// synced and verified, so that a process killed meanwhile leaves nothing behind; commit()
// names it ".<name>.tmp.XXXXXX" and renames it over the final path at once. Where O_TMPFILE
// is missing it is named so from the start. Until commit the final path is untouched, and
// the destructor removes the temp file; so do SIGINT, SIGTERM, SIGHUP and SIGQUIT in the tools (see
// gguf/io/signals.h). Errors are gguf::Error naming the final path, the object
// being written and the byte offset in the output.
class OutputFile {
 public:
  // unnamed = false starts with a named temp file, as on file systems without O_TMPFILE.
  explicit OutputFile(std::string final_path, bool unnamed = true);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  const std::string& path() const { return final_; }
  // A path that opens the file being written: its temp name, or /proc/self/fd/N while it is
  // anonymous (valid until commit()).
  const std::string& temp_path() const { return temp_.empty() ? proc_ : temp_; }
  uint64_t position() const { return pos_; }
  // The descriptor being written (for FIEMAP), -1 after commit().
  int fd() const { return fd_; }
  // What is being written now, for messages (e.g. "tensor 'x'"); empty for the header.
  void set_object(std::string object) { object_ = std::move(object); }

  void write(std::span<const uint8_t> bytes);
  void write_zeros(uint64_t n);
  // Copies up to n bytes from src_fd at src_offset inside the kernel. Returns how many were
  // copied: less than n when the kernel cannot copy between these files (EXDEV, EINVAL,
  // ENOSYS, EOPNOTSUPP), so the caller writes the rest itself. Throws on I/O errors.
  uint64_t copy_range(int src_fd, const std::string& src_name, uint64_t src_offset, uint64_t n);
  // fsync; the file stays open (and anonymous) until commit().
  void finish();
  // Names an anonymous file, closes it and renames it to the final path; replaces an
  // existing file only when replace (where the file system supports RENAME_NOREPLACE).
  // keep_replaced keeps the file replaced under a hidden name (".<name>.old.XXXXXX"), so
  // that remove() can put it back, until drop_replaced_file().
  void commit(bool replace, bool keep_replaced = false);
  // Before commit(replace): moves the file at the final path (if any) to a hidden name
  // (".<name>.old.XXXXXX"), which remove() puts back, until drop_replaced_file().
  void set_aside_replaced_file() { keep_replaced_file(true); }
  // Once the whole set is committed: deletes the kept replaced file.
  void drop_replaced_file() noexcept;
  // Removes what this object created: the temp file, or the final file after commit() (the
  // kept replaced file, if any, returns to the final path).
  void remove() noexcept;

 private:
  [[noreturn]] void fail(const std::string& what, int err) const;

  void name_temp();
  void keep_replaced_file(bool move_aside = false);
  void start_writeback();
  void close_checked();

  std::string final_, temp_, proc_, object_;  // temp_ empty while the file is anonymous
  std::string backup_;                        // the kept replaced file, if any
  bool backup_moved_ = false;                 // moved aside rather than linked
  bool written_ = false;                      // finish() or commit() reached
  int fd_ = -1;
  uint64_t pos_ = 0, flushed_ = 0;
  bool committed_ = false, removed_ = false;
  int slot_ = -1;  // in the registry of temp names that signal handlers remove
};

// While one exists, SIGINT, SIGTERM, SIGHUP and SIGQUIT wait (defer_termination_signal) and are
// raised again when the last one goes: for the renames that put a split set in place, so that a
// signal leaves the whole set or none of it.
class SignalsDeferred {
 public:
  SignalsDeferred();
  ~SignalsDeferred();
  SignalsDeferred(const SignalsDeferred&) = delete;
  SignalsDeferred& operator=(const SignalsDeferred&) = delete;
};

// Puts the files of a set in place: all of them, or none, and then the files they replaced
// are back. A termination signal meanwhile takes effect once that is settled. committed(i),
// if given, runs once file i is in place (tests use it to die there).
void commit_set(std::vector<std::unique_ptr<OutputFile>>& outs, bool force,
                const std::function<void(size_t)>& committed = {});

// A hidden name pattern beside the final path (".<name>.<tag>.XXXXXX", the X's for random
// characters), within NAME_MAX whatever the final name's length: "tmp" for a file being
// written, "old" for a file being replaced.
std::string hidden_name_pattern(const std::string& final_path, const char* tag = "tmp");

// The directory holding path ("." for a bare file name).
std::string parent_dir(const std::string& path);

// fsync of the directory holding path, so that a rename survives a crash.
void sync_parent_directory(const std::string& path);

}  // namespace gguf::detail
