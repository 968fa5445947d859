// gguf-diff's comparison: metadata, tensor sets, shapes, types, byte identity by streaming
// xxh3, and (via diff_metrics.cpp) the numeric error between tensors that differ.
#include "gguf/ops/diff.h"

#include <fmt/format.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>

#include "gguf/base/error.h"
#include "gguf/base/escape.h"
#include "gguf/base/threads.h"
#include "gguf/codecs/codecs.h"
#include "gguf/format/hash.h"
#include "gguf/format/json.h"
#include "gguf/io/source.h"
#include "ops/diff_internal.h"

namespace gguf {

std::string_view change_name(MetadataChange c) {
  switch (c) {
    case MetadataChange::kAdded:
      return "added";
    case MetadataChange::kRemoved:
      return "removed";
    case MetadataChange::kChanged:
      break;
  }
  return "changed";
}

std::string_view change_name(TensorChange c) {
  static constexpr std::string_view kNames[] = {"same",  "only_a", "only_b",
                                                "shape", "type",   "bytes"};
  return kNames[static_cast<size_t>(c)];
}

std::string_view closer_name(Closer c) {
  return c == Closer::kA ? "a" : c == Closer::kB ? "b" : "tie";
}

namespace {

// One side of the comparison: a model, or a manifest standing in for one.
struct SideTensor {
  std::string key;  // the name compared
  const std::string* name = nullptr;
  uint32_t type_id = 0;
  const std::vector<int64_t>* shape = nullptr;
  std::optional<uint64_t> bytes;
  const TensorRef* ref = nullptr;  // null for a manifest
  std::optional<uint64_t> xxh3;    // a manifest's recorded hash
};

struct Side {
  std::string origin;  // the path messages name: the model's first file, or the manifest
  std::vector<std::string> files;
  std::string arch;
  const Metadata* metadata = nullptr;
  const std::unordered_map<std::string, uint64_t>* metadata_xxh3 = nullptr;  // a manifest's
  std::vector<SideTensor> tensors;
  std::unordered_map<std::string, size_t> index;  // by key
};

Side model_side(const Model& m) {
  Side s;
  s.origin = m.path();
  s.files = m.paths();
  s.arch = m.architecture();
  s.metadata = &m.metadata();
  for (const TensorRef& t : m.tensors()) {
    s.index.emplace(t.name(), s.tensors.size());
    s.tensors.push_back(
        {t.name(), &t.name(), t.info->type_id, &t.info->shape, t.info->bytes, &t, std::nullopt});
  }
  return s;
}

Side manifest_side(const Manifest& m) {
  Side s;
  s.origin = m.path;
  s.files = m.files;
  s.arch = m.architecture;
  s.metadata = &m.metadata;
  s.metadata_xxh3 = &m.metadata_xxh3;
  for (const ManifestTensor& t : m.tensors) {
    s.index.emplace(t.name, s.tensors.size());
    s.tensors.push_back({t.name, &t.name, t.type_id, &t.shape, t.bytes, nullptr, t.xxh3});
  }
  return s;
}

// split.* keys describe how a model is cut into files, not the model: a split set and the
// merged file compare equal.
bool is_layout_key(std::string_view key) { return key.starts_with("split."); }

bool values_equal(const Value& a, const Value& b, bool json_forms) {
  if (!json_forms) return a == b;
  return a.type() == b.type() && (!a.is_array() || a.array_type() == b.array_type()) &&
         value_json(a) == value_json(b);
}

std::optional<uint64_t> first_difference(const Value& a, const Value& b, bool json_forms) {
  // Two strings: the first byte that differs (long ones are shown cut short).
  if (const std::string* sa = a.as_string(), *sb = b.as_string(); sa && sb) {
    const auto [ia, ib] = std::mismatch(sa->begin(), sa->end(), sb->begin(), sb->end());
    return static_cast<uint64_t>(ia - sa->begin());
  }
  if (!a.is_array() || !b.is_array()) return std::nullopt;
  // Elements of another type differ from the first one on, if there is one.
  if (a.array_type() != b.array_type())
    return a.array_size() || b.array_size() ? std::optional<uint64_t>(0) : std::nullopt;
  const uint64_t n = std::min(a.array_size(), b.array_size());
  const bool strings = a.array_type() == ValueType::kString;
  const size_t es = scalar_size(a.array_type());
  for (uint64_t i = 0; i < n; ++i) {
    bool same;
    if (strings)
      same = json_forms ? utf8_or_escaped(a.strings()[i]) == utf8_or_escaped(b.strings()[i])
                        : a.strings()[i] == b.strings()[i];
    else if (json_forms)
      same = value_json(a.element(i)) == value_json(b.element(i));
    else
      same = std::memcmp(a.packed().data() + i * es, b.packed().data() + i * es, es) == 0;
    if (!same) return i;
  }
  return n;
}

// A's value (kv) against B's: by the hash a manifest recorded for it when there is one.
bool same_value(const Side& a, const KeyValue& kv, const Value& b, bool json_forms) {
  if (a.metadata_xxh3) {
    const auto h = a.metadata_xxh3->find(kv.key);
    if (h != a.metadata_xxh3->end()) return value_xxh3(b) == h->second;
  }
  return values_equal(kv.value, b, json_forms);
}

std::vector<MetadataDiff> diff_metadata(const Side& a, const Side& b, bool json_forms) {
  const auto key_of = [&](const std::string& k) { return json_forms ? utf8_or_escaped(k) : k; };
  std::unordered_map<std::string, const KeyValue*> in_b, in_a;
  for (const auto& kv : b.metadata->entries()) in_b.emplace(key_of(kv.key), &kv);
  std::vector<MetadataDiff> out;
  for (const auto& kv : a.metadata->entries()) {
    if (is_layout_key(kv.key)) continue;
    const std::string key = key_of(kv.key);
    in_a.emplace(key, &kv);
    const auto it = in_b.find(key);
    if (it == in_b.end()) {
      out.push_back({kv.key, MetadataChange::kRemoved, kv.value, std::nullopt, std::nullopt});
    } else if (!same_value(a, kv, it->second->value, json_forms)) {
      auto first = first_difference(kv.value, it->second->value, json_forms);
      // A difference only the recorded hash sees (NaN payloads, -0.0 in an array) has no
      // index to show.
      const Value& va = kv.value;
      const Value& vb = it->second->value;
      if (first && va.is_array() && *first == va.array_size() &&
          va.array_size() == vb.array_size() && va.array_type() == vb.array_type())
        first.reset();
      if (first && va.as_string() && *first == va.as_string()->size() &&
          va.as_string()->size() == vb.as_string()->size())
        first.reset();
      out.push_back({kv.key, MetadataChange::kChanged, kv.value, it->second->value, first});
    }
  }
  for (const auto& kv : b.metadata->entries())
    if (!is_layout_key(kv.key) && !in_a.contains(key_of(kv.key)))
      out.push_back({kv.key, MetadataChange::kAdded, std::nullopt, kv.value, std::nullopt});
  return out;
}

TensorSide side_of(const SideTensor& t) { return {t.type_id, *t.shape, t.bytes, t.xxh3}; }

// Pairs of tensors with equal type and shape: identical exactly when their bytes are.
struct HashPair {
  size_t diff;  // index into DiffReport::tensors
  const SideTensor* a;
  const SideTensor* b;
};

// Hashes both sides of every pair (a manifest side is already hashed), largest payloads first
// so that one big tensor does not finish last on its own; stop_early cancels the rest as soon
// as one pair differs.
void hash_pairs(const std::vector<HashPair>& pairs, DiffReport& report, const DiffOptions& o) {
  struct Unit {
    size_t pair;
    const TensorRef* t;
    bool side_b;
  };
  std::vector<Unit> units;
  uint64_t total = 0;
  for (size_t p = 0; p < pairs.size(); ++p) {
    if (pairs[p].a->ref) units.push_back({p, pairs[p].a->ref, false});
    units.push_back({p, pairs[p].b->ref, true});
  }
  for (const Unit& u : units) total += u.t->data().size();
  std::stable_sort(units.begin(), units.end(), [](const Unit& x, const Unit& y) {
    return x.t->data().size() > y.t->data().size();
  });
  std::vector<uint64_t> ha(pairs.size()), hb(pairs.size());
  for (size_t p = 0; p < pairs.size(); ++p)
    if (!pairs[p].a->ref) ha[p] = *pairs[p].a->xxh3;
  std::vector<std::atomic<int>> pending(pairs.size());
  for (size_t p = 0; p < pairs.size(); ++p) pending[p] = pairs[p].a->ref ? 2 : 1;
  std::atomic<bool> cancel{false};
  std::atomic<uint64_t> done{0};
  tbb::parallel_for(size_t{0}, units.size(), [&](size_t k) {
    if (cancel.load(std::memory_order_relaxed)) return;
    const Unit& u = units[k];
    // In pieces: progress moves, cancellation is prompt, memory stays bounded.
    (u.side_b ? hb : ha)[u.pair] = hash_payload(*u.t, [&](uint64_t n) {
      const uint64_t d = done.fetch_add(n) + n;
      if (o.progress) o.progress(d, total);
      return !cancel.load(std::memory_order_relaxed);
    });
    if (pending[u.pair].fetch_sub(1) == 1 && o.stop_early && ha[u.pair] != hb[u.pair])
      cancel = true;
  });
  report.hashed_bytes = done.load();
  if (cancel) {
    report.stopped_early = true;
    report.identical = false;
    return;
  }
  for (size_t p = 0; p < pairs.size(); ++p) {
    TensorDiff& t = report.tensors[pairs[p].diff];
    t.a->xxh3 = ha[p];
    t.b->xxh3 = hb[p];
    if (ha[p] != hb[p]) t.change = TensorChange::kBytes;
  }
}

// Whether two tensors' payloads (of equal size) differ, read a piece at a time into per-thread
// buffers (memory bounded by pieces, whatever the file size) and stopping at the first piece
// that differs. The first piece is `first` bytes, the others 1 MiB.
bool payloads_differ(const TensorRef& a, const TensorRef& b, uint64_t first) {
  thread_local std::vector<uint8_t> buf_a, buf_b;
  const uint64_t size = a.data().size();
  constexpr uint64_t kPiece = uint64_t{1} << 20;
  for (uint64_t off = 0, n; off < size; off += n) {
    n = std::min(off == 0 ? first : kPiece, size - off);
    const auto x = a.file->source().stream(a.data_start() + off, n, buf_a);
    const auto y = b.file->source().stream(b.data_start() + off, n, buf_b);
    if (std::memcmp(x.data(), y.data(), x.size()) != 0) return true;
  }
  return false;
}

// --paranoid: equal hashes are confirmed byte by byte (a manifest side has no bytes).
void compare_bytes(const std::vector<HashPair>& pairs, DiffReport& report) {
  tbb::parallel_for(size_t{0}, pairs.size(), [&](size_t p) {
    TensorDiff& t = report.tensors[pairs[p].diff];
    if (t.change != TensorChange::kSame || !pairs[p].a->ref) return;
    if (payloads_differ(*pairs[p].a->ref, *pairs[p].b->ref, uint64_t{1} << 20)) {
      t.change = TensorChange::kBytes;
      t.note = "bytes differ although the xxh3 hashes agree";
    }
  });
}

// With --values or --reference the differing tensors are decoded anyway, so equal type and
// shape pairs are classified by comparing their bytes, which stops at the first difference,
// instead of hashing both in full (no xxh3 is then reported for them).
void classify_by_bytes(const std::vector<HashPair>& pairs, DiffReport& report) {
  std::vector<size_t> order(pairs.size());
  for (size_t p = 0; p < order.size(); ++p) order[p] = p;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return pairs[x].a->ref->data().size() > pairs[y].a->ref->data().size();
  });
  tbb::parallel_for(size_t{0}, order.size(), [&](size_t k) {
    const HashPair& p = pairs[order[k]];
    // A small first piece: tensors that differ mostly differ at once.
    if (payloads_differ(*p.a->ref, *p.b->ref, uint64_t{64} << 10))
      report.tensors[p.diff].change = TensorChange::kBytes;
  });
}

std::optional<std::string> decode_problem(const std::vector<uint32_t>& types) {
  for (uint32_t id : types) {
    const TypeTraits* tr = sized_type(id);
    if (!tr || !can_decode(static_cast<GgmlType>(id)))
      return fmt::format("no decoder for {} yet", type_name(id));
  }
  return std::nullopt;
}

// Whether the importance matrix has an entry for this tensor; throws when the entry fits
// neither ne0 columns nor n_mat slices of them (Imatrix::weights).
bool importance_covers(const Imatrix& im, const std::string& name,
                       const std::vector<int64_t>& shape) {
  const int64_t ne0 = shape.empty() ? 1 : shape[0];
  int64_t n_mat = 1;
  for (size_t d = 2; d < shape.size(); ++d) n_mat *= shape[d];
  return !im.weights(name, ne0, n_mat, 0).empty();
}

void measure(const Side& a, const Side& b, DiffReport& report, const DiffOptions& o) {
  std::vector<detail::ValueJob> jobs;
  std::vector<size_t> owner;
  for (size_t i = 0; i < report.tensors.size(); ++i) {
    TensorDiff& t = report.tensors[i];
    // Tensors identical in bytes are never decoded: against a reference they would tie.
    if (!t.a || !t.b || t.change == TensorChange::kShape || t.change == TensorChange::kSame)
      continue;
    const bool ab = o.values;
    const SideTensor& sa = a.tensors[a.index.at(t.name)];
    const SideTensor& sb = b.tensors[b.index.at(t.name)];
    const TensorRef* ref = o.reference ? o.reference->find(t.name) : nullptr;
    if (o.reference && !ref) t.note = "not in the reference";
    if (ref && !same_shape(ref->info->shape, t.a->shape)) {
      t.note = "shape differs from the reference";
      ref = nullptr;
    }
    if (!ab && !ref) continue;
    std::vector<uint32_t> types = {t.a->type_id, t.b->type_id};
    if (ref) types.push_back(ref->info->type_id);
    if (const auto problem = decode_problem(types)) {
      t.note = *problem;
      continue;
    }
    detail::ValueJob job{sa.ref, sb.ref, ref, ab, {}};
    if (o.importance) {
      if (importance_covers(*o.importance, t.name, t.a->shape))
        job.weights = o.importance->find(t.name)->values;
      else
        t.note = "not in the importance matrix";
    }
    jobs.push_back(job);
    owner.push_back(i);
  }
  const auto results = detail::measure_values(jobs, o.threads, o.progress);
  for (size_t j = 0; j < jobs.size(); ++j) {
    TensorDiff& t = report.tensors[owner[j]];
    t.metrics = results[j].ab;
    t.ref_a = results[j].ref_a;
    t.ref_b = results[j].ref_b;
    if (const TensorRef* ref = jobs[j].ref)
      t.ref = TensorSide{ref->info->type_id, ref->info->shape, ref->info->bytes, std::nullopt};
    report.decoded_elements += jobs[j].a->info->n_elements * (jobs[j].ref ? 3 : 2);
    if (t.ref_a && t.ref_b) {
      const uint64_t bad_a = t.ref_a->nan_x + t.ref_a->inf_x,
                     bad_b = t.ref_b->nan_x + t.ref_b->inf_x;
      const double sa = t.ref_a->score(), sb = t.ref_b->score();
      if (bad_a != bad_b)
        t.closer = bad_a < bad_b ? Closer::kA : Closer::kB;
      else
        t.closer = sa < sb ? Closer::kA : sb < sa ? Closer::kB : Closer::kTie;
    }
  }
}

void add_to_group(DiffGroup& g, const TensorDiff& t) {
  ++g.tensors;
  if (t.change != TensorChange::kSame) ++g.changed;
  if (t.a && t.a->bytes) g.bytes_a += *t.a->bytes;
  if (t.b && t.b->bytes) g.bytes_b += *t.b->bytes;
  if (t.metrics) ++g.measured, g.metrics.pool(*t.metrics);
  if (t.closer) {
    ++g.ref_measured;
    g.ref_a.pool(*t.ref_a);
    g.ref_b.pool(*t.ref_b);
    ++(*t.closer == Closer::kA ? g.closer_a : *t.closer == Closer::kB ? g.closer_b : g.ties);
  }
}

void summarise(DiffReport& r) {
  std::map<Role, DiffGroup> roles;
  std::map<int, DiffGroup> layers;  // -1: no layer, listed last
  for (const TensorDiff& t : r.tensors) {
    add_to_group(roles[t.role], t);
    add_to_group(layers[t.layer.value_or(-1)], t);
  }
  for (auto& [role, g] : roles) {
    g.key = std::string(role_name(role));
    r.by_role.push_back(std::move(g));
  }
  for (auto& [layer, g] : layers) {
    g.key = layer < 0 ? "-" : std::to_string(layer);
    if (layer >= 0) r.by_layer.push_back(std::move(g));
  }
  if (layers.contains(-1)) r.by_layer.push_back(std::move(layers[-1]));
}

// covered: what side A covers when it is a manifest written with a selection; B's tensors
// outside it were never recorded and are left out rather than reported as only in B.
DiffReport diff_sides(const Side& a, const Side& b, bool json_forms, const DiffOptions& o,
                      const Selector* covered = nullptr) {
  DiffReport r;
  r.files_a = a.files;
  r.selection = o.selector;
  r.files_b = b.files;
  if (o.reference) r.files_ref = o.reference->paths();
  r.values = o.values;
  r.weighted = o.importance != nullptr;
  r.reference = o.reference != nullptr;
  r.metadata_compared = o.metadata;
  if (o.metadata) r.metadata = diff_metadata(a, b, json_forms);
  if (!r.metadata.empty()) r.identical = false;
  // stop_early stops below, once the selection and the inputs are checked: a selection error,
  // a manifest without hashes or an importance matrix that does not fit stays trouble (exit 2)
  // when the metadata already differs.

  // A's tensors in A's order, then those only in B.
  std::vector<std::pair<const SideTensor*, const SideTensor*>> rows;
  for (const SideTensor& t : a.tensors) {
    const auto it = b.index.find(t.key);
    rows.emplace_back(&t, it == b.index.end() ? nullptr : &b.tensors[it->second]);
  }
  const std::string arch = a.arch.empty() ? b.arch : a.arch;
  const auto recorded = [&](const SideTensor& t) {
    return !covered || covered->empty() ||
           covered->matches(*t.name, classify_tensor(*t.name, arch, ggml_dims(*t.shape)));
  };
  for (const SideTensor& t : b.tensors)
    if (!a.index.contains(t.key) && recorded(t)) rows.emplace_back(nullptr, &t);
  std::vector<std::string> names;
  std::vector<int> dims;
  for (const auto& [ta, tb] : rows) {
    const SideTensor& t = ta ? *ta : *tb;
    names.push_back(tb && tb->ref ? *tb->name : *t.name);
    dims.push_back(ggml_dims(*t.shape));
  }
  std::vector<size_t> chosen;
  if (o.selector.empty()) {
    for (size_t i = 0; i < rows.size(); ++i) chosen.push_back(i);
  } else if (!rows.empty()) {
    // The names are the union of both sides: a layer is missing only when neither has it.
    // With a manifest of part of a file, B's tensors outside that part were left out above,
    // so only the manifest is named as missing what was asked, and the message says why.
    const bool partial = covered && !covered->empty();
    try {
      chosen = select_tensors(
          o.selector, names, dims, arch,
          SelectOptions{.files = partial ? std::vector<std::string>{a.origin}
                                         : std::vector<std::string>{a.origin, b.origin}});
    } catch (const Error& e) {
      if (!partial) throw;
      throw Error(e.path(), e.object(), e.offset(),
                  fmt::format("{}; the manifest covers only {}, so '{}' is compared there only",
                              e.message(), escape_for_terminal(covered->describe()),
                              escape_for_terminal(b.origin)),
                  e.kind());
    }
  }

  std::vector<HashPair> pairs;
  for (size_t i : chosen) {
    const auto [ta, tb] = rows[i];
    TensorDiff t;
    t.name = names[i];
    const TensorName tn = classify_tensor(t.name, arch, dims[i]);
    t.role = tn.role;
    t.layer = tn.layer;
    if (ta) t.a = side_of(*ta), r.bytes_a += ta->bytes.value_or(0);
    if (tb) t.b = side_of(*tb), r.bytes_b += tb->bytes.value_or(0);
    if (!tb)
      t.change = TensorChange::kOnlyA;
    else if (!ta)
      t.change = TensorChange::kOnlyB;
    else if (!same_shape(*ta->shape, *tb->shape))
      t.change = TensorChange::kShape;
    else if (ta->type_id != tb->type_id)
      t.change = TensorChange::kType;
    else
      pairs.push_back({r.tensors.size(), ta, tb});
    if (t.change != TensorChange::kSame) r.identical = false;
    r.tensors.push_back(std::move(t));
  }
  for (const HashPair& p : pairs)
    if (!p.a->ref && !p.a->xxh3)
      throw Error(a.origin, tensor_object(*p.a->name), std::nullopt,
                  "the manifest has no xxh3 for this tensor; write it with gguf-inspect --hashes "
                  "--json");
  // Every entry of the importance matrix for a compared tensor must fit it, whether or not
  // the tensor differs: the exit status must not depend on which tensors do.
  if (o.importance)
    for (size_t i : chosen)
      if (const auto [ta, tb] = rows[i]; ta && tb && same_shape(*ta->shape, *tb->shape))
        importance_covers(*o.importance, names[i], *ta->shape);

  if (o.stop_early && !r.identical) {
    r.stopped_early = true;
    return r;
  }
  const unsigned threads = thread_count(o.threads);
  {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads);
    // (A manifest side has no bytes, but diff_manifest refuses --values and --reference.)
    if ((o.values || o.reference) && !o.stop_early) {
      classify_by_bytes(pairs, r);
    } else {
      hash_pairs(pairs, r, o);
      if (r.stopped_early) return r;
      if (o.paranoid) compare_bytes(pairs, r);
    }
  }
  // Indexed like TensorChange.
  uint64_t* const counters[] = {&r.counts.same,  &r.counts.only_a, &r.counts.only_b,
                                &r.counts.shape, &r.counts.type,   &r.counts.bytes};
  for (const TensorDiff& t : r.tensors) ++*counters[static_cast<size_t>(t.change)];
  if (r.counts.changed()) r.identical = false;
  if (o.stop_early && !r.identical) {
    r.stopped_early = true;
    return r;
  }
  if ((o.values || o.reference) && !o.stop_early) measure(a, b, r, o);
  summarise(r);
  return r;
}

}  // namespace

std::vector<MetadataDiff> metadata_changes(const Metadata& a, const Metadata& b) {
  Side sa, sb;
  sa.metadata = &a;
  sb.metadata = &b;
  return diff_metadata(sa, sb, false);
}

DiffReport diff_models(const Model& a, const Model& b, const DiffOptions& options) {
  return diff_sides(model_side(a), model_side(b), false, options);
}

DiffReport diff_manifest(const Manifest& a, const Model& b, const DiffOptions& options) {
  if (options.values || options.reference)
    usage_error(
        "--values and --reference need the tensor data of both sides; a manifest holds "
        "only hashes");
  DiffReport r = diff_sides(manifest_side(a), model_side(b), true, options, &a.selection);
  r.manifest = a.path;
  r.manifest_selection = a.selection;
  return r;
}

}  // namespace gguf
