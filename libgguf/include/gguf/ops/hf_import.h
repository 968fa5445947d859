// Packed-affine import of a Hugging Face checkpoint: each tensor's HF name mapped to its GGUF
// name (hf_names.h), rows moved as llama.cpp's converter moves them (q/k permutation, experts
// stacked, DeepSeek's kv_b for the base's layout), every value still code * scale + min of its
// source element; prove_import(result, written) reads the output back against those sources.
#pragma once

#include "gguf/inputs/hf_checkpoint.h"
#include "gguf/ops/affine.h"

namespace gguf {

// With a config.json the architecture comes from it (and must be the base's
// general.architecture); every tensor must map, the experts of a layer be complete and alike.
// Without one, tensors keep their names (GGUF names), shards read as one file. Throws
// gguf::Error naming the shard, the tensor and why.
ImportResult import_checkpoint(const HfCheckpoint& checkpoint, const ImportOptions& options);

}  // namespace gguf
