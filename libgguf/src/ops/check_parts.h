// Internal: the parts of check_model beside check.cpp's structural checks: the metadata keys
// llama.cpp's loader reads (check_keys.cpp) and the scan of tensor data for non-finite numbers
// (check_scan.cpp). Each appends its problems to out.
#pragma once

#include <unordered_set>
#include <vector>

#include "gguf/ops/check.h"

namespace gguf::detail {

// general.architecture, the types of the keys llama.cpp reads, the keys it cannot do without,
// and general.quantization_version, of the model's first file.
void check_keys(const Model& model, std::vector<Problem>& out);

// NaN/Inf in float data and in quant block scales of the tensors in scannable (those whose data
// lies in their file), in tensor order, scanned on options.threads cores.
void scan_data(const Model& model, const CheckOptions& options,
               const std::unordered_set<const TensorInfo*>& scannable, std::vector<Problem>& out);

}  // namespace gguf::detail
