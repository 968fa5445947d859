// Our codecs against ggml's in one process: quantize (gguf::quantize vs ggml_quantize_chunk, or
// quantize_row_<type>_ref for q8_1/q8_K) and dequantize (gguf::dequantize vs
// dequantize_row_<type>), one thread, weight-like gaussian rows of 4096 floats, with and without
// importance weights. Each pair is first checked to give identical output; the end of the run
// prints MB/s of f32 data and the ours/ggml ratios.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "bench_report.h"
#include "distributions.h"
#include "ggml_ref.h"
#include "gguf/codecs/codecs.h"
#include "gguf/format/types.h"

namespace {

using gguf::GgmlType;
using gguf::testing::GgmlRef;

constexpr int64_t kRowLength = 4096;
constexpr int64_t kRows = 16;  // 256 KiB of f32 per call
constexpr double kMiB = 1024.0 * 1024.0;

int id_of(GgmlType t) { return static_cast<int>(t); }

size_t bytes_of(GgmlType t, int64_t n) {
  return static_cast<size_t>(*gguf::row_bytes(t, static_cast<uint64_t>(n)));
}

// ggml_quantize_chunk aborts on the two activation-only types; for those the peer is ggml's
// quantize_row_<type>_ref over the same floats (no importance path).
bool ggml_quantizes(GgmlType t) { return t != GgmlType::Q8_1 && t != GgmlType::Q8_K; }

size_t ggml_quantize(GgmlType t, const float* src, uint8_t* dst, const float* imatrix) {
  const GgmlRef& g = GgmlRef::get();
  if (ggml_quantizes(t)) return g.quantize_chunk(id_of(t), src, dst, 0, kRows, kRowLength, imatrix);
  return g.quantize_row_ref(id_of(t), src, dst, kRows * kRowLength)
             ? bytes_of(t, kRowLength) * kRows
             : 0;
}

struct Inputs {
  std::vector<float> rows =
      gguf::testing::make_rows(gguf::testing::Dist::kGaussian, kRows, kRowLength, /*seed=*/7);
  std::vector<float> importance = gguf::testing::make_importance(kRowLength, /*seed=*/7);
};

const Inputs& inputs() {
  static const Inputs in;
  return in;
}

// One line of the final table: a pair of benchmarks (ours, ggml) or a skipped pair.
struct Pair {
  std::string type, op, mode;
  std::string ours, peer;  // benchmark names
  std::string note;        // why the pair was not timed
};

std::vector<Pair>& pairs() {
  static std::vector<Pair> p;
  return p;
}

// ---- Quantize ----

// Both quantizers on the shared input; empty when they agree, else what differs.
std::string check_quantize(GgmlType t, const float* imatrix) {
  const auto& in = inputs();
  const size_t size = bytes_of(t, kRowLength) * kRows;
  std::vector<uint8_t> ours(size), ref(size);
  try {
    gguf::quantize(t, in.rows, kRows, kRowLength,
                   imatrix ? std::span<const float>(imatrix, kRowLength) : std::span<const float>(),
                   ours);
  } catch (const std::exception& e) {
    return fmt::format("ours failed: {}", e.what());
  }
  const size_t got = ggml_quantize(t, in.rows.data(), ref.data(), imatrix);
  if (got != size) return fmt::format("ggml wrote {} bytes, expected {}", got, size);
  if (ours == ref) return {};
  size_t n = 0;
  for (size_t i = 0; i < size; ++i) n += ours[i] != ref[i];
  return fmt::format("DIFFERS: {} of {} bytes", n, size);
}

void register_quantize(GgmlType t, bool with_importance) {
  const std::string name(gguf::traits(t).name);
  const std::string mode = with_importance ? "imatrix" : "plain";
  const std::string base = fmt::format("quantize/{}/{}", name, mode);
  Pair p{name, "quantize", mode, base + "/ours", base + "/ggml", {}};
  if (!gguf::bench::selected(p.ours) && !gguf::bench::selected(p.peer)) return;
  const float* imatrix = with_importance ? inputs().importance.data() : nullptr;
  p.note = check_quantize(t, imatrix);
  pairs().push_back(p);
  if (!p.note.empty()) return;  // not identical: timing it would compare different work
  const size_t size = bytes_of(t, kRowLength) * kRows;
  const int64_t in_bytes = kRows * kRowLength * static_cast<int64_t>(sizeof(float));
  benchmark::RegisterBenchmark(p.ours.c_str(), [=](benchmark::State& state) {
    const auto& in = inputs();
    std::vector<uint8_t> out(size);
    const auto imp =
        imatrix ? std::span<const float>(imatrix, kRowLength) : std::span<const float>();
    for (auto _ : state) {
      gguf::quantize(t, in.rows, kRows, kRowLength, imp, out);
      benchmark::DoNotOptimize(out.data());
      benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(state.iterations() * in_bytes);
  });
  benchmark::RegisterBenchmark(p.peer.c_str(), [=](benchmark::State& state) {
    const auto& in = inputs();
    std::vector<uint8_t> out(size);
    for (auto _ : state) {
      ggml_quantize(t, in.rows.data(), out.data(), imatrix);
      benchmark::DoNotOptimize(out.data());
      benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(state.iterations() * in_bytes);
  });
}

// ---- Dequantize ----

using RowDecoder = void (*)(const void*, float*, int64_t);

// ggml's row decoder for t, looked up once (the same names GgmlRef::dequantize_row uses).
RowDecoder ggml_decoder(GgmlType t) {
  std::string name;
  if (t == GgmlType::F16)
    name = "ggml_fp16_to_fp32_row";
  else if (t == GgmlType::BF16)
    name = "ggml_bf16_to_fp32_row";
  else
    name = fmt::format("dequantize_row_{}", gguf::traits(t).name);
  return reinterpret_cast<RowDecoder>(GgmlRef::get().symbol(name.c_str()));
}

// Encoded rows to decode: ggml's own bytes where ggml can produce them.
std::vector<uint8_t> encoded_rows(GgmlType t) {
  const auto& in = inputs();
  std::vector<uint8_t> q(bytes_of(t, kRowLength) * kRows);
  const GgmlRef& g = GgmlRef::get();
  if (ggml_quantizes(t)) {
    const float* imatrix = gguf::requires_importance(t) ? in.importance.data() : nullptr;
    g.quantize_chunk(id_of(t), in.rows.data(), q.data(), 0, kRows, kRowLength, imatrix);
  } else if (!g.quantize_row_ref(id_of(t), in.rows.data(), q.data(), kRows * kRowLength)) {
    return {};
  }
  return q;
}

void register_dequantize(GgmlType t) {
  const std::string name(gguf::traits(t).name);
  const std::string base = fmt::format("dequantize/{}", name);
  Pair p{name, "dequantize", "-", base + "/ours", base + "/ggml", {}};
  if (!gguf::bench::selected(p.ours) && !gguf::bench::selected(p.peer)) return;
  const RowDecoder fn = ggml_decoder(t);
  auto q = std::make_shared<std::vector<uint8_t>>(encoded_rows(t));
  const int64_t n = kRows * kRowLength;
  if (q->empty()) {
    p.note = "no ggml encoder to make input";
  } else {
    std::vector<float> ours(static_cast<size_t>(n)), ref(static_cast<size_t>(n));
    gguf::dequantize(t, *q, ours);
    fn(q->data(), ref.data(), n);
    size_t differ = 0;
    for (int64_t i = 0; i < n; ++i)
      differ += std::bit_cast<uint32_t>(ours[i]) != std::bit_cast<uint32_t>(ref[i]);
    if (differ) p.note = fmt::format("DIFFERS: {} of {} floats", differ, n);
  }
  pairs().push_back(p);
  if (!p.note.empty()) return;
  const int64_t out_bytes = n * static_cast<int64_t>(sizeof(float));
  benchmark::RegisterBenchmark(p.ours.c_str(), [=](benchmark::State& state) {
    std::vector<float> out(static_cast<size_t>(n));
    for (auto _ : state) {
      gguf::dequantize(t, *q, out);
      benchmark::DoNotOptimize(out.data());
      benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(state.iterations() * out_bytes);
  });
  benchmark::RegisterBenchmark(p.peer.c_str(), [=](benchmark::State& state) {
    std::vector<float> out(static_cast<size_t>(n));
    for (auto _ : state) {
      fn(q->data(), out.data(), n);
      benchmark::DoNotOptimize(out.data());
      benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(state.iterations() * out_bytes);
  });
}

void register_all() {
  for (GgmlType t : gguf::active_types()) {
    if (gguf::can_encode(t)) {
      if (!gguf::requires_importance(t)) register_quantize(t, false);
      if (gguf::uses_importance(t)) register_quantize(t, true);
    }
    if (gguf::can_decode(t) && ggml_decoder(t)) register_dequantize(t);
  }
}

// MB/s (MiB of f32 per second of CPU time) of the fastest repetition.
std::optional<double> rate(const gguf::bench::BestReporter& r, const std::string& name) {
  const auto b = r.best(name);
  if (!b || !(b->cpu > 0)) return std::nullopt;
  const double bytes = static_cast<double>(kRows * kRowLength * sizeof(float));
  return bytes / kMiB / b->cpu;
}

void print_table(const gguf::bench::BestReporter& r) {
  std::string below;
  fmt::print(
      "\nours/ggml, one thread, best repetition, MiB/s of f32 per CPU second "
      "({} rows x {} gaussian floats):\n",
      kRows, kRowLength);
  fmt::print("{:<8} {:<10} {:<8} {:>10} {:>10} {:>8}  {}\n", "type", "op", "weights", "ours",
             "ggml", "ratio", "note");
  for (const Pair& p : pairs()) {
    const auto ours = rate(r, p.ours), peer = rate(r, p.peer);
    const auto fmt_rate = [](std::optional<double> v) {
      return v ? fmt::format("{:.1f}", *v) : std::string("-");
    };
    std::string note = p.note;
    if (note.empty() && (!ours || !peer)) note = "not run (filtered)";
    fmt::print("{:<8} {:<10} {:<8} {:>10} {:>10} {:>8}  {}\n", p.type, p.op, p.mode, fmt_rate(ours),
               fmt_rate(peer), gguf::bench::ratio_text(ours, peer), note);
    if (ours && peer && *ours < *peer)
      below += fmt::format(" {} {}{}", p.type, p.op, p.mode == "-" ? "" : "/" + p.mode);
  }
  fmt::print("below 1.0x:{}\n", below.empty() ? " none" : below);
}

}  // namespace

int main(int argc, char** argv) {
  const GgmlRef& g = GgmlRef::get();
  if (!g.available()) {
    fmt::print(stderr, "codec_bench: ggml reference library not available: {}\n", g.reason());
    return 2;
  }
  gguf::bench::Args args(argc, argv, gguf::bench::default_flags(3));
  benchmark::Initialize(args.argc(), args.argv());
  if (benchmark::ReportUnrecognizedArguments(*args.argc(), args.argv())) return 1;
  register_all();
  gguf::bench::BestReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  print_table(reporter);
  benchmark::Shutdown();
  return 0;
}
