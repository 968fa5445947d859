// Shared by the benchmarks: default flags (repetitions, interleaving) and a console reporter
// that keeps the fastest repetition of every benchmark, so each bench's main can print a table
// of ours/peer ratios after RunSpecifiedBenchmarks. The machine is shared: best-of-N is the
// figure least disturbed by other processes.
#pragma once

#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <regex>
#include <span>
#include <string>
#include <vector>

#include "gguf/base/error.h"
#include "gguf/write/writer.h"

namespace gguf::bench {

// Writes a model file for a benchmark: the header through the library's serialiser, then
// each payload as fill(i, bytes) makes it, straight to the file (the writer would verify the
// payloads by hashing, i.e. run what the benchmarks measure). Payload sizes must be
// multiples of the alignment (no padding is written). Goes through "path.part", removed on
// failure.
inline void write_raw_model(const std::string& path, const Metadata& md,
                            const std::vector<PlanTensor>& tensors,
                            const std::function<void(size_t, std::span<uint8_t>)>& fill) {
  const auto header = serialize_header(md, 3, tensors);
  const std::string tmp = path + ".part";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(tmp, {}, std::nullopt, "cannot create");
  bool ok = ::write(fd, header.data(), header.size()) == static_cast<ssize_t>(header.size());
  std::vector<uint8_t> payload;
  try {
    for (size_t i = 0; ok && i < tensors.size(); ++i) {
      payload.resize(static_cast<size_t>(tensors[i].bytes));
      fill(i, payload);
      ok = ::write(fd, payload.data(), payload.size()) == static_cast<ssize_t>(payload.size());
    }
  } catch (...) {
    ::close(fd);
    std::filesystem::remove(tmp);
    throw;
  }
  ok = ::close(fd) == 0 && ok;
  if (!ok) {
    std::filesystem::remove(tmp);
    throw Error(tmp, {}, std::nullopt, "cannot write");
  }
  std::filesystem::rename(tmp, path);
}

// Times per iteration in seconds of the fastest repetition of a benchmark.
struct Best {
  double real = std::numeric_limits<double>::infinity();
  double cpu = std::numeric_limits<double>::infinity();
  int repetitions = 0;
  std::string label;
};

class BestReporter : public benchmark::ConsoleReporter {
 public:
  BestReporter() : benchmark::ConsoleReporter(OO_Tabular) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    std::vector<Run> shown;
    for (const Run& r : runs) {
      if (r.run_type == Run::RT_Iteration && !r.error_occurred && r.iterations > 0) {
        // Keyed by the name as registered (no "/real_time" or "/repeats:" suffixes).
        Best& b = best_[r.run_name.function_name];
        b.real = std::min(b.real, r.real_accumulated_time / static_cast<double>(r.iterations));
        b.cpu = std::min(b.cpu, r.cpu_accumulated_time / static_cast<double>(r.iterations));
        ++b.repetitions;
        if (!r.report_label.empty()) b.label = r.report_label;
      }
      if (r.error_occurred) errors_[r.run_name.function_name] = r.error_message;
      // With repetitions, one line per benchmark: the median (the table at the end uses the
      // best repetition).
      if (r.repetitions <= 1 || r.error_occurred ||
          (r.run_type == Run::RT_Aggregate && r.aggregate_name == "median"))
        shown.push_back(r);
    }
    if (!shown.empty()) ConsoleReporter::ReportRuns(shown);
  }

  // The best figures of the benchmark named name (as registered), if it ran.
  std::optional<Best> best(const std::string& name) const {
    const auto it = best_.find(name);
    if (it == best_.end()) return std::nullopt;
    return it->second;
  }
  std::optional<std::string> error(const std::string& name) const {
    const auto it = errors_.find(name);
    if (it == errors_.end()) return std::nullopt;
    return it->second;
  }

 private:
  std::map<std::string, Best> best_;
  std::map<std::string, std::string> errors_;
};

// argv plus our defaults for any flag the user did not give: three repetitions, interleaved
// across benchmarks so ours and the peer see the same background load, and only aggregates on
// the console.
class Args {
 public:
  Args(int argc, char** argv, std::vector<std::string> defaults) {
    for (int i = 0; i < argc; ++i) store_.emplace_back(argv[i]);
    for (auto& d : defaults) {
      const std::string flag = d.substr(0, d.find('='));
      const bool given = std::any_of(store_.begin() + 1, store_.end(), [&](const std::string& a) {
        return a.compare(0, flag.size(), flag) == 0;
      });
      if (!given) store_.push_back(std::move(d));
    }
    for (auto& s : store_) ptrs_.push_back(s.data());
    argc_ = static_cast<int>(ptrs_.size());
  }
  int* argc() { return &argc_; }
  char** argv() { return ptrs_.data(); }

 private:
  std::vector<std::string> store_;
  std::vector<char*> ptrs_;
  int argc_ = 0;
};

inline std::vector<std::string> default_flags(int repetitions) {
  return {fmt::format("--benchmark_repetitions={}", repetitions),
          "--benchmark_enable_random_interleaving=true"};
}

// Whether --benchmark_filter selects name (as Google Benchmark would: a regex searched in the
// name; a leading '-' negates). Lets a main skip expensive set-up for benchmarks not run.
inline bool selected(const std::string& name) {
  std::string f = benchmark::GetBenchmarkFilter();
  if (f.empty() || f == "." || f == "all") return true;
  const bool negate = f[0] == '-';
  if (negate) f.erase(0, 1);
  const bool hit = std::regex_search(name, std::regex(f, std::regex::extended));
  return hit != negate;
}

// "1.23x" or "-" when either side is missing.
inline std::string ratio_text(std::optional<double> ours_rate, std::optional<double> peer_rate) {
  if (!ours_rate || !peer_rate || *peer_rate <= 0) return "-";
  return fmt::format("{:.2f}x", *ours_rate / *peer_rate);
}

}  // namespace gguf::bench
