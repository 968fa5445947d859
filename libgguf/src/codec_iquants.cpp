// Codecs of the iquants family (placeholder registration until the family lands).
#include "codec_registry.h"

namespace gguf::detail {

void register_iquant_codecs(CodecTable&) {}

}  // namespace gguf::detail
