// What every tool main shares (the gguf_cli target, beside libgguf so that library users do not
// get Boost.Program_options): error-to-exit-code mapping, --help/--version, selector options,
// and a progress bar on stderr when it is a terminal.
#pragma once

#include <fmt/format.h>

#include <boost/program_options.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/base/threads.h"
#include "gguf/base/units.h"
#include "gguf/format/select.h"

namespace gguf::cli {

namespace po = boost::program_options;

std::string_view version();

// Writes text to stderr, ignoring failure: a diagnostic that cannot be shown (stderr closed or
// on a full disk) must neither fail the work nor crash the tool, as fmt::print would by throwing.
void print_stderr(std::string_view text);
template <class... T>
void eprint(fmt::format_string<T...> format, T&&... args) {
  print_stderr(fmt::format(format, std::forward<T>(args)...));
}

// Runs body and maps failures to "tool: error: message" on stderr: gguf::Error of input kind
// and I/O failures exit with failure_code (1; gguf-diff uses 2), usage errors and
// Boost.Program_options errors with 2. Also installs signal handlers: SIGINT, SIGTERM and
// SIGHUP remove the writer's temp files before the process dies of them; SIGBUS (a mapped
// input truncated while in use) prints an error and exits with failure_code.
// With --json (as parse_command_line read it; when the command line itself is the problem, an
// argument that reads as --json), a failure also prints one JSON document on stdout,
// {"error": the message as on stderr, "exit_code": N}, so a script that parses stdout always
// gets a document; a tool that printed its own document with the error sets
// json_document_printed().
int run_tool(std::string_view tool, int argc, char** argv, const std::function<int()>& body,
             int failure_code = 1);
void json_document_printed();

// Parses argv into vm with the options of visible (listed by --help) and hidden (parsed, not
// listed: what the positional arguments fill) and positional; handles --help (prints usage and
// visible to stdout; returns true meaning "exit 0 now") and --version. Long options must be
// spelled whole (no prefix guessing), and an empty value (of an option or a positional
// argument) is a usage error.
bool parse_command_line(int argc, char** argv, std::string_view tool, std::string_view usage,
                        const po::options_description& visible,
                        const po::options_description& hidden,
                        const po::positional_options_description& positional,
                        po::variables_map& vm);
// The same with no hidden options.
bool parse_command_line(int argc, char** argv, std::string_view tool, std::string_view usage,
                        const po::options_description& desc,
                        const po::positional_options_description& positional,
                        po::variables_map& vm);

// The long options among `names` (without "--") in the order argv gives them, for options
// whose relative order matters (--tensor-type and --tensor-type-file join one list). Stops at
// "--"; as parse_command_line, only whole names count.
std::vector<std::string> option_sequence(int argc, char** argv,
                                         const std::vector<std::string>& names);

// The positional arguments a tool takes (at most `max`): a usage error names the first extra
// one and says where it belongs (hint, e.g. "the output goes after -o").
void check_positional(const std::vector<std::string>& args, size_t max, std::string_view hint);

// --layers, --role, --match, shared by all tools.
struct SelectorArgs {
  std::vector<std::string> layers, roles, matches;
  void add_to(po::options_description& desc);
  Selector parse() const;
  bool given() const { return !layers.empty() || !roles.empty() || !matches.empty(); }
};

// A whole-number option value. Boost's lexical_cast would read "-1" as the largest unsigned
// value (--threads -1 asked for four billion threads); these take digits only.
struct Count {
  uint64_t value = 0;
};
void validate(boost::any& v, const std::vector<std::string>& values, Count*, int);

// An option value read as a Count into *target; a usage error (exit 2) names the option
// when the value is outside [min, max].
template <class T>
po::typed_value<Count>* count_value(T* target, uint64_t max, std::string option, uint64_t min = 0) {
  return po::value<Count>()->notifier([target, max, min, option](const Count& c) {
    if (c.value > max)
      throw po::error(fmt::format("the argument ('{}') for option '{}' is larger than {}", c.value,
                                  option, max));
    if (c.value < min)
      throw po::error(fmt::format("the argument ('{}') for option '{}' is smaller than {}", c.value,
                                  option, min));
    *target = static_cast<T>(c.value);
  });
}

// --threads accepts at most this many; 0 means "all cores".
inline constexpr uint64_t kMaxThreads = 1024;

// -j/--threads N, the same in every tool: 0 (the default) means all cores (gguf::thread_count).
void add_threads_option(po::options_description& desc, unsigned* threads, std::string_view what);

// Parses a size like "4G", "500M", "4GiB", "123456": K, M, G, T (or KB ... TB) are powers of
// 1000 as in llama-gguf-split, KiB ... TiB powers of 1024, suffixes in any case; a usage error
// otherwise, and for 0.
uint64_t parse_size(std::string_view text, std::string_view option);

// A progress bar on stderr, drawn only when stderr is a terminal; thread-safe update().
class Progress {
 public:
  explicit Progress(std::string label);
  ~Progress();
  void update(uint64_t done, uint64_t total);
  std::function<void(uint64_t, uint64_t)> callback();

 private:
  std::string label_;
  bool enabled_;
  int64_t last_draw_ms_ = 0;
  bool drawn_ = false;
};

}  // namespace gguf::cli
