// Shared by the benchmarks: default flags (repetitions, interleaving) and a console reporter
// that keeps the fastest repetition of every benchmark, so each bench's main can print a table
// of ours/peer ratios after RunSpecifiedBenchmarks. The machine is shared: best-of-N is the
// figure least disturbed by other processes.
#pragma once

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <vector>

namespace gguf::bench {

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
