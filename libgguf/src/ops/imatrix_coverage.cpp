// imatrix_coverage(): each quantizable tensor of a model against an importance matrix (entry
// present, fitting, experts never routed), with summaries by role and layer.
#include "gguf/ops/imatrix_coverage.h"

#include <algorithm>
#include <map>

#include "gguf/base/error.h"
#include "gguf/ops/requant.h"
#include "ops/group_order.h"

namespace gguf {
namespace {

void count(CoverageGroup& g, const CoverageRow& row) {
  ++g.tensors;
  g.covered += row.coverage == Coverage::kCovered;
  g.missing += row.coverage == Coverage::kMissing;
  g.misfit += row.coverage == Coverage::kMisfit;
  if (row.routing == Routing::kKnown) {
    g.experts += static_cast<uint64_t>(row.matrices);
    g.unrouted += row.unrouted.size();
  }
  g.unknown += row.routing == Routing::kUnknown;
}

void add(std::vector<CoverageGroup>& groups, std::map<std::string, size_t>& index,
         const std::string& key, const CoverageRow& row) {
  const auto [it, fresh] = index.emplace(key, groups.size());
  if (fresh) groups.push_back({.key = key});
  count(groups[it->second], row);
}

CoverageRow check_tensor(const TensorRef& t, const Imatrix& im, std::string_view arch) {
  const TensorInfo& info = *t.info;
  CoverageRow row;
  row.name = info.name;
  row.type_id = info.type_id;
  const TensorName tn = classify_tensor(info.name, arch, ggml_dims(info.shape));
  row.role = tn.role;
  row.layer = tn.layer;
  row.columns = info.shape.empty() ? 1 : info.shape[0];
  for (size_t d = 2; d < info.shape.size(); ++d) row.matrices *= info.shape[d];
  const ImatrixEntry* e = im.find(info.name);
  if (!e) return row;
  row.entry_values = e->values.size();
  row.entry_matrices = im.legacy() ? 0 : e->n_mat;
  try {
    (void)im.weights(info.name, row.columns, row.matrices, 0);
    row.coverage = Coverage::kCovered;
  } catch (const Error& err) {
    row.coverage = Coverage::kMisfit;
    row.problem = err.message();
  }
  if (row.matrices > 1) {
    // Counts per expert exist only in a GGUF entry cut one matrix per expert.
    const bool per_expert = row.coverage == Coverage::kCovered && !im.legacy() &&
                            e->n_mat == row.matrices &&
                            e->counts.size() == static_cast<size_t>(row.matrices);
    row.routing = per_expert ? Routing::kKnown : Routing::kUnknown;
    if (per_expert)
      for (int64_t k = 0; k < row.matrices; ++k)
        if (e->counts[static_cast<size_t>(k)] == 0) row.unrouted.push_back(k);
  }
  return row;
}

}  // namespace

std::string_view coverage_name(Coverage c) {
  return c == Coverage::kCovered ? "covered" : c == Coverage::kMissing ? "missing" : "misfit";
}

CoverageReport imatrix_coverage(const Model& model, const Imatrix& im, const Selector& selector) {
  CoverageReport r;
  r.files = model.paths();
  r.imatrix = im.path();
  r.legacy = im.legacy();
  r.datasets = im.datasets();
  r.chunk_count = im.chunk_count();
  r.entries = im.size();
  const std::string arch = model.architecture();
  std::vector<std::string> names;
  std::vector<int> n_dims;
  for (const auto& t : model.tensors()) {
    names.push_back(t.name());
    n_dims.push_back(ggml_dims(t.info->shape));
  }
  std::vector<size_t> chosen;
  if (selector.empty()) {
    for (size_t i = 0; i < names.size(); ++i) chosen.push_back(i);
  } else {
    chosen = select_tensors(selector, names, n_dims, arch, model.path());
  }
  std::map<std::string, size_t> ri, li;
  r.total.key = "all";
  for (size_t i : chosen) {
    const TensorRef& t = model.tensors()[i];
    if (!is_quantizable(*t.info, arch)) continue;
    r.rows.push_back(check_tensor(t, im, arch));
    const CoverageRow& row = r.rows.back();
    count(r.total, row);
    add(r.by_role, ri, std::string(role_name(row.role)), row);
    add(r.by_layer, li, row.layer ? std::to_string(*row.layer) : "-", row);
  }
  detail::sort_role_groups(r.by_role);
  detail::sort_layer_groups(r.by_layer);
  for (const auto& [name, entry] : im.entries())
    if (!model.find(name)) r.unused.push_back(name);
  std::sort(r.unused.begin(), r.unused.end());
  return r;
}

}  // namespace gguf
