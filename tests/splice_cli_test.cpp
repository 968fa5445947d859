// gguf-splice, the binary: golden stdout/stderr/exit code, dry runs that write nothing, and
// outputs that never appear half-written (killed mid-write, full device).
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/cli.h"
#include "cli_run.h"
#include "splice_test_util.h"

namespace gguf {
namespace {

namespace fs = std::filesystem;
using splice_test::fx;
using splice_test::Scratch;
using testing::run_cli;

const std::string kExe = std::string(GGUF_TOOLS_DIR) + "/gguf-splice";
const std::string kTry = "Try 'gguf-splice --help' for more information.\n";

#define REQUIRE_TOOL()                                              \
  do {                                                              \
    if (!fs::exists(kExe)) GTEST_SKIP() << kExe << " is not built"; \
  } while (0)

testing::CliResult splice_cli(std::vector<std::string> args) {
  return run_cli("gguf-splice", args);
}

TEST(splice_cli, help_documents_the_take_syntax) {
  REQUIRE_TOOL();
  const auto r = splice_cli({"--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.err, "");
  EXPECT_TRUE(r.out.starts_with("Usage: gguf-splice BASE.gguf")) << r.out;
  EXPECT_NE(r.out.find("DONOR.gguf:layers=37-42,role=routed,match=REGEX"), std::string::npos);
  EXPECT_NE(r.out.find("--allow-mixed-gate-up"), std::string::npos);
}

TEST(splice_cli, usage_errors_exit_2) {
  REQUIRE_TOOL();
  auto r = splice_cli({fx().base, "--donor", fx().donor, "--layers", "3"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "gguf-splice: error: missing -o OUT.gguf (or use --dry-run)\n" + kTry);
  r = splice_cli({fx().base, "--layers", "3", "--dry-run"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gguf-splice: error: --layers, --role and --match select from --donor; give --donor "
            "(or use --take)\n" +
                kTry);
  r = splice_cli({fx().base, "--take", fx().donor + ":layer=3", "--dry-run"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, fmt::format("gguf-splice: error: invalid --take value '{}:layer=3': unknown "
                               "selector key 'layer' (expected "
                               "DONOR.gguf:layers=37-42,role=routed,match=REGEX)\n{}",
                               fx().donor, kTry));
}

TEST(splice_cli, dry_run_prints_the_plan_and_writes_nothing) {
  REQUIRE_TOOL();
  Scratch dir;
  const std::string out = dir.file("out.gguf");
  const auto r =
      splice_cli({fx().base, "--donor", fx().donor, "--layers", "3-5", "-o", out, "--dry-run"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_TRUE(dir.entries().empty());
  std::vector<std::string> lines;
  std::istringstream in(r.out);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 15u) << r.out;
  const size_t name_w = std::string("blk.3.ffn_gate_exps.weight").size();
  const size_t from_w = fx().donor.size();
  const auto row = [&](const std::string& a, const std::string& b, const std::string& c,
                       const std::string& d) {
    return fmt::format("{:<{}}  {:<{}}  {:<10}  {:>11}", a, name_w, b, from_w, c, d);
  };
  EXPECT_EQ(lines[0], row("tensor", "from", "type", "bytes delta"));
  int k = 1;
  for (int layer = 3; layer <= 5; ++layer)
    for (const char* kind : {"gate", "up", "down"})
      EXPECT_EQ(lines[k++], row(fmt::format("blk.{}.ffn_{}_exps.weight", layer, kind), fx().donor,
                                "f16 -> f32", "+512.00 KiB"));
  const Model base = Model::open(fx().base);
  const size_t n = base.tensors().size();
  EXPECT_EQ(lines[10],
            fmt::format("9 tensors spliced from 1 donor, {} copied from '{}'", n - 9, fx().base));
  uint64_t before = 0;
  for (const auto& t : base.tensors()) before += *t.info->bytes;
  EXPECT_EQ(lines[11], fmt::format("tensor data: {} -> {} (+4.50 MiB)", human_bytes(before),
                                   human_bytes(before + 9 * 524288)));
  EXPECT_TRUE(lines[12].starts_with("file size: ")) << lines[12];
  EXPECT_EQ(lines[13], "general.file_type: 1 -> 1");
  EXPECT_EQ(lines[14], "dry run: no GGUF written");
}

TEST(splice_cli, json_dry_run_and_write) {
  REQUIRE_TOOL();
  Scratch dir;
  const std::string out = dir.file("out.gguf");
  auto r = splice_cli({fx().base, "--take", fx().donor + ":layers=3-5,role=routed", "-o", out,
                       "--dry-run", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(dir.entries().empty());
  auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["output"].is_null());
  EXPECT_EQ(j["bytes_before"], fs::file_size(fx().base));
  size_t spliced = 0;
  for (const auto& t : j["tensors"]) {
    if (t["action"] != "splice") {
      EXPECT_EQ(t["action"], "copy");
      EXPECT_EQ(t["source"], fx().base);
      EXPECT_EQ(t["type_before"], t["type_after"]);
      EXPECT_EQ(t["bytes_before"], t["bytes_after"]);
      continue;
    }
    ++spliced;
    EXPECT_TRUE(splice_test::routed_in(t["name"].get<std::string>(), 3, 5)) << t["name"];
    EXPECT_EQ(t["source"], fx().donor);
    EXPECT_EQ(t["type_before"], "f16");
    EXPECT_EQ(t["type_after"], "f32");
    EXPECT_EQ(t["bytes_before"], 524288u);
    EXPECT_EQ(t["bytes_after"], 1048576u);
  }
  EXPECT_EQ(spliced, 9u);
  EXPECT_EQ(j["tensors"].size(), Model::open(fx().base).tensors().size());
  const auto planned = j["bytes_after"].get<uint64_t>();

  r = splice_cli(
      {fx().base, "--take", fx().donor + ":layers=3-5,role=routed", "-o", out, "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["output"], out);
  EXPECT_EQ(j["verified"], true);
  EXPECT_EQ(j["bytes_after"], fs::file_size(out));
  EXPECT_EQ(planned, fs::file_size(out));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.gguf"});
}

// A dry run of a split output predicts the size of every shard, headers included.
TEST(splice_cli, dry_run_of_a_split_set_predicts_its_size) {
  REQUIRE_TOOL();
  Scratch dir;
  const std::string out = dir.file("out.gguf");
  const std::vector<std::string> args = {
      fx().base, "--donor", fx().donor, "--layers", "3", "-o", out, "--json", "--split-max-tensors",
      "7"};
  auto dry = args;
  dry.push_back("--dry-run");
  auto r = splice_cli(dry);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto planned = nlohmann::json::parse(r.out)["bytes_after"].get<uint64_t>();
  r = splice_cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  uint64_t total = 0;
  for (const auto& p : j["outputs"]) total += fs::file_size(p.get<std::string>());
  EXPECT_GT(j["outputs"].size(), 1u);
  EXPECT_EQ(j["bytes_after"], total);
  EXPECT_EQ(planned, total);
  // The text report gives the same size.
  auto text = args;
  std::erase(text, "--json");
  text.push_back("--force");
  r = splice_cli(text);
  ASSERT_EQ(r.code, 0) << r.err;
  const uint64_t before = j["bytes_before"].get<uint64_t>();
  const std::string delta =
      total > before ? "+" + human_bytes(total - before) : "-" + human_bytes(before - total);
  EXPECT_NE(r.out.find(fmt::format("-> {} ({})\n", human_bytes(total), delta)), std::string::npos)
      << r.out;
}

TEST(splice_cli, refusals_and_their_exit_codes) {
  REQUIRE_TOOL();
  Scratch dir;
  const std::string out = dir.file("out.gguf");
  std::ofstream(out) << "x";
  auto r = splice_cli({fx().base, "--donor", fx().donor, "--layers", "3", "-o", out});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            fmt::format("gguf-splice: error: {}: output file exists; use --force to replace it\n{}",
                        out, kTry));
  r = splice_cli({fx().base, "--donor", fx().donor, "--layers", "3", "-o", fx().base, "--force"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, fmt::format("gguf-splice: error: {0}: output is the same file as input '{0}'; "
                               "refusing to overwrite an input (choose another output path)\n{1}",
                               fx().base, kTry));
  r = splice_cli(
      {fx().base, "--donor", fx().donor, "--layers", "3", "--role", "routed-gate", "--dry-run"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(r.err.starts_with("gguf-splice: error: layer 3: gate and up experts would differ"))
      << r.err;
  r = splice_cli({fx().base, "--donor", fx().donor, "--layers", "3", "--role", "routed-gate",
                  "--dry-run", "--allow-mixed-gate-up"});
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(r.err.starts_with("gguf-splice: warning: layer 3: gate and up experts would differ"))
      << r.err;
  r = splice_cli({fx().base, "--donor", fx().donor, "--layers", "5-9", "--dry-run"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, fmt::format("gguf-splice: error: layers 7-9 do not exist in '{}' (layers 0-6)\n",
                               fx().base));
  // A donor whose data runs past its end: the reader refuses it before any planning.
  const std::string bad = dir.file("bad.gguf");
  fs::copy_file(fx().donor, bad);
  const Model intact = Model::open(bad);
  const uint64_t start = intact.tensors().back().data_start();
  const uint64_t bytes = *intact.tensors().back().info->bytes;
  fs::resize_file(bad, start + bytes - 1);
  r = splice_cli({fx().base, "--donor", bad, "--dry-run"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, fmt::format("gguf-splice: error: {}: tensor 'output.weight': at byte {}: data "
                               "runs past end of file (needs {} bytes, {} left)\n",
                               bad, start, bytes, bytes - 1));
}

// The write would fail to create its temp file there: the dry run says so too (exit 1, an I/O
// problem, not a usage error).
TEST(splice_cli, dry_run_refuses_an_output_directory_that_cannot_take_it) {
  REQUIRE_TOOL();
  Scratch dir;
  const std::string file = dir.file("plain");
  std::ofstream(file) << "x";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {dir.file("nodir/out.gguf"), "'" + dir.file("nodir") + "': no such file or directory"},
      {file + "/out.gguf", "'" + file + "': not a directory"},
  };
  for (const auto& [out, reason] : cases) {
    for (const bool dry : {true, false}) {
      std::vector<std::string> args = {fx().base, "--donor", fx().donor, "--layers",
                                       "3",       "-o",      out};
      if (dry) args.push_back("--dry-run");
      const auto r = splice_cli(args);
      EXPECT_EQ(r.code, 1) << dry;
      EXPECT_EQ(r.out, "");
      EXPECT_EQ(r.err, fmt::format("gguf-splice: error: {}: cannot create the output in "
                                   "directory {}\n",
                                   out, reason));
    }
  }
  // Not testable as root, for whom every directory is writable.
  if (::geteuid() != 0) {
    const std::string ro = dir.file("ro");
    fs::create_directory(ro);
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
    const auto r = splice_cli(
        {fx().base, "--donor", fx().donor, "--layers", "3", "-o", ro + "/out.gguf", "--dry-run"});
    fs::permissions(ro, fs::perms::owner_all);
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(r.err, fmt::format("gguf-splice: error: {0}/out.gguf: cannot create the output in "
                                 "directory '{0}': permission denied\n",
                                 ro));
  }
}

// In a sticky directory (as /tmp) another user's file cannot be replaced: the final rename
// fails. The dry run, and the run before any work, say so (they passed, and the run failed
// after writing everything). Needs root to set up, and setpriv to run the tool as nobody.
TEST(splice_cli, another_users_file_in_a_sticky_directory_is_refused_before_any_work) {
  REQUIRE_TOOL();
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to set up another user's file";
  if (testing::run_program("setpriv", {"--help"}).code != 0) GTEST_SKIP() << "needs setpriv";
  std::string templ = (fs::temp_directory_path() / "gguf-sticky-XXXXXX").string();
  ASSERT_NE(::mkdtemp(templ.data()), nullptr);
  const fs::path dir = templ;
  fs::permissions(dir, fs::perms::all | fs::perms::sticky_bit);
  // A copy of the tool in the directory, so that user nobody reaches it wherever the build is.
  const std::string tool = (dir / "gguf-splice").string();
  fs::copy_file(std::string(GGUF_TOOLS_DIR) + "/gguf-splice", tool);
  auto nobody = [&](std::vector<std::string> args) {
    std::vector<std::string> all = {"--reuid=65534", "--regid=65534", "--clear-groups", tool};
    all.insert(all.end(), args.begin(), args.end());
    return testing::run_program("setpriv", all);
  };
  if (nobody({"--version"}).code != 0) {
    fs::remove_all(dir);
    GTEST_SKIP() << "user nobody cannot run the tool from " << dir << " (noexec?)";
  }
  for (const char* f : {"base.gguf", "donor.gguf"})
    fs::copy_file(f == std::string("base.gguf") ? fx().base : fx().donor, dir / f);
  const std::string out = (dir / "owned.gguf").string();
  std::ofstream(out) << "root's file";
  for (const bool dry : {true, false}) {
    std::vector<std::string> args = {(dir / "base.gguf").string(),
                                     "--donor",
                                     (dir / "donor.gguf").string(),
                                     "--layers",
                                     "3",
                                     "-o",
                                     out,
                                     "--force"};
    if (dry) args.push_back("--dry-run");
    const auto r = nobody(args);
    EXPECT_EQ(r.code, 1) << dry;
    EXPECT_EQ(r.err, fmt::format("gguf-splice: error: {}: cannot replace the output: directory "
                                 "'{}' is sticky (as /tmp is) and the file belongs to another "
                                 "user\n",
                                 out, dir.string()));
  }
  EXPECT_EQ(fs::file_size(out), 11u);
  fs::remove_all(dir);
}

// Sizes as llama-gguf-split reads them: K/M/G/T (and KB...) decimal, KiB... binary.
TEST(splice_cli, split_sizes_are_decimal_as_in_llama_gguf_split) {
  EXPECT_EQ(cli::parse_size("123", "s"), 123u);
  EXPECT_EQ(cli::parse_size("5M", "s"), 5000000u);
  EXPECT_EQ(cli::parse_size("50G", "s"), 50000000000u);
  EXPECT_EQ(cli::parse_size("50GB", "s"), 50000000000u);
  EXPECT_EQ(cli::parse_size("4GiB", "s"), uint64_t{4} << 30);
  EXPECT_EQ(cli::parse_size("2T", "s"), 2000000000000u);
  EXPECT_EQ(cli::parse_size("3MiB", "s"), 3u << 20);
  // Suffixes in any case.
  EXPECT_EQ(cli::parse_size("4g", "s"), 4000000000u);
  EXPECT_EQ(cli::parse_size("1m", "s"), 1000000u);
  EXPECT_EQ(cli::parse_size("1kb", "s"), 1000u);
  EXPECT_EQ(cli::parse_size("2t", "s"), 2000000000000u);
  EXPECT_EQ(cli::parse_size("3mib", "s"), 3u << 20);
  EXPECT_EQ(cli::parse_size("1GIB", "s"), uint64_t{1} << 30);
  for (const char* bad : {"", "G", "4 G", "4Gi", "4gi", "-1", "1.5G", "4GG", "0", "0k"}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(cli::parse_size(bad, "s"), Error);
  }
  EXPECT_THROW(cli::parse_size("18446744073709551615K", "s"), Error);
}

TEST(splice_cli, split_output) {
  REQUIRE_TOOL();
  Scratch dir;
  const auto r = splice_cli({fx().base, "--donor", fx().donor, "--layers", "1-2", "-o",
                             dir.file("out.gguf"), "--split-max-size", "5M"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto shards = dir.entries();
  ASSERT_GT(shards.size(), 1u);
  EXPECT_EQ(shards[0], fmt::format("out-00001-of-{:05d}.gguf", shards.size()));
  const Model out = Model::open(dir.file(shards[0]));
  EXPECT_EQ(out.tensors().size(), Model::open(fx().base).tensors().size());
  EXPECT_EQ(out.metadata().get_uint("splice.tensor_count"), 6u);
}

// Runs exe with args; stdout/stderr go to files in dir. Returns the pid.
pid_t spawn(const std::string& exe, const std::vector<std::string>& args, const Scratch& dir) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int o = open(dir.file("stdout").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = open(dir.file("stderr").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(o, 1), dup2(e, 2);
    std::vector<char*> argv{const_cast<char*>(exe.c_str())};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(exe.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(splice_cli, killed_mid_write_leaves_no_output) {
  REQUIRE_TOOL();
  Scratch logs, outdir;
  const std::string out = outdir.file("out.gguf");
  // Kill as soon as the tool has its (unnamed) output open: the header, payloads, fsync and
  // read-back are all still ahead.
  const pid_t pid = spawn(kExe, {fx().base, "--donor", fx().donor, "-o", out}, logs);
  ASSERT_GT(pid, 0);
  // Never hang on a tool that exits before opening its output (then the test fails on its
  // exit status below).
  int status = 0;
  bool exited = false;
  for (int waited_ms = 0; waited_ms < 60000 && !exited; ++waited_ms) {
    if (!gguf::testing::open_file_in(pid, outdir.path()).empty()) break;
    exited = waitpid(pid, &status, WNOHANG) == pid;
    usleep(1000);
  }
  if (!exited) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  ASSERT_TRUE(WIFSIGNALED(status) || WEXITSTATUS(status) == 0)
      << "gguf-splice failed: " << slurp(logs.file("stderr"));
  if (!WIFSIGNALED(status)) GTEST_SKIP() << "gguf-splice finished before it could be killed";
  EXPECT_FALSE(fs::exists(out));
  // The output had no name yet: nothing is left, not even a temp file.
  EXPECT_EQ(outdir.entries(), std::vector<std::string>{});
}

TEST(splice_cli, full_device_leaves_no_output) {
  REQUIRE_TOOL();
  Scratch dir;
  const std::string mnt = dir.file("small");
  fs::create_directory(mnt);
  // A private mount namespace with a 1 MiB tmpfs: ENOSPC for real (needs root, else skip).
  const std::string script =
      "mount -t tmpfs -o size=1m tmpfs \"$1\" || exit 77; shift; out=\"$1\"; shift; "
      "\"$@\" -o \"$out\"; rc=$?; ls -A \"$(dirname \"$out\")\" >&2; exit $rc";
  const pid_t pid = spawn("/usr/bin/unshare",
                          {"-m", "sh", "-c", script, "sh", mnt, mnt + "/out.gguf", kExe, fx().base,
                           "--donor", fx().donor, "--layers", "3-5"},
                          dir);
  int status = 0;
  waitpid(pid, &status, 0);
  const std::string err = slurp(dir.file("stderr"));
  if (!WIFEXITED(status) || WEXITSTATUS(status) == 77 ||
      (WEXITSTATUS(status) == 1 && err.starts_with("unshare:")))
    GTEST_SKIP() << "no private tmpfs here: " << err;
  EXPECT_EQ(WEXITSTATUS(status), 1) << err;
  EXPECT_TRUE(err.starts_with(fmt::format("gguf-splice: error: {}/out.gguf: ", mnt))) << err;
  EXPECT_NE(err.find("no space left on device"), std::string::npos) << err;
  // ls printed nothing after the error line: the tmpfs was left empty.
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

}  // namespace
}  // namespace gguf
