// A Hugging Face checkpoint into an import plan: the architecture from config.json (checked
// against the base), each shard's tensors mapped to GGUF names, grouped (experts), and given
// the row move their GGUF layout needs.
#include "gguf/ops/hf_import.h"

#include <fmt/format.h>

#include <map>
#include <set>

#include "gguf/base/error.h"
#include "gguf/base/escape.h"
#include "gguf/format/file.h"
#include "gguf/inputs/hf_names.h"
#include "ops/import_internal.h"

namespace gguf {
namespace {

// One tensor of the checkpoint: packed or plain, in its shard.
struct Source {
  std::string name;
  MappedSource where;
  const std::vector<int64_t>& shape() const {
    return where.packed ? where.packed->shape : where.plain->shape;
  }
  uint64_t offset() const {
    return where.packed ? where.packed->entry_offset : where.file->entry_offset(name);
  }
  const std::string& path() const { return where.file->path(); }
  uint64_t bytes() const {
    const auto* p = where.packed;
    return p ? (p->codes->end - p->codes->begin) + (p->scales->end - p->scales->begin) +
                   (p->mins->end - p->mins->begin)
             : where.plain->end - where.plain->begin;
  }
  std::string kind() const {
    return where.packed ? fmt::format("u{} affine g{}", where.packed->bits, where.packed->group)
                        : where.plain->dtype;
  }
};

struct Group {
  std::string gguf;
  HfTransform transform = HfTransform::kNone;
  int64_t layer = -1;
  std::map<int64_t, Source> experts;  // kStackExperts
  std::vector<Source> sources;        // the others: exactly one
};

std::string q(std::string_view s) { return fmt::format("'{}'", escape_for_terminal(s)); }

class Mapper {
 public:
  Mapper(const HfCheckpoint& cp, const ImportOptions& o, ImportResult& r) : cp_(cp), o_(o), r_(r) {}

  void run();

 private:
  std::optional<uint64_t> base_uint(const std::string& key) const {
    return o_.base ? o_.base->metadata().get_uint(r_.architecture + "." + key) : std::nullopt;
  }
  bool base_has(const std::string& name) const { return o_.base && o_.base->find(name); }
  [[noreturn]] void fail(const Source& s, const std::string& why) const {
    throw Error(s.path(), tensor_object(s.name), s.offset(), why);
  }
  GgmlType type_of(const Source& s) const;
  void add_row(ImportRow row, const Source& first, GgmlType type, PayloadSource payload);
  void add_plain_or_packed(const Group& g);
  void add_mapped(const Group& g, std::unique_ptr<MappedTensor> m, std::string hf_name,
                  uint64_t bytes_before, std::vector<int64_t> ne, const Source& first,
                  std::string_view transform, std::optional<GgmlType> forced = {});
  void add_permuted(const Group& g);
  void add_stack(const Group& g);
  void add_kv_b(const Group& g);

  const HfCheckpoint& cp_;
  const ImportOptions& o_;
  ImportResult& r_;
  std::vector<ImportRow> rows_;
  std::vector<PlanTensor> tensors_;
};

GgmlType Mapper::type_of(const Source& s) const {
  if (s.where.packed) {
    std::string why;
    const auto t = affine_target(*s.where.packed, o_.type, why);
    if (!t) fail(s, fmt::format("cannot be moved exactly: {}", why));
    return *t;
  }
  const auto t = ggml_type_of_dtype(s.where.plain->dtype);
  if (!t)
    fail(s, fmt::format("dtype {} has no GGUF type (F32, F16, BF16, F64, I8, I16, I32 and I64 "
                        "carry over; packed tensors are listed in packed_affine)",
                        s.where.plain->dtype));
  if (s.shape().size() > kMaxDims)
    fail(s, fmt::format("shape {} has more than the {} dimensions of a GGUF tensor",
                        shape_text(s.shape()), kMaxDims));
  return *t;
}

void Mapper::add_row(ImportRow row, const Source& first, GgmlType type, PayloadSource payload) {
  row.source = first.path();
  row.file = first.where.file;
  row.type_after = traits(type).id;
  row.action = first.where.packed
                   ? (type == GgmlType::F32 ? PlanAction::kDecode : PlanAction::kEncode)
                   : PlanAction::kCopy;
  if (first.where.packed) {
    row.bits = first.where.packed->bits;
    row.group = first.where.packed->group;
  }
  const uint64_t n = [&] {
    uint64_t e = 1;
    for (auto d : row.shape) e *= static_cast<uint64_t>(d);
    return e;
  }();
  row.bytes_after = *row_bytes(type, static_cast<uint64_t>(row.shape[0])) *
                    (n / static_cast<uint64_t>(row.shape[0]));
  tensors_.push_back({row.name, row.type_after, row.shape, row.bytes_after, std::move(payload)});
  rows_.push_back(std::move(row));
}

void Mapper::add_plain_or_packed(const Group& g) {
  const Source& s = g.sources.front();
  const GgmlType type = type_of(s);
  ImportRow row;
  row.name = g.gguf;
  if (cp_.config()) row.hf_name = s.name, row.transform = "rename";
  row.shape = detail::ne_of(s.shape());
  row.bytes_before = s.bytes();
  row.type_before = traits(type).id;  // (meaningless for a packed source: row.affine())
  row.packed = s.where.packed;
  row.plain = s.where.plain;
  PayloadSource payload =
      s.where.packed
          ? PayloadSource(detail::affine_producer(*s.where.file, *s.where.packed, type, o_.threads))
          : PayloadSource(FileRange{s.where.file->source_ptr(), s.where.plain->begin});
  add_row(std::move(row), s, type, std::move(payload));
}

void Mapper::add_mapped(const Group& g, std::unique_ptr<MappedTensor> m, std::string hf_name,
                        uint64_t bytes_before, std::vector<int64_t> ne, const Source& first,
                        std::string_view transform, std::optional<GgmlType> forced) {
  const GgmlType type = forced ? *forced : type_of(first);
  ImportRow row;
  row.name = g.gguf;
  row.hf_name = std::move(hf_name);
  row.transform = transform;
  row.shape = std::move(ne);
  row.bytes_before = bytes_before;
  row.type_before = traits(type).id;  // (meaningless for a packed source: row.affine())
  row.mapped = m.get();
  Producer p = detail::mapped_producer(*m, type, o_.threads, g.gguf);
  r_.mapped.push_back(std::move(m));
  add_row(std::move(row), first, type, std::move(p));
}

void Mapper::add_permuted(const Group& g) {
  const Source& s = g.sources.front();
  const bool is_q = g.transform == HfTransform::kPermuteQ;
  const auto& cfg = cp_.config();
  // q: num_attention_heads; k: num_key_value_heads, which defaults to it (as in llama.cpp's
  // loader). config.json first, the base's metadata when it has no such number.
  std::optional<uint64_t> heads;
  std::string from;
  const auto take = [&](std::optional<uint64_t> v, std::string what) {
    if (!heads && v) heads = v, from = std::move(what);
  };
  const std::string in_cfg = fmt::format(" of {}", q(cfg->path));
  const std::string key = r_.architecture + ".attention.head_count";
  if (!is_q) take(cfg->n_head_kv, "num_key_value_heads" + in_cfg);
  if (!is_q) take(base_uint("attention.head_count_kv"), key + "_kv of the base");
  take(cfg->n_head, "num_attention_heads" + in_cfg);
  take(base_uint("attention.head_count"), key + " of the base");
  if (!heads)
    fail(s, fmt::format("the rotary permutation needs the number of heads: {} has no "
                        "num_attention_heads, and no base gives {}",
                        q(cfg->path), key));
  const auto& shape = s.shape();
  // Rows of q/k: the output features (a bias: its elements, one column each).
  const uint64_t rows = static_cast<uint64_t>(shape.front());
  const uint64_t cols = shape.size() == 1 ? 1 : static_cast<uint64_t>(shape.back());
  if (shape.size() > 2 || (s.where.packed && shape.size() != 2) || rows % *heads != 0 ||
      (rows / *heads) % 2 != 0)
    fail(s, fmt::format("shape {} does not split into {} heads of an even number of rows ({}), "
                        "which the rotary permutation needs",
                        shape_text(shape), *heads, from));
  auto m = std::make_unique<MappedTensor>();
  m->move = MappedTensor::Move::kPermute;
  m->sources = {s.where};
  m->rows = rows;
  m->cols = cols;
  m->heads = *heads;
  add_mapped(g, std::move(m), s.name, s.bytes(), detail::ne_of(shape), s,
             transform_name(g.transform));
}

void Mapper::add_stack(const Group& g) {
  const Source& first = g.experts.begin()->second;
  const auto& cfg = cp_.config();
  uint64_t n = 0;
  if (cfg->n_experts)
    n = *cfg->n_experts;
  else if (const auto b = base_uint("expert_count"))
    n = *b;
  else
    n = static_cast<uint64_t>(g.experts.rbegin()->first) + 1;
  const auto name_of = [&](int64_t e) {
    std::string name = first.name;
    const std::string from = fmt::format(".experts.{}.", g.experts.begin()->first);
    if (const size_t at = name.find(from); at != std::string::npos)
      name.replace(at, from.size(), fmt::format(".experts.{}.", e));
    return name;
  };
  for (const auto& [e, s] : g.experts)
    if (static_cast<uint64_t>(e) >= n)
      fail(s, fmt::format("expert {} of {}, which has {} experts", e, g.gguf, n));
  for (uint64_t e = 0; e < n; ++e)
    if (!g.experts.contains(static_cast<int64_t>(e)))
      throw Error(cp_.path(), tensor_object(g.gguf), std::nullopt,
                  fmt::format("expert {} of {} is missing: no {} in the checkpoint", e, n,
                              q(name_of(static_cast<int64_t>(e)))));
  auto m = std::make_unique<MappedTensor>();
  m->move = MappedTensor::Move::kStack;
  uint64_t bytes = 0;
  for (const auto& [e, s] : g.experts) {
    const bool alike =
        s.shape() == first.shape() && s.shape().size() == 2 &&
        (s.where.packed ? first.where.packed && s.where.packed->bits == first.where.packed->bits &&
                              s.where.packed->group == first.where.packed->group
                        : first.where.plain && s.where.plain->dtype == first.where.plain->dtype);
    if (!alike)
      fail(s, fmt::format("expert {} is {} {}, but expert {} is {} {}: the experts of {} must "
                          "all be 2-D and alike",
                          e, s.kind(), shape_text(s.shape()), g.experts.begin()->first,
                          first.kind(), shape_text(first.shape()), g.gguf));
    m->sources.push_back(s.where);
    bytes += s.bytes();
  }
  const auto& shape = first.shape();
  m->cols = static_cast<uint64_t>(shape[1]);
  m->rows = static_cast<uint64_t>(shape[0]) * n;
  std::string hf = first.name;
  if (const size_t at = hf.find(".experts.0."); at != std::string::npos)
    hf.replace(at, 11, fmt::format(".experts.{{0..{}}}.", n - 1));
  add_mapped(g, std::move(m), hf, bytes, {shape[1], shape[0], static_cast<int64_t>(n)}, first,
             transform_name(g.transform));
}

void Mapper::add_kv_b(const Group& g) {
  const Source& s = g.sources.front();
  const std::string prefix = fmt::format("blk.{}.", g.layer);
  const std::string suffix = g.gguf.substr(g.gguf.rfind('.'));
  // A base converted before llama.cpp split kv_b (or no base): the fused tensor, as it is.
  if (!o_.base || base_has(g.gguf) || !base_has(prefix + "attn_k_b" + suffix))
    return add_plain_or_packed(g);
  const std::string k_name = prefix + "attn_k_b" + suffix, v_name = prefix + "attn_v_b" + suffix;
  if (s.where.packed && o_.type != GgmlType::F32)
    fail(s, fmt::format(
                "the base {} splits it into {}, kv_b's key rows transposed, and {}: a transpose "
                "moves single values, not rows, so no q4_1 or q5_1 block could keep its group's "
                "scale; ways out: a base with the fused {} (converted before llama.cpp split "
                "it), or --type f32, which holds the pair exactly",
                q(o_.base->path()), k_name, v_name, prefix + "attn_kv_b" + suffix));
  const auto& cfg = cp_.config();
  const auto heads = cfg->n_head ? cfg->n_head : base_uint("attention.head_count");
  const auto v = cfg->v_head_dim ? cfg->v_head_dim : base_uint("attention.value_length_mla");
  std::optional<uint64_t> nope = cfg->qk_nope_head_dim;
  if (!nope) {
    const auto k = base_uint("attention.key_length_mla"), rope = base_uint("rope.dimension_count");
    if (k && rope && *k > *rope) nope = *k - *rope;
  }
  const auto& shape = s.shape();
  if (!heads || !v || !nope)
    fail(s,
         "splitting kv_b needs num_attention_heads, qk_nope_head_dim and v_head_dim (from "
         "config.json, or the base's MLA keys)");
  if (shape.size() != 2 || static_cast<uint64_t>(shape[0]) != *heads * (*nope + *v))
    fail(s, fmt::format("shape {}: kv_b_proj has {} heads x ({} key + {} value) rows",
                        shape_text(shape), *heads, *nope, *v));
  const uint64_t rank = static_cast<uint64_t>(shape[1]);
  for (const bool keys : {true, false}) {
    auto m = std::make_unique<MappedTensor>();
    m->move = keys ? MappedTensor::Move::kKvBKeys : MappedTensor::Move::kKvBValues;
    m->sources = {s.where};
    m->heads = *heads, m->nope = *nope, m->v = *v, m->source_cols = rank;
    m->rows = keys ? rank * *heads : *v * *heads;
    m->cols = keys ? *nope : rank;
    const auto h = static_cast<int64_t>(*heads);
    std::vector<int64_t> ne =
        keys ? std::vector<int64_t>{static_cast<int64_t>(*nope), static_cast<int64_t>(rank), h}
             : std::vector<int64_t>{static_cast<int64_t>(rank), static_cast<int64_t>(*v), h};
    Group part = g;
    part.gguf = keys ? k_name : v_name;
    std::optional<GgmlType> forced;
    if (keys && s.where.packed) forced = GgmlType::F32;
    add_mapped(part, std::move(m), s.name, keys ? s.bytes() : 0, std::move(ne), s,
               keys ? "kv_b-keys" : "kv_b-values", forced);
  }
}

void Mapper::run() {
  const auto& cfg = cp_.config();
  if (cfg) {
    const auto arch = !cfg->hf_class.empty() ? hf_architecture_of_class(cfg->hf_class)
                                             : hf_architecture_of_model_type(cfg->model_type);
    if (!arch) {
      if (cfg->hf_class.empty() && cfg->model_type.empty())
        throw Error(cfg->path, {}, std::nullopt,
                    "names no architecture (\"architectures\" or \"model_type\")");
      throw Error(cfg->path, key_object(cfg->hf_class.empty() ? "model_type" : "architectures"),
                  std::nullopt,
                  fmt::format("unknown architecture {}: the name map knows {}",
                              q(cfg->hf_class.empty() ? cfg->model_type : cfg->hf_class),
                              known_hf_classes()));
    }
    r_.architecture = *arch;
    if (o_.base && o_.base->architecture() != *arch)
      throw Error(cfg->path, key_object(cfg->hf_class.empty() ? "model_type" : "architectures"),
                  std::nullopt,
                  fmt::format("{} is llama.cpp's architecture {}, but the base {} is {} "
                              "(general.architecture)",
                              q(cfg->hf_class.empty() ? cfg->model_type : cfg->hf_class), q(*arch),
                              q(o_.base->path()), q(o_.base->architecture())));
  }
  // Every shard's packed tensors, then its tensors in the order of their data.
  std::vector<std::vector<PackedAffineTensor>> packed;
  size_t total = 0;
  for (const auto& shard : cp_.shards()) {
    packed.push_back(packed_affine_tensors(shard));
    total += packed.back().size();
  }
  r_.packed.reserve(total);  // rows point into it
  std::vector<Source> sources;
  for (size_t i = 0; i < cp_.shards().size(); ++i) {
    const SafetensorsFile& shard = cp_.shards()[i];
    const size_t first = r_.packed.size();
    for (auto& p : packed[i]) r_.packed.push_back(std::move(p));
    std::map<std::string, std::vector<const PackedAffineTensor*>, std::less<>> by_codes;
    std::set<std::string, std::less<>> consumed;
    for (size_t k = first; k < r_.packed.size(); ++k) {
      const PackedAffineTensor& t = r_.packed[k];
      by_codes[t.codes->name].push_back(&t);
      consumed.insert({t.codes->name, t.scales->name, t.mins->name});
    }
    for (const auto& st : shard.tensors()) {
      if (const auto it = by_codes.find(st.name); it != by_codes.end()) {
        for (const PackedAffineTensor* t : it->second)
          sources.push_back({t->name, {&shard, t, {}}});
      } else if (!consumed.contains(st.name)) {
        sources.push_back({st.name, {&shard, nullptr, &st}});
      }
    }
  }
  std::vector<Group> groups;
  std::map<std::string, size_t, std::less<>> where;
  size_t dropped = 0;
  for (Source& s : sources) {
    HfNameMatch m{s.name};
    if (cfg) {
      if (hf_name_dropped(s.name)) {
        ++dropped;
        continue;
      }
      const auto found = map_hf_name(r_.architecture, s.name);
      if (!found)
        fail(s, fmt::format("unmapped: the name map of architecture {} (from {}) has no GGUF "
                            "name for it",
                            q(r_.architecture), q(cfg->path)));
      m = *found;
      // DeepSeek-V3's multi-token-prediction layers follow the model's; llama.cpp drops them.
      if (r_.architecture == "deepseek2" && cfg->n_layers && m.layer >= 0 &&
          static_cast<uint64_t>(m.layer) >= *cfg->n_layers) {
        ++dropped;
        continue;
      }
    }
    auto [it, fresh] = where.emplace(m.gguf, groups.size());
    if (fresh) groups.push_back({m.gguf, m.transform, m.layer, {}, {}});
    Group& g = groups[it->second];
    if (m.transform == HfTransform::kStackExperts) {
      if (!g.experts.emplace(m.expert, s).second)
        fail(s, fmt::format("a second tensor for expert {} of {}", m.expert, m.gguf));
    } else {
      if (!g.sources.empty())
        fail(s, fmt::format("{} has a source already: {}", m.gguf, q(g.sources.front().name)));
      g.sources.push_back(s);
    }
  }
  for (const Group& g : groups) {
    switch (g.transform) {
      case HfTransform::kNone:
        add_plain_or_packed(g);
        break;
      case HfTransform::kPermuteQ:
      case HfTransform::kPermuteK:
        add_permuted(g);
        break;
      case HfTransform::kStackExperts:
        add_stack(g);
        break;
      case HfTransform::kKvB:
        add_kv_b(g);
        break;
    }
  }
  detail::place_import(r_, std::move(rows_), std::move(tensors_), o_);
  if (dropped > 0)
    r_.notes.push_back(fmt::format(
        "{} tensor{} of the checkpoint dropped as llama.cpp's converter drops {} (rotary "
        "frequencies, attention masks, layers past num_hidden_layers)",
        dropped, dropped == 1 ? "" : "s", dropped == 1 ? "it" : "them"));
}

}  // namespace

ImportResult import_checkpoint(const HfCheckpoint& cp, const ImportOptions& o) {
  ImportResult r;
  if (o.type && o.type != GgmlType::Q4_1 && o.type != GgmlType::Q5_1 && o.type != GgmlType::F32)
    usage_error(fmt::format(
        "--type {}: a packed-affine import writes q4_1, q5_1 or f32, the types that hold its "
        "values exactly (leave --type out for the smallest exact one)",
        traits(*o.type).name));
  for (const auto& shard : cp.shards()) {
    r.inputs.push_back(shard.path());
    r.bytes_before += shard.source().size();
  }
  // The index and config.json are read too: an output given their name must not replace them.
  if (!cp.index_path().empty()) r.inputs.push_back(cp.index_path());
  if (cp.config()) r.inputs.push_back(cp.config()->path);
  if (o.base) {
    for (const auto& p : o.base->paths()) r.inputs.push_back(p);
    r.bytes_before += o.base->total_bytes();
  }
  Mapper(cp, o, r).run();
  return r;
}

}  // namespace gguf
