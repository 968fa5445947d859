// Internal: the steps of requant() (requant.cpp): which rule decides each tensor's type and
// what to say of rules that decide none (requant_rules.cpp), and the plan of one re-encoded
// tensor (requant_tensor.cpp).
#pragma once

#include <string>
#include <vector>

#include "gguf/ops/requant.h"

namespace gguf::detail {

// Resolves the type of each selected tensor from the rules, tried in llama-quantize's order
// (the first that matches decides), and remembers what each rule matched.
class RuleMatcher {
 public:
  RuleMatcher(const Model& model, const std::vector<TypeRule>& rules);

  // The rule that decides the type of a selected tensor, or null (then --type does).
  const TypeRule* decide(const TensorInfo& info, bool quantizable);

  // A rule that decides nothing is a mistake in the command line (a misspelt name, a role the
  // architecture does not have, a rule hidden behind an earlier one): throws an error naming
  // model_path and why, for a --tensor-type or --role-type rule; returns the messages for
  // llama-quantize's two named overrides, which are given to every model alike (one has no
  // output.weight, another has token_embd decided by --token-embedding-type).
  std::vector<std::string> report_unused(const std::string& model_path, bool selected_only) const;

 private:
  // Per rule: the tensors it decides; a never-re-encoded tensor it matches; for a quantizable
  // tensor it matches that an earlier rule decides, that rule.
  struct RuleUse {
    size_t decided = 0;
    const TensorInfo* never = nullptr;
    const TypeRule* earlier = nullptr;
  };
  const std::vector<TypeRule>& rules_;
  std::string arch_;
  bool tied_ = false, any_pattern_ = false;
  std::vector<RuleUse> uses_;
};

// "a", "a and b", "a, b and c": type names for messages.
std::string type_list(const std::vector<GgmlType>& types);

// What planning the re-encoded tensors gathers for requant()'s notes.
struct EncodeNotes {
  std::vector<GgmlType> energy_types;   // encoded with column energy for lack of an imatrix
  std::vector<GgmlType> encoded_types;  // every target, in first-use order
  bool requantized = false;             // some quantized tensor was re-encoded lossily
};

// Plans tensor t re-encoded to type `to` (decided_by: the rule that chose it, or null for
// --type): fills row (type, bytes, action, importance, lossiness) and pt (type, bytes and the
// producer that decodes and encodes it, or transcodes it exactly with --exact). Throws naming
// the tensor when it cannot be decoded, its rows do not fit the type's blocks, or --exact has
// no exact path.
void plan_encode(const TensorRef& t, GgmlType to, const TypeRule* decided_by,
                 const RequantOptions& o, RequantRow& row, PlanTensor& pt, EncodeNotes& notes);

}  // namespace gguf::detail
