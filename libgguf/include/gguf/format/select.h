// Selectors shared by all tools (--layers, --role, --match) and their resolution against the
// tensor names of a model; an empty or impossible selection is an error, never a no-op.
#pragma once

#include <cstddef>
#include <cstdint>
#include <regex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gguf/format/names.h"

namespace gguf {

// Names longer than this are refused when a --match pattern must be run on them.
inline constexpr size_t kMaxMatchedNameBytes = 1024;

// All parts combine with AND; an empty part matches everything.
struct Selector {
  std::vector<std::pair<int, int>> layers;  // inclusive ranges, sorted and merged
  std::vector<Role> roles;                  // OR within roles
  std::vector<std::string> patterns;        // OR within patterns, full-name match (ECMAScript)
  // The compiled patterns, filled by parse_selector() or compile(); when they are missing
  // (a hand-built Selector) matches() compiles the patterns itself.
  std::vector<std::regex> compiled;

  bool empty() const;
  // Compiles patterns into compiled; usage error naming an invalid pattern.
  void compile();
  bool matches(std::string_view name, const TensorName& tn) const;
  // E.g. "layers 37-42, role routed-gate|routed-up|routed-down, match 'blk\.1\..*'";
  // "all tensors" for an empty selector. Stable, for provenance keys.
  std::string describe() const;
};

// The longest pattern compile_regex takes (the library compiles recursively: far longer ones
// would overflow the stack).
inline constexpr size_t kMaxRegexBytes = 4096;

// The largest repetition count ("x{N}", "x{N,M}") a pattern may hold. The library parses counts
// and back-reference numbers into a long without an overflow check, and expands a count into
// that many copies of its atom (up to 100000 states): larger ones could never compile.
inline constexpr uint64_t kMaxRegexCount = 100000;

// Why std::regex must not see `pattern` (a count above kMaxRegexCount, or a back-reference
// number of more than 6 digits), or nullptr.
const char* regex_number_problem(std::string_view pattern);

// Compiles an ECMAScript pattern (polynomial matching where the library offers it, since it
// runs on names from untrusted files); a usage error names `option` ("--match") and the problem,
// a pattern longer than kMaxRegexBytes, or one regex_number_problem refuses.
std::regex compile_regex(const std::string& pattern, std::string_view option);
// Whether rx matches all of name (or, with `search`, some part of it); a usage error names
// `option` and `pattern` when the regex engine gives up on the name.
bool regex_found(std::string_view name, const std::regex& rx, std::string_view pattern,
                 std::string_view option, bool search);

// Parses "37-42,0-2,5" into sorted, merged inclusive ranges; usage error on bad syntax, a
// reversed range, a negative number or a layer above kMaxLayer.
std::vector<std::pair<int, int>> parse_layers(std::string_view spec);

// --layers values (each a comma list), --role values (each a role, the group "routed", or a
// comma list of those), --match values (regexes).
Selector parse_selector(const std::vector<std::string>& layer_specs,
                        const std::vector<std::string>& roles,
                        const std::vector<std::string>& patterns);

// How select_tensors() names its input and how strict it is about layers.
struct SelectOptions {
  // The file(s) the names come from, for messages. Several when the names are the union of
  // several files' tensors (gguf-diff): a layer is then missing only when no file has it.
  std::vector<std::string> files;
  // Also refuse a requested layer that exists but has no tensor matching the other criteria.
  // gguf-splice wants this: it copies layer-wise, and a donor layer without the requested
  // tensors is a mistake. Looking at or re-encoding a range (--layers 0-60 --role routed on a
  // model whose first layers are dense) is not.
  bool every_layer_must_match = false;
};

// Indices (ascending) of the names the selector matches. Throws an input gguf::Error whose
// message names the file(s) when a requested layer has no tensor at all, when nothing matches,
// or, with every_layer_must_match, when a requested layer has no tensor matching the other
// criteria.
std::vector<size_t> select_tensors(const Selector& s, const std::vector<std::string>& names,
                                   std::span<const int> n_dims, std::string_view arch,
                                   const SelectOptions& options);
// The same for the names of the one file `what`, without every_layer_must_match; n_dims
// (n_dims.size() == names.size()) are the tensors' dimension counts, so that roles agree with
// classify_tensor(name, arch, n_dims[i]).
std::vector<size_t> select_tensors(const Selector& s, const std::vector<std::string>& names,
                                   std::string_view arch, std::string_view what);
std::vector<size_t> select_tensors(const Selector& s, const std::vector<std::string>& names,
                                   std::span<const int> n_dims, std::string_view arch,
                                   std::string_view what);

}  // namespace gguf
