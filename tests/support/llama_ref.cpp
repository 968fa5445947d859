// Test support: dlopen of llama.cpp (libllama + libggml and its CPU backends) from the npm
// package next to ggml's reference library. The C API is called through opaque buffers for
// the structs passed by value (llama_model_params, llama_context_params, llama_batch): only
// their default values are used, and on x86-64 such structs travel in memory, so a buffer at
// least as large as the struct carries it unchanged.
#include "llama_ref.h"

#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "ggml_ref.h"

namespace gguf::testing {
namespace {

struct Opaque {
  alignas(16) unsigned char bytes[1024];
};

std::mutex log_mutex;
std::string* log_sink = nullptr;

void log_to_sink(int /*level*/, const char* text, void* /*user*/) {
  std::lock_guard lock(log_mutex);
  if (log_sink && text) log_sink->append(text);
}

// The versioned shared object in dir whose name starts with stem followed by '.' (libllama.so
// or libllama.v0.4.0.so, not libllama-common.so).
std::string find_in(const std::filesystem::path& dir, const std::string& stem) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(stem + ".", 0) == 0 && n.size() > 3 && n.substr(n.size() - 3) == ".so")
      return e.path().string();
  }
  return {};
}

template <typename F>
F sym(void* h, const char* name, std::string& missing) {
  void* p = dlsym(h, name);
  if (!p) missing += std::string(missing.empty() ? "" : ", ") + name;
  return reinterpret_cast<F>(p);
}

struct Api {
  void (*backend_init)() = nullptr;
  void (*log_set)(void (*)(int, const char*, void*), void*) = nullptr;
  Opaque (*model_default_params)() = nullptr;
  Opaque (*context_default_params)() = nullptr;
  void* (*model_load)(const char*, Opaque) = nullptr;
  void (*model_free)(void*) = nullptr;
  void* (*init_from_model)(void*, Opaque) = nullptr;
  void (*free_context)(void*) = nullptr;
  Opaque (*batch_get_one)(int32_t*, int32_t) = nullptr;
  int32_t (*decode)(void*, Opaque) = nullptr;
  float* (*get_logits_ith)(void*, int32_t) = nullptr;
  const void* (*model_get_vocab)(const void*) = nullptr;
  int32_t (*vocab_n_tokens)(const void*) = nullptr;
  Opaque (*quantize_default_params)() = nullptr;
  uint32_t (*model_quantize)(const char*, const char*, const void*) = nullptr;
};

// Offsets in llama_model_quantize_params (llama.h): int32 nthread, int32 ftype, two ggml_type
// overrides, then the bools allow_requantize, quantize_output_tensor, only_copy, pure,
// keep_split, dry_run, then the pointer imatrix: an array of llama_model_imatrix_data
// {name, data, size} ended by a null name; then the pointer kv_overrides: an array of
// llama_model_kv_override ended by an empty key.
constexpr size_t kQuantNthread = 0, kQuantFtype = 4, kQuantAllowRequantize = 16, kQuantPure = 19,
                 kQuantImatrix = 24, kQuantKvOverrides = 32;

// llama_model_kv_override (llama.h): tag (0 int, 1 float, 2 bool, 3 string), key[128], then a
// union of int64, double, bool and char[128].
struct KvOverride {
  int32_t tag;
  char key[128];
  union {
    int64_t val_i64;
    double val_f64;
    bool val_bool;
    char val_str[128];
  };
};
static_assert(sizeof(KvOverride) == 264);
Api api;

}  // namespace

LlamaRef& LlamaRef::get() {
  static LlamaRef instance;
  return instance;
}

LlamaRef::LlamaRef() {
  const GgmlRef& ref = GgmlRef::get();
  if (!ref.available()) {
    reason_ = ref.reason();
    return;
  }
  const auto dir = std::filesystem::path(ref.path()).parent_path();
  const std::string ggml = find_in(dir, "libggml"), llama = find_in(dir, "libllama");
  if (ggml.empty() || llama.empty()) {
    reason_ = "libggml/libllama not found in " + dir.string();
    return;
  }
  ggml_ = dlopen(ggml.c_str(), RTLD_NOW | RTLD_LOCAL);
  llama_ = ggml_ ? dlopen(llama.c_str(), RTLD_NOW | RTLD_LOCAL) : nullptr;
  if (!ggml_ || !llama_) {
    reason_ = std::string("dlopen failed: ") + dlerror();
    return;
  }
  std::string missing;
  // The CPU backends are separate libraries (one per instruction set); load the best one.
  const auto load_all =
      sym<void (*)(const char*)>(ggml_, "ggml_backend_load_all_from_path", missing);
  api.backend_init = sym<decltype(api.backend_init)>(llama_, "llama_backend_init", missing);
  api.log_set = sym<decltype(api.log_set)>(llama_, "llama_log_set", missing);
  api.model_default_params =
      sym<decltype(api.model_default_params)>(llama_, "llama_model_default_params", missing);
  api.context_default_params =
      sym<decltype(api.context_default_params)>(llama_, "llama_context_default_params", missing);
  api.model_load = sym<decltype(api.model_load)>(llama_, "llama_model_load_from_file", missing);
  api.model_free = sym<decltype(api.model_free)>(llama_, "llama_model_free", missing);
  api.init_from_model =
      sym<decltype(api.init_from_model)>(llama_, "llama_init_from_model", missing);
  api.free_context = sym<decltype(api.free_context)>(llama_, "llama_free", missing);
  api.batch_get_one = sym<decltype(api.batch_get_one)>(llama_, "llama_batch_get_one", missing);
  api.decode = sym<decltype(api.decode)>(llama_, "llama_decode", missing);
  api.get_logits_ith = sym<decltype(api.get_logits_ith)>(llama_, "llama_get_logits_ith", missing);
  api.model_get_vocab =
      sym<decltype(api.model_get_vocab)>(llama_, "llama_model_get_vocab", missing);
  api.vocab_n_tokens = sym<decltype(api.vocab_n_tokens)>(llama_, "llama_vocab_n_tokens", missing);
  api.quantize_default_params = sym<decltype(api.quantize_default_params)>(
      llama_, "llama_model_quantize_default_params", missing);
  api.model_quantize = sym<decltype(api.model_quantize)>(llama_, "llama_model_quantize", missing);
  if (!missing.empty()) {
    reason_ = "missing symbols in " + llama + ": " + missing;
    return;
  }
  api.log_set(log_to_sink, nullptr);
  load_all(dir.c_str());
  api.backend_init();
  ok_ = true;
}

bool LlamaRef::quantize(const std::string& in, const std::string& out, int ftype, bool pure,
                        bool allow_requantize, std::string& log, const Importance* imatrix,
                        const std::vector<Override>& overrides) const {
  if (!ok_) return false;
  static std::mutex quantize_mutex;  // the log sink is shared
  std::lock_guard quantize_lock(quantize_mutex);
  {
    std::lock_guard lock(log_mutex);
    log_sink = &log;
  }
  Opaque params = api.quantize_default_params();
  const int32_t nthread = 1, ft = ftype;
  std::memcpy(params.bytes + kQuantNthread, &nthread, sizeof nthread);
  std::memcpy(params.bytes + kQuantFtype, &ft, sizeof ft);
  params.bytes[kQuantAllowRequantize] = allow_requantize ? 1 : 0;
  params.bytes[kQuantPure] = pure ? 1 : 0;
  struct ImatrixData {  // llama_model_imatrix_data
    const char* name;
    const float* data;
    size_t size;
  };
  std::vector<ImatrixData> entries;
  if (imatrix) {
    for (const auto& [name, values] : *imatrix)
      entries.push_back({name.c_str(), values.data(), values.size()});
    entries.push_back({nullptr, nullptr, 0});
  }
  const ImatrixData* im = imatrix ? entries.data() : nullptr;
  std::memcpy(params.bytes + kQuantImatrix, &im, sizeof im);
  std::vector<KvOverride> kvs(overrides.size() + 1);  // value-initialised: the last key is empty
  for (size_t i = 0; i < overrides.size(); ++i) {
    KvOverride& kv = kvs[i];
    std::snprintf(kv.key, sizeof kv.key, "%s", overrides[i].key.c_str());
    if (const auto* s = std::get_if<std::string>(&overrides[i].value)) {
      kv.tag = 3;
      std::snprintf(kv.val_str, sizeof kv.val_str, "%s", s->c_str());  // llama-quantize cuts at 127
    } else {
      kv.tag = 0;
      kv.val_i64 = std::get<int64_t>(overrides[i].value);
    }
  }
  const KvOverride* kvp = overrides.empty() ? nullptr : kvs.data();
  std::memcpy(params.bytes + kQuantKvOverrides, &kvp, sizeof kvp);
  const uint32_t rc = api.model_quantize(in.c_str(), out.c_str(), params.bytes);
  if (rc != 0) log += "llama_model_quantize returned " + std::to_string(rc) + "\n";
  std::lock_guard lock(log_mutex);
  log_sink = nullptr;
  return rc == 0;
}

LlamaRef::Result LlamaRef::run(const std::string& path, const std::vector<int>& tokens) const {
  Result r;
  if (!ok_) return r;
  static std::mutex run_mutex;  // one model at a time: the log sink is shared
  std::lock_guard run_lock(run_mutex);
  {
    std::lock_guard lock(log_mutex);
    log_sink = &r.log;
  }
  void* model = api.model_load(path.c_str(), api.model_default_params());
  void* ctx = model ? api.init_from_model(model, api.context_default_params()) : nullptr;
  if (ctx) {
    std::vector<int32_t> toks(tokens.begin(), tokens.end());
    const int32_t rc =
        api.decode(ctx, api.batch_get_one(toks.data(), static_cast<int32_t>(toks.size())));
    if (rc == 0) {
      const float* lg = api.get_logits_ith(ctx, -1);
      const int32_t n = api.vocab_n_tokens(api.model_get_vocab(model));
      if (lg && n > 0) {
        r.logits.assign(lg, lg + n);
        r.loaded = true;
      }
    } else {
      r.log += "llama_decode returned " + std::to_string(rc) + "\n";
    }
    api.free_context(ctx);
  }
  if (model) api.model_free(model);
  std::lock_guard lock(log_mutex);
  log_sink = nullptr;
  return r;
}

}  // namespace gguf::testing
