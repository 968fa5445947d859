// The tensor-name grammar against real tensor names: DeepSeek V4 (ds4), DeepSeek V2/V3,
// qwen2moe/qwen3moe, mixtral, llama, Hugging Face checkpoints, and hostile bytes.
#include "gguf/format/names.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "gguf/base/error.h"

namespace gguf {
namespace {

struct Case {
  std::string name;
  int n_dims;
  Role role;
};

void expect_roles(const std::vector<Case>& cases, std::string_view arch) {
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(role_name(classify_tensor(c.name, arch, c.n_dims).role), role_name(c.role));
  }
}

// Every tensor of layer 2 of DeepSeek V4 Flash (a ratio-4 layer with an indexer, and a hash-
// routed layer with ffn_gate_tid2eid), names and dimension counts as ds4 binds them.
const std::vector<Case> kDs4Layer2 = {
    {"blk.2.hc_attn_fn.weight", 2, Role::kOther},
    {"blk.2.hc_attn_scale.weight", 1, Role::kOther},
    {"blk.2.hc_attn_base.weight", 1, Role::kOther},
    {"blk.2.attn_norm.weight", 1, Role::kNorm},
    {"blk.2.attn_q_a.weight", 2, Role::kAttnProj},
    {"blk.2.attn_q_a_norm.weight", 1, Role::kNorm},
    {"blk.2.attn_q_b.weight", 2, Role::kAttnProj},
    {"blk.2.attn_kv.weight", 2, Role::kAttnProj},
    {"blk.2.attn_kv_a_norm.weight", 1, Role::kNorm},
    {"blk.2.attn_sinks.weight", 1, Role::kOther},  // 1-D: not a matrix role
    {"blk.2.attn_output_a.weight", 2, Role::kAttnProj},
    {"blk.2.attn_output_b.weight", 2, Role::kAttnProj},
    {"blk.2.attn_compressor_ape.weight", 2, Role::kAttn},
    {"blk.2.attn_compressor_kv.weight", 2, Role::kAttn},
    {"blk.2.attn_compressor_gate.weight", 2, Role::kAttn},
    {"blk.2.attn_compressor_norm.weight", 1, Role::kNorm},
    {"blk.2.indexer.attn_q_b.weight", 2, Role::kAttn},
    {"blk.2.indexer.proj.weight", 2, Role::kAttn},
    {"blk.2.indexer_compressor_ape.weight", 2, Role::kAttn},
    {"blk.2.indexer_compressor_kv.weight", 2, Role::kAttn},
    {"blk.2.indexer_compressor_gate.weight", 2, Role::kAttn},
    {"blk.2.indexer_compressor_norm.weight", 1, Role::kNorm},
    {"blk.2.hc_ffn_fn.weight", 2, Role::kOther},
    {"blk.2.hc_ffn_scale.weight", 1, Role::kOther},
    {"blk.2.hc_ffn_base.weight", 1, Role::kOther},
    {"blk.2.ffn_norm.weight", 1, Role::kNorm},
    {"blk.2.ffn_gate_inp.weight", 2, Role::kRouter},
    {"blk.2.exp_probs_b.bias", 1, Role::kRouter},
    {"blk.2.ffn_gate_exps.weight", 3, Role::kRoutedGate},
    {"blk.2.ffn_up_exps.weight", 3, Role::kRoutedUp},
    {"blk.2.ffn_down_exps.weight", 3, Role::kRoutedDown},
    {"blk.2.ffn_gate_shexp.weight", 2, Role::kShared},
    {"blk.2.ffn_up_shexp.weight", 2, Role::kShared},
    {"blk.2.ffn_down_shexp.weight", 2, Role::kShared},
    {"blk.2.ffn_gate_tid2eid.weight", 2, Role::kRouter},
};

TEST(names, ds4_layer_every_tensor_kind) {
  expect_roles(kDs4Layer2, "deepseek4");
  for (const Case& c : kDs4Layer2) {
    SCOPED_TRACE(c.name);
    const TensorName tn = classify_tensor(c.name, "deepseek4", c.n_dims);
    ASSERT_TRUE(tn.layer.has_value());
    EXPECT_EQ(*tn.layer, 2);
  }
}

TEST(names, ds4_roles_without_dims_follow_the_recipe_families) {
  // Unknown dims: sinks are "other attention tensors" (ds4's --attention family).
  EXPECT_EQ(classify_tensor("blk.2.attn_sinks.weight", "deepseek4").role, Role::kAttn);
  for (const Case& c : kDs4Layer2) {
    if (c.name.find("attn_sinks") != std::string::npos) continue;
    SCOPED_TRACE(c.name);
    EXPECT_EQ(role_name(classify_tensor(c.name, "deepseek4").role), role_name(c.role));
  }
}

TEST(names, ds4_top_level_and_mtp) {
  expect_roles(
      {
          {"token_embd.weight", 2, Role::kEmbedding},
          {"output_hc_base.weight", 1, Role::kOther},
          {"output_hc_fn.weight", 2, Role::kOther},
          {"output_hc_scale.weight", 1, Role::kOther},
          {"output_norm.weight", 1, Role::kNorm},
          {"output.weight", 2, Role::kOutput},
          // The multi-token-prediction block: roles as in a layer, but no layer index.
          {"mtp.0.ffn_gate_exps.weight", 3, Role::kRoutedGate},
          {"mtp.0.attn_q_b.weight", 2, Role::kAttnProj},
          {"mtp.0.enorm.weight", 1, Role::kNorm},
          {"mtp.0.hnorm.weight", 1, Role::kNorm},
          {"mtp.0.e_proj.weight", 2, Role::kOther},
          {"mtp.0.hc_head_fn.weight", 2, Role::kOther},
      },
      "deepseek4");
  EXPECT_FALSE(classify_tensor("mtp.0.ffn_gate_exps.weight").layer);
  EXPECT_FALSE(classify_tensor("output.weight").layer);
}

TEST(names, deepseek2_mla_and_leading_dense_layer) {
  expect_roles(
      {
          {"blk.0.ffn_gate.weight", 2, Role::kDenseFfn},
          {"blk.0.ffn_up.weight", 2, Role::kDenseFfn},
          {"blk.0.ffn_down.weight", 2, Role::kDenseFfn},
          {"blk.5.attn_q_a.weight", 2, Role::kAttnProj},
          {"blk.5.attn_q_a_norm.weight", 1, Role::kNorm},
          {"blk.5.attn_q_b.weight", 2, Role::kAttnProj},
          {"blk.5.attn_q.weight", 2, Role::kAttnProj},  // Lite models have no q LoRA
          {"blk.5.attn_kv_a_mqa.weight", 2, Role::kAttnProj},
          {"blk.5.attn_kv_a_norm.weight", 1, Role::kNorm},
          {"blk.5.attn_kv_b.weight", 2, Role::kAttnProj},
          {"blk.5.attn_k_b.weight", 3, Role::kAttnProj},
          {"blk.5.attn_v_b.weight", 3, Role::kAttnProj},
          {"blk.5.attn_output.weight", 2, Role::kAttnProj},
          {"blk.5.ffn_gate_inp.weight", 2, Role::kRouter},
          {"blk.5.exp_probs_b.bias", 1, Role::kRouter},
          {"blk.5.ffn_gate_exps.weight", 3, Role::kRoutedGate},
          {"blk.5.ffn_down_shexp.weight", 2, Role::kShared},
          {"blk.61.nextn.eh_proj.weight", 2, Role::kOther},
          {"blk.61.nextn.embed_tokens.weight", 2, Role::kEmbedding},
          {"blk.61.nextn.shared_head_head.weight", 2, Role::kOutput},
          {"blk.61.nextn.enorm.weight", 1, Role::kNorm},
      },
      "deepseek2");
}

TEST(names, qwen2moe_and_qwen3moe) {
  expect_roles(
      {
          {"blk.3.attn_q.weight", 2, Role::kAttnProj},
          {"blk.3.attn_q.bias", 1, Role::kAttnProj},  // a bias keeps its matrix's role
          {"blk.3.attn_k.weight", 2, Role::kAttnProj},
          {"blk.3.attn_v.weight", 2, Role::kAttnProj},
          {"blk.3.attn_output.weight", 2, Role::kAttnProj},
          {"blk.3.ffn_gate_inp.weight", 2, Role::kRouter},
          {"blk.3.ffn_gate_inp_shexp.weight", 1, Role::kShared},  // shared-expert gate
          {"blk.3.ffn_gate_inp_shexp.weight", 2, Role::kShared},
          {"blk.3.ffn_gate_shexp.weight", 2, Role::kShared},
          {"blk.3.ffn_up_shexp.weight", 2, Role::kShared},
          {"blk.3.ffn_down_shexp.weight", 2, Role::kShared},
          {"blk.3.ffn_gate_exps.weight", 3, Role::kRoutedGate},
          {"blk.3.ffn_up_exps.weight", 3, Role::kRoutedUp},
          {"blk.3.ffn_down_exps.weight", 3, Role::kRoutedDown},
      },
      "qwen2moe");
  expect_roles(
      {
          {"blk.47.attn_q_norm.weight", 1, Role::kNorm},
          {"blk.47.attn_k_norm.weight", 1, Role::kNorm},
          {"blk.47.attn_norm.weight", 1, Role::kNorm},
          {"blk.47.ffn_norm.weight", 1, Role::kNorm},
          {"blk.47.ffn_gate_inp.weight", 2, Role::kRouter},
          {"blk.47.ffn_down_exps.weight", 3, Role::kRoutedDown},
      },
      "qwen3moe");
}

TEST(names, mixtral_merged_and_per_expert) {
  expect_roles(
      {
          {"blk.7.ffn_gate_exps.weight", 3, Role::kRoutedGate},
          {"blk.7.ffn_gate.0.weight", 2, Role::kRoutedGate},
          {"blk.7.ffn_up.3.weight", 2, Role::kRoutedUp},
          {"blk.7.ffn_down.7.weight", 2, Role::kRoutedDown},
          {"blk.7.ffn_gate_inp.weight", 2, Role::kRouter},
      },
      "llama");
  const TensorName tn = classify_tensor("blk.7.ffn_down.7.weight", "llama", 2);
  EXPECT_EQ(tn.layer, 7);
  EXPECT_EQ(tn.kind, "ffn_down.7");
  EXPECT_EQ(tn.suffix, "weight");
}

TEST(names, llama_dense) {
  expect_roles(
      {
          {"token_embd.weight", 2, Role::kEmbedding},
          {"output_norm.weight", 1, Role::kNorm},
          {"output.weight", 2, Role::kOutput},
          {"rope_freqs.weight", 1, Role::kOther},
          {"blk.0.attn_norm.weight", 1, Role::kNorm},
          {"blk.0.attn_q.weight", 2, Role::kAttnProj},
          {"blk.0.attn_k.weight", 2, Role::kAttnProj},
          {"blk.0.attn_v.weight", 2, Role::kAttnProj},
          {"blk.0.attn_output.weight", 2, Role::kAttnProj},
          {"blk.0.ffn_norm.weight", 1, Role::kNorm},
          {"blk.0.ffn_gate.weight", 2, Role::kDenseFfn},
          {"blk.0.ffn_up.weight", 2, Role::kDenseFfn},
          {"blk.0.ffn_down.weight", 2, Role::kDenseFfn},
          {"blk.0.attn_qkv.weight", 2, Role::kAttnProj},
          {"blk.0.post_attention_norm.weight", 1, Role::kNorm},
          {"blk.0.post_ffw_norm_1.weight", 1, Role::kNorm},
          {"token_embd_norm.weight", 1, Role::kNorm},
          {"rope_factors_long.weight", 1, Role::kOther},
      },
      "llama");
}

TEST(names, hugging_face_w1_w2_w3_names) {
  expect_roles(
      {
          // DeepSeek V4's checkpoint (what ds4's quantizer reads).
          {"layers.3.ffn.experts.17.w1.weight", 2, Role::kRoutedGate},
          {"layers.3.ffn.experts.17.w3.weight", 2, Role::kRoutedUp},
          {"layers.3.ffn.experts.17.w2.weight", 2, Role::kRoutedDown},
          {"layers.3.ffn.experts.17.w1.scale", 2, Role::kRoutedGate},
          {"layers.3.ffn.shared_experts.w1.weight", 2, Role::kShared},
          {"layers.3.ffn.gate.weight", 2, Role::kRouter},
          {"layers.3.ffn.gate.bias", 1, Role::kRouter},
          {"layers.3.ffn.gate.tid2eid", 2, Role::kRouter},
          {"layers.3.attn.wq_a.weight", 2, Role::kAttnProj},
          {"layers.3.attn.wkv.weight", 2, Role::kAttnProj},
          {"layers.3.attn.wo_b.weight", 2, Role::kAttnProj},
          {"layers.3.attn.indexer.wq_b.weight", 2, Role::kAttn},
          {"layers.3.attn.compressor.wkv.weight", 2, Role::kAttn},
          {"layers.3.attn.q_norm.weight", 1, Role::kNorm},
          {"layers.3.hc_attn_fn", 2, Role::kOther},
          {"embed.weight", 2, Role::kEmbedding},
          {"head.weight", 2, Role::kOutput},
          {"norm.weight", 1, Role::kNorm},
          // Mixtral and Qwen checkpoints.
          {"model.layers.9.block_sparse_moe.experts.5.w1.weight", 2, Role::kRoutedGate},
          {"model.layers.9.block_sparse_moe.experts.5.w2.weight", 2, Role::kRoutedDown},
          {"model.layers.9.block_sparse_moe.gate.weight", 2, Role::kRouter},
          {"model.layers.9.mlp.experts.5.up_proj.weight", 2, Role::kRoutedUp},
          {"model.layers.9.mlp.shared_expert_gate.weight", 2, Role::kShared},
          {"model.layers.9.mlp.shared_expert_gate.weight", 1, Role::kShared},
          {"model.layers.9.mlp.gate_proj.weight", 2, Role::kDenseFfn},
          {"model.layers.9.self_attn.o_proj.weight", 2, Role::kAttnProj},
          {"model.layers.9.input_layernorm.weight", 1, Role::kNorm},
          {"model.embed_tokens.weight", 2, Role::kEmbedding},
          {"lm_head.weight", 2, Role::kOutput},
      },
      "");
  EXPECT_EQ(classify_tensor("model.layers.9.mlp.experts.5.up_proj.weight").layer, 9);
  EXPECT_EQ(classify_tensor("layers.3.ffn.experts.17.w1.weight").layer, 3);
}

TEST(names, architecture_decides_sequence_mixer_roles) {
  // Mamba-style mixers stand where attention does, but only when the file says so.
  EXPECT_EQ(classify_tensor("blk.1.ssm_in.weight", "mamba", 2).role, Role::kAttnProj);
  EXPECT_EQ(classify_tensor("blk.1.ssm_conv1d.weight", "qwen3next", 2).role, Role::kAttn);
  EXPECT_EQ(classify_tensor("blk.1.ssm_norm.weight", "qwen3next", 1).role, Role::kNorm);
  EXPECT_EQ(classify_tensor("blk.1.ssm_in.weight", "", 2).role, Role::kOther);
  EXPECT_EQ(classify_tensor("blk.1.ssm_in.weight", "llama", 2).role, Role::kOther);
  EXPECT_EQ(classify_tensor("blk.1.time_mix_key.weight", "rwkv7", 2).role, Role::kAttnProj);
  EXPECT_EQ(classify_tensor("blk.1.time_mix_w1.weight", "rwkv6", 2).role, Role::kAttn);
  EXPECT_EQ(classify_tensor("blk.1.time_mix_ln.weight", "rwkv6", 1).role, Role::kNorm);
  EXPECT_EQ(classify_tensor("blk.1.channel_mix_key.weight", "rwkv6", 2).role, Role::kDenseFfn);
  EXPECT_EQ(classify_tensor("blk.1.channel_mix_key.weight", "", 2).role, Role::kOther);
}

TEST(names, one_dimensional_tensors_are_norms_or_other) {
  EXPECT_EQ(classify_tensor("blk.0.ffn_up_exps.weight", "", 1).role, Role::kOther);
  EXPECT_EQ(classify_tensor("blk.0.ffn_up_exps.weight", "", 0).role, Role::kRoutedUp);
  EXPECT_EQ(classify_tensor("blk.0.ffn_up_exps.bias", "", 1).role, Role::kRoutedUp);
  EXPECT_EQ(classify_tensor("token_embd.weight", "", 1).role, Role::kOther);
  EXPECT_EQ(classify_tensor("blk.0.attn_norm.weight", "", 1).role, Role::kNorm);
  EXPECT_EQ(classify_tensor("blk.0.exp_probs_b.bias", "", 1).role, Role::kRouter);
  EXPECT_EQ(classify_tensor("blk.0.ffn_gate_inp.weight", "", 1).role, Role::kRouter);
}

TEST(names, every_role_is_reachable) {
  std::set<Role> seen;
  for (const Case& c : kDs4Layer2) seen.insert(classify_tensor(c.name, "deepseek4", c.n_dims).role);
  for (const char* n : {"token_embd.weight", "output.weight", "blk.0.ffn_up.weight"}) {
    seen.insert(classify_tensor(n).role);
  }
  EXPECT_EQ(seen.size(), all_roles().size());
}

TEST(names, layer_index_edge_cases) {
  EXPECT_EQ(classify_tensor("blk.0.attn_q.weight").layer, 0);
  EXPECT_EQ(classify_tensor("blk.42.attn_q.weight").layer, 42);
  EXPECT_EQ(classify_tensor("blk.999999.attn_q.weight").layer, kMaxLayer);
  EXPECT_FALSE(classify_tensor("blk.1000000.attn_q.weight").layer);
  // Absurd numbers: no layer, no overflow, the role still comes from the rest.
  const TensorName huge = classify_tensor("blk.99999999999.ffn_up_exps.weight");
  EXPECT_FALSE(huge.layer);
  EXPECT_EQ(huge.role, Role::kRoutedUp);
  EXPECT_FALSE(
      classify_tensor("blk.184467440737095516161844674407370955161600.attn_q.weight").layer);
  EXPECT_FALSE(classify_tensor("blk.007.attn_q.weight").layer);  // not how llama.cpp writes it
  EXPECT_FALSE(classify_tensor("blk.-1.attn_q.weight").layer);
  EXPECT_FALSE(classify_tensor("blk.3").layer);
  EXPECT_FALSE(classify_tensor("blk..attn_q.weight").layer);
  EXPECT_FALSE(classify_tensor("blk.3x.attn_q.weight").layer);
  EXPECT_FALSE(classify_tensor("xblk.3.attn_q.weight").layer);
  EXPECT_FALSE(classify_tensor("v.blk.3.attn_q.weight").layer);  // a vision tower, not the LLM
  const TensorName bare = classify_tensor("blk.3.");
  EXPECT_EQ(bare.layer, 3);
  EXPECT_EQ(bare.kind, "");
  EXPECT_EQ(bare.role, Role::kOther);
  EXPECT_EQ(classify_tensor("enc.blk.4.attn_o.weight").layer, 4);
  EXPECT_EQ(classify_tensor("enc.blk.4.attn_o.weight").role, Role::kAttnProj);
}

TEST(names, kind_and_suffix_are_views_into_the_name) {
  const std::string name = "blk.12.ffn_up_exps.weight";
  const TensorName tn = classify_tensor(name);
  EXPECT_EQ(tn.kind, "ffn_up_exps");
  EXPECT_EQ(tn.suffix, "weight");
  EXPECT_EQ(tn.kind.data(), name.data() + 7);
  EXPECT_EQ(classify_tensor("output.weight").kind, "output");
  EXPECT_EQ(classify_tensor("blk.1.exp_probs_b.bias").suffix, "bias");
  EXPECT_EQ(classify_tensor("layers.1.ffn.gate.tid2eid").suffix, "");
  EXPECT_EQ(classify_tensor(".weight").kind, "");
  EXPECT_EQ(classify_tensor("weight").kind, "weight");
}

TEST(names, untrusted_bytes_never_crash) {
  EXPECT_EQ(classify_tensor("").role, Role::kOther);
  EXPECT_FALSE(classify_tensor("").layer);
  const std::string nul("blk.1.attn_q\0x.weight", 21);
  EXPECT_EQ(classify_tensor(nul).layer, 1);
  EXPECT_EQ(classify_tensor(nul).role, Role::kAttn);  // "attn" token, not the attn_q kind
  EXPECT_EQ(classify_tensor("blk.1.\xff\xfe\x1b[31m.weight").role, Role::kOther);
  EXPECT_EQ(classify_tensor("........").role, Role::kOther);
  EXPECT_EQ(classify_tensor("____").role, Role::kOther);
  const std::string big = "blk.1." + std::string(1 << 20, '7') + ".weight";
  EXPECT_EQ(classify_tensor(big).layer, 1);
  const std::string digits(1 << 20, '9');
  EXPECT_FALSE(classify_tensor("blk." + digits + ".x").layer);
}

TEST(names, random_token_soup_is_classified_safely) {
  // Names assembled from the grammar's own pieces hit every branch of the matcher; none may
  // crash, and a layer, when found, is always in range.
  const std::string_view pieces[] = {
      "blk.",    "layers.", "mtp.", "0",       "42",   "999999",
      "1000000", "007",     ".",    "_",       "ffn",  "gate",
      "up",      "down",    "exps", "shexp",   "inp",  "attn",
      "norm",    "experts", "w1",   "w2",      "w3",   "weight",
      "bias",    "scale",   "hc",   "indexer", "\xff", std::string_view("\0", 1)};
  uint64_t state = 0x9e3779b97f4a7c15u;
  auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  for (int i = 0; i < 20000; ++i) {
    std::string name;
    const int n = static_cast<int>(next() % 12);
    for (int j = 0; j < n; ++j) name += pieces[next() % std::size(pieces)];
    const int dims = static_cast<int>(next() % 5);
    const TensorName tn = classify_tensor(name, i % 3 ? "deepseek4" : "mamba", dims);
    if (tn.layer) {
      EXPECT_GE(*tn.layer, 0);
      EXPECT_LE(*tn.layer, kMaxLayer);
    }
    EXPECT_NE(role_name(tn.role), "invalid");
    EXPECT_LE(tn.kind.size(), name.size());
  }
}

TEST(names, role_names_and_parsing) {
  ASSERT_EQ(all_roles().size(), 12u);
  const char* expected[] = {"routed-gate", "routed-up", "routed-down", "shared",
                            "router",      "attn-proj", "attn",        "dense-ffn",
                            "embedding",   "output",    "norm",        "other"};
  for (size_t i = 0; i < 12; ++i) {
    EXPECT_EQ(role_name(all_roles()[i]), expected[i]);
    EXPECT_EQ(parse_roles(expected[i]), std::vector<Role>{all_roles()[i]});
  }
  const std::vector<Role> routed = {Role::kRoutedGate, Role::kRoutedUp, Role::kRoutedDown};
  EXPECT_EQ(parse_roles("routed"), routed);
  EXPECT_EQ(parse_roles("ROUTED"), routed);
  EXPECT_EQ(parse_roles("Attn-Proj"), std::vector<Role>{Role::kAttnProj});
  EXPECT_EQ(parse_roles("dense_ffn"), std::vector<Role>{Role::kDenseFfn});
}

TEST(names, unknown_role_is_a_usage_error_listing_valid_names) {
  try {
    parse_roles("expert\x1b");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::kUsage);
    EXPECT_EQ(e.message(),
              "unknown role 'expert\\x1b' (valid roles: routed, routed-gate, routed-up, "
              "routed-down, shared, router, attn-proj, attn, dense-ffn, embedding, output, "
              "norm, other)");
  }
  EXPECT_THROW(parse_roles(""), Error);
  EXPECT_THROW(parse_roles("routed-"), Error);
}

}  // namespace
}  // namespace gguf
