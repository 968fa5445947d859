// gguf-inspect: the report (library) and the binary (golden CLI tests).
#include "gguf/ops/inspect.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "gguf/base/table.h"
#include "gguf/format/json.h"
#include "gguf/ops/synth.h"
#include "gguf/write/writer.h"
#include "gguf_builder.h"

namespace gguf {
namespace {

using testing::run_cli;
using testing::TempDir;

MoeSpec small_spec() {
  MoeSpec s;
  s.n_layers = 3;
  s.n_experts = 4;
  s.vocab = 300;
  return s;
}

std::string write_model(const TempDir& dir, const std::string& name, const MoeSpec& spec,
                        uint64_t split_max_tensors = 0) {
  WriteOptions wo;
  wo.split_max_tensors = split_max_tensors;
  const auto r = write_plan(synth_moe_plan(spec), dir.file(name), wo);
  return r.paths.front();
}

// Strings in the text report: a quote inside is \" (a backslash is doubled, so it is
// unambiguous), and a long string is cut at a character boundary with its size.
TEST(inspect, metadata_strings_are_quoted_unambiguously_and_cut_when_long) {
  EXPECT_EQ(format_value(Value::string("a\"b\\c")), R"("a\"b\\c")");
  EXPECT_EQ(format_value(Value::string_array({"\"", "\\\""})), R"(["\"", "\\\""])");
  const std::string euro = "\xe2\x82\xac";  // 3 bytes
  std::string long_text;
  for (int i = 0; i < 100; ++i) long_text += euro;
  EXPECT_EQ(format_value(Value::string(long_text), 8, 10),
            "\"" + euro + euro + euro + "\"... (300 bytes in all)");
  EXPECT_EQ(format_value(Value::string(long_text), 8, 0).size(), 302u);
  EXPECT_EQ(format_value(Value::string("short"), 8, 10), "\"short\"");
}

TEST(inspect, counts_are_grouped_by_thousands) {
  EXPECT_EQ(with_commas(0), "0");
  EXPECT_EQ(with_commas(999), "999");
  EXPECT_EQ(with_commas(1000), "1,000");
  EXPECT_EQ(with_commas(123456), "123,456");
  EXPECT_EQ(with_commas(1234567), "1,234,567");
  EXPECT_EQ(with_commas(UINT64_MAX), "18,446,744,073,709,551,615");
}

TEST(inspect, report_groups_by_type_role_and_layer) {
  TempDir dir;
  const std::string path = write_model(dir, "m.gguf", uniform_types(small_spec(), GgmlType::F16));
  const Model m = Model::open(path);
  const InspectReport r = inspect(m, {});
  EXPECT_EQ(r.tensors.size(), m.tensors().size());
  EXPECT_EQ(r.architecture, "deepseek2");
  uint64_t role_tensors = 0, layer_tensors = 0, type_bytes = 0;
  for (const auto& g : r.by_role) role_tensors += g.tensors;
  for (const auto& g : r.by_layer) layer_tensors += g.tensors;
  for (const auto& g : r.by_type) type_bytes += g.bytes;
  EXPECT_EQ(role_tensors, r.tensors.size());
  EXPECT_EQ(layer_tensors, r.tensors.size());
  EXPECT_EQ(type_bytes, r.tensor_bytes);
  // 2 MoE layers (layer 0 is dense), 3 routed tensors each, 4 experts of 256x256.
  const auto routed = std::find_if(r.by_role.begin(), r.by_role.end(),
                                   [](const auto& g) { return g.key == "routed-gate"; });
  ASSERT_NE(routed, r.by_role.end());
  EXPECT_EQ(routed->tensors, 2u);
  EXPECT_EQ(routed->params, 2u * 256 * 256 * 4);
  EXPECT_EQ(r.by_layer.back().key, "-");
  for (size_t i = 0; i < r.tensors.size(); ++i) {
    EXPECT_EQ(r.tensors[i].offset, m.tensors()[i].data_start());
  }
}

TEST(inspect, hashes_equal_xxh3_of_payload) {
  TempDir dir;
  const std::string path = write_model(dir, "m.gguf", small_spec());
  const Model m = Model::open(path);
  InspectOptions o;
  o.hashes = true;
  o.threads = 2;
  const InspectReport r = inspect(m, o);
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  for (const auto& t : r.tensors) {
    ASSERT_TRUE(t.offset);
    ASSERT_TRUE(t.xxh3);
    EXPECT_EQ(*t.xxh3, XXH3_64bits(bytes.data() + *t.offset, *t.bytes)) << t.name;
  }
}

TEST(inspect, selectors_restrict_the_report) {
  TempDir dir;
  const Model m = Model::open(write_model(dir, "m.gguf", small_spec()));
  InspectOptions o;
  o.selector = parse_selector({"1-2"}, {"routed"}, {});
  const InspectReport r = inspect(m, o);
  ASSERT_EQ(r.tensors.size(), 6u);
  for (const auto& t : r.tensors) EXPECT_NE(t.name.find("_exps"), std::string::npos);
}

TEST(inspect, json_has_the_contract_fields) {
  TempDir dir;
  const std::string path = write_model(dir, "m.gguf", small_spec());
  const auto res = run_cli("gguf-inspect", {"--json", "--hashes", path});
  ASSERT_EQ(res.code, 0) << res.err;
  const auto j = nlohmann::json::parse(res.out);
  EXPECT_EQ(j["files"][0], path);
  EXPECT_EQ(j["version"], 3);
  EXPECT_EQ(j["alignment"], 32);
  ASSERT_FALSE(j["metadata"].empty());
  EXPECT_EQ(j["metadata"][0]["key"], "general.architecture");
  EXPECT_EQ(j["metadata"][0]["type"], "string");
  EXPECT_EQ(j["metadata"][0]["value"], "deepseek2");
  const auto& t = j["tensors"][0];
  for (const char* k :
       {"name", "type", "type_id", "shape", "file", "offset", "bytes", "role", "layer", "xxh3"})
    EXPECT_TRUE(t.contains(k)) << k;
  EXPECT_EQ(t["name"], "token_embd.weight");
  EXPECT_TRUE(t["layer"].is_null());
  EXPECT_EQ(t["xxh3"].get<std::string>().size(), 16u);
  EXPECT_TRUE(j["summary"].contains("by_role"));
}

TEST(inspect, cli_summary_names_roles) {
  TempDir dir;
  const std::string path = write_model(dir, "m.gguf", small_spec());
  const auto res = run_cli("gguf-inspect", {path});
  ASSERT_EQ(res.code, 0) << res.err;
  EXPECT_NE(res.out.find("architecture:  deepseek2\n"), std::string::npos);
  EXPECT_NE(res.out.find("by role:"), std::string::npos);
  EXPECT_NE(res.out.find("routed-down"), std::string::npos);
  EXPECT_EQ(res.err, "");
}

TEST(inspect, cli_usage_errors_exit_2) {
  auto res = run_cli("gguf-inspect", {"--bogus"});
  EXPECT_EQ(res.code, 2);
  EXPECT_EQ(res.err,
            "gguf-inspect: error: unrecognised option '--bogus'\n"
            "Try 'gguf-inspect --help' for more information.\n");
  res = run_cli("gguf-inspect", {"--help"});
  EXPECT_EQ(res.code, 0);
  EXPECT_EQ(res.out.rfind("Usage: gguf-inspect [OPTIONS] FILE.gguf", 0), 0u);
}

TEST(inspect, cli_missing_file_exits_1) {
  const auto res = run_cli("gguf-inspect", {"/nonexistent/x.gguf"});
  EXPECT_EQ(res.code, 1);
  EXPECT_EQ(res.err,
            "gguf-inspect: error: /nonexistent/x.gguf: cannot open: No such file or directory\n");
}

// A report cut short by a full device (or a closed stdout) is a failure with a message.
TEST(inspect, cli_unwritable_stdout_fails) {
  TempDir dir;
  const std::string path = write_model(dir, "m.gguf", small_spec());
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{path}, {"--json", path}, {"--check", path}}) {
    const auto res = run_cli("gguf-inspect", args, "/dev/full");
    EXPECT_EQ(res.code, 1);
    EXPECT_EQ(res.err,
              "gguf-inspect: error: cannot write to standard output: no space left on device\n");
  }
}

TEST(inspect, cli_damaged_file_prints_what_it_read_then_fails) {
  TempDir dir;
  const std::string path = write_model(dir, "m.gguf", small_spec());
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size - 100);
  const auto res = run_cli("gguf-inspect", {"-t", path});
  EXPECT_EQ(res.code, 1);
  EXPECT_NE(res.out.find("token_embd.weight"), std::string::npos);
  EXPECT_NE(res.err.find("tensor 'output.weight': at byte "), std::string::npos) << res.err;
  EXPECT_NE(res.err.find("data runs past end of file"), std::string::npos) << res.err;
}

// A header cut short (here a negative dimension in the second tensor info) leaves the data
// section's start unknown: the tensor read before it has no file offset ('-', JSON null), not
// its data-relative offset 0 passed off as an absolute one. Once the header is read to its end
// (data past the end of the file), offsets are absolute again.
TEST(inspect, damaged_header_gives_no_offset_it_cannot_know) {
  TempDir dir;
  const auto base = [] {
    return testing::GgufBuilder()
        .string("general.architecture", "llama")
        .tensor("a", 0, {32, 2})
        .tensor("b", 0, {32, 2});
  };
  const auto b = base().defect({testing::DefectKind::kNegativeDim, 1});
  const std::string path = testing::write_bytes(dir.file("neg.gguf"), b.build());
  const auto text = run_cli("gguf-inspect", {"-t", path});
  EXPECT_EQ(text.code, 1);
  EXPECT_NE(text.out.find("  a     f32   [32, 2]       -    256  32.0000  other      -\n"),
            std::string::npos)
      << text.out;
  EXPECT_EQ(text.err, fmt::format("gguf-inspect: error: {}: tensor 'b': at byte {}: dimension 1 "
                                  "is negative (-3)\n",
                                  path, b.layout().tensor_info_offsets[1] + 8 + 1 + 4 + 8));
  const auto js = run_cli("gguf-inspect", {"--json", path});
  EXPECT_EQ(js.code, 1);
  const auto doc = nlohmann::json::parse(js.out);
  ASSERT_EQ(doc["tensors"].size(), 1u);
  EXPECT_TRUE(doc["tensors"][0]["offset"].is_null()) << doc["tensors"][0].dump();

  const auto cut = base().defect({testing::DefectKind::kDataPastEof, 0});
  const std::string cut_path = testing::write_bytes(dir.file("cut.gguf"), cut.build());
  const auto doc2 = nlohmann::json::parse(run_cli("gguf-inspect", {"--json", cut_path}).out);
  ASSERT_EQ(doc2["tensors"].size(), 2u);
  EXPECT_EQ(doc2["tensors"][0]["offset"], cut.layout().data_offset);
}

// inspect_path, the library's side of the flow above: a whole model is inspected; a damaged
// file gives what could be read and the reader's error to fail with; a split set missing a
// shard throws the model's error naming the shard.
TEST(inspect, inspect_path_reports_a_damaged_file_in_part) {
  TempDir dir;
  const std::string path = write_model(dir, "m.gguf", small_spec());
  const InspectedPath whole = inspect_path(path, {});
  EXPECT_FALSE(whole.failure);
  EXPECT_FALSE(whole.report.damage);
  ASSERT_EQ(whole.files.size(), 1u);
  EXPECT_EQ(whole.files[0]->path(), path);
  const size_t tensors = whole.report.tensors.size();

  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 100);
  const InspectedPath damaged = inspect_path(path, {});
  ASSERT_TRUE(damaged.failure);
  EXPECT_NE(std::string(damaged.failure->what()).find("data runs past end of file"),
            std::string::npos)
      << damaged.failure->what();
  ASSERT_TRUE(damaged.report.damage);
  EXPECT_GT(damaged.report.tensors.size(), 0u);
  EXPECT_LE(damaged.report.tensors.size(), tensors);
  ASSERT_EQ(damaged.files.size(), 1u);

  write_model(dir, "s.gguf", small_spec(), 10);
  std::vector<std::string> shards;
  for (const auto& e : dir.entries())
    if (e.starts_with("s-")) shards.push_back(e);
  ASSERT_GE(shards.size(), 2u);
  std::filesystem::remove(dir.file(shards[1]));
  try {
    inspect_path(dir.file(shards[0]), {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(shards[1]), std::string::npos) << e.what();
  }
}

// Nothing of the file could be read: no made-up summary (version 0, alignment 32, empty
// tables) before the error, and in JSON no version, alignment or bits per weight.
TEST(inspect, cli_unreadable_header_prints_only_the_error) {
  TempDir dir;
  const auto header = [](uint32_t magic, uint32_t version) {
    std::string h(24, '\0');
    std::memcpy(h.data(), &magic, 4);
    std::memcpy(h.data() + 4, &version, 4);
    return h;
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "at byte 0: file too small for a GGUF header (needs 24 bytes, has 0)"},
      {"GGUF", "at byte 0: file too small for a GGUF header (needs 24 bytes, has 4)"},
      {header(0x544A4747, 3), "at byte 0: not a GGUF file (magic 'GGJT', expected 'GGUF')"},
      {header(0x46554747, 4), "at byte 4: unsupported GGUF version 4 (only versions 2 and 3)"},
  };
  for (const auto& [bytes, message] : cases) {
    SCOPED_TRACE(message);
    const std::string path = dir.file("bad.gguf");
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{path}, {"-m", "-t", path}}) {
      const auto res = run_cli("gguf-inspect", args);
      EXPECT_EQ(res.code, 1);
      EXPECT_EQ(res.out, "");
      EXPECT_EQ(res.err, fmt::format("gguf-inspect: error: {}: {}\n", path, message));
    }
    const auto res = run_cli("gguf-inspect", {"--json", path});
    EXPECT_EQ(res.code, 1);
    EXPECT_EQ(res.err, fmt::format("gguf-inspect: error: {}: {}\n", path, message));
    const auto j = nlohmann::json::parse(res.out);
    EXPECT_EQ(j["files"], nlohmann::json::array({path}));
    EXPECT_TRUE(j["version"].is_null());
    EXPECT_TRUE(j["alignment"].is_null());
    EXPECT_TRUE(j["summary"]["bits_per_weight"].is_null());
    EXPECT_EQ(j["tensors"].size(), 0u);
    EXPECT_EQ(j["error"], fmt::format("{}: {}", path, message));
  }
  // A header that was read is still shown with what followed it.
  const std::string path = write_model(dir, "m.gguf", small_spec());
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 100);
  const auto res = run_cli("gguf-inspect", {"--json", path});
  EXPECT_EQ(res.code, 1);
  const auto j = nlohmann::json::parse(res.out);
  EXPECT_EQ(j["version"], 3);
  EXPECT_EQ(j["alignment"], 32);
  EXPECT_TRUE(j["summary"]["bits_per_weight"].is_number());
}

// DeepSeek's first layers are dense: a range over them lists the routed experts there are.
TEST(inspect, cli_layer_range_may_include_layers_without_a_match) {
  TempDir dir;
  const std::string path = write_model(dir, "m.gguf", small_spec());
  auto res = run_cli("gguf-inspect", {"--json", "--layers", "0-2", "--role", "routed", path});
  ASSERT_EQ(res.code, 0) << res.err;
  const auto j = nlohmann::json::parse(res.out);
  ASSERT_EQ(j["tensors"].size(), 6u);
  for (const auto& t : j["tensors"]) EXPECT_NE(t["layer"], 0) << t["name"];
  res = run_cli("gguf-inspect", {"--layers", "0", "--role", "routed", path});
  EXPECT_EQ(res.code, 1);
  EXPECT_EQ(res.out, "");
  EXPECT_EQ(res.err, fmt::format("gguf-inspect: error: no tensor in '{}' is selected by layer 0, "
                                 "role routed-gate|routed-up|routed-down\n",
                                 path));
  res = run_cli("gguf-inspect", {"--match", "nothing", path});
  EXPECT_EQ(res.code, 1);
  EXPECT_EQ(
      res.err,
      fmt::format("gguf-inspect: error: no tensor in '{}' is selected by match 'nothing'\n", path));
}

TEST(inspect, cli_missing_layer_is_an_error) {
  TempDir dir;
  const std::string path = write_model(dir, "m.gguf", small_spec());
  const auto res = run_cli("gguf-inspect", {"--layers", "7", path});
  EXPECT_NE(res.code, 0);
  EXPECT_NE(res.err.find("layer 7"), std::string::npos) << res.err;
}

TEST(inspect, cli_check_clean_file_passes) {
  TempDir dir;
  const std::string path = write_model(dir, "m.gguf", small_spec());
  const auto res = run_cli("gguf-inspect", {"--check", path});
  EXPECT_EQ(res.code, 0) << res.err;
  EXPECT_NE(res.out.find("check: 0 error(s), 0 warning(s)"), std::string::npos);
}

// The --check verdict in JSON: every problem, and the counts that decide the exit status.
// A tensor of a removed type (q4_2) is counted in the parameters but has no size, so it is
// left out of bits per weight too: the f32 tensor's 32 bits, not 16.
TEST(inspect, cli_check_json_verdict_and_bits_per_weight_of_sized_tensors) {
  TempDir dir;
  const std::string sound = write_model(dir, "m.gguf", small_spec());
  auto res = run_cli("gguf-inspect", {"--check", "--json", sound});
  EXPECT_EQ(res.code, 0) << res.err;
  auto j = nlohmann::json::parse(res.out);
  EXPECT_EQ(j["problems"], nlohmann::json::array());
  EXPECT_EQ(j["check"], nlohmann::json::parse(R"({"errors": 0, "warnings": 0})"));
  EXPECT_FALSE(j.contains("error"));
  EXPECT_FALSE(
      nlohmann::json::parse(run_cli("gguf-inspect", {"--json", sound}).out).contains("check"));

  const std::string removed = dir.file("removed.gguf");
  testing::GgufBuilder b;
  b.string("general.architecture", "llama")
      .tensor("a.weight", 0, {64})
      .tensor("b.weight", 4, {64}, std::vector<uint8_t>(40));
  b.write_file(removed);
  res = run_cli("gguf-inspect", {"--check", "--json", removed});
  EXPECT_EQ(res.code, 1);
  j = nlohmann::json::parse(res.out);
  ASSERT_EQ(j["problems"].size(), 1u) << j["problems"];
  EXPECT_EQ(j["problems"][0]["severity"], "error");
  EXPECT_EQ(j["check"], nlohmann::json::parse(R"({"errors": 1, "warnings": 0})"));
  EXPECT_FALSE(j.contains("error"));
  EXPECT_EQ(j["summary"]["params"], 128);
  EXPECT_EQ(j["summary"]["tensor_bytes"], 256);
  EXPECT_EQ(j["summary"]["unsized_tensors"], 1);
  EXPECT_EQ(j["summary"]["bits_per_weight"], 32.0);
  res = run_cli("gguf-inspect", {removed});
  EXPECT_EQ(res.code, 0) << res.err;
  EXPECT_NE(res.out.find("bits/weight:   32.0000\n"), std::string::npos) << res.out;
  // By type: q4_2's row has no bits per weight (no sized tensor), f32's has 32.
  EXPECT_NE(res.out.find("  f32         1      64  256 B  100.00%  32.0000\n"
                         "  q4_2        1      64    0 B    0.00%        -\n"),
            std::string::npos)
      << res.out;
}

TEST(inspect, cli_opens_split_sets_as_one_model) {
  TempDir dir;
  const std::string first = write_model(dir, "m.gguf", small_spec(), 20);
  const auto res = run_cli("gguf-inspect", {"--json", first});
  ASSERT_EQ(res.code, 0) << res.err;
  const auto j = nlohmann::json::parse(res.out);
  EXPECT_GT(j["files"].size(), 1u);
  const Model whole = Model::open(first);
  EXPECT_EQ(j["tensors"].size(), whole.tensors().size());
  EXPECT_EQ(j["tensors"].back()["file"], j["files"].size() - 1);
}

// Long metadata arrays (a file ggml accepts may hold up to 2^30 elements in one) are written
// into the JSON text element by element instead of as a tree of one node per element, which
// took 47 bytes of memory per byte of a 100 MB file's u8 array in gguf-inspect --json, and
// aborted (std::terminate from nlohmann's destructor) where memory ran out. The text is the
// same as the tree's, at every indentation and nesting depth, for every kind of element.
std::vector<KeyValue> long_arrays() {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> f(5000);
  std::vector<uint8_t> u(4096);
  std::vector<int64_t> i(7000);
  std::vector<std::string> s(4100);
  for (size_t k = 0; k < f.size(); ++k) f[k] = static_cast<float>(k) * 0.37f - 900.0f;
  f[1] = std::nanf("");
  f[2] = inf;
  f[3] = -inf;
  f[4] = -0.0f;
  f[5] = 1e-45f;
  for (size_t k = 0; k < u.size(); ++k) u[k] = static_cast<uint8_t>(k * 7);
  for (size_t k = 0; k < i.size(); ++k) i[k] = static_cast<int64_t>(k * k) * (k % 2 ? -1 : 1);
  for (size_t k = 0; k < s.size(); ++k) s[k] = fmt::format("tok{}", k);
  s[1] = "";
  s[2] = "\xff\xfe";
  s[3] = "\x1b[31m\u202e\"q\"\\";
  s[4] = "\x01gguf-array-";  // a would-be placeholder stays a string
  s[5] = std::string("a\0b", 3);
  return {{"f", Value::array_of<float>(ValueType::kF32, f), 0},
          {"u", Value::array_of<uint8_t>(ValueType::kU8, u), 0},
          {"i", Value::array_of<int64_t>(ValueType::kI64, i), 0},
          {"s", Value::string_array(s), 0},
          {"short", Value::string_array({"x", "y"}), 0}};
}

TEST(inspect, long_metadata_arrays_are_written_as_a_tree_would_write_them) {
  const auto kvs = long_arrays();
  for (int indent : {-1, 0, 2, 4}) {
    SCOPED_TRACE(indent);
    nlohmann::json tree, streamed;
    for (const KeyValue& kv : kvs) {
      nlohmann::json t = {{"key", kv.key},
                          {"type", std::string(value_type_name(kv.value.type()))},
                          {"value", value_json(kv.value)},
                          {"element_type", std::string(value_type_name(kv.value.array_type()))}};
      tree["metadata"].push_back(t);
      tree["deeper"]["still"][kv.key] = value_json(kv.value);
      streamed["metadata"].push_back(metadata_json(kv));
      streamed["deeper"]["still"][kv.key] = value_json_deferred(kv.value);
    }
    const std::string want = dump_json(tree, indent);
    EXPECT_EQ(dump_json(streamed, indent), want);
    EXPECT_EQ(dump_json(streamed, indent), want);  // twice, or after another document
  }
}

TEST(inspect, cli_json_holds_long_metadata_arrays_whole) {
  TempDir dir;
  Plan plan = synth_moe_plan(small_spec());
  for (const KeyValue& kv : long_arrays()) plan.metadata.set(kv.key, kv.value);
  write_plan(plan, dir.file("a.gguf"), {});
  auto r = run_cli("gguf-inspect", {"--json", dir.file("a.gguf")});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  size_t found = 0;
  for (const KeyValue& kv : long_arrays())
    for (const auto& m : j["metadata"])
      if (m["key"] == kv.key) {
        ++found;
        EXPECT_EQ(m["value"], value_json(kv.value)) << kv.key;
      }
  EXPECT_EQ(found, long_arrays().size());
  // gguf-diff --json shows both sides of a changed long array whole too.
  Plan changed = plan;
  std::vector<std::string> s(5000, "t");
  changed.metadata.set("s", Value::string_array(s));
  write_plan(changed, dir.file("b.gguf"), {});
  r = run_cli("gguf-diff", {"--json", dir.file("a.gguf"), dir.file("b.gguf")});
  ASSERT_EQ(r.code, 1) << r.err;
  const auto d = nlohmann::json::parse(r.out);
  ASSERT_EQ(d["metadata"].size(), 1u) << r.out.substr(0, 2000);
  EXPECT_EQ(d["metadata"][0]["a"], value_json(*plan.metadata.find("s")));
  EXPECT_EQ(d["metadata"][0]["b"], value_json(Value::string_array(s)));
}

// A missing shard is the split set's error, naming the shard and the copy an interrupted --force
// replacement set aside beside it (as in gguf-splice, gguf-requant and gguf-diff), not the
// failure to open the shard for a partial report.
TEST(inspect, cli_missing_shard_names_it_and_the_file_set_aside) {
  TempDir dir;
  const std::string first = write_model(dir, "m.gguf", small_spec(), 20);
  const Model whole = Model::open(first);
  const size_t n = whole.shards().size();
  ASSERT_GT(n, 2u);
  const std::string second = dir.file(fmt::format("m-00002-of-{:05d}.gguf", n));
  const std::string aside = dir.file(fmt::format(".m-00002-of-{:05d}.gguf.old.AbC123", n));
  std::filesystem::rename(second, aside);
  const std::string message = fmt::format(
      "{}: shard 2 of {} of the split set is missing; '{}' beside it is a shard that "
      "an interrupted --force replacement set aside",
      second, n, aside);
  auto res = run_cli("gguf-inspect", {first});
  EXPECT_EQ(res.code, 1);
  EXPECT_EQ(res.out, "");
  EXPECT_EQ(res.err, "gguf-inspect: error: " + message + "\n");
  res = run_cli("gguf-inspect", {"--json", first});
  EXPECT_EQ(res.code, 1);
  const auto j = nlohmann::json::parse(res.out);
  EXPECT_EQ(j["error"], message);
  EXPECT_EQ(j["exit_code"], 1);
}

}  // namespace
}  // namespace gguf
