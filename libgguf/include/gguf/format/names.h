// The tensor-name grammar: which layer a tensor belongs to and which role it plays (routed
// expert, shared expert, router, attention, ...), derived from its name alone. Pure functions.
#pragma once

#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace gguf {

enum class Role {
  kRoutedGate,  // ffn_gate_exps, experts.E.w1
  kRoutedUp,    // ffn_up_exps, experts.E.w3
  kRoutedDown,  // ffn_down_exps, experts.E.w2
  kShared,      // *_shexp, shared experts and their gate
  kRouter,      // ffn_gate_inp, exp_probs_b (expert bias), hash-routing tables
  kAttnProj,    // attention projections: attn_q/k/v/output, MLA attn_q_a/q_b/kv/output_a/b
  kAttn,        // other attention tensors: sinks, compressor, indexer
  kDenseFfn,    // ffn_gate/up/down of dense layers
  kEmbedding,   // token_embd
  kOutput,      // output (the LM head)
  kNorm,        // *_norm
  kOther,       // rope_freqs, hyper-connection mixers, anything unknown
};

// "routed-gate", "routed-up", "routed-down", "shared", "router", "attn-proj", "attn",
// "dense-ffn", "embedding", "output", "norm", "other".
std::string_view role_name(Role role);

// All twelve roles in declaration order.
std::span<const Role> all_roles();

// A role name or the group "routed" (= the three routed roles), in any case, '_' accepted for
// '-'. Throws a usage error listing the valid names when the name is unknown.
std::vector<Role> parse_roles(std::string_view name);

// Layer indices above this are treated as absent: "blk.99999999999.x" has no layer.
inline constexpr int kMaxLayer = 999999;

struct TensorName {
  std::optional<int> layer;  // from "blk.N." (also "layers.N.", "model.layers.N.", ...)
  Role role = Role::kOther;
  // The name without its layer prefix and its ".weight"/".bias"/".scale" suffix, e.g.
  // "ffn_up_exps" or "ffn_gate.3"; a view into the classified name.
  std::string_view kind;
  // "weight", "bias", "scale", or empty; a view into the classified name.
  std::string_view suffix;

  // A routed gate or up expert weight (not a bias such as gpt-oss's ffn_gate_exps.bias): the
  // tensors ds4 needs to share one type in a layer.
  bool is_gate_or_up_weight() const {
    return (role == Role::kRoutedGate || role == Role::kRoutedUp) &&
           (suffix.empty() || suffix == "weight");
  }
};

// Classifies a tensor by its name. arch is the general.architecture value (may be empty);
// n_dims is the tensor's dimension count, 0 when unknown: a 1-D tensor that is neither a bias
// nor a router tensor is a norm or "other", never a matrix role. Any bytes are accepted.
TensorName classify_tensor(std::string_view name, std::string_view arch = {}, int n_dims = 0);

}  // namespace gguf
