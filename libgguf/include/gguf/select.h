// Selectors shared by all tools (--layers, --role, --match) and their resolution against the
// tensor names of a model; an empty or impossible selection is an error, never a no-op.
#pragma once

#include <cstddef>
#include <regex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gguf/names.h"

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

// Parses "37-42,0-2,5" into sorted, merged inclusive ranges; usage error on bad syntax, a
// reversed range, a negative number or a layer above kMaxLayer.
std::vector<std::pair<int, int>> parse_layers(std::string_view spec);

// --layers values (each a comma list), --role values (each a role, the group "routed", or a
// comma list of those), --match values (regexes).
Selector parse_selector(const std::vector<std::string>& layer_specs,
                        const std::vector<std::string>& roles,
                        const std::vector<std::string>& patterns);

// Indices (ascending) of the names the selector matches. Throws an input gguf::Error whose
// message names `what` (e.g. the file) when a requested layer has no tensor at all, when a
// requested layer has no tensor matching the other criteria, or when nothing matches.
std::vector<size_t> select_tensors(const Selector& s, const std::vector<std::string>& names,
                                   std::string_view arch, std::string_view what);
// The same with each tensor's dimension count (n_dims.size() == names.size()), so roles agree
// with classify_tensor(name, arch, n_dims[i]).
std::vector<size_t> select_tensors(const Selector& s, const std::vector<std::string>& names,
                                   std::span<const int> n_dims, std::string_view arch,
                                   std::string_view what);

}  // namespace gguf
