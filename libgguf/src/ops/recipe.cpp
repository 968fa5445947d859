// A model's type recipe (gguf-inspect --recipe) and its renderers, and the reader of the
// --tensor-type-file format llama-quantize reads.
#include "gguf/ops/recipe.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "gguf/base/error.h"
#include "gguf/base/escape.h"
#include "gguf/codecs/codecs.h"
#include "gguf/format/json.h"
#include "gguf/io/source.h"

namespace gguf {
namespace {

double bpw(uint64_t bytes, uint64_t params) {
  return params ? 8.0 * static_cast<double>(bytes) / static_cast<double>(params) : 0.0;
}

struct RuleTotals {
  uint64_t params = 0, bytes = 0;
};

RuleTotals totals(const Recipe& r, const RecipeRule& rule) {
  RuleTotals t;
  for (size_t i : rule.tensors) {
    t.params += r.params[i];
    t.bytes += r.bytes[i];
  }
  return t;
}

// llama-quantize reads tokens with `file >> arg`: the C locale's whitespace separates them.
bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

// A --tensor-type-file larger than this is not a list of rules.
constexpr uint64_t kMaxTypeFileBytes = uint64_t{16} << 20;

}  // namespace

Recipe extract_recipe(const Model& model, const Selector& selector) {
  Recipe r;
  r.files = model.paths();
  const std::string arch = model.architecture();
  std::vector<bool> selected(model.tensors().size(), selector.empty());
  if (!selector.empty())
    for (size_t i : select_in(model, selector)) selected[i] = true;
  for (size_t i = 0; i < model.tensors().size(); ++i) {
    const TensorRef& t = model.tensors()[i];
    const TensorInfo& info = *t.info;
    RecipeTensor rt{info.name, classify_tensor(info.name, arch, ggml_dims(info.shape)).role, {}};
    if (selected[i] && is_quantizable(info, arch)) {
      const TypeTraits* tt = sized_type(info.type_id);
      if (!tt)
        throw Error(t.file->path(), tensor_object(info.name), info.type_offset(),
                    fmt::format("type id {} is {}: a recipe rule cannot name it", info.type_id,
                                find_type(info.type_id) ? "a type ggml no longer has"
                                                        : "not a ggml type this build knows"));
      rt.type = static_cast<GgmlType>(tt->id);
    } else {
      ++r.copied;
    }
    r.tensors.push_back(std::move(rt));
    r.shapes.push_back(info.shape);
    r.params.push_back(info.n_elements);
    r.bytes.push_back(info.bytes.value_or(0));
  }
  try {
    r.rules = compact_type_rules(r.tensors);
  } catch (const Error& e) {
    throw e.with_context(model.path());
  }
  return r;
}

std::string render_recipe_text(const Recipe& r) {
  std::string out;
  for (const auto& rule : r.rules) out += rule.text() + "\n";
  return out;
}

std::string render_recipe_json(const Recipe& r) {
  nlohmann::json j;
  j["files"] = nlohmann::json::array();
  for (const auto& f : r.files) j["files"].push_back(utf8_or_escaped(f));
  j["rules"] = nlohmann::json::array();
  for (const auto& rule : r.rules) {
    const RuleTotals t = totals(r, rule);
    nlohmann::json names = nlohmann::json::array();
    for (size_t i : rule.tensors) names.push_back(utf8_or_escaped(r.tensors[i].name));
    j["rules"].push_back({{"pattern", rule.pattern},
                          {"type", traits(rule.type).name},
                          {"rule", rule.text()},
                          {"tensors", std::move(names)},
                          {"params", t.params},
                          {"bytes", t.bytes},
                          {"bpw", bpw(t.bytes, t.params)}});
  }
  j["copied"] = nlohmann::json::array();
  for (const auto& t : r.tensors)
    if (!t.type) j["copied"].push_back(utf8_or_escaped(t.name));
  return dump_json(j, 2) + "\n";
}

std::string recipe_summary(const Recipe& r) {
  uint64_t params = 0, bytes = 0;
  size_t decided = 0;
  for (const auto& rule : r.rules) {
    const RuleTotals t = totals(r, rule);
    params += t.params;
    bytes += t.bytes;
    decided += rule.tensors.size();
  }
  return fmt::format("{} rule{} decide{} {} tensor{} ({:.2f} bpw); {} tensor{} copied as {}",
                     r.rules.size(), r.rules.size() == 1 ? "" : "s", r.rules.size() == 1 ? "s" : "",
                     decided, decided == 1 ? "" : "s", bpw(bytes, params), r.copied,
                     r.copied == 1 ? " is" : "s are", r.copied == 1 ? "it is" : "they are");
}

std::vector<TypeRule> parse_tensor_type_file(std::string_view text, const std::string& path) {
  std::vector<TypeRule> rules;
  const std::string file = terminal_safe(path);
  size_t line = 1;
  for (size_t i = 0; i < text.size();) {
    if (is_space(text[i])) {
      line += text[i] == '\n';
      ++i;
      continue;
    }
    size_t end = i;
    while (end < text.size() && !is_space(text[end])) ++end;
    const std::string_view token = text.substr(i, end - i);
    i = end;
    if (token.front() == '#') {  // our extension: the rest of the line is a comment
      while (i < text.size() && text[i] != '\n') ++i;
      continue;
    }
    const std::string where = fmt::format("--tensor-type-file {}:{}", file, line);
    const auto fail = [&](std::string_view why) {
      usage_error(fmt::format("{}: token '{}' {}", where, escape_for_terminal(token), why));
    };
    // As llama-quantize: split at the first '=' (a pattern cannot hold one), the pattern
    // lowercased, the type any case.
    const size_t eq = token.find('=');
    if (eq == std::string_view::npos) fail("is not PATTERN=TYPE");
    if (eq == 0) fail("has no pattern before '='");
    if (eq + 1 == token.size()) fail("has no type after '='");
    std::string pattern(token.substr(0, eq));
    for (char& c : pattern) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const std::string_view type = token.substr(eq + 1);
    std::string lower(type);
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower == "keep")
      fail(
          "is not a ggml type (llama-quantize would refuse the file): give it on the command "
          "line as --tensor-type PATTERN=keep");
    const auto t = parse_type(type);
    if (!t)
      fail(fmt::format("has an unknown type '{}' (ggml type names: q4_K, iq2_xxs, q8_0, f16, ...)",
                       escape_for_terminal(type)));
    if (!can_encode(*t))
      fail(fmt::format("has a type without an encoder yet: {}", traits(*t).name));
    TypeRule r;
    r.option = where;
    r.value = token;
    r.pattern = pattern;
    try {
      r.regex = compile_regex(r.pattern, "X");
    } catch (const Error& e) {
      // compile_regex's "invalid X regex 'PATTERN': PROBLEM", the token already named.
      const std::string prefix = fmt::format("invalid X regex '{}': ", terminal_safe(r.pattern));
      std::string_view problem = e.message();
      if (problem.starts_with(prefix)) problem.remove_prefix(prefix.size());
      fail(fmt::format("has an invalid regex: {}", problem));
    }
    r.type = t;
    rules.push_back(std::move(r));
  }
  return rules;
}

std::vector<TypeRule> read_tensor_type_file(const std::string& path) {
  const auto source = open_file_source(path);
  if (source->size() > kMaxTypeFileBytes)
    throw Error(path, {}, std::nullopt,
                fmt::format("{} bytes is too large for a --tensor-type-file (at most {})",
                            source->size(), kMaxTypeFileBytes));
  const auto bytes = source->bytes(0, source->size());
  return parse_tensor_type_file(
      std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), path);
}

}  // namespace gguf
