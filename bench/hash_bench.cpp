// gguf::hash_tensors over a multi-GiB GGUF (page-cached) at 1 and 2 threads against a plain
// single-core XXH3_64bits over the same mapped payload bytes; prints bandwidth per thread as a
// ratio of the plain loop's (target >= 0.8).
//
// Environment: HASH_BENCH_GIB (default 3) sets the payload size; HASH_BENCH_FILE names a file to
// use (created when missing, kept afterwards) instead of a temporary one.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_report.h"
#include "gguf/base/error.h"
#include "gguf/format/hash.h"
#include "gguf/format/model.h"
#include "gguf/write/writer.h"

namespace {

constexpr uint64_t kTensorBytes = uint64_t{32} << 20;  // 32 MiB of f16 per tensor
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// A file of n_tensors f16 tensors [4096, 4096] of pseudo-random bits, written through the
// library's header serialiser; payloads are written directly (the writer would verify them by
// hashing, i.e. run what we are about to measure).
void write_model(const std::string& path, int n_tensors) {
  gguf::Metadata md;
  md.set("general.architecture", gguf::Value::string("llama"));
  md.set("general.name", gguf::Value::string("hash-bench"));
  std::vector<gguf::PlanTensor> tensors;
  for (int i = 0; i < n_tensors; ++i) {
    gguf::PlanTensor t;
    t.name = fmt::format("blk.{}.ffn_up.weight", i);
    t.type_id = static_cast<uint32_t>(gguf::GgmlType::F16);
    t.shape = {4096, static_cast<int64_t>(kTensorBytes / 2 / 4096)};
    t.bytes = kTensorBytes;
    tensors.push_back(std::move(t));
  }
  std::mt19937_64 rng(42);
  gguf::bench::write_raw_model(path, md, tensors, [&](size_t, std::span<uint8_t> payload) {
    for (size_t k = 0; k + 8 <= payload.size(); k += 8) {
      const uint64_t w = rng();
      std::memcpy(payload.data() + k, &w, 8);
    }
  });
}

const gguf::Model* g_model = nullptr;

// XXH3_64bits of tensors [first, model.tensors().size()) stepping by stride; XOR of the hashes.
uint64_t plain_xxh3(const gguf::Model& m, size_t first, size_t stride,
                    std::vector<uint64_t>* out = nullptr) {
  uint64_t acc = 0;
  for (size_t i = first; i < m.tensors().size(); i += stride) {
    const auto d = m.tensors()[i].data();
    const uint64_t h = XXH3_64bits(d.data(), d.size());
    if (out) out->push_back(h);
    acc ^= h;
  }
  return acc;
}

uint64_t payload_bytes(const gguf::Model& m) {
  uint64_t n = 0;
  for (const auto& t : m.tensors()) n += t.data().size();
  return n;
}

// Process CPU time (all threads) next to wall time: on a shared machine, bytes per CPU second
// is the per-thread speed when the threads actually ran.
void register_benchmarks() {
  const auto bytes = static_cast<int64_t>(payload_bytes(*g_model));
  benchmark::RegisterBenchmark("hash/xxh3_plain_1t",
                               [bytes](benchmark::State& state) {
                                 for (auto _ : state)
                                   benchmark::DoNotOptimize(plain_xxh3(*g_model, 0, 1));
                                 state.SetBytesProcessed(state.iterations() * bytes);
                               })
      ->UseRealTime()
      ->MeasureProcessCPUTime();
  // The machine's own two-thread ceiling: two plain threads over alternate tensors.
  benchmark::RegisterBenchmark("hash/xxh3_plain_2t",
                               [bytes](benchmark::State& state) {
                                 for (auto _ : state) {
                                   uint64_t h1 = 0;
                                   std::thread other([&] { h1 = plain_xxh3(*g_model, 1, 2); });
                                   const uint64_t h0 = plain_xxh3(*g_model, 0, 2);
                                   other.join();
                                   benchmark::DoNotOptimize(h0 ^ h1);
                                 }
                                 state.SetBytesProcessed(state.iterations() * bytes);
                               })
      ->UseRealTime()
      ->MeasureProcessCPUTime();
  for (unsigned threads : {1u, 2u}) {
    benchmark::RegisterBenchmark(fmt::format("hash/hash_tensors_{}t", threads).c_str(),
                                 [threads, bytes](benchmark::State& state) {
                                   for (auto _ : state) {
                                     auto h = gguf::hash_tensors(*g_model, {}, threads);
                                     benchmark::DoNotOptimize(h.data());
                                   }
                                   state.SetBytesProcessed(state.iterations() * bytes);
                                 })
        ->UseRealTime()
        ->MeasureProcessCPUTime();
  }
}

void print_table(const gguf::bench::BestReporter& r, uint64_t bytes) {
  const auto per_s = [&](const std::string& name, bool cpu) -> std::optional<double> {
    const auto b = r.best(name);
    const double t = b ? (cpu ? b->cpu : b->real) : 0;
    if (!(t > 0)) return std::nullopt;
    return static_cast<double>(bytes) / kGiB / t;
  };
  const auto text = [](std::optional<double> v) {
    return v ? fmt::format("{:.2f}", *v) : std::string("-");
  };
  const auto plain_wall = per_s("hash/xxh3_plain_1t", false);
  const auto plain_cpu = per_s("hash/xxh3_plain_1t", true);
  fmt::print(
      "\nhashing {:.2f} GiB (page-cached, mapped), best repetition; per thread = wall GiB/s / "
      "threads; per CPU-s = GiB per second of process CPU time (what each thread did while it "
      "ran)\n",
      static_cast<double>(bytes) / kGiB);
  fmt::print("{:<22} {:>10} {:>11} {:>9} {:>11} {:>9}\n", "what", "wall GiB/s", "per thread",
             "vs plain", "per CPU-s", "vs plain");
  const struct {
    const char* name;
    unsigned threads;
  } rows[] = {{"hash/xxh3_plain_1t", 1},
              {"hash/xxh3_plain_2t", 2},
              {"hash/hash_tensors_1t", 1},
              {"hash/hash_tensors_2t", 2}};
  for (const auto& row : rows) {
    const auto wall = per_s(row.name, false), cpu = per_s(row.name, true);
    const auto per = wall ? std::optional<double>(*wall / row.threads) : std::nullopt;
    fmt::print("{:<22} {:>10} {:>11} {:>9} {:>11} {:>9}\n", row.name, text(wall), text(per),
               gguf::bench::ratio_text(per, plain_wall), text(cpu),
               gguf::bench::ratio_text(cpu, plain_cpu));
  }
}

}  // namespace

int main(int argc, char** argv) {
  gguf::bench::Args args(argc, argv, gguf::bench::default_flags(5));
  benchmark::Initialize(args.argc(), args.argv());
  if (benchmark::ReportUnrecognizedArguments(*args.argc(), args.argv())) return 1;

  const char* gib_env = std::getenv("HASH_BENCH_GIB");
  const double gib = gib_env ? std::atof(gib_env) : 3.0;
  const int n_tensors = std::max(2, static_cast<int>(gib * kGiB / kTensorBytes + 0.5));
  const char* keep = std::getenv("HASH_BENCH_FILE");
  const char* tmp = std::getenv("TMPDIR");
  const std::string path =
      keep ? keep : fmt::format("{}/hash-bench.{}.gguf", tmp ? tmp : "/var/tmp", ::getpid());
  int rc = 0;
  try {
    if (!std::filesystem::exists(path)) {
      fmt::print("writing {} ({} tensors of 32 MiB) ...\n", path, n_tensors);
      write_model(path, n_tensors);
    }
    const gguf::Model model = gguf::Model::open(path);
    g_model = &model;
    // Pulls the file into the page cache and this process's page tables, and checks that the
    // library's hashes are plain xxh3 of the payloads.
    std::vector<uint64_t> expect;
    plain_xxh3(model, 0, 1, &expect);
    if (gguf::hash_tensors(model, {}, 2) != expect)
      throw gguf::Error(path, {}, std::nullopt, "hash_tensors disagrees with XXH3_64bits");
    register_benchmarks();
    gguf::bench::BestReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    print_table(reporter, payload_bytes(model));
  } catch (const std::exception& e) {
    fmt::print(stderr, "hash_bench: {}\n", e.what());
    rc = 1;
  }
  if (!keep) std::filesystem::remove(path);
  benchmark::Shutdown();
  return rc;
}
