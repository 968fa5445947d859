// Dispatch from a ggml type to its family's codec, with the size checks every caller needs.
#include "gguf/codecs/codecs.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>
#include <utility>
#include <vector>

#include "codecs/codec_registry.h"
#include "gguf/base/error.h"
#include "gguf/base/escape.h"

namespace gguf {
namespace {

const detail::CodecTable& table() {
  static const detail::CodecTable t = [] {
    detail::CodecTable t{};
    detail::register_float_codecs(t);
    detail::register_legacy_codecs(t);
    detail::register_kquant_codecs(t);
    detail::register_iquant_codecs(t);
    detail::register_misc_codecs(t);
    return t;
  }();
  return t;
}

}  // namespace

std::string unknown_type_message(std::string_view option, std::string_view name,
                                 bool with_selectors) {
  // llama-quantize's presets that are not type names, and the type each is built around.
  static constexpr std::pair<std::string_view, std::string_view> kPresets[] = {
      {"q2_k_s", "q2_K"}, {"q3_k_s", "q3_K"},  {"q3_k_m", "q3_K"}, {"q3_k_l", "q3_K"},
      {"q4_k_s", "q4_K"}, {"q4_k_m", "q4_K"},  {"q5_k_s", "q5_K"}, {"q5_k_m", "q5_K"},
      {"iq2_m", "iq2_s"}, {"iq3_xs", "iq3_s"}, {"iq3_m", "iq3_s"}, {"mxfp4_moe", "mxfp4"}};
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.starts_with("mostly_")) lower.erase(0, 7);
  for (const auto& [preset, type] : kPresets)
    if (lower == preset)
      return fmt::format(
          "{}: '{}' is a llama-quantize preset (a mix of types), not a ggml type: {}{}", option,
          escape_for_terminal(name),
          with_selectors ? fmt::format("it is built around {}", type)
                         : fmt::format("use {} {}", option, type),
          with_selectors ? "; make a mix with --type (for the rest) and per-tensor types "
                           "(--tensor-type PATTERN=TYPE, --role-type ROLE=TYPE)"
                         : "");
  std::vector<std::string_view> names;
  for (GgmlType t : active_types())
    if (can_encode(t)) names.push_back(traits(t).name);
  return fmt::format("{}: unknown type '{}' (types it can write: {})", option,
                     escape_for_terminal(name), fmt::join(names, ", "));
}

namespace detail {
DecodeFn decoder(GgmlType type) { return table()[static_cast<uint32_t>(type)].decode; }
}  // namespace detail

bool can_decode(GgmlType t) { return table()[static_cast<uint32_t>(t)].decode != nullptr; }
bool can_encode(GgmlType t) { return table()[static_cast<uint32_t>(t)].encode != nullptr; }

bool requires_importance(GgmlType t) {
  return t == GgmlType::IQ2_XXS || t == GgmlType::IQ2_XS || t == GgmlType::IQ1_S;
}

bool uses_importance(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::IQ2_XXS:
    case GgmlType::IQ2_XS:
    case GgmlType::IQ2_S:
    case GgmlType::IQ3_XXS:
    case GgmlType::IQ3_S:
    case GgmlType::IQ1_S:
    case GgmlType::IQ1_M:
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS:
      return true;
    default:
      return false;
  }
}

void dequantize(GgmlType t, std::span<const uint8_t> src, std::span<float> dst) {
  const TypeTraits& tr = traits(t);
  const auto decode = table()[tr.id].decode;
  if (!decode) throw Error(fmt::format("no decoder for type {}", tr.name));
  const auto bytes = row_bytes(t, dst.size());
  if (!bytes)
    throw Error(fmt::format("{} elements is not a multiple of the {} block size {}", dst.size(),
                            tr.name, tr.block_size));
  if (*bytes != src.size())
    throw Error(fmt::format("{} elements of {} need {} bytes, got {}", dst.size(), tr.name, *bytes,
                            src.size()));
  if (!dst.empty()) decode(src.data(), dst.data(), static_cast<int64_t>(dst.size()));
}

void quantize(GgmlType t, std::span<const float> src, int64_t nrows, int64_t n_per_row,
              std::span<const float> importance, std::span<uint8_t> dst) {
  const TypeTraits& tr = traits(t);
  const auto encode = table()[tr.id].encode;
  if (!encode) throw Error(fmt::format("no encoder for type {} yet", tr.name), Error::Kind::kUsage);
  if (nrows < 0 || n_per_row < 0 ||
      (n_per_row > 0 && static_cast<uint64_t>(nrows) > src.size() / n_per_row) ||
      static_cast<uint64_t>(nrows * n_per_row) != src.size())
    throw Error(fmt::format("quantize {}: {} rows of {} do not match {} input floats", tr.name,
                            nrows, n_per_row, src.size()));
  const auto rb = row_bytes(t, static_cast<uint64_t>(n_per_row));
  if (!rb)
    throw Error(fmt::format("quantize {}: row length {} is not a multiple of the block size {}",
                            tr.name, n_per_row, tr.block_size));
  if (*rb * static_cast<uint64_t>(nrows) != dst.size())
    throw Error(fmt::format("quantize {}: output needs {} bytes, got {}", tr.name,
                            *rb * static_cast<uint64_t>(nrows), dst.size()));
  if (!importance.empty() && importance.size() != static_cast<uint64_t>(n_per_row))
    throw Error(fmt::format("quantize {}: importance has {} weights, rows have {}", tr.name,
                            importance.size(), n_per_row));
  if (importance.empty() && requires_importance(t))
    throw Error(fmt::format("quantize {}: this type needs an importance matrix", tr.name));
  if (nrows == 0 || n_per_row == 0) return;
  encode(src.data(), dst.data(), nrows, n_per_row,
         importance.empty() ? nullptr : importance.data());
}

}  // namespace gguf
