// Test support: run a built tool and capture stdout, stderr and the exit code (golden tests).
#pragma once

#include <string>
#include <vector>

namespace gguf::testing {

struct CliResult {
  std::string out, err;
  int code = -1;
};

// Runs GGUF_TOOLS_DIR/<tool> with args (no shell; arguments passed as they are). With
// stdout_path (e.g. "/dev/full"), stdout goes there instead of into CliResult::out.
CliResult run_cli(const std::string& tool, const std::vector<std::string>& args,
                  const std::string& stdout_path = {}, const std::string& stderr_path = {});

// The same for any program: a path, or a name looked up in PATH; code 127 when it cannot run.
// With stderr_path (e.g. "/dev/full"), stderr goes there instead of into CliResult::err.
CliResult run_program(const std::string& exe, const std::vector<std::string>& args,
                      const std::string& stdout_path = {}, const std::string& stderr_path = {});

// "/proc/PID/fd/N" for a file that process PID (0: this one) has open inside dir, such as the
// writer's unnamed O_TMPFILE output (its link reads "DIR/#INODE (deleted)"); "" when none.
std::string open_file_in(int pid, const std::string& dir);

// A fresh empty directory under the system temp dir, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  // Names of all entries, sorted (dotfiles included).
  std::vector<std::string> entries() const;

 private:
  std::string path_;
};

}  // namespace gguf::testing
