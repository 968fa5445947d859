// Codecs of the float family (placeholder registration until the family lands).
#include "codec_registry.h"

namespace gguf::detail {

void register_float_codecs(CodecTable&) {}

}  // namespace gguf::detail
