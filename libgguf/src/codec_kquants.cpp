// Codecs of the kquants family (placeholder registration until the family lands).
#include "codec_registry.h"

namespace gguf::detail {

void register_kquant_codecs(CodecTable&) {}

}  // namespace gguf::detail
