// gguf-diff, the binary: golden text and JSON, exit codes as diff(1), messages on bad input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "diff_fixture.h"
#include "gguf/ops/synth.h"
#include "gguf/write/writer.h"

namespace gguf {
namespace {

using namespace diff_fixture;
using testing::CliResult;
using testing::run_cli;
using testing::TempDir;

// Replaces every occurrence of the temporary directory with "DIR" so goldens are stable.
std::string scrub(std::string s, const std::string& dir) {
  for (size_t at; (at = s.find(dir)) != std::string::npos;) s.replace(at, dir.size(), "DIR");
  return s;
}

// A and B: B renames the model, nudges four elements of blk.0.attn_q.weight by exactly 1/2
// (so every metric has an exact or correctly rounded value) and stores token_embd as bf16.
struct Pair {
  TempDir dir;
  std::string a, b;
  Pair() {
    Fixture fa, fb;
    fb.name = "tiny-b";
    auto q = floats_of(fb.tensor("blk.0.attn_q.weight"));
    for (size_t i : {1, 17, 33, 60}) q[i] += 0.5f;
    fb.tensor("blk.0.attn_q.weight").payload = f32_bytes(q);
    auto& e = fb.tensor("token_embd.weight");
    const auto v = floats_of(e);
    e.type = kBF16;
    e.payload.clear();
    for (float f : v) {
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      e.payload.push_back(static_cast<uint8_t>(bits >> 16));
      e.payload.push_back(static_cast<uint8_t>(bits >> 24));
    }
    a = fa.write(dir, "a.gguf");
    b = fb.write(dir, "b.gguf");
  }
  CliResult run(std::vector<std::string> args) const {
    args.push_back(a);
    args.push_back(b);
    CliResult r = run_cli("gguf-diff", args);
    r.out = scrub(r.out, dir.path());
    r.err = scrub(r.err, dir.path());
    return r;
  }
};

// A report that cannot be written (here: a full device) is trouble, not a result: exit 2
// with a message, for the table and for JSON, identical files or not.
TEST(diff_cli, unwritable_stdout_is_trouble) {
  const Pair p;
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{p.a, p.b}, {"--json", p.a, p.b}, {"--json", p.a, p.a}}) {
    const CliResult r = run_cli("gguf-diff", args, "/dev/full");
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.err,
              "gguf-diff: error: cannot write to standard output: no space left on device\n");
  }
  // A report larger than stdio's buffer fails while it is written, not only at the end: the
  // reason is still given.
  TempDir dir;
  MoeSpec spec;
  write_plan(synth_moe_plan(uniform_types(spec, GgmlType::Q8_0)), dir.file("a.gguf"), {});
  write_plan(synth_moe_plan(uniform_types(spec, GgmlType::Q4_0)), dir.file("b.gguf"), {});
  const std::vector<std::string> args = {"--values", dir.file("a.gguf"), dir.file("b.gguf")};
  const CliResult r = run_cli("gguf-diff", args, "/dev/full");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "gguf-diff: error: cannot write to standard output: no space left on device\n");
  EXPECT_GT(run_cli("gguf-diff", args).out.size(), 8192u);
}

TEST(diff_cli, identical_files_exit_0) {
  TempDir dir;
  const Fixture f;
  const std::string a = f.write(dir, "a.gguf"), b = f.write(dir, "b.gguf");
  CliResult r = run_cli("gguf-diff", {a, b});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(scrub(r.out, dir.path()),
            "A: DIR/a.gguf\n"
            "B: DIR/b.gguf\n"
            "metadata: no changes\n"
            "tensors: 4 compared, all same\n"
            "identical\n");
  r = run_cli("gguf-diff", {"-q", a, b});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out + r.err, "");
  // --all lists the unchanged tensors even when nothing changed.
  r = run_cli("gguf-diff", {"--all", a, b});
  EXPECT_EQ(r.code, 0);
  const std::string out = scrub(r.out, dir.path());
  EXPECT_THAT(out, ::testing::HasSubstr("tensors: 4 compared, all same\n  name"));
  for (const auto& t : f.tensors)
    EXPECT_THAT(out, ::testing::HasSubstr("\n  " + t.name + " ")) << out;
  EXPECT_THAT(out, ::testing::EndsWith("identical\n"));
}

TEST(diff_cli, differences_golden_text) {
  const Pair p;
  const CliResult r = p.run({"--values", "--no-summary"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(
      r.out,
      "A: DIR/a.gguf\n"
      "B: DIR/b.gguf\n"
      "metadata: 1 changed, 0 added, 0 removed\n"
      "  key           change   a              b\n"
      "  general.name  changed  string \"tiny\"  string \"tiny-b\"\n"
      "tensors: 4 compared: 2 same, 0 only in A, 0 only in B, 0 shape, 1 type, 1 bytes\n"
      "  name                 change  type a  type b  shape a  shape b  bytes a  bytes b  delta\n"
      "  token_embd.weight    type    f32     bf16        8x4      8x4    128 B     64 B  -64 B\n"
      "  blk.0.attn_q.weight  bytes   f32     f32         8x8      8x8    256 B    256 B    0 B\n"
      "  total: 800 B in A, 736 B in B (-64 B)\n"
      "values (B against A):\n"
      "  name                 type a  type b       rmse   max|a-b|        rel    cosine  snr db  "
      "non-finite\n"
      "  token_embd.weight    f32     bf16    0.000e+00  0.000e+00  0.000e+00  1.000000     inf    "
      "       -\n"
      "  blk.0.attn_q.weight  f32     f32     1.250e-01  5.000e-01  1.742e-02  0.999856   35.18    "
      "       -\n"
      "different\n");
}

TEST(diff_cli, summaries_golden_text) {
  const Pair p;
  const CliResult r = p.run({"--values", "--role", "attn-proj,embedding"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(
      r.out,
      "A: DIR/a.gguf\n"
      "B: DIR/b.gguf\n"
      "tensors compared: role attn-proj|embedding\n"
      "metadata: 1 changed, 0 added, 0 removed\n"
      "  key           change   a              b\n"
      "  general.name  changed  string \"tiny\"  string \"tiny-b\"\n"
      "tensors: 2 compared: 0 same, 0 only in A, 0 only in B, 0 shape, 1 type, 1 bytes\n"
      "  name                 change  type a  type b  shape a  shape b  bytes a  bytes b  delta\n"
      "  token_embd.weight    type    f32     bf16        8x4      8x4    128 B     64 B  -64 B\n"
      "  blk.0.attn_q.weight  bytes   f32     f32         8x8      8x8    256 B    256 B    0 B\n"
      "  total: 384 B in A, 320 B in B (-64 B)\n"
      "values (B against A):\n"
      "  name                 type a  type b       rmse   max|a-b|        rel    cosine  snr db  "
      "non-finite\n"
      "  token_embd.weight    f32     bf16    0.000e+00  0.000e+00  0.000e+00  1.000000     inf    "
      "       -\n"
      "  blk.0.attn_q.weight  f32     f32     1.250e-01  5.000e-01  1.742e-02  0.999856   35.18    "
      "       -\n"
      "by role:\n"
      "  role       tensors  changed  bytes a  bytes b  delta        rel   max|a-b|\n"
      "  attn-proj        1        1    256 B    256 B    0 B  1.742e-02  5.000e-01\n"
      "  embedding        1        1    128 B     64 B  -64 B  0.000e+00  0.000e+00\n"
      "by layer:\n"
      "  layer  tensors  changed  bytes a  bytes b  delta        rel   max|a-b|\n"
      "  0            1        1    256 B    256 B    0 B  1.742e-02  5.000e-01\n"
      "  -            1        1    128 B     64 B  -64 B  0.000e+00  0.000e+00\n"
      "different\n");
}

TEST(diff_cli, golden_json) {
  const Pair p;
  const CliResult r = p.run({"--json", "--values", "--no-metadata", "--layers", "0"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out, R"json({
  "a": {
    "files": [
      "DIR/a.gguf"
    ],
    "manifest": null,
    "selection": null
  },
  "b": {
    "files": [
      "DIR/b.gguf"
    ]
  },
  "identical": false,
  "metadata": [],
  "metadata_compared": false,
  "reference": null,
  "selection": {
    "layers": [
      [
        0,
        0
      ]
    ],
    "match": [],
    "roles": [],
    "text": "layer 0"
  },
  "stopped_early": false,
  "summary": {
    "by_layer": [
      {
        "bytes_a": 256,
        "bytes_b": 256,
        "changed": 1,
        "key": "0",
        "measured": 1,
        "metrics": {
          "cosine": 0.9998561748946568,
          "count": 64,
          "inf_a": 0,
          "inf_b": 0,
          "max_abs": 0.5,
          "nan_a": 0,
          "nan_b": 0,
          "rel": 0.017420513960051124,
          "rmse": 0.125,
          "snr_db": 35.178780721674585
        },
        "tensors": 1
      }
    ],
    "by_role": [
      {
        "bytes_a": 256,
        "bytes_b": 256,
        "changed": 1,
        "key": "attn-proj",
        "measured": 1,
        "metrics": {
          "cosine": 0.9998561748946568,
          "count": 64,
          "inf_a": 0,
          "inf_b": 0,
          "max_abs": 0.5,
          "nan_a": 0,
          "nan_b": 0,
          "rel": 0.017420513960051124,
          "rmse": 0.125,
          "snr_db": 35.178780721674585
        },
        "tensors": 1
      }
    ],
    "bytes": 1,
    "bytes_a": 256,
    "bytes_b": 256,
    "metadata_changes": 0,
    "only_a": 0,
    "only_b": 0,
    "same": 0,
    "shape": 0,
    "tensors": 1,
    "type": 0
  },
  "tensors": [
    {
      "a": {
        "bytes": 256,
        "shape": [
          8,
          8
        ],
        "type": "f32",
        "type_id": 0
      },
      "b": {
        "bytes": 256,
        "shape": [
          8,
          8
        ],
        "type": "f32",
        "type_id": 0
      },
      "change": "bytes",
      "layer": 0,
      "metrics": {
        "cosine": 0.9998561748946568,
        "count": 64,
        "inf_a": 0,
        "inf_b": 0,
        "max_abs": 0.5,
        "nan_a": 0,
        "nan_b": 0,
        "rel": 0.017420513960051124,
        "rmse": 0.125,
        "snr_db": 35.178780721674585
      },
      "name": "blk.0.attn_q.weight",
      "role": "attn-proj"
    }
  ]
}
)json");
  EXPECT_NO_THROW({
    const auto doc = nlohmann::json::parse(r.out);
    (void)doc;
  });
}

// A long string that changes after the part the table shows: the text names the first byte
// that differs, and the JSON has it as first_difference (for short strings only the JSON).
TEST(diff_cli, long_string_change_names_its_first_differing_byte) {
  TempDir dir;
  Fixture fa, fb;
  fa.name = std::string(100, 'x') + "-a";
  fb.name = std::string(100, 'x') + "-b";
  const std::string a = fa.write(dir, "a.gguf"), b = fb.write(dir, "b.gguf");
  CliResult r = run_cli("gguf-diff", {a, b});
  EXPECT_EQ(r.code, 1);
  const std::string shown = "string \"" + std::string(40, 'x') + "...";
  EXPECT_NE(r.out.find("  general.name  changed  " + shown + "  " + shown +
                       "  first difference at byte 101\n"),
            std::string::npos)
      << r.out;
  r = run_cli("gguf-diff", {"--json", a, b});
  const auto doc = nlohmann::json::parse(r.out);
  ASSERT_EQ(doc["metadata"].size(), 1u);
  EXPECT_EQ(doc["metadata"][0]["first_difference"], 101);
  EXPECT_EQ(doc["selection"], nullptr);
}

TEST(diff_cli, quiet_prints_nothing_and_exits_1) {
  const Pair p;
  const CliResult r = p.run({"-q"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.out + r.err, "");
}

// --quiet stops at the first difference, but not before the inputs are checked: trouble is
// exit 2 with and without it (the pair's metadata differs, the first thing compared).
TEST(diff_cli, quiet_still_exits_2_on_trouble) {
  const Pair p;
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--layers", "7"}, {"--match", "nothing"}}) {
    std::vector<std::string> quiet = args;
    quiet.insert(quiet.begin(), "-q");
    const CliResult loud = p.run(args), r = p.run(quiet);
    EXPECT_EQ(loud.code, 2);
    EXPECT_EQ(r.code, 2) << args[0];
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err, loud.err);
  }
  const CliResult m = run_cli("gguf-inspect", {"--json", p.a});  // no --hashes
  ASSERT_EQ(m.code, 0) << m.err;
  std::ofstream(p.dir.file("m.json")) << m.out;
  const CliResult r = run_cli("gguf-diff", {"-q", "--manifest", p.dir.file("m.json"), p.b});
  EXPECT_EQ(r.code, 2);
}

TEST(diff_cli, usage_errors_exit_2) {
  const auto err = [](const std::vector<std::string>& args) {
    const CliResult r = run_cli("gguf-diff", args);
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.out, "");
    return r.err;
  };
  const std::string hint = "Try 'gguf-diff --help' for more information.\n";
  EXPECT_EQ(err({"only.gguf"}), "gguf-diff: error: expected two models A and B, got 1\n" + hint);
  EXPECT_EQ(
      err({"--manifest", "m.json", "a.gguf", "b.gguf"}),
      "gguf-diff: error: unexpected argument 'b.gguf' (--manifest compares one model)\n" + hint);
  EXPECT_EQ(err({"a.gguf", "b.gguf", "c.gguf"}),
            "gguf-diff: error: unexpected argument 'c.gguf' (two models, A and B)\n" + hint);
  EXPECT_EQ(err({"--manifest", "m.json", "--values", "b.gguf"}),
            "gguf-diff: error: --values, --imatrix, --reference and --paranoid need the bytes of "
            "both sides; a manifest holds only hashes\n" +
                hint);
  EXPECT_EQ(err({"--frobnicate", "a.gguf", "b.gguf"}),
            "gguf-diff: error: unrecognised option '--frobnicate'\n" + hint);
}

TEST(diff_cli, bad_input_exits_2) {
  TempDir dir;
  const Fixture f;
  const std::string a = f.write(dir, "a.gguf");
  std::ofstream(dir.file("bad.gguf")) << "GGML" << std::string(60, '\0');
  CliResult r = run_cli("gguf-diff", {a, dir.file("missing.gguf")});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(scrub(r.err, dir.path()),
            "gguf-diff: error: DIR/missing.gguf: cannot open: No such file or directory\n");
  r = run_cli("gguf-diff", {dir.file("bad.gguf"), a});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(scrub(r.err, dir.path()),
            "gguf-diff: error: DIR/bad.gguf: at byte 0: not a GGUF file (magic 'GGML', expected "
            "'GGUF')\n");
  std::ofstream(dir.file("m.json")) << "{\"files\": []}";
  r = run_cli("gguf-diff", {"--manifest", dir.file("m.json"), a});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(scrub(r.err, dir.path()),
            "gguf-diff: error: DIR/m.json: no \"tensors\" array; expected the output of "
            "gguf-inspect --hashes --json\n");
}

TEST(diff_cli, manifest_written_by_gguf_inspect) {
  const Pair p;
  const CliResult m = run_cli("gguf-inspect", {"--hashes", "--json", p.a});
  ASSERT_EQ(m.code, 0) << m.err;
  const std::string manifest = p.dir.file("a.json");
  std::ofstream(manifest) << m.out;
  CliResult r = run_cli("gguf-diff", {"--manifest", manifest, p.a});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  r = run_cli("gguf-diff", {"--manifest", manifest, "--json", p.b});
  EXPECT_EQ(r.code, 1) << r.err;
  const auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["a"]["manifest"], manifest);
  EXPECT_EQ(doc["a"]["files"][0], p.a);
  EXPECT_EQ(doc["summary"]["bytes"], 1);
  EXPECT_EQ(doc["summary"]["type"], 1);
  EXPECT_EQ(doc["metadata"][0]["key"], "general.name");
}

// A model compared with its own manifest is identical whatever its metadata holds: strings
// with backslashes and invalid UTF-8 (real vocabularies and chat templates), keys with them,
// NaN, infinities and -0.0. And a change the JSON form cannot show (inf -> -inf, 0.0 -> -0.0,
// a NaN payload) is still found, through the values' recorded hashes.
TEST(diff_cli, manifest_metadata_round_trips_exactly) {
  TempDir dir;
  const float inf = std::numeric_limits<float>::infinity();
  const auto build = [&](float x, double z, uint32_t nan_bits, const std::string& file) {
    float nan;
    std::memcpy(&nan, &nan_bits, 4);
    Fixture f;
    auto b = f.builder();
    b.string("tokenizer.chat_template", "{{ message['content'] + '\\n' }}")
        .string_array("weird.tokens", {"a", "\\", "\\n", "\\x41", "b\xff"})
        .string("k\\ey\xfe", "v\xff\\")
        .f32("x", x)
        .f64("z", z)
        .f32("n", nan)
        .array("fs", gguf::testing::Tag::kF32, std::vector<float>{1.0f, -0.0f, nan});
    b.write_file(dir.file(file));
    return dir.file(file);
  };
  const std::string a = build(inf, 0.0, 0x7fc00001u, "a.gguf");
  const CliResult m = run_cli("gguf-inspect", {"--hashes", "--json", a});
  ASSERT_EQ(m.code, 0) << m.err;
  const std::string manifest = dir.file("a.json");
  std::ofstream(manifest) << m.out;
  CliResult r = run_cli("gguf-diff", {"--manifest", manifest, a});
  EXPECT_EQ(r.code, 0) << r.out << r.err;

  // An older manifest without the values' hashes still round-trips the strings.
  auto doc = nlohmann::json::parse(m.out);
  for (auto& e : doc["metadata"]) e.erase("xxh3");
  std::ofstream(dir.file("old.json")) << doc.dump();
  r = run_cli("gguf-diff", {"--manifest", dir.file("old.json"), "--json", a});
  const auto old = nlohmann::json::parse(r.out);
  std::vector<std::string> changed;
  for (const auto& e : old["metadata"]) changed.push_back(e["key"]);
  // Without hashes only NaN payloads can't be told apart; both read back as "nan", so equal.
  EXPECT_EQ(changed, std::vector<std::string>{}) << r.out;
  // JSON has no NaN or infinity: they are the strings "nan", "inf", "-inf", not a lossy null.
  std::map<std::string, nlohmann::json> values;
  for (const auto& e : doc["metadata"]) values[e["key"]] = e["value"];
  EXPECT_EQ(values["x"], "inf");
  EXPECT_EQ(values["n"], "nan");
  EXPECT_EQ(values["fs"], nlohmann::json::parse(R"([1.0, -0.0, "nan"])"));

  const std::string b = build(-inf, -0.0, 0x7fc00002u, "b.gguf");
  r = run_cli("gguf-diff", {"--manifest", manifest, "--json", b});
  EXPECT_EQ(r.code, 1) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  changed.clear();
  for (const auto& e : j["metadata"]) changed.push_back(e["key"]);
  EXPECT_EQ(changed, (std::vector<std::string>{"x", "z", "n", "fs"}));
  EXPECT_EQ(j["metadata"][0]["a"], "inf");
  EXPECT_EQ(j["metadata"][0]["b"], "-inf");
  // The direct diff agrees.
  r = run_cli("gguf-diff", {"--json", a, b});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  changed.clear();
  const auto direct = nlohmann::json::parse(r.out);
  for (const auto& e : direct["metadata"]) changed.push_back(e["key"]);
  EXPECT_EQ(changed, (std::vector<std::string>{"x", "z", "n", "fs"}));
}

// Tensor names holding a backslash or an invalid byte read the same whichever way side A
// comes: from its manifest or from the file (they were escaped twice from a manifest).
TEST(diff_cli, manifest_tensor_names_read_like_the_direct_diff) {
  TempDir dir;
  const auto build = [&](int seed, const std::string& file) {
    Fixture f;
    f.tensor("blk.0.attn_q.weight").name = "blk.0.attn_q\\x41.weight";
    f.tensor("token_embd.weight").name = "token_embd\xff.weight";
    f.tensor("token_embd\xff.weight").payload = f32_bytes(eighths(32, seed));
    f.tensor("blk.0.attn_q\\x41.weight").payload = f32_bytes(eighths(64, seed + 1));
    f.builder().write_file(dir.file(file));
    return dir.file(file);
  };
  const std::string a = build(1, "a.gguf"), b = build(5, "b.gguf");
  const CliResult m = run_cli("gguf-inspect", {"--hashes", "--json", a});
  ASSERT_EQ(m.code, 0) << m.err;
  std::ofstream(dir.file("a.json")) << m.out;
  const auto names = [](const std::string& out) {
    std::vector<std::string> n;
    const auto doc = nlohmann::json::parse(out);
    for (const auto& t : doc["tensors"])
      if (t["change"] != "same") n.push_back(t["name"]);
    return n;
  };
  const CliResult via = run_cli("gguf-diff", {"--json", "--manifest", dir.file("a.json"), b});
  const CliResult direct = run_cli("gguf-diff", {"--json", a, b});
  ASSERT_EQ(via.code, 1) << via.err;
  ASSERT_EQ(direct.code, 1) << direct.err;
  EXPECT_EQ(names(via.out),
            (std::vector<std::string>{"token_embd\\xff.weight", "blk.0.attn_q\\\\x41.weight"}));
  EXPECT_EQ(names(via.out), names(direct.out));
  const CliResult text = run_cli("gguf-diff", {"--manifest", dir.file("a.json"), b});
  EXPECT_NE(text.out.find("token_embd\\xff.weight"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("\\\\\\\\"), std::string::npos) << text.out;
  EXPECT_EQ(run_cli("gguf-diff", {"--manifest", dir.file("a.json"), a}).code, 0);
}

std::string dir_file(const Pair& p, const std::string& name) { return p.dir.file(name); }

// A manifest written with selectors records them; the diff then compares only what the
// manifest covers instead of reporting every other tensor of B as only in B.
TEST(diff_cli, manifest_with_a_selection_covers_only_it) {
  const Pair p;
  const CliResult m =
      run_cli("gguf-inspect", {"--hashes", "--json", "--layers", "1", "--role", "routed", p.a});
  ASSERT_EQ(m.code, 0) << m.err;
  const auto written = nlohmann::json::parse(m.out);
  EXPECT_EQ(written["selection"]["layers"], nlohmann::json::parse("[[1, 1]]"));
  EXPECT_EQ(written["selection"]["roles"],
            nlohmann::json::parse(R"(["routed-gate", "routed-up", "routed-down"])"));
  EXPECT_EQ(written["tensors"].size(), 1u);
  const std::string manifest = p.dir.file("a.json");
  std::ofstream(manifest) << m.out;
  CliResult r = run_cli("gguf-diff", {"--manifest", manifest, "--no-metadata", p.a});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("; covers layer 1, role routed-gate|routed-up|routed-down)"),
            std::string::npos)
      << r.out;
  r = run_cli("gguf-diff", {"--manifest", manifest, "--json", "--no-metadata", p.a});
  EXPECT_EQ(r.code, 0) << r.err;
  const auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["a"]["selection"]["layers"], nlohmann::json::parse("[[1, 1]]"));
  // A tensor of B inside the manifest's selection that the manifest lacks is still new.
  auto extra = written;
  extra["tensors"] = nlohmann::json::array();
  std::ofstream(dir_file(p, "e.json")) << extra.dump();
  r = run_cli("gguf-diff", {"--manifest", dir_file(p, "e.json"), "--json", "--no-metadata", p.a});
  EXPECT_EQ(r.code, 1) << r.err;
  const auto e = nlohmann::json::parse(r.out);
  ASSERT_EQ(e["tensors"].size(), 1u);
  EXPECT_EQ(e["tensors"][0]["change"], "only_b");
  // A layer outside what the manifest covers: the error says the manifest does not cover it.
  r = run_cli("gguf-diff", {"--manifest", manifest, "--layers", "0", p.a});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(scrub(r.err, p.dir.path()),
            "gguf-diff: error: layer 0 does not exist in 'DIR/a.json' (layers 1); the manifest "
            "covers only layer 1, role routed-gate|routed-up|routed-down, so 'DIR/a.gguf' is "
            "compared there only\n");
  // A user selector still narrows further, within what the manifest covers.
  r = run_cli("gguf-diff", {"--manifest", manifest, "-q", "--match", "blk\\..*", p.a});
  EXPECT_EQ(r.code, 0) << r.err;
  // A manifest whose selection is malformed is refused, naming it.
  auto bad = written;
  bad["selection"]["layers"] = nlohmann::json::parse("[[3]]");
  std::ofstream(manifest, std::ios::trunc) << bad.dump();
  r = run_cli("gguf-diff", {"--manifest", manifest, p.a});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(scrub(r.err, p.dir.path()),
            "gguf-diff: error: DIR/a.json: selection: layer range [3] is not [first, last]\n");
  bad["selection"] = {{"roles", {"nonsense"}}};
  std::ofstream(manifest, std::ios::trunc) << bad.dump();
  r = run_cli("gguf-diff", {"--manifest", manifest, p.a});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(scrub(r.err, p.dir.path()).find("DIR/a.json: selection: "), std::string::npos) << r.err;
}

// A legacy llama.cpp imatrix (.dat), written here from the format: i32 entry count, then per
// entry i32 name length, name, i32 ncall, i32 nval, nval f32 sums over ncall calls.
void write_legacy_imatrix(const std::string& path, const std::string& tensor,
                          const std::vector<float>& sums, int32_t ncall) {
  std::ofstream out(path, std::ios::binary);
  const auto i32 = [&](int32_t v) { out.write(reinterpret_cast<const char*>(&v), 4); };
  i32(1);
  i32(static_cast<int32_t>(tensor.size()));
  out.write(tensor.data(), static_cast<std::streamsize>(tensor.size()));
  i32(ncall);
  i32(static_cast<int32_t>(sums.size()));
  out.write(reinterpret_cast<const char*>(sums.data()),
            static_cast<std::streamsize>(sums.size() * 4));
}

TEST(diff_cli, imatrix_and_reference) {
  TempDir dir;
  Fixture fa, fb;
  const std::string name = "blk.1.ffn_up_exps.weight";  // [8, 4, 3]: 3 experts of 4 rows of 8
  const auto base = floats_of(fa.tensor(name));
  const auto x = perturbed(base, 0.03, 7);
  fb.tensor(name).payload = f32_bytes(x);
  const std::string a = fa.write(dir, "a.gguf"), b = fb.write(dir, "b.gguf");
  std::vector<float> sums(24);
  for (size_t i = 0; i < sums.size(); ++i) sums[i] = static_cast<float>(2 * (1 + i % 5));
  write_legacy_imatrix(dir.file("im.dat"), name, sums, 2);  // means 1..5
  double wd2 = 0, wb2 = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    const double w = sums[(i / 32) * 8 + i % 8] / 2.0, d = double(x[i]) - base[i];
    wd2 += w * d * d;
    wb2 += w * double(base[i]) * base[i];
  }
  const CliResult r = run_cli("gguf-diff", {"--json", "--imatrix", dir.file("im.dat"),
                                            "--reference", a, "--role", "routed", a, b});
  ASSERT_EQ(r.code, 1) << r.err;
  const auto doc = nlohmann::json::parse(r.out);
  ASSERT_EQ(doc["tensors"].size(), 1u);
  const auto& t = doc["tensors"][0];
  EXPECT_NEAR(t["metrics"]["weighted_rel"].get<double>(), std::sqrt(wd2 / wb2),
              1e-6 * std::sqrt(wd2 / wb2));
  EXPECT_EQ(t["reference"]["closer"], "a");
  EXPECT_EQ(t["reference"]["a"]["rmse"], 0.0);
  EXPECT_NEAR(t["reference"]["b"]["weighted_rel"].get<double>(), std::sqrt(wd2 / wb2),
              1e-6 * std::sqrt(wd2 / wb2));
  EXPECT_EQ(doc["summary"]["by_layer"][0]["reference"]["closer_a"], 1);
}

// An importance matrix that does not fit the model is trouble whether or not the tensor it
// does not fit differs, and with --quiet: the same inputs give the same exit status.
TEST(diff_cli, imatrix_that_does_not_fit_exits_2) {
  const Pair p;  // blk.1.ffn_up_exps.weight (ne0 8, 3 experts) is the same in A and B
  write_legacy_imatrix(p.dir.file("bad.dat"), "blk.1.ffn_up_exps.weight",
                       std::vector<float>(5, 1.0f), 1);
  // Byte 36 is the entry's nval: after the entry count, the name's length, its 24 bytes, ncall.
  const std::string message =
      "gguf-diff: error: DIR/bad.dat: tensor 'blk.1.ffn_up_exps.weight': at byte 36: importance "
      "entry has 5 values; expected 8 (columns) or 24 (3 experts x 8 columns)\n";
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--imatrix", p.dir.file("bad.dat")},
        {"-q", "--imatrix", p.dir.file("bad.dat")}}) {
    const CliResult r = p.run(args);
    EXPECT_EQ(r.code, 2) << args[0];
    EXPECT_EQ(r.err, message);
  }
}

TEST(diff_cli, help_lists_the_options) {
  const CliResult r = run_cli("gguf-diff", {"--help"});
  EXPECT_EQ(r.code, 0);
  for (const char* opt : {"--values", "--imatrix", "--reference", "--manifest", "--paranoid",
                          "--json", "--quiet", "--layers", "--role", "--match", "--all"})
    EXPECT_NE(r.out.find(opt), std::string::npos) << opt;
}

}  // namespace
}  // namespace gguf
