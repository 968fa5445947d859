// The loop-mounted XFS of reflink tests: truncate, mkfs.xfs -m reflink=1, mount -o loop (the loop
// device goes with the unmount), and the reverse in the destructor.
#include "xfs_mount.h"

#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "cli_run.h"

namespace gguf::testing {

namespace fs = std::filesystem;

XfsMount::XfsMount(uint64_t bytes) {
  if (::geteuid() != 0) {
    reason_ = "needs root to mount a file system";
    return;
  }
  std::string tmpl = (fs::temp_directory_path() / "gguf-xfs.XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) {
    reason_ = std::string("mkdtemp: ") + std::strerror(errno);
    return;
  }
  dir_ = tmpl;
  image_ = dir_ + "/xfs.img";
  mnt_ = dir_ + "/mnt";
  std::error_code ec;
  fs::create_directory(mnt_, ec);
  if (FILE* f = std::fopen(image_.c_str(), "w")) std::fclose(f);
  if (::truncate(image_.c_str(), static_cast<off_t>(bytes)) != 0) {
    reason_ = std::string("truncate: ") + std::strerror(errno);
    return;
  }
  const auto mkfs = run_program("mkfs.xfs", {"-q", "-m", "reflink=1", image_});
  if (mkfs.code != 0) {
    reason_ = mkfs.code == 127 ? "mkfs.xfs not found (Debian package xfsprogs)"
                               : "mkfs.xfs failed: " + mkfs.err;
    return;
  }
  const auto mount = run_program("mount", {"-o", "loop", image_, mnt_});
  if (mount.code != 0) {
    reason_ = "mount -o loop failed (no loop driver?): " + mount.err;
    return;
  }
  mounted_ = true;
}

XfsMount::~XfsMount() {
  if (mounted_) {
    // Busy for a moment after a child that had files open there exits; then detached lazily.
    bool done = false;
    for (int i = 0; i < 50 && !done; ++i) {
      done = ::umount2(mnt_.c_str(), 0) == 0 || errno == EINVAL;
      if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!done) ::umount2(mnt_.c_str(), MNT_DETACH);
  }
  if (!dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

uint64_t XfsMount::free_bytes() const {
  ::sync();
  struct statvfs st {};
  if (::statvfs(mnt_.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.f_bfree) * st.f_frsize;
}

}  // namespace gguf::testing
