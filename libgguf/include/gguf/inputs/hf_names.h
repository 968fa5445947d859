// Hugging Face -> GGUF tensor names for the families llama.cpp converts (llama/mistral/mixtral,
// qwen2, qwen3, qwen2moe, qwen3moe, deepseek2/deepseek-v3): which GGUF architecture a
// config.json names, and which GGUF tensor, and which exact row move, each HF tensor becomes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace gguf {

// How a tensor's rows reach the GGUF tensor. Rows always move whole, so a packed tensor's codes,
// scales and mins move with them; only kKvB's key half needs more (see hf_import.h).
enum class HfTransform {
  kNone,          // the same rows in the same order
  kPermuteQ,      // llama family q_proj: rotary halves interleaved per head (n_head heads)
  kPermuteK,      // llama family k_proj: the same with n_head_kv heads
  kStackExperts,  // one tensor per expert, stacked in expert order into a 3-D *_exps tensor
  kKvB,           // DeepSeek kv_b_proj: the legacy fused attn_kv_b, or split into attn_k_b/v_b
};
std::string_view transform_name(HfTransform t);

// The GGUF architecture (general.architecture) of config.json's "architectures"[0], e.g.
// "MixtralForCausalLM" -> "llama"; nullopt for a class this table does not know.
std::optional<std::string_view> hf_architecture_of_class(std::string_view hf_class);
// The same for "model_type" ("qwen3_moe" -> "qwen3moe").
std::optional<std::string_view> hf_architecture_of_model_type(std::string_view model_type);
// "DeepseekV2ForCausalLM, ..." for messages.
std::string known_hf_classes();

struct HfNameMatch {
  std::string gguf;  // e.g. "blk.3.attn_q.weight"; for an expert, the stacked tensor's name
  HfTransform transform = HfTransform::kNone;
  int64_t layer = -1;   // -1: not a layer's tensor
  int64_t expert = -1;  // kStackExperts only
};

// The GGUF name of an HF tensor in architecture `arch` (a GGUF architecture name), or nullopt
// when the table has none. ".weight" and ".bias" carry over to the GGUF name.
std::optional<HfNameMatch> map_hf_name(std::string_view arch, std::string_view hf_name);

// Tensors llama.cpp's converter drops before mapping (rotary inverse frequencies, attention
// masks): they have no GGUF tensor.
bool hf_name_dropped(std::string_view hf_name);

}  // namespace gguf
