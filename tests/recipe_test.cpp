// Type recipes: the rule compaction (compact, exclusive, read the same by first-match and
// last-match readers that lowercase patterns as llama-quantize does), a model's recipe, the
// --tensor-type-file reader, and the round trip through a file llama.cpp's quantizer mixed.
#include "gguf/ops/recipe.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "cli_run.h"
#include "gguf/base/error.h"
#include "gguf/ops/requant.h"
#include "gguf/ops/synth.h"
#include "gguf/write/writer.h"
#include "llama_ref.h"

namespace gguf {
namespace {

using testing::LlamaRef;
using testing::TempDir;

// llama-quantize's reading of a --tensor-type-file, restated here: tokens split on whitespace,
// split at the first '=', the pattern lowercased, std::regex_search on the name. Returns per
// name the type of the first and of the last rule that matches ("" for none).
struct Reading {
  std::vector<std::string> first, last;
};
Reading read_as_llama_quantize(const std::string& text, const std::vector<std::string>& names) {
  std::istringstream in(text);
  std::vector<std::pair<std::regex, std::string>> rules;
  std::string token;
  while (in >> token) {
    const size_t eq = token.find('=');
    EXPECT_NE(eq, std::string::npos) << token;
    std::string pattern = token.substr(0, eq);
    for (char& c : pattern) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    rules.emplace_back(std::regex(pattern), token.substr(eq + 1));
  }
  Reading r;
  for (const auto& name : names) {
    std::string first, last;
    for (const auto& [rx, type] : rules)
      if (std::regex_search(name, rx)) {
        if (first.empty()) first = type;
        last = type;
      }
    r.first.push_back(first);
    r.last.push_back(last);
  }
  return r;
}

std::string rules_text(const std::vector<RecipeRule>& rules) {
  std::string out;
  for (const auto& r : rules) out += r.text() + "\n";
  return out;
}

// Checks that both readers give every typed tensor its type and untyped ones none.
void expect_read_back(const std::vector<RecipeTensor>& tensors,
                      const std::vector<RecipeRule>& rules) {
  std::vector<std::string> names;
  for (const auto& t : tensors) names.push_back(t.name);
  const Reading r = read_as_llama_quantize(rules_text(rules), names);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string want = tensors[i].type ? std::string(traits(*tensors[i].type).name) : "";
    EXPECT_EQ(r.first[i], want) << names[i];
    EXPECT_EQ(r.last[i], want) << names[i];
  }
}

// A DeepSeek-shaped assignment: 43 layers, 0-2 dense, the ds4 recipe with routed experts of
// layers 37-42 at q4_K, norms and the router untyped.
std::vector<RecipeTensor> ds4_assignment() {
  std::vector<RecipeTensor> t;
  t.push_back({"token_embd.weight", Role::kEmbedding, GgmlType::F16});
  for (int l = 0; l < 43; ++l) {
    const auto add = [&](const std::string& kind, Role role, std::optional<GgmlType> type) {
      t.push_back({fmt::format("blk.{}.{}", l, kind), role, type});
    };
    add("attn_norm.weight", Role::kNorm, std::nullopt);
    for (const char* k : {"attn_q_a.weight", "attn_q_b.weight", "attn_kv_a_mqa.weight",
                          "attn_kv_b.weight", "attn_output.weight"})
      add(k, Role::kAttnProj, GgmlType::Q8_0);
    add("attn_q_a_norm.weight", Role::kNorm, std::nullopt);
    add("ffn_norm.weight", Role::kNorm, std::nullopt);
    if (l < 3) {
      for (const char* k : {"ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"})
        add(k, Role::kDenseFfn, GgmlType::Q8_0);
      continue;
    }
    add("ffn_gate_inp.weight", Role::kRouter, std::nullopt);
    add("exp_probs_b.bias", Role::kRouter, std::nullopt);
    const bool last = l >= 37;
    add("ffn_gate_exps.weight", Role::kRoutedGate, last ? GgmlType::Q4_K : GgmlType::IQ2_XXS);
    add("ffn_up_exps.weight", Role::kRoutedUp, last ? GgmlType::Q4_K : GgmlType::IQ2_XXS);
    add("ffn_down_exps.weight", Role::kRoutedDown, last ? GgmlType::Q4_K : GgmlType::Q2_K);
    for (const char* k : {"ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight"})
      add(k, Role::kShared, GgmlType::Q8_0);
  }
  t.push_back({"output_norm.weight", Role::kNorm, std::nullopt});
  t.push_back({"output.weight", Role::kOutput, GgmlType::Q8_0});
  return t;
}

TEST(recipe_rules, a_deepseek_mix_is_a_handful_of_exclusive_rules) {
  const auto tensors = ds4_assignment();
  const auto rules = compact_type_rules(tensors);
  EXPECT_EQ(rules_text(rules),
            "token_embd=f16\n"
            "blk\\.([0-9]|[1-3][0-9]|4[0-2])\\.attn_(q_a|q_b|kv_a_mqa|kv_b|output)\\.weight=q8_0\n"
            "blk\\.[0-2]\\.ffn_(gate|up|down)=q8_0\n"
            "blk\\.([3-9]|[12][0-9]|3[0-6])\\.ffn_(gate|up)_exps=iq2_xxs\n"
            "blk\\.([3-9]|[12][0-9]|3[0-6])\\.ffn_down_exps=q2_K\n"
            "blk\\.([3-9]|[1-3][0-9]|4[0-2])\\.ffn_(gate|up|down)_shexp=q8_0\n"
            "blk\\.(3[7-9]|4[0-2])\\.ffn_(gate|up|down)_exps=q4_K\n"
            "^output\\.weight$=q8_0\n");
  expect_read_back(tensors, rules);
  size_t decided = 0;
  for (const auto& r : rules) {
    EXPECT_FALSE(r.tensors.empty());
    decided += r.tensors.size();
  }
  EXPECT_EQ(decided, 1u + 43 * 5 + 3 * 3 + 40 * 6 + 1);
}

TEST(recipe_rules, layer_ranges_fill_gaps_only_where_nothing_else_is_decided) {
  // attn_q at q4_K in layers 0-3 and 8-9, q8_0 in 4-7; layers 10-12 have no attn_q.
  std::vector<RecipeTensor> t;
  for (int l = 0; l < 13; ++l) {
    if (l < 10)
      t.push_back({fmt::format("blk.{}.attn_q.weight", l), Role::kAttnProj,
                   l >= 4 && l <= 7 ? GgmlType::Q8_0 : GgmlType::Q4_K});
    t.push_back({fmt::format("blk.{}.ffn_up.weight", l), Role::kDenseFfn,
                 l == 9 || l == 12 ? GgmlType::Q5_K : GgmlType::Q4_K});
    // Experts only in layers 0 and 5: the layers between have none, so 0-5 says the same.
    if (l == 0 || l == 5)
      t.push_back(
          {fmt::format("blk.{}.ffn_gate_exps.weight", l), Role::kRoutedGate, GgmlType::Q4_K});
  }
  const auto rules = compact_type_rules(t);
  EXPECT_EQ(rules_text(rules),
            "blk\\.([0-3]|[89])\\.attn_q=q4_K\n"
            "blk\\.([0-8]|1[01])\\.ffn_up=q4_K\n"
            "blk\\.[0-5]\\.ffn_gate_exps=q4_K\n"
            "blk\\.[4-7]\\.attn_q=q8_0\n"
            "blk\\.(9|12)\\.ffn_up=q5_K\n");
  expect_read_back(t, rules);
}

TEST(recipe_rules, names_that_change_when_lowercased_or_hold_separators_are_escaped) {
  const std::vector<RecipeTensor> t = {
      {"blk.0.Attn_Q.weight", Role::kAttnProj, GgmlType::Q4_K},
      {"blk.0.attn_q.weight", Role::kAttnProj, GgmlType::Q8_0},
      {"weird name=#1.weight", Role::kOther, GgmlType::Q6_K},
      {"blk.007.ffn_up.weight", Role::kDenseFfn, GgmlType::Q6_K},
      {"blk.1.attn_q.weight", Role::kAttnProj, std::nullopt},
  };
  const auto rules = compact_type_rules(t);
  EXPECT_EQ(rules_text(rules),
            "blk\\.0\\.\\x41ttn_\\x51=q4_K\n"
            "blk\\.0\\.attn_q=q8_0\n"
            "(weird\\x20name\\x3d\\x231|blk\\.007\\.ffn_up)=q6_K\n");
  for (const auto& r : rules) {
    EXPECT_EQ(r.pattern.find_first_of(" \t\n=ABCDEFGHIJKLMNOPQRSTUVWXYZ"), std::string::npos);
  }
  expect_read_back(t, rules);
}

TEST(recipe_rules, an_empty_or_untyped_assignment_has_no_rules) {
  EXPECT_TRUE(compact_type_rules({}).empty());
  const std::vector<RecipeTensor> t = {{"blk.0.attn_norm.weight", Role::kNorm, std::nullopt}};
  EXPECT_TRUE(compact_type_rules(t).empty());
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return std::string(e.what()) + (e.kind() == Error::Kind::kUsage ? " [usage]" : " [input]");
  }
  return "no error";
}

TEST(tensor_type_file, reads_what_llama_quantize_reads_plus_comment_lines) {
  const auto rules = parse_tensor_type_file(
      "# the ds4 recipe\n"
      "FFN_(GATE|UP)_EXPS=IQ2_XXS\tffn_down_exps=q2_K # down\n"
      "\n"
      "  ATTN_Q=q8_0  \r\n"
      "#another comment=q4_K\n"
      "token_embd=f16",
      "r.txt");
  ASSERT_EQ(rules.size(), 4u);
  EXPECT_EQ(rules[0].pattern, "ffn_(gate|up)_exps");
  EXPECT_EQ(rules[0].type, GgmlType::IQ2_XXS);
  EXPECT_EQ(rules[0].describe(), "--tensor-type-file r.txt:2 'FFN_(GATE|UP)_EXPS=IQ2_XXS'");
  EXPECT_EQ(rules[1].pattern, "ffn_down_exps");
  EXPECT_EQ(rules[2].pattern, "attn_q");
  EXPECT_EQ(rules[3].describe(), "--tensor-type-file r.txt:6 'token_embd=f16'");
  EXPECT_TRUE(std::regex_search("blk.3.ffn_gate_exps.weight", *rules[0].regex));
  EXPECT_TRUE(parse_tensor_type_file("", "e.txt").empty());
  EXPECT_TRUE(parse_tensor_type_file("# nothing\n  \n", "e.txt").empty());
}

TEST(tensor_type_file, refuses_malformed_tokens_naming_file_line_and_token) {
  const auto err = [](std::string_view text) {
    return error_of([&] { parse_tensor_type_file(text, "r.txt"); });
  };
  EXPECT_EQ(err("a=q4_K\n\nffn_down_exps"),
            "--tensor-type-file r.txt:3: token 'ffn_down_exps' is not PATTERN=TYPE [usage]");
  EXPECT_EQ(err("=q4_K"),
            "--tensor-type-file r.txt:1: token '=q4_K' has no pattern before '=' [usage]");
  EXPECT_EQ(err("x=q4_K\ny="),
            "--tensor-type-file r.txt:2: token 'y=' has no type after '=' [usage]");
  // Split at the first '=', as llama-quantize: the rest is not a type.
  EXPECT_EQ(err("attn=q8_0=x"),
            "--tensor-type-file r.txt:1: token 'attn=q8_0=x' has an unknown type 'q8_0=x' (ggml "
            "type names: q4_K, iq2_xxs, q8_0, f16, ...) [usage]");
  EXPECT_EQ(err("attn=Q4_K_M"),
            "--tensor-type-file r.txt:1: token 'attn=Q4_K_M' has an unknown type 'Q4_K_M' (ggml "
            "type names: q4_K, iq2_xxs, q8_0, f16, ...) [usage]");
  EXPECT_EQ(err("attn=keep"),
            "--tensor-type-file r.txt:1: token 'attn=keep' is not a ggml type (llama-quantize "
            "would refuse the file): give it on the command line as --tensor-type "
            "PATTERN=keep [usage]");
  EXPECT_EQ(err("a(b=q4_K"),
            "--tensor-type-file r.txt:1: token 'a(b=q4_K' has an invalid regex: unbalanced "
            "parenthesis or '*', '+', '?' with nothing to repeat [usage]");
  // Bytes from the file reach the terminal escaped.
  EXPECT_EQ(err("a\x1b[31m"),
            "--tensor-type-file r.txt:1: token 'a\\x1b[31m' is not PATTERN=TYPE [usage]");
  EXPECT_EQ(error_of([] { read_tensor_type_file("/nonexistent/r.txt"); }).substr(0, 19),
            "/nonexistent/r.txt:");
}

// Writes the F32 Mixtral-style model llama.cpp runs; returns its path.
std::string write_f32_llama(const TempDir& dir, int layers) {
  LlamaMoeSpec spec;
  spec.n_layers = layers;
  return write_plan(synth_llama_moe_plan(spec), dir.file("f32.gguf"), {}).paths.front();
}

// A recipe read from a file llama.cpp's own quantizer mixed (Q3_K_M: q3_K, q4_K, q5_K and q6_K
// by layer and role) and applied to the F32 source gives every re-encodable tensor the type
// llama.cpp gave it; llama-quantize's reading of the rules (first and last match) agrees.
TEST(recipe_e2e, a_recipe_from_a_llama_quantize_mix_reproduces_it_from_f32) {
  GGUF_REQUIRE_LLAMA();
  TempDir dir;
  const std::string f32 = write_f32_llama(dir, 8);
  std::string log;
  ASSERT_TRUE(LlamaRef::get().quantize(f32, dir.file("mix.gguf"), /*Q3_K_M*/ 12, false, false, log))
      << log;
  const Model mix = Model::open(dir.file("mix.gguf"));
  const Recipe recipe = extract_recipe(mix);
  std::set<uint32_t> types;
  for (const auto& t : recipe.tensors)
    if (t.type) types.insert(static_cast<uint32_t>(*t.type));
  EXPECT_GE(types.size(), 3u) << "not a mix";
  const std::string text = render_recipe_text(recipe);
  EXPECT_LE(recipe.rules.size(), 12u) << text;
  { std::ofstream(dir.file("recipe.txt")) << text; }
  // llama-quantize's reading.
  std::vector<std::string> names;
  for (const auto& t : recipe.tensors) names.push_back(t.name);
  const Reading reading = read_as_llama_quantize(text, names);
  for (size_t i = 0; i < names.size(); ++i) {
    const auto& t = recipe.tensors[i];
    const std::string want = t.type ? std::string(traits(*t.type).name) : "";
    EXPECT_EQ(reading.first[i], want) << names[i];
    EXPECT_EQ(reading.last[i], want) << names[i];
  }
  // Ours, from the file.
  const Model src = Model::open(f32);
  RequantOptions o;
  o.rules = read_tensor_type_file(dir.file("recipe.txt"));
  o.threads = 2;
  const RequantResult r = requant(src, o);
  write_plan(r.plan, dir.file("again.gguf"), {});
  const Model again = Model::open(dir.file("again.gguf"));
  size_t compared = 0;
  for (const TensorRef& t : mix.tensors()) {
    if (!is_quantizable(*t.info, mix.architecture())) continue;
    const TensorRef* u = again.find(t.name());
    ASSERT_NE(u, nullptr) << t.name();
    EXPECT_EQ(type_name(u->info->type_id), type_name(t.info->type_id)) << t.name();
    ++compared;
  }
  EXPECT_GT(compared, 8u * 7);
}

}  // namespace
}  // namespace gguf
