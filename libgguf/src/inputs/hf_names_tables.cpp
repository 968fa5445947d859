// The Hugging Face -> GGUF name table (facts from llama.cpp's gguf-py tensor_mapping.py and
// convert_hf_to_gguf.py, read there; the table and the matcher are our own).
// Patterns are dot-separated: {N} matches a layer number, {E} an expert number.
#include <fmt/format.h>

#include <array>
#include <charconv>

#include "gguf/inputs/hf_names.h"

namespace gguf {
namespace {

// Families as bits, so one row can serve several.
enum : unsigned {
  kLlama = 1,  // llama, mistral, mixtral
  kQwen2 = 2,
  kQwen3 = 4,
  kQwen2Moe = 8,
  kQwen3Moe = 16,
  kDeepseek2 = 32,
  kAll = 63,
  kQwen = kQwen2 | kQwen3 | kQwen2Moe | kQwen3Moe,
  kDense = kLlama | kQwen2 | kQwen3 | kDeepseek2,  // dense FFN layers
  kMoe = kQwen2Moe | kQwen3Moe | kDeepseek2,       // mlp.gate / mlp.experts.E.*_proj
};

struct Arch {
  std::string_view gguf;
  unsigned family;
};
constexpr std::array<Arch, 6> kArchs = {{{"llama", kLlama},
                                         {"qwen2", kQwen2},
                                         {"qwen3", kQwen3},
                                         {"qwen2moe", kQwen2Moe},
                                         {"qwen3moe", kQwen3Moe},
                                         {"deepseek2", kDeepseek2}}};

struct Alias {
  std::string_view hf, gguf;
};
// convert_hf_to_gguf.py's registrations (the class in "architectures") ...
constexpr std::array<Alias, 11> kClasses = {{{"LlamaForCausalLM", "llama"},
                                             {"LLaMAForCausalLM", "llama"},
                                             {"MistralForCausalLM", "llama"},
                                             {"MixtralForCausalLM", "llama"},
                                             {"Qwen2ForCausalLM", "qwen2"},
                                             {"Qwen3ForCausalLM", "qwen3"},
                                             {"Qwen2MoeForCausalLM", "qwen2moe"},
                                             {"Qwen3MoeForCausalLM", "qwen3moe"},
                                             {"DeepseekV2ForCausalLM", "deepseek2"},
                                             {"DeepseekV3ForCausalLM", "deepseek2"},
                                             {"Qwen2Model", "qwen2"}}};
// ... and transformers' model_type for a config.json without "architectures".
constexpr std::array<Alias, 9> kModelTypes = {{{"llama", "llama"},
                                               {"mistral", "llama"},
                                               {"mixtral", "llama"},
                                               {"qwen2", "qwen2"},
                                               {"qwen3", "qwen3"},
                                               {"qwen2_moe", "qwen2moe"},
                                               {"qwen3_moe", "qwen3moe"},
                                               {"deepseek_v2", "deepseek2"},
                                               {"deepseek_v3", "deepseek2"}}};

struct Rule {
  unsigned families;
  std::string_view hf;    // without ".weight" / ".bias" unless `whole`
  std::string_view gguf;  // likewise
  HfTransform transform = HfTransform::kNone;
  bool whole = false;  // the names are complete: no suffix carried over
};

using T = HfTransform;
constexpr Rule kRules[] = {
    {kAll, "model.embed_tokens", "token_embd"},
    {kAll, "lm_head", "output"},
    {kAll, "model.norm", "output_norm"},
    {kAll, "model.layers.{N}.input_layernorm", "blk.{N}.attn_norm"},
    {kAll, "model.layers.{N}.post_attention_layernorm", "blk.{N}.ffn_norm"},
    {kAll, "model.layers.{N}.self_attn.o_proj", "blk.{N}.attn_output"},
    // The llama family's checkpoints hold q and k in rotate-half order; llama.cpp's rope (NORM)
    // takes adjacent pairs, so the converter interleaves the halves. Qwen (NEOX rope) keeps them.
    {kLlama, "model.layers.{N}.self_attn.q_proj", "blk.{N}.attn_q", T::kPermuteQ},
    {kLlama, "model.layers.{N}.self_attn.k_proj", "blk.{N}.attn_k", T::kPermuteK},
    {kLlama | kQwen, "model.layers.{N}.self_attn.v_proj", "blk.{N}.attn_v"},
    {kQwen | kDeepseek2, "model.layers.{N}.self_attn.q_proj", "blk.{N}.attn_q"},
    {kQwen, "model.layers.{N}.self_attn.k_proj", "blk.{N}.attn_k"},
    {kQwen3 | kQwen3Moe, "model.layers.{N}.self_attn.q_norm", "blk.{N}.attn_q_norm"},
    {kQwen3 | kQwen3Moe, "model.layers.{N}.self_attn.k_norm", "blk.{N}.attn_k_norm"},
    {kDense, "model.layers.{N}.mlp.gate_proj", "blk.{N}.ffn_gate"},
    {kDense, "model.layers.{N}.mlp.up_proj", "blk.{N}.ffn_up"},
    {kDense, "model.layers.{N}.mlp.down_proj", "blk.{N}.ffn_down"},
    // Mixtral: router and experts w1 (gate), w3 (up), w2 (down).
    {kLlama, "model.layers.{N}.block_sparse_moe.gate", "blk.{N}.ffn_gate_inp"},
    {kLlama, "model.layers.{N}.block_sparse_moe.experts.{E}.w1", "blk.{N}.ffn_gate_exps",
     T::kStackExperts},
    {kLlama, "model.layers.{N}.block_sparse_moe.experts.{E}.w3", "blk.{N}.ffn_up_exps",
     T::kStackExperts},
    {kLlama, "model.layers.{N}.block_sparse_moe.experts.{E}.w2", "blk.{N}.ffn_down_exps",
     T::kStackExperts},
    // Qwen MoE and DeepSeek: router and routed experts.
    {kMoe, "model.layers.{N}.mlp.gate", "blk.{N}.ffn_gate_inp"},
    {kMoe, "model.layers.{N}.mlp.experts.{E}.gate_proj", "blk.{N}.ffn_gate_exps", T::kStackExperts},
    {kMoe, "model.layers.{N}.mlp.experts.{E}.up_proj", "blk.{N}.ffn_up_exps", T::kStackExperts},
    {kMoe, "model.layers.{N}.mlp.experts.{E}.down_proj", "blk.{N}.ffn_down_exps", T::kStackExperts},
    // Shared experts: Qwen2-MoE has one (with its own sigmoid gate), DeepSeek several fused.
    {kQwen2Moe, "model.layers.{N}.mlp.shared_expert.gate_proj", "blk.{N}.ffn_gate_shexp"},
    {kQwen2Moe, "model.layers.{N}.mlp.shared_expert.up_proj", "blk.{N}.ffn_up_shexp"},
    {kQwen2Moe, "model.layers.{N}.mlp.shared_expert.down_proj", "blk.{N}.ffn_down_shexp"},
    {kQwen2Moe, "model.layers.{N}.mlp.shared_expert_gate", "blk.{N}.ffn_gate_inp_shexp"},
    {kDeepseek2, "model.layers.{N}.mlp.shared_experts.gate_proj", "blk.{N}.ffn_gate_shexp"},
    {kDeepseek2, "model.layers.{N}.mlp.shared_experts.up_proj", "blk.{N}.ffn_up_shexp"},
    {kDeepseek2, "model.layers.{N}.mlp.shared_experts.down_proj", "blk.{N}.ffn_down_shexp"},
    // DeepSeek MLA: low-rank q and kv projections with their norms; V3's router bias.
    {kDeepseek2, "model.layers.{N}.self_attn.q_a_proj", "blk.{N}.attn_q_a"},
    {kDeepseek2, "model.layers.{N}.self_attn.q_a_layernorm", "blk.{N}.attn_q_a_norm"},
    {kDeepseek2, "model.layers.{N}.self_attn.q_b_proj", "blk.{N}.attn_q_b"},
    {kDeepseek2, "model.layers.{N}.self_attn.kv_a_proj_with_mqa", "blk.{N}.attn_kv_a_mqa"},
    {kDeepseek2, "model.layers.{N}.self_attn.kv_a_layernorm", "blk.{N}.attn_kv_a_norm"},
    {kDeepseek2, "model.layers.{N}.self_attn.kv_b_proj", "blk.{N}.attn_kv_b", T::kKvB},
    {kDeepseek2, "model.layers.{N}.mlp.gate.e_score_correction_bias", "blk.{N}.exp_probs_b.bias",
     T::kNone, true},
};

// A number segment: digits only, at most 9 of them (no overflow, no sign, no blanks).
std::optional<int64_t> number(std::string_view s) {
  if (s.empty() || s.size() > 9) return std::nullopt;
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::string_view next_segment(std::string_view& s) {
  const size_t dot = s.find('.');
  const std::string_view seg = s.substr(0, dot);
  s = dot == std::string_view::npos ? std::string_view() : s.substr(dot + 1);
  return seg;
}

// Matches `name` against the dotted `pattern`, filling layer and expert.
bool match(std::string_view pattern, std::string_view name, int64_t& layer, int64_t& expert) {
  while (!pattern.empty()) {
    if (name.empty()) return false;
    const std::string_view p = next_segment(pattern), n = next_segment(name);
    if (p == "{N}" || p == "{E}") {
      const auto v = number(n);
      if (!v) return false;
      (p == "{N}" ? layer : expert) = *v;
    } else if (p != n) {
      return false;
    }
  }
  return name.empty();
}

std::string fill(std::string_view pattern, int64_t layer) {
  std::string out(pattern);
  if (const size_t at = out.find("{N}"); at != std::string::npos)
    out.replace(at, 3, std::to_string(layer));
  return out;
}

}  // namespace

std::string_view transform_name(HfTransform t) {
  switch (t) {
    case HfTransform::kNone:
      return "rename";
    case HfTransform::kPermuteQ:
      return "permute-q";
    case HfTransform::kPermuteK:
      return "permute-k";
    case HfTransform::kStackExperts:
      return "stack-experts";
    case HfTransform::kKvB:
      return "kv_b";
  }
  return "?";
}

std::optional<std::string_view> hf_architecture_of_class(std::string_view hf_class) {
  for (const auto& a : kClasses)
    if (a.hf == hf_class) return a.gguf;
  return std::nullopt;
}

std::optional<std::string_view> hf_architecture_of_model_type(std::string_view model_type) {
  for (const auto& a : kModelTypes)
    if (a.hf == model_type) return a.gguf;
  return std::nullopt;
}

std::string known_hf_classes() {
  std::string out;
  for (const auto& a : kClasses) {
    if (a.hf == "LLaMAForCausalLM" || a.hf == "Qwen2Model") continue;  // spellings of others
    out += out.empty() ? "" : ", ";
    out += a.hf;
  }
  return out;
}

std::optional<HfNameMatch> map_hf_name(std::string_view arch, std::string_view hf_name) {
  unsigned family = 0;
  for (const auto& a : kArchs)
    if (a.gguf == arch) family = a.family;
  if (family == 0) return std::nullopt;
  for (const Rule& rule : kRules) {
    if ((rule.families & family) == 0) continue;
    std::string_view base = hf_name, suffix;
    if (!rule.whole) {
      const size_t dot = hf_name.rfind('.');
      if (dot == std::string_view::npos) continue;
      suffix = hf_name.substr(dot);
      if (suffix != ".weight" && suffix != ".bias") continue;
      base = hf_name.substr(0, dot);
    }
    int64_t layer = -1, expert = -1;
    if (!match(rule.hf, base, layer, expert)) continue;
    HfNameMatch m;
    m.gguf = fill(rule.gguf, layer) + std::string(suffix);
    m.transform = rule.transform;
    m.layer = layer;
    m.expert = expert;
    return m;
  }
  return std::nullopt;
}

bool hf_name_dropped(std::string_view hf_name) {
  return hf_name.ends_with(".rotary_emb.inv_freq") || hf_name.ends_with(".attention.masked_bias") ||
         hf_name.ends_with(".attention.bias");
}

}  // namespace gguf
