// Hugging Face checkpoint import: the name map, the shard index and config.json, the row moves
// (q/k permutation, expert stacking, DeepSeek's kv_b), the --base rules, and the refusals.
#include "gguf/ops/hf_import.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "gguf/base/error.h"
#include "gguf/codecs/codecs.h"
#include "gguf/format/model.h"
#include "gguf/inputs/hf_checkpoint.h"
#include "gguf/inputs/hf_names.h"
#include "gguf/ops/synth.h"
#include "gguf/write/writer.h"
#include "hf_fixture.h"

namespace gguf {
namespace {

using testing::run_cli;
using testing::TempDir;

std::string gguf_of(std::string_view arch, std::string_view hf) {
  const auto m = map_hf_name(arch, hf);
  return m ? m->gguf + ":" + std::string(transform_name(m->transform)) : "-";
}

TEST(hf_names, maps_each_family) {
  EXPECT_EQ(gguf_of("llama", "model.layers.7.self_attn.q_proj.weight"),
            "blk.7.attn_q.weight:permute-q");
  EXPECT_EQ(gguf_of("llama", "model.layers.7.self_attn.k_proj.bias"),
            "blk.7.attn_k.bias:permute-k");
  EXPECT_EQ(gguf_of("qwen2", "model.layers.7.self_attn.q_proj.bias"), "blk.7.attn_q.bias:rename");
  EXPECT_EQ(gguf_of("qwen3", "model.layers.0.self_attn.k_norm.weight"),
            "blk.0.attn_k_norm.weight:rename");
  EXPECT_EQ(gguf_of("llama", "model.layers.3.block_sparse_moe.experts.12.w3.weight"),
            "blk.3.ffn_up_exps.weight:stack-experts");
  EXPECT_EQ(gguf_of("llama", "model.layers.3.block_sparse_moe.gate.weight"),
            "blk.3.ffn_gate_inp.weight:rename");
  EXPECT_EQ(gguf_of("qwen3moe", "model.layers.7.mlp.experts.12.gate_proj.weight"),
            "blk.7.ffn_gate_exps.weight:stack-experts");
  EXPECT_EQ(gguf_of("qwen2moe", "model.layers.1.mlp.shared_expert_gate.weight"),
            "blk.1.ffn_gate_inp_shexp.weight:rename");
  EXPECT_EQ(gguf_of("deepseek2", "model.layers.2.mlp.shared_experts.down_proj.weight"),
            "blk.2.ffn_down_shexp.weight:rename");
  EXPECT_EQ(gguf_of("deepseek2", "model.layers.2.self_attn.kv_a_proj_with_mqa.weight"),
            "blk.2.attn_kv_a_mqa.weight:rename");
  EXPECT_EQ(gguf_of("deepseek2", "model.layers.2.self_attn.q_a_layernorm.weight"),
            "blk.2.attn_q_a_norm.weight:rename");
  EXPECT_EQ(gguf_of("deepseek2", "model.layers.2.self_attn.kv_b_proj.weight"),
            "blk.2.attn_kv_b.weight:kv_b");
  EXPECT_EQ(gguf_of("deepseek2", "model.layers.2.mlp.gate.e_score_correction_bias"),
            "blk.2.exp_probs_b.bias:rename");
  EXPECT_EQ(gguf_of("deepseek2", "model.layers.2.self_attn.q_proj.weight"),
            "blk.2.attn_q.weight:rename");
  EXPECT_EQ(gguf_of("llama", "lm_head.weight"), "output.weight:rename");
  // Not in a family's table, or not a tensor name at all.
  EXPECT_EQ(gguf_of("qwen3moe", "model.layers.0.mlp.shared_expert.up_proj.weight"), "-");
  EXPECT_EQ(gguf_of("qwen3", "model.layers.0.mlp.experts.0.up_proj.weight"), "-");
  EXPECT_EQ(gguf_of("llama", "model.layers.x.self_attn.q_proj.weight"), "-");
  EXPECT_EQ(gguf_of("llama", "model.layers.1234567890.self_attn.q_proj.weight"), "-");
  EXPECT_EQ(gguf_of("llama", "model.layers.1.self_attn.q_proj.scales"), "-");
  EXPECT_EQ(gguf_of("llama", "model.layers.1.self_attn.q_proj"), "-");
  EXPECT_EQ(gguf_of("gemma", "lm_head.weight"), "-");
  EXPECT_TRUE(hf_name_dropped("model.layers.0.self_attn.rotary_emb.inv_freq"));
  EXPECT_EQ(hf_architecture_of_class("MixtralForCausalLM"), "llama");
  EXPECT_EQ(hf_architecture_of_class("DeepseekV3ForCausalLM"), "deepseek2");
  EXPECT_EQ(hf_architecture_of_model_type("qwen3_moe"), "qwen3moe");
  EXPECT_FALSE(hf_architecture_of_class("GemmaForCausalLM"));
}

TEST(hf_moves, llama_permutation_interleaves_the_rotary_halves) {
  MappedTensor m;
  m.move = MappedTensor::Move::kPermute;
  m.rows = 16;
  m.heads = 2;
  std::vector<uint64_t> got;
  for (uint64_t r = 0; r < 16; ++r) got.push_back(m.source_row(r).second);
  // hd = 8: per head, new rows 0..7 take old rows 0,4,1,5,2,6,3,7 (the converter's reshape).
  EXPECT_EQ(got, (std::vector<uint64_t>{0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15}));
  // The fixture's inverse undoes it.
  const auto inv = testing::hf_rows_of_gguf(16, 2);
  for (uint64_t r = 0; r < 16; ++r) EXPECT_EQ(inv[got[r]], r);
}

TEST(hf_index, reads_the_weight_map) {
  const auto i = parse_safetensors_index(
      R"({"metadata": {"total_size": 10}, "weight_map": {"b": "m-2.safetensors",
          "a": "m-1.safetensors", "c": "m-2.safetensors"}})",
      "i.json");
  EXPECT_EQ(i.shards, (std::vector<std::string>{"m-1.safetensors", "m-2.safetensors"}));
  ASSERT_EQ(i.weight_map.size(), 3u);
  for (const auto& [name, shard] : i.weight_map) EXPECT_EQ(shard, name == "a" ? 0u : 1u);
}

TEST(hf_index, refuses_what_is_not_an_index) {
  const auto fails = [](std::string_view text) {
    try {
      parse_safetensors_index(text, "i.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(fails(R"({"metadata": {}})"),
            "i.json: no \"weight_map\" object (tensor name -> shard file): not a safetensors "
            "index");
  EXPECT_EQ(fails(R"({"weight_map": {}})"), "i.json: the weight_map lists no tensor");
  EXPECT_EQ(fails(R"({"weight_map": {"a": 3}})"),
            "i.json: tensor 'a': its shard must be a file name (a string), found 3");
  EXPECT_EQ(fails(R"({"weight_map": {"a": "../etc/passwd"}})"),
            "i.json: tensor 'a': shard '../etc/passwd' is not a file name beside the index");
  EXPECT_EQ(fails(R"({"weight_map": {"a": ".."}})"),
            "i.json: tensor 'a': shard '..' is not a file name beside the index");
  EXPECT_EQ(fails("[]"), "i.json: at byte 0: a safetensors index is a JSON object");
  EXPECT_NE(fails(R"({"weight_map": {"a": "x", "a": "y"}})"), "accepted");
  EXPECT_NE(fails("{"), "accepted");
}

TEST(hf_config, reads_architecture_and_numbers) {
  const auto c = parse_hf_config(
      R"({"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
          "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
          "num_hidden_layers": 48, "num_experts": 128, "q_lora_rank": null})",
      "config.json");
  EXPECT_EQ(c.hf_class, "Qwen3MoeForCausalLM");
  EXPECT_EQ(c.model_type, "qwen3_moe");
  EXPECT_EQ(c.n_head, 32u);
  EXPECT_EQ(c.n_head_kv, 4u);
  EXPECT_EQ(c.head_dim, 128u);
  EXPECT_EQ(c.n_experts, 128u);
  EXPECT_FALSE(c.kv_lora_rank);
  try {
    parse_hf_config(R"({"num_attention_heads": -1})", "config.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "config.json: key 'num_attention_heads': must be a positive integer, found -1");
  }
}

// A one-layer Mixtral-style base (f32) and its packed checkpoint in dir/hf.
struct Fixture {
  TempDir dir;
  std::string base, hf;
  std::map<std::string, testing::PackedRows> packed;
  explicit Fixture(int shards = 2) {
    LlamaMoeSpec spec;
    spec.n_layers = 1;
    spec.n_embd = 64;
    spec.n_ff = 64;
    spec.vocab = 260;
    base = dir.file("f32.gguf");
    write_plan(synth_llama_moe_plan(spec), base, {});
    hf = dir.file("hf");
    std::filesystem::create_directory(hf);
    packed =
        testing::write_both_layouts(Model::open(base), dir.file("named.safetensors"), hf, shards);
  }
  testing::CliResult import(std::vector<std::string> extra = {}) const {
    std::vector<std::string> args = {hf, "--base", base, "-o", dir.file("out.gguf")};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_cli("gguf-requant", args);
  }
};

std::string error_line(const std::string& message) {
  return "gguf-requant: error: " + message + "\n";
}

TEST(hf_import_cli, any_shard_the_index_or_the_folder_is_the_whole_checkpoint) {
  Fixture f;
  for (const std::string& in :
       {f.hf, f.hf + "/model.safetensors.index.json", f.hf + "/model-00002-of-00002.safetensors"}) {
    SCOPED_TRACE(in);
    const auto r = run_cli("gguf-requant",
                           {in, "--base", f.base, "-o", f.dir.file("o.gguf"), "--force", "--json"});
    ASSERT_EQ(r.code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    std::map<std::string, nlohmann::json> by_name;
    for (const auto& t : j["tensors"]) by_name[t["name"]] = t;
    EXPECT_EQ(by_name.size(), Model::open(f.base).tensors().size());
    const auto& q = by_name["blk.0.attn_q.weight"];
    EXPECT_EQ(q["hf_name"], "model.layers.0.self_attn.q_proj.weight");
    EXPECT_EQ(q["transform"], "permute-q");
    EXPECT_EQ(q["type_after"], "q4_1");
    EXPECT_EQ(q["type_base"], "f32");
    const auto& up = by_name["blk.0.ffn_up_exps.weight"];
    EXPECT_EQ(up["hf_name"], "model.layers.0.block_sparse_moe.experts.{0..3}.w3.weight");
    EXPECT_EQ(up["transform"], "stack-experts");
    EXPECT_EQ(up["shape"], nlohmann::json::array({64, 64, 4}));
    EXPECT_EQ(by_name["blk.0.ffn_gate_inp.weight"]["action"], "copy");
    EXPECT_GT(j["exact"]["values"].get<uint64_t>(), 0u);
  }
}

TEST(hf_import_cli, dry_run_lists_hf_name_gguf_name_transform_type_and_bytes) {
  Fixture f(1);
  const auto r = f.import({"--dry-run"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err,
            "gguf-requant: note: 9 tensors of the base replaced with another type (the first: "
            "'token_embd.weight' f32 -> q4_1)\n");
  EXPECT_EQ(r.out,
            "source tensor                                             tensor                      "
            "transform      from           to    shape        bytes before  bytes after\n"
            "model.embed_tokens.weight                                 token_embd.weight           "
            "rename         u4 affine g32  q4_1  [64, 260]       10.16 KiB    10.16 KiB\n"
            "model.layers.0.input_layernorm.weight                     blk.0.attn_norm.weight      "
            "rename         f32            f32   [64]                256 B        256 B\n"
            "model.layers.0.self_attn.q_proj.weight                    blk.0.attn_q.weight         "
            "permute-q      u4 affine g32  q4_1  [64, 64]         2.50 KiB     2.50 KiB\n"
            "model.layers.0.self_attn.k_proj.weight                    blk.0.attn_k.weight         "
            "permute-k      u4 affine g32  q4_1  [64, 32]         1.25 KiB     1.25 KiB\n"
            "model.layers.0.self_attn.v_proj.weight                    blk.0.attn_v.weight         "
            "rename         u4 affine g32  q4_1  [64, 32]         1.25 KiB     1.25 KiB\n"
            "model.layers.0.self_attn.o_proj.weight                    blk.0.attn_output.weight    "
            "rename         u4 affine g32  q4_1  [64, 64]         2.50 KiB     2.50 KiB\n"
            "model.layers.0.post_attention_layernorm.weight            blk.0.ffn_norm.weight       "
            "rename         f32            f32   [64]                256 B        256 B\n"
            "model.layers.0.block_sparse_moe.gate.weight               blk.0.ffn_gate_inp.weight   "
            "rename         f32            f32   [64, 4]          1.00 KiB     1.00 KiB\n"
            "model.layers.0.block_sparse_moe.experts.{0..3}.w1.weight  blk.0.ffn_gate_exps.weight  "
            "stack-experts  u4 affine g32  q4_1  [64, 64, 4]     10.00 KiB    10.00 KiB\n"
            "model.layers.0.block_sparse_moe.experts.{0..3}.w3.weight  blk.0.ffn_up_exps.weight    "
            "stack-experts  u4 affine g32  q4_1  [64, 64, 4]     10.00 KiB    10.00 KiB\n"
            "model.layers.0.block_sparse_moe.experts.{0..3}.w2.weight  blk.0.ffn_down_exps.weight  "
            "stack-experts  u4 affine g32  q4_1  [64, 64, 4]     10.00 KiB    10.00 KiB\n"
            "model.norm.weight                                         output_norm.weight          "
            "rename         f32            f32   [64]                256 B        256 B\n"
            "lm_head.weight                                            output.weight               "
            "rename         u4 affine g32  q4_1  [64, 260]       10.16 KiB    10.16 KiB\n"
            "\n"
            "13 tensors imported (9 packed-affine, moved exactly; 4 copied byte for byte)\n"
            "size: 450.12 KiB -> 66.88 KiB\n"
            "dry run: no GGUF written\n");
  EXPECT_FALSE(std::filesystem::exists(f.dir.file("out.gguf")));
}

TEST(hf_import_cli, refusals) {
  Fixture f;
  const std::string config = f.hf + "/config.json";
  const std::string original = [&] {
    std::ifstream in(config);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  auto with_config = [&](const std::function<void(nlohmann::json&)>& edit) {
    auto j = nlohmann::json::parse(original);
    edit(j);
    testing::write_text(config, j.dump());
  };
  with_config([](auto& j) { j["architectures"] = {"GemmaForCausalLM"}; });
  auto r = f.import();
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err,
            error_line(config + ": key 'architectures': unknown architecture 'GemmaForCausalLM': "
                                "the name map knows LlamaForCausalLM, MistralForCausalLM, "
                                "MixtralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
                                "Qwen2MoeForCausalLM, Qwen3MoeForCausalLM, DeepseekV2ForCausalLM, "
                                "DeepseekV3ForCausalLM"));
  with_config([](auto& j) { j["architectures"] = {"Qwen3MoeForCausalLM"}; });
  r = f.import();
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, error_line(config +
                              ": key 'architectures': 'Qwen3MoeForCausalLM' is llama.cpp's "
                              "architecture 'qwen3moe', but the base '" +
                              f.base + "' is 'llama' (general.architecture)"));
  // More experts in config.json than the checkpoint holds.
  with_config([](auto& j) { j["num_local_experts"] = 5; });
  r = f.import();
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err,
            error_line(f.hf + ": tensor 'blk.0.ffn_gate_exps.weight': expert 4 of 5 is missing: "
                              "no 'model.layers.0.block_sparse_moe.experts.4.w1.weight' in the "
                              "checkpoint"));
  testing::write_text(config, original);
  ASSERT_EQ(f.import().code, 0);

  // A shard the index lists but the folder lacks.
  std::filesystem::rename(f.hf + "/model-00002-of-00002.safetensors", f.dir.file("away"));
  r = f.import({"--force"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err,
            error_line(f.hf +
                       "/model.safetensors.index.json: shard "
                       "'model-00002-of-00002.safetensors' is listed in the index but "
                       "absent (" +
                       f.hf + "/model-00002-of-00002.safetensors: No such file or directory)"));
  std::filesystem::rename(f.dir.file("away"), f.hf + "/model-00002-of-00002.safetensors");
}

// config.json and the index are read like the shards: -o naming one of them (with --force)
// is refused and leaves it as it was.
TEST(hf_import_cli, output_that_is_the_config_or_the_index_is_refused) {
  Fixture f;
  const auto slurp = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  for (const std::string& file : {f.hf + "/config.json", f.hf + "/model.safetensors.index.json"}) {
    SCOPED_TRACE(file);
    const std::string before = slurp(file);
    const auto r = run_cli("gguf-requant", {f.hf, "--base", f.base, "-o", file, "--force", "-q"});
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.err, fmt::format("gguf-requant: error: {0}: output is the same file as input "
                                 "'{0}'; refusing to overwrite an input (choose another output "
                                 "path)\nTry 'gguf-requant --help' for more information.\n",
                                 file));
    EXPECT_EQ(slurp(file), before);
  }
}

TEST(hf_import_cli, unmapped_and_unmatched_tensors) {
  Fixture f(1);
  testing::ShardWriter extra;
  extra.add_plain("model.layers.0.mlp.foo.weight", "F32", {1}, {0, 0, 0, 0});
  extra.write(f.hf + "/extra.safetensors");
  auto r = f.import();
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, error_line(f.hf +
                              "/extra.safetensors: tensor 'model.layers.0.mlp.foo.weight': at "
                              "byte 9: unmapped: the name map of architecture 'llama' (from '" +
                              f.hf + "/config.json') has no GGUF name for it"));
  // Mapped, but the base has no such tensor (a model with biases onto one without).
  testing::ShardWriter bias;
  bias.add_plain("model.layers.0.self_attn.v_proj.bias", "F32", {32}, std::vector<uint8_t>(128));
  bias.write(f.hf + "/extra.safetensors");
  r = f.import();
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, error_line(f.hf +
                              "/extra.safetensors: tensor 'blk.0.attn_v.bias': at byte 9: (from "
                              "'model.layers.0.self_attn.v_proj.bias') has no place in the base " +
                              f.base +
                              ", which has no tensor of this name (--append-unmatched appends "
                              "such tensors after the base's)"));
  r = f.import({"--append-unmatched"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("1 tensor of the import ('blk.0.attn_v.bias') is not in the base: "
                       "appended after its tensors"),
            std::string::npos)
      << r.err;
}

// DeepSeek's kv_b_proj: the base's fused attn_kv_b takes it as it is; a base with the split
// attn_k_b (transposed) / attn_v_b refuses a packed one unless --type f32, and then every value
// lands where llama.cpp's converter puts it.
TEST(hf_import_cli, deepseek_kv_b_fused_split_or_refused) {
  TempDir dir;
  const int64_t heads = 2, nope = 32, v = 32, rank = 64, rows = heads * (nope + v);
  const testing::PackedRows kv = testing::random_rows(5, rows, rank);
  std::filesystem::create_directory(dir.file("ckpt"));
  testing::ShardWriter w;
  w.add_packed("model.layers.0.self_attn.kv_b_proj.weight", {rows, rank}, kv);
  w.write(dir.file("ckpt/model.safetensors"));
  testing::write_text(dir.file("ckpt/config.json"),
                      R"({"architectures": ["DeepseekV3ForCausalLM"], "num_attention_heads": 2,
                          "qk_nope_head_dim": 32, "v_head_dim": 32, "kv_lora_rank": 64,
                          "num_hidden_layers": 1})");
  const auto write_base = [&](const std::string& path,
                              const std::vector<std::pair<std::string, std::vector<int64_t>>>& ts) {
    Plan plan;
    plan.metadata.set("general.architecture", Value::string("deepseek2"));
    for (const auto& [name, ne] : ts) {
      const uint64_t bytes = 4 * static_cast<uint64_t>(ne[0] * ne[1] * (ne.size() > 2 ? ne[2] : 1));
      plan.tensors.push_back(
          {name, 0, ne, bytes, MemoryBytes{std::make_shared<std::vector<uint8_t>>(bytes)}});
    }
    write_plan(plan, path, {});
  };
  write_base(dir.file("split.gguf"), {{"blk.0.attn_k_b.weight", {nope, rank, heads}},
                                      {"blk.0.attn_v_b.weight", {rank, v, heads}}});
  write_base(dir.file("fused.gguf"), {{"blk.0.attn_kv_b.weight", {rank, rows}}});
  const auto decoded = [](const Model& m, const std::string& name) {
    const TensorRef* t = m.find(name);
    std::vector<float> out(t->info->n_elements);
    dequantize(static_cast<GgmlType>(t->info->type_id), t->data(), out);
    return out;
  };

  auto r = run_cli("gguf-requant",
                   {dir.file("ckpt"), "--base", dir.file("split.gguf"), "-o", dir.file("o.gguf")});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err,
            error_line(dir.file("ckpt/model.safetensors") +
                       ": tensor 'model.layers.0.self_attn.kv_b_proj.weight': at byte 25: the "
                       "base '" +
                       dir.file("split.gguf") +
                       "' splits it into blk.0.attn_k_b.weight, kv_b's key rows transposed, and "
                       "blk.0.attn_v_b.weight: a transpose moves single values, not rows, so no "
                       "q4_1 or q5_1 block could keep its group's scale; ways out: a base with "
                       "the fused blk.0.attn_kv_b.weight (converted before llama.cpp split it), "
                       "or --type f32, which holds the pair exactly"));

  r = run_cli("gguf-requant", {dir.file("ckpt"), "--base", dir.file("split.gguf"), "-o",
                               dir.file("split-out.gguf"), "--type", "f32", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tensors"][0]["transform"], "kv_b-keys");
  EXPECT_EQ(j["tensors"][1]["transform"], "kv_b-values");
  EXPECT_EQ(j["exact"]["values"], rows * rank);
  const Model split = Model::open(dir.file("split-out.gguf"));
  const auto k = decoded(split, "blk.0.attn_k_b.weight");
  const auto vb = decoded(split, "blk.0.attn_v_b.weight");
  size_t wrong = 0;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t c = 0; c < rank; ++c) {
      for (int64_t d = 0; d < nope; ++d)  // attn_k_b[h][c][d] = kv_b[h*(nope+v) + d][c]
        wrong += k[static_cast<size_t>((h * rank + c) * nope + d)] !=
                 kv.value(static_cast<uint64_t>(h * (nope + v) + d), static_cast<uint64_t>(c));
      for (int64_t jv = 0; jv < v; ++jv)  // attn_v_b[h][j][c] = kv_b[h*(nope+v) + nope + j][c]
        wrong +=
            vb[static_cast<size_t>((h * v + jv) * rank + c)] !=
            kv.value(static_cast<uint64_t>(h * (nope + v) + nope + jv), static_cast<uint64_t>(c));
    }
  EXPECT_EQ(wrong, 0u);

  r = run_cli("gguf-requant", {dir.file("ckpt"), "--base", dir.file("fused.gguf"), "-o",
                               dir.file("fused-out.gguf")});
  ASSERT_EQ(r.code, 0) << r.err;
  const Model fused = Model::open(dir.file("fused-out.gguf"));
  EXPECT_EQ(fused.find("blk.0.attn_kv_b.weight")->info->type_id, traits(GgmlType::Q4_1).id);
  const auto f = decoded(fused, "blk.0.attn_kv_b.weight");
  wrong = 0;
  for (uint64_t i = 0; i < f.size(); ++i)
    wrong += f[i] != kv.value(i / static_cast<uint64_t>(rank), i % static_cast<uint64_t>(rank));
  EXPECT_EQ(wrong, 0u);
}

// Without config.json, a folder of shards under GGUF names imports as one file would.
TEST(hf_import_cli, shards_without_config_keep_their_names) {
  TempDir dir;
  std::filesystem::create_directory(dir.file("sharded"));
  testing::ShardWriter one, a, b;
  const auto up = testing::random_rows(1, 128, 64), down = testing::random_rows(2, 64, 128);
  for (testing::ShardWriter* w : {&one, &a}) w->add_packed("blk.0.ffn_up.weight", {128, 64}, up);
  for (testing::ShardWriter* w : {&one, &b}) {
    w->add_packed("blk.0.ffn_down.weight", {64, 128}, down);
    w->add_plain("blk.0.ffn_norm.weight", "F32", {4}, std::vector<uint8_t>(16, 7));
  }
  one.write(dir.file("one.safetensors"));
  a.write(dir.file("sharded/a.safetensors"));
  b.write(dir.file("sharded/b.safetensors"));
  auto r = run_cli("gguf-requant", {dir.file("one.safetensors"), "-o", dir.file("one.gguf")});
  ASSERT_EQ(r.code, 0) << r.err;
  r = run_cli("gguf-requant", {dir.file("sharded"), "-o", dir.file("sharded.gguf")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(run_cli("gguf-diff", {dir.file("one.gguf"), dir.file("sharded.gguf")}).code, 0);
  // A name in two shards is refused.
  a.write(dir.file("sharded/c.safetensors"));
  r = run_cli("gguf-requant", {dir.file("sharded"), "-o", dir.file("twice.gguf")});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, error_line(dir.file("sharded/c.safetensors") +
                              ": tensor 'blk.0.ffn_up.weight.codes': at byte 263: also in '" +
                              dir.file("sharded/a.safetensors") +
                              "': a tensor name must be unique in a checkpoint"));
}

// The experts of one *_exps tensor must be alike: an odd one is named.
TEST(hf_import_cli, odd_expert) {
  TempDir dir;
  std::filesystem::create_directory(dir.file("moe"));
  testing::ShardWriter w;
  w.add_packed("model.layers.0.mlp.experts.0.up_proj.weight", {64, 32},
               testing::random_rows(1, 64, 32, 4));
  w.add_packed("model.layers.0.mlp.experts.1.up_proj.weight", {64, 32},
               testing::random_rows(2, 64, 32, 3));
  w.write(dir.file("moe/model.safetensors"));
  testing::write_text(dir.file("moe/config.json"),
                      R"({"architectures": ["Qwen3MoeForCausalLM"], "num_experts": 2})");
  auto r = run_cli("gguf-requant", {dir.file("moe"), "-o", dir.file("o.gguf")});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, error_line(dir.file("moe/model.safetensors") +
                              ": tensor 'model.layers.0.mlp.experts.1.up_proj.weight': at byte "
                              "25: expert 1 is u3 affine g32 [64, 32], but expert 0 is u4 affine "
                              "g32 [64, 32]: the experts of blk.0.ffn_up_exps.weight must all be "
                              "2-D and alike"));
  // Alike, they stack in expert order (no base: the output holds the import alone).
  w = testing::ShardWriter();
  w.add_packed("model.layers.0.mlp.experts.1.up_proj.weight", {64, 32},
               testing::random_rows(2, 64, 32, 4));
  w.add_packed("model.layers.0.mlp.experts.0.up_proj.weight", {64, 32},
               testing::random_rows(1, 64, 32, 4));
  w.write(dir.file("moe/model.safetensors"));
  r = run_cli("gguf-requant", {dir.file("moe"), "-o", dir.file("o.gguf"), "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tensors"][0]["shape"], nlohmann::json::array({32, 64, 2}));
  const Model m = Model::open(dir.file("o.gguf"));
  std::vector<float> got(64 * 32 * 2);
  dequantize(GgmlType::Q4_1, m.tensors()[0].data(), got);
  const auto e0 = testing::random_rows(1, 64, 32, 4), e1 = testing::random_rows(2, 64, 32, 4);
  size_t wrong = 0;
  for (uint64_t i = 0; i < 64 * 32; ++i) {
    wrong += got[i] != e0.value(i / 32, i % 32);
    wrong += got[64 * 32 + i] != e1.value(i / 32, i % 32);
  }
  EXPECT_EQ(wrong, 0u);
}

// The proof compares each output value with the source element it came from: a changed code in
// a permuted row is found, naming the output row and the HF row it came from.
TEST(hf_import, proof_names_the_source_row_of_a_changed_value) {
  Fixture f;
  const auto cp = HfCheckpoint::open(f.hf);
  const Model base = Model::open(f.base);
  const ImportResult r = import_checkpoint(cp, {std::nullopt, &base});
  const std::string out = f.dir.file("tampered.gguf");
  write_plan(r.plan, out, {});
  EXPECT_GT(prove_import(r, Model::open(out)).values, 0u);
  uint64_t at = 0;
  {
    const Model m = Model::open(out);
    at = m.find("blk.0.attn_q.weight")->data_start() + 40;  // row 1 (two q4_1 blocks a row)
  }
  {
    std::fstream io(out, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(static_cast<std::streamoff>(at + 4));
    char c = 0;
    io.get(c);
    io.seekp(static_cast<std::streamoff>(at + 4));
    io.put(static_cast<char>(c ^ 1));  // the code of column 0
  }
  try {
    (void)prove_import(r, Model::open(out));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    // 4 heads of 16 rows: GGUF row 1 is HF row (1 mod 2) * 8 + 1 / 2 = 8.
    const std::string prefix = fmt::format(
        "{}: tensor 'blk.0.attn_q.weight': at byte {}: reading back: row 1, column 0 decodes to ",
        out, at);
    EXPECT_EQ(std::string(e.what()).substr(0, prefix.size()), prefix) << e.what();
    EXPECT_NE(std::string(e.what()).find(
                  ", but its source, 'model.layers.0.self_attn.q_proj.weight' row 8 column 0, is "),
              std::string::npos)
        << e.what();
  }
}

// Head counts come from config.json, else from the base; the class from "architectures", else
// "model_type"; config.json from beside the input, or --config.
TEST(hf_import_cli, numbers_from_config_or_base_and_config_elsewhere) {
  Fixture f;
  ASSERT_EQ(f.import().code, 0);
  const std::string config = f.hf + "/config.json";
  auto j = nlohmann::json::parse(std::ifstream(config));
  j.erase("architectures");
  j.erase("num_attention_heads");
  j.erase("num_key_value_heads");
  j.erase("num_local_experts");
  std::filesystem::remove(config);
  testing::write_text(f.dir.file("elsewhere.json"), j.dump());
  auto r = run_cli("gguf-requant", {f.hf, "--base", f.base, "-o", f.dir.file("b.gguf"), "--config",
                                    f.dir.file("elsewhere.json")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(run_cli("gguf-diff", {f.dir.file("out.gguf"), f.dir.file("b.gguf")}).code, 0);
  // Without a base, nothing gives the heads.
  r = run_cli("gguf-requant",
              {f.hf, "-o", f.dir.file("c.gguf"), "--config", f.dir.file("elsewhere.json")});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, error_line(f.hf +
                              "/model-00001-of-00002.safetensors: tensor "
                              "'model.layers.0.self_attn.q_proj.weight': at byte 25: the rotary "
                              "permutation needs the number of heads: '" +
                              f.dir.file("elsewhere.json") +
                              "' has no num_attention_heads, and no base gives "
                              "llama.attention.head_count"));
  // --config belongs to an import.
  r = run_cli("gguf-requant",
              {f.base, "-o", f.dir.file("d.gguf"), "--type", "q8_0", "--config", config});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gguf-requant: error: --config belongs to a packed-affine import (a safetensors "
            "input)\nTry 'gguf-requant --help' for more information.\n");
}

}  // namespace
}  // namespace gguf
