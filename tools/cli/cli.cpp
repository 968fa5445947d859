// Shared command-line plumbing for the four tools (the gguf_cli target; libgguf knows nothing of
// command lines).
#include "cli/cli.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <system_error>

#include "gguf/base/errno_text.h"
#include "gguf/base/error.h"
#include "gguf/base/escape.h"
#include "gguf/format/json.h"
#include "gguf/io/signals.h"

namespace gguf::cli {

std::string_view version() { return "0.1.0"; }

void print_stderr(std::string_view text) {
  if (std::fwrite(text.data(), 1, text.size(), stderr) != text.size()) std::clearerr(stderr);
}

namespace {

// What the SIGBUS handler prints and exits with, prepared before any file is mapped: the
// prefix ("TOOL: error: "), the file and byte (from the map registry), then the text.
char g_bus_prefix[128];
size_t g_bus_prefix_length = 0;
constexpr char kBusText[] =
    "a file being read was truncated or could not be read (SIGBUS): was an input changed while "
    "in use? Any unfinished output was removed\n";
int g_bus_exit = 1;

// SIGINT, SIGTERM, SIGHUP, SIGQUIT: remove the writer's named temp files (an unnamed one goes with
// the process), then die of the signal as if it had not been caught.
extern "C" void on_termination_signal(int sig) {
  if (defer_termination_signal(sig)) return;  // a split set is being put in place
  remove_temp_files_from_signal_handler();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

// SIGBUS: a mapped input shrank (or its storage failed) while being read. An error message
// and the tool's failure status rather than a crash.
extern "C" void on_bus_error(int, siginfo_t* info, void*) {
  remove_temp_files_from_signal_handler();
  char msg[4096];
  size_t n = g_bus_prefix_length;
  std::memcpy(msg, g_bus_prefix, n);
  // "FILE: at byte N: " when the address lies in a mapped input.
  const size_t room = sizeof msg - n - sizeof kBusText - 2;
  if (const size_t k = info ? describe_mapped_address(info->si_addr, msg + n, room) : 0) {
    n += k;
    msg[n++] = ':';
    msg[n++] = ' ';
  }
  std::memcpy(msg + n, kBusText, sizeof kBusText - 1);
  n += sizeof kBusText - 1;
  const ssize_t ignored = ::write(2, msg, n);
  (void)ignored;
  ::_exit(g_bus_exit);
}

void install_signal_handlers(std::string_view tool, int failure_code) {
  const std::string prefix = fmt::format("{}: error: ", tool);
  g_bus_prefix_length = std::min(prefix.size(), sizeof g_bus_prefix);
  std::memcpy(g_bus_prefix, prefix.data(), g_bus_prefix_length);
  g_bus_exit = failure_code;
  struct sigaction sa {};
  sigemptyset(&sa.sa_mask);
  sa.sa_handler = on_termination_signal;
  sa.sa_flags = SA_RESTART;  // the handler returns when it defers the signal
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
    struct sigaction old {};
    // A signal the caller ignores (nohup, a background job) stays ignored.
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    ::sigaction(sig, &sa, nullptr);
  }
  // A file size limit (ulimit -f) would kill the process with SIGXFSZ, silently and leaving
  // a named temp file: ignored, the write fails with EFBIG and the writer reports it.
  ::signal(SIGXFSZ, SIG_IGN);
  struct sigaction bus {};
  sigemptyset(&bus.sa_mask);
  bus.sa_flags = SA_SIGINFO;
  bus.sa_sigaction = on_bus_error;
  ::sigaction(SIGBUS, &bus, nullptr);
}

// The report a script reads must not be silently cut short (a full disk, a closed stdout):
// true if everything written to stdout reached it.
bool stdout_complete(std::string_view tool) {
  errno = 0;
  if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return true;
  const int err = errno;
  eprint("{}: error: cannot write to standard output{}\n", tool,
         err ? fmt::format(": {}", errno_text(err)) : std::string());
  return false;
}

}  // namespace

namespace {

bool g_json_printed = false;
// Whether --json was given, as the parsed command line says (unset until it is parsed).
std::optional<bool> g_json_option;

// When the command line could not be parsed: whether an argument is --json; options end at
// "--".
bool json_in_argv(int argc, char** argv) {
  for (int i = 1; i < argc && argv[i]; ++i) {
    const std::string_view a = argv[i];
    if (a == "--") return false;
    if (a == "--json") return true;
  }
  return false;
}

// The failure's message on stderr (and, with --json, as a document on stdout); returns code.
struct Failure {
  std::string_view tool;
  int argc;
  char** argv;
  int report(int code, std::string_view message, bool usage) const {
    // The message's untrusted parts are escaped where it is made; this catches any that were not.
    eprint("{}: error: {}\n", tool, terminal_safe(message));
    if (usage) eprint("Try '{} --help' for more information.\n", tool);
    if (g_json_option.value_or(json_in_argv(argc, argv)) && !g_json_printed) {
      // The message as on stderr (already escaped for a terminal), kept valid UTF-8.
      const nlohmann::json doc = {{"error", message_for_json(message)}, {"exit_code", code}};
      const std::string text = dump_json(doc, 2) + "\n";
      // A stdout that cannot take it changes nothing: the error is on stderr already.
      if (std::fwrite(text.data(), 1, text.size(), stdout) == text.size()) std::fflush(stdout);
    }
    return code;
  }
};

}  // namespace

void json_document_printed() { g_json_printed = true; }

int run_tool(std::string_view tool, int argc, char** argv, const std::function<int()>& body,
             int failure_code) {
  install_signal_handlers(tool, failure_code);
  const Failure fail{tool, argc, argv};
  try {
    const int code = body();
    return stdout_complete(tool) ? code : failure_code;
  } catch (const std::system_error& e) {
    // fmt::print's failure; the tools print to stdout and stderr only.
    if (std::string_view(e.what()).starts_with("cannot write to file")) {
      eprint("{}: error: cannot write to standard output: {}\n", tool,
             errno_text(e.code().value()));
      return failure_code;
    }
    return fail.report(failure_code, e.what(), false);
  } catch (const Error& e) {
    const bool usage = e.kind() == Error::Kind::kUsage;
    return fail.report(usage ? 2 : failure_code, e.what(), usage);
  } catch (const po::error& e) {
    return fail.report(2, e.what(), true);
  } catch (const std::bad_alloc&) {
    return fail.report(failure_code, "out of memory", false);
  } catch (const std::exception& e) {
    return fail.report(failure_code, e.what(), false);
  }
}

namespace {

// An empty path, type or pattern is a mistake (often an unset shell variable: --imatrix "$IM"),
// never a way to leave an option out: without this check --imatrix '' ran with no importance
// matrix and --split-max-size '' wrote one file, silently.
void refuse_empty_values(const po::variables_map& vm, const po::options_description& all,
                         const po::options_description& hidden) {
  for (const auto& [name, value] : vm) {
    // A flag without a value (--dry-run) holds an empty string.
    const auto* option = all.find_nothrow(name, false);
    if (!option || option->semantic()->max_tokens() == 0) continue;
    bool empty = false;
    if (const auto* s = boost::any_cast<std::string>(&value.value()))
      empty = s->empty();
    else if (const auto* v = boost::any_cast<std::vector<std::string>>(&value.value()))
      empty = std::any_of(v->begin(), v->end(), [](const std::string& x) { return x.empty(); });
    if (!empty) continue;
    // The hidden options are what the positional arguments fill.
    if (hidden.find_nothrow(name, false))
      usage_error("an empty argument where a file name belongs");
    usage_error(fmt::format("option '--{}' was given an empty value", name));
  }
}

}  // namespace

bool parse_command_line(int argc, char** argv, std::string_view tool, std::string_view usage,
                        const po::options_description& visible,
                        const po::options_description& hidden,
                        const po::positional_options_description& positional,
                        po::variables_map& vm) {
  po::options_description all;
  all.add(visible).add(hidden);
  // Long options are taken only as spelled: no unique-prefix guessing (--no for --no-verify),
  // which would change meaning whenever an option is added.
  namespace style = po::command_line_style;
  po::store(po::command_line_parser(argc, argv)
                .options(all)
                .positional(positional)
                .style(style::default_style & ~style::allow_guessing)
                .run(),
            vm);
  // A switch (bool_switch) is present with its default; an option without a value only when
  // given.
  g_json_option = vm.count("json") > 0 && !vm["json"].defaulted();
  if (vm.count("help")) {
    fmt::print("Usage: {} {}\n\n", tool, usage);
    std::ostringstream os;
    os << visible;
    fmt::print("{}\n", os.str());
    return true;
  }
  if (vm.count("version")) {
    fmt::print("{} (gguf-surgery) {}\n", tool, version());
    return true;
  }
  refuse_empty_values(vm, all, hidden);
  po::notify(vm);
  return false;
}

bool parse_command_line(int argc, char** argv, std::string_view tool, std::string_view usage,
                        const po::options_description& desc,
                        const po::positional_options_description& positional,
                        po::variables_map& vm) {
  return parse_command_line(argc, argv, tool, usage, desc, po::options_description(), positional,
                            vm);
}

std::vector<std::string> option_sequence(int argc, char** argv,
                                         const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") break;
    if (!arg.starts_with("--")) continue;
    const std::string_view name = arg.substr(
        2, arg.find('=') == std::string_view::npos ? std::string_view::npos : arg.find('=') - 2);
    for (const auto& n : names)
      if (name == n) out.push_back(n);
  }
  return out;
}

void check_positional(const std::vector<std::string>& args, size_t max, std::string_view hint) {
  if (args.size() <= max) return;
  usage_error(fmt::format("unexpected argument '{}'{}", escape_for_terminal(args[max]),
                          hint.empty() ? "" : fmt::format(" ({})", hint)));
}

void add_threads_option(po::options_description& desc, unsigned* threads, std::string_view what) {
  desc.add_options()("threads,j", count_value(threads, kMaxThreads, "--threads")->value_name("N"),
                     fmt::format("{} threads (default 0: all cores)", what).c_str());
}

void SelectorArgs::add_to(po::options_description& desc) {
  desc.add_options()("layers", po::value(&layers)->composing(),
                     "select layers, e.g. 37-42 or 0-2,5 (repeatable)")(
      "role", po::value(&roles)->composing(),
      "select a role: routed, routed-gate, routed-up, routed-down, shared, router, attn-proj, "
      "attn, dense-ffn, embedding, output, norm, other (repeatable or comma-separated: any "
      "of them)")("match", po::value(&matches)->composing(),
                  "select tensors whose full name matches REGEX (repeatable: any of them)");
}

Selector SelectorArgs::parse() const { return parse_selector(layers, roles, matches); }

void validate(boost::any& v, const std::vector<std::string>& values, Count*, int) {
  po::validators::check_first_occurrence(v);
  const std::string& s = po::validators::get_single_string(values);
  uint64_t n = 0;
  const bool digits = !s.empty() && s.size() <= 19 &&
                      std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits) throw po::invalid_option_value(s);
  for (char c : s) n = n * 10 + static_cast<uint64_t>(c - '0');
  v = Count{n};
}

uint64_t parse_size(std::string_view text, std::string_view option) {
  uint64_t value = 0;
  size_t i = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    if (value > (UINT64_MAX - 9) / 10)
      usage_error(fmt::format("--{}: '{}' is too large", option, text));
    value = value * 10 + static_cast<uint64_t>(text[i] - '0');
  }
  if (i == 0)
    usage_error(fmt::format("--{}: '{}' is not a size (e.g. 4G, 500M, 123456)", option, text));
  // As llama-gguf-split: K, M, G, T are powers of 1000 (50G fits a 50 GB limit per file);
  // KiB, MiB, GiB, TiB are powers of 1024. Any case: 1g is 1G, 1kb is 1KB.
  std::string suffix(text.substr(i));
  std::transform(suffix.begin(), suffix.end(), suffix.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  static constexpr std::pair<std::string_view, uint64_t> kUnits[] = {
      {"", 1},
      {"b", 1},
      {"k", 1000},
      {"kb", 1000},
      {"m", 1000 * 1000},
      {"mb", 1000 * 1000},
      {"g", 1000 * 1000 * 1000},
      {"gb", 1000 * 1000 * 1000},
      {"t", uint64_t{1000} * 1000 * 1000 * 1000},
      {"tb", uint64_t{1000} * 1000 * 1000 * 1000},
      {"kib", uint64_t{1} << 10},
      {"mib", uint64_t{1} << 20},
      {"gib", uint64_t{1} << 30},
      {"tib", uint64_t{1} << 40},
  };
  const auto unit = std::find_if(std::begin(kUnits), std::end(kUnits),
                                 [&](const auto& u) { return u.first == suffix; });
  if (unit == std::end(kUnits))
    usage_error(
        fmt::format("--{}: '{}' is not a size (e.g. 4G, 500M, 4GiB, 123456)", option, text));
  if (value > UINT64_MAX / unit->second)
    usage_error(fmt::format("--{}: '{}' is too large", option, text));
  if (value == 0)
    usage_error(fmt::format("--{}: '{}' is not a size of at least 1 byte", option, text));
  return value * unit->second;
}

namespace {
std::mutex g_progress_mutex;
int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

Progress::Progress(std::string label) : label_(std::move(label)), enabled_(isatty(2) == 1) {}

Progress::~Progress() {
  if (enabled_ && drawn_) eprint("\r\033[K");
}

void Progress::update(uint64_t done, uint64_t total) {
  if (!enabled_) return;
  std::lock_guard lock(g_progress_mutex);
  const int64_t t = now_ms();
  if (done < total && t - last_draw_ms_ < 100) return;
  last_draw_ms_ = t;
  drawn_ = true;
  const double frac = total ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
  const int width = 30;
  const int filled = static_cast<int>(frac * width);
  eprint("\r{} [{}{}] {:5.1f}% {} / {}\033[K", label_, std::string(filled, '#'),
         std::string(width - filled, '.'), frac * 100.0, human_bytes(done), human_bytes(total));
  std::fflush(stderr);
}

std::function<void(uint64_t, uint64_t)> Progress::callback() {
  return [this](uint64_t d, uint64_t t) { update(d, t); };
}

}  // namespace gguf::cli
