// Codecs of the legacy family (placeholder registration until the family lands).
#include "codec_registry.h"

namespace gguf::detail {

void register_legacy_codecs(CodecTable&) {}

}  // namespace gguf::detail
