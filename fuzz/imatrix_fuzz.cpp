// libFuzzer target over the importance-matrix readers (llama.cpp's legacy .dat and the GGUF
// imatrix, told apart by magic) and the per-expert weights requant takes from them. Any input
// may make them throw gguf::Error; nothing else may escape, crash or read out of bounds.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gguf/base/error.h"
#include "gguf/inputs/imatrix.h"
#include "gguf/io/source.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  volatile size_t sink = 0;
  try {
    const gguf::Imatrix m =
        gguf::Imatrix::parse(gguf::memory_source(std::vector<uint8_t>(data, data + size), "f.dat"));
    for (const auto& ds : m.datasets()) sink = sink + ds.size();
    for (const auto& [name, e] : m.entries()) {
      // As requant asks: the whole entry per expert, one shared slice, and a wrong width.
      // Legacy entries record no shape: their length is all there is.
      const int64_t n_mat = std::clamp<int64_t>(e.n_mat, 1, 4);
      const auto total = static_cast<int64_t>(e.values.size());
      const int64_t ne0 = std::clamp<int64_t>(e.ne0 > 0 ? e.ne0 : total / n_mat, 1, 1 << 20);
      for (const auto& [per_row, mats] :
           {std::pair{ne0, n_mat}, std::pair{total, int64_t{1}}, std::pair{ne0 + 1, n_mat}}) {
        for (int64_t k = 0; k < mats; ++k) {
          try {
            const auto w = m.weights(name, per_row, mats, k);
            if (!w.empty()) sink = sink + (w.front() > 0.0f) + (w.back() > 0.0f);
          } catch (const gguf::Error& err) {
            sink = sink + err.message().size();
          }
        }
      }
    }
  } catch (const gguf::Error& e) {
    sink = sink + e.message().size();
  }
  return 0;
}
