// The ggml type table (facts of the format, measured against ggml 0.23.0).
#include "gguf/format/types.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>

namespace gguf {
namespace {

constexpr std::array<TypeTraits, kTypeCount> kTable = {{
    {0, "f32", 1, 4, false, false},        {1, "f16", 1, 2, false, false},
    {2, "q4_0", 32, 18, true, false},      {3, "q4_1", 32, 20, true, false},
    {4, "q4_2", 0, 0, true, true},         {5, "q4_3", 0, 0, true, true},
    {6, "q5_0", 32, 22, true, false},      {7, "q5_1", 32, 24, true, false},
    {8, "q8_0", 32, 34, true, false},      {9, "q8_1", 32, 36, true, false},
    {10, "q2_K", 256, 84, true, false},    {11, "q3_K", 256, 110, true, false},
    {12, "q4_K", 256, 144, true, false},   {13, "q5_K", 256, 176, true, false},
    {14, "q6_K", 256, 210, true, false},   {15, "q8_K", 256, 292, true, false},
    {16, "iq2_xxs", 256, 66, true, false}, {17, "iq2_xs", 256, 74, true, false},
    {18, "iq3_xxs", 256, 98, true, false}, {19, "iq1_s", 256, 50, true, false},
    {20, "iq4_nl", 32, 18, true, false},   {21, "iq3_s", 256, 110, true, false},
    {22, "iq2_s", 256, 82, true, false},   {23, "iq4_xs", 256, 136, true, false},
    {24, "i8", 1, 1, false, false},        {25, "i16", 1, 2, false, false},
    {26, "i32", 1, 4, false, false},       {27, "i64", 1, 8, false, false},
    {28, "f64", 1, 8, false, false},       {29, "iq1_m", 256, 56, true, false},
    {30, "bf16", 1, 2, false, false},      {31, "q4_0_4_4", 0, 0, true, true},
    {32, "q4_0_4_8", 0, 0, true, true},    {33, "q4_0_8_8", 0, 0, true, true},
    {34, "tq1_0", 256, 54, true, false},   {35, "tq2_0", 256, 66, true, false},
    {36, "iq4_nl_4_4", 0, 0, true, true},  {37, "iq4_nl_4_8", 0, 0, true, true},
    {38, "iq4_nl_8_8", 0, 0, true, true},  {39, "mxfp4", 32, 17, true, false},
    {40, "nvfp4", 64, 36, true, false},    {41, "q1_0", 128, 18, true, false},
    {42, "q2_0", 64, 18, true, false},
}};

constexpr auto kActive = [] {
  std::array<GgmlType, 35> a{};
  size_t n = 0;
  for (const auto& t : kTable)
    if (!t.removed) a[n++] = static_cast<GgmlType>(t.id);
  return a;
}();

bool iequal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

const TypeTraits* find_type(uint32_t id) { return id < kTypeCount ? &kTable[id] : nullptr; }

const TypeTraits& traits(GgmlType t) { return kTable[static_cast<uint32_t>(t)]; }

const TypeTraits* sized_type(uint32_t id) {
  const TypeTraits* t = find_type(id);
  return t && !t->removed ? t : nullptr;
}

std::optional<GgmlType> parse_type(std::string_view name) {
  for (const auto& t : kTable)
    if (!t.removed && iequal(t.name, name)) return static_cast<GgmlType>(t.id);
  return std::nullopt;
}

std::string type_name(uint32_t id) {
  if (const TypeTraits* t = find_type(id)) return std::string(t->name);
  return fmt::format("type{}", id);
}

std::span<const GgmlType> active_types() { return kActive; }

bool is_activation_only(GgmlType t) { return t == GgmlType::Q8_1 || t == GgmlType::Q8_K; }

std::optional<uint64_t> row_bytes(GgmlType t, uint64_t n) {
  const TypeTraits& tr = traits(t);
  if (n % tr.block_size != 0) return std::nullopt;
  return n / tr.block_size * tr.type_size;
}

}  // namespace gguf
