// Requant's type rules: parsing --tensor-type / --role-type / the named overrides, and
// resolving each tensor's type from them in llama-quantize's order.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>

#include "gguf/base/error.h"
#include "gguf/base/escape.h"
#include "gguf/codecs/codecs.h"
#include "gguf/format/names.h"
#include "ops/requant_parts.h"

namespace gguf {
namespace {

// "PATTERN=TYPE" or "ROLES=TYPE" split at the last '=' (a regex may hold one, a type never).
std::pair<std::string_view, std::string_view> split_rule(std::string_view option,
                                                         std::string_view value,
                                                         std::string_view what,
                                                         std::string_view example) {
  const size_t eq = value.rfind('=');
  if (eq == std::string_view::npos || eq == 0 || eq + 1 == value.size())
    usage_error(fmt::format("invalid {} value '{}': expected {}=TYPE, e.g. {}", option,
                            terminal_safe(value), what, example));
  return {value.substr(0, eq), value.substr(eq + 1)};
}

// A rule's type: a ggml type with an encoder (checked here, so that the usage error comes
// before any file is opened), or "keep".
std::optional<GgmlType> rule_type(std::string_view option, std::string_view type,
                                  std::string_view value) {
  std::string lower(type);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "keep") return std::nullopt;
  const auto t = parse_type(type);
  if (!t) usage_error(unknown_type_message(option, type));
  if (!can_encode(*t))
    usage_error(fmt::format("{} '{}': no encoder for {} yet", option, terminal_safe(value),
                            traits(*t).name));
  return t;
}

constexpr std::string_view kOutputName = "output.weight";

bool is_token_embedding_name(std::string_view name) {
  return name == "token_embd.weight" || name == "per_layer_token_embd.weight";
}

// Where a matching rule stands in llama-quantize's order (lower first), or -1 when the rule
// does not match. `pattern_matched`: some kPattern rule matches the name.
int rule_phase(const TypeRule& rule, std::string_view name, const TensorName& tn, bool tied,
               bool pattern_matched) {
  using Kind = TypeRule::Kind;
  switch (rule.kind) {
    case Kind::kTokenEmbedding:
      if (!is_token_embedding_name(name)) return -1;
      // llama-quantize lets a --tensor-type that names the large per-layer table take it (the
      // rule then comes after that pattern, so that a message names it).
      return name == "per_layer_token_embd.weight" && pattern_matched ? 3 : 0;
    case Kind::kOutput:
      if (name == kOutputName) return 1;
      // Tied embeddings: the token embedding is the output too, after the manual overrides.
      if (tied && rule.tied && is_token_embedding_name(name)) return 3;
      return -1;
    case Kind::kPattern:
      return regex_found(name, *rule.regex, rule.pattern, rule.option, true) ? 2 : -1;
    case Kind::kRoles:
      return std::find(rule.roles.begin(), rule.roles.end(), tn.role) != rule.roles.end() ? 4 : -1;
    case Kind::kRecipe:
      return rule.names && rule.names->count(std::string(name)) ? 5 : -1;
  }
  return -1;
}

std::string role_list(const std::vector<Role>& roles) {
  std::vector<std::string_view> names;
  for (Role r : roles) names.push_back(role_name(r));
  return fmt::format("{}", fmt::join(names, " or "));
}

// What no tensor is, for a rule that matched none: "no tensor " + this.
std::string unmatched(const TypeRule& rule, bool tied) {
  switch (rule.kind) {
    case TypeRule::Kind::kPattern:
      return fmt::format("has a name containing a match for '{}'", terminal_safe(rule.pattern));
    case TypeRule::Kind::kRoles:
      return fmt::format("has role {}", role_list(rule.roles));
    case TypeRule::Kind::kOutput:
      return tied && rule.tied
                 ? "is named output.weight, nor (the model's output being its token embedding) "
                   "token_embd.weight or per_layer_token_embd.weight"
                 : "is named output.weight";
    case TypeRule::Kind::kTokenEmbedding:
      return "is named token_embd.weight or per_layer_token_embd.weight";
    case TypeRule::Kind::kRecipe:
      return "has a name the rule decides there";
  }
  return "";
}

}  // namespace

// As typed: a regex's backslashes are not doubled (controls still are escaped).
std::string TypeRule::describe() const {
  if (kind == Kind::kRecipe)
    return fmt::format("{} '{}' rule '{}'", option, terminal_safe(file), terminal_safe(value));
  if (value.empty()) return option;
  return fmt::format("{} '{}'", option, terminal_safe(value));
}

TypeRule parse_tensor_type_rule(std::string_view value) {
  constexpr std::string_view kOption = "--tensor-type";
  const auto [pattern, type] = split_rule(kOption, value, "PATTERN", "ffn_down_exps=q2_K");
  TypeRule r;
  r.option = kOption;
  r.value = value;
  r.pattern = pattern;
  r.regex = compile_regex(r.pattern, kOption);
  r.type = rule_type(kOption, type, value);
  return r;
}

TypeRule parse_role_type_rule(std::string_view value) {
  constexpr std::string_view kOption = "--role-type";
  const auto [roles, type] = split_rule(kOption, value, "ROLE[,ROLE...]", "routed-down=q2_K");
  TypeRule r;
  r.kind = TypeRule::Kind::kRoles;
  r.option = kOption;
  r.value = value;
  try {
    r.roles = parse_selector({}, {std::string(roles)}, {}).roles;
  } catch (const Error& e) {
    usage_error(
        fmt::format("invalid {} value '{}': {}", kOption, terminal_safe(value), e.message()));
  }
  r.type = rule_type(kOption, type, value);
  return r;
}

TypeRule leave_output_tensor_rule() {
  TypeRule r = named_type_rule(TypeRule::Kind::kOutput, "--leave-output-tensor", "keep");
  r.value.clear();  // a flag: described by its name alone
  r.tied = false;   // output.weight alone, as in llama-quantize
  return r;
}

TypeRule named_type_rule(TypeRule::Kind kind, std::string_view option, std::string_view type) {
  TypeRule r;
  r.kind = kind;
  r.option = option;
  r.value = type;
  r.type = rule_type(option, type, type);
  return r;
}

namespace detail {

std::string type_list(const std::vector<GgmlType>& types) {
  std::vector<std::string_view> names;
  for (GgmlType t : types) names.push_back(traits(t).name);
  if (names.size() <= 1) return fmt::format("{}", fmt::join(names, ""));
  return fmt::format("{} and {}", fmt::join(names.begin(), names.end() - 1, ", "), names.back());
}

RuleMatcher::RuleMatcher(const Model& model, const std::vector<TypeRule>& rules)
    : rules_(rules), arch_(model.architecture()), uses_(rules.size()) {
  // llama-quantize's tied embeddings: a model without output.weight computes its output with
  // the token embedding.
  tied_ = !model.find(kOutputName);
  any_pattern_ = std::any_of(rules.begin(), rules.end(), [](const TypeRule& rule) {
    return rule.kind == TypeRule::Kind::kPattern;
  });
}

const TypeRule* RuleMatcher::decide(const TensorInfo& info, bool quantizable) {
  if (rules_.empty()) return nullptr;
  const TypeRule* decided_by = nullptr;
  // (The caller's require_ggml_name bounds the name a regex runs on to 63 bytes.)
  const TensorName tn = classify_tensor(info.name, arch_, ggml_dims(info.shape));
  bool pattern_matched = false;
  if (any_pattern_ && info.name == "per_layer_token_embd.weight")
    for (const TypeRule& rule : rules_)
      pattern_matched |= rule.kind == TypeRule::Kind::kPattern &&
                         regex_found(info.name, *rule.regex, rule.pattern, rule.option, true);
  // The matching rules in the order they are tried: by phase, then as given.
  std::vector<std::pair<int, size_t>> order;
  for (size_t k = 0; k < rules_.size(); ++k)
    if (const int phase = rule_phase(rules_[k], info.name, tn, tied_, pattern_matched); phase >= 0)
      order.emplace_back(phase, k);
  std::sort(order.begin(), order.end());
  for (const auto& entry : order) {
    const size_t k = entry.second;
    if (!quantizable) {
      if (!uses_[k].never) uses_[k].never = &info;
    } else if (decided_by) {
      if (!uses_[k].earlier) uses_[k].earlier = decided_by;
    } else {
      decided_by = &rules_[k];
      ++uses_[k].decided;
    }
  }
  return decided_by;
}

std::vector<std::string> RuleMatcher::report_unused(const std::string& model_path,
                                                    bool selected_only) const {
  std::vector<std::string> unused_named;
  for (size_t k = 0; k < rules_.size(); ++k) {
    if (uses_[k].decided) continue;
    const TypeRule& rule = rules_[k];
    std::string why;
    if (uses_[k].earlier)
      why = fmt::format(
          "every tensor it matches that can be re-encoded is given its type by an "
          "earlier rule, {} (the first rule that matches decides)",
          uses_[k].earlier->describe());
    else if (uses_[k].never)
      why = fmt::format(
          "it matches only tensors that are never re-encoded, such as '{}' (1-D "
          "tensors, biases, norms, the router, integer tensors and the small weights "
          "llama-quantize keeps)",
          escape_for_terminal(uses_[k].never->name));
    else
      why = fmt::format("no {} {}", selected_only ? "selected tensor" : "tensor",
                        unmatched(rule, tied_));
    std::string message = fmt::format("{} decides no tensor's type: {}", rule.describe(), why);
    if (rule.kind == TypeRule::Kind::kOutput || rule.kind == TypeRule::Kind::kTokenEmbedding ||
        rule.kind == TypeRule::Kind::kRecipe)
      unused_named.push_back(std::move(message));
    else
      throw Error(model_path, {}, std::nullopt, std::move(message));
  }
  return unused_named;
}

}  // namespace detail
}  // namespace gguf
