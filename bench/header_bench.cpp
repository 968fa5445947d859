// Header parsing against ggml's gguf_init_from_file (metadata only) on a DeepSeek-V4-Flash-
// shaped file: 43 layers, 256 experts, 1331 tensors, a 129280-entry vocabulary with scores,
// token types and merges. Payloads would be ~80 GB, so the file is the real header followed by
// a sparse hole of the full data size. Also shows that parse time does not depend on the data
// size: the same header over 1 GiB and over 100 GiB of data.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "bench_report.h"
#include "ggml_ref.h"
#include "gguf/base/error.h"
#include "gguf/format/file.h"
#include "gguf/format/model.h"
#include "gguf/ops/synth.h"
#include "gguf/write/writer.h"

namespace {

using gguf::GgmlType;

constexpr int kTensors = 1331;  // DeepSeek-V4-Flash's count
constexpr int kLayers = 43;
constexpr int kVocab = 129280;
constexpr int kMerges = 127741;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// ---- Building the file ----

// Shapes only change numbers in the header, never its length: every variant has the same keys,
// tensors and header size, whatever its data size.
struct Shape {
  int n_experts = 256, n_embd = 4096, n_ff_exp = 2048;
  int q_lora = 1024, kv_lora = 512, n_head = 64, head_dim = 512;
};
// Narrow widths, for a small data section under the same header.
constexpr Shape kNarrow{256, 512, 256, 512, 512, 8, 128};

gguf::MoeSpec ds4_flash_spec(const Shape& shape) {
  gguf::MoeSpec s;
  s.name = "DeepSeek-V4-Flash-shaped";
  s.n_layers = kLayers;
  s.n_dense_layers = 0;
  s.n_experts = shape.n_experts;
  s.n_expert_used = 6;
  s.n_embd = shape.n_embd;
  s.n_ff_exp = shape.n_ff_exp;
  s.n_ff_dense = 2 * shape.n_embd;
  s.q_lora = shape.q_lora;
  s.kv_lora = shape.kv_lora;
  s.n_head = shape.n_head;
  s.head_dim = shape.head_dim;
  s.vocab = kVocab;
  return gguf::ds4_recipe(s);
}

gguf::PlanTensor small_tensor(std::string name, std::vector<int64_t> shape, GgmlType type) {
  gguf::PlanTensor t;
  t.name = std::move(name);
  t.type_id = static_cast<uint32_t>(type);
  t.shape = std::move(shape);
  uint64_t rows = 1;
  for (size_t i = 1; i < t.shape.size(); ++i) rows *= static_cast<uint64_t>(t.shape[i]);
  t.bytes = *gguf::row_bytes(type, static_cast<uint64_t>(t.shape[0])) * rows;
  return t;
}

// The synthetic plan's tensors plus the per-layer extras of the V4 architecture (hyper-
// connection mixers, KV compressor, indexer) up to the real tensor count. Only names, types and
// shapes matter here: no payload is ever produced.
std::vector<gguf::PlanTensor> ds4_tensors(const gguf::Plan& plan, int64_t n_embd) {
  std::vector<gguf::PlanTensor> out;
  for (const auto& t : plan.tensors) {
    gguf::PlanTensor c;
    c.name = t.name;
    c.type_id = t.type_id;
    c.shape = t.shape;
    c.bytes = t.bytes;
    out.push_back(std::move(c));
  }
  static const char* const kExtras[] = {"hc_attn_fn.weight",
                                        "hc_attn_scale.weight",
                                        "hc_attn_base.weight",
                                        "hc_ffn_fn.weight",
                                        "hc_ffn_scale.weight",
                                        "hc_ffn_base.weight",
                                        "attn_compressor_kv.weight",
                                        "attn_compressor_gate.weight",
                                        "attn_compressor_ape.weight",
                                        "attn_compressor_norm.weight",
                                        "indexer.attn_q_b.weight",
                                        "indexer.proj.weight",
                                        "indexer.compressor_kv.weight",
                                        "indexer.compressor_gate.weight"};
  const size_t missing = kTensors > static_cast<int>(out.size()) ? kTensors - out.size() : 0;
  for (size_t i = 0; i < missing; ++i) {
    const size_t layer = i % kLayers, kind = i / kLayers;
    const std::string name = fmt::format("blk.{}.{}", layer, kExtras[kind % std::size(kExtras)]);
    out.push_back(kind % 3 == 0 ? small_tensor(name, {n_embd, 24}, GgmlType::F16)
                                : small_tensor(name, {n_embd}, GgmlType::F32));
  }
  return out;
}

struct Layout {
  std::vector<uint8_t> header;  // padded to the alignment
  uint64_t data_bytes = 0;      // canonical data section size
};

Layout ds4_layout(const Shape& shape) {
  gguf::Plan plan = gguf::synth_moe_plan(ds4_flash_spec(shape));
  // Real vocabularies carry BPE merges: about as many strings again as tokens.
  std::vector<std::string> merges;
  merges.reserve(kMerges);
  for (int i = 0; i < kMerges; ++i)
    merges.push_back(fmt::format("tok{} tok{}", 256 + i % 9973, 256 + (i * 7919) % kVocab));
  plan.metadata.set("tokenizer.ggml.merges", gguf::Value::string_array(std::move(merges)));
  plan.metadata.set("tokenizer.ggml.pre", gguf::Value::string("deepseek-v3"));
  plan.metadata.set("general.file_type", gguf::Value::u32(10));
  Layout l;
  const auto tensors = ds4_tensors(plan, shape.n_embd);
  l.header = gguf::serialize_header(plan.metadata, plan.version, tensors);
  constexpr uint64_t kAlign = gguf::kDefaultAlignment;
  for (const auto& t : tensors)
    l.data_bytes = (l.data_bytes + kAlign - 1) / kAlign * kAlign + t.bytes;
  return l;
}

// Writes the header and extends the file to its full size without writing the data.
void write_sparse(const std::string& path, const Layout& l) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw gguf::Error(path, {}, std::nullopt, "cannot create");
  const bool ok =
      ::write(fd, l.header.data(), l.header.size()) == static_cast<ssize_t>(l.header.size()) &&
      ::ftruncate(fd, static_cast<off_t>(l.header.size() + l.data_bytes)) == 0;
  ::close(fd);
  if (!ok) throw gguf::Error(path, {}, std::nullopt, "cannot write");
}

// shape with the expert count whose data section comes closest to target bytes (the data
// size is affine in it).
Shape with_data_size(Shape shape, double target) {
  shape.n_experts = 1;
  const double d1 = static_cast<double>(ds4_layout(shape).data_bytes);
  shape.n_experts = 2;
  const double d2 = static_cast<double>(ds4_layout(shape).data_bytes);
  shape.n_experts = std::max(1, static_cast<int>((target - d1) / (d2 - d1) + 1.5));
  return shape;
}

// ---- ggml's reader ----

struct GgufInitParams {
  bool no_alloc;
  void** ctx;
};
using InitFn = void* (*)(const char*, GgufInitParams);
using FreeFn = void (*)(void*);
using CountFn = int64_t (*)(const void*);

struct GgmlApi {
  InitFn init = nullptr;
  FreeFn free = nullptr;
  CountFn n_tensors = nullptr, n_kv = nullptr;
};

const GgmlApi& ggml() {
  static const GgmlApi api = [] {
    const auto& g = gguf::testing::GgmlRef::get();
    GgmlApi a;
    a.init = reinterpret_cast<InitFn>(g.symbol("gguf_init_from_file"));
    a.free = reinterpret_cast<FreeFn>(g.symbol("gguf_free"));
    a.n_tensors = reinterpret_cast<CountFn>(g.symbol("gguf_get_n_tensors"));
    a.n_kv = reinterpret_cast<CountFn>(g.symbol("gguf_get_n_kv"));
    return a;
  }();
  return api;
}

// ---- Benchmarks ----

struct Case {
  std::string label;  // "ds4", "data_1GiB", ...
  std::string path;
  uint64_t file_bytes = 0, header_bytes = 0;
};

std::vector<Case>& cases() {
  static std::vector<Case> c;
  return c;
}

void register_case(const Case& c) {
  const std::string path = c.path;
  benchmark::RegisterBenchmark(fmt::format("header/{}/ours_file", c.label).c_str(),
                               [path](benchmark::State& state) {
                                 for (auto _ : state) {
                                   auto f = gguf::GgufFile::open(path);
                                   benchmark::DoNotOptimize(f.get());
                                 }
                               });
  benchmark::RegisterBenchmark(fmt::format("header/{}/ours_model", c.label).c_str(),
                               [path](benchmark::State& state) {
                                 for (auto _ : state) {
                                   auto m = gguf::Model::open(path);
                                   benchmark::DoNotOptimize(m.tensors().data());
                                 }
                               });
  benchmark::RegisterBenchmark(fmt::format("header/{}/ggml", c.label).c_str(),
                               [path](benchmark::State& state) {
                                 const GgmlApi& api = ggml();
                                 for (auto _ : state) {
                                   void* ctx = api.init(path.c_str(), {true, nullptr});
                                   if (!ctx) {
                                     state.SkipWithError("ggml refused the file");
                                     break;
                                   }
                                   api.free(ctx);
                                 }
                               });
}

// Both readers see the same counts; throws otherwise.
void check_case(const Case& c) {
  const auto f = gguf::GgufFile::open(c.path);
  const GgmlApi& api = ggml();
  void* ctx = api.init(c.path.c_str(), {true, nullptr});
  if (!ctx) throw gguf::Error(c.path, {}, std::nullopt, "ggml refused the file");
  const int64_t nt = api.n_tensors(ctx), nkv = api.n_kv(ctx);
  api.free(ctx);
  if (nt != static_cast<int64_t>(f->tensors().size()) ||
      nkv != static_cast<int64_t>(f->metadata().size()))
    throw gguf::Error(c.path, {}, std::nullopt,
                      fmt::format("readers disagree: ours {} tensors {} keys, ggml {} and {}",
                                  f->tensors().size(), f->metadata().size(), nt, nkv));
}

void print_table(const gguf::bench::BestReporter& r) {
  fmt::print(
      "\nheader parse, best repetition, CPU ms per open (time ratio ours/ggml; target "
      "<= 1.00):\n");
  fmt::print("{:<12} {:>9} {:>9} {:>10} {:>11} {:>9} {:>10} {:>11}\n", "file", "data GiB",
             "hdr MiB", "ggml ms", "GgufFile ms", "ratio", "Model ms", "ratio");
  for (const Case& c : cases()) {
    const auto cpu = [&](const char* who) -> std::optional<double> {
      const auto b = r.best(fmt::format("header/{}/{}", c.label, who));
      if (!b) return std::nullopt;
      return b->cpu * 1e3;
    };
    const auto g = cpu("ggml"), f = cpu("ours_file"), m = cpu("ours_model");
    const auto ms = [](std::optional<double> v) {
      return v ? fmt::format("{:.2f}", *v) : std::string("-");
    };
    const auto ratio = [&](std::optional<double> v) {
      return v && g ? fmt::format("{:.2f}", *v / *g) : std::string("-");
    };
    fmt::print("{:<12} {:>9.1f} {:>9.2f} {:>10} {:>11} {:>9} {:>10} {:>11}\n", c.label,
               static_cast<double>(c.file_bytes - c.header_bytes) / kGiB,
               static_cast<double>(c.header_bytes) / (1024.0 * 1024.0), ms(g), ms(f), ratio(f),
               ms(m), ratio(m));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const auto& g = gguf::testing::GgmlRef::get();
  if (!g.available() || !ggml().init || !ggml().free || !ggml().n_tensors || !ggml().n_kv) {
    fmt::print(stderr, "header_bench: ggml's gguf reader not available: {}\n", g.reason());
    return 2;
  }
  gguf::bench::Args args(argc, argv, gguf::bench::default_flags(5));
  benchmark::Initialize(args.argc(), args.argv());
  if (benchmark::ReportUnrecognizedArguments(*args.argc(), args.argv())) return 1;

  const char* tmp = std::getenv("TMPDIR");
  const std::filesystem::path dir =
      std::filesystem::path(tmp ? tmp : "/var/tmp") / fmt::format("header-bench.{}", ::getpid());
  std::filesystem::create_directories(dir);
  int rc = 0;
  try {
    const struct {
      const char* label;
      Shape shape;
    } specs[] = {{"ds4", Shape{}},
                 {"data_1GiB", with_data_size(kNarrow, 1.0 * kGiB)},
                 {"data_100GiB", with_data_size(Shape{}, 100.0 * kGiB)}};
    for (const auto& s : specs) {
      const Layout l = ds4_layout(s.shape);
      Case c{s.label, (dir / (std::string(s.label) + ".gguf")).string(),
             l.header.size() + l.data_bytes, l.header.size()};
      write_sparse(c.path, l);
      check_case(c);
      const auto f = gguf::GgufFile::open(c.path);
      fmt::print("{}: {} tensors, {} keys, header {} bytes, data {:.1f} GiB (sparse), {} experts\n",
                 c.label, f->tensors().size(), f->metadata().size(), c.header_bytes,
                 static_cast<double>(l.data_bytes) / kGiB, s.shape.n_experts);
      cases().push_back(c);
      register_case(c);
    }
    gguf::bench::BestReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    print_table(reporter);
  } catch (const std::exception& e) {
    fmt::print(stderr, "header_bench: {}\n", e.what());
    rc = 1;
  }
  std::filesystem::remove_all(dir);
  benchmark::Shutdown();
  return rc;
}
