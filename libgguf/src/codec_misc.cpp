// Codecs of the misc family (placeholder registration until the family lands).
#include "codec_registry.h"

namespace gguf::detail {

void register_misc_codecs(CodecTable&) {}

}  // namespace gguf::detail
