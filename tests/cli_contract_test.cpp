// The command-line contract all four tools share (DESIGN.md): --json failures as one JSON
// document, positional arguments checked with a hint, -j/--threads with 0 meaning all cores,
// -q/--quiet, and --help that lists only options a user can type.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_run.h"
#include "diff_fixture.h"
#include "gguf/ops/synth.h"
#include "gguf/write/writer.h"

namespace {

using gguf::diff_fixture::Fixture;
using gguf::testing::CliResult;
using gguf::testing::run_cli;
using gguf::testing::TempDir;

std::string scrub(std::string s, const std::string& dir) {
  for (size_t p; (p = s.find(dir)) != std::string::npos;) s.replace(p, dir.size(), "DIR");
  return s;
}

// Expects exactly one JSON document on stdout with the error and the exit code, and the same
// message on stderr as without --json.
void expect_json_error(const CliResult& r, int code, const std::string& message,
                       const std::string& dir) {
  EXPECT_EQ(r.code, code);
  const auto doc = nlohmann::json::parse(r.out);  // throws if not exactly one document
  EXPECT_EQ(doc.size(), 2u) << r.out;
  EXPECT_EQ(scrub(doc.value("error", ""), dir), message);
  EXPECT_EQ(doc.value("exit_code", -1), code);
  EXPECT_NE(scrub(r.err, dir).find(message), std::string::npos) << r.err;
}

TEST(cli_contract, json_failures_print_one_error_document) {
  TempDir dir;
  const std::string a = Fixture().write(dir, "a.gguf");
  const std::string missing = dir.file("missing.gguf");
  const std::string no_file = "DIR/missing.gguf: cannot open: No such file or directory";
  expect_json_error(run_cli("gguf-diff", {"--json", a, missing}), 2, no_file, dir.path());
  expect_json_error(run_cli("gguf-inspect", {"--json", missing}), 1, no_file, dir.path());
  expect_json_error(
      run_cli("gguf-splice", {missing, "--donor", a, "-o", dir.file("o.gguf"), "--json"}), 1,
      no_file, dir.path());
  expect_json_error(run_cli("gguf-requant", {a, "--json", "-o", dir.file("o.gguf")}), 2,
                    "--type is required (the type to re-encode to), or per-tensor types "
                    "(--tensor-type, --tensor-type-file, --role-type, --output-tensor-type, "
                    "--token-embedding-type, --recipe-from)",
                    dir.path());
  expect_json_error(run_cli("gguf-requant", {a, "--json", "--type", "q9_9", "-o", "x"}), 2,
                    "--type: unknown type 'q9_9' (types it can write: f32, f16, q4_0, q4_1, "
                    "q5_0, q5_1, q8_0, q8_1, q2_K, q3_K, q4_K, q5_K, q6_K, q8_K, iq2_xxs, iq2_xs, "
                    "iq3_xxs, iq1_s, iq4_nl, iq3_s, iq2_s, iq4_xs, iq1_m, bf16, tq1_0, tq2_0, "
                    "mxfp4, nvfp4, q1_0, q2_0)",
                    dir.path());
  expect_json_error(run_cli("gguf-diff", {"--json", "--frobnicate", a, a}), 2,
                    "unrecognised option '--frobnicate'", dir.path());
  expect_json_error(run_cli("gguf-diff", {"-q", "--json", a, a}), 2,
                    "--quiet and --json exclude each other", dir.path());
  // Nothing was written: the failed runs left no output behind.
  EXPECT_FALSE(std::filesystem::exists(dir.file("o.gguf")));
}

// The document's "error" is the stderr message itself: backslashes, quotes and escapes of a
// name are not escaped a second time.
TEST(cli_contract, json_error_is_the_stderr_message) {
  TempDir dir;
  const std::string odd = dir.file("x\\y'\x1b.gguf");
  const CliResult r = run_cli("gguf-inspect", {"--json", odd});
  EXPECT_EQ(r.code, 1);
  const auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ("gguf-inspect: error: " + doc["error"].get<std::string>() + "\n", r.err);
  EXPECT_NE(r.err.find("x\\\\y'\\x1b.gguf"), std::string::npos) << r.err;
}

// gguf-inspect's own messages (a damaged file's error in its report, --check's problems) are
// the same text on stderr and in the JSON, with the path escaped for a terminal.
TEST(cli_contract, inspect_messages_escape_the_path_the_same_everywhere) {
  TempDir dir;
  const std::string odd = Fixture().write(dir, "d\\x\x1b.gguf");
  std::filesystem::resize_file(odd, 200);
  CliResult r = run_cli("gguf-inspect", {"--json", odd});
  EXPECT_EQ(r.code, 1);
  const auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ("gguf-inspect: error: " + doc["error"].get<std::string>() + "\n", r.err);
  EXPECT_NE(r.err.find("d\\\\x\\x1b.gguf"), std::string::npos) << r.err;

  Fixture long_name;
  long_name.tensor("output_norm.weight").name = std::string(70, 'n');
  // Two errors: the long name, and the vocabulary's missing tokenizer.ggml.model.
  long_name.u32s.push_back({"deepseek2.context_length", 64});
  long_name.u32s.push_back({"deepseek2.embedding_length", 8});
  const std::string bad = long_name.write(dir, "e\x1b[31m.gguf");
  r = run_cli("gguf-inspect", {"--check", bad});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("e\\x1b[31m.gguf: tensor 'nnn"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("e\\x1b[31m.gguf: key 'tokenizer.ggml.model': missing"), std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("check: 2 error(s), 0 warning(s)"), std::string::npos) << r.out;
}

// --json is read from the parsed command line: as the value of another option it does not
// count. Long options are not guessed from a prefix: --jso is an unknown option, not --json.
TEST(cli_contract, json_is_what_the_command_line_parsed) {
  TempDir dir;
  const std::string missing = dir.file("missing.gguf");
  CliResult r = run_cli("gguf-inspect", {"--json", missing});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(nlohmann::json::parse(r.out).value("exit_code", 0), 1);
  r = run_cli("gguf-inspect", {"--jso", missing});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "gguf-inspect: error: unrecognised option '--jso'\n"
            "Try 'gguf-inspect --help' for more information.\n");
  r = run_cli("gguf-diff", {"--json", missing, missing});
  EXPECT_EQ(nlohmann::json::parse(r.out).value("exit_code", 0), 2);
  // A prefix of one option (--no for --no-verify) or of several (--f) is unknown alike.
  for (const char* prefix : {"--no", "--f", "--dry"}) {
    SCOPED_TRACE(prefix);
    r = run_cli("gguf-splice", {missing, "--donor", missing, prefix, "-o", dir.file("o.gguf")});
    EXPECT_EQ(r.code, 2);
    EXPECT_TRUE(
        r.err.starts_with(fmt::format("gguf-splice: error: unrecognised option '{}'", prefix)))
        << r.err;
  }
  // "--json" as --match's value: a text run, whose failure prints nothing on stdout.
  r = run_cli("gguf-requant",
              {missing, "--type", "q8_0", "--match", "--json", "-o", dir.file("o.gguf")});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.out, "");
  // An unparsable command line still honours a --json among the arguments.
  r = run_cli("gguf-splice", {"--json", "--no-such-option"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(nlohmann::json::parse(r.out).value("exit_code", 0), 2);
}

TEST(cli_contract, without_json_failures_print_nothing_on_stdout) {
  TempDir dir;
  const CliResult r = run_cli("gguf-inspect", {dir.file("missing.gguf")});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.out, "");
  // "--json" after "--" is a file name, not the option.
  const CliResult s = run_cli("gguf-diff", {"--", "--json", dir.file("missing.gguf")});
  EXPECT_EQ(s.code, 2);
  EXPECT_EQ(s.out, "");
}

// A damaged file: gguf-inspect --json prints its partial report, which carries the error; no
// second document follows.
TEST(cli_contract, inspect_json_on_damaged_file_is_one_document) {
  TempDir dir;
  Fixture().write(dir, "a.gguf");
  std::filesystem::resize_file(dir.file("a.gguf"), 200);
  const CliResult r = run_cli("gguf-inspect", {"--json", dir.file("a.gguf")});
  EXPECT_EQ(r.code, 1);
  const auto doc = nlohmann::json::parse(r.out);
  EXPECT_TRUE(doc.contains("error"));
  EXPECT_TRUE(doc.contains("metadata"));
}

// --json output goes to terminals too: a key or value holding DEL, a C1 control (CSI) or a
// bidi override reaches stdout as a \u escape, and the document still reads back the same.
TEST(cli_contract, json_output_escapes_what_a_terminal_acts_on) {
  TempDir dir;
  Fixture f;
  auto b = f.builder();
  b.string("evil\x7f",
           "a\xc2\x9b"
           "31mred\xe2\x80\xae"
           "b");
  b.write_file(dir.file("e.gguf"));
  for (const std::string tool : {"gguf-inspect", "gguf-diff"}) {
    std::vector<std::string> args = {"--json", dir.file("e.gguf")};
    if (tool == "gguf-diff") args.insert(args.begin() + 1, Fixture().write(dir, "plain.gguf"));
    const CliResult r = run_cli(tool, args);
    EXPECT_LE(r.code, 1) << r.err;
    for (const char* raw : {"\x7f", "\xc2\x9b", "\xe2\x80\xae"})
      EXPECT_EQ(r.out.find(raw), std::string::npos) << tool;
    EXPECT_NE(r.out.find("a\\u009b31mred\\u202eb"), std::string::npos) << r.out;
    const auto doc = nlohmann::json::parse(r.out);
    EXPECT_NE(doc.dump().find("evil\x7f"), std::string::npos);
  }
}

// A tensor name the output cannot carry is an input problem: the error names the input, the
// tensor and the byte of its info, not the output the writer would have refused. Both tools
// that write refuse it, for a name too long for ggml's reader and for an empty one (ggml reads
// it; the writer refuses it). `problem` is what follows the offset.
void expect_name_refused_naming_the_input(const std::string& name, const std::string& problem) {
  TempDir dir;
  Fixture f;
  f.tensors.push_back({name,
                       gguf::diff_fixture::kF32,
                       {8},
                       gguf::diff_fixture::f32_bytes(gguf::diff_fixture::eighths(8, 1))});
  const std::string in = f.write(dir, "in.gguf");
  const std::string donor = Fixture().write(dir, "d.gguf");
  uint64_t at = 0;
  const gguf::Model model = gguf::Model::open(in);
  for (const auto& t : model.tensors())
    if (t.name() == name) at = t.info->info_offset;
  ASSERT_GT(at, 0u);
  const std::string want =
      fmt::format("DIR/in.gguf: tensor '{}': at byte {}: {}", name, at, problem);
  CliResult r = run_cli("gguf-requant", {in, "--type", "f16", "-o", dir.file("o.gguf")});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(scrub(r.err, dir.path()), "gguf-requant: error: " + want + "\n");
  r = run_cli("gguf-splice", {in, "--donor", donor, "--layers", "1", "-o", dir.file("o.gguf")});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(scrub(r.err, dir.path()), "gguf-splice: error: " + want + "\n");
  EXPECT_FALSE(std::filesystem::exists(dir.file("o.gguf")));
}

TEST(cli_contract, a_name_ggml_cannot_load_is_refused_naming_the_input) {
  expect_name_refused_naming_the_input(
      "blk.0." + std::string(64, 'x'),
      "tensor name is 70 bytes; ggml allows at most 63, so ggml could not load a file written "
      "with it");
}

TEST(cli_contract, an_empty_tensor_name_is_refused_naming_the_input) {
  expect_name_refused_naming_the_input("",
                                       "empty tensor name; no output can carry it (llama.cpp's "
                                       "loader refuses a tensor it does not know)");
}

TEST(cli_contract, extra_positional_arguments_name_the_argument_and_where_it_belongs) {
  TempDir dir;
  const std::string a = Fixture().write(dir, "a.gguf");
  const auto err = [&](const std::string& tool, const std::vector<std::string>& args) {
    const CliResult r = run_cli(tool, args);
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.out, "");
    return scrub(r.err, dir.path());
  };
  EXPECT_EQ(err("gguf-requant", {a, dir.file("out.gguf"), "--type", "f16"}),
            "gguf-requant: error: unexpected argument 'DIR/out.gguf' (the output goes after -o)\n"
            "Try 'gguf-requant --help' for more information.\n");
  EXPECT_EQ(err("gguf-splice", {a, a, "-o", dir.file("o.gguf")}),
            "gguf-splice: error: unexpected argument 'DIR/a.gguf' (donors go after --donor or "
            "--take, the output after -o)\nTry 'gguf-splice --help' for more information.\n");
  EXPECT_EQ(err("gguf-splice", {"--base", a, a, "--donor", a, "-o", dir.file("o.gguf")}),
            "gguf-splice: error: unexpected argument 'DIR/a.gguf' (donors go after --donor or "
            "--take, the output after -o)\nTry 'gguf-splice --help' for more information.\n");
  EXPECT_EQ(err("gguf-inspect", {a, a}),
            "gguf-inspect: error: unexpected argument 'DIR/a.gguf' (one model at a time; a split "
            "set by its first shard)\nTry 'gguf-inspect --help' for more information.\n");
  EXPECT_EQ(err("gguf-inspect", {"-t"}),
            "gguf-inspect: error: missing FILE.gguf, the model to inspect\n"
            "Try 'gguf-inspect --help' for more information.\n");
  EXPECT_EQ(err("gguf-requant", {"--type", "f16", "-o", "x.gguf"}),
            "gguf-requant: error: missing IN.gguf (or IN.safetensors), the model to re-encode\n"
            "Try 'gguf-requant --help' for more information.\n");
  EXPECT_EQ(err("gguf-splice", {"--donor", a, "-o", "x.gguf"}),
            "gguf-splice: error: missing BASE.gguf, the model to splice into\n"
            "Try 'gguf-splice --help' for more information.\n");
  // Control characters in an argument are escaped in the message.
  EXPECT_EQ(err("gguf-inspect", {a, "b\x1b[2Jc"}),
            "gguf-inspect: error: unexpected argument 'b\\x1b[2Jc' (one model at a time; a split "
            "set by its first shard)\nTry 'gguf-inspect --help' for more information.\n");
}

TEST(cli_contract, help_lists_only_options_a_user_types) {
  for (const char* tool : {"gguf-inspect", "gguf-diff", "gguf-splice", "gguf-requant"}) {
    const CliResult r = run_cli(tool, {"--help"});
    EXPECT_EQ(r.code, 0) << tool;
    for (const char* internal : {"--file ", "--input ", "--args "})
      EXPECT_EQ(r.out.find(internal), std::string::npos) << tool << " lists " << internal;
    if (std::string(tool) != "gguf-splice") {  // splice decodes nothing; it has no threads
      EXPECT_NE(r.out.find("-j [ --threads ] N"), std::string::npos) << tool;
    }
  }
}

TEST(cli_contract, threads_zero_means_all_cores_in_every_tool) {
  TempDir dir;
  const std::string a = Fixture().write(dir, "a.gguf");
  EXPECT_EQ(run_cli("gguf-inspect", {"--hashes", "-j", "0", a}).code, 0);
  EXPECT_EQ(run_cli("gguf-inspect", {"--hashes", "--threads", "2", a}).code, 0);
  EXPECT_EQ(run_cli("gguf-diff", {"-q", "-j", "0", a, a}).code, 0);
  const CliResult all =
      run_cli("gguf-requant", {a, "--type", "f16", "-j", "0", "-o", dir.file("all.gguf")});
  EXPECT_EQ(all.code, 0) << all.err;
  const CliResult one =
      run_cli("gguf-requant", {a, "--type", "f16", "--threads", "1", "-o", dir.file("one.gguf")});
  EXPECT_EQ(one.code, 0) << one.err;
  std::ifstream fa(dir.file("all.gguf"), std::ios::binary),
      fb(dir.file("one.gguf"), std::ios::binary);
  const std::string ba((std::istreambuf_iterator<char>(fa)), {}),
      bb((std::istreambuf_iterator<char>(fb)), {});
  EXPECT_FALSE(ba.empty());
  EXPECT_EQ(ba, bb);
  const CliResult bad = run_cli("gguf-requant", {a, "--type", "f16", "-j", "-1", "-o", "x"});
  EXPECT_EQ(bad.code, 2);
}

// gguf-requant --dry-run of a split output predicts the size of every shard, headers included.
TEST(cli_contract, requant_dry_run_of_a_split_set_predicts_its_size) {
  TempDir dir;
  const std::string a = Fixture().write(dir, "a.gguf");
  std::vector<std::string> args = {a,   "--type", "f16", "--split-max-tensors",
                                   "1", "--json", "-o",  dir.file("s.gguf")};
  auto dry = args;
  dry.push_back("--dry-run");
  CliResult r = run_cli("gguf-requant", dry);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto planned = nlohmann::json::parse(r.out)["bytes_after"].get<uint64_t>();
  r = run_cli("gguf-requant", args);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  uint64_t total = 0;
  for (const auto& p : j["outputs"]) total += std::filesystem::file_size(p.get<std::string>());
  EXPECT_EQ(j["outputs"].size(), 4u);
  EXPECT_EQ(j["bytes_after"], total);
  EXPECT_EQ(planned, total);
}

TEST(cli_contract, quiet_prints_nothing_on_success) {
  TempDir dir;
  const std::string a = Fixture().write(dir, "a.gguf");
  Fixture donor;
  donor.name = "donor";
  const std::string d = donor.write(dir, "d.gguf");
  CliResult r = run_cli("gguf-requant", {a, "--type", "f16", "-q", "-o", dir.file("r.gguf")});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out + r.err, "");
  EXPECT_TRUE(std::filesystem::exists(dir.file("r.gguf")));
  r = run_cli("gguf-splice", {a, "--donor", d, "--layers", "1", "-q", "-o", dir.file("s.gguf")});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out + r.err, "");
  EXPECT_TRUE(std::filesystem::exists(dir.file("s.gguf")));
  // Quiet does not hide failures.
  r = run_cli("gguf-requant", {a, "--type", "f16", "-q", "-o", dir.file("r.gguf")});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("exists"), std::string::npos) << r.err;
  r = run_cli("gguf-splice", {a, "--donor", d, "-q", "--json", "-o", dir.file("t.gguf")});
  EXPECT_EQ(r.code, 2);
}

// An empty value (an unset shell variable: --imatrix "$IM") is a usage error, never the same
// as leaving the option out: --imatrix '' ran without an importance matrix, --reference ''
// made a two-way diff, --split-max-size '' wrote one file.
TEST(cli_contract, an_empty_option_value_is_a_usage_error) {
  TempDir dir;
  const std::string a = Fixture().write(dir, "a.gguf");
  const std::string out = dir.file("o.gguf");
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"gguf-requant", {a, "--type", "q8_0", "--imatrix", "", "-o", out}},
      {"gguf-requant", {a, "--type", "q8_0", "--base", "", "-o", out}},
      {"gguf-requant", {a, "--type", "q8_0", "--split-max-size", "", "-o", out}},
      {"gguf-requant", {a, "--type", "q8_0", "--tensor-type", "", "-o", out}},
      {"gguf-requant", {a, "--type", "", "-o", out}},
      {"gguf-requant", {a, "--type", "q8_0", "-o", ""}},
      {"gguf-splice", {a, "--donor", "", "-o", out}},
      {"gguf-splice", {a, "--donor", a, "--split-max-size", "", "-o", out}},
      {"gguf-splice", {a, "--take", "", "-o", out}},
      {"gguf-diff", {"--reference", "", a, a}},
      {"gguf-diff", {"--imatrix", "", a, a}},
      {"gguf-diff", {"--manifest", "", a}},
      {"gguf-inspect", {"--match", "", a}},
      {"gguf-inspect", {"--layers", "", a}},
      {"gguf-inspect", {"--role", "", a}},
  };
  for (const auto& [tool, args] : cases) {
    std::string named;  // the option before the empty value
    for (size_t i = 0; i + 1 < args.size(); ++i)
      if (args[i + 1].empty()) named = args[i] == "-o" ? "--output" : args[i];
    SCOPED_TRACE(tool + " " + named);
    const CliResult r = run_cli(tool, args);
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.err, fmt::format("{0}: error: option '{1}' was given an empty value\nTry '{0} "
                                 "--help' for more information.\n",
                                 tool, named));
  }
  EXPECT_FALSE(std::filesystem::exists(out));
  // An empty positional argument.
  const CliResult r = run_cli("gguf-diff", {a, ""});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gguf-diff: error: an empty argument where a file name belongs\n"
            "Try 'gguf-diff --help' for more information.\n");
}

// A pattern is at most 4096 bytes: std::regex compiles recursively, and a longer one (20000
// nested groups, a 100 KB literal) overflowed the stack in every tool that takes one.
TEST(cli_contract, a_pattern_too_long_to_compile_safely_is_a_usage_error) {
  TempDir dir;
  const std::string a = Fixture().write(dir, "a.gguf");
  const std::string nested = std::string(20000, '(') + "blk" + std::string(20000, ')');
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"gguf-inspect", {"--json", "--match", nested, a}},
      {"gguf-diff", {"--json", "--match", nested, a, a}},
      {"gguf-splice", {"--json", a, "--take", a + ":match=" + nested, "--dry-run"}},
      {"gguf-requant", {"--json", a, "--dry-run", "--type", "q8_0", "--match", nested}},
      {"gguf-requant", {"--json", a, "--dry-run", "--tensor-type", nested + "=q8_0"}},
  };
  for (const auto& [tool, args] : cases) {
    SCOPED_TRACE(tool + " " + args[args.size() - 2].substr(0, 20));
    const CliResult r = run_cli(tool, args);
    EXPECT_EQ(r.code, 2);
    const auto doc = nlohmann::json::parse(r.out);
    EXPECT_EQ(doc.value("exit_code", 0), 2);
    const std::string err = doc.value("error", "");
    EXPECT_NE(err.find("40003 bytes, longer than 4096 (give several shorter patterns instead)"),
              std::string::npos)
        << err;
  }
  const CliResult text = run_cli("gguf-inspect", {"--match", nested, a});
  EXPECT_EQ(text.err, "gguf-inspect: error: invalid --match regex '" + std::string(40, '(') +
                          "...': 40003 bytes, longer than 4096 (give several shorter patterns "
                          "instead)\nTry 'gguf-inspect --help' for more information.\n");
  // The longest pattern taken still works, nested as deep as it allows.
  const std::string deepest = std::string(2046, '(') + ".*" + std::string(2046, ')');
  ASSERT_EQ(deepest.size(), 4094u);
  const CliResult r = run_cli("gguf-inspect", {"--match", deepest, a});
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST(cli_contract, an_output_path_leading_into_proc_is_refused) {
  // /dev/stdout is such a link; replacing it with the output (a rename over the link) would
  // leave the file nowhere a user looks. Made here rather than using /dev/stdout itself.
  TempDir dir;
  const std::string a = Fixture().write(dir, "a.gguf");
  const std::string link = dir.file("stdout-link");
  std::filesystem::create_symlink("/proc/self/fd/1", link);
  const std::string msg =
      "output path leads into /proc (an open file descriptor such as "
      "/dev/stdout, not a file); refusing to replace it (give a file path)";
  for (const std::string& out : {link, std::string("/dev/fd/1"), std::string("/proc/self/fd/1")}) {
    SCOPED_TRACE(out);
    const CliResult r =
        run_cli("gguf-requant", {a, "--type", "f16", "--force", "-o", out}, dir.file("stdout.txt"));
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.err, fmt::format("gguf-requant: error: {}: {}\nTry 'gguf-requant --help' for more "
                                 "information.\n",
                                 out, msg));
  }
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_EQ(std::filesystem::file_size(dir.file("stdout.txt")), 0u);
}

TEST(cli_contract, a_failing_stderr_neither_aborts_nor_fails_the_work) {
  TempDir dir;
  const std::string a = Fixture().write(dir, "a.gguf");
  gguf::MoeSpec spec;
  spec.n_layers = 2;
  spec.n_experts = 2;
  spec.vocab = 256;
  gguf::write_plan(gguf::synth_moe_plan(gguf::uniform_types(spec, gguf::GgmlType::Q8_0)),
                   dir.file("q8.gguf"), {});
  // This run prints a note on stderr (checked first: re-encoding quantized tensors), which then
  // cannot be written.
  const auto requant = [&](const std::string& out, const std::string& stderr_path) {
    return run_cli("gguf-requant", {dir.file("q8.gguf"), "--type", "q4_0", "-o", dir.file(out)}, {},
                   stderr_path);
  };
  CliResult r = requant("note.gguf", {});
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_NE(r.err.find("note:"), std::string::npos) << r.err;
  r = requant("r.gguf", "/dev/full");
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(std::filesystem::exists(dir.file("r.gguf")));
  // A failure whose message cannot be shown still exits with the failure's code.
  r = run_cli("gguf-inspect", {dir.file("missing.gguf")}, {}, "/dev/full");
  EXPECT_EQ(r.code, 1);
  r = run_cli("gguf-diff", {a, dir.file("missing.gguf")}, {}, "/dev/full");
  EXPECT_EQ(r.code, 2);
}

TEST(cli_contract, a_file_size_limit_is_an_error_not_a_silent_kill) {
  TempDir dir;
  const std::string a = Fixture().write(dir, "a.gguf");
  const auto limit = std::filesystem::file_size(a) / 2;
  // The limit (ulimit -f) applies to the tool, which inherits it; this process writes nothing
  // while it is set.
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  rlimit lowered = old;
  lowered.rlim_cur = limit;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &lowered), 0);
  const CliResult r = run_cli("gguf-requant", {a, "--type", "f16", "-o", dir.file("r.gguf")});
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old), 0);
  EXPECT_EQ(r.code, 1);  // not 128 + SIGXFSZ
  EXPECT_NE(r.err.find("file too large"), std::string::npos) << r.err;
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"a.gguf"});
}

TEST(cli_contract, an_output_name_too_long_is_refused_before_any_work) {
  TempDir dir;
  const std::string a = Fixture().write(dir, "a.gguf");
  const std::string name = std::string(251, 'n') + ".gguf";  // 256 bytes
  for (const bool dry : {true, false}) {
    std::vector<std::string> args = {a, "--type", "f16", "-o", dir.file(name)};
    if (dry) args.push_back("--dry-run");
    const CliResult r = run_cli("gguf-requant", args);
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(scrub(r.err, dir.path()),
              fmt::format("gguf-requant: error: DIR/{}: output file name is 256 bytes long; the "
                          "file system of 'DIR' allows at most 255\n",
                          name));
  }
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"a.gguf"});
}

TEST(cli_contract, a_manifest_that_is_not_a_file_of_sane_size_is_refused) {
  TempDir dir;
  const std::string a = Fixture().write(dir, "a.gguf");
  CliResult r = run_cli("gguf-diff", {"--manifest", "/dev/zero", a});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gguf-diff: error: /dev/zero: more than 256 MiB; a manifest this large is refused\n");
  r = run_cli("gguf-diff", {"--manifest", dir.path(), a});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(scrub(r.err, dir.path()), "gguf-diff: error: DIR: is a directory, not a manifest\n");
}

// DESIGN.md: memory is bounded by chunks, not by model size. Every tool reads its inputs through
// memory maps, and pages it has read leave the process (they stay in the page cache); without
// that, peak RSS grew with the input (measured before the fix: requant and diff --values at
// about the inputs' size). The model here is 240 MB; the bound is far below it.
TEST(cli_contract, peak_memory_stays_far_below_the_model_size) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP()
      << "AddressSanitizer's shadow memory and quarantine say nothing about the tools' own";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  GTEST_SKIP()
      << "AddressSanitizer's shadow memory and quarantine say nothing about the tools' own";
#endif
#endif
  TempDir dir;
  gguf::MoeSpec spec;
  spec.n_layers = 24;
  spec.n_experts = 48;
  spec.vocab = 1024;
  spec.threads = 2;
  const std::string a = dir.file("a.gguf"), b = dir.file("b.gguf");
  gguf::write_plan(gguf::synth_moe_plan(gguf::uniform_types(spec, gguf::GgmlType::Q8_0)), a, {});
  spec.seed = 2;
  gguf::write_plan(gguf::synth_moe_plan(gguf::uniform_types(spec, gguf::GgmlType::Q8_0)), b, {});
  ASSERT_GT(std::filesystem::file_size(a), uint64_t{200} << 20);
  // And one row of 2^25 elements (q8_0, 34 MiB a side): decoded whole it would take 128 MiB a
  // side; the diff measures it in pieces.
  const auto write_q8_0 = [](const std::string& path, const std::string& name,
                             std::vector<int64_t> shape, uint32_t seed) {
    uint64_t n = 1;
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);
    auto payload = std::make_shared<std::vector<uint8_t>>(n / 32 * 34);
    uint32_t x = seed;
    for (size_t i = 0; i < payload->size(); i += 34) {
      (*payload)[i] = 0x00;  // f16 scale 1/16 (0x2c00)
      (*payload)[i + 1] = 0x2c;
      for (size_t k = 2; k < 34; ++k)
        (*payload)[i + k] = static_cast<uint8_t>((x = x * 1664525u + 1013904223u) >> 24);
    }
    gguf::Plan p;
    p.metadata.set("general.architecture", gguf::Value::string("llama"));
    p.metadata.set("general.quantization_version", gguf::Value::u32(2));
    p.tensors.push_back({name, static_cast<uint32_t>(gguf::GgmlType::Q8_0), std::move(shape),
                         payload->size(), gguf::MemoryBytes{payload}});
    gguf::write_plan(p, path, {});
  };
  const std::string la = dir.file("long-a.gguf"), lb = dir.file("long-b.gguf");
  write_q8_0(la, "blk.0.attn_q.weight", {int64_t{1} << 25, 1}, 1);
  write_q8_0(lb, "blk.0.attn_q.weight", {int64_t{1} << 25, 1}, 2);
  // And 110,000 one-row experts (28 M weights): re-encoded to iq2_xxs without an imatrix, each
  // expert's column energy is computed, used and let go; all kept, they took 113 MB.
  const std::string experts = dir.file("experts.gguf");
  write_q8_0(experts, "blk.0.ffn_up_exps.weight", {256, 1, 110000}, 3);
  const std::vector<std::vector<std::string>> runs = {
      {"gguf-requant", experts, "--type", "iq2_xxs", "-o", dir.file("e.gguf"), "-q"},
      {"gguf-diff", "--values", la, lb},
      {"gguf-requant", a, "--type", "q4_0", "-o", dir.file("r.gguf"), "-q"},
      {"gguf-diff", "--values", a, b},
      {"gguf-diff", "--paranoid", a, a},
      {"gguf-inspect", "--check", "--hashes", a},
      {"gguf-splice", a, "--donor", b, "--layers", "10-23", "-o", dir.file("s.gguf"), "-q"},
  };
  for (const auto& run : runs) {
    SCOPED_TRACE(run[0] + " " + run[1]);
    // Each run in its own child, so that its peak is measured alone.
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const CliResult r = run_cli(run[0], std::vector<std::string>(run.begin() + 1, run.end()));
      rusage ru{};
      getrusage(RUSAGE_CHILDREN, &ru);
      std::_Exit(r.code > 1 ? 255 : ru.ru_maxrss > 100 * 1024 ? 254 : 0);  // KiB
    }
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_NE(WEXITSTATUS(status), 255) << "the run failed";
    EXPECT_NE(WEXITSTATUS(status), 254) << "peak RSS above 100 MiB";
  }
}

}  // namespace
