// Validation beyond what the lenient reader refuses: what llama.cpp's loader would refuse,
// and what is suspicious in the data (NaN/Inf), as a list of problems.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gguf/model.h"

namespace gguf {

struct Problem {
  std::string path;
  std::string object;
  std::optional<uint64_t> offset;
  std::string message;
  std::string severity = "error";  // "error" | "warning"
};

struct CheckOptions {
  bool scan_data = true;  // look for NaN/Inf in float data and quant block scales
  unsigned threads = 0;
};

std::vector<Problem> check_model(const Model& model, const CheckOptions& options = {});

}  // namespace gguf
