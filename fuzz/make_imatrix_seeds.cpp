// Writes the imatrix fuzzer's seed corpus into a directory: legacy .dat files (with and without
// the dataset trailer, sums over several calls, a 3-D expert entry) and GGUF imatrix files as
// llama-imatrix writes them (in_sum2 [ne0, n_mat] and counts [1, n_mat], one expert unused).
#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "gguf/format/metadata.h"
#include "gguf/write/plan.h"
#include "gguf/write/writer.h"

namespace {

void legacy(const std::string& path, int32_t ncall, bool trailer, int64_t n_mat) {
  std::ofstream f(path, std::ios::binary);
  const auto i32 = [&](int32_t v) { f.write(reinterpret_cast<const char*>(&v), 4); };
  const std::vector<std::string> names = {"blk.0.attn_q.weight", "blk.1.ffn_up_exps.weight"};
  i32(static_cast<int32_t>(names.size()));
  for (size_t e = 0; e < names.size(); ++e) {
    i32(static_cast<int32_t>(names[e].size()));
    f.write(names[e].data(), static_cast<std::streamsize>(names[e].size()));
    i32(ncall);
    const int32_t nval = static_cast<int32_t>(32 * (e == 1 ? n_mat : 1));
    i32(nval);
    for (int32_t i = 0; i < nval; ++i) {
      const float v = static_cast<float>(i % 7) * 0.5f * static_cast<float>(ncall);
      f.write(reinterpret_cast<const char*>(&v), 4);
    }
  }
  if (trailer) {
    i32(10);
    const std::string ds = "calibration.txt";
    i32(static_cast<int32_t>(ds.size()));
    f.write(ds.data(), static_cast<std::streamsize>(ds.size()));
  }
}

std::shared_ptr<const std::vector<uint8_t>> floats(const std::vector<float>& v) {
  auto b = std::make_shared<std::vector<uint8_t>>(v.size() * 4);
  std::memcpy(b->data(), v.data(), b->size());
  return b;
}

void gguf_imatrix(const std::string& path, int64_t ne0, int64_t n_mat) {
  gguf::Plan p;
  p.metadata.set("general.type", gguf::Value::string("imatrix"));
  p.metadata.set("imatrix.datasets", gguf::Value::string_array({"calibration.txt"}));
  p.metadata.set("imatrix.chunk_count", gguf::Value::u32(10));
  p.metadata.set("imatrix.chunk_size", gguf::Value::u32(512));
  std::vector<float> sums(static_cast<size_t>(ne0 * n_mat)), counts(static_cast<size_t>(n_mat));
  for (size_t i = 0; i < sums.size(); ++i) sums[i] = static_cast<float>(i % 5);
  for (int64_t k = 0; k < n_mat; ++k) counts[static_cast<size_t>(k)] = k == 1 ? 0.0f : 3.0f;
  const auto add = [&](std::string name, std::vector<int64_t> shape, const std::vector<float>& v) {
    const auto b = floats(v);
    p.tensors.push_back({std::move(name), 0, std::move(shape), b->size(), gguf::MemoryBytes{b}});
  };
  add("blk.1.ffn_up_exps.weight.in_sum2", {ne0, n_mat}, sums);
  add("blk.1.ffn_up_exps.weight.counts", {1, n_mat}, counts);
  gguf::write_plan(p, path, {});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    fmt::print(stderr, "usage: {} DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  legacy(dir + "/plain.dat", 1, true, 1);
  legacy(dir + "/sums.dat", 3, true, 4);
  legacy(dir + "/no-trailer.dat", 2, false, 2);
  gguf_imatrix(dir + "/experts.gguf", 32, 4);
  gguf_imatrix(dir + "/dense.gguf", 64, 1);
  return 0;
}
