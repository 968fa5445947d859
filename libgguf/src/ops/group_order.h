// Internal: the order of summary groups keyed by role name or layer number, shared by the
// reports that summarise tensors that way (inspect, imatrix coverage).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "gguf/format/select.h"

namespace gguf::detail {

// Roles in enum order; layers numerically, tensors without a layer ("-") last. G has `key`.
template <class G>
void sort_role_groups(std::vector<G>& groups) {
  std::sort(groups.begin(), groups.end(), [](const G& a, const G& b) {
    return parse_roles(a.key).front() < parse_roles(b.key).front();
  });
}
template <class G>
void sort_layer_groups(std::vector<G>& groups) {
  std::sort(groups.begin(), groups.end(), [](const G& a, const G& b) {
    const bool an = a.key == "-", bn = b.key == "-";
    if (an != bn) return bn;
    return an ? false : std::stoll(a.key) < std::stoll(b.key);
  });
}

}  // namespace gguf::detail
