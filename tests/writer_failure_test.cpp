// The writer's safety properties: it refuses to overwrite inputs or existing files, and on any
// failure (a throwing producer, a full device, a corrupted write, a killed process) nothing
// appears at the output path.
//
// The output is written to an unnamed file (O_TMPFILE) that gets its temp name
// ".<name>.tmp.XXXXXX" only once written and synced, so a process killed mid-write leaves
// nothing behind.
#include <fcntl.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include "cli/cli.h"
#include "gguf/format/file.h"
#include "gguf/format/model.h"
#include "gguf/io/signals.h"
#include "gguf/write/writer.h"
#include "io/output_file.h"
#include "writer_test_util.h"

namespace gguf {
namespace {

using ::testing::HasSubstr;
using testing::memory_tensor;
using testing::ScratchDir;

std::string error_of(const Plan& plan, const std::string& path, const WriteOptions& o) {
  try {
    write_plan(plan, path, o);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

Plan small_plan(uint64_t seed = 1) {
  Plan plan;
  plan.metadata.set("general.architecture", Value::string("t"));
  plan.tensors.push_back(memory_tensor("a", GgmlType::F32, {16}, seed));
  plan.tensors.push_back(memory_tensor("b", GgmlType::Q8_0, {32, 2}, seed + 1));
  return plan;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

TEST(writer, refuses_to_overwrite_an_input) {
  ScratchDir dir;
  const std::string input = dir.file("in.gguf");
  write_plan(small_plan(), input, {});
  const std::string before = read_all(input);
  ::link(input.c_str(), dir.file("hard.gguf").c_str());
  ::symlink(input.c_str(), dir.file("sym.gguf").c_str());
  WriteOptions o;
  o.force = true;  // even with --force
  o.inputs = {input};
  for (const char* name : {"in.gguf", "hard.gguf", "sym.gguf"}) {
    SCOPED_TRACE(name);
    const std::string out = dir.file(name);
    EXPECT_EQ(error_of(small_plan(2), out, o),
              fmt::format("{}: output is the same file as input '{}'; refusing to overwrite an "
                          "input (choose another output path)",
                          out, input));
  }
  // A plan that reads the input refuses it even when the caller did not list it.
  Plan copy;
  PlanTensor t = small_plan().tensors[0];
  t.source = FileRange{open_file_source(input), GgufFile::open(input)->data_offset()};
  copy.tensors.push_back(t);
  o.inputs.clear();
  EXPECT_THAT(error_of(copy, dir.file("sym.gguf"), o), HasSubstr("same file as input"));
  // Split output: a shard path that is an input is refused too.
  ::symlink(input.c_str(), dir.file("set-00002-of-00002.gguf").c_str());
  o.inputs = {input};
  o.split_max_tensors = 1;
  EXPECT_THAT(error_of(small_plan(), dir.file("set.gguf"), o),
              HasSubstr("set-00002-of-00002.gguf: output is the same file as input"));
  EXPECT_EQ(read_all(input), before);
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"hard.gguf", "in.gguf",
                                                     "set-00002-of-00002.gguf", "sym.gguf"}));
}

TEST(writer, refuses_existing_output_without_force) {
  ScratchDir dir;
  const std::string out = dir.file("out.gguf");
  { std::ofstream(out) << "precious"; }
  EXPECT_EQ(error_of(small_plan(), out, {}),
            out + ": output file exists; use --force to replace it");
  EXPECT_EQ(read_all(out), "precious");
  WriteOptions o;
  o.force = true;
  write_plan(small_plan(), out, o);
  EXPECT_EQ(GgufFile::open(out)->tensors().size(), 2u);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.gguf"});
  // A split set refuses when any shard exists.
  { std::ofstream(dir.file("set-00002-of-00002.gguf")) << "x"; }
  WriteOptions split;
  split.split_max_tensors = 1;
  EXPECT_THAT(error_of(small_plan(), dir.file("set.gguf"), split),
              HasSubstr("set-00002-of-00002.gguf: output file exists; use --force"));
  EXPECT_FALSE(std::filesystem::exists(dir.file("set-00001-of-00002.gguf")));
}

// Not even --force replaces a FIFO or a device node with a file (-o /dev/null --force as
// root would otherwise replace /dev/null); a symlink to one is refused the same way.
TEST(writer, refuses_to_replace_a_non_regular_file) {
  ScratchDir dir;
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  ::symlink("/dev/null", dir.file("null").c_str());
  WriteOptions o;
  o.force = true;
  for (const char* name : {"fifo", "null"}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(error_of(small_plan(), dir.file(name), o),
              dir.file(name) +
                  ": output path exists and is not a regular file (a device, FIFO or socket); "
                  "refusing to replace it");
  }
  struct stat st {};
  ASSERT_EQ(::stat(dir.file("fifo").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  ASSERT_EQ(::lstat(dir.file("null").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"fifo", "null"}));
}

// An input truncated while mapped raises SIGBUS on the next read of the lost pages: the
// tools' handler turns it into an error message naming the file and the byte, and the failure
// status, and removes the temp files of an unfinished output.
TEST(writer, truncated_input_is_an_error_not_a_crash) {
  ScratchDir dir;
  const std::string input = dir.file("in.bin");
  { std::ofstream(input, std::ios::binary) << std::string(1 << 16, 'x'); }
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        cli::run_tool(
            "gguf-x", 0, nullptr,
            [&] {
              detail::OutputFile out(dir.file("o.gguf"), /*unnamed=*/false);
              const auto src = open_file_source(input);
              ::truncate(input.c_str(), 0);
              volatile uint8_t sink = src->bytes(1 << 15, 1)[0];
              (void)sink;
              return 0;
            },
            3);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(3),
      // The threadsafe style re-runs the test in a new process, with its own scratch dir.
      "^gguf-x: error: /[^ ]*/in\\.bin: at byte 32768: a file being read was truncated or could "
      "not be read \\(SIGBUS\\): "
      "was an input changed while in use\\? Any unfinished output was removed\n$");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"in.bin"});
}

TEST(writer, keeps_a_file_that_appears_during_the_write) {
  ScratchDir dir;
  const std::string out = dir.file("out.gguf");
  WriteOptions o;
  o.progress = [&](uint64_t done, uint64_t total) {
    if (done == total) std::ofstream(out) << "arrived meanwhile";
  };
  EXPECT_EQ(error_of(small_plan(), out, o),
            out + ": output file exists; use --force to replace it");
  EXPECT_EQ(read_all(out), "arrived meanwhile");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.gguf"});
}

TEST(writer, throwing_producer_leaves_nothing) {
  ScratchDir dir;
  Plan plan = small_plan();
  PlanTensor p;
  p.name = "produced";
  p.type_id = static_cast<uint32_t>(GgmlType::I8);
  p.shape = {int64_t{12} << 20};
  p.bytes = uint64_t{12} << 20;
  p.source = Producer{[](uint64_t off, std::span<uint8_t> out) {
                        if (off > 0) throw std::runtime_error("boom");
                        std::fill(out.begin(), out.end(), 1);
                      },
                      0};
  plan.tensors.push_back(p);
  const std::string out = dir.file("out.gguf");
  const std::string msg = error_of(plan, out, {});
  EXPECT_THAT(msg, HasSubstr(out + ": tensor 'produced': at byte "));
  EXPECT_THAT(msg, HasSubstr(": producing the payload failed: boom"));
  EXPECT_TRUE(dir.entries().empty());
  // The same for a split set: shards already complete are removed as well.
  WriteOptions o;
  o.split_max_tensors = 1;
  EXPECT_THAT(error_of(plan, out, o), HasSubstr("producing the payload failed: boom"));
  EXPECT_TRUE(dir.entries().empty());
}

// A check run before the commit (WriteOptions::before_commit) sees the written files as one
// model; when it throws, nothing reaches the output path and a file replaced with --force
// stays as it was, split sets included. Without --no-verify and with it.
TEST(writer, failing_check_before_commit_keeps_the_old_output) {
  ScratchDir dir;
  const std::string out = dir.file("out.gguf");
  write_plan(small_plan(1), out, {});
  const std::string old = read_all(out);
  for (bool verify : {true, false})
    for (uint64_t split : {uint64_t{0}, uint64_t{1}}) {
      WriteOptions o;
      o.force = true;
      o.verify = verify;
      o.split_max_tensors = split;
      size_t seen = 0;
      o.before_commit = [&](const Model& m) {
        seen = m.tensors().size();
        EXPECT_EQ(m.find("b")->data().size(), 68u);
        throw Error(out, "tensor 'b'", std::nullopt, "the check says no");
      };
      EXPECT_EQ(error_of(small_plan(2), out, o), out + ": tensor 'b': the check says no");
      EXPECT_EQ(seen, 2u);
      EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.gguf"});
      EXPECT_EQ(read_all(out), old);
    }
  // A check that passes lets the write through.
  WriteOptions o;
  o.force = true;
  o.before_commit = [](const Model&) {};
  write_plan(small_plan(2), out, o);
  EXPECT_NE(read_all(out), old);
}

// --force over an existing split set: when a rename fails halfway (here the third shard's
// path became a directory after the checks), the shards already renamed give their paths
// back to the old ones, and nothing else is left behind.
TEST(writer, forced_split_write_failing_midway_keeps_the_old_set) {
  ScratchDir dir;
  const std::string out = dir.file("m.gguf");
  Plan plan = small_plan(1);
  plan.tensors.push_back(memory_tensor("c", GgmlType::F16, {8, 3}, 9));
  WriteOptions o;
  o.split_max_tensors = 1;
  const std::vector<std::string> shards = write_plan(plan, out, o).paths;
  ASSERT_EQ(shards.size(), 3u);
  std::vector<std::string> old;
  for (const auto& p : shards) old.push_back(read_all(p));
  const auto names = dir.entries();

  Plan changed = small_plan(5);
  changed.tensors.push_back(memory_tensor("c", GgmlType::F16, {8, 3}, 11));
  o.force = true;
  o.progress = [&](uint64_t done, uint64_t total) {
    if (done != total) return;
    ASSERT_EQ(::unlink(shards[2].c_str()), 0);
    ASSERT_EQ(::mkdir(shards[2].c_str(), 0755), 0);
    std::ofstream(shards[2] + "/keep") << "x";
  };
  EXPECT_THAT(error_of(changed, out, o), HasSubstr("cannot rename"));
  EXPECT_EQ(dir.entries(), names);
  EXPECT_EQ(read_all(shards[0]), old[0]);
  EXPECT_EQ(read_all(shards[1]), old[1]);

  // Once the obstacle is gone the same write succeeds, and no kept file remains.
  std::filesystem::remove_all(shards[2]);
  o.progress = nullptr;
  EXPECT_EQ(write_plan(changed, out, o).paths, shards);
  EXPECT_EQ(dir.entries(), names);
  EXPECT_NE(read_all(shards[0]), old[0]);
}

// --force over an existing split set, the process killed (SIGKILL cannot be held) between
// two renames: what remains is never a set mixing new and old shards, which the reader would
// take for a model; it is one with a shard missing, and the error names the file set aside.
TEST(writer, forced_split_write_killed_midway_leaves_no_mixed_set) {
  ScratchDir dir, fresh;
  Plan plan = small_plan(1);
  plan.tensors.push_back(memory_tensor("c", GgmlType::F16, {8, 3}, 9));
  WriteOptions o;
  o.split_max_tensors = 1;
  const std::vector<std::string> shards = write_plan(plan, dir.file("m.gguf"), o).paths;
  ASSERT_EQ(shards.size(), 3u);
  const std::string old_first = read_all(shards[0]);
  Plan changed = small_plan(5);
  changed.tensors.push_back(memory_tensor("c", GgmlType::F16, {8, 3}, 11));
  const auto news = write_plan(changed, fresh.file("m.gguf"), o).paths;

  for (size_t killed_after : {0u, 1u}) {
    SCOPED_TRACE(killed_after);
    o.force = true;  // the old set again, for the second round
    if (killed_after) write_plan(plan, dir.file("m.gguf"), o);
    const pid_t pid = ::fork();
    if (pid == 0) {
      std::vector<std::unique_ptr<detail::OutputFile>> outs;
      for (size_t i = 0; i < shards.size(); ++i) {
        outs.push_back(std::make_unique<detail::OutputFile>(shards[i]));
        const std::string bytes = read_all(news[i]);
        outs.back()->write(std::vector<uint8_t>(bytes.begin(), bytes.end()));
        outs.back()->finish();
      }
      detail::commit_set(outs, true, [&](size_t i) {
        if (i == killed_after) ::_exit(0);  // as if killed right after this rename
      });
      ::_exit(1);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    for (size_t i = 0; i < shards.size(); ++i)
      if (i <= killed_after)
        EXPECT_EQ(read_all(shards[i]), read_all(news[i])) << i;
      else
        EXPECT_FALSE(std::filesystem::exists(shards[i])) << i;
    const std::string missing = shards[killed_after + 1];
    try {
      Model::open(shards[0]);
      FAIL() << "a mixed or incomplete set opened";
    } catch (const Error& e) {
      const std::string prefix = fmt::format(
          "{}: shard {} of 3 of the split set is missing; '{}/.{}.old.", missing, killed_after + 2,
          dir.path(), std::filesystem::path(missing).filename().string());
      EXPECT_THAT(std::string(e.what()), ::testing::StartsWith(prefix));
      EXPECT_THAT(std::string(e.what()),
                  HasSubstr("' beside it is a shard that an interrupted --force replacement "
                            "set aside"));
    }
    // The old files are all kept under hidden names: three of them, the first shard's too.
    size_t kept = 0;
    for (const auto& name : dir.entries()) {
      if (name.find(".old.") == std::string::npos) continue;
      ++kept;
      if (name.starts_with(".m-00001-of-00003.gguf.old.")) {
        EXPECT_EQ(read_all(dir.file(name)), old_first);
      }
      std::filesystem::remove(dir.file(name));
    }
    EXPECT_EQ(kept, 3u);
  }
}

// A termination signal that arrives while a set is being renamed into place is held until
// the set is complete, then ends the process as usual.
TEST(writer, signal_during_commit_waits_for_the_whole_set) {
  ScratchDir dir;
  const pid_t pid = ::fork();
  if (pid == 0) {
    cli::run_tool(
        "gguf-x", 0, nullptr,
        [&] {
          std::vector<std::unique_ptr<detail::OutputFile>> outs;
          for (const char* name : {"s1.gguf", "s2.gguf"}) {
            outs.push_back(std::make_unique<detail::OutputFile>(dir.file(name)));
            outs.back()->write(std::vector<uint8_t>{1, 2, 3});
            outs.back()->finish();
          }
          {
            detail::SignalsDeferred deferred;
            ::raise(SIGTERM);
            for (auto& out : outs) out->commit(false, true);
          }
          ::_exit(0);  // not reached: the signal ends the process first
          return 0;
        },
        1);
    ::_exit(1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"s1.gguf", "s2.gguf"}));
  EXPECT_EQ(read_all(dir.file("s2.gguf")), std::string("\x01\x02\x03"));
}

// Runs fn in a child with a private mount namespace holding a 1 MiB tmpfs at dir; returns the
// child's exit code and what it wrote to the pipe. Exit code 77 means "could not set up".
std::pair<int, std::string> in_small_tmpfs(const std::string& dir,
                                           const std::function<std::string()>& fn) {
  int fds[2];
  if (::pipe(fds) != 0) return {77, "pipe failed"};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    auto finish = [&](int code, const std::string& msg) {
      (void)!::write(fds[1], msg.data(), msg.size());
      ::_exit(code);
    };
    if (::unshare(CLONE_NEWNS) != 0) finish(77, std::string("unshare: ") + strerror(errno));
    if (::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
      finish(77, std::string("make-private: ") + strerror(errno));
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=1m") != 0)
      finish(77, std::string("mount: ") + strerror(errno));
    try {
      finish(0, fn());
    } catch (const std::exception& e) {
      finish(1, std::string("unexpected exception: ") + e.what());
    }
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, n);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

TEST(writer, full_device_leaves_nothing) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to mount a private tmpfs";
  ScratchDir src_dir, dir;
  // A FileRange source outside the tmpfs: copy_file_range either fails with EXDEV (then the
  // writer falls back to write()) or reports ENOSPC itself.
  const auto src_bytes = testing::pattern_bytes(uint64_t{3} << 20, 5);
  {
    std::ofstream f(src_dir.file("src.bin"), std::ios::binary);
    f.write(reinterpret_cast<const char*>(src_bytes.data()), src_bytes.size());
  }
  const std::string out = dir.file("out.gguf");
  const auto [code, msg] = in_small_tmpfs(dir.path(), [&] {
    std::string report;
    auto listing = [&] {
      std::string s;
      for (const auto& e : std::filesystem::directory_iterator(dir.path()))
        s += " " + e.path().filename().string();
      return s;
    };
    Plan produced = small_plan();
    PlanTensor p;
    p.name = "big";
    p.type_id = static_cast<uint32_t>(GgmlType::I8);
    p.shape = {int64_t{3} << 20};
    p.bytes = uint64_t{3} << 20;
    p.source =
        Producer{[](uint64_t, std::span<uint8_t> o) { std::fill(o.begin(), o.end(), 7); }, 0};
    produced.tensors.push_back(p);
    Plan copied = produced;
    copied.tensors.back().source = FileRange{open_file_source(src_dir.file("src.bin")), 0};
    for (const Plan* plan : {&produced, &copied}) {
      report += error_of(*plan, out, {}) + "\n";
      report += "left:" + listing() + "\n";
    }
    return report;
  });
  if (code == 77) GTEST_SKIP() << "cannot mount a private tmpfs: " << msg;
  ASSERT_EQ(code, 0) << msg;
  std::vector<std::string> lines;
  for (size_t at = 0, nl; (nl = msg.find('\n', at)) != std::string::npos; at = nl + 1)
    lines.push_back(msg.substr(at, nl - at));
  ASSERT_EQ(lines.size(), 4u) << msg;
  for (int i : {0, 2}) {
    SCOPED_TRACE(i == 0 ? "producer" : "file range");
    EXPECT_EQ(lines[i].rfind(out + ": tensor 'big': at byte ", 0), 0u) << lines[i];
    EXPECT_THAT(lines[i], ::testing::EndsWith("failed: no space left on device"));
    EXPECT_EQ(lines[i + 1], "left:") << "files left behind";
  }
}

// The output file itself, unnamed (O_TMPFILE) and named (file systems without O_TMPFILE):
// an unnamed file stays without a name through finish() (the read-back verification runs
// then) and is named only by commit(); what commit() and an abandoned file leave behind.
TEST(writer, output_file_is_named_only_when_committed) {
  const mode_t old_umask = ::umask(022);
  for (const bool unnamed : {true, false}) {
    SCOPED_TRACE(unnamed);
    ScratchDir dir;
    const std::vector<uint8_t> bytes = {1, 2, 3, 4, 5};
    const auto temps = [&] {
      size_t n = 0;
      for (const auto& e : dir.entries()) n += e.rfind(".o.gguf.tmp.", 0) == 0;
      return n;
    };
    {
      detail::OutputFile out(dir.file("o.gguf"), unnamed);
      out.write(bytes);
      EXPECT_EQ(temps(), unnamed ? 0u : 1u);
      EXPECT_EQ(dir.entries().size(), temps());
      out.finish();
      ASSERT_EQ(temps(), unnamed ? 0u : 1u);
      struct stat st {};
      ASSERT_EQ(::stat(out.temp_path().c_str(), &st), 0);
      EXPECT_EQ(st.st_size, 5);
      EXPECT_EQ(st.st_mode & 0777, 0644u);
      out.commit(false);
      EXPECT_EQ(dir.entries(), std::vector<std::string>{"o.gguf"});
    }
    std::ifstream in(dir.file("o.gguf"), std::ios::binary);
    EXPECT_EQ(std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {}), bytes);
    // The signal handlers' cleanup removes a named temp file (and cannot see an unnamed one,
    // which needs no removing).
    {
      detail::OutputFile out(dir.file("p.gguf"), unnamed);
      out.write(bytes);
      out.finish();
      remove_temp_files_from_signal_handler();
      EXPECT_EQ(dir.entries(), std::vector<std::string>{"o.gguf"});
    }
    // Abandoned before or after finish(): nothing is left; a taken path is not replaced.
    for (const bool finished : {false, true}) {
      detail::OutputFile out(dir.file("o.gguf"), unnamed);
      out.write(bytes);
      if (finished) {
        out.finish();
        EXPECT_THROW(out.commit(false), Error);
      }
    }
    EXPECT_EQ(dir.entries(), std::vector<std::string>{"o.gguf"});
  }
  ::umask(old_umask);
}

TEST(writer, killed_writer_leaves_no_output) {
  ScratchDir dir;
  const std::string out = dir.file("out.gguf");
  const pid_t pid = ::fork();
  if (pid == 0) {
    Plan plan;
    PlanTensor p;
    p.name = "slow";
    p.type_id = static_cast<uint32_t>(GgmlType::I8);
    p.shape = {int64_t{256} << 20};
    p.bytes = uint64_t{256} << 20;
    p.source = Producer{[](uint64_t, std::span<uint8_t> o) {
                          std::fill(o.begin(), o.end(), 3);
                          std::this_thread::sleep_for(std::chrono::milliseconds(50));
                        },
                        0};
    plan.tensors.push_back(p);
    try {
      write_plan(plan, out, {});
    } catch (...) {
      ::_exit(1);
    }
    ::_exit(0);
  }
  // Wait until the (unnamed) output holds some payload, then kill the writer.
  bool going = false;
  for (int i = 0; i < 1000 && !going; ++i) {
    const std::string open = testing::open_file_in(pid, dir.path());
    struct stat st {};
    going = !open.empty() && ::stat(open.c_str(), &st) == 0 && st.st_size > (int64_t{8} << 20);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(going) << "the writer never got going";
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{});  // not even a temp file
}

// Flips one byte of the temp file once everything is written (the final progress call comes
// before verification), so the read-back must catch it.
std::string corrupt_and_write(const Plan& plan, const std::string& path, uint64_t at, uint8_t value,
                              const ScratchDir& dir) {
  WriteOptions o;
  o.progress = [&](uint64_t done, uint64_t total) {
    if (done != total) return;
    const std::string open = testing::open_file_in(0, dir.path());
    ASSERT_FALSE(open.empty());
    const int fd = ::open(open.c_str(), O_WRONLY);
    EXPECT_EQ(::pwrite(fd, &value, 1, static_cast<off_t>(at)), 1);
    ::close(fd);
  };
  return error_of(plan, path, o);
}

TEST(writer, verification_catches_a_changed_payload) {
  ScratchDir dir;
  Plan plan;
  plan.tensors.push_back(memory_tensor("t", GgmlType::F32, {8}, 1));
  plan.tensors.push_back(memory_tensor("u", GgmlType::F32, {1024}, 2));
  const std::string out = dir.file("out.gguf");
  const uint64_t data = serialize_header({}, 3, plan.tensors).size();
  const uint8_t flipped = testing::payload_of(plan.tensors[1])[100] ^ 1;
  const std::string msg = corrupt_and_write(plan, out, data + 32 + 100, flipped, dir);
  EXPECT_THAT(msg, HasSubstr(out + ": tensor 'u': verification failed: payload reads back with "
                                   "xxh3 "));
  EXPECT_TRUE(dir.entries().empty());
}

// A payload copied from an input that reads back different: the message names that input and
// its byte, the likeliest culprit (a file changed during the write).
TEST(writer, verification_failure_of_a_copied_payload_names_its_source) {
  ScratchDir dir, in_dir;  // the input elsewhere: corrupt_and_write flips the file open in dir
  Plan in;
  in.tensors.push_back(memory_tensor("t", GgmlType::F32, {8}, 1));
  in.tensors.push_back(memory_tensor("u", GgmlType::F32, {1024}, 2));
  const std::string in_path = in_dir.file("in.gguf");
  write_plan(in, in_path, {});
  const auto src = open_file_source(in_path);
  const auto f = GgufFile::open(in_path);
  Plan plan;
  for (const TensorInfo& t : f->tensors())
    plan.tensors.push_back(
        {t.name, t.type_id, t.shape, *t.bytes, FileRange{src, f->data_start(t)}});
  const std::string out = dir.file("out.gguf");
  const uint64_t data = serialize_header({}, 3, plan.tensors).size();
  const uint8_t flipped = testing::payload_of(in.tensors[1])[100] ^ 1;
  const std::string msg = corrupt_and_write(plan, out, data + 32 + 100, flipped, dir);
  EXPECT_THAT(msg, HasSubstr(fmt::format("; it was copied from '{}' at byte {}: did that file "
                                         "change during the write?",
                                         in_path, f->data_start(f->tensors()[1]))));
}

TEST(writer, verification_catches_a_changed_header) {
  ScratchDir dir;
  Plan plan;
  plan.tensors.push_back(memory_tensor("t", GgmlType::F32, {8}, 1));
  const std::string out = dir.file("out.gguf");
  // The tensor info is 8+1 (name) + 4 (n_dims) + 8 (ne) + 4 (type) + 8 (offset) bytes from 24.
  const std::string msg = corrupt_and_write(plan, out, 24 + 9 + 4 + 8, 26, dir);  // f32 -> i32
  EXPECT_EQ(msg, out + ": tensor 't': verification failed: reads back as i32 [8], wrote f32 [8]");
  EXPECT_TRUE(dir.entries().empty());
}

TEST(writer, memory_stays_bounded) {
  // In a child, so the peak RSS belongs to this write alone.
  ScratchDir dir;
  const pid_t pid = ::fork();
  if (pid == 0) {
    rusage before{};
    ::getrusage(RUSAGE_SELF, &before);
    Plan plan;
    PlanTensor p;
    p.name = "big";
    p.type_id = static_cast<uint32_t>(GgmlType::F16);
    p.shape = {4096, 16384};  // 128 MiB
    p.bytes = expected_bytes(p);
    p.source = Producer{[](uint64_t off, std::span<uint8_t> o) {
                          std::memset(o.data(), static_cast<int>(off >> 20), o.size());
                        },
                        8192};
    plan.tensors.push_back(p);
    try {
      write_plan(plan, dir.file("big.gguf"), {});
    } catch (...) {
      ::_exit(2);
    }
    rusage after{};
    ::getrusage(RUSAGE_SELF, &after);
    ::_exit(after.ru_maxrss - before.ru_maxrss < 32 * 1024 ? 0 : 1);  // KiB
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "peak RSS grew by 32 MiB or more (2 = write failed)";
}

// Not part of the default run (writes 4.3 GiB): --gtest_also_run_disabled_tests.
TEST(writer, DISABLED_writes_files_over_4_gib) {
  ScratchDir dir;
  Plan plan;
  // The second payload starts past 4 GiB.
  for (int64_t n : {(int64_t{17} << 30) / 4 + 3, int64_t{1} << 20}) {
    PlanTensor p;
    p.name = "part." + std::to_string(plan.tensors.size());
    p.type_id = static_cast<uint32_t>(GgmlType::I8);
    p.shape = {n};
    p.bytes = expected_bytes(p);
    p.source = Producer{[](uint64_t off, std::span<uint8_t> o) {
                          for (size_t k = 0; k < o.size(); k += 4096)
                            o[k] = static_cast<uint8_t>((off + k) >> 12);
                        },
                        0};
    plan.tensors.push_back(p);
  }
  const auto r = write_plan(plan, dir.file("big.gguf"), {});
  EXPECT_TRUE(r.verified);
  EXPECT_GT(r.tensors[1].offset, uint64_t{1} << 32);
  EXPECT_EQ(
      GgufFile::open(r.paths[0])->tensors()[1].offset + GgufFile::open(r.paths[0])->data_offset(),
      r.tensors[1].offset);
}

}  // namespace
}  // namespace gguf
