// The block scale layouts and the scan for non-finite scales (codecs/block_scales.h).
#include "codecs/block_scales.h"

#include <cstddef>

#include "codecs/codec_blocks.h"
#include "gguf/format/types.h"

namespace gguf {
namespace detail {

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

namespace {

// iq1_m keeps its fp16 block scale in the top nibbles of the four u16 words of its scales.
uint16_t iq1m_scale(const uint8_t* block) {
  const auto s = [&](int i) {
    return load<uint16_t>(block + offsetof(detail::BlockIq1M, scales) + 2 * i);
  };
  return static_cast<uint16_t>((s(0) >> 12) | ((s(1) >> 8) & 0x00F0) | ((s(2) >> 4) & 0x0F00) |
                               (s(3) & 0xF000));
}

}  // namespace

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

}  // namespace detail

std::optional<std::pair<uint64_t, std::string>> first_nonfinite_scale(
    GgmlType type, std::span<const uint8_t> blocks) {
  using namespace detail;
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

}  // namespace gguf
