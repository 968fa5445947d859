// Test support: a small XFS with reflink=1 made in a sparse file and loop-mounted for one test,
// unmounted and deleted by the destructor whatever the test did (needs root, the loop driver
// and mkfs.xfs; otherwise available() is false and reason() says why).
#pragma once

#include <cstdint>
#include <string>

#include "ggml_ref.h"  // GGUF_MISSING_REFERENCE

namespace gguf::testing {

class XfsMount {
 public:
  explicit XfsMount(uint64_t bytes = uint64_t{1} << 30);
  ~XfsMount();
  XfsMount(const XfsMount&) = delete;
  XfsMount& operator=(const XfsMount&) = delete;

  bool available() const { return mounted_; }
  const std::string& reason() const { return reason_; }
  const std::string& path() const { return mnt_; }
  std::string file(const std::string& name) const { return mnt_ + "/" + name; }
  // Free bytes of the file system (statfs), after a sync.
  uint64_t free_bytes() const;

 private:
  std::string dir_, image_, mnt_, reason_;
  bool mounted_ = false;
};

// Skips the current test when the XFS cannot be had, or fails it when it must (CI runs as root
// with GGUF_REQUIRE_REFERENCES set: a reflink test that cannot run there must not pass unseen).
#define GGUF_REQUIRE_XFS(m)                                                                \
  do {                                                                                     \
    if (!(m).available()) GGUF_MISSING_REFERENCE("no loop-mounted XFS: " << (m).reason()); \
  } while (0)

}  // namespace gguf::testing
