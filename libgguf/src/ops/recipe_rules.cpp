// compact_type_rules: a per-tensor type assignment as few PATTERN=TYPE rules (grouped by type,
// role and layer ranges), each checked against every name the way llama-quantize reads it.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <regex>
#include <set>

#include "gguf/base/error.h"
#include "gguf/ops/recipe.h"

namespace gguf {
namespace {

// A name split as blk.N.<kind>; layer -1 for a name outside layers (kind is then the name).
struct Parsed {
  int layer = -1;
  std::string kind;
};

Parsed parse_name(std::string_view name) {
  constexpr std::string_view kBlk = "blk.";
  if (name.starts_with(kBlk)) {
    size_t i = kBlk.size();
    size_t j = i;
    while (j < name.size() && j - i < 6 && std::isdigit(static_cast<unsigned char>(name[j]))) ++j;
    // No leading zeros: the layer alternation matches canonical numbers only.
    if (j > i && j < name.size() && name[j] == '.' && j + 1 < name.size() &&
        (name[i] != '0' || j == i + 1))
      return {std::stoi(std::string(name.substr(i, j - i))), std::string(name.substr(j + 1))};
  }
  return {-1, std::string(name)};
}

// A literal as a pattern that reads the same lowercased and holds no whitespace, '=' or '#':
// [a-z0-9_] as they are, '.' escaped, every other byte as \xhh.
std::string escape_literal(std::string_view s) {
  std::string out;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if ((u >= 'a' && u <= 'z') || (u >= '0' && u <= '9') || u == '_')
      out += c;
    else if (u == '.')
      out += "\\.";
    else
      out += fmt::format("\\x{:02x}", u);
  }
  return out;
}

// An alternation of literals with their common prefix and suffix taken out:
// ffn_gate_exps|ffn_up_exps -> ffn_(gate|up)_exps.
std::string alternation(std::vector<std::string> alts) {
  if (alts.size() == 1) return escape_literal(alts[0]);
  size_t pre = 0;
  const auto& a0 = alts[0];
  while (true) {
    bool same = pre < a0.size();
    for (const auto& a : alts) same = same && pre < a.size() && a[pre] == a0[pre];
    if (!same) break;
    ++pre;
  }
  size_t suf = 0;
  while (true) {
    bool same = suf < a0.size() - pre;
    for (const auto& a : alts)
      same = same && suf < a.size() - pre && a[a.size() - 1 - suf] == a0[a0.size() - 1 - suf];
    if (!same) break;
    ++suf;
  }
  std::string mid;
  for (size_t i = 0; i < alts.size(); ++i) {
    if (i) mid += '|';
    mid += escape_literal(std::string_view(alts[i]).substr(pre, alts[i].size() - pre - suf));
  }
  return escape_literal(std::string_view(a0).substr(0, pre)) + "(" + mid + ")" +
         escape_literal(std::string_view(a0).substr(a0.size() - suf));
}

// Digit strings of [lo, hi] (same number of digits) as few [x-y][0-9]... pieces.
void range_pieces(int lo, int hi, std::vector<std::string>& out) {
  while (lo <= hi) {
    int step = 1;  // 10^k: a block [lo, lo + m*step) whose lower k digits run over 0-9
    while (lo % (step * 10) == 0 && lo + step * 10 - 1 <= hi &&
           std::to_string(lo).size() > std::to_string(step).size())
      step *= 10;
    int end = lo + step - 1;  // extend within the same higher digits
    while (end + step <= hi && (end + 1) % (step * 10) != 0) end += step;
    const std::string a = std::to_string(lo), b = std::to_string(end);
    const size_t k = std::to_string(step).size() - 1;  // trailing [0-9]s
    const size_t pos = a.size() - 1 - k;               // the digit that varies
    std::string piece = a.substr(0, pos);
    if (a[pos] == b[pos])
      piece += a[pos];
    else if (b[pos] == a[pos] + 1)
      piece += fmt::format("[{}{}]", a[pos], b[pos]);
    else
      piece += fmt::format("[{}-{}]", a[pos], b[pos]);
    for (size_t i = 0; i < k; ++i) piece += "[0-9]";
    out.push_back(piece);
    lo = end + 1;
  }
}

// The layer numbers of a sorted set as one alternation ("5", "(3[7-9]|4[0-2])").
std::string layer_alternation(const std::vector<int>& layers) {
  std::vector<std::string> pieces;
  for (size_t i = 0; i < layers.size();) {
    size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    // Split the run where the number of digits changes.
    for (int lo = layers[i]; lo <= layers[j];) {
      int limit = 9;
      while (limit < lo) limit = limit * 10 + 9;
      const int hi = std::min(layers[j], limit);
      range_pieces(lo, hi, pieces);
      lo = hi + 1;
    }
    i = j + 1;
  }
  if (pieces.size() == 1) return pieces[0];
  std::string out = "(";
  for (size_t i = 0; i < pieces.size(); ++i) out += (i ? "|" : "") + pieces[i];
  return out + ")";
}

// Roles that may share a rule: the three routed roles, the two attention roles.
int role_family(Role r) {
  switch (r) {
    case Role::kRoutedGate:
    case Role::kRoutedUp:
    case Role::kRoutedDown:
      return 0;
    case Role::kAttnProj:
    case Role::kAttn:
      return 1;
    default:
      return 2 + static_cast<int>(r);
  }
}

struct Group {
  GgmlType type;
  int family;
  std::vector<std::string> kinds;  // for layer groups; names otherwise
  std::set<int> layers;            // empty for a group of names outside layers
  std::vector<size_t> tensors;
};

std::string lowercase(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::string RecipeRule::text() const { return pattern + "=" + std::string(traits(type).name); }

std::vector<RecipeRule> compact_type_rules(std::span<const RecipeTensor> tensors) {
  std::vector<Parsed> parsed;
  parsed.reserve(tensors.size());
  for (const auto& t : tensors) parsed.push_back(parse_name(t.name));
  // Where each kind exists (typed or not), and which layers exist at all.
  std::map<std::string, std::set<int>> exists;
  std::set<int> all_layers;
  for (const auto& p : parsed)
    if (p.layer >= 0) {
      exists[p.kind].insert(p.layer);
      all_layers.insert(p.layer);
    }
  // Layers per (type, kind): what a rule for that kind must cover, in first-seen order.
  struct KindUse {
    GgmlType type;
    std::string kind;
    int family;
    std::set<int> layers;
    std::vector<size_t> tensors;
  };
  std::vector<KindUse> uses;
  std::map<std::pair<uint32_t, std::string>, size_t> use_index;
  std::vector<Group> groups;
  std::map<uint32_t, size_t> names_group;  // type -> group of names outside layers
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].type) continue;
    const GgmlType type = *tensors[i].type;
    const auto& p = parsed[i];
    if (p.layer < 0) {
      auto [it, fresh] = names_group.emplace(static_cast<uint32_t>(type), groups.size());
      if (fresh) groups.push_back({type, -1, {}, {}, {}});
      groups[it->second].kinds.push_back(p.kind);
      groups[it->second].tensors.push_back(i);
      continue;
    }
    auto [it, fresh] =
        use_index.emplace(std::pair{static_cast<uint32_t>(type), p.kind}, uses.size());
    if (fresh) uses.push_back({type, p.kind, role_family(tensors[i].role), {}, {}});
    uses[it->second].layers.insert(p.layer);
    uses[it->second].tensors.push_back(i);
  }
  // Greedy merge of kinds of one type and role family: a group's layer set X is valid when, for
  // each kind in it, X holds every layer the kind has this type in and no other layer it exists in.
  std::vector<std::vector<size_t>> members;  // per layer group: indices into uses
  std::vector<size_t> layer_groups;
  for (size_t u = 0; u < uses.size(); ++u) {
    bool placed = false;
    for (size_t g : layer_groups) {
      Group& grp = groups[g];
      if (grp.type != uses[u].type || grp.family != uses[u].family) continue;
      std::set<int> x = grp.layers;
      x.insert(uses[u].layers.begin(), uses[u].layers.end());
      bool ok = true;
      std::vector<size_t> all = members[g];
      all.push_back(u);
      for (size_t m : all)
        for (int l : exists[uses[m].kind])
          ok = ok && (x.count(l) == 0 || uses[m].layers.count(l) == 1);
      if (!ok) continue;
      grp.layers = std::move(x);
      grp.kinds.push_back(uses[u].kind);
      grp.tensors.insert(grp.tensors.end(), uses[u].tensors.begin(), uses[u].tensors.end());
      members[g].push_back(u);
      placed = true;
      break;
    }
    if (placed) continue;
    if (members.size() < groups.size()) members.resize(groups.size());
    layer_groups.push_back(groups.size());
    groups.push_back(
        {uses[u].type, uses[u].family, {uses[u].kind}, uses[u].layers, uses[u].tensors});
    members.push_back({u});
  }
  members.resize(groups.size());

  // Lowercased names once, for the check of every candidate pattern.
  std::vector<std::string> names;
  for (const auto& t : tensors) names.push_back(t.name);
  const auto decides_exactly = [&](const std::string& pattern, const std::vector<size_t>& want) {
    if (pattern.size() > kMaxRegexBytes || regex_number_problem(pattern) ||
        lowercase(pattern) != pattern)
      return false;
    std::regex rx;
    try {
      rx = std::regex(pattern);
    } catch (const std::regex_error&) {
      return false;
    }
    size_t k = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      const bool hit = std::regex_search(names[i], rx);
      const bool wanted = k < want.size() && want[k] == i;
      if (hit != wanted) return false;
      k += wanted;
    }
    return true;
  };

  std::vector<RecipeRule> rules;
  const auto emit = [&](Group& g, std::vector<std::string> candidates) {
    std::sort(g.tensors.begin(), g.tensors.end());
    for (auto& c : candidates)
      if (decides_exactly(c, g.tensors)) {
        rules.push_back({std::move(c), g.type, g.tensors});
        return true;
      }
    return false;
  };
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    Group& g = groups[gi];
    std::vector<std::string> kinds = g.kinds;
    std::sort(kinds.begin(), kinds.end());
    kinds.erase(std::unique(kinds.begin(), kinds.end()), kinds.end());
    // Keep first-seen order for readability (gate, up, down as the file has them).
    std::vector<std::string> ordered;
    for (const auto& k : g.kinds)
      if (std::find(ordered.begin(), ordered.end(), k) == ordered.end()) ordered.push_back(k);
    const bool weights = std::all_of(ordered.begin(), ordered.end(), [](const std::string& k) {
      return k.size() > 7 && k.ends_with(".weight");
    });
    std::vector<std::string> stems = ordered;
    if (weights)
      for (auto& s : stems) s.resize(s.size() - 7);
    std::string head;
    if (g.family >= 0) {
      // Fill gaps between runs with layers where no kind of the group exists, or where each
      // has this type: the pattern is shorter and decides the same tensors.
      std::vector<int> x(g.layers.begin(), g.layers.end());
      std::vector<int> filled;
      for (size_t i = 0; i < x.size(); ++i) {
        if (i > 0) {
          bool free = true;
          for (int l = x[i - 1] + 1; l < x[i] && free; ++l)
            for (size_t m : members[gi])
              free = free && (!exists[uses[m].kind].count(l) || uses[m].layers.count(l));
          if (free)
            for (int l = x[i - 1] + 1; l < x[i]; ++l) filled.push_back(l);
        }
        filled.push_back(x[i]);
      }
      head = "blk\\." + layer_alternation(filled) + "\\.";
    }
    const std::string stem = alternation(stems);
    const std::string full = weights ? stem + "\\.weight" : stem;
    std::vector<std::string> candidates;
    if (weights) candidates.push_back(head + stem);
    candidates.push_back(head + full);
    candidates.push_back("^" + head + full + "$");
    if (emit(g, candidates)) continue;
    // A group whose pattern cannot be made exact (or is too long): one rule per tensor.
    for (size_t i : g.tensors) {
      Group one{g.type, g.family, {}, {}, {i}};
      if (!emit(one, {"^" + escape_literal(tensors[i].name) + "$"}))
        throw Error({}, tensor_object(tensors[i].name), std::nullopt,
                    "its name cannot be written as a --tensor-type pattern that finds it alone");
    }
  }
  std::sort(rules.begin(), rules.end(), [](const RecipeRule& a, const RecipeRule& b) {
    return a.tensors.front() < b.tensors.front();
  });
  return rules;
}

}  // namespace gguf
