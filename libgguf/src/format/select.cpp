// Selectors: parsing --layers/--role/--match and resolving them against a model's tensor
// names. A selection that cannot be satisfied is an error, because a splice that silently
// swaps nothing looks exactly like one that worked.
#include "gguf/format/select.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>
#include <optional>

#include "gguf/base/error.h"
#include "gguf/base/escape.h"

namespace gguf {
namespace {

using Ranges = std::vector<std::pair<int, int>>;

constexpr std::string_view kLayersHint = "expected N or N-M, e.g. 37-42";
// Lists in error messages stop after this many ranges (a crafted file can have many layers).
constexpr size_t kMaxListedRanges = 8;

Ranges merge(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (const auto& [a, b] : r) {
    if (!out.empty() && a <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, b);
    } else {
      out.emplace_back(a, b);
    }
  }
  return out;
}

// "0-2,5,37-42"; with a limit, further ranges become ",...".
std::string format_ranges(const Ranges& r, size_t limit = SIZE_MAX) {
  std::string out;
  for (size_t i = 0; i < r.size(); ++i) {
    if (i == limit) {
      out += ",...";
      break;
    }
    if (i) out += ',';
    out += r[i].first == r[i].second ? fmt::format("{}", r[i].first)
                                     : fmt::format("{}-{}", r[i].first, r[i].second);
  }
  return out;
}

bool is_single(const Ranges& r) { return r.size() == 1 && r[0].first == r[0].second; }

Ranges to_ranges(const std::vector<int>& sorted_unique) {
  Ranges r;
  for (int v : sorted_unique) {
    if (!r.empty() && v == r.back().second + 1) {
      r.back().second = v;
    } else {
      r.emplace_back(v, v);
    }
  }
  return r;
}

// The parts of `wanted` not in `have` (sorted, unique), without walking range by range
// element (a range may span up to kMaxLayer layers).
Ranges missing_from(const Ranges& wanted, const std::vector<int>& have) {
  Ranges missing;
  for (const auto& [a, b] : wanted) {
    int cur = a;
    auto it = std::lower_bound(have.begin(), have.end(), a);
    while (cur <= b) {
      if (it != have.end() && *it == cur) {
        ++cur;
        ++it;
        continue;
      }
      const int last = it != have.end() ? std::min(*it - 1, b) : b;
      missing.emplace_back(cur, last);
      cur = last + 1;
    }
  }
  return missing;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

[[noreturn]] void bad_layers(std::string_view spec, const std::string& why) {
  usage_error(fmt::format("invalid --layers value '{}': {}", escape_for_terminal(spec), why));
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Reads the digits at the front of s; nullopt when there are none.
std::optional<std::string_view> take_digits(std::string_view& s) {
  size_t n = 0;
  while (n < s.size() && is_digit(s[n])) ++n;
  if (n == 0) return std::nullopt;
  std::string_view d = s.substr(0, n);
  s.remove_prefix(n);
  return d;
}

int layer_number(std::string_view spec, std::string_view digits) {
  int64_t v = 0;
  for (char c : digits) {
    v = v * 10 + (c - '0');
    if (v > kMaxLayer) {
      bad_layers(spec, fmt::format("layer {} is above the maximum of {}", digits, kMaxLayer));
    }
  }
  return static_cast<int>(v);
}

std::pair<int, int> parse_item(std::string_view spec, std::string_view item) {
  const std::string syntax =
      fmt::format("'{}' is not a layer or a range ({})", escape_for_terminal(item), kLayersHint);
  std::string_view s = item;
  if (s.size() > 1 && s[0] == '-' && is_digit(s[1])) {
    bad_layers(spec, "layer numbers cannot be negative");
  }
  const auto first = take_digits(s);
  if (!first) bad_layers(spec, syntax);
  const int a = layer_number(spec, *first);
  if (s.empty()) return {a, a};
  if (s[0] != '-') bad_layers(spec, syntax);
  s.remove_prefix(1);
  if (s.size() > 1 && s[0] == '-' && is_digit(s[1])) {
    bad_layers(spec, "layer numbers cannot be negative");
  }
  const auto second = take_digits(s);
  if (!second || !s.empty()) bad_layers(spec, syntax);
  const int b = layer_number(spec, *second);
  if (b < a) bad_layers(spec, fmt::format("range {}-{} runs backwards (write {}-{})", a, b, b, a));
  return {a, b};
}

std::string_view regex_problem(std::regex_constants::error_type code) {
  using namespace std::regex_constants;
  switch (code) {
    case error_collate:
      return "invalid collating element or character class";
    case error_ctype:
      return "invalid character class";
    case error_escape:
      return "invalid escape sequence";
    case error_backref:
      return "invalid back-reference";
    case error_brack:
      return "unmatched '['";
    case error_paren:  // libstdc++ also reports a leading quantifier ("*x") this way
      return "unbalanced parenthesis or '*', '+', '?' with nothing to repeat";
    case error_brace:
      return "unmatched '{'";
    case error_badbrace:
      return "invalid repetition count in '{}'";
    case error_range:
      return "invalid character range";
    case error_space:
      return "pattern is too large";
    case error_badrepeat:
      return "'*', '+', '?' or '{' has nothing to repeat";
    case error_complexity:
      return "back-references are not supported";
    case error_stack:
      return "pattern is too complex";
    default:
      return "invalid pattern";
  }
}

// The end of the run of decimal digits that starts at p[i].
size_t digits_end(std::string_view p, size_t i) {
  while (i < p.size() && p[i] >= '0' && p[i] <= '9') ++i;
  return i;
}

bool number_too_large(std::string_view digits) {
  uint64_t v = 0;
  for (char c : digits) {
    v = v * 10 + static_cast<uint64_t>(c - '0');
    if (v > kMaxRegexCount) return true;
  }
  return false;
}

}  // namespace

const char* regex_number_problem(std::string_view p) {
  // Brackets are not tracked: a '{' inside "[...]" is an ordinary character, so at worst a
  // class holding '{' and then seven digits is refused as well.
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '\\') {
      const size_t end = digits_end(p, i + 1);
      if (end - (i + 1) > 6) return "back-references are not supported";
      i = std::max(i + 1, end - 1);  // past the escaped character or the digits
    } else if (p[i] == '{') {
      const size_t end = digits_end(p, i + 1);
      if (number_too_large(p.substr(i + 1, end - (i + 1))))
        return "pattern is too large (a repetition count above 100000)";
      if (end < p.size() && p[end] == ',') {
        const size_t max_end = digits_end(p, end + 1);
        if (number_too_large(p.substr(end + 1, max_end - (end + 1))))
          return "pattern is too large (a repetition count above 100000)";
      }
    }
  }
  return nullptr;
}

std::regex compile_regex(const std::string& pattern, std::string_view option) {
  if (pattern.empty()) usage_error(fmt::format("invalid {} regex '': empty pattern", option));
  // The library compiles a pattern recursively, one stack frame or more per character: a
  // pattern of tens of thousands of bytes (or nested groups) would overflow the stack.
  if (pattern.size() > kMaxRegexBytes)
    usage_error(
        fmt::format("invalid {} regex '{}...': {} bytes, longer than {} (give several "
                    "shorter patterns instead)",
                    option, terminal_safe(pattern.substr(0, 40)), pattern.size(), kMaxRegexBytes));
  if (const char* problem = regex_number_problem(pattern))
    usage_error(fmt::format("invalid {} regex '{}': {}", option, terminal_safe(pattern), problem));
  // Polynomial (automaton) matching where the library offers it: a pattern run against
  // untrusted names must not backtrack exponentially.
  auto flags = std::regex::ECMAScript | std::regex::nosubs;
#ifdef __GLIBCXX__
  flags |= std::regex_constants::__polynomial;
#endif
  try {
    return std::regex(pattern, flags);
  } catch (const std::regex_error& e) {
    usage_error(fmt::format("invalid {} regex '{}': {}", option, terminal_safe(pattern),
                            regex_problem(e.code())));
  }
}

bool regex_found(std::string_view name, const std::regex& rx, std::string_view pattern,
                 std::string_view option, bool search) {
  try {
    return search ? std::regex_search(name.begin(), name.end(), rx)
                  : std::regex_match(name.begin(), name.end(), rx);
  } catch (const std::regex_error& e) {
    usage_error(fmt::format("{} regex '{}' failed on a tensor name: {}", option,
                            terminal_safe(pattern), regex_problem(e.code())));
  }
}

namespace {

bool any_regex_match(std::string_view name, const std::vector<std::regex>& rx,
                     const std::vector<std::string>& patterns) {
  for (size_t i = 0; i < rx.size(); ++i)
    if (regex_found(name, rx[i], patterns[i], "--match", false)) return true;
  return false;
}

// "role ..., match ..." without the layers: what a requested layer failed to provide.
std::string describe_criteria(const Selector& s) {
  Selector rest = s;
  rest.layers.clear();
  return rest.describe();
}

std::string layers_phrase(const Ranges& r, std::string_view one, std::string_view many) {
  return fmt::format("{} {} {}", is_single(r) ? "layer" : "layers",
                     format_ranges(r, kMaxListedRanges), is_single(r) ? one : many);
}

}  // namespace

bool Selector::empty() const { return layers.empty() && roles.empty() && patterns.empty(); }

void Selector::compile() {
  compiled.clear();
  compiled.reserve(patterns.size());
  for (const std::string& p : patterns) compiled.push_back(compile_regex(p, "--match"));
}

bool Selector::matches(std::string_view name, const TensorName& tn) const {
  if (!layers.empty()) {
    if (!tn.layer) return false;
    const int l = *tn.layer;
    const bool in = std::any_of(layers.begin(), layers.end(),
                                [l](const auto& r) { return l >= r.first && l <= r.second; });
    if (!in) return false;
  }
  if (!roles.empty() && std::find(roles.begin(), roles.end(), tn.role) == roles.end()) {
    return false;
  }
  if (!patterns.empty()) {
    // select_tensors refuses such names with an error; here they simply do not match.
    if (name.size() > kMaxMatchedNameBytes) return false;
    if (compiled.size() == patterns.size()) return any_regex_match(name, compiled, patterns);
    Selector copy = *this;
    copy.compile();
    return any_regex_match(name, copy.compiled, patterns);
  }
  return true;
}

std::string Selector::describe() const {
  std::vector<std::string> parts;
  if (!layers.empty()) {
    parts.push_back(
        fmt::format("{} {}", is_single(layers) ? "layer" : "layers", format_ranges(layers)));
  }
  if (!roles.empty()) {
    std::vector<std::string_view> names;
    for (Role r : roles) names.push_back(role_name(r));
    parts.push_back(fmt::format("role {}", fmt::join(names, "|")));
  }
  if (!patterns.empty()) {
    std::vector<std::string> quoted;
    for (const std::string& p : patterns) quoted.push_back(fmt::format("'{}'", p));
    parts.push_back(fmt::format("match {}", fmt::join(quoted, "|")));
  }
  if (parts.empty()) return "all tensors";
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::vector<std::pair<int, int>> parse_layers(std::string_view spec) {
  if (trim(spec).empty()) bad_layers(spec, fmt::format("empty value ({})", kLayersHint));
  Ranges out;
  size_t pos = 0;
  while (true) {
    const size_t comma = spec.find(',', pos);
    const std::string_view item = trim(
        spec.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos));
    if (item.empty()) bad_layers(spec, "empty item in the list");
    out.push_back(parse_item(spec, item));
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return merge(std::move(out));
}

Selector parse_selector(const std::vector<std::string>& layer_specs,
                        const std::vector<std::string>& roles,
                        const std::vector<std::string>& patterns) {
  Selector s;
  Ranges all;
  for (const std::string& spec : layer_specs) {
    const Ranges r = parse_layers(spec);
    all.insert(all.end(), r.begin(), r.end());
  }
  s.layers = merge(std::move(all));
  for (const std::string& value : roles) {
    size_t pos = 0;
    const std::string_view v = value;
    while (true) {
      const size_t comma = v.find(',', pos);
      const std::string_view item = trim(
          v.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos));
      for (Role r : parse_roles(item)) s.roles.push_back(r);
      if (comma == std::string_view::npos) break;
      pos = comma + 1;
    }
  }
  // Canonical order, so that describe() (a provenance key) does not depend on option order.
  std::sort(s.roles.begin(), s.roles.end());
  s.roles.erase(std::unique(s.roles.begin(), s.roles.end()), s.roles.end());
  s.patterns = patterns;
  s.compile();
  return s;
}

std::vector<size_t> select_tensors(const Selector& s, const std::vector<std::string>& names,
                                   std::string_view arch, std::string_view what) {
  return select_tensors(s, names, {}, arch, SelectOptions{.files = {std::string(what)}});
}

std::vector<size_t> select_tensors(const Selector& s, const std::vector<std::string>& names,
                                   std::span<const int> n_dims, std::string_view arch,
                                   std::string_view what) {
  return select_tensors(s, names, n_dims, arch, SelectOptions{.files = {std::string(what)}});
}

std::vector<size_t> select_tensors(const Selector& s, const std::vector<std::string>& names,
                                   std::span<const int> n_dims, std::string_view arch,
                                   const SelectOptions& options) {
  if (!n_dims.empty() && n_dims.size() != names.size()) {
    throw Error(fmt::format("select_tensors: {} dimension counts for {} names", n_dims.size(),
                            names.size()));
  }
  // "'a.gguf'", or "'a.gguf' or 'b.gguf'" for the union of two files' tensors.
  std::vector<std::string> quoted;
  for (const std::string& f : options.files) {
    std::string q = fmt::format("'{}'", escape_for_terminal(f));
    if (std::find(quoted.begin(), quoted.end(), q) == quoted.end()) quoted.push_back(std::move(q));
  }
  const bool several = quoted.size() > 1;
  const std::string file = fmt::format("{}", fmt::join(quoted, " or "));
  if (names.empty()) {
    throw Error(fmt::format("{} {} no tensors to select from", file, several ? "have" : "has"));
  }

  Selector sel = s;
  if (sel.compiled.size() != sel.patterns.size()) sel.compile();
  std::vector<TensorName> tns;
  tns.reserve(names.size());
  std::vector<int> present;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!sel.patterns.empty() && names[i].size() > kMaxMatchedNameBytes) {
      throw Error(
          fmt::format("tensor '{}...' in {}: name of {} bytes is too long to match against --match "
                      "(limit {} bytes)",
                      escape_for_terminal(std::string_view(names[i]).substr(0, 64)), file,
                      names[i].size(), kMaxMatchedNameBytes));
    }
    tns.push_back(classify_tensor(names[i], arch, n_dims.empty() ? 0 : n_dims[i]));
    if (tns.back().layer) present.push_back(*tns.back().layer);
  }
  std::sort(present.begin(), present.end());
  present.erase(std::unique(present.begin(), present.end()), present.end());

  if (!sel.layers.empty()) {
    const Ranges missing = missing_from(sel.layers, present);
    if (!missing.empty()) {
      const std::string have =
          present.empty()
              ? fmt::format("{} no per-layer tensors", several ? "they have" : "it has")
              : fmt::format("layers {}", format_ranges(to_ranges(present), kMaxListedRanges));
      throw Error(fmt::format(
          "{} in {} ({})", layers_phrase(missing, "does not exist", "do not exist"), file, have));
    }
  }

  std::vector<size_t> out;
  std::vector<int> matched_layers;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!sel.matches(names[i], tns[i])) continue;
    out.push_back(i);
    if (tns[i].layer) matched_layers.push_back(*tns[i].layer);
  }

  // describe() words each part by its option ("match 'x'"), hence "selected by" rather than
  // "matches" in the messages.
  if (options.every_layer_must_match && !sel.layers.empty() &&
      (!sel.roles.empty() || !sel.patterns.empty())) {
    std::sort(matched_layers.begin(), matched_layers.end());
    matched_layers.erase(std::unique(matched_layers.begin(), matched_layers.end()),
                         matched_layers.end());
    const Ranges empty_layers = missing_from(sel.layers, matched_layers);
    if (!empty_layers.empty()) {
      throw Error(fmt::format("{} {} {} no tensor selected by {}",
                              layers_phrase(empty_layers, "in", "in"), file,
                              is_single(empty_layers) ? "has" : "have", describe_criteria(sel)));
    }
  }
  if (out.empty()) {
    throw Error(fmt::format("no tensor in {} is selected by {}", file, sel.describe()));
  }
  return out;
}

}  // namespace gguf
