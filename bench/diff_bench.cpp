// gguf-diff's speed against its peers in the same process: the byte-identity diff of two equal
// page-cached files against a plain single-core XXH3_64bits over the same payloads (target per
// thread >= 0.8x), and the --values diff against plain dequantize of the same tensors of both
// files (target >= 0.8x in elements per second).
//
// Environment: DIFF_BENCH_A and DIFF_BENCH_B name two equal files, DIFF_BENCH_C and
// DIFF_BENCH_D two encodings of one model (bench/diff_bench.sh makes them); when unset, the
// bench writes its own: DIFF_BENCH_GIB (2) GiB of random f16 for A/B, and DIFF_BENCH_MELEM (64)
// million weights encoded as DIFF_BENCH_TYPE (q4_K) from two seeds for C/D.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <boost/align/aligned_allocator.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_report.h"
#include "gguf/base/error.h"
#include "gguf/codecs/codecs.h"
#include "gguf/format/model.h"
#include "gguf/ops/diff.h"
#include "gguf/write/writer.h"

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr int64_t kCols = 4096, kRows = 2048;  // 8M weights per tensor

// Writes n_tensors tensors of the type [kCols, kRows]: gaussian weights quantized to it, or
// for f16 random bits (finite halves).
void write_model(const std::string& path, gguf::GgmlType type, int n_tensors, uint64_t seed) {
  gguf::Metadata md;
  md.set("general.architecture", gguf::Value::string("deepseek2"));
  md.set("general.name", gguf::Value::string("diff-bench"));
  const uint64_t row = *gguf::row_bytes(type, kCols), bytes = row * kRows;
  std::vector<gguf::PlanTensor> tensors;
  for (int i = 0; i < n_tensors; ++i) {
    gguf::PlanTensor t;
    t.name = fmt::format("blk.{}.ffn_up_exps.weight", i);
    t.type_id = static_cast<uint32_t>(type);
    t.shape = {kCols, kRows};
    t.bytes = bytes;
    tensors.push_back(std::move(t));
  }
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> weights(static_cast<size_t>(kCols * kRows));
  const std::vector<float> importance(kCols, 1.0f);
  gguf::bench::write_raw_model(path, md, tensors, [&](size_t, std::span<uint8_t> payload) {
    if (type == gguf::GgmlType::F16) {
      for (size_t k = 0; k + 8 <= payload.size(); k += 8) {
        const uint64_t w = rng() & 0x3bff3bff3bff3bffull;  // finite halves, |x| < 1
        std::memcpy(payload.data() + k, &w, 8);
      }
    } else {
      for (auto& w : weights) w = normal(rng);
      gguf::quantize(type, weights, kRows, kCols, importance, payload);
    }
  });
}

struct Inputs {
  const gguf::Model *a, *b, *c, *d;
  uint64_t identity_bytes = 0;                             // payload bytes of A
  std::vector<const gguf::TensorRef*> decode_c, decode_d;  // what --values decodes
  uint64_t values_elements = 0;         // elements decoded by the peer (both sides)
  std::vector<double> paired_ratios;    // values diff / plain dequantize speed, pair by pair
  std::vector<double> paired_weighted;  // the same with the importance matrix
  gguf::Imatrix importance;             // random per-column weights for every measured tensor
};
Inputs g;

// How a plain loop gets the payload bytes: from the mapping, left resident (a bounded tool
// cannot do that with a 100 GB model); from the mapping, releasing each tensor's pages after
// it (how the tools streamed until session 19); or through ByteSource::stream() (pread into
// a buffer), as the tools read now.
enum class Read { kResident, kMapped, kStream };

uint64_t plain_xxh3(const gguf::Model& m, Read how = Read::kResident) {
  uint64_t acc = 0;
  std::vector<uint8_t> buf;
  for (const auto& t : m.tensors()) {
    if (how != Read::kStream) {
      acc ^= XXH3_64bits(t.data().data(), t.data().size());
      if (how == Read::kMapped) t.file->source().release(t.data_start(), t.data().size());
      continue;
    }
    XXH3_state_t* state = XXH3_createState();
    XXH3_64bits_reset(state);
    constexpr uint64_t kPiece = uint64_t{1} << 20;
    for (uint64_t off = 0; off < t.data().size(); off += kPiece) {
      const auto piece = t.file->source().stream(t.data_start() + off,
                                                 std::min(kPiece, t.data().size() - off), buf);
      XXH3_64bits_update(state, piece.data(), piece.size());
    }
    acc ^= XXH3_64bits_digest(state);
    XXH3_freeState(state);
  }
  return acc;
}

using Floats = std::vector<float, boost::alignment::aligned_allocator<float, 64>>;

// Plain single-threaded dequantize of the tensors the values diff decodes, in slices of 32K
// elements of whole rows into a cache-line aligned buffer (its best case: the output stays
// in L2, and no vector store straddles two cache lines). Read::kStream reads 1M elements' bytes
// at a time, as the values diff does.
void plain_decode(const std::vector<const gguf::TensorRef*>& ts, Floats& buf,
                  Read how = Read::kResident) {
  std::vector<uint8_t> raw;
  for (const auto* t : ts) {
    const auto type = static_cast<gguf::GgmlType>(t->info->type_id);
    const uint64_t ne0 = static_cast<uint64_t>(t->info->shape[0]);
    const uint64_t rows = t->info->n_elements / ne0, rb = *gguf::row_bytes(type, ne0);
    const uint64_t per = std::max<uint64_t>(1, (uint64_t{1} << 15) / ne0);
    const uint64_t per_read = how == Read::kStream
                                  ? std::max<uint64_t>(per, (uint64_t{1} << 20) / ne0 / per * per)
                                  : rows;
    for (uint64_t r0 = 0; r0 < rows; r0 += per_read) {
      const uint64_t m = std::min(per_read, rows - r0);
      const auto bytes = how == Read::kStream
                             ? t->file->source().stream(t->data_start() + r0 * rb, m * rb, raw)
                             : t->data().subspan(r0 * rb, m * rb);
      for (uint64_t r = 0; r < m; r += per) {
        const uint64_t n = std::min(per, m - r);
        buf.resize(n * ne0);
        gguf::dequantize(type, bytes.subspan(r * rb, n * rb), buf);
        benchmark::DoNotOptimize(buf.data());
      }
    }
    if (how == Read::kMapped) t->file->source().release(t->data_start(), t->data().size());
  }
}

// The same on two threads, one file each: what the machine's memory system and the other
// processes leave to two hashing threads, the ceiling of the 2-thread identity diff.
uint64_t plain_xxh3_2t(const gguf::Model& a, const gguf::Model& b) {
  uint64_t ha = 0;
  std::thread t([&] { ha = plain_xxh3(a); });
  const uint64_t hb = plain_xxh3(b);
  t.join();
  return ha ^ hb;
}

void register_benchmarks() {
  benchmark::RegisterBenchmark("diff/xxh3_plain_1core", [](benchmark::State& state) {
    for (auto _ : state) benchmark::DoNotOptimize(plain_xxh3(*g.a));
    state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(g.identity_bytes));
  })->UseRealTime();
  // Both files, as the diff reads them (two files' pages to fault in, not one file's twice).
  benchmark::RegisterBenchmark("diff/xxh3_streaming_1core", [](benchmark::State& state) {
    for (auto _ : state) {
      benchmark::DoNotOptimize(plain_xxh3(*g.a, Read::kStream));
      benchmark::DoNotOptimize(plain_xxh3(*g.b, Read::kStream));
    }
    state.SetBytesProcessed(state.iterations() * 2 * static_cast<int64_t>(g.identity_bytes));
  })->UseRealTime();
  benchmark::RegisterBenchmark("diff/xxh3_mapped_1core", [](benchmark::State& state) {
    for (auto _ : state) {
      benchmark::DoNotOptimize(plain_xxh3(*g.a, Read::kMapped));
      benchmark::DoNotOptimize(plain_xxh3(*g.b, Read::kMapped));
    }
    state.SetBytesProcessed(state.iterations() * 2 * static_cast<int64_t>(g.identity_bytes));
  })->UseRealTime();
  benchmark::RegisterBenchmark("diff/xxh3_plain_2t_a_and_b", [](benchmark::State& state) {
    for (auto _ : state) benchmark::DoNotOptimize(plain_xxh3_2t(*g.a, *g.b));
    state.SetBytesProcessed(state.iterations() * 2 * static_cast<int64_t>(g.identity_bytes));
  })->UseRealTime();
  for (unsigned threads : {1u, 2u}) {
    benchmark::RegisterBenchmark(
        fmt::format("diff/identity_{}t", threads).c_str(),
        [threads](benchmark::State& state) {
          uint64_t hashed = 0;
          for (auto _ : state) {
            gguf::DiffOptions o;
            o.threads = threads;
            const auto r = gguf::diff_models(*g.a, *g.b, o);
            if (!r.identical) state.SkipWithError("A and B differ");
            hashed = r.hashed_bytes;
          }
          state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(hashed));
        })
        ->UseRealTime();
  }
  benchmark::RegisterBenchmark("diff/dequantize_plain_1core", [](benchmark::State& state) {
    Floats buf;
    for (auto _ : state) {
      plain_decode(g.decode_c, buf);
      plain_decode(g.decode_d, buf);
    }
    state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(g.values_elements));
  })->UseRealTime();
  for (const Read how : {Read::kStream, Read::kMapped})
    benchmark::RegisterBenchmark(
        how == Read::kStream ? "diff/dequantize_streaming_1core" : "diff/dequantize_mapped_1core",
        [how](benchmark::State& state) {
          Floats buf;
          for (auto _ : state) {
            plain_decode(g.decode_c, buf, how);
            plain_decode(g.decode_d, buf, how);
          }
          state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(g.values_elements));
        })
        ->UseRealTime();
  // The same on two threads, one file each: what the machine's memory system, its read path
  // path and the other processes leave to two decoding threads (the values diff's ceiling on
  // two threads, as xxh3_plain_2t_a_and_b is the identity diff's).
  benchmark::RegisterBenchmark("diff/dequantize_streaming_2t", [](benchmark::State& state) {
    Floats buf;
    for (auto _ : state) {
      std::thread t([] {
        Floats other;
        plain_decode(g.decode_d, other, Read::kStream);
      });
      plain_decode(g.decode_c, buf, Read::kStream);
      t.join();
    }
    state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(g.values_elements));
  })->UseRealTime();
  // Plain dequantize and the 1-thread values diff in alternation, each pair timed back to
  // back in alternating order, so that a change in the machine's load (it is shared) hits both
  // sides of a ratio alike: the median of the pairs' ratios is the steadiest figure. Without
  // and with an importance matrix (--imatrix: weighted sums).
  for (const bool weighted : {false, true}) {
    benchmark::RegisterBenchmark(
        weighted ? "diff/values_weighted_1t_vs_dequantize_paired"
                 : "diff/values_1t_vs_dequantize_paired",
        [weighted](benchmark::State& state) {
          Floats buf;
          auto& ratios = weighted ? g.paired_weighted : g.paired_ratios;
          using Clock = std::chrono::steady_clock;
          const auto secs = [](Clock::time_point t0) {
            return std::chrono::duration<double>(Clock::now() - t0).count();
          };
          for (auto _ : state) {
            double plain = 0, values = 0;
            for (int order = 0; order < 2; ++order) {
              if (order == static_cast<int>(ratios.size() % 2)) {
                const auto t0 = Clock::now();
                plain_decode(g.decode_c, buf, Read::kStream);  // as the values diff reads
                plain_decode(g.decode_d, buf, Read::kStream);
                plain = secs(t0);
              } else {
                gguf::DiffOptions o;
                o.values = true;
                o.threads = 1;
                if (weighted) o.importance = &g.importance;
                const auto t0 = Clock::now();
                benchmark::DoNotOptimize(gguf::diff_models(*g.c, *g.d, o).decoded_elements);
                values = secs(t0);
              }
            }
            ratios.push_back(plain / values);
          }
        })
        ->Iterations(15)
        ->UseRealTime();
  }
  for (unsigned threads : {1u, 2u}) {
    benchmark::RegisterBenchmark(
        fmt::format("diff/values_{}t", threads).c_str(),
        [threads](benchmark::State& state) {
          uint64_t decoded = 0;
          for (auto _ : state) {
            gguf::DiffOptions o;
            o.values = true;
            o.threads = threads;
            decoded = gguf::diff_models(*g.c, *g.d, o).decoded_elements;
          }
          state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(decoded));
        })
        ->UseRealTime();
  }
}

void print_table(const gguf::bench::BestReporter& r) {
  const auto rate = [&](const std::string& name, double amount) -> std::optional<double> {
    const auto b = r.best(name);
    if (!b || !(b->real > 0)) return std::nullopt;
    return amount / b->real;
  };
  const double id_bytes = static_cast<double>(g.identity_bytes) / kGiB;
  const auto plain = rate("diff/xxh3_plain_1core", id_bytes);
  fmt::print("\nbyte identity, A = B = {:.2f} GiB of payload (page-cached), best repetition:\n",
             id_bytes);
  fmt::print("{:<28} {:>10} {:>14} {:>16}\n", "what", "GiB/s", "GiB/s/thread", "per thread/xxh3");
  fmt::print("{:<28} {:>10.2f} {:>14.2f} {:>16}\n", "diff/xxh3_plain_1core", plain.value_or(0),
             plain.value_or(0), "1.00x");
  const auto stream = rate("diff/xxh3_streaming_1core", 2 * id_bytes);
  fmt::print("{:<28} {:>10} {:>14} {:>16}\n", "diff/xxh3_streaming_1core",
             stream ? fmt::format("{:.2f}", *stream) : "-",
             stream ? fmt::format("{:.2f}", *stream) : "-", gguf::bench::ratio_text(stream, plain));
  const auto mapped = rate("diff/xxh3_mapped_1core", 2 * id_bytes);
  fmt::print("{:<28} {:>10} {:>14} {:>16}\n", "diff/xxh3_mapped_1core",
             mapped ? fmt::format("{:.2f}", *mapped) : "-",
             mapped ? fmt::format("{:.2f}", *mapped) : "-", gguf::bench::ratio_text(mapped, plain));
  const auto plain2 = rate("diff/xxh3_plain_2t_a_and_b", 2 * id_bytes);
  fmt::print(
      "{:<28} {:>10} {:>14} {:>16}\n", "diff/xxh3_plain_2t_a_and_b",
      plain2 ? fmt::format("{:.2f}", *plain2) : "-",
      plain2 ? fmt::format("{:.2f}", *plain2 / 2) : "-",
      gguf::bench::ratio_text(plain2 ? std::optional<double>(*plain2 / 2) : std::nullopt, plain));
  for (unsigned t : {1u, 2u}) {
    const std::string name = fmt::format("diff/identity_{}t", t);
    const auto v = rate(name, 2 * id_bytes);  // both files are hashed
    const auto per = v ? std::optional<double>(*v / t) : std::nullopt;
    fmt::print("{:<28} {:>10} {:>14} {:>16}   {} of streaming xxh3\n", name,
               v ? fmt::format("{:.2f}", *v) : "-", per ? fmt::format("{:.2f}", *per) : "-",
               gguf::bench::ratio_text(per, plain), gguf::bench::ratio_text(per, stream));
  }
  const double melem = static_cast<double>(g.values_elements) / 1e6;
  const auto dec = rate("diff/dequantize_plain_1core", melem);
  fmt::print("\n--values, {:.1f} M elements decoded per run (both sides), best repetition:\n",
             melem);
  fmt::print("{:<28} {:>10} {:>14} {:>16}\n", "what", "Melem/s", "Melem/s/thread",
             "per thread/deq");
  fmt::print("{:<28} {:>10.1f} {:>14.1f} {:>16}\n", "diff/dequantize_plain_1core", dec.value_or(0),
             dec.value_or(0), "1.00x");
  const auto dec_stream = rate("diff/dequantize_streaming_1core", melem);
  fmt::print("{:<28} {:>10} {:>14} {:>16}\n", "diff/dequantize_streaming_1core",
             dec_stream ? fmt::format("{:.1f}", *dec_stream) : "-",
             dec_stream ? fmt::format("{:.1f}", *dec_stream) : "-",
             gguf::bench::ratio_text(dec_stream, dec));
  const auto dec_mapped = rate("diff/dequantize_mapped_1core", melem);
  fmt::print("{:<28} {:>10} {:>14} {:>16}\n", "diff/dequantize_mapped_1core",
             dec_mapped ? fmt::format("{:.1f}", *dec_mapped) : "-",
             dec_mapped ? fmt::format("{:.1f}", *dec_mapped) : "-",
             gguf::bench::ratio_text(dec_mapped, dec));
  const auto dec_stream2 = rate("diff/dequantize_streaming_2t", melem);
  fmt::print("{:<28} {:>10} {:>14} {:>16}\n", "diff/dequantize_streaming_2t",
             dec_stream2 ? fmt::format("{:.1f}", *dec_stream2) : "-",
             dec_stream2 ? fmt::format("{:.1f}", *dec_stream2 / 2) : "-",
             gguf::bench::ratio_text(
                 dec_stream2 ? std::optional<double>(*dec_stream2 / 2) : std::nullopt, dec));
  for (unsigned t : {1u, 2u}) {
    const std::string name = fmt::format("diff/values_{}t", t);
    const auto v = rate(name, melem);
    const auto per = v ? std::optional<double>(*v / t) : std::nullopt;
    fmt::print("{:<28} {:>10} {:>14} {:>16}   {} of streaming deq{}\n", name,
               v ? fmt::format("{:.1f}", *v) : "-", per ? fmt::format("{:.1f}", *per) : "-",
               gguf::bench::ratio_text(per, dec), gguf::bench::ratio_text(per, dec_stream),
               t == 2 ? fmt::format(", {} of it on 2 threads",
                                    gguf::bench::ratio_text(
                                        v, dec_stream2 ? std::optional<double>(*dec_stream2)
                                                       : std::nullopt))
                      : "");
  }
  for (const bool weighted : {false, true}) {
    auto r = weighted ? g.paired_weighted : g.paired_ratios;
    if (r.empty()) continue;
    std::sort(r.begin(), r.end());
    fmt::print("{:<28} {:>10} {:>14} {:>16}\n",
               weighted ? "values_1t --imatrix / streaming deq, paired"
                        : "values_1t / streaming deq, paired",
               "", "", fmt::format("{:.2f}x", r[r.size() / 2]));
    fmt::print("  (median of {} back-to-back pairs; lowest {:.2f}x, highest {:.2f}x)\n", r.size(),
               r.front(), r.back());
  }
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

}  // namespace

int main(int argc, char** argv) {
  gguf::bench::Args args(argc, argv, gguf::bench::default_flags(3));
  benchmark::Initialize(args.argc(), args.argv());
  if (benchmark::ReportUnrecognizedArguments(*args.argc(), args.argv())) return 1;
  const std::string dir = env_or("TMPDIR", "/var/tmp");
  const std::string stem = fmt::format("{}/diff-bench.{}", dir, ::getpid());
  std::vector<std::string> made;
  int rc = 0;
  try {
    std::string pa = env_or("DIFF_BENCH_A", ""), pb = env_or("DIFF_BENCH_B", "");
    std::string pc = env_or("DIFF_BENCH_C", ""), pd = env_or("DIFF_BENCH_D", "");
    const int tensor_mib = static_cast<int>(kCols * kRows * 2 >> 20);
    if (pa.empty() || pb.empty()) {
      const double gib = std::atof(env_or("DIFF_BENCH_GIB", "2").c_str());
      const int n = std::max(1, static_cast<int>(gib * 1024 / tensor_mib + 0.5));
      pa = stem + ".a.gguf", pb = stem + ".b.gguf";
      fmt::print("writing {} and its copy ({} f16 tensors of {} MiB) ...\n", pa, n, tensor_mib);
      write_model(pa, gguf::GgmlType::F16, n, 1);
      made.push_back(pa);
      std::filesystem::copy_file(pa, pb);
      made.push_back(pb);
    }
    if (pc.empty() || pd.empty()) {
      const auto type = gguf::parse_type(env_or("DIFF_BENCH_TYPE", "q4_K"));
      if (!type) throw gguf::Error("DIFF_BENCH_TYPE: unknown type");
      const double melem = std::atof(env_or("DIFF_BENCH_MELEM", "64").c_str());
      const int n = std::max(1, static_cast<int>(melem * 1e6 / (kCols * kRows) + 0.5));
      pc = stem + ".c.gguf", pd = stem + ".d.gguf";
      fmt::print("writing {} and {} ({} {} tensors of {}x{}) ...\n", pc, pd, n,
                 gguf::type_name(static_cast<uint32_t>(*type)), kCols, kRows);
      write_model(pc, *type, n, 2);
      made.push_back(pc);
      write_model(pd, *type, n, 3);
      made.push_back(pd);
    }
    const gguf::Model a = gguf::Model::open(pa), b = gguf::Model::open(pb);
    const gguf::Model c = gguf::Model::open(pc), d = gguf::Model::open(pd);
    g.a = &a, g.b = &b, g.c = &c, g.d = &d;
    for (const auto& t : a.tensors()) g.identity_bytes += t.data().size();
    // The tensors the values diff measures, found by running it once (also warms the caches).
    gguf::DiffOptions o;
    o.values = true;
    for (const auto& t : gguf::diff_models(c, d, o).tensors) {
      if (!t.metrics) continue;
      g.decode_c.push_back(c.find(t.name));
      g.decode_d.push_back(d.find(t.name));
      g.values_elements += 2 * c.find(t.name)->info->n_elements;
      // Weights like an imatrix's: positive, a few columns far heavier than the rest.
      const auto& shape = c.find(t.name)->info->shape;
      gguf::ImatrixEntry e;
      e.ne0 = shape[0];
      e.n_mat = shape.size() > 2 ? shape[2] : 1;
      std::mt19937_64 rng(e.ne0 * 31 + e.n_mat);
      std::exponential_distribution<float> expo(1.0f);
      e.values.resize(static_cast<size_t>(e.ne0 * e.n_mat));
      for (auto& v : e.values) v = expo(rng);
      g.importance.add(t.name, std::move(e));
    }
    if (!gguf::diff_models(a, b, {}).identical)
      throw gguf::Error(pb, {}, std::nullopt, "is not equal to " + pa);
    register_benchmarks();
    gguf::bench::BestReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    print_table(reporter);
  } catch (const std::exception& e) {
    fmt::print(stderr, "diff_bench: {}\n", e.what());
    rc = 1;
  }
  for (const auto& p : made) std::filesystem::remove(p);
  benchmark::Shutdown();
  return rc;
}
