// Test support: dlopen of ggml's base library for conformance comparisons.
#include "ggml_ref.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace gguf::testing {
namespace {

std::string find_library(std::string& why) {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("GGUF_GGML_LIB")) candidates.emplace_back(env);
#ifdef GGUF_GGML_LIB_DEFAULT
  candidates.emplace_back(GGUF_GGML_LIB_DEFAULT);
#endif
  for (const auto& c : candidates)
    if (std::filesystem::exists(c)) return c;
  why =
      "libggml-base.so not found (set GGUF_GGML_LIB, or configure with npm available so "
      "CMake can install @node-llama-cpp/linux-x64@3.21.1)";
  for (const auto& c : candidates) why += "; tried " + c;
  return {};
}

}  // namespace

GgmlRef& GgmlRef::get() {
  static GgmlRef instance;
  return instance;
}

GgmlRef::GgmlRef() {
  path_ = find_library(reason_);
  if (path_.empty()) return;
  handle_ = dlopen(path_.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_) reason_ = std::string("dlopen failed: ") + dlerror();
}

void* GgmlRef::symbol(const char* name) const { return handle_ ? dlsym(handle_, name) : nullptr; }

bool references_required() {
  const char* v = std::getenv("GGUF_REQUIRE_REFERENCES");
  return v != nullptr && *v != '\0' && std::string_view(v) != "0";
}

bool GgmlRef::gguf_accepts(const std::string& path, bool load_data) const {
  return GgmlGguf(path, load_data).accepted();
}

namespace {

struct InitParams {  // gguf.h: struct gguf_init_params
  bool no_alloc;
  void** ctx;
};

}  // namespace

GgmlGguf::GgmlGguf(const std::string& path, bool load_data) {
  const auto init = reinterpret_cast<void* (*)(const char*, InitParams)>(
      GgmlRef::get().symbol("gguf_init_from_file"));
  // Without the functions that free what it opens, nothing is opened.
  if (!init || !GgmlRef::get().symbol("gguf_free") || !GgmlRef::get().symbol("ggml_free")) return;
  ctx_ = init(path.c_str(), {!load_data, load_data ? &data_ctx_ : nullptr});
}

GgmlGguf::~GgmlGguf() {
  const auto& g = GgmlRef::get();
  if (data_ctx_) reinterpret_cast<void (*)(void*)>(g.symbol("ggml_free"))(data_ctx_);
  if (ctx_) reinterpret_cast<void (*)(void*)>(g.symbol("gguf_free"))(ctx_);
}

size_t GgmlRef::quantize_chunk(int type, const float* src, void* dst, int64_t start, int64_t nrows,
                               int64_t n_per_row, const float* imatrix) const {
  using Fn = size_t (*)(int, const float*, void*, int64_t, int64_t, int64_t, const float*);
  using Init = void (*)(int);
  static std::once_flag once[64];
  std::call_once(once[type & 63],
                 [&] { reinterpret_cast<Init>(symbol("ggml_quantize_init"))(type); });
  return reinterpret_cast<Fn>(symbol("ggml_quantize_chunk"))(type, src, dst, start, nrows,
                                                             n_per_row, imatrix);
}

bool GgmlRef::dequantize_row(int type, const void* src, float* dst, int64_t n) const {
  using Fn = void (*)(const void*, float*, int64_t);
  std::string name;
  if (type == 1)
    name = "ggml_fp16_to_fp32_row";
  else if (type == 30)
    name = "ggml_bf16_to_fp32_row";
  else
    name = std::string("dequantize_row_") + type_name(type);
  auto fn = reinterpret_cast<Fn>(symbol(name.c_str()));
  if (!fn) return false;
  fn(src, dst, n);
  return true;
}

bool GgmlRef::quantize_row_ref(int type, const float* src, void* dst, int64_t n) const {
  using Fn = void (*)(const float*, void*, int64_t);
  const std::string name = std::string("quantize_row_") + type_name(type) + "_ref";
  auto fn = reinterpret_cast<Fn>(symbol(name.c_str()));
  if (!fn) return false;
  fn(src, dst, n);
  return true;
}

bool GgmlRef::requires_imatrix(int type) const {
  return reinterpret_cast<bool (*)(int)>(symbol("ggml_quantize_requires_imatrix"))(type);
}
const char* GgmlRef::type_name(int type) const {
  return reinterpret_cast<const char* (*)(int)>(symbol("ggml_type_name"))(type);
}
size_t GgmlRef::type_size(int type) const {
  return reinterpret_cast<size_t (*)(int)>(symbol("ggml_type_size"))(type);
}
int64_t GgmlRef::blck_size(int type) const {
  return reinterpret_cast<int64_t (*)(int)>(symbol("ggml_blck_size"))(type);
}

}  // namespace gguf::testing
