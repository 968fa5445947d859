// The tensor-name grammar and the role table: llama.cpp's GGUF names (deepseek2/4, qwen*moe,
// mixtral, llama, ...) and the Hugging Face checkpoint names they are converted from.
#include "gguf/format/names.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <cstdint>
#include <string>

#include "gguf/base/error.h"
#include "gguf/base/escape.h"

namespace gguf {
namespace {

constexpr std::array<Role, 12> kRoles = {
    Role::kRoutedGate, Role::kRoutedUp, Role::kRoutedDown, Role::kShared,
    Role::kRouter,     Role::kAttnProj, Role::kAttn,       Role::kDenseFfn,
    Role::kEmbedding,  Role::kOutput,   Role::kNorm,       Role::kOther,
};
constexpr std::array<std::string_view, 12> kRoleNames = {
    "routed-gate", "routed-up", "routed-down", "shared", "router", "attn-proj",
    "attn",        "dense-ffn", "embedding",   "output", "norm",   "other",
};

// Prefixes followed by "<digits>." that give the layer index.
constexpr std::array<std::string_view, 6> kLayerPrefixes = {
    "blk.", "enc.blk.", "dec.blk.", "layers.", "model.layers.", "model.language_model.layers.",
};
// Indexed prefixes that are not layers of the main stack (ds4's multi-token-prediction block):
// stripped to find the role, no layer.
constexpr std::array<std::string_view, 1> kUnlayeredPrefixes = {"mtp."};

// Architectures whose sequence mixer is not called attention in tensor names.
enum class Family { kAny, kRwkv, kSsm };

constexpr std::array<std::string_view, 4> kRwkvArchs = {"rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"};
constexpr std::array<std::string_view, 14> kSsmArchs = {
    "mamba",  "mamba2",    "jamba",  "falcon-h1", "nemotron_h",  "nemotron_h_moe", "granitehybrid",
    "plamo2", "qwen3next", "qwen35", "qwen35moe", "kimi-linear", "lfm2",           "lfm2moe",
};

enum class Match {
  kExact,      // the kind (expert-index segments written '#') equals text
  kDotSuffix,  // the kind ends with text, at its start or after a '.'
  kDotPrefix,  // the kind starts with text, followed by its end or a '.'
  kPrefix,     // the kind starts with text
  kSuffix,     // the kind ends with text
  kContains,   // text occurs in the kind
  kToken,      // text is one of the kind's '.'/'_'-separated tokens
  kNormToken,  // a token ends with "norm", is "norm<digits>", or is "ln"/"ln<digits>"
};

struct Rule {
  Match match;
  std::string_view text;
  Role role;
  Family family = Family::kAny;
  bool vector = false;  // the kind is legitimately 1-D: keep the role whatever n_dims says
};

using enum Match;
using R = Role;

// First match wins, so the order is the precedence. As in ds4's quantizer, routed experts
// come first and shared experts before attention; the router is checked after the shared
// experts so that qwen2moe's ffn_gate_inp_shexp (the shared expert's gate) stays shared.
constexpr Rule kRules[] = {
    // Routed experts: merged 3-D tensors, older per-expert tensors (blk.N.ffn_gate.E), and
    // Hugging Face experts (w1 = gate, w3 = up, w2 = down).
    {kExact, "ffn_gate_exps", R::kRoutedGate},
    {kExact, "ffn_up_exps", R::kRoutedUp},
    {kExact, "ffn_down_exps", R::kRoutedDown},
    {kExact, "ffn_gate_up_exps", R::kRoutedGate},  // gate and up fused in one tensor
    {kExact, "ffn_gate_chexps", R::kRoutedGate},
    {kExact, "ffn_up_chexps", R::kRoutedUp},
    {kExact, "ffn_down_chexps", R::kRoutedDown},
    {kExact, "ffn_gate.#", R::kRoutedGate},
    {kExact, "ffn_up.#", R::kRoutedUp},
    {kExact, "ffn_down.#", R::kRoutedDown},
    {kDotSuffix, "experts.#.w1", R::kRoutedGate},
    {kDotSuffix, "experts.#.w3", R::kRoutedUp},
    {kDotSuffix, "experts.#.w2", R::kRoutedDown},
    {kDotSuffix, "experts.#.gate_proj", R::kRoutedGate},
    {kDotSuffix, "experts.#.up_proj", R::kRoutedUp},
    {kDotSuffix, "experts.#.down_proj", R::kRoutedDown},
    // Shared experts. qwen2moe's shared-expert gate is a vector ([n_embd]) yet shared.
    {kExact, "ffn_gate_inp_shexp", R::kShared, Family::kAny, true},
    {kDotSuffix, "shared_expert_gate", R::kShared, Family::kAny, true},
    {kSuffix, "_shexp", R::kShared},
    {kContains, "shared_expert", R::kShared},
    // Router: gate logits, expert-selection bias, ds4's token-id-to-expert hash table.
    {kExact, "ffn_gate_inp", R::kRouter},
    {kExact, "exp_probs_b", R::kRouter},
    {kExact, "ffn_exp_probs_b", R::kRouter},
    {kExact, "ffn_gate_tid2eid", R::kRouter},
    {kDotPrefix, "ffn.gate", R::kRouter},
    {kDotPrefix, "mlp.gate", R::kRouter},
    {kDotPrefix, "block_sparse_moe.gate", R::kRouter},
    // deepseek4's hyper-connection mixers combine residual streams; "attn" in hc_attn_* names
    // the sub-block they feed, they are not attention weights.
    {kPrefix, "hc_", R::kOther},
    {kPrefix, "output_hc_", R::kOther},
    // Norms, before the attention rule so that attn_q_a_norm or indexer.k_norm are norms.
    {kNormToken, {}, R::kNorm},
    {kExact, "token_embd", R::kEmbedding},
    {kExact, "per_layer_token_embd", R::kEmbedding},
    {kExact, "position_embd", R::kEmbedding},
    {kExact, "token_types", R::kEmbedding},
    {kExact, "nextn.embed_tokens", R::kEmbedding},
    {kDotSuffix, "embed_tokens", R::kEmbedding},
    {kDotSuffix, "tok_embeddings", R::kEmbedding},
    {kDotSuffix, "wte", R::kEmbedding},
    {kExact, "embed", R::kEmbedding},
    {kExact, "output", R::kOutput},
    {kExact, "nextn.shared_head_head", R::kOutput},
    {kDotSuffix, "lm_head", R::kOutput},
    {kExact, "head", R::kOutput},
    // RWKV: time mixing is its attention, channel mixing its FFN.
    {kExact, "time_mix_key", R::kAttnProj, Family::kRwkv},
    {kExact, "time_mix_value", R::kAttnProj, Family::kRwkv},
    {kExact, "time_mix_receptance", R::kAttnProj, Family::kRwkv},
    {kExact, "time_mix_gate", R::kAttnProj, Family::kRwkv},
    {kExact, "time_mix_output", R::kAttnProj, Family::kRwkv},
    {kPrefix, "time_mix_", R::kAttn, Family::kRwkv},
    {kPrefix, "channel_mix_", R::kDenseFfn, Family::kRwkv},
    // State-space / linear-attention / short-convolution mixers stand where attention does.
    {kExact, "ssm_in", R::kAttnProj, Family::kSsm},
    {kExact, "ssm_out", R::kAttnProj, Family::kSsm},
    {kExact, "ssm_x", R::kAttnProj, Family::kSsm},
    {kExact, "ssm_dt", R::kAttnProj, Family::kSsm},
    {kExact, "ssm_ba", R::kAttnProj, Family::kSsm},
    {kExact, "ssm_alpha", R::kAttnProj, Family::kSsm},
    {kExact, "ssm_beta", R::kAttnProj, Family::kSsm},
    {kExact, "ssm_f_a", R::kAttnProj, Family::kSsm},
    {kExact, "ssm_f_b", R::kAttnProj, Family::kSsm},
    {kExact, "ssm_g_a", R::kAttnProj, Family::kSsm},
    {kExact, "ssm_g_b", R::kAttnProj, Family::kSsm},
    {kExact, "shortconv.in_proj", R::kAttnProj, Family::kSsm},
    {kExact, "shortconv.out_proj", R::kAttnProj, Family::kSsm},
    {kPrefix, "ssm_", R::kAttn, Family::kSsm},
    {kPrefix, "shortconv.", R::kAttn, Family::kSsm},
    // Attention projections: classic, fused, MLA (deepseek2: q_a/q_b, kv_a_mqa/kv_b, k_b/v_b;
    // deepseek4: kv, output_a/output_b), encoder-decoder, gated-attention output gate.
    {kExact, "attn_q", R::kAttnProj},
    {kExact, "attn_k", R::kAttnProj},
    {kExact, "attn_v", R::kAttnProj},
    {kExact, "attn_qkv", R::kAttnProj},
    {kExact, "attn_output", R::kAttnProj},
    {kExact, "attn_o", R::kAttnProj},
    {kExact, "attn_gate", R::kAttnProj},
    {kExact, "attn_q_a", R::kAttnProj},
    {kExact, "attn_q_b", R::kAttnProj},
    {kExact, "attn_kv", R::kAttnProj},
    {kExact, "attn_kv_a_mqa", R::kAttnProj},
    {kExact, "attn_kv_b", R::kAttnProj},
    {kExact, "attn_k_b", R::kAttnProj},
    {kExact, "attn_v_b", R::kAttnProj},
    {kExact, "attn_output_a", R::kAttnProj},
    {kExact, "attn_output_b", R::kAttnProj},
    {kExact, "cross_attn_q", R::kAttnProj},
    {kExact, "cross_attn_k", R::kAttnProj},
    {kExact, "cross_attn_v", R::kAttnProj},
    {kExact, "cross_attn_o", R::kAttnProj},
    {kExact, "vis_attn_qkv", R::kAttnProj},
    {kExact, "vis_attn_output", R::kAttnProj},
    {kDotSuffix, "self_attn.q_proj", R::kAttnProj},
    {kDotSuffix, "self_attn.k_proj", R::kAttnProj},
    {kDotSuffix, "self_attn.v_proj", R::kAttnProj},
    {kDotSuffix, "self_attn.o_proj", R::kAttnProj},
    {kDotSuffix, "self_attn.qkv_proj", R::kAttnProj},
    {kDotSuffix, "self_attn.q_a_proj", R::kAttnProj},
    {kDotSuffix, "self_attn.q_b_proj", R::kAttnProj},
    {kDotSuffix, "self_attn.kv_a_proj_with_mqa", R::kAttnProj},
    {kDotSuffix, "self_attn.kv_b_proj", R::kAttnProj},
    {kDotSuffix, "attn.wq_a", R::kAttnProj},
    {kDotSuffix, "attn.wq_b", R::kAttnProj},
    {kDotSuffix, "attn.wkv", R::kAttnProj},
    {kDotSuffix, "attn.wo_a", R::kAttnProj},
    {kDotSuffix, "attn.wo_b", R::kAttnProj},
    {kDotSuffix, "attention.wq", R::kAttnProj},
    {kDotSuffix, "attention.wk", R::kAttnProj},
    {kDotSuffix, "attention.wv", R::kAttnProj},
    {kDotSuffix, "attention.wo", R::kAttnProj},
    // Everything else of attention: sinks, deepseek4's compressor and indexer (its
    // indexer.attn_q_b too), relative-position biases.
    {kToken, "attn", R::kAttn},
    {kToken, "attention", R::kAttn},
    {kToken, "indexer", R::kAttn},
    // Dense feed-forward.
    {kExact, "ffn_gate", R::kDenseFfn},
    {kExact, "ffn_up", R::kDenseFfn},
    {kExact, "ffn_down", R::kDenseFfn},
    {kExact, "vis_gate", R::kDenseFfn},
    {kExact, "vis_up", R::kDenseFfn},
    {kExact, "vis_down", R::kDenseFfn},
    {kDotSuffix, "mlp.gate_proj", R::kDenseFfn},
    {kDotSuffix, "mlp.up_proj", R::kDenseFfn},
    {kDotSuffix, "mlp.down_proj", R::kDenseFfn},
    {kDotSuffix, "feed_forward.w1", R::kDenseFfn},
    {kDotSuffix, "feed_forward.w2", R::kDenseFfn},
    {kDotSuffix, "feed_forward.w3", R::kDenseFfn},
    {kDotSuffix, "ffn.w1", R::kDenseFfn},
    {kDotSuffix, "ffn.w2", R::kDenseFfn},
    {kDotSuffix, "ffn.w3", R::kDenseFfn},
};

bool is_digit(char c) { return c >= '0' && c <= '9'; }

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!is_digit(c)) return false;
  }
  return true;
}

template <size_t N>
bool contains(const std::array<std::string_view, N>& list, std::string_view s) {
  for (std::string_view x : list) {
    if (x == s) return true;
  }
  return false;
}

Family family_of(std::string_view arch) {
  if (contains(kRwkvArchs, arch)) return Family::kRwkv;
  if (contains(kSsmArchs, arch)) return Family::kSsm;
  return Family::kAny;
}

// Splits "<prefix><digits>.<rest>"; returns false when name does not start that way.
bool split_indexed(std::string_view name, std::string_view prefix, std::string_view& digits,
                   std::string_view& rest) {
  if (!name.starts_with(prefix)) return false;
  size_t i = prefix.size();
  const size_t start = i;
  while (i < name.size() && is_digit(name[i])) ++i;
  if (i == start || i >= name.size() || name[i] != '.') return false;
  digits = name.substr(start, i - start);
  rest = name.substr(i + 1);
  return true;
}

// The layer of a canonical decimal index (no leading zero) not above kMaxLayer; saturating
// so that any number of digits is harmless.
std::optional<int> layer_of(std::string_view digits) {
  if (digits.size() > 1 && digits[0] == '0') return std::nullopt;
  int64_t v = 0;
  for (char c : digits) {
    v = v * 10 + (c - '0');
    if (v > kMaxLayer) return std::nullopt;
  }
  return static_cast<int>(v);
}

// Expert indices and other all-digit segments become '#', so one rule covers every expert.
std::string normalise(std::string_view kind) {
  std::string out;
  out.reserve(kind.size());
  size_t pos = 0;
  while (true) {
    const size_t dot = kind.find('.', pos);
    const std::string_view seg =
        kind.substr(pos, dot == std::string_view::npos ? std::string_view::npos : dot - pos);
    if (all_digits(seg)) {
      out += '#';
    } else {
      out += seg;
    }
    if (dot == std::string_view::npos) break;
    out += '.';
    pos = dot + 1;
  }
  return out;
}

bool is_token_sep(char c) { return c == '.' || c == '_'; }

template <typename F>
bool any_token(std::string_view s, F&& pred) {
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = i;
    while (j < s.size() && !is_token_sep(s[j])) ++j;
    if (pred(s.substr(i, j - i))) return true;
    i = j + 1;
  }
  return false;
}

bool is_norm_token(std::string_view t) {
  if (t.ends_with("norm")) return true;
  if (t.starts_with("norm") && all_digits(t.substr(4))) return true;
  return t == "ln" || (t.starts_with("ln") && all_digits(t.substr(2)));
}

bool rule_matches(const Rule& r, std::string_view k) {
  switch (r.match) {
    case kExact:
      return k == r.text;
    case kDotSuffix:
      return k.ends_with(r.text) &&
             (k.size() == r.text.size() || k[k.size() - r.text.size() - 1] == '.');
    case kDotPrefix:
      return k.starts_with(r.text) && (k.size() == r.text.size() || k[r.text.size()] == '.');
    case kPrefix:
      return k.starts_with(r.text);
    case kSuffix:
      return k.ends_with(r.text);
    case kContains:
      return k.find(r.text) != std::string_view::npos;
    case kToken:
      return any_token(k, [&](std::string_view t) { return t == r.text; });
    case kNormToken:
      return any_token(k, is_norm_token);
  }
  return false;
}

// A 1-D tensor cannot be a matrix; only router tensors, norms, biases and the few vector
// kinds keep their role.
Role apply_dims(const Rule* rule, Role role, int n_dims, std::string_view suffix) {
  if (n_dims != 1 || suffix == "bias" || (rule && rule->vector)) return role;
  if (role == Role::kRouter || role == Role::kNorm) return role;
  return Role::kOther;
}

}  // namespace

std::string_view role_name(Role role) {
  const auto i = static_cast<size_t>(role);
  return i < kRoleNames.size() ? kRoleNames[i] : std::string_view("invalid");
}

std::span<const Role> all_roles() { return kRoles; }

std::vector<Role> parse_roles(std::string_view name) {
  std::string key;
  key.reserve(name.size());
  for (char c : name) {
    if (c == '_') c = '-';
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    key += c;
  }
  if (key == "routed") return {Role::kRoutedGate, Role::kRoutedUp, Role::kRoutedDown};
  for (size_t i = 0; i < kRoleNames.size(); ++i) {
    if (key == kRoleNames[i]) return {kRoles[i]};
  }
  usage_error(fmt::format("unknown role '{}' (valid roles: routed, {})", escape_for_terminal(name),
                          fmt::join(kRoleNames, ", ")));
}

TensorName classify_tensor(std::string_view name, std::string_view arch, int n_dims) {
  TensorName tn;
  std::string_view rest = name;
  std::string_view digits;
  bool prefixed = false;
  for (std::string_view p : kLayerPrefixes) {
    if (split_indexed(name, p, digits, rest)) {
      tn.layer = layer_of(digits);
      prefixed = true;
      break;
    }
  }
  if (!prefixed) {
    for (std::string_view p : kUnlayeredPrefixes) {
      if (split_indexed(name, p, digits, rest)) break;
    }
  }
  for (std::string_view s :
       {std::string_view("weight"), std::string_view("bias"), std::string_view("scale")}) {
    if (rest.size() > s.size() && rest.ends_with(s) && rest[rest.size() - s.size() - 1] == '.') {
      tn.suffix = rest.substr(rest.size() - s.size());
      rest.remove_suffix(s.size() + 1);
      break;
    }
  }
  tn.kind = rest;

  const std::string k = normalise(rest);
  const Family family = family_of(arch);
  const Rule* hit = nullptr;
  for (const Rule& r : kRules) {
    if (r.family != Family::kAny && r.family != family) continue;
    if (rule_matches(r, k)) {
      hit = &r;
      tn.role = r.role;
      break;
    }
  }
  tn.role = apply_dims(hit, tn.role, n_dims, tn.suffix);
  return tn;
}

}  // namespace gguf
