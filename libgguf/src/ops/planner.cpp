// The planner's plan: which tensors are decided (pinned by rules, tied gate/up pairs), their
// choices and exact costs in the writer's layout, the solver's pick, and the requant plan
// that writes it (donor tensors copied byte for byte).
#include "gguf/ops/planner.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <map>

#include "gguf/base/error.h"
#include "gguf/base/escape.h"
#include "gguf/codecs/codecs.h"
#include "gguf/ops/splice.h"
#include "write/serialize.h"

namespace gguf {
namespace {

std::string regex_escape(std::string_view name) {
  std::string out = "^";
  for (char c : name) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out + "$";
}

// A rule deciding exactly one tensor: how the planner's picks reach requant.
TypeRule exact_rule(const std::string& option, const std::string& name,
                    std::optional<GgmlType> type) {
  TypeRule r;
  r.kind = TypeRule::Kind::kPattern;
  r.option = option;
  r.value = name;
  r.pattern = regex_escape(name);
  r.regex = compile_regex(r.pattern, option);
  r.type = type;
  return r;
}

std::string mib(uint64_t bytes) {
  return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / 1048576.0);
}

std::string type_names(const std::vector<GgmlType>& types) {
  std::vector<std::string_view> names;
  for (GgmlType t : types) names.push_back(traits(t).name);
  return fmt::format("{}", fmt::join(names, ","));
}

// One decision of the solver: one tensor, or a layer's routed gate and up together.
struct Decision {
  std::vector<size_t> members;  // indices into the model's tensors
  // Per option, per member: the index of its Choice in that member's task.
  std::vector<std::vector<size_t>> options;
};

}  // namespace

PlannerResult plan_mix(const Model& model, const PlannerOptions& o) {
  if (o.target_size.has_value() == o.target_bpw.has_value())
    usage_error("give one budget: --target-size SIZE or --target-bpw BPW");
  const std::string option = o.target_size ? "--target-size" : "--target-bpw";
  const std::string arch = model.architecture();
  const auto& tensors = model.tensors();
  std::vector<GgmlType> candidates = o.candidates.empty() ? default_candidates() : o.candidates;

  std::vector<bool> selected(tensors.size(), false), quantizable(tensors.size(), false);
  for (size_t i : select_in(model, o.selector)) selected[i] = true;
  bool all_f32 = true;
  for (size_t i = 0; i < tensors.size(); ++i) {
    quantizable[i] = selected[i] && is_quantizable(*tensors[i].info, arch);
    all_f32 &= !quantizable[i] || tensors[i].info->type_id == static_cast<uint32_t>(GgmlType::F32);
  }
  // The pins, resolved as requant resolves rules: a probe whose --type (given to the tensors no
  // rule decides, only so that it re-encodes something) is never written.
  RequantOptions probe_opt{all_f32 ? GgmlType::F16 : GgmlType::F32,
                           o.selector,
                           o.imatrix,
                           o.threads,
                           false,
                           o.rules,
                           o.alignment};
  const RequantResult probe = requant(model, probe_opt);

  PlannerResult r;
  r.by_bpw = o.target_bpw.has_value();
  std::vector<MeasureTask> tasks(tensors.size());
  std::vector<bool> planned(tensors.size(), false);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorRef& t = tensors[i];
    r.elements += t.info->n_elements;
    if (!quantizable[i]) continue;
    MeasureTask& task = tasks[i];
    task.tensor = t;
    const RequantRow& row = probe.rows[i];
    if (!row.rule.empty()) {  // pinned: measured at its type for the totals
      task.choices.push_back({static_cast<GgmlType>(row.type_after), -1, row.bytes_after, 0});
      continue;
    }
    planned[i] = true;
    const uint64_t ne0 = static_cast<uint64_t>(t.info->shape[0]);
    const uint64_t nrows = t.info->n_elements / std::max<uint64_t>(1, ne0);
    const bool has_entry = o.imatrix && o.imatrix->find(t.name());
    std::vector<GgmlType> no_fit, no_entry;  // why candidates were left out, for the error
    for (GgmlType c : candidates) {
      const auto rb = row_bytes(c, ne0);
      if (!rb)
        no_fit.push_back(c);
      else if (requires_importance(c) && !has_entry)
        no_entry.push_back(c);
      else
        task.choices.push_back({c, -1, *rb * nrows, 0});
    }
    for (size_t d = 0; d < o.donors.size(); ++d) {
      const TensorRef* dt = o.donors[d]->find(t.name());
      if (!dt || dt->info->shape != t.info->shape ||
          !can_decode(static_cast<GgmlType>(dt->info->type_id)))
        continue;
      task.donor_tensors.resize(o.donors.size(), *dt);
      task.donor_tensors[d] = *dt;
      task.choices.push_back({static_cast<GgmlType>(dt->info->type_id), static_cast<int>(d),
                              dt->info->require_bytes(dt->file->path()), 0});
    }
    if (task.choices.empty()) {
      // A type that needs an importance matrix fits the rows but has no entry to work with:
      // saying only that no type fits the rows would be false.
      std::vector<std::string> why;
      if (!no_fit.empty())
        why.push_back(fmt::format("{} {} not divide its rows of {}", type_names(no_fit),
                                  no_fit.size() == 1 ? "does" : "do", ne0));
      if (!no_entry.empty())
        why.push_back(fmt::format("{} {} an importance matrix entry for it ({})",
                                  type_names(no_entry), no_entry.size() == 1 ? "needs" : "need",
                                  o.imatrix ? "the matrix has none" : "no --imatrix"));
      throw Error(model.path(), tensor_object(t.name()), std::nullopt,
                  fmt::format("no candidate type can encode it (candidates: {}): {}",
                              type_names(candidates), fmt::join(why, "; ")));
    }
  }
  for (size_t d = 0; d < o.donors.size(); ++d) {
    bool offers = false;
    for (const auto& task : tasks)
      for (const Choice& c : task.choices) offers |= c.donor == static_cast<int>(d);
    if (!offers)
      throw Error(o.donor_paths.at(d), {}, std::nullopt,
                  fmt::format("the donor has no tensor to offer: none of the tensors to plan is "
                              "in it with the same shape and a type that can be decoded"));
  }

  // Decisions: a layer's routed gate and up share one (unless untied), others one each.
  std::vector<Decision> decisions;
  std::map<int, std::vector<size_t>> gate_up;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!planned[i]) continue;
    const TensorName tn =
        classify_tensor(tensors[i].name(), arch, ggml_dims(tensors[i].info->shape));
    if (!o.untie_gate_up && tn.is_gate_or_up_weight() && tn.layer)
      gate_up[*tn.layer].push_back(i);
    else
      decisions.push_back({{i}, {}});
  }
  for (auto& [layer, members] : gate_up) {
    if (members.size() == 2)
      decisions.push_back({members, {}});
    else
      for (size_t i : members) decisions.push_back({{i}, {}});
  }
  for (Decision& d : decisions) {
    const auto& first = tasks[d.members.front()].choices;
    for (size_t k = 0; k < first.size(); ++k) {
      std::vector<size_t> per{k};
      for (size_t m = 1; m < d.members.size(); ++m) {
        const auto& cs = tasks[d.members[m]].choices;
        const auto it = std::find_if(cs.begin(), cs.end(), [&](const Choice& c) {
          return c.type == first[k].type && c.donor == first[k].donor;
        });
        if (it == cs.end()) break;
        per.push_back(static_cast<size_t>(it - cs.begin()));
      }
      if (per.size() == d.members.size()) d.options.push_back(std::move(per));
    }
    if (d.options.empty())
      throw Error(model.path(), tensor_object(tensors[d.members.back()].name()), std::nullopt,
                  fmt::format("no candidate fits both it and '{}', whose type it shares "
                              "(--untie-gate-up lets them differ)",
                              escape_for_terminal(tensors[d.members.front()].name())));
  }

  MeasureOptions mo;
  mo.imatrix = o.imatrix;
  mo.sample_elements = o.sample_elements;
  mo.threads = o.threads;
  mo.progress = o.progress;
  std::vector<MeasureTask> measured;
  std::vector<size_t> slot(tensors.size(), SIZE_MAX);
  for (size_t i = 0; i < tensors.size(); ++i)
    if (quantizable[i]) slot[i] = measured.size(), measured.push_back(std::move(tasks[i]));
  measure_choices(measured, mo);

  // Costs in the budget's unit: padded payloads of the file, or raw payloads for bits per weight.
  const uint64_t align = detail::plan_alignment(probe.plan.metadata);
  const auto unit = [&](uint64_t bytes) { return r.by_bpw ? bytes : detail::pad_to(bytes, align); };
  std::vector<SolverItem> items;
  for (const Decision& d : decisions) {
    SolverItem item;
    for (const auto& per : d.options) {
      uint64_t c = 0;
      double e = 0;
      for (size_t m = 0; m < d.members.size(); ++m) {
        const Choice& ch = measured[slot[d.members[m]]].choices[per[m]];
        c += unit(ch.bytes);
        e += ch.error;
      }
      item.cost.push_back(c);
      item.error.push_back(e);
    }
    items.push_back(std::move(item));
  }
  uint64_t fixed = 0, var_min = 0, var_max = 0;
  for (size_t i = 0; i < tensors.size(); ++i)
    if (!planned[i]) fixed += unit(probe.rows[i].bytes_after);
  if (!r.by_bpw) {  // the header, padded: tensor infos do not depend on the types
    std::vector<const PlanTensor*> ptrs;
    for (const auto& t : probe.plan.tensors) ptrs.push_back(&t);
    fixed += detail::layout_of(probe.plan.metadata, ptrs).data_offset;
  }
  for (const auto& item : items) {
    var_min += *std::min_element(item.cost.begin(), item.cost.end());
    var_max += *std::max_element(item.cost.begin(), item.cost.end());
  }
  r.min_bytes = fixed + var_min;
  r.max_bytes = fixed + var_max;
  if (r.by_bpw) {
    r.target_bpw = *o.target_bpw;
    r.budget =
        static_cast<uint64_t>(std::floor(*o.target_bpw * static_cast<double>(r.elements) / 8));
  } else {
    r.budget = *o.target_size;
  }
  const auto out_of_range = [&] {
    if (r.by_bpw) {
      const auto bpw = [&](uint64_t b) {
        return 8.0 * static_cast<double>(b) / static_cast<double>(r.elements);
      };
      throw Error(
          model.path(), {}, std::nullopt,
          fmt::format("--target-bpw {} is outside the reachable range: {:.4f} to {:.4f} "
                      "bits per weight ({} to {} bytes of tensor data) with these "
                      "candidates",
                      *o.target_bpw, bpw(r.min_bytes), bpw(r.max_bytes), r.min_bytes, r.max_bytes));
    }
    throw Error(model.path(), {}, std::nullopt,
                fmt::format("--target-size {} bytes ({}) is outside the reachable range: {} to "
                            "{} bytes ({} to {}) with these candidates",
                            r.budget, mib(r.budget), r.min_bytes, r.max_bytes, mib(r.min_bytes),
                            mib(r.max_bytes)));
  };
  if (r.budget < r.min_bytes || r.budget > r.max_bytes) out_of_range();

  // Solve, write the plan, and check its real size: the header can differ from the probe's by
  // the keys a run sets (file type, imatrix provenance); a plan over the budget is solved
  // again with the difference taken off.
  uint64_t var_budget = r.budget - fixed;
  for (int attempt = 0;; ++attempt) {
    const SolverResult sol = solve_budget(items, var_budget);
    std::vector<TypeRule> rules = o.rules;
    std::vector<int> donor_of(tensors.size(), -1);
    std::vector<double> err(tensors.size(), 0.0);
    for (size_t i = 0; i < tensors.size(); ++i)
      if (quantizable[i] && !planned[i]) err[i] = measured[slot[i]].choices.front().error;
    for (size_t k = 0; k < decisions.size(); ++k) {
      const Decision& d = decisions[k];
      for (size_t m = 0; m < d.members.size(); ++m) {
        const size_t i = d.members[m];
        const Choice& ch = measured[slot[i]].choices[d.options[sol.pick[k]][m]];
        donor_of[i] = ch.donor;
        err[i] = ch.error;
        rules.push_back(exact_rule(option, tensors[i].name(),
                                   ch.donor >= 0 ? std::nullopt : std::optional(ch.type)));
      }
    }
    RequantOptions ro{std::nullopt, o.selector,       o.imatrix,  o.threads,
                      false,        std::move(rules), o.alignment};
    r.requant = requant(model, ro);
    for (size_t i = 0; i < tensors.size(); ++i) {
      RequantRow& row = r.requant.rows[i];
      if (planned[i]) row.rule.clear();
      if (donor_of[i] < 0) continue;
      const int d = donor_of[i];
      const TensorRef& dt = measured[slot[i]].donor_tensors[static_cast<size_t>(d)];
      PlanTensor& pt = r.requant.plan.tensors[i];
      pt.type_id = dt.info->type_id;
      pt.bytes = dt.info->require_bytes(dt.file->path());
      pt.source = FileRange{dt.file->source_ptr(), dt.data_start()};
      row.source = dt.file->path();
      row.type_after = pt.type_id;
      row.bytes_after = pt.bytes;
      row.action = PlanAction::kSplice;
      row.lossy = true;
      row.requantized = false;
      row.importance = ImportanceSource::kNone;
    }
    for (const Model* dm : o.donors)
      for (const auto& p : dm->paths()) r.requant.inputs.push_back(p);
    set_file_type_keys(r.requant.plan);
    std::vector<const PlanTensor*> ptrs;
    for (const auto& t : r.requant.plan.tensors) ptrs.push_back(&t);
    r.file_bytes = detail::layout_of(r.requant.plan.metadata, ptrs).file_size;
    r.requant.bytes_after = r.file_bytes;
    r.payload_bytes = 0;
    for (const auto& t : r.requant.plan.tensors) r.payload_bytes += t.bytes;
    const uint64_t used = r.by_bpw ? r.payload_bytes : r.file_bytes;
    if (used > r.budget) {
      const uint64_t over = used - r.budget;
      if (attempt >= 3 || over > var_budget || var_budget - over < var_min) out_of_range();
      var_budget -= over;
      continue;
    }
    r.tensors.clear();
    r.assignment.clear();
    r.error = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const RequantRow& row = r.requant.rows[i];
      const TensorName tn = classify_tensor(row.name, arch, ggml_dims(tensors[i].info->shape));
      r.assignment.push_back({row.name, tn.role, std::nullopt});
      if (!quantizable[i]) continue;
      r.assignment.back().type = static_cast<GgmlType>(row.type_after);
      PlannedTensor p;
      p.name = row.name;
      p.type_before = row.type_before;
      p.type_after = row.type_after;
      p.bytes = row.bytes_after;
      p.error = err[i];
      p.source = donor_of[i] >= 0                  ? row.source
                 : row.action == PlanAction::kCopy ? "copy"
                                                   : "encode";
      if (!planned[i]) p.pinned = probe.rows[i].rule;
      r.error += err[i];
      r.tensors.push_back(std::move(p));
    }
    for (const Decision& d : decisions)
      if (d.members.size() == 2) {
        const auto find = [&](size_t i) {
          return std::find_if(r.tensors.begin(), r.tensors.end(),
                              [&](const PlannedTensor& p) { return p.name == tensors[i].name(); });
        };
        find(d.members[0])->tied_to = tensors[d.members[1]].name();
        find(d.members[1])->tied_to = tensors[d.members[0]].name();
      }
    r.lp_bound = r.error - (sol.error - sol.lp_bound);
    r.decisions = decisions.size();
    r.pinned = 0;
    for (size_t i = 0; i < tensors.size(); ++i) r.pinned += quantizable[i] && !planned[i];
    r.bpw = 8.0 * static_cast<double>(r.payload_bytes) / static_cast<double>(r.elements);
    return r;
  }
}

uint64_t parse_target_size(std::string_view text) {
  const auto bad = [&](const std::string& why) {
    usage_error(fmt::format("invalid --target-size value '{}': {}", terminal_safe(text), why));
  };
  constexpr std::string_view kUnits =
      "b, k or kib, m or mib, g or gib, t or tib (any case; powers of 1024)";
  size_t n = 0;
  while (n < text.size() && (std::isdigit(static_cast<unsigned char>(text[n])) || text[n] == '.'))
    ++n;
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + n, value);
  if (n == 0 || ec != std::errc() || end != text.data() + n)
    bad(fmt::format("expected a number with an optional unit {}, e.g. 120g", kUnits));
  std::string unit(text.substr(n));
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  int shift = -1;
  for (const auto& [name, s] : std::initializer_list<std::pair<std::string_view, int>>{{"", 0},
                                                                                       {"b", 0},
                                                                                       {"k", 10},
                                                                                       {"kib", 10},
                                                                                       {"m", 20},
                                                                                       {"mib", 20},
                                                                                       {"g", 30},
                                                                                       {"gib", 30},
                                                                                       {"t", 40},
                                                                                       {"tib", 40}})
    if (unit == name) shift = s;
  if (shift < 0)
    bad(fmt::format("unknown unit '{}' (units: {})", terminal_safe(text.substr(n)), kUnits));
  const double bytes = std::floor(value * std::ldexp(1.0, shift));
  if (!(bytes >= 1)) bad("the size must be at least 1 byte");
  if (bytes >= 0x1.0p63) bad("the size is too large");
  return static_cast<uint64_t>(bytes);
}

double parse_target_bpw(std::string_view text) {
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() ||
      !std::isfinite(value) || !(value > 0))
    usage_error(fmt::format(
        "invalid --target-bpw value '{}': expected bits per weight, a number greater than 0 "
        "(e.g. 2.5)",
        terminal_safe(text)));
  return value;
}

std::vector<GgmlType> parse_candidates(std::string_view list) {
  std::vector<GgmlType> out;
  size_t pos = 0;
  for (;;) {
    const size_t comma = list.find(',', pos);
    const std::string_view name = list.substr(pos, comma - pos);
    if (name.empty())
      usage_error(
          fmt::format("invalid --candidates value '{}': an empty type name (expected "
                      "T1,T2,..., e.g. q2_K,q4_K,q8_0)",
                      terminal_safe(list)));
    const auto t = parse_type(name);
    if (!t) usage_error(unknown_type_message("--candidates", name, false));
    if (!can_encode(*t))
      usage_error(fmt::format("--candidates {}: no encoder for this type yet", traits(*t).name));
    if (std::find(out.begin(), out.end(), *t) == out.end()) out.push_back(*t);
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return out;
}

std::vector<GgmlType> default_candidates() {
  using T = GgmlType;
  std::vector<GgmlType> out;
  for (T t : {T::IQ1_M, T::IQ2_XXS, T::IQ2_XS, T::IQ2_S, T::IQ3_XXS, T::Q2_K, T::IQ3_S, T::Q3_K,
              T::IQ4_XS, T::Q4_K, T::Q5_K, T::Q6_K, T::Q8_0})
    if (can_encode(t)) out.push_back(t);
  return out;
}

std::string plan_recipe(const PlannerResult& r) {
  std::string out;
  for (const RecipeRule& rule : compact_type_rules(r.assignment)) out += rule.text() + "\n";
  return out;
}

}  // namespace gguf
