// The ggml type table: ids, canonical names, block geometry. Ids match ggml's enum ggml_type.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace gguf {

enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
  NVFP4 = 40,
  Q1_0 = 41,
  Q2_0 = 42,
};

inline constexpr uint32_t kTypeCount = 43;  // ids 0..42

struct TypeTraits {
  uint32_t id;
  std::string_view name;  // ggml's canonical spelling: "q4_K", "iq2_xxs", "bf16"
  uint32_t block_size;    // elements per block; 0 for removed ids
  uint32_t type_size;     // bytes per block
  bool quantized;         // a block type (not f32/f16/bf16/f64/int)
  bool removed;           // an id ggml once used and no longer sizes (4, 5, 31-33, 36-38)
};

// The traits of an id, or nullptr when the id is unknown (>= 43). Removed ids return traits
// with removed == true and block_size 0.
const TypeTraits* find_type(uint32_t id);
// Traits of an active type (never null).
const TypeTraits& traits(GgmlType t);
// The traits of an id that can be sized (known and not removed), else nullptr.
const TypeTraits* sized_type(uint32_t id);

// Parses a type name in any case ("Q4_K", "q4_k", "IQ2_XXS"); nullopt when unknown or removed.
std::optional<GgmlType> parse_type(std::string_view name);
// The canonical name, or "type<ID>" for an id the table does not know.
std::string type_name(uint32_t id);

// All 35 active types, in id order.
std::span<const GgmlType> active_types();

// q8_1 and q8_K: types ggml uses only for activations (the other operand of a weight's dot
// product). Its CPU backend cannot compute with a weight of either type.
bool is_activation_only(GgmlType t);

// Bytes of a row of n elements; nullopt if n is not a multiple of the block size.
std::optional<uint64_t> row_bytes(GgmlType t, uint64_t n);

}  // namespace gguf
