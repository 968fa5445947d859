// The report of a plan, one model for every operation that builds one (splice, requant, the
// packed-affine import): a row per output tensor saying where its payload comes from and what
// is done to it. Each operation's row adds its own details; render/plan_render.h turns the rows
// into DESIGN.md's JSON contract and the text footer all their reports share.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace gguf {

enum class PlanAction {
  kCopy,    // copied byte for byte from the input
  kSplice,  // copied byte for byte from a donor (gguf-splice)
  kEncode,  // decoded and encoded to another type
  kDecode,  // decoded to f32, f16 or bf16
};
std::string_view action_name(PlanAction a);  // "copy", "splice", "encode", "decode"

struct PlanRow {
  std::string name;
  std::string source;                        // path of the file the payload comes from
  uint32_t type_before = 0, type_after = 0;  // ggml type ids
  uint64_t bytes_before = 0, bytes_after = 0;
  PlanAction action = PlanAction::kCopy;
};

}  // namespace gguf
