// gguf-requant's per-tensor types: --tensor-type PATTERN=TYPE (llama-quantize's), --role-type
// ROLES=TYPE, --output-tensor-type and --token-embedding-type; the first rule that matches a
// tensor decides its type, --type covers the rest.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "cli_run.h"
#include "gguf/base/error.h"
#include "gguf/format/names.h"
#include "gguf/ops/requant.h"
#include "gguf/ops/requant_job.h"
#include "gguf/ops/synth.h"
#include "gguf/write/writer.h"
#include "requant_fixture.h"

namespace gguf {
namespace {

using testing::run_cli;
using testing::small_moe_plan;
using testing::TempDir;
using testing::write_f16_model;
using testing::write_odd_row_model;

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return std::string(e.what());
  }
  return "no error";
}

TEST(requant_rules, the_first_matching_rule_decides_and_type_covers_the_rest) {
  TempDir dir;
  const Model in = Model::open(write_f16_model(dir));
  RequantOptions o;
  o.type = GgmlType::Q8_0;
  o.rules = {parse_tensor_type_rule("blk\\.1\\.ffn_(gate|up)_exps=q4_K"),
             parse_tensor_type_rule("_exps=Q4_0"), parse_role_type_rule("attn-proj=keep"),
             parse_role_type_rule("routed-down,shared=q5_0")};
  const RequantResult r = requant(in, o);
  ASSERT_EQ(r.rows.size(), in.tensors().size());
  size_t kept = 0, shared = 0, first = 0;
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const RequantRow& row = r.rows[i];
    const TensorInfo& info = *in.tensors()[i].info;
    SCOPED_TRACE(row.name);
    const Role role = classify_tensor(info.name, "deepseek2", 0).role;
    // The expectation, rule by rule as documented.
    const std::string before = type_name(info.type_id);
    std::string type = "q8_0", rule;
    if (!is_quantizable(info, in.architecture())) {
      type = before;
    } else if (std::regex_search(row.name, std::regex("blk\\.1\\.ffn_(gate|up)_exps"))) {
      type = "q4_K", rule = "--tensor-type 'blk\\.1\\.ffn_(gate|up)_exps=q4_K'", ++first;
    } else if (row.name.find("_exps") != std::string::npos) {
      type = "q4_0", rule = "--tensor-type '_exps=Q4_0'";
    } else if (role == Role::kAttnProj) {
      type = "f16", rule = "--role-type 'attn-proj=keep'", ++kept;
    } else if (role == Role::kShared) {
      type = "q5_0", rule = "--role-type 'routed-down,shared=q5_0'", ++shared;
    }
    EXPECT_EQ(type_name(row.type_after), type);
    EXPECT_EQ(row.rule, rule);
    EXPECT_EQ(row.action, type == before ? PlanAction::kCopy : PlanAction::kEncode);
    EXPECT_EQ(r.plan.tensors[i].type_id, row.type_after);
  }
  EXPECT_EQ(first, 2u);
  EXPECT_GT(kept, 0u);
  EXPECT_GT(shared, 0u);
}

// Without --type, a tensor no rule matches is copied; llama-quantize's two overrides (by name)
// come before every --tensor-type.
TEST(requant_rules, output_and_embedding_types_come_before_every_rule) {
  TempDir dir;
  const Model in = Model::open(write_f16_model(dir));
  RequantOptions o;
  o.rules = {parse_tensor_type_rule("weight$=iq4_nl"),
             named_type_rule(TypeRule::Kind::kOutput, "--output-tensor-type", "q6_K"),
             named_type_rule(TypeRule::Kind::kTokenEmbedding, "--token-embedding-type", "Q5_0")};
  const RequantResult r = requant(in, o);
  std::map<std::string, std::string> after, rule;
  for (const auto& row : r.rows) {
    after[row.name] = type_name(row.type_after);
    rule[row.name] = row.rule;
  }
  EXPECT_EQ(after["output.weight"], "q6_K");
  EXPECT_EQ(rule["output.weight"], "--output-tensor-type 'q6_K'");
  EXPECT_EQ(after["token_embd.weight"], "q5_0");
  EXPECT_EQ(rule["token_embd.weight"], "--token-embedding-type 'Q5_0'");
  EXPECT_EQ(after["blk.2.ffn_up_exps.weight"], "iq4_nl");
  EXPECT_EQ(rule["blk.2.ffn_up_exps.weight"], "--tensor-type 'weight$=iq4_nl'");
  EXPECT_EQ(after["blk.2.attn_norm.weight"], "f32");  // never re-encoded
  // No --type: what no rule matches is copied.
  o.rules = {parse_tensor_type_rule("^blk\\.2\\.=q4_0")};
  for (const auto& row : requant(in, o).rows) {
    if (row.name.starts_with("blk.2.") && row.name.ends_with("_exps.weight")) {
      EXPECT_EQ(type_name(row.type_after), "q4_0");
    } else if (row.name == "blk.1.ffn_up_exps.weight") {
      EXPECT_EQ(row.action, PlanAction::kCopy);
    }
  }
}

// A model without output.weight computes its output with the token embedding (tied
// embeddings): --output-tensor-type applies to it as llama-quantize does, after
// --token-embedding-type and --tensor-type. A named override that decides nothing is a note.
TEST(requant_rules, output_type_on_tied_embeddings) {
  TempDir dir;
  Plan plan = small_moe_plan(GgmlType::F16, 2, 2);
  std::erase_if(plan.tensors, [](const PlanTensor& t) { return t.name == "output.weight"; });
  const Model in = Model::open(write_plan(plan, dir.file("tied.gguf"), {}).paths.front());
  const auto output = named_type_rule(TypeRule::Kind::kOutput, "--output-tensor-type", "q6_K");
  const auto embd =
      named_type_rule(TypeRule::Kind::kTokenEmbedding, "--token-embedding-type", "q5_0");
  const auto type_of = [](const RequantResult& r, const std::string& name) {
    for (const auto& row : r.rows)
      if (row.name == name) return type_name(row.type_after);
    return std::string("none");
  };
  RequantOptions o;
  o.type = GgmlType::Q8_0;
  o.rules = {output};
  auto r = requant(in, o);
  EXPECT_EQ(type_of(r, "token_embd.weight"), "q6_K");
  EXPECT_TRUE(r.notes.empty());
  o.rules = {output, embd};
  r = requant(in, o);
  EXPECT_EQ(type_of(r, "token_embd.weight"), "q5_0");
  EXPECT_EQ(r.notes, std::vector<std::string>{
                         "--output-tensor-type 'q6_K' decides no tensor's type: every tensor it "
                         "matches that can be re-encoded is given its type by an earlier rule, "
                         "--token-embedding-type 'q5_0' (the first rule that matches decides)"});
  o.rules = {output, parse_tensor_type_rule("token_embd=q4_0")};
  EXPECT_EQ(type_of(requant(in, o), "token_embd.weight"), "q4_0");
  // --leave-output-tensor is about output.weight alone, as in llama-quantize.
  o.rules = {leave_output_tensor_rule()};
  r = requant(in, o);
  EXPECT_EQ(type_of(r, "token_embd.weight"), "q8_0");
  EXPECT_EQ(r.notes, std::vector<std::string>{"--leave-output-tensor decides no tensor's type: no "
                                              "tensor is named output.weight"});
  // Not tied: the output rule is output.weight only, and a missing one is a note, not an error.
  const Model untied = Model::open(write_f16_model(dir));
  o.rules = {output};
  o.selector = parse_selector({}, {"routed"}, {});
  r = requant(untied, o);
  ASSERT_FALSE(r.notes.empty());
  EXPECT_EQ(r.notes.back(),
            "--output-tensor-type 'q6_K' decides no tensor's type: no selected tensor is named "
            "output.weight");
}

// per_layer_token_embd.weight (Gemma 3n's second embedding table) follows the token
// embedding's rules, but a --tensor-type that names it takes it; with tied embeddings the
// output type reaches it after the --tensor-type rules.
TEST(requant_rules, per_layer_token_embedding_follows_llama_quantize) {
  TempDir dir;
  const auto model = [&](bool tied, const std::string& name) {
    Plan plan = small_moe_plan(GgmlType::F16, 2, 2);
    if (tied)
      std::erase_if(plan.tensors, [](const PlanTensor& t) { return t.name == "output.weight"; });
    auto data = std::make_shared<std::vector<uint8_t>>(256 * 64 * 2, 0);
    plan.tensors.push_back(
        {"per_layer_token_embd.weight", 1, {256, 64}, data->size(), MemoryBytes{data}});
    return Model::open(write_plan(plan, dir.file(name), {}).paths.front());
  };
  const auto types = [](const Model& m, std::vector<TypeRule> rules) {
    RequantOptions o;
    o.type = GgmlType::Q4_0;
    o.rules = std::move(rules);
    std::map<std::string, std::string> out;
    for (const auto& row : requant(m, o).rows)
      out[row.name] = fmt::format("{} {}", type_name(row.type_after), row.rule);
    return std::make_pair(out["token_embd.weight"], out["per_layer_token_embd.weight"]);
  };
  const auto embd =
      named_type_rule(TypeRule::Kind::kTokenEmbedding, "--token-embedding-type", "q5_0");
  const auto output = named_type_rule(TypeRule::Kind::kOutput, "--output-tensor-type", "q6_K");
  const auto named = parse_tensor_type_rule("^per_layer=q8_0");
  const Model plain = model(false, "plain.gguf"), tied = model(true, "tied.gguf");
  using P = std::pair<std::string, std::string>;
  EXPECT_EQ(types(plain, {embd}),
            (P{"q5_0 --token-embedding-type 'q5_0'", "q5_0 --token-embedding-type 'q5_0'"}));
  EXPECT_EQ(types(plain, {embd, named}),
            (P{"q5_0 --token-embedding-type 'q5_0'", "q8_0 --tensor-type '^per_layer=q8_0'"}));
  EXPECT_EQ(types(tied, {output}),
            (P{"q6_K --output-tensor-type 'q6_K'", "q6_K --output-tensor-type 'q6_K'"}));
  EXPECT_EQ(types(tied, {output, named}),
            (P{"q6_K --output-tensor-type 'q6_K'", "q8_0 --tensor-type '^per_layer=q8_0'"}));
  EXPECT_EQ(types(plain, {output}), (P{"q4_0 ", "q4_0 "}));  // not tied: output.weight alone
  // Where it finds nothing, the note says what it looked for.
  RequantOptions o;
  o.type = GgmlType::Q4_0;
  o.rules = {output};
  o.selector = parse_selector({}, {"routed"}, {});
  const auto notes = requant(tied, o).notes;
  ASSERT_FALSE(notes.empty());
  EXPECT_EQ(notes.back(),
            "--output-tensor-type 'q6_K' decides no tensor's type: no selected tensor is named "
            "output.weight, nor (the model's output being its token embedding) token_embd.weight "
            "or per_layer_token_embd.weight");
  // A pattern that takes the per-layer table is named when the embedding rule is left without.
  o.rules = {embd, named};
  o.selector = parse_selector({}, {}, {"per_layer_token_embd\\.weight"});
  EXPECT_EQ(requant(plain, o).notes.back(),
            "--token-embedding-type 'q5_0' decides no tensor's type: every tensor it matches that "
            "can be re-encoded is given its type by an earlier rule, --tensor-type "
            "'^per_layer=q8_0' (the first rule that matches decides)");
}

// The options' order on the command line does not change the order rules are tried in.
TEST(requant_rules, cli_tries_tensor_type_before_role_type_whatever_the_order) {
  TempDir dir;
  const std::string in = write_f16_model(dir);
  const auto r = run_cli("gguf-requant", {in, "--dry-run", "--role-type", "routed=q4_0",
                                          "--tensor-type", "exps=q5_0"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "gguf-requant: error: " + in +
                       ": --role-type 'routed=q4_0' decides no tensor's type: every tensor it "
                       "matches that can be re-encoded is given its type by an earlier rule, "
                       "--tensor-type 'exps=q5_0' (the first rule that matches decides)\n");
}

// The recipe in one run writes the same file, byte for byte, as the three runs it replaces.
TEST(requant_rules, one_pass_writes_what_the_steps_write) {
  TempDir dir;
  const std::string in = write_f16_model(dir);
  const auto step = [&](const std::string& from, const std::string& to, GgmlType type,
                        std::vector<std::string> roles) {
    const Model m = Model::open(from);
    write_plan(requant(m, {type, parse_selector({}, roles, {}), nullptr, 2}).plan, to, {});
  };
  step(in, dir.file("a.gguf"), GgmlType::IQ2_XXS, {"routed-gate", "routed-up"});
  step(dir.file("a.gguf"), dir.file("b.gguf"), GgmlType::Q2_K, {"routed-down"});
  step(dir.file("b.gguf"), dir.file("steps.gguf"), GgmlType::Q8_0,
       {"attn-proj", "shared", "output", "dense-ffn"});
  const auto cli =
      run_cli("gguf-requant", {in, "-o", dir.file("one.gguf"), "--tensor-type",
                               "ffn_(gate|up)_exps=iq2_xxs", "--tensor-type", "ffn_down_exps=q2_K",
                               "--role-type", "attn-proj,shared,output,dense-ffn=q8_0", "-j", "2"});
  ASSERT_EQ(cli.code, 0) << cli.err;
  EXPECT_NE(cli.err.find("iq2_xxs needs an importance matrix"), std::string::npos) << cli.err;
  const std::string one = read_file(dir.file("one.gguf")),
                    steps = read_file(dir.file("steps.gguf"));
  EXPECT_GT(one.size(), 0u);
  EXPECT_TRUE(one == steps) << "the one-pass file differs from the three runs' file";
}

TEST(requant_rules, a_rule_that_decides_no_tensor_is_an_error) {
  TempDir dir;
  const std::string path = write_f16_model(dir);
  const Model in = Model::open(path);
  const auto message = [&](std::vector<TypeRule> rules, Selector sel = {}) {
    return error_of([&] {
      RequantOptions o;
      o.selector = std::move(sel);
      o.rules = std::move(rules);
      requant(in, o);
    });
  };
  EXPECT_EQ(message({parse_tensor_type_rule("ffn_dwn_exps=q2_K")}),
            path +
                ": --tensor-type 'ffn_dwn_exps=q2_K' decides no tensor's type: no tensor has "
                "a name containing a match for 'ffn_dwn_exps'");
  EXPECT_EQ(message({parse_tensor_type_rule("^blk\\.9\\.=q4_0")}),
            path +
                ": --tensor-type '^blk\\.9\\.=q4_0' decides no tensor's type: no tensor has a "
                "name containing a match for '^blk\\.9\\.'");
  EXPECT_EQ(message({parse_tensor_type_rule("exps=q4_0")}, parse_selector({"0"}, {}, {})),
            path +
                ": --tensor-type 'exps=q4_0' decides no tensor's type: no selected tensor has "
                "a name containing a match for 'exps'");
  EXPECT_EQ(message({parse_tensor_type_rule("_norm=q8_0")}),
            path +
                ": --tensor-type '_norm=q8_0' decides no tensor's type: it matches only tensors "
                "that are never re-encoded, such as 'blk.0.attn_norm.weight' (1-D tensors, "
                "biases, norms, the router, integer tensors and the small weights "
                "llama-quantize keeps)");
  EXPECT_EQ(
      message({parse_tensor_type_rule("exps=q4_K"), parse_role_type_rule("routed-down=q2_K")}),
      path +
          ": --role-type 'routed-down=q2_K' decides no tensor's type: every tensor it "
          "matches that can be re-encoded is given its type by an earlier rule, "
          "--tensor-type 'exps=q4_K' (the first rule that matches decides)");
  EXPECT_EQ(
      message({parse_role_type_rule("dense-ffn,output=q8_0")}, parse_selector({"1-2"}, {}, {})),
      path +
          ": --role-type 'dense-ffn,output=q8_0' decides no tensor's type: no selected "
          "tensor has role dense-ffn or output");
  // Every rule deciding only "keep" leaves nothing to re-encode.
  EXPECT_EQ(message({parse_tensor_type_rule(".=keep")}),
            path +
                ": nothing to re-encode: the 35 selected tensors that can be re-encoded are "
                "already at the types asked for, or kept");
  // Only a named override that decides nothing (a note), and no --type.
  EXPECT_EQ(message({named_type_rule(TypeRule::Kind::kOutput, "--output-tensor-type", "q8_0")},
                    parse_selector({}, {"routed"}, {})),
            path +
                ": nothing to re-encode: the 6 selected tensors that can be re-encoded are "
                "given no type: no rule decides one, and there is no --type "
                "(--output-tensor-type 'q8_0' decides no tensor's type: no selected tensor "
                "is named output.weight)");
  // Nothing is written by the binary either.
  const auto cli = run_cli("gguf-requant", {path, "-o", dir.file("o.gguf"), "--type", "q8_0",
                                            "--tensor-type", "ffn_dwn=q2_K"});
  EXPECT_EQ(cli.code, 1);
  EXPECT_EQ(cli.err, "gguf-requant: error: " + path +
                         ": --tensor-type 'ffn_dwn=q2_K' decides no tensor's type: no tensor has a "
                         "name containing a match for 'ffn_dwn'\n");
  EXPECT_FALSE(std::filesystem::exists(dir.file("o.gguf")));
}

// parse_type_rules: a command line's per-tensor types in the order RequantOptions::rules tries
// them (each kind as given; a --tensor-type-file's rules where the file option stands).
TEST(requant_rules, parse_type_rules_keeps_each_kind_in_command_line_order) {
  TempDir dir;
  const std::string file = dir.file("rules.txt");
  std::ofstream(file) << "ffn_gate=q4_0 # a comment\nffn_up=q5_0\n";
  RuleArgs a;
  a.leave_output = true;
  a.embedding_type = "q8_0";
  a.tensor_types = {"attn=q5_1", "exps=q2_K"};
  a.type_files = {file};
  a.tensor_type_order = {"tensor-type", "tensor-type-file", "tensor-type"};
  a.role_types = {"routed-down=q4_K"};
  std::vector<std::string> got;
  for (const TypeRule& r : parse_type_rules(a)) got.push_back(r.option + " " + r.value);
  const std::string in_file = "--tensor-type-file " + file;
  EXPECT_EQ(got, (std::vector<std::string>{"--leave-output-tensor ", "--token-embedding-type q8_0",
                                           "--tensor-type attn=q5_1", in_file + ":1 ffn_gate=q4_0",
                                           in_file + ":2 ffn_up=q5_0", "--tensor-type exps=q2_K",
                                           "--role-type routed-down=q4_K"}));
  a.output_type = "q8_0";
  try {
    parse_type_rules(a);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::kUsage);
    EXPECT_STREQ(e.what(), "--leave-output-tensor and --output-tensor-type exclude each other");
  }
}

TEST(requant_rules, bad_rules_are_usage_errors) {
  const auto usage = [](const std::function<void()>& fn) {
    try {
      fn();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), Error::Kind::kUsage) << e.what();
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const auto tensor = [&](std::string v) { return usage([&] { parse_tensor_type_rule(v); }); };
  for (const char* v : {"ffn_down", "=q4_K", "ffn_down="})
    EXPECT_EQ(tensor(v), fmt::format("invalid --tensor-type value '{}': expected PATTERN=TYPE, "
                                     "e.g. ffn_down_exps=q2_K",
                                     v));
  EXPECT_EQ(tensor("a(=q4_K"),
            "invalid --tensor-type regex 'a(': unbalanced parenthesis or '*', "
            "'+', '?' with nothing to repeat");
  EXPECT_EQ(tensor("exps=Q4_K_M"),
            "--tensor-type: 'Q4_K_M' is a llama-quantize preset (a mix of types), not a ggml type: "
            "it is built around q4_K; make a mix with --type (for the rest) and per-tensor types "
            "(--tensor-type PATTERN=TYPE, --role-type ROLE=TYPE)");
  EXPECT_TRUE(tensor("exps=q9_9")
                  .starts_with("--tensor-type: unknown type 'q9_9' (types it can "
                               "write: f32, f16,"));
  EXPECT_EQ(usage([] { parse_role_type_rule("routd=q4_K"); }),
            "invalid --role-type value 'routd=q4_K': unknown role 'routd' (valid roles: routed, "
            "routed-gate, routed-up, routed-down, "
            "shared, router, attn-proj, attn, dense-ffn, embedding, output, norm, other)");
  EXPECT_EQ(
      usage([] { parse_role_type_rule("routed,,shared=q4_0"); }),
      "invalid --role-type value 'routed,,shared=q4_0': unknown role '' (valid roles: routed, "
      "routed-gate, routed-up, routed-down, shared, router, attn-proj, attn, dense-ffn, "
      "embedding, output, norm, other)");
  EXPECT_EQ(usage([] { named_type_rule(TypeRule::Kind::kOutput, "--output-tensor-type", ""); }),
            "--output-tensor-type: unknown type '' (types it can write: f32, f16, q4_0, q4_1, "
            "q5_0, q5_1, q8_0, q8_1, q2_K, q3_K, q4_K, q5_K, q6_K, q8_K, iq2_xxs, iq2_xs, "
            "iq3_xxs, iq1_s, iq4_nl, iq3_s, iq2_s, iq4_xs, iq1_m, bf16, tq1_0, tq2_0, mxfp4, "
            "nvfp4, q1_0, q2_0)");
  EXPECT_EQ(usage([] { parse_role_type_rule("routed"); }),
            "invalid --role-type value 'routed': expected ROLE[,ROLE...]=TYPE, e.g. "
            "routed-down=q2_K");
  // The split is at the last '=': a pattern may hold one (a lookahead), a type never does.
  const TypeRule look = parse_tensor_type_rule("ffn_(?=down)=KEEP");
  EXPECT_EQ(look.pattern, "ffn_(?=down)");
  EXPECT_FALSE(look.type.has_value());
  const TypeRule roles = parse_role_type_rule("routed, shared=Q8_0");
  EXPECT_EQ(roles.roles, (std::vector<Role>{Role::kRoutedGate, Role::kRoutedUp, Role::kRoutedDown,
                                            Role::kShared}));
  EXPECT_EQ(roles.type, GgmlType::Q8_0);
  // A type without an encoder is refused with the rule, before any file is opened.
  EXPECT_EQ(tensor("attn=i32"), "--tensor-type 'attn=i32': no encoder for i32 yet");
  EXPECT_EQ(usage([] { named_type_rule(TypeRule::Kind::kOutput, "--output-tensor-type", "f64"); }),
            "--output-tensor-type 'f64': no encoder for f64 yet");
  const auto unknown = run_cli("gguf-requant", {"/nonexistent.gguf", "--dry-run", "--type", "bogus",
                                                "--tensor-type", "exps=q4_0"});
  EXPECT_EQ(unknown.code, 2);
  EXPECT_TRUE(
      unknown.err.starts_with("gguf-requant: error: --type: unknown type 'bogus' (types "
                              "it can write: f32, f16, q4_0,"))
      << unknown.err;
  const auto cli = run_cli("gguf-requant", {"/nonexistent.gguf", "--dry-run", "--type", "i8"});
  EXPECT_EQ(cli.code, 2);
  EXPECT_EQ(cli.err,
            "gguf-requant: error: --type i8: no encoder for this type yet\n"
            "Try 'gguf-requant --help' for more information.\n");
}

// A rule's type whose block does not fit a row: the error names the tensor and the rule.
TEST(requant_rules, a_block_size_that_does_not_fit_names_the_rule) {
  TempDir dir;
  const Model in = Model::open(write_odd_row_model(dir));
  RequantOptions o;
  o.type = GgmlType::Q8_0;
  o.rules = {parse_tensor_type_rule("attn_q=q4_K")};
  EXPECT_EQ(error_of([&] { requant(in, o); }),
            dir.file("odd.gguf") +
                ": tensor 'blk.0.attn_q.weight': at byte 100: row length 96 is not a multiple of "
                "the q4_K block size 256 (the type --tensor-type 'attn_q=q4_K' gives it)");
}

// --exact applies to each tensor's own target.
TEST(requant_rules, exact_moves_each_tensor_to_its_rules_type) {
  TempDir dir;
  const std::string in =
      write_plan(small_moe_plan(GgmlType::Q4_0, 2, 2), dir.file("q4_0.gguf"), {}).paths.front();
  const auto cli =
      run_cli("gguf-requant", {in, "-o", dir.file("o.gguf"), "--exact", "--tensor-type",
                               "exps=q4_1", "--role-type", "attn-proj=f32", "--json"});
  ASSERT_EQ(cli.code, 0) << cli.err;
  const auto j = nlohmann::json::parse(cli.out);
  size_t q41 = 0, f32 = 0;
  for (const auto& t : j["tensors"]) {
    if (t["type_after"] == "q4_1") {
      ++q41;
      EXPECT_EQ(t["rule"], "--tensor-type 'exps=q4_1'");
    }
    if (t["type_after"] == "f32" && t["type_before"] == "q4_0") ++f32;
    EXPECT_FALSE(t["lossy"].get<bool>()) << t["name"];
  }
  EXPECT_EQ(q41, 3u);
  // A pair without an exact path names the rule that asked for it.
  const auto bad = run_cli(
      "gguf-requant", {in, "--dry-run", "--exact", "--tensor-type", "blk\\.1\\.ffn_up_exps=q4_K"});
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find(" (the type --tensor-type 'blk\\.1\\.ffn_up_exps=q4_K' gives it) "
                         "(--layers, --role and --match choose the tensors to move; the others "
                         "are copied)\n"),
            std::string::npos)
      << bad.err;
  EXPECT_GT(f32, 0u);
  EXPECT_EQ(j["exact"]["tensors"], q41 + f32);
}

TEST(requant_rules, cli_json_and_the_import_refusal) {
  TempDir dir;
  const std::string in = write_f16_model(dir);
  auto res = run_cli("gguf-requant",
                     {in, "--dry-run", "--json", "--type", "q8_0", "--output-tensor-type", "Q6_K"});
  ASSERT_EQ(res.code, 0) << res.err;
  const auto j = nlohmann::json::parse(res.out);
  for (const auto& t : j["tensors"]) {
    if (t["name"] == "output.weight") {
      EXPECT_EQ(t["type_after"], "q6_K");
      EXPECT_EQ(t["rule"], "--output-tensor-type 'Q6_K'");
    } else {
      EXPECT_TRUE(t["rule"].is_null()) << t["name"];
    }
  }
  res = run_cli("gguf-requant", {in, "--dry-run", "--type", "q8_0", "--output-tensor-type", ""});
  EXPECT_EQ(res.code, 2);
  EXPECT_EQ(res.err,
            "gguf-requant: error: option '--output-tensor-type' was given an empty value\n"
            "Try 'gguf-requant --help' for more information.\n");
  // The text report names each re-encoded tensor's rule (--type for the rest).
  res = run_cli("gguf-requant", {in, "--dry-run", "--type", "q8_0", "--tensor-type",
                                 "^blk\\.1\\.ffn_up_exps=q4_0"});
  ASSERT_EQ(res.code, 0) << res.err;
  EXPECT_TRUE(std::regex_search(res.out, std::regex("\nblk\\.1\\.ffn_up_exps\\.weight +f16 -> "
                                                    "q4_0 +--tensor-type '\\^blk\\\\\\.1")))
      << res.out;
  EXPECT_TRUE(std::regex_search(res.out, std::regex("\noutput\\.weight +f16 -> q8_0 +--type ")))
      << res.out;
  // llama-quantize's --leave-output-tensor: the output stays as it is.
  res = run_cli("gguf-requant",
                {in, "--dry-run", "--json", "--type", "q8_0", "--leave-output-tensor"});
  ASSERT_EQ(res.code, 0) << res.err;
  size_t outputs = 0;
  const auto report = nlohmann::json::parse(res.out);  // outlives the loop
  for (const auto& t : report["tensors"]) {
    if (t["name"] != "output.weight") continue;
    ++outputs;
    EXPECT_EQ(t["type_after"], "f16");
    EXPECT_EQ(t["action"], "copy");
    EXPECT_EQ(t["rule"], "--leave-output-tensor");
  }
  EXPECT_EQ(outputs, 1u);
  res = run_cli("gguf-requant", {in, "--dry-run", "--type", "q8_0", "--leave-output-tensor",
                                 "--output-tensor-type", "q6_K"});
  EXPECT_EQ(res.code, 2);
  EXPECT_EQ(res.err,
            "gguf-requant: error: --leave-output-tensor and --output-tensor-type exclude each "
            "other\nTry 'gguf-requant --help' for more information.\n");
  // A packed-affine import takes its types from the import's bits.
  std::ofstream(dir.file("x.safetensors")) << "not really";
  res = run_cli("gguf-requant",
                {dir.file("x.safetensors"), "-o", dir.file("o.gguf"), "--tensor-type", "a=q4_1"});
  EXPECT_EQ(res.code, 2);
  EXPECT_EQ(res.err,
            "gguf-requant: error: --tensor-type does not apply to a packed-affine import (its "
            "types come from the import's bits: --type q4_1, q5_1 or f32)\n"
            "Try 'gguf-requant --help' for more information.\n");
}

// The notes of a run with several types name the types they are about.
TEST(requant_rules, notes_name_the_types_they_are_about) {
  TempDir dir;
  const Model in = Model::open(write_f16_model(dir));
  RequantOptions o;
  o.type = GgmlType::Q4_0;
  o.rules = {parse_tensor_type_rule("ffn_gate_exps=iq2_xxs"),
             parse_tensor_type_rule("ffn_up_exps=iq1_s"), parse_role_type_rule("output=q8_K")};
  const RequantResult r = requant(in, o);
  EXPECT_EQ(r.notes,
            (std::vector<std::string>{
                "iq2_xxs and iq1_s need an importance matrix and none was given for some tensors: "
                "using each matrix's column energy (sum of squared weights) instead",
                "q8_K is a type ggml uses only for activations: llama.cpp loads this file but "
                "crashes computing with its q8_K tensors"}));
}

// --keep-split writes the input's shards: the same tensors in each, a shard of metadata only
// (llama-gguf-split --no-tensor-first-split) included.
TEST(requant_rules, keep_split_writes_the_inputs_shards) {
  TempDir dir;
  const Plan plan = small_moe_plan(GgmlType::F16, 2, 2);
  const uint64_t n = plan.tensors.size();
  // Shards of metadata only first, in the middle and last.
  const std::vector<uint64_t> counts = {0, 5, 0, n - 5, 0};
  WriteOptions wo;
  wo.split_tensor_counts = counts;
  const auto in = write_plan(plan, dir.file("in.gguf"), wo);
  ASSERT_EQ(in.paths.size(), 5u);
  const Model src = Model::open(in.paths.front());
  EXPECT_EQ(shard_tensor_counts(src), counts);
  for (const auto& shard : src.shards())
    EXPECT_EQ(shard->metadata().get_uint("split.tensors.count"), n);
  for (const std::string tool : {"gguf-requant", "gguf-splice"}) {
    SCOPED_TRACE(tool);
    const std::string out = dir.file(tool == "gguf-requant" ? "r.gguf" : "s.gguf");
    std::vector<std::string> args =
        tool == "gguf-requant"
            ? std::vector<std::string>{in.paths.front(), "-o", out, "--type", "q8_0"}
            : std::vector<std::string>{in.paths.front(),
                                       "--donor",
                                       in.paths.front(),
                                       "--layers",
                                       "1",
                                       "--force-arch",
                                       "-o",
                                       out};
    args.insert(args.end(), {"--keep-split", "--json"});
    auto dry = args;
    dry.push_back("--dry-run");
    const auto planned = run_cli(tool, dry);
    ASSERT_EQ(planned.code, 0) << planned.err;
    const auto r = run_cli(tool, args);
    ASSERT_EQ(r.code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    ASSERT_EQ(j["outputs"].size(), 5u);
    uint64_t total = 0;
    for (const auto& p : j["outputs"]) total += std::filesystem::file_size(p.get<std::string>());
    EXPECT_EQ(nlohmann::json::parse(planned.out)["bytes_after"], total);
    const Model written = Model::open(j["outputs"][0].get<std::string>());
    EXPECT_EQ(shard_tensor_counts(written), counts);
    ASSERT_EQ(written.tensors().size(), src.tensors().size());
    for (size_t i = 0; i < written.tensors().size(); ++i)
      EXPECT_EQ(written.tensors()[i].name(), src.tensors()[i].name());
  }
  // A single file stays a single file; the limits exclude it.
  auto r = run_cli("gguf-requant", {write_f16_model(dir), "-o", dir.file("one.gguf"), "--type",
                                    "q8_0", "--keep-split", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["outputs"], nlohmann::json::array({dir.file("one.gguf")}));
  r = run_cli("gguf-requant", {in.paths.front(), "--dry-run", "--type", "q4_0", "--keep-split",
                               "--split-max-tensors", "4"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gguf-requant: error: --keep-split excludes --split-max-size and --split-max-tensors\n"
            "Try 'gguf-requant --help' for more information.\n");
  // The writer refuses counts that do not cover the plan, or that come with a limit.
  wo.split_tensor_counts = {1, n};
  EXPECT_EQ(error_of([&] { check_plan(plan, dir.file("x.gguf"), wo); }),
            fmt::format("{}: write_plan: split_tensor_counts cover {} tensors, the plan has {}",
                        dir.file("x.gguf"), n + 1, n));
  wo.split_tensor_counts = counts;
  wo.split_max_tensors = 3;
  EXPECT_EQ(error_of([&] { check_plan(plan, dir.file("x.gguf"), wo); }),
            dir.file("x.gguf") +
                ": write_plan: split_tensor_counts excludes split_max_size and split_max_tensors");
}

}  // namespace
}  // namespace gguf
