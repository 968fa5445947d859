// Exact re-encoding between ggml types (gguf-requant --exact): a tensor moves to another type
// only when every value it decodes to stays the same number, and the written file is read back
// to prove it before it reaches its path.
//
// The paths: any type to f32 (decoding is exact); any type to f16 or bf16 when every value is
// one of theirs (checked value by value); q4_0 to q4_1 and q5_0 to q5_1 block by block, the
// scale d kept and the min set to -8d (-16d): (q - 8) * d and q * d + (-8d) are both exact
// products and sums of the same number. One thing does not survive: q4_1 cannot make -0.0
// (q * d + m with m = -8d is +0.0 where q4_0 gives (8 - 8) * d = -0.0 for a negative d), so
// zeros may lose their sign; they are counted, and -0.0 == +0.0.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "gguf/base/units.h"
#include "gguf/codecs/affine.h"
#include "gguf/format/model.h"
#include "gguf/format/types.h"
#include "gguf/ops/requant.h"

namespace gguf {

enum class ExactPath { kNone, kDecode, kRound, kTranscode };

// How `from` moves to `to` exactly; kNone with the reason in `why` when it cannot.
ExactPath exact_path(GgmlType from, GgmlType to, std::string& why);

struct ExactProof {
  uint64_t tensors = 0;             // re-encoded tensors read back
  uint64_t values = 0;              // values compared
  uint64_t zeros_sign_changed = 0;  // -0.0 read back as +0.0 or the reverse
};

// Reads every re-encoded tensor of `written` (e.g. the model WriteOptions::before_commit hands
// over) and compares its values with the source's: the same number (+0.0 and -0.0 alike, NaN
// and NaN alike). Throws gguf::Error naming the output (names[shard] when given), the tensor,
// the element and both values at the first difference.
ExactProof prove_exact(const Model& source, const RequantResult& result, const Model& written,
                       unsigned threads = 1, std::span<const std::string> names = {});

}  // namespace gguf
