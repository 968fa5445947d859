// Requant plans: decode each quantizable tensor row-chunk by row-chunk and encode it to the
// target type through the streaming row encoder.
#include "gguf/requant.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "gguf/check.h"
#include "gguf/codecs.h"
#include "gguf/encode.h"
#include "gguf/error.h"
#include "gguf/exact.h"
#include "gguf/fp16.h"
#include "gguf/names.h"
#include "gguf/splice.h"
#include "writer_internal.h"

namespace gguf {
namespace {

// Decodes rows [first, first + count) of a tensor into out.
void decode_rows(const TensorRef& t, int64_t n_per_row, int64_t first, int64_t count,
                 std::span<float> out) {
  const auto type = static_cast<GgmlType>(t.info->type_id);
  const uint64_t rb = *row_bytes(type, static_cast<uint64_t>(n_per_row));
  const auto data = t.data();
  dequantize(type, data.subspan(static_cast<size_t>(first) * rb, static_cast<size_t>(count) * rb),
             out);
  t.file->source().release(t.data_start() + static_cast<uint64_t>(first) * rb,
                           static_cast<uint64_t>(count) * rb);
}

// Column energy of each matrix of a tensor, computed once per matrix on first use.
class EnergyCache {
 public:
  EnergyCache(TensorRef t, int64_t n_per_row, int64_t rows_per_matrix)
      : t_(t), n_per_row_(n_per_row), rows_per_matrix_(rows_per_matrix) {}
  std::span<const float> get(int64_t mat) {
    std::lock_guard lock(mu_);
    auto it = cache_.find(mat);
    if (it == cache_.end()) {
      std::vector<float> w(static_cast<size_t>(n_per_row_), 0.0f);
      constexpr int64_t kRows = 256;
      std::vector<float> buf;
      for (int64_t r = 0; r < rows_per_matrix_; r += kRows) {
        const int64_t n = std::min(kRows, rows_per_matrix_ - r);
        buf.resize(static_cast<size_t>(n * n_per_row_));
        decode_rows(t_, n_per_row_, mat * rows_per_matrix_ + r, n, buf);
        const auto e = column_energy(buf, n, n_per_row_);
        for (size_t c = 0; c < w.size(); ++c) w[c] += e[c];
      }
      it = cache_.emplace(mat, std::move(w)).first;
    }
    return it->second;
  }

 private:
  TensorRef t_;
  int64_t n_per_row_, rows_per_matrix_;
  std::mutex mu_;
  std::map<int64_t, std::vector<float>> cache_;
};

}  // namespace

bool is_quantizable(const TensorInfo& t, std::string_view arch) {
  // As llama.cpp's quantizer (llama-quant.cpp): ggml's dimension count, which ignores trailing
  // 1s ([4096, 1] is a vector, as gguf-py may write it), and only tensors named "*weight"
  // (biases, 2-D ones too such as gpt-oss's ffn_*_exps.bias, stay as they are).
  int n_dims = static_cast<int>(t.shape.size());
  while (n_dims > 1 && t.shape[n_dims - 1] == 1) --n_dims;
  if (n_dims < 2) return false;
  if (!t.name.ends_with("weight")) return false;
  // Small or special 2-D weights llama.cpp never quantizes (Mamba and LFM2 convolutions,
  // RWKV mixers, T5 relative-position biases, Gemma 3n's altup/laurel/per-layer projection,
  // BERT position and token-type embeddings, multimodal position embeddings).
  for (std::string_view part : {"ssm_conv1d.weight",
                                "shortconv.conv.weight",
                                "time_mix_first.weight",
                                "time_mix_w0.weight",
                                "time_mix_w1.weight",
                                "time_mix_w2.weight",
                                "time_mix_v0.weight",
                                "time_mix_v1.weight",
                                "time_mix_v2.weight",
                                "time_mix_a0.weight",
                                "time_mix_a1.weight",
                                "time_mix_a2.weight",
                                "time_mix_g1.weight",
                                "time_mix_g2.weight",
                                "time_mix_decay_w1.weight",
                                "time_mix_decay_w2.weight",
                                "time_mix_lerp_fused.weight",
                                "attn_rel_b.weight",
                                "altup",
                                "laurel",
                                "per_layer_model_proj",
                                ".position_embd."})
    if (t.name.find(part) != std::string::npos) return false;
  if (t.name == "position_embd.weight" || t.name == "token_types.weight") return false;
  // Integer tensors (indices, positions, masks) are data, not weights: re-encoding them as
  // floats would change what they mean (and lose precision past 2^24), as llama-quantize knows.
  switch (static_cast<GgmlType>(t.type_id)) {
    case GgmlType::I8:
    case GgmlType::I16:
    case GgmlType::I32:
    case GgmlType::I64:
      return false;
    default:
      break;
  }
  const TensorName tn = classify_tensor(t.name, arch, static_cast<int>(t.shape.size()));
  return tn.role != Role::kNorm && tn.role != Role::kRouter;
}

RequantResult requant(const Model& model, const RequantOptions& o) {
  RequantResult r;
  r.exact = o.exact;
  const std::string arch = model.architecture();
  const TypeTraits& target = traits(o.type);
  if (!can_encode(o.type))
    usage_error(fmt::format("--type {}: no encoder for this type yet", target.name));
  if (o.exact && o.imatrix)
    usage_error("--imatrix has no use with --exact: exact paths quantize nothing");
  std::vector<bool> selected(model.tensors().size(), false);
  for (size_t i : select_in(model, o.selector)) selected[i] = true;
  r.inputs = model.paths();
  r.bytes_before = model.total_bytes();
  r.plan.metadata = Metadata();
  for (const auto& kv : model.metadata().entries())
    if (!kv.key.starts_with("split.")) r.plan.metadata.append(kv);
  if (auto note = raise_small_alignment(r.plan.metadata)) r.notes.push_back(std::move(*note));
  if (auto note = overlap_warning(model)) r.notes.push_back(std::move(*note));
  bool energy_note = false, lossy_note = false;
  size_t n_selected = 0, n_quantizable = 0, n_encoded = 0;
  for (size_t i = 0; i < model.tensors().size(); ++i) {
    const TensorRef& t = model.tensors()[i];
    const TensorInfo& info = *t.info;
    RequantRow row;
    row.name = info.name;
    row.source = t.file->path();
    row.type_before = row.type_after = info.type_id;
    row.bytes_before = row.bytes_after = info.require_bytes(t.file->path());
    info.require_ggml_name(t.file->path());
    PlanTensor pt{info.name, info.type_id, info.shape, row.bytes_before,
                  FileRange{t.file->source_ptr(), t.data_start()}};
    const bool quantizable = selected[i] && is_quantizable(info, arch);
    const bool encode = quantizable && info.type_id != target.id;
    n_selected += selected[i];
    n_quantizable += quantizable;
    n_encoded += encode;
    if (!encode) {
      row.action = "copy";
    } else {
      const auto src_type = static_cast<GgmlType>(info.type_id);
      if (!can_decode(src_type))
        throw Error(t.file->path(), tensor_object(info.name), info.type_offset(),
                    fmt::format("no decoder for its type {}", type_name(info.type_id)));
      const int64_t n_per_row = info.shape[0];
      const auto rb = row_bytes(o.type, static_cast<uint64_t>(n_per_row));
      if (!rb)
        throw Error(t.file->path(), tensor_object(info.name), info.dims_offset() + 4,  // ne0
                    fmt::format("row length {} is not a multiple of the {} block size {}",
                                n_per_row, target.name, target.block_size));
      const int64_t nrows = static_cast<int64_t>(info.n_elements) / std::max<int64_t>(1, n_per_row);
      RowEncoder e;
      e.type = o.type;
      e.n_per_row = n_per_row;
      e.nrows = nrows;
      e.rows_per_matrix = info.shape[1];
      e.threads = o.threads;
      e.tensor_name = info.name;
      e.source_path = t.file->path();
      e.source_offset = t.data_start();
      e.source_row_bytes = *row_bytes(src_type, static_cast<uint64_t>(n_per_row));
      const TensorRef ref = t;
      e.rows = [ref, n_per_row](int64_t first, int64_t count, std::span<float> out) {
        decode_rows(ref, n_per_row, first, count, out);
      };
      const int64_t n_mat = nrows / std::max<int64_t>(1, info.shape[1]);
      std::string why;
      const ExactPath exact = o.exact ? exact_path(src_type, o.type, why) : ExactPath::kNone;
      if (o.exact && exact == ExactPath::kNone)
        throw Error(t.file->path(), tensor_object(info.name), info.type_offset(),
                    why +
                        " (--layers, --role and --match choose the tensors to move; the others "
                        "are copied)");
      e.exact = exact == ExactPath::kRound;
      if (exact == ExactPath::kTranscode) {
        const uint64_t src_rb = e.source_row_bytes, dst_rb = *rb;
        const std::string path = t.file->path(), name = info.name;
        const uint64_t src_block = traits(src_type).type_size;
        const GgmlType to = o.type;
        pt.source = make_row_producer(
            dst_rb, nrows, name,
            [ref = t, src_type, to, src_rb, dst_rb, path, name, src_block, n_per_row](
                int64_t first, int64_t count, uint8_t* out) {
              const uint64_t f = static_cast<uint64_t>(first), c = static_cast<uint64_t>(count);
              const auto src = ref.data().subspan(f * src_rb, c * src_rb);
              if (const auto bad = transcode_blocks(src_type, to, src, {out, c * dst_rb})) {
                const uint64_t block = f * src_rb / src_block + *bad;
                uint16_t d;
                std::memcpy(&d, src.data() + *bad * src_block, 2);
                throw Error(path, tensor_object(name), ref.data_start() + block * src_block,
                            fmt::format("block {} (row {}): its scale {} makes a min of {} times "
                                        "it, which is not a finite f16: {} cannot hold this "
                                        "block exactly",
                                        block, block * 32 / static_cast<uint64_t>(n_per_row),
                                        fp16_to_fp32(d), src_type == GgmlType::Q5_0 ? -16 : -8,
                                        traits(to).name));
              }
              ref.file->source().release(ref.data_start() + f * src_rb, c * src_rb);
            });
      }
      if (uses_importance(o.type) && !o.exact) {
        const bool have = o.imatrix && o.imatrix->find(info.name);
        if (have) {
          // Validate the entry's length now so the error names the tensor before writing.
          (void)o.imatrix->weights(info.name, n_per_row, n_mat, 0);
          const Imatrix* im = o.imatrix;
          const std::string name = info.name;
          e.importance = [im, name, n_per_row, n_mat](int64_t mat) {
            return im->weights(name, n_per_row, n_mat, mat);
          };
          row.importance = ImportanceSource::kImatrix;
        } else if (requires_importance(o.type)) {
          auto cache = std::make_shared<EnergyCache>(t, n_per_row, info.shape[1]);
          e.importance = [cache](int64_t mat) { return cache->get(mat); };
          row.importance = ImportanceSource::kColumnEnergy;
          energy_note = true;
        }
      }
      row.type_after = target.id;
      row.bytes_after = *rb * static_cast<uint64_t>(nrows);
      row.action = (o.type == GgmlType::F32 || o.type == GgmlType::F16 || o.type == GgmlType::BF16)
                       ? "decode"
                       : "encode";
      // Decoding to f32 is exact (but for f64 sources), and so is what --exact proves; any
      // other target may round, and rounds again what a quantized source had rounded already.
      row.lossy = (o.type != GgmlType::F32 || src_type == GgmlType::F64) && !o.exact;
      row.requantized = row.lossy && traits(src_type).quantized;
      lossy_note |= row.requantized;
      pt.type_id = target.id;
      pt.bytes = row.bytes_after;
      if (exact != ExactPath::kTranscode) pt.source = make_encoding_producer(std::move(e));
    }
    r.plan.tensors.push_back(std::move(pt));
    r.rows.push_back(std::move(row));
  }
  // Writing a copy of the input is never what was asked for (e.g. --role norm, or a file
  // already at the type): say so instead.
  if (n_encoded == 0) {
    const auto the = [](size_t n) {
      return n == 1 ? std::string("the selected tensor")
                    : fmt::format("the {} selected tensors", n);
    };
    throw Error(
        model.path(), {}, std::nullopt,
        n_quantizable == 0
            ? fmt::format("nothing to re-encode: {} {} never re-encoded (1-D tensors, "
                          "biases, norms, the router, integer tensors and the small weights "
                          "llama-quantize keeps are always copied)",
                          the(n_selected), n_selected == 1 ? "is" : "are")
            : fmt::format("nothing to re-encode: {} that can be re-encoded {} already {}",
                          the(n_quantizable), n_quantizable == 1 ? "is" : "are", target.name));
  }
  if (energy_note)
    r.notes.push_back(
        fmt::format("{} needs an importance matrix and none was given for some tensors: using each "
                    "matrix's column energy (sum of squared weights) instead",
                    target.name));
  if (lossy_note)
    r.notes.push_back("some tensors were already quantized: re-encoding them adds error");
  if (is_activation_only(o.type))
    r.notes.push_back(fmt::format(
        "{} is a type ggml uses only for activations: llama.cpp loads this file but crashes "
        "computing with its {} tensors",
        target.name, target.name));
  // Truthful metadata: the file type of what holds most weights, and the quantization keys.
  set_file_type_keys(r.plan);
  // The quantize.imatrix.* keys say which matrix the file's tensors were encoded with: set only
  // when an encoder of this run used it. Otherwise the input's keys (an earlier step's) stay.
  const bool imatrix_used = std::any_of(r.rows.begin(), r.rows.end(), [](const RequantRow& row) {
    return row.importance == ImportanceSource::kImatrix;
  });
  if (o.imatrix && !imatrix_used)
    r.notes.push_back(fmt::format(
        "the importance matrix was not used ({}): the quantize.imatrix.* keys are left as they "
        "were",
        uses_importance(o.type) ? "it has no entry for any re-encoded tensor"
                                : fmt::format("{} takes no importance weights", target.name)));
  if (imatrix_used) {
    for (const char* k : {"quantize.imatrix.file", "quantize.imatrix.dataset",
                          "quantize.imatrix.entries_count", "quantize.imatrix.chunks_count"})
      r.plan.metadata.erase(k);  // an earlier step's, which this run's matrix replaces
    r.plan.metadata.set("quantize.imatrix.file", Value::string(o.imatrix->path()));
    if (!o.imatrix->datasets().empty())
      r.plan.metadata.set("quantize.imatrix.dataset", Value::string(o.imatrix->datasets().front()));
    // As llama-quantize records them: its integer overrides are written as u32, and the chunk
    // count only when the matrix gives one (a legacy .dat without its trailer does not).
    r.plan.metadata.set("quantize.imatrix.entries_count",
                        Value::u32(static_cast<uint32_t>(o.imatrix->size())));
    if (o.imatrix->chunk_count() > 0)
      r.plan.metadata.set("quantize.imatrix.chunks_count",
                          Value::u32(static_cast<uint32_t>(o.imatrix->chunk_count())));
  }
  std::vector<const PlanTensor*> ptrs;
  for (const auto& t : r.plan.tensors) ptrs.push_back(&t);
  r.bytes_after = detail::layout_of(r.plan.metadata, ptrs).file_size;
  return r;
}

}  // namespace gguf
