// The output path checks of every write: made before any work, so that a dry run refuses what
// the write would.
#include "write/output_checks.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <filesystem>
#include <system_error>

#include "gguf/base/errno_text.h"
#include "gguf/base/error.h"
#include "gguf/base/escape.h"
#include "io/output_file.h"

namespace gguf::detail {

std::vector<Identity> input_identities(const Plan& plan, const WriteOptions& o) {
  std::vector<Identity> ids;
  for (const auto& in : o.inputs) {
    struct stat st {};
    if (::stat(in.c_str(), &st) == 0)
      ids.push_back({static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino), in});
  }
  // Sources the plan reads are inputs too, whether or not the caller listed them.
  for (const auto& t : plan.tensors)
    if (const auto* r = std::get_if<FileRange>(&t.source); r && r->source)
      if (const auto id = r->source->identity())
        ids.push_back({id->first, id->second, r->source->name()});
  return ids;
}

namespace {

// Whether the output path, or a symbolic link on the way to it, leads into /proc: /dev/stdout
// and /dev/fd/N are open descriptors, not files. The output would replace the link (a rename
// over it), and what it points at would never get it.
bool leads_into_proc(const std::string& out) {
  namespace fs = std::filesystem;
  fs::path p = out;
  for (int hop = 0; hop < 40; ++hop) {
    std::error_code ec;
    const fs::path dir = fs::weakly_canonical(fs::absolute(p, ec).parent_path(), ec);
    if (!ec && (dir == "/proc" || dir.string().starts_with("/proc/"))) return true;
    struct stat l {};
    if (::lstat(p.c_str(), &l) != 0 || !S_ISLNK(l.st_mode)) return false;
    const fs::path target = fs::read_symlink(p, ec);
    if (ec) return false;
    p = target.is_absolute() ? target : p.parent_path() / target;
  }
  return false;
}

}  // namespace

void check_output_path(const std::string& out, const std::vector<Identity>& inputs, bool force) {
  if (leads_into_proc(out))
    throw Error(out, {}, std::nullopt,
                "output path leads into /proc (an open file descriptor such as /dev/stdout, not "
                "a file); refusing to replace it (give a file path)",
                Error::Kind::kUsage);
  struct stat st {};
  if (::stat(out.c_str(), &st) == 0) {
    for (const auto& in : inputs)
      if (in.dev == static_cast<uint64_t>(st.st_dev) && in.ino == static_cast<uint64_t>(st.st_ino))
        throw Error(out, {}, std::nullopt,
                    fmt::format("output is the same file as input '{}'; refusing to overwrite an "
                                "input (choose another output path)",
                                escape_for_terminal(in.name)),
                    Error::Kind::kUsage);
    if (S_ISDIR(st.st_mode))
      throw Error(out, {}, std::nullopt, "output path is a directory", Error::Kind::kUsage);
    // Not even --force replaces a device, FIFO or socket (e.g. -o /dev/null) with a file.
    if (!S_ISREG(st.st_mode))
      throw Error(out, {}, std::nullopt,
                  "output path exists and is not a regular file (a device, FIFO or socket); "
                  "refusing to replace it",
                  Error::Kind::kUsage);
  }
  // The output is written to a temp file beside it and renamed into place, so its directory
  // must exist and take new entries; checked here so that a dry run refuses what the write
  // would.
  const std::string dir = detail::parent_dir(out);
  struct stat dst {};
  int err = 0;
  if (::stat(dir.c_str(), &dst) != 0)
    err = errno;
  else if (!S_ISDIR(dst.st_mode))
    err = ENOTDIR;
  else if (::access(dir.c_str(), W_OK | X_OK) != 0)
    err = errno;
  if (err)
    throw Error(out, {}, std::nullopt,
                fmt::format("cannot create the output in directory '{}': {}",
                            escape_for_terminal(dir), errno_text(err)));
  // The rename at the very end would fail on a name the file system cannot hold.
  const std::string name = std::filesystem::path(out).filename().string();
  long name_max = ::pathconf(dir.c_str(), _PC_NAME_MAX);
  if (name_max <= 0) name_max = NAME_MAX;
  if (name.size() > static_cast<size_t>(name_max))
    throw Error(out, {}, std::nullopt,
                fmt::format("output file name is {} bytes long; the file system of '{}' allows at "
                            "most {}",
                            name.size(), escape_for_terminal(dir), name_max));
  struct stat lst {};
  if (::lstat(out.c_str(), &lst) != 0) return;
  if (!force)
    throw Error(out, {}, std::nullopt, "output file exists; use --force to replace it",
                Error::Kind::kUsage);
  // In a sticky directory (such as /tmp) only the file's or the directory's owner may replace
  // the file: the final rename would fail after all the work (root may, by CAP_FOWNER).
  const uid_t me = ::geteuid();
  if ((dst.st_mode & S_ISVTX) && me != 0 && me != lst.st_uid && me != dst.st_uid)
    throw Error(out, {}, std::nullopt,
                fmt::format("cannot replace the output: directory '{}' is sticky (as /tmp is) and "
                            "the file belongs to another user",
                            escape_for_terminal(dir)));
}

}  // namespace gguf::detail

namespace gguf {

bool same_output_file(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  struct stat sa {
  }, sb{};
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0)
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  std::error_code ea, eb;
  const fs::path ca = fs::weakly_canonical(fs::absolute(a, ea), ea);
  const fs::path cb = fs::weakly_canonical(fs::absolute(b, eb), eb);
  return ea || eb ? a == b : ca == cb;
}

}  // namespace gguf
