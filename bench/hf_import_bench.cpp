// The Hugging Face checkpoint import (HF names, q/k rows permuted, one tensor per expert
// stacked, two shards with an index) against its peer in the same process: the import of the
// same packed values already laid out under GGUF names (one file). Both write q4_1 onto the
// same f32 base and prove every value by reading the output back; both outputs are the same
// bytes. The ratio is what the name map and the row moves cost.
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "bench_report.h"
#include "gguf/format/model.h"
#include "gguf/ops/hf_import.h"
#include "gguf/ops/synth.h"
#include "gguf/write/writer.h"
#include "hf_fixture.h"

namespace {

struct Paths {
  std::string dir, base, named, hf, out;
};
const Paths* g_paths = nullptr;
unsigned g_threads = 1;

void write_and_prove(const gguf::ImportResult& r, const std::string& out) {
  gguf::WriteOptions wo;
  wo.force = true;
  wo.before_commit = [&](const gguf::Model& m) { (void)gguf::prove_import(r, m, g_threads); };
  gguf::write_plan(r.plan, out, wo);
}

void import_checkpoint(benchmark::State& state) {
  const gguf::Model base = gguf::Model::open(g_paths->base);
  for (auto _ : state) {
    const auto cp = gguf::HfCheckpoint::open(g_paths->hf);
    const auto r = gguf::import_checkpoint(cp, {std::nullopt, &base, g_threads});
    write_and_prove(r, g_paths->out);
  }
}

void import_named(benchmark::State& state) {
  const gguf::Model base = gguf::Model::open(g_paths->base);
  for (auto _ : state) {
    const auto file = gguf::SafetensorsFile::open(g_paths->named);
    const auto r = gguf::import_safetensors(file, {std::nullopt, &base, g_threads});
    write_and_prove(r, g_paths->out);
  }
}

}  // namespace

int main(int argc, char** argv) {
  gguf::bench::Args args(argc, argv, gguf::bench::default_flags(3));
  benchmark::Initialize(args.argc(), args.argv());
  if (benchmark::ReportUnrecognizedArguments(*args.argc(), args.argv())) return 1;
  const char* tmp = std::getenv("TMPDIR");
  Paths p;
  p.dir = fmt::format("{}/hf-import-bench.{}", tmp ? tmp : "/var/tmp", ::getpid());
  p.base = p.dir + "/f32.gguf", p.named = p.dir + "/named.safetensors", p.hf = p.dir + "/hf";
  p.out = p.dir + "/out.gguf";
  g_paths = &p;
  if (const char* t = std::getenv("HF_BENCH_THREADS")) g_threads = std::max(1, std::atoi(t));
  int rc = 0;
  try {
    std::filesystem::create_directories(p.hf);
    gguf::LlamaMoeSpec spec;  // Mixtral-style: q/k permuted, experts stacked
    spec.n_layers = 4;
    spec.n_experts = 8;
    spec.n_embd = 512;
    spec.n_ff = 1024;
    spec.threads = 2;
    fmt::print("writing {} ...\n", p.dir);
    gguf::write_plan(gguf::synth_llama_moe_plan(spec), p.base, {});
    gguf::testing::write_both_layouts(gguf::Model::open(p.base), p.named, p.hf);
    benchmark::RegisterBenchmark("hf/import_checkpoint", import_checkpoint)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark("hf/import_named", import_named)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    gguf::bench::BestReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    const auto hf = reporter.best("hf/import_checkpoint");
    const auto named = reporter.best("hf/import_named");
    const auto out_bytes = std::filesystem::file_size(p.out);
    fmt::print("\nimport with proof to q4_1 ({:.1f} MiB out, {} thread{}), best repetition\n",
               static_cast<double>(out_bytes) / (1 << 20), g_threads, g_threads == 1 ? "" : "s");
    for (const auto& [name, b] :
         {std::pair{"hf/import_checkpoint", hf}, {"hf/import_named", named}})
      if (b)
        fmt::print("{:<22} {:>8.3f} s {:>8.1f} MB/s out  {}\n", name, b->real,
                   static_cast<double>(out_bytes) / 1e6 / b->real,
                   gguf::bench::ratio_text(named ? std::optional(1 / b->real) : std::nullopt,
                                           named ? std::optional(1 / named->real) : std::nullopt) +
                       " of the GGUF-named import's speed");
  } catch (const std::exception& e) {
    fmt::print(stderr, "hf_import_bench: {}\n", e.what());
    rc = 1;
  }
  std::filesystem::remove_all(p.dir);
  benchmark::Shutdown();
  return rc;
}
