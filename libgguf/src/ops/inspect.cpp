// gguf-inspect's report: per-tensor rows and summaries by type, role and layer.
#include "gguf/ops/inspect.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "gguf/format/hash.h"
#include "gguf/io/source.h"
#include "ops/group_order.h"

namespace gguf {
namespace {

void add(std::vector<InspectGroup>& groups, std::map<std::string, size_t>& index,
         const std::string& key, const InspectTensor& t) {
  auto [it, fresh] = index.emplace(key, groups.size());
  if (fresh) groups.push_back({key, 0, 0, 0, 0});
  InspectGroup& g = groups[it->second];
  g.tensors += 1;
  g.params += t.n_elements;
  g.bytes += t.bytes.value_or(0);
  if (t.bytes) g.sized_params += t.n_elements;
}

void summarise(InspectReport& r) {
  std::map<std::string, size_t> ti, ri, li;
  std::map<std::string, uint32_t> type_ids;  // a type's name -> its id, for the order below
  for (const auto& t : r.tensors) {
    r.params += t.n_elements;
    r.tensor_bytes += t.bytes.value_or(0);
    if (t.bytes)
      r.sized_params += t.n_elements;
    else
      ++r.unsized;
    const std::string type = type_name(t.type_id);
    type_ids.emplace(type, t.type_id);
    add(r.by_type, ti, type, t);
    add(r.by_role, ri, std::string(role_name(t.role)), t);
    add(r.by_layer, li, t.layer ? std::to_string(*t.layer) : "-", t);
  }
  // Types by id, roles by enum order, layers numerically (non-layer tensors last).
  std::sort(r.by_type.begin(), r.by_type.end(),
            [&](const auto& a, const auto& b) { return type_ids.at(a.key) < type_ids.at(b.key); });
  detail::sort_role_groups(r.by_role);
  detail::sort_layer_groups(r.by_layer);
}

InspectTensor row(const GgufFile& f, size_t file_index, const TensorInfo& t,
                  std::string_view arch) {
  InspectTensor out;
  out.name = t.name;
  out.type_id = t.type_id;
  out.shape = t.shape;
  out.file = file_index;
  // A header cut short leaves the data section's start unknown: a tensor info's offset is then
  // relative to nothing, and reporting it as a file offset would point at the header.
  if (f.header_end() != 0) out.offset = f.data_start(t);
  out.bytes = t.bytes;
  out.n_elements = t.n_elements;
  const TensorName tn = classify_tensor(t.name, arch, ggml_dims(t.shape));
  out.role = tn.role;
  out.layer = tn.layer;
  return out;
}

void header_fields(InspectReport& r, const GgufFile& f) {
  // The parser sets the version only once it has accepted the magic and the version; before
  // that the alignment is only the default, not something the file says.
  if (f.version() != 0) {
    r.version = f.version();
    r.alignment = f.alignment();
  }
  r.metadata = &f.metadata();
  r.architecture = f.metadata().get_string("general.architecture").value_or("");
}

}  // namespace

InspectReport inspect(const Model& model, const InspectOptions& options) {
  InspectReport r;
  header_fields(r, model.first());
  for (const auto& s : model.shards()) {
    r.files.push_back(s->path());
    r.file_sizes.push_back(s->file_size());
    r.file_bytes += s->file_size();
  }
  const std::vector<size_t> indices = select_in(model, options.selector);
  r.selection = options.selector;
  r.hashes = options.hashes;
  for (size_t i : indices) {
    const TensorRef& t = model.tensors()[i];
    r.tensors.push_back(row(*t.file, t.shard, *t.info, r.architecture));
  }
  if (options.hashes) {
    const auto hashes = hash_tensors(model, indices, options.threads, options.progress);
    for (size_t k = 0; k < hashes.size(); ++k) r.tensors[k].xxh3 = hashes[k];
  }
  r.checked = options.check;
  if (options.check) r.problems = check_model(model);
  summarise(r);
  return r;
}

uint64_t check_errors(const InspectReport& r) {
  return static_cast<uint64_t>(
      std::count_if(r.problems.begin(), r.problems.end(),
                    [](const Problem& p) { return p.severity == "error"; }));
}

InspectReport inspect_partial(const GgufFile& file, const Error& error) {
  InspectReport r;
  header_fields(r, file);
  r.files.push_back(file.path());
  r.file_sizes.push_back(file.file_size());
  r.file_bytes = file.file_size();
  for (const auto& t : file.tensors()) r.tensors.push_back(row(file, 0, t, r.architecture));
  r.damage = error;
  summarise(r);
  return r;
}

InspectedPath inspect_path(const std::string& path, const InspectOptions& options) {
  std::optional<Model> model;
  try {
    model = Model::open(path);
  } catch (const Error& e) {
    std::shared_ptr<const ByteSource> source;
    try {
      source = open_file_source(e.path().empty() ? path : e.path());
    } catch (const Error&) {
    }
    if (!source) throw;
    std::optional<Error> err;
    auto partial = GgufFile::parse_partial(std::move(source), err);
    if (!err) throw;
    return {inspect_partial(*partial, *err), e, {partial}};
  }
  return {inspect(*model, options), std::nullopt, model->shards()};
}

}  // namespace gguf
