// Helper of bench/codec_process_bench.sh, which times whole processes: gguf-requant -j 1 of a
// GGUF holding one f32 tensor against this program's `ggml` mode, ggml_quantize_chunk of the
// same floats and importance vector, and compares the bytes both wrote.
//   codec_process_bench make IN.gguf IMATRIX.dat ROWS [COLS] [SEED]   write the inputs
//   codec_process_bench ggml TYPE IN.gguf (IMATRIX.dat|-) OUT.bin     ggml's whole process
//   codec_process_bench same OURS.gguf OUT.bin                        exit 0 when equal
#include <fmt/format.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "distributions.h"
#include "ggml_ref.h"
#include "gguf/format/file.h"

namespace {

constexpr const char* kTensor = "blk.0.ffn_up.weight";

void put(std::FILE* f, const void* p, size_t n) {
  if (std::fwrite(p, 1, n, f) != n) throw std::runtime_error("short write");
}
template <class T>
void put(std::FILE* f, T v) {
  put(f, &v, sizeof v);
}
void put_string(std::FILE* f, const std::string& s) {
  put<uint64_t>(f, s.size());
  put(f, s.data(), s.size());
}

std::FILE* open_or_throw(const std::string& path, const char* mode) {
  std::FILE* f = std::fopen(path.c_str(), mode);
  if (!f) throw std::runtime_error(fmt::format("cannot open {}", path));
  return f;
}

// A GGUF v3 file with one f32 tensor [cols, rows] of gaussian weights (alignment 32), and a
// legacy imatrix .dat holding one importance vector for it (ncall 1, so values are as given).
int make(const std::string& gguf, const std::string& dat, int64_t rows, int64_t cols,
         uint64_t seed) {
  using gguf::testing::Dist;
  const std::vector<float> x = gguf::testing::make_rows(Dist::kGaussian, rows, cols, seed);
  const std::vector<float> w = gguf::testing::make_importance(cols, seed);
  std::FILE* f = open_or_throw(gguf, "wb");
  put<uint32_t>(f, 0x46554747);
  put<uint32_t>(f, 3);
  put<uint64_t>(f, 1);  // tensors
  put<uint64_t>(f, 1);  // keys
  put_string(f, "general.architecture");
  put<uint32_t>(f, 8);
  put_string(f, "llama");
  put_string(f, kTensor);
  put<uint32_t>(f, 2);
  put<int64_t>(f, cols);
  put<int64_t>(f, rows);
  put<uint32_t>(f, 0);  // f32
  put<uint64_t>(f, 0);
  const long pos = std::ftell(f);
  const std::vector<uint8_t> pad((32 - pos % 32) % 32, 0);
  put(f, pad.data(), pad.size());
  put(f, x.data(), x.size() * sizeof(float));
  std::fclose(f);
  f = open_or_throw(dat, "wb");
  put<int32_t>(f, 1);
  put<int32_t>(f, static_cast<int32_t>(std::strlen(kTensor)));
  put(f, kTensor, std::strlen(kTensor));
  put<int32_t>(f, 1);
  put<int32_t>(f, static_cast<int32_t>(cols));
  put(f, w.data(), w.size() * sizeof(float));
  std::fclose(f);
  return 0;
}

// ggml's side, as a program using ggml would do it: ggml's reader finds the tensor, the floats
// are read, ggml_quantize_chunk encodes them, the bytes are written.
struct GgufInitParams {
  bool no_alloc;
  void* ctx;
};

int run_ggml(const std::string& type_name, const std::string& in, const std::string& dat,
             const std::string& out) {
  const auto& g = gguf::testing::GgmlRef::get();
  if (!g.available()) throw std::runtime_error("ggml not available: " + g.reason());
  void* (*init)(const char*, GgufInitParams) = nullptr;
  int64_t (*find)(const void*, const char*) = nullptr;
  size_t (*data_offset)(const void*) = nullptr;
  size_t (*tensor_offset)(const void*, int64_t) = nullptr;
  void (*free_ctx)(void*) = nullptr;
  std::string missing;
  g.bind(init, "gguf_init_from_file", missing);
  g.bind(find, "gguf_find_tensor", missing);
  g.bind(data_offset, "gguf_get_data_offset", missing);
  g.bind(tensor_offset, "gguf_get_tensor_offset", missing);
  g.bind(free_ctx, "gguf_free", missing);
  if (!missing.empty()) throw std::runtime_error("ggml lacks" + missing);
  int type = -1;
  for (int t = 0; t < 64 && type < 0; ++t)
    if (g.blck_size(t) > 0 && type_name == g.type_name(t)) type = t;
  if (type < 0) throw std::runtime_error("unknown type " + type_name);
  void* ctx = init(in.c_str(), {true, nullptr});
  if (!ctx) throw std::runtime_error("ggml cannot read " + in);
  const int64_t id = find(ctx, kTensor);
  const size_t offset = data_offset(ctx) + tensor_offset(ctx, id);
  free_ctx(ctx);
  std::FILE* f = open_or_throw(in, "rb");
  std::fseek(f, 0, SEEK_END);
  const int64_t n = (std::ftell(f) - static_cast<long>(offset)) / 4;
  std::vector<float> imatrix;
  if (dat != "-") {
    std::FILE* d = open_or_throw(dat, "rb");
    int32_t head[2], counts[2];  // entries, name length; ncall, nval
    if (std::fread(head, 4, 2, d) != 2) throw std::runtime_error("short imatrix");
    std::fseek(d, head[1], SEEK_CUR);
    if (std::fread(counts, 4, 2, d) != 2) throw std::runtime_error("short imatrix");
    const int32_t nval = counts[1];
    imatrix.resize(static_cast<size_t>(nval));
    if (std::fread(imatrix.data(), 4, imatrix.size(), d) != imatrix.size())
      throw std::runtime_error("short imatrix");
    std::fclose(d);
  }
  const int64_t cols = imatrix.empty() ? 4096 : static_cast<int64_t>(imatrix.size());
  std::vector<float> x(static_cast<size_t>(n));
  std::fseek(f, static_cast<long>(offset), SEEK_SET);
  if (std::fread(x.data(), 4, x.size(), f) != x.size()) throw std::runtime_error("short input");
  std::fclose(f);
  const int64_t rows = n / cols;
  std::vector<uint8_t> y(g.type_size(type) * static_cast<size_t>(rows * cols / g.blck_size(type)));
  const size_t bytes = g.quantize_chunk(type, x.data(), y.data(), 0, rows, cols,
                                        imatrix.empty() ? nullptr : imatrix.data());
  f = open_or_throw(out, "wb");
  put(f, y.data(), bytes);
  std::fclose(f);
  return 0;
}

int same(const std::string& ours, const std::string& peer) {
  const auto file = gguf::GgufFile::open(ours);
  const auto data = file->tensor_data(*file->find_tensor(kTensor));
  std::FILE* f = open_or_throw(peer, "rb");
  std::vector<uint8_t> y(data.size() + 1);
  const size_t got = std::fread(y.data(), 1, y.size(), f);
  std::fclose(f);
  if (got != data.size() || std::memcmp(y.data(), data.data(), got) != 0) {
    fmt::print(stderr, "codec_process_bench: {} and {} differ\n", ours, peer);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::vector<std::string> a(argv + 1, argv + argc);
    if (a.size() >= 4 && a[0] == "make")
      return make(a[1], a[2], std::stoll(a[3]), a.size() > 4 ? std::stoll(a[4]) : 4096,
                  a.size() > 5 ? std::stoull(a[5]) : 7);
    if (a.size() == 5 && a[0] == "ggml") return run_ggml(a[1], a[2], a[3], a[4]);
    if (a.size() == 3 && a[0] == "same") return same(a[1], a[2]);
    fmt::print(stderr, "usage: see the comment at the top of bench/codec_process_bench.cpp\n");
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "codec_process_bench: {}\n", e.what());
    return 1;
  }
}
