// Internal: one entry of gguf-diff --json's "metadata" list, shared with gguf-splice, whose
// reports show the keys an edit changes the way gguf-diff does.
#pragma once

#include <nlohmann/json.hpp>

#include "gguf/ops/diff.h"

namespace gguf::detail {

nlohmann::json metadata_change_json(const MetadataDiff& m);

}  // namespace gguf::detail
