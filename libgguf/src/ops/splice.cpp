// splice(): the checks of gguf-splice and the plan they allow. Payloads are never decoded or
// re-encoded: every output tensor is a FileRange of the base or of one donor.
#include "gguf/ops/splice.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <new>

#include "base/xxh3.h"
#include "gguf/base/error.h"
#include "gguf/base/escape.h"
#include "gguf/format/hash.h"
#include "gguf/format/names.h"
#include "gguf/ops/check.h"
#include "write/serialize.h"

namespace gguf {
namespace {

constexpr const char* kFileType = "general.file_type";
constexpr const char* kQuantVersion = "general.quantization_version";
constexpr std::string_view kTakeHint = "expected DONOR.gguf:layers=37-42,role=routed,match=REGEX";
constexpr std::string_view kSelectorKeys[] = {"layers=", "role=", "match="};

// llama.cpp's llama_ftype values (llama.h) and the ggml type each one is mostly made of.
// Where several ftypes share a main type, the preferred one (what llama-quantize's plain name
// for that type means, e.g. Q4_K -> Q4_K_M) comes first. IQ2_S (28) is what llama.cpp's loader
// calls a file mostly of iq2_s, but llama-quantize makes an IQ2_S file mostly of iq2_xs (its
// IQ2_M, 29, is the one mostly of iq2_s): it names both.
struct FtypeEntry {
  uint32_t ftype;
  GgmlType main;
};
constexpr FtypeEntry kFtypes[] = {
    {0, GgmlType::F32},      {1, GgmlType::F16},    {2, GgmlType::Q4_0},     {3, GgmlType::Q4_1},
    {4, GgmlType::Q4_1},     {7, GgmlType::Q8_0},   {8, GgmlType::Q5_0},     {9, GgmlType::Q5_1},
    {10, GgmlType::Q2_K},    {21, GgmlType::Q2_K},  {12, GgmlType::Q3_K},    {11, GgmlType::Q3_K},
    {13, GgmlType::Q3_K},    {15, GgmlType::Q4_K},  {14, GgmlType::Q4_K},    {17, GgmlType::Q5_K},
    {16, GgmlType::Q5_K},    {18, GgmlType::Q6_K},  {19, GgmlType::IQ2_XXS}, {20, GgmlType::IQ2_XS},
    {23, GgmlType::IQ3_XXS}, {24, GgmlType::IQ1_S}, {25, GgmlType::IQ4_NL},  {26, GgmlType::IQ3_S},
    {22, GgmlType::IQ3_S},   {27, GgmlType::IQ3_S}, {28, GgmlType::IQ2_S},   {29, GgmlType::IQ2_S},
    {30, GgmlType::IQ4_XS},  {31, GgmlType::IQ1_M}, {32, GgmlType::BF16},    {36, GgmlType::TQ1_0},
    {37, GgmlType::TQ2_0},   {38, GgmlType::MXFP4}, {39, GgmlType::NVFP4},   {40, GgmlType::Q1_0},
    {41, GgmlType::Q2_0},
};
// Main types an ftype also names, never preferred for them: llama-quantize's IQ2_S (28) makes a
// file mostly of iq2_xs.
constexpr FtypeEntry kAlsoMain[] = {{28, GgmlType::IQ2_XS}};

// Whether a file of this ftype is mostly of type main.
bool ftype_has_main_type(uint64_t ftype, uint32_t main) {
  const auto has = [&](const auto& table) {
    return std::any_of(std::begin(table), std::end(table), [&](const FtypeEntry& e) {
      return e.ftype == ftype && static_cast<uint32_t>(e.main) == main;
    });
  };
  return has(kFtypes) || has(kAlsoMain);
}

// The type id holding the most elements among tensors of two or more dimensions as ggml counts
// them ([4096, 1] is a vector), or among all tensors when there are none; ties go to the lower
// type id.
std::optional<uint32_t> dominant_type(const std::vector<PlanTensor>& tensors) {
  const bool any_matrix = std::any_of(tensors.begin(), tensors.end(),
                                      [](const auto& t) { return ggml_dims(t.shape) >= 2; });
  std::map<uint32_t, uint64_t> elements;
  for (const auto& t : tensors) {
    if (any_matrix && ggml_dims(t.shape) < 2) continue;
    uint64_t n = 1;
    for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
    elements[t.type_id] += n;
  }
  if (elements.empty()) return std::nullopt;
  // std::map iterates ids in ascending order and max_element keeps the first maximum.
  const auto best =
      std::max_element(elements.begin(), elements.end(),
                       [](const auto& a, const auto& b) { return a.second < b.second; });
  return best->first;
}

std::string file_name(const std::string& path) {
  return std::filesystem::path(path).filename().string();
}

// A model's general.architecture for messages: quoted, "(none)", or what it holds instead of a
// string.
std::string arch_text(const Model& m) {
  const Value* v = m.metadata().find("general.architecture");
  if (!v) return "(none)";
  if (v->type() != ValueType::kString)
    return fmt::format("(a {}, not a string)", value_type_name(v->type()));
  return fmt::format("'{}'", escape_for_terminal(*v->as_string()));
}

// xxh3-64 over the header bytes [0, header_end) of every shard, in order: identifies the
// donor's tensor table and metadata without reading its payloads.
uint64_t header_hash(const Model& m) {
  detail::Xxh3 hash;
  for (const auto& f : m.shards()) hash.update(f->source().bytes(0, f->header_end()));
  return hash.digest();
}

struct Claim {
  size_t donor;
  const TensorRef* tensor;
};

// Where each output tensor comes from; checked against the base before anything is planned.
std::vector<std::optional<Claim>> resolve_claims(const Model& base, std::span<const Donor> donors,
                                                 const std::string& arch) {
  std::vector<std::string> names;
  std::vector<int> n_dims;
  for (const auto& t : base.tensors()) {
    names.push_back(t.name());
    n_dims.push_back(ggml_dims(t.info->shape));
  }
  std::vector<std::optional<Claim>> claims(names.size());
  for (size_t d = 0; d < donors.size(); ++d) {
    const Model& donor = *donors[d].model;
    // Layer-wise copying: a requested layer without the requested tensors is a mistake.
    const SelectOptions strict{.files = {base.path()}, .every_layer_must_match = true};
    for (size_t i : select_tensors(donors[d].selector, names, n_dims, arch, strict)) {
      const TensorRef& bt = base.tensors()[i];
      const std::string object = tensor_object(bt.name());
      if (claims[i]) {
        const size_t other = claims[i]->donor;
        throw Error({}, object, std::nullopt,
                    fmt::format("claimed by two donors: #{} '{}' ({}) and #{} '{}' ({}); a tensor "
                                "can come from one donor only",
                                other + 1, escape_for_terminal(donors[other].model->path()),
                                donors[other].selector.describe(), d + 1,
                                escape_for_terminal(donor.path()), donors[d].selector.describe()),
                    Error::Kind::kUsage);
      }
      const TensorRef* dt = donor.find(bt.name());
      if (!dt)
        throw Error(donor.path(), object, std::nullopt,
                    fmt::format("selected in the base ({}) but missing from the donor",
                                donors[d].selector.describe()));
      if (!dt->info->bytes)
        throw Error(dt->file->path(), object, dt->info->type_offset(),
                    fmt::format("type {} ({}) has no known size; its payload cannot be spliced",
                                dt->info->type_id,
                                find_type(dt->info->type_id) ? "removed from ggml" : "unknown id"));
      if (!same_shape(dt->info->shape, bt.info->shape))
        throw Error(
            dt->file->path(), object, dt->info->dims_offset(),
            fmt::format("shape {} differs from the base's {} in '{}'", shape_text(dt->info->shape),
                        shape_text(bt.info->shape), escape_for_terminal(bt.file->path())));
      claims[i] = Claim{d, dt};
    }
  }
  return claims;
}

// ds4 needs the gate and up experts of a layer to share one type; a splice that touches only
// one of them (or takes them from donors of different types) breaks that, and is refused
// unless allowed. A base whose layer mixes them already is not the splice's doing: a splice
// into that layer that leaves them mixed is allowed, with a warning.
void check_gate_up(const SpliceResult& r, const std::string& arch, const SpliceOptions& o,
                   std::vector<std::string>& warnings) {
  struct LayerTypes {
    std::vector<size_t> rows;  // gate and up
    bool spliced = false;      // any tensor of the layer
  };
  std::map<int, LayerTypes> layers;
  for (size_t i = 0; i < r.plan.tensors.size(); ++i) {
    const PlanTensor& t = r.plan.tensors[i];
    const TensorName tn = classify_tensor(t.name, arch, ggml_dims(t.shape));
    if (!tn.layer) continue;
    auto& l = layers[*tn.layer];
    l.spliced |= r.rows[i].action == PlanAction::kSplice;
    if (tn.is_gate_or_up_weight()) l.rows.push_back(i);
  }
  for (const auto& entry : layers) {
    // Not a structured binding: clang 14 cannot capture one in the lambda below.
    const int layer = entry.first;
    const LayerTypes& l = entry.second;
    if (l.rows.empty() || !l.spliced) continue;
    const SpliceRow& first = r.rows[l.rows.front()];
    const auto differs = [&](auto type) {
      for (size_t i : l.rows)
        if (type(r.rows[i]) != type(first)) return &r.rows[i];
      return static_cast<const SpliceRow*>(nullptr);
    };
    const SpliceRow* other = differs([](const SpliceRow& x) { return x.type_after; });
    if (!other) continue;
    if (differs([](const SpliceRow& x) { return x.type_before; })) {
      warnings.push_back(fmt::format(
          "layer {}: gate and up experts differ in type in the base already, and still do in the "
          "output ({} is {}, {} is {}); ds4 needs one type for both",
          layer, tensor_object(first.name), type_name(first.type_after), tensor_object(other->name),
          type_name(other->type_after)));
      continue;
    }
    std::string msg = fmt::format(
        "gate and up experts would differ in type: {} is {} (from '{}'), {} is {} (from '{}'); "
        "ds4 needs one type for both",
        tensor_object(first.name), type_name(first.type_after), escape_for_terminal(first.source),
        tensor_object(other->name), type_name(other->type_after),
        escape_for_terminal(other->source));
    if (!o.allow_mixed_gate_up)
      throw Error({}, fmt::format("layer {}", layer), std::nullopt,
                  msg + " (take both, or use --allow-mixed-gate-up)", Error::Kind::kUsage);
    warnings.push_back(fmt::format("layer {}: {}", layer, msg));
  }
}

// Where a key's value lies in the file it was read from, for errors about the value.
std::optional<uint64_t> value_at(const Metadata& m, std::string_view key) {
  for (const KeyValue& kv : m.entries())
    if (kv.key == key) return kv.value_offset();
  return std::nullopt;
}

// general.quantization_version describes how quantized payloads are laid out, so a donor's
// quantized bytes only mean the same thing under the same version.
void settle_quant_version(SpliceResult& r, const Model& base, std::span<const Donor> donors) {
  Metadata& m = r.plan.metadata;
  std::optional<uint64_t> have = m.get_uint(kQuantVersion);
  std::string have_from = base.path();  // the file the version in `have` comes from
  bool any_quantized = false;
  std::vector<bool> donor_quantized(donors.size(), false);
  std::vector<size_t> unversioned;  // donors of quantized payloads without the key
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const TypeTraits* tt = sized_type(r.rows[i].type_after);
    if (!tt || !tt->quantized) continue;
    any_quantized = true;
    if (r.rows[i].donor) donor_quantized[*r.rows[i].donor] = true;
  }
  for (size_t d = 0; d < donors.size(); ++d) {
    if (!donor_quantized[d]) continue;
    const auto v = donors[d].model->metadata().get_uint(kQuantVersion);
    if (!v) {
      unversioned.push_back(d);
      continue;
    }
    if (!have) {
      // A base without the key takes the first versioned donor's.
      m.set(kQuantVersion, Value::u32(static_cast<uint32_t>(*v)));
      have = v;
      have_from = donors[d].model->path();
    } else if (*v != *have) {
      throw Error(donors[d].model->path(), key_object(kQuantVersion),
                  value_at(donors[d].model->metadata(), kQuantVersion),
                  fmt::format("quantization version {} differs from {} in '{}'{}; quantized "
                              "payloads of different versions are not interchangeable",
                              *v, *have, escape_for_terminal(have_from),
                              have_from == base.path() ? "" : " (the base has none)"));
    }
  }
  // llama.cpp expects the key in any file holding quantized tensors.
  if (any_quantized && !have) m.set(kQuantVersion, Value::u32(2));
  // Not provably the same layout, not provably different: say so rather than refuse.
  for (size_t d : unversioned) {
    // A key of another type is there but says nothing: name its type, not its absence.
    const Value* v = donors[d].model->metadata().find(kQuantVersion);
    r.warnings.push_back(fmt::format(
        "donor '{}' has {}; its quantized payloads are taken to be of the output's version, {}",
        escape_for_terminal(donors[d].model->path()),
        v ? fmt::format("{} of type {}, not a whole number", kQuantVersion,
                        value_type_name(v->type()))
          : fmt::format("no {}", kQuantVersion),
        have.value_or(2)));
  }
}

// Keeps general.file_type truthful. A base value whose main type is still the dominant one
// stays (Q4_K_S stays Q4_K_S); otherwise the dominant type's preferred ftype replaces it, and
// when that type has no ftype the key is removed rather than left lying.
void settle_file_type(SpliceResult& r) {
  Metadata& m = r.plan.metadata;
  const Value* v = m.find(kFileType);
  if (!v) return;
  r.file_type_before = v->as_uint();
  const auto main = dominant_type(r.plan.tensors);
  const auto after = main ? ftype_of_type(*main) : std::nullopt;
  if (!after) {
    m.erase(kFileType);
    r.warnings.push_back(
        "general.file_type removed: the type holding most weights has no llama_ftype");
    return;
  }
  if (r.file_type_before && ftype_has_main_type(*r.file_type_before, *main)) {
    r.file_type_after = r.file_type_before;
    // llama.cpp reads the key as u32 and refuses any other type: a base that stored it as
    // another integer type is repaired, not copied.
    if (v->type() != ValueType::kU32) {
      r.warnings.push_back(
          fmt::format("general.file_type was stored as {}; written as u32, the "
                      "type llama.cpp reads",
                      value_type_name(v->type())));
      m.set(kFileType, Value::u32(static_cast<uint32_t>(*r.file_type_before)));
    }
    return;
  }
  m.set(kFileType, Value::u32(*after));
  r.file_type_after = *after;
}

}  // namespace

std::optional<uint32_t> ftype_of_type(uint32_t type_id) {
  for (const auto& e : kFtypes)
    if (static_cast<uint32_t>(e.main) == type_id) return e.ftype;
  return std::nullopt;
}

void set_file_type_keys(Plan& plan) {
  if (const auto ft = dominant_ftype(plan.tensors))
    plan.metadata.set("general.file_type", Value::u32(*ft));
  else
    plan.metadata.erase("general.file_type");
  bool quantized = false;
  for (const auto& t : plan.tensors)
    quantized |= traits(static_cast<GgmlType>(t.type_id)).quantized;
  if (quantized) plan.metadata.set(kQuantVersion, Value::u32(2));
}

std::optional<uint32_t> dominant_ftype(const std::vector<PlanTensor>& tensors) {
  const auto main = dominant_type(tensors);
  if (!main) return std::nullopt;
  return ftype_of_type(*main);
}

Selector with_default_role(Selector s) {
  if (s.roles.empty() && s.patterns.empty()) s.roles = parse_roles("routed");
  return s;
}

TakeSpec parse_take(std::string_view spec) {
  const auto bad = [&](const std::string& why) -> void {
    usage_error(fmt::format("invalid --take value '{}': {} ({})", escape_for_terminal(spec), why,
                            kTakeHint));
  };
  const auto starts_with_key = [](std::string_view s) {
    return std::any_of(std::begin(kSelectorKeys), std::end(kSelectorKeys),
                       [s](std::string_view k) { return s.starts_with(k); });
  };
  TakeSpec out;
  size_t colon = std::string_view::npos;
  for (size_t p = spec.find(':'); p != std::string_view::npos; p = spec.find(':', p + 1)) {
    if (starts_with_key(spec.substr(p + 1))) {
      colon = p;
      break;
    }
  }
  std::string_view rest;
  if (colon != std::string_view::npos) {
    out.path = std::string(spec.substr(0, colon));
    rest = spec.substr(colon + 1);
  } else if (spec.ends_with(':')) {
    out.path = std::string(spec.substr(0, spec.size() - 1));
  } else {
    // "donor.gguf:layer=3" must not be taken for a file name with a colon in it.
    const size_t last = spec.rfind(':');
    if (last != std::string_view::npos) {
      const std::string_view tail = spec.substr(last + 1);
      const size_t eq = tail.find('=');
      if (eq != std::string_view::npos && eq > 0 &&
          tail.substr(0, eq).find_first_not_of("abcdefghijklmnopqrstuvwxyz_-") ==
              std::string_view::npos)
        bad(fmt::format("unknown selector key '{}'", escape_for_terminal(tail.substr(0, eq))));
    }
    out.path = std::string(spec);
  }
  if (out.path.empty()) bad("missing donor path");

  std::vector<std::pair<std::string, std::string>> items;  // key, value
  size_t pos = 0;
  while (pos <= rest.size() && !rest.empty()) {
    const size_t comma = std::min(rest.find(',', pos), rest.size());
    const std::string_view piece = rest.substr(pos, comma - pos);
    if (starts_with_key(piece)) {
      const size_t eq = piece.find('=');
      items.emplace_back(std::string(piece.substr(0, eq)), std::string(piece.substr(eq + 1)));
    } else if (items.empty()) {
      bad(fmt::format("'{}' is not a selector item", escape_for_terminal(piece)));
    } else if (items.back().first != "match" && piece.find('=') != std::string_view::npos) {
      bad(fmt::format("unknown selector key in '{}'", escape_for_terminal(piece)));
    } else {
      items.back().second += fmt::format(",{}", piece);
    }
    pos = comma + 1;
  }
  std::vector<std::string> layers, roles, patterns;
  for (auto& [key, value] : items) {
    if (value.empty()) bad(fmt::format("empty value for {}=", key));
    (key == "layers" ? layers : key == "role" ? roles : patterns).push_back(std::move(value));
  }
  out.selector = parse_selector(layers, roles, patterns);
  return out;
}

SpliceResult splice(const Model& base, std::span<const Donor> donors, const SpliceOptions& o) {
  if (donors.empty() && o.edits.empty() && !o.alignment)
    usage_error(
        "nothing to do: give a donor (--donor or --take), a key edit (--set, --set-file, "
        "--delete) or --align");
  const std::string arch = base.architecture();
  SpliceResult r;
  r.base_path = base.path();
  r.inputs = base.paths();
  for (size_t d = 0; d < donors.size(); ++d) {
    if (!donors[d].model) throw Error(fmt::format("splice: donor #{} has no model", d + 1));
    const Model& donor = *donors[d].model;
    const std::string darch = donor.architecture();
    if (darch != arch) {
      const std::string msg =
          fmt::format("architecture {} differs from the base's {} ('{}')", arch_text(donor),
                      arch_text(base), escape_for_terminal(base.path()));
      if (!o.force_arch)
        throw Error(donor.path(), key_object("general.architecture"), std::nullopt,
                    msg + "; use --force-arch to splice anyway", Error::Kind::kUsage);
      r.warnings.push_back(fmt::format("'{}': {}", escape_for_terminal(donor.path()), msg));
    }
    r.donor_paths.push_back(donor.path());
    r.selectors.push_back(donors[d].selector.describe());
    for (const auto& p : donor.paths()) r.inputs.push_back(p);
  }
  // A --set-file value is read from a file too: -o naming it must not replace it.
  for (const KeyEdit& e : o.edits.edits)
    if (e.kind == KeyEdit::Kind::kSetFile) r.inputs.push_back(e.text);

  const auto claims = resolve_claims(base, donors, arch);

  r.plan.metadata = base.metadata();
  for (const char* k : {detail::kSplitNo, detail::kSplitCount, detail::kSplitTensors})
    r.plan.metadata.erase(k);
  if (o.alignment)
    set_alignment(r.plan.metadata, *o.alignment);
  else if (auto note = raise_small_alignment(r.plan.metadata))
    r.warnings.push_back(std::move(*note));
  if (auto w = overlap_warning(base)) r.warnings.push_back(std::move(*w));
  for (const Donor& d : donors)
    if (auto w = overlap_warning(*d.model)) r.warnings.push_back(std::move(*w));
  r.bytes_before = base.total_bytes();
  for (size_t i = 0; i < base.tensors().size(); ++i) {
    const TensorRef& bt = base.tensors()[i];
    const TensorRef& src = claims[i] ? *claims[i]->tensor : bt;
    SpliceRow row;
    row.name = bt.name();
    row.type_before = bt.info->type_id;
    row.bytes_before = bt.info->require_bytes(bt.file->path());
    bt.info->require_ggml_name(bt.file->path());
    row.type_after = src.info->type_id;
    row.bytes_after = *src.info->bytes;  // sized: resolve_claims checked donors, base above
    row.source = src.file->path();
    if (claims[i]) {
      row.action = PlanAction::kSplice;
      row.donor = claims[i]->donor;
      ++r.spliced;
    }
    r.tensor_bytes_before += row.bytes_before;
    r.tensor_bytes_after += row.bytes_after;
    PlanTensor t;
    t.name = row.name;
    t.type_id = row.type_after;
    t.shape = bt.info->shape;  // the donor's may differ in trailing 1s (same_shape)
    t.bytes = row.bytes_after;
    t.source = FileRange{src.file->source_ptr(), src.data_start()};
    r.plan.tensors.push_back(std::move(t));
    r.rows.push_back(std::move(row));
  }

  check_gate_up(r, arch, o, r.warnings);
  // Without a donor the tensors are the base's: its keys about them stay as they are.
  if (!donors.empty()) {
    settle_quant_version(r, base, donors);
    settle_file_type(r);
  }
  r.edits = !o.edits.empty() || donors.empty() || o.alignment;
  apply_metadata_edits(r.plan.metadata, o.edits, arch, base.path());

  // Provenance: enough to tell later which donors (by header hash) gave which tensors.
  std::vector<std::string> names, hashes;
  for (const Donor& d : donors) {
    names.push_back(file_name(d.model->path()));
    hashes.push_back(hex64(header_hash(*d.model)));
  }
  Metadata& m = r.plan.metadata;
  m.set("splice.base", Value::string(file_name(base.path())));
  m.set("splice.donors", Value::string_array(std::move(names)));
  m.set("splice.donor_header_xxh3", Value::string_array(std::move(hashes)));
  m.set("splice.selectors", Value::string_array(r.selectors));
  m.set("splice.tensor_count", Value::u32(static_cast<uint32_t>(r.spliced)));
  if (!o.edits.empty())
    m.set("splice.edits", Value::string_array(describe_edits(o.edits)));
  else
    m.erase("splice.edits");  // a spliced base's, describing another splice
  r.key_changes = metadata_changes(base.metadata(), m);

  // Lay the plan out now, so a dry run reports the real size and finds what the writer would
  // refuse (e.g. a name too long) before anything is written.
  std::vector<const PlanTensor*> ptrs;
  for (const auto& t : r.plan.tensors) ptrs.push_back(&t);
  detail::validate_header(r.plan.metadata, r.plan.version, ptrs);
  r.bytes_after = detail::layout_of(r.plan.metadata, ptrs).file_size;
  return r;
}

}  // namespace gguf
