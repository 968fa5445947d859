// check_model's data scan: NaN/Inf in float payloads and in the scales of quant blocks (their
// byte offsets per type), in chunks read on all cores.
#include <fmt/format.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "codecs/codec_blocks.h"
#include "gguf/base/escape.h"
#include "gguf/base/threads.h"
#include "ops/check_parts.h"

namespace gguf {
namespace {

const char* plural(uint64_t n, const char* one, const char* many) { return n == 1 ? one : many; }

// How a type's payload can hold a non-finite number.
enum class Scan { kNone, kF32, kF16, kBF16, kF64, kHalfScales, kQ8K, kIQ1M, kE8M0 };

struct ScaleField {
  uint16_t at;  // byte offset inside the block
  const char* name;
};

struct ScanLayout {
  Scan scan = Scan::kNone;
  ScaleField fields[2] = {};
  int n_fields = 0;
};

// Where each type's block keeps its scales (codec_blocks.h). mxfp4's E8M0 exponent byte 0xFF is
// the format's NaN: ggml's decoder reads it as 2^127, but ggml_validate_row_data (llama.cpp's
// tensor check) refuses it. nvfp4's UE4M3 scales are valid for every byte (ggml checks
// nothing), so they are not listed.
#define GGUF_FIELD(Block, field, name) \
  ScaleField { static_cast<uint16_t>(offsetof(detail::Block, field)), name }
ScanLayout scan_layout(uint32_t type) {
  using T = GgmlType;
  const auto half = [](ScaleField a) { return ScanLayout{Scan::kHalfScales, {a, {}}, 1}; };
  const auto halves = [](ScaleField a, ScaleField b) {
    return ScanLayout{Scan::kHalfScales, {a, b}, 2};
  };
  switch (static_cast<T>(type)) {
    case T::F32:
      return {Scan::kF32};
    case T::F16:
      return {Scan::kF16};
    case T::BF16:
      return {Scan::kBF16};
    case T::F64:
      return {Scan::kF64};
    case T::Q4_1:
      return halves(GGUF_FIELD(BlockQ4_1, d, "d"), GGUF_FIELD(BlockQ4_1, m, "m"));
    case T::Q5_1:
      return halves(GGUF_FIELD(BlockQ5_1, d, "d"), GGUF_FIELD(BlockQ5_1, m, "m"));
    case T::Q8_1:
      return halves(GGUF_FIELD(BlockQ8_1, d, "d"), GGUF_FIELD(BlockQ8_1, s, "s"));
    case T::Q4_K:
      return halves(GGUF_FIELD(BlockQ4_K, d, "d"), GGUF_FIELD(BlockQ4_K, dmin, "dmin"));
    case T::Q5_K:
      return halves(GGUF_FIELD(BlockQ5_K, d, "d"), GGUF_FIELD(BlockQ5_K, dmin, "dmin"));
    case T::Q2_K:
      return halves(GGUF_FIELD(BlockQ2_K, d, "d"), GGUF_FIELD(BlockQ2_K, dmin, "dmin"));
    case T::Q3_K:
      return half(GGUF_FIELD(BlockQ3_K, d, "d"));
    case T::Q6_K:
      return half(GGUF_FIELD(BlockQ6_K, d, "d"));
    case T::TQ1_0:
      return half(GGUF_FIELD(BlockTq1_0, d, "d"));
    case T::TQ2_0:
      return half(GGUF_FIELD(BlockTq2_0, d, "d"));
    case T::Q4_0:
      return half(GGUF_FIELD(BlockQ4_0, d, "d"));
    case T::Q5_0:
      return half(GGUF_FIELD(BlockQ5_0, d, "d"));
    case T::Q8_0:
      return half(GGUF_FIELD(BlockQ8_0, d, "d"));
    case T::IQ2_XXS:
      return half(GGUF_FIELD(BlockIq2Xxs, d, "d"));
    case T::IQ2_XS:
      return half(GGUF_FIELD(BlockIq2Xs, d, "d"));
    case T::IQ2_S:
      return half(GGUF_FIELD(BlockIq2S, d, "d"));
    case T::IQ3_XXS:
      return half(GGUF_FIELD(BlockIq3Xxs, d, "d"));
    case T::IQ3_S:
      return half(GGUF_FIELD(BlockIq3S, d, "d"));
    case T::IQ1_S:
      return half(GGUF_FIELD(BlockIq1S, d, "d"));
    case T::IQ4_NL:
      return half(GGUF_FIELD(BlockIq4Nl, d, "d"));
    case T::IQ4_XS:
      return half(GGUF_FIELD(BlockIq4Xs, d, "d"));
    case T::Q1_0:
      return half(GGUF_FIELD(BlockQ1_0, d, "d"));
    case T::Q2_0:
      return half(GGUF_FIELD(BlockQ2_0, d, "d"));
    case T::Q8_K:
      return {Scan::kQ8K, {GGUF_FIELD(BlockQ8_K, d, "d"), {}}, 1};
    case T::IQ1_M:
      return {Scan::kIQ1M, {GGUF_FIELD(BlockIq1M, scales, "scale"), {}}, 1};
    case T::MXFP4:
      return {Scan::kE8M0, {GGUF_FIELD(BlockMxfp4, e, "e"), {}}, 1};
    default:
      return {};
  }
}
#undef GGUF_FIELD

template <class W>
W load(const uint8_t* p) {
  W w;
  std::memcpy(&w, p, sizeof(W));
  return w;
}

// iq1_m keeps its fp16 block scale in the top nibbles of the four u16 words of its scales.
uint16_t iq1m_scale(const uint8_t* block) {
  const auto s = [&](int i) {
    return load<uint16_t>(block + offsetof(detail::BlockIq1M, scales) + 2 * i);
  };
  return static_cast<uint16_t>((s(0) >> 12) | ((s(1) >> 8) & 0x00F0) | ((s(2) >> 4) & 0x0F00) |
                               (s(3) & 0xF000));
}

// Finds non-finite numbers in [p, p + n units): counts them, remembers the first.
struct Hits {
  uint64_t count = 0;
  uint64_t first = UINT64_MAX;  // unit index inside the tensor
  int field = 0;
  uint64_t bits = 0;  // the offending number's bits
};

template <class W>
void scan_floats(const uint8_t* p, uint64_t n, uint64_t base, W exp_mask, Hits& h) {
  uint64_t c = 0;
  for (uint64_t i = 0; i < n; ++i) c += (load<W>(p + i * sizeof(W)) & exp_mask) == exp_mask;
  if (c == 0) return;
  h.count = c;
  for (uint64_t i = 0; i < n; ++i) {
    const W w = load<W>(p + i * sizeof(W));
    if ((w & exp_mask) == exp_mask) {
      h.first = base + i;
      h.bits = w;
      return;
    }
  }
}

void scan_blocks(const ScanLayout& l, const uint8_t* p, uint64_t n, uint64_t block_bytes,
                 uint64_t base, Hits& h) {
  for (uint64_t b = 0; b < n; ++b) {
    const uint8_t* blk = p + b * block_bytes;
    for (int k = 0; k < l.n_fields; ++k) {
      uint64_t bits;
      bool bad;
      if (l.scan == Scan::kQ8K) {
        bits = load<uint32_t>(blk);
        bad = (bits & 0x7F800000u) == 0x7F800000u;
      } else if (l.scan == Scan::kE8M0) {
        bits = blk[l.fields[k].at];
        bad = bits == 0xFF;
      } else {
        bits = l.scan == Scan::kIQ1M ? iq1m_scale(blk) : load<uint16_t>(blk + l.fields[k].at);
        bad = (bits & 0x7C00u) == 0x7C00u;
      }
      if (!bad) continue;
      if (h.count++ == 0) h.first = base + b, h.field = k, h.bits = bits;
      break;  // count blocks, not fields
    }
  }
}

// "nan", "inf" or "-inf" from the bits of a float with the given exponent/mantissa widths.
std::string name_nonfinite(uint64_t bits, int mantissa_bits, int total_bits) {
  if (bits & ((uint64_t{1} << mantissa_bits) - 1)) return "nan";
  return (bits >> (total_bits - 1)) & 1 ? "-inf" : "inf";
}

struct Chunk {
  size_t tensor;  // index into Model::tensors()
  uint64_t first_unit, n_units;
};

class DataScanner {
 public:
  DataScanner(const Model& m, const CheckOptions& o,
              const std::unordered_set<const TensorInfo*>& scannable, std::vector<Problem>& out)
      : model_(m), options_(o), scannable_(scannable), out_(out) {}

  void scan_data() {
    const auto& refs = model_.tensors();
    std::vector<ScanLayout> layouts(refs.size());
    std::vector<Chunk> chunks;
    for (size_t i = 0; i < refs.size(); ++i) {
      const TensorInfo& t = *refs[i].info;
      if (!scannable_.count(&t) || *t.bytes == 0) continue;
      layouts[i] = scan_layout(t.type_id);
      if (layouts[i].scan == Scan::kNone) continue;
      const uint64_t unit = t.type()->type_size;
      const uint64_t units = *t.bytes / unit;
      const uint64_t per_chunk = std::max<uint64_t>(1, options_.chunk_bytes / unit);
      for (uint64_t u = 0; u < units; u += per_chunk)
        chunks.push_back({i, u, std::min(per_chunk, units - u)});
    }
    std::vector<Hits> hits(chunks.size());
    const auto work = [&](const tbb::blocked_range<size_t>& r) {
      for (size_t c = r.begin(); c != r.end(); ++c) {
        const Chunk& ch = chunks[c];
        const TensorRef& ref = refs[ch.tensor];
        const uint64_t unit = ref.info->type()->type_size;
        thread_local std::vector<uint8_t> buf;  // the chunk, read (memory bounded by chunks)
        const uint8_t* p =
            ref.file->source()
                .stream(ref.data_start() + ch.first_unit * unit, ch.n_units * unit, buf)
                .data();
        const ScanLayout& l = layouts[ch.tensor];
        Hits& h = hits[c];
        switch (l.scan) {
          case Scan::kF32:
            scan_floats<uint32_t>(p, ch.n_units, ch.first_unit, 0x7F800000u, h);
            break;
          case Scan::kF16:
            scan_floats<uint16_t>(p, ch.n_units, ch.first_unit, 0x7C00u, h);
            break;
          case Scan::kBF16:
            scan_floats<uint16_t>(p, ch.n_units, ch.first_unit, 0x7F80u, h);
            break;
          case Scan::kF64:
            scan_floats<uint64_t>(p, ch.n_units, ch.first_unit, 0x7FF0000000000000u, h);
            break;
          default:
            scan_blocks(l, p, ch.n_units, unit, ch.first_unit, h);
        }
      }
    };
    tbb::task_arena arena(static_cast<int>(thread_count(options_.threads)));
    arena.execute([&] { tbb::parallel_for(tbb::blocked_range<size_t>(0, chunks.size()), work); });

    // Chunks of a tensor are contiguous and in order: the first hit is the first chunk's.
    for (size_t c = 0; c < chunks.size();) {
      const size_t i = chunks[c].tensor;
      Hits total;
      for (; c < chunks.size() && chunks[c].tensor == i; ++c) {
        if (total.count == 0)
          total = hits[c];
        else
          total.count += hits[c].count;
      }
      if (total.count) report_hits(refs[i], layouts[i], total);
    }
  }

 private:
  const Model& model_;
  const CheckOptions& options_;
  const std::unordered_set<const TensorInfo*>& scannable_;
  std::vector<Problem>& out_;

  void add(const GgufFile& f, std::string object, std::optional<uint64_t> at, std::string msg,
           const char* severity = "error") {
    out_.push_back({f.path(), std::move(object), at, std::move(msg), severity});
  }

  void report_hits(const TensorRef& ref, const ScanLayout& l, const Hits& h) {
    const uint64_t unit = ref.info->type()->type_size;
    uint64_t at = ref.data_start() + h.first * unit;
    std::string msg;
    switch (l.scan) {
      case Scan::kF32:
      case Scan::kF16:
      case Scan::kBF16:
      case Scan::kF64: {
        const int mant = l.scan == Scan::kF32    ? 23
                         : l.scan == Scan::kF16  ? 10
                         : l.scan == Scan::kBF16 ? 7
                                                 : 52;
        msg = fmt::format("{} non-finite {} (first: {} at element {})", h.count,
                          plural(h.count, "value", "values"),
                          name_nonfinite(h.bits, mant, static_cast<int>(unit * 8)), h.first);
        break;
      }
      default: {
        const bool f32 = l.scan == Scan::kQ8K;
        at += l.fields[h.field].at;
        msg = fmt::format("{} {} with a non-finite scale (first: block {}, {} = {})", h.count,
                          plural(h.count, "block", "blocks"), h.first, l.fields[h.field].name,
                          l.scan == Scan::kE8M0
                              ? std::string("nan (E8M0 0xff)")
                              : name_nonfinite(h.bits, f32 ? 23 : 10, f32 ? 32 : 16));
      }
    }
    add(*ref.file, tensor_object(ref.name()), at, std::move(msg));
  }
};

}  // namespace

std::optional<std::pair<uint64_t, std::string>> first_nonfinite_scale(
    GgmlType type, std::span<const uint8_t> blocks) {
  const ScanLayout l = scan_layout(static_cast<uint32_t>(type));
  if (l.scan != Scan::kHalfScales && l.scan != Scan::kQ8K && l.scan != Scan::kIQ1M &&
      l.scan != Scan::kE8M0)
    return {};
  const uint64_t unit = traits(type).type_size;
  Hits h;
  scan_blocks(l, blocks.data(), blocks.size() / unit, unit, 0, h);
  if (h.count == 0) return {};
  return std::pair<uint64_t, std::string>{h.first, l.fields[h.field].name};
}

void detail::scan_data(const Model& model, const CheckOptions& options,
                       const std::unordered_set<const TensorInfo*>& scannable,
                       std::vector<Problem>& out) {
  DataScanner(model, options, scannable, out).scan_data();
}

}  // namespace gguf
