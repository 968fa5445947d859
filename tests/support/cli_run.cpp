// Test support: fork/exec of the built tools with captured output.
#include "cli_run.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace gguf::testing {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

CliResult run_cli(const std::string& tool, const std::vector<std::string>& args,
                  const std::string& stdout_path, const std::string& stderr_path) {
  return run_program(std::string(GGUF_TOOLS_DIR) + "/" + tool, args, stdout_path, stderr_path);
}

CliResult run_program(const std::string& exe, const std::vector<std::string>& args,
                      const std::string& stdout_path, const std::string& stderr_path) {
  TempDir dir;
  const std::string out = stdout_path.empty() ? dir.file("stdout") : stdout_path;
  const std::string err = stderr_path.empty() ? dir.file("stderr") : stderr_path;
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    const int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int n = open("/dev/null", O_RDONLY);
    dup2(o, 1), dup2(e, 2), dup2(n, 0);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(exe.c_str()));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    // A name without a slash is looked up in PATH (e.g. "node").
    execvp(exe.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CliResult r;
  if (stdout_path.empty()) r.out = slurp(out);
  if (stderr_path.empty()) r.err = slurp(err);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "gguf-test-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

std::string open_file_in(int pid, const std::string& dir) {
  std::error_code ec;
  const std::string root = std::filesystem::canonical(dir, ec).string() + "/";
  const std::string fds = pid ? "/proc/" + std::to_string(pid) + "/fd" : "/proc/self/fd";
  for (const auto& e : std::filesystem::directory_iterator(fds, ec)) {
    const auto target = std::filesystem::read_symlink(e.path(), ec);
    if (!ec && target.string().rfind(root, 0) == 0) return e.path().string();
  }
  return {};
}

std::vector<std::string> TempDir::entries() const {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(path_))
    out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace gguf::testing
