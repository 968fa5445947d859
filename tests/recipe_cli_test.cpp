// gguf-inspect --recipe and --map, gguf-requant --tensor-type-file and --recipe-from, the
// binaries: golden stdout/stderr/exit codes, refusals, provenance keys, and maps that parse as
// XML with the right cell for every (layer, role).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "cli_run.h"
#include "gguf/format/model.h"
#include "gguf/ops/recipe.h"
#include "gguf/ops/requant.h"
#include "gguf/ops/synth.h"
#include "gguf/write/writer.h"
#include "gguf_builder.h"

namespace gguf {
namespace {

using testing::run_cli;
using testing::TempDir;

const std::string kInspectTry = "Try 'gguf-inspect --help' for more information.\n";
const std::string kRequantTry = "Try 'gguf-requant --help' for more information.\n";

MoeSpec small_spec(int layers = 4, uint64_t seed = 1) {
  MoeSpec s;
  s.n_layers = layers;
  s.n_experts = 4;
  s.vocab = 256;
  s.seed = seed;
  return s;
}

// The ds4 mix (f16 embedding, q8_0 attention and shared experts, iq2_xxs/q2_K routed experts).
std::string write_ds4(const TempDir& dir, const std::string& name, int layers = 4,
                      uint64_t seed = 1) {
  return write_plan(synth_moe_plan(ds4_recipe(small_spec(layers, seed))), dir.file(name), {})
      .paths.front();
}
std::string write_f32(const TempDir& dir, const std::string& name, int layers = 4,
                      uint64_t seed = 2) {
  return write_plan(synth_moe_plan(uniform_types(small_spec(layers, seed), GgmlType::F32)),
                    dir.file(name), {})
      .paths.front();
}

// The "tensors" array of a JSON report (a copy: safe to loop over).
nlohmann::json tensors_of(const std::string& json) {
  return nlohmann::json::parse(json)["tensors"];
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

const char kDs4Recipe[] =
    "token_embd=f16\n"
    "blk\\.[0-3]\\.attn_(q_a|q_b|kv|output_a|output_b)\\.weight=q8_0\n"
    "blk\\.[0-3]\\.indexer_k=f16\n"
    "blk\\.0\\.ffn_(gate|up|down)=q8_0\n"
    "blk\\.[1-3]\\.ffn_(gate|up)_exps=iq2_xxs\n"
    "blk\\.[1-3]\\.ffn_down_exps=q2_K\n"
    "blk\\.[1-3]\\.ffn_(gate|up|down)_shexp=q8_0\n"
    "output\\.weight=q8_0\n";

TEST(recipe_cli, inspect_recipe_prints_the_rules_and_a_summary_on_stderr) {
  TempDir dir;
  const std::string ds4 = write_ds4(dir, "ds4.gguf");
  const auto r = run_cli("gguf-inspect", {"--recipe", ds4});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, kDs4Recipe);
  EXPECT_EQ(r.err,
            "gguf-inspect: 8 rules decide 47 tensors (5.66 bpw); 27 tensors are copied as they "
            "are\n");
  // A split set is one model: the same recipe.
  WriteOptions wo;
  wo.split_max_tensors = 20;
  write_plan(synth_moe_plan(ds4_recipe(small_spec())), dir.file("split.gguf"), wo);
  const auto s = run_cli("gguf-inspect", {"--recipe", dir.file("split-00001-of-00004.gguf")});
  EXPECT_EQ(s.code, 0) << s.err;
  EXPECT_EQ(s.out, kDs4Recipe);
}

TEST(recipe_cli, inspect_recipe_json_gives_each_rule_its_tensors_bytes_and_bpw) {
  TempDir dir;
  const std::string ds4 = write_ds4(dir, "ds4.gguf");
  const auto r = run_cli("gguf-inspect", {"--recipe", "--json", ds4});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["rules"].size(), 8u);
  const auto& down = j["rules"][5];
  EXPECT_EQ(down["rule"], "blk\\.[1-3]\\.ffn_down_exps=q2_K");
  EXPECT_EQ(down["pattern"], "blk\\.[1-3]\\.ffn_down_exps");
  EXPECT_EQ(down["type"], "q2_K");
  EXPECT_EQ(down["tensors"],
            nlohmann::json({"blk.1.ffn_down_exps.weight", "blk.2.ffn_down_exps.weight",
                            "blk.3.ffn_down_exps.weight"}));
  EXPECT_EQ(down["params"], 3 * 256 * 256 * 4);
  EXPECT_EQ(down["bytes"], 3 * 4 * 256 * 84);
  EXPECT_DOUBLE_EQ(down["bpw"].get<double>(), 84 * 8 / 256.0);
  EXPECT_EQ(j["copied"].size(), 27u);
  EXPECT_EQ(j["copied"][0], "blk.0.attn_norm.weight");
}

TEST(recipe_cli, inspect_recipe_refusals) {
  TempDir dir;
  const std::string ds4 = write_ds4(dir, "ds4.gguf");
  auto r = run_cli("gguf-inspect", {"--recipe", "--check", ds4});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "gguf-inspect: error: --recipe excludes --check, --hashes, --map, -m and -t\n" +
                       kInspectTry);
  // A type id no ggml type has.
  testing::GgufBuilder b;
  b.string("general.architecture", "llama")
      .tensor("blk.0.attn_q.weight", 99, {256, 4}, std::vector<uint8_t>(64, 1))
      .tensor("blk.0.attn_k.weight", 8, {256, 4});
  b.write_file(dir.file("odd.gguf"));
  const auto layout = b.layout();
  r = run_cli("gguf-inspect", {"--recipe", dir.file("odd.gguf")});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, fmt::format("gguf-inspect: error: {}: tensor 'blk.0.attn_q.weight': at byte "
                               "{}: type id 99 is not a ggml type this build knows: a recipe rule "
                               "cannot name it\n",
                               dir.file("odd.gguf"), layout.tensor_type_offsets[0]));
}

TEST(recipe_cli, requant_tensor_type_file_applies_a_recipe_to_other_weights) {
  TempDir dir;
  const std::string ds4 = write_ds4(dir, "ds4.gguf"), f32 = write_f32(dir, "ft.gguf");
  { std::ofstream(dir.file("r.txt")) << "# the ds4 recipe\n" << kDs4Recipe; }
  const auto r = run_cli("gguf-requant", {f32, "--tensor-type-file", dir.file("r.txt"), "-o",
                                          dir.file("out.gguf"), "--json", "-j", "2"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["tensors"][2]["name"], "blk.0.attn_q_a.weight");
  EXPECT_EQ(j["tensors"][2]["rule"],
            fmt::format("--tensor-type-file {}:3 "
                        "'blk\\.[0-3]\\.attn_(q_a|q_b|kv|output_a|output_b)\\.weight=q8_0'",
                        dir.file("r.txt")));
  const Model donor = Model::open(ds4), out = Model::open(dir.file("out.gguf"));
  for (const TensorRef& t : donor.tensors())
    EXPECT_EQ(type_name(out.find(t.name())->info->type_id), type_name(t.info->type_id)) << t.name();
  const auto* key = out.metadata().find("quantize.tensor_type_file");
  ASSERT_NE(key, nullptr);
  EXPECT_EQ(key->strings(), std::vector<std::string>{dir.file("r.txt")});
  EXPECT_EQ(out.metadata().find("quantize.recipe_from"), nullptr);
}

// A recipe file and --recipe-from's model are inputs like the model: -o naming one of them
// (with --force, for a plan-out too) is refused and leaves it as it was.
TEST(recipe_cli, output_that_is_a_recipe_input_is_refused) {
  TempDir dir;
  const std::string ds4 = write_ds4(dir, "ds4.gguf"), f32 = write_f32(dir, "ft.gguf");
  const std::string recipe = dir.file("r.txt");
  { std::ofstream(recipe) << kDs4Recipe; }
  const std::string refuse =
      "gguf-requant: error: {0}: output is the same file as input '{0}'; "
      "refusing to overwrite an input (choose another output path)\n";
  auto r =
      run_cli("gguf-requant", {f32, "--tensor-type-file", recipe, "-o", recipe, "--force", "-q"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, fmt::format(fmt::runtime(refuse), recipe) + kRequantTry);
  EXPECT_EQ(slurp(recipe), kDs4Recipe);
  const std::string before = slurp(ds4);
  r = run_cli("gguf-requant", {f32, "--recipe-from", ds4, "-o", ds4, "--force", "-q"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, fmt::format(fmt::runtime(refuse), ds4) + kRequantTry);
  EXPECT_TRUE(slurp(ds4) == before);
  r = run_cli("gguf-requant", {f32, "--target-bpw", "6", "--tensor-type-file", recipe, "--plan-out",
                               recipe, "--dry-run", "--force", "-q"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, fmt::format(fmt::runtime(refuse), recipe) + kRequantTry);
  EXPECT_EQ(slurp(recipe), kDs4Recipe);
}

TEST(recipe_cli, tensor_type_file_rules_join_tensor_type_rules_where_the_option_stands) {
  TempDir dir;
  const std::string f32 = write_f32(dir, "ft.gguf");
  { std::ofstream(dir.file("r.txt")) << "blk\\.[23]\\.ffn_down_exps=q4_0\n"; }
  const auto type_of_down = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {f32, "--dry-run", "--json", "--type", "q8_0"});
    const auto r = run_cli("gguf-requant", args);
    EXPECT_EQ(r.code, 0) << r.err;
    for (const auto& t : tensors_of(r.out))
      if (t["name"] == "blk.2.ffn_down_exps.weight") return t["type_after"].get<std::string>();
    return std::string("none");
  };
  EXPECT_EQ(type_of_down({"--tensor-type-file", dir.file("r.txt"), "--tensor-type",
                          "blk\\.[12]\\.ffn_down_exps=q5_0"}),
            "q4_0");
  EXPECT_EQ(type_of_down({"--tensor-type", "blk\\.[12]\\.ffn_down_exps=q5_0",
                          "--tensor-type-file=" + dir.file("r.txt")}),
            "q5_0");
}

TEST(recipe_cli, requant_tensor_type_file_refusals) {
  TempDir dir;
  const std::string f32 = write_f32(dir, "ft.gguf");
  {
    std::ofstream(dir.file("bad.txt")) << "token_embd=f16\n# fine\nattn_q_a q8_0\n";
    std::ofstream(dir.file("none.txt")) << "no_such_tensor=q8_0\n";
  }
  const std::string out = dir.file("out.gguf");
  auto r = run_cli("gguf-requant", {f32, "--tensor-type-file", dir.file("bad.txt"), "-o", out});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, fmt::format("gguf-requant: error: --tensor-type-file {}:3: token 'attn_q_a' is "
                               "not PATTERN=TYPE\n{}",
                               dir.file("bad.txt"), kRequantTry));
  r = run_cli("gguf-requant", {f32, "--tensor-type-file", dir.file("none.txt"), "-o", out});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, fmt::format("gguf-requant: error: {}: --tensor-type-file {}:1 "
                               "'no_such_tensor=q8_0' decides no tensor's type: no tensor has a "
                               "name containing a match for 'no_such_tensor'\n",
                               f32, dir.file("none.txt")));
  r = run_cli("gguf-requant", {f32, "--tensor-type-file", dir.file("missing.txt"), "-o", out});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, fmt::format("gguf-requant: error: {}: cannot open: No such file or "
                               "directory\n",
                               dir.file("missing.txt")));
  EXPECT_FALSE(std::filesystem::exists(out));
}

// A fine-tune of the same model (same names and shapes, other weights) given the donor's
// recipe gets the donor's types; the dry run shows each tensor's rule.
TEST(recipe_cli, recipe_from_gives_a_fine_tune_the_donors_types) {
  TempDir dir;
  const std::string ds4 = write_ds4(dir, "ds4.gguf"), f32 = write_f32(dir, "ft.gguf");
  const std::string out = dir.file("out.gguf");
  auto r = run_cli("gguf-requant", {f32, "--recipe-from", ds4, "-o", out, "--dry-run"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find(fmt::format("blk.1.ffn_down_exps.weight   f32 -> q2_K     --recipe-from "
                                   "'{}' rule 'blk\\.[1-3]\\.ffn_down_exps=q2_K'",
                                   ds4)),
            std::string::npos)
      << r.out;
  EXPECT_FALSE(std::filesystem::exists(out));
  r = run_cli("gguf-requant", {f32, "--recipe-from", ds4, "-o", out, "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  const Model donor = Model::open(ds4), ft = Model::open(out);
  ASSERT_EQ(ft.tensors().size(), donor.tensors().size());
  for (const TensorRef& t : donor.tensors())
    EXPECT_EQ(type_name(ft.find(t.name())->info->type_id), type_name(t.info->type_id)) << t.name();
  const auto* key = ft.metadata().find("quantize.recipe_from");
  ASSERT_NE(key, nullptr);
  ASSERT_NE(key->as_string(), nullptr);
  EXPECT_EQ(*key->as_string(), ds4);
  // The recipe of the output is the donor's.
  const auto again = run_cli("gguf-inspect", {"--recipe", out});
  EXPECT_EQ(again.out, kDs4Recipe);
}

TEST(recipe_cli, recipe_from_tensors_one_side_lacks_and_shapes_that_differ) {
  TempDir dir;
  const std::string donor = write_ds4(dir, "ds4.gguf", 3), in5 = write_f32(dir, "in5.gguf", 5);
  const std::string in2 = write_f32(dir, "in2.gguf", 2), out = dir.file("out.gguf");
  // Layers 3-4 of the input are not in the donor: --type decides them, or they are kept.
  auto r = run_cli("gguf-requant",
                   {in5, "--recipe-from", donor, "--type", "q4_0", "--dry-run", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  std::map<std::string, std::string> types;
  for (const auto& t : tensors_of(r.out))
    types[t["name"].get<std::string>()] = t["type_after"].get<std::string>();
  EXPECT_EQ(types["blk.2.ffn_down_exps.weight"], "q2_K");
  EXPECT_EQ(types["blk.4.ffn_down_exps.weight"], "q4_0");
  r = run_cli("gguf-requant", {in5, "--recipe-from", donor, "--dry-run", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const auto& t : tensors_of(r.out))
    if (t["name"] == "blk.4.ffn_down_exps.weight") {
      EXPECT_EQ(t["type_after"], "f32");
    }
  // Layer 2 of the donor is not in the input: a note.
  r = run_cli("gguf-requant", {in2, "--recipe-from", donor, "--dry-run"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, fmt::format("gguf-requant: note: 12 tensors that the recipe of '{}' decides are "
                               "not in the input: 'blk.2.attn_kv.weight', "
                               "'blk.2.attn_output_a.weight', 'blk.2.attn_output_b.weight', "
                               "'blk.2.attn_q_a.weight', ...\n"
                               "gguf-requant: note: iq2_xxs needs an importance matrix and none "
                               "was given for some tensors: using each matrix's column energy "
                               "(sum of squared weights) instead\n",
                               donor));
  // Another model's shapes: refused, naming both files.
  MoeSpec wide = uniform_types(small_spec(3, 2), GgmlType::F32);
  wide.n_embd = 512;
  write_plan(synth_moe_plan(wide), dir.file("wide.gguf"), {});
  r = run_cli("gguf-requant", {dir.file("wide.gguf"), "--recipe-from", donor, "-o", out});
  EXPECT_EQ(r.code, 1);
  const Model w = Model::open(dir.file("wide.gguf"));
  EXPECT_EQ(
      r.err,
      fmt::format("gguf-requant: error: {}: tensor 'token_embd.weight': at byte {}: "
                  "shape [512, 256] differs from its shape [256, 256] in '{}', whose "
                  "recipe gives it f16: a recipe applies to the same model's weights\n",
                  dir.file("wide.gguf"), w.find("token_embd.weight")->info->dims_offset(), donor));
  EXPECT_FALSE(std::filesystem::exists(out));
  // Not for a packed-affine import (a usage error before the file is read).
  testing::write_bytes(dir.file("x.safetensors"), {1, 2, 3});
  r = run_cli("gguf-requant",
              {dir.file("x.safetensors"), "--recipe-from", donor, "-o", out, "--type", "q4_1"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gguf-requant: error: --recipe-from does not apply to a packed-affine import (its "
            "types come from the import's bits: --type q4_1, q5_1 or f32)\n" +
                kRequantTry);
  r = run_cli("gguf-requant", {in2, "--recipe-from", dir.file("nope.gguf"), "-o", out});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(
      r.err.starts_with(fmt::format("gguf-requant: error: {}: cannot open", dir.file("nope.gguf"))))
      << r.err;
}

}  // namespace
}  // namespace gguf

namespace gguf {
namespace {

// A small XML well-formedness check (elements nest and close, attributes are quoted, only the
// five predefined entities and character references, no markup in text), and the elements it
// saw with their attributes and text, in document order.
struct XmlElement {
  std::string name, text;
  std::map<std::string, std::string> attrs;
  std::string parent;
};
std::string check_xml(const std::string& doc, std::vector<XmlElement>& out) {
  size_t i = 0;
  std::vector<size_t> stack;  // indices into out
  const auto text_ok = [](std::string_view t) {
    for (size_t k = 0; k < t.size(); ++k) {
      if (t[k] == '<') return false;
      if (static_cast<unsigned char>(t[k]) < 0x20 && t[k] != '\n' && t[k] != '\t' && t[k] != '\r')
        return false;
      if (t[k] == '&') {
        const size_t semi = t.find(';', k);
        if (semi == std::string_view::npos) return false;
        const auto ent = t.substr(k + 1, semi - k - 1);
        if (ent != "amp" && ent != "lt" && ent != "gt" && ent != "quot" && ent != "apos" &&
            !(ent.size() > 1 && ent[0] == '#'))
          return false;
      }
    }
    return true;
  };
  if (doc.starts_with("<?xml")) i = doc.find("?>") + 2;
  bool root_seen = false;
  while (i < doc.size()) {
    const size_t lt = doc.find('<', i);
    const std::string_view text(doc.data() + i, (lt == std::string::npos ? doc.size() : lt) - i);
    if (!text_ok(text)) return "bad text near byte " + std::to_string(i);
    if (!stack.empty())
      out[stack.back()].text += text;
    else if (text.find_first_not_of(" \n\t\r") != std::string_view::npos)
      return "text outside the root element";
    if (lt == std::string::npos) break;
    const size_t gt = doc.find('>', lt);
    if (gt == std::string::npos) return "unterminated tag";
    std::string tag = doc.substr(lt + 1, gt - lt - 1);
    i = gt + 1;
    if (tag.starts_with("/")) {
      if (stack.empty() || out[stack.back()].name != tag.substr(1)) return "mismatched </" + tag;
      stack.pop_back();
      continue;
    }
    const bool empty = tag.ends_with("/");
    if (empty) tag.pop_back();
    XmlElement e;
    size_t k = 0;
    while (k < tag.size() && !isspace(static_cast<unsigned char>(tag[k]))) ++k;
    e.name = tag.substr(0, k);
    if (e.name.empty()) return "empty element name";
    while (true) {
      while (k < tag.size() && isspace(static_cast<unsigned char>(tag[k]))) ++k;
      if (k == tag.size()) break;
      const size_t eq = tag.find('=', k);
      if (eq == std::string::npos || eq + 1 >= tag.size() || tag[eq + 1] != '"')
        return "unquoted attribute in <" + e.name;
      const size_t close = tag.find('"', eq + 2);
      if (close == std::string::npos) return "unterminated attribute in <" + e.name;
      const std::string key = tag.substr(k, eq - k), value = tag.substr(eq + 2, close - eq - 2);
      if (!text_ok(value) || value.find('"') != std::string::npos) return "bad attribute value";
      if (!e.attrs.emplace(key, value).second) return "duplicate attribute " + key;
      k = close + 1;
    }
    if (stack.empty() && root_seen) return "second root element";
    root_seen = true;
    e.parent = stack.empty() ? "" : out[stack.back()].name;
    out.push_back(e);
    if (!empty) stack.push_back(out.size() - 1);
  }
  if (!stack.empty()) return "unclosed <" + out[stack.back()].name;
  if (!root_seen) return "no root element";
  return "";
}

TEST(map_cli, inspect_map_has_the_right_cell_for_every_layer_and_role) {
  TempDir dir;
  // DeepSeek-shaped: a dense first layer, routed and shared experts, MLA attention; the routed
  // experts of the last two layers at q4_K as the ds4 recipe's splice leaves them.
  MoeSpec spec = ds4_recipe(small_spec(6));
  Plan plan = synth_moe_plan(spec);
  write_plan(plan, dir.file("base.gguf"), {});
  write_plan(synth_moe_plan(uniform_types(small_spec(6), GgmlType::Q4_K)), dir.file("q4k.gguf"),
             {});
  auto r =
      run_cli("gguf-splice", {dir.file("base.gguf"), "--donor", dir.file("q4k.gguf"), "--layers",
                              "4-5", "--role", "routed", "-o", dir.file("mix.gguf"), "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string mix = dir.file("mix.gguf"), svg = dir.file("mix.svg");
  r = run_cli("gguf-inspect", {"--map", svg, mix});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("bits/weight:"), std::string::npos);  // the summary as without --map
  const std::string doc = slurp(svg);
  std::vector<XmlElement> elements;
  ASSERT_EQ(check_xml(doc, elements), "");
  EXPECT_EQ(doc.find("<script"), std::string::npos);
  EXPECT_EQ(doc.find("href"), std::string::npos);
  ASSERT_FALSE(elements.empty());
  EXPECT_EQ(elements[0].name, "svg");
  EXPECT_EQ(elements[0].attrs["xmlns"], "http://www.w3.org/2000/svg");
  EXPECT_EQ(elements[1].name, "title");
  EXPECT_TRUE(elements[1].text.starts_with(mix + ": 112 tensors,")) << elements[1].text;
  // What each (layer, role) should hold: the type with most parameters, '*' when several.
  const Model m = Model::open(mix);
  std::map<std::pair<std::string, std::string>, std::map<std::string, uint64_t>> want;
  for (const TensorRef& t : m.tensors()) {
    const TensorName tn = classify_tensor(t.name(), m.architecture(), ggml_dims(t.info->shape));
    want[{tn.layer ? std::to_string(*tn.layer) : "-", std::string(role_name(tn.role))}]
        [type_name(t.info->type_id)] += t.info->n_elements;
  }
  std::map<std::pair<std::string, std::string>, std::string> cells;  // -> text of the cell
  std::set<std::string> layer_labels;
  for (size_t k = 0; k < elements.size(); ++k) {
    const auto& e = elements[k];
    if (e.name == "text" && e.attrs.count("class") && e.attrs.at("class") == "layer")
      layer_labels.insert(e.text);
    if (e.name != "g" || (!e.attrs.count("class") || e.attrs.at("class") != "cell")) continue;
    ASSERT_TRUE(k + 3 < elements.size());
    EXPECT_EQ(elements[k + 1].name, "rect");
    EXPECT_EQ(elements[k + 2].name, "title");
    EXPECT_EQ(elements[k + 3].name, "text");
    const std::pair key{e.attrs.at("data-layer"), e.attrs.at("data-role")};
    EXPECT_TRUE(cells.emplace(key, elements[k + 3].text).second) << "two cells for " << key.first;
    const std::string& title = elements[k + 2].text;
    EXPECT_TRUE(title.starts_with(
        (key.first == "-" ? std::string("outside layers") : "layer " + key.first) + ", " +
        key.second + ": "))
        << title;
    EXPECT_NE(title.find(" bpw"), std::string::npos) << title;
  }
  ASSERT_EQ(cells.size(), want.size());
  const auto cell = [&](const std::string& layer, const std::string& role) {
    return cells[{layer, role}];
  };
  for (const auto& [key, types] : want) {
    std::string dominant;
    uint64_t best = 0;
    for (const auto& [type, n] : types)
      if (n > best) best = n, dominant = type;
    EXPECT_EQ(cells[key], dominant + (types.size() > 1 ? "*" : ""))
        << "layer " << key.first << " role " << key.second;
  }
  EXPECT_EQ(cell("5", "routed-gate"), "q4_K");
  EXPECT_EQ(cell("3", "routed-down"), "q2_K");
  EXPECT_EQ(cell("-", "embedding"), "f16");
  EXPECT_EQ(layer_labels, (std::set<std::string>{"-", "0", "1", "2", "3", "4", "5"}));
  // Refusals: an existing file without --force, --map with --recipe.
  r = run_cli("gguf-inspect", {"--map", svg, mix});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(
      r.err,
      fmt::format("gguf-inspect: error: {}: output file exists; use --force to replace it\n", svg) +
          kInspectTry);
  r = run_cli("gguf-inspect", {"--map", svg, mix, "--force"});
  EXPECT_EQ(r.code, 0) << r.err;
  r = run_cli("gguf-inspect", {"--map", mix, mix, "--force"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, fmt::format("gguf-inspect: error: {0}: output is the same file as input '{0}'; "
                               "refusing to overwrite an input (choose another output path)\n",
                               mix) +
                       kInspectTry);
  r = run_cli("gguf-inspect", {"--map", svg, "--recipe", mix});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "gguf-inspect: error: --recipe excludes --check, --hashes, --map, -m and -t\n" +
                       kInspectTry);
}

// gguf-diff --values --map: the same grid, each cell coloured by B's error against A; the 2-bit
// routed experts lose far more than the q8_0 attention, and untouched norms nothing.
TEST(map_cli, diff_map_colours_each_cell_by_the_error_of_b_against_a) {
  TempDir dir;
  const std::string a = dir.file("a.gguf"), b = dir.file("b.gguf"), svg = dir.file("d.svg");
  write_plan(synth_moe_plan(uniform_types(small_spec(4, 1), GgmlType::F32)), a, {});
  write_plan(synth_moe_plan(ds4_recipe(small_spec(4, 1))), b, {});
  auto r = run_cli("gguf-diff", {"--values", "--map", svg, a, b, "--no-summary"});
  EXPECT_EQ(r.code, 1) << r.err;  // different, as without --map
  std::vector<XmlElement> elements;
  const std::string doc = slurp(svg);
  ASSERT_EQ(check_xml(doc, elements), "");
  EXPECT_TRUE(elements[1].text.starts_with(b + " against " + a + ": relative error of 74 tensors"))
      << elements[1].text;
  std::map<std::pair<std::string, std::string>, double> error;
  std::map<std::pair<std::string, std::string>, std::string> text;
  for (size_t k = 0; k + 3 < elements.size(); ++k) {
    const auto& e = elements[k];
    if (e.name != "g") continue;
    const std::pair key{e.attrs.at("data-layer"), e.attrs.at("data-role")};
    const std::string& title = elements[k + 2].text;
    const size_t at = title.find("relative error ");
    ASSERT_NE(at, std::string::npos) << title;
    error[key] = std::stod(title.substr(at + 15));
    text[key] = elements[k + 3].text;
  }
  const auto at = [](auto& m, const char* layer, const char* role) {
    return m[std::pair<std::string, std::string>{layer, role}];
  };
  EXPECT_EQ(at(text, "2", "routed-gate"), "iq2_xxs");
  EXPECT_EQ(at(text, "2", "attn-proj"), "q8_0");
  EXPECT_GT(at(error, "2", "routed-gate"), 10 * at(error, "2", "attn-proj"));
  EXPECT_GT(at(error, "2", "attn-proj"), 0.0);
  EXPECT_EQ(at(error, "2", "norm"), 0.0);
  std::set<std::pair<std::string, std::string>> present;
  const Model mb = Model::open(b);
  for (const TensorRef& t : mb.tensors()) {
    const TensorName tn = classify_tensor(t.name(), mb.architecture(), ggml_dims(t.info->shape));
    present.insert({tn.layer ? std::to_string(*tn.layer) : "-", std::string(role_name(tn.role))});
  }
  EXPECT_EQ(error.size(), present.size());
  // Refusals.
  r = run_cli("gguf-diff", {"--map", svg, a, b});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gguf-diff: error: --map draws the errors --values measures: give --values too\n"
            "Try 'gguf-diff --help' for more information.\n");
  r = run_cli("gguf-diff", {"--values", "-q", "--map", dir.file("q.svg"), a, b});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gguf-diff: error: --quiet stops at the first difference: it cannot draw --map\n"
            "Try 'gguf-diff --help' for more information.\n");
  r = run_cli("gguf-diff", {"--values", "--map", svg, a, b});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            fmt::format("gguf-diff: error: {}: output file exists; use --force to replace it\n"
                        "Try 'gguf-diff --help' for more information.\n",
                        svg));
}

}  // namespace
}  // namespace gguf
