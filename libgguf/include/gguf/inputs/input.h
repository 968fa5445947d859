// What an input path holds: the one place a GGUF is told from safetensors (a file, or a Hugging
// Face checkpoint of them; gguf-requant takes either).
#pragma once

#include <memory>
#include <string>

#include "gguf/io/source.h"

namespace gguf {

enum class InputFormat { kGguf, kSafetensors };

struct Input {
  std::shared_ptr<const ByteSource> source;  // null for a checkpoint's folder or index
  InputFormat format = InputFormat::kGguf;
};

// Safetensors for a folder or an index JSON (a Hugging Face checkpoint). Otherwise opens path:
// GGUF when it starts with the GGUF magic; safetensors when its header reads as one, or when it
// looks like neither and its name ends in .safetensors (so that a damaged safetensors file gets
// the safetensors reader's message); otherwise GGUF (whose reader says what is wrong).
Input open_input(const std::string& path);

}  // namespace gguf
