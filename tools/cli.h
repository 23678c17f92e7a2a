// tools/cli.h — the command-line conventions every program in build/bin shares
// (examples, benchmarks, lockstep-run), on top of CLI11 (Debian libcli11-dev).
//
// § Note [Program command lines]
// - Every program takes --help (what it does, every option with its default and
//   its range) and --version. A program's options are added in one line each:
//     cli::Program p("bench_step", "One training step of ResNet or BERT ...");
//     p.integer("--iters", o.iters, "timed steps", 1, 1000000);
//     p.choice("--device", o.device, "where the model runs", {"cpu", "cuda"});
//     p.threads(o.threads);
//     p.parse(argc, argv);
//   and an option every program should get is one line in Program::Program.
// - Numbers are typed and whole: an integer option takes decimal digits with an
//   optional sign and nothing else ("3e1", "12abc", "0x10" are refused); a real
//   option takes a finite decimal number; both are range-checked. 0|1 options,
//   choices and comma-separated integer lists are checked the same way.
// - A bad command line prints "PROG: --flag: what is wrong" and a pointer to
//   --help on stderr and exits 2 (kUsageExit), the status of every usage error;
//   so do checks across options after parse() (Program::usage_error) and a
//   malformed launch environment (Program::environment, e.g. WORLD_SIZE=abc).
// - A failure while running prints "PROG: message" and exits 1 (cli::run).
//   Under torchrun both kinds of failure also write TORCHELASTIC_ERROR_FILE
//   (Note [TORCHELASTIC_ERROR_FILE] in distributed/error_file.h).
// - --threads T warns on stderr when T times the ranks on this machine
//   (LOCAL_WORLD_SIZE) exceeds the cores this process may run on.
// Header-only and free of lockstep's libraries: lockstep-run uses it too.
// Read before: README.md ("Command lines"). Read next: examples/train_fashion_mnist.cpp.
#pragma once

#include <sched.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "distributed/error_file.h"

#ifndef LOCKSTEP_VERSION
#define LOCKSTEP_VERSION "unknown"
#endif

namespace lockstep::cli {

using distributed::catch_fatal_signals;  // Note [TORCHELASTIC_ERROR_FILE]
using distributed::error_kind;
using distributed::write_error_file;

inline constexpr int kUsageExit = 2;  // a bad command line or launch environment
inline constexpr int64_t kNoLimit = std::numeric_limits<int64_t>::max();

// `text` as a whole decimal integer (optional sign, digits, nothing else), or nullopt.
inline std::optional<int64_t> parse_integer(std::string_view text) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

// `text` as a whole finite decimal number ("0.05", "1e-7"), or nullopt.
inline std::optional<double> parse_real(std::string_view text) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v)) {
    return std::nullopt;
  }
  return v;
}

// Cores this process may run on (its affinity mask), at least 1.
inline int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return std::max(1u, std::thread::hardware_concurrency());
}

class Program {
 public:
  Program(std::string name, const std::string& description) : name_(std::move(name)), app_(description, name_) {
    app_.option_defaults()->always_capture_default();
    app_.set_version_flag("--version", std::string("lockstep ") + LOCKSTEP_VERSION);
    app_.footer("Exit status: 0 success, 1 failure while running, 2 bad command line or launch environment.\n");
    catch_fatal_signals(name_);  // Note [TORCHELASTIC_ERROR_FILE]
  }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  const std::string& name() const { return name_; }
  CLI::App& app() { return app_; }

  // A whole decimal integer in [lo, hi] (hi = kNoLimit: no upper bound).
  template <class Int>
  CLI::Option* integer(const std::string& flags, Int& value, const std::string& help, int64_t lo,
                       int64_t hi = kNoLimit) {
    return app_.add_option(flags, value, help + " (" + integer_range(lo, hi) + ")")
        ->transform(integer_check(lo, hi))
        ->type_name("INT");
  }
  // Comma-separated whole integers, each in [lo, hi] ("--sizes 1000,10000").
  CLI::Option* integers(const std::string& flags, std::vector<int64_t>& values, const std::string& help,
                        int64_t lo, int64_t hi = kNoLimit) {
    return app_.add_option(flags, values, help + " (each " + integer_range(lo, hi) + ")")
        ->delimiter(',')
        ->transform(integer_check(lo, hi))
        ->type_name("INT,...");
  }
  // A finite decimal number in [lo, hi]; with above_lo, lo itself is refused (lr > 0).
  CLI::Option* real(const std::string& flags, double& value, const std::string& help, double lo, double hi,
                    bool above_lo = false) {
    return app_.add_option(flags, value, help + " (" + real_range(lo, hi, above_lo) + ")")
        ->check(real_check(lo, hi, above_lo))
        ->type_name("NUM");
  }
  // One of `choices`, exactly.
  CLI::Option* choice(const std::string& flags, std::string& value, const std::string& help,
                      std::vector<std::string> choices) {
    std::string list;
    for (const auto& c : choices) list += (list.empty() ? "" : "|") + c;
    auto check = CLI::Validator(
        [choices, list](std::string& text) -> std::string {
          for (const auto& c : choices) {
            if (text == c) return "";
          }
          return "'" + text + "' is not one of " + list;
        },
        "", "choice");
    return app_.add_option(flags, value, help)->check(check)->type_name(list);
  }
  // 0 or 1 (the benchmarks' switches: --sync-bn 1).
  CLI::Option* switch01(const std::string& flags, bool& value, const std::string& help) {
    auto check = CLI::Validator(
        [](std::string& text) -> std::string { return text == "0" || text == "1" ? "" : "expected 0 or 1, got '" + text + "'"; },
        "", "0|1");
    return app_.add_option(flags, value, help)->check(check)->type_name("0|1");
  }
  // Any text (a path, a name); refused when empty.
  CLI::Option* text(const std::string& flags, std::string& value, const std::string& help) {
    auto check = CLI::Validator(
        [](std::string& text) -> std::string { return text.empty() ? "needs a non-empty value" : ""; }, "", "text");
    return app_.add_option(flags, value, help)->check(check);
  }
  // A flag without a value.
  CLI::Option* flag(const std::string& flags, bool& value, const std::string& help) {
    return app_.add_flag(flags, value, help);
  }
  // --threads T: intra-op threads per process, in [1, 1024]; parse() warns when
  // T x LOCAL_WORLD_SIZE exceeds the available cores.
  template <class Int>
  CLI::Option* threads(Int& value) {
    threads_ = [&value] { return static_cast<int64_t>(value); };
    return integer("--threads", value, "intra-op threads per process", 1, 1024);
  }

  // Parses the command line: --help / --version print and exit 0; an error
  // prints what is wrong and exits kUsageExit.
  void parse(int argc, char** argv) {
    try {
      app_.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      if (e.get_exit_code() == 0) std::exit(app_.exit(e));
      // CLI11 says "At Most 1 required but received 2" for `--batch 5 --batch 6`.
      for (const CLI::Option* o : app_.get_options()) {
        if (o->count() > 1 && o->get_expected_max() == 1 &&
            o->get_multi_option_policy() == CLI::MultiOptionPolicy::Throw) {
          usage_error(o->get_name() + " is given " + std::to_string(o->count()) + " times; give it once");
        }
      }
      usage_error(e.what());
    }
    if (threads_) warn_about_threads(threads_());
  }

  // A usage error found after parse() (options that contradict each other).
  [[noreturn]] void usage_error(const std::string& message) const {
    std::fprintf(stderr, "%s: %s\nRun '%s --help' for the options.\n", name_.c_str(), message.c_str(),
                 name_.c_str());
    write_error_file(name_, "usage error", message);
    std::exit(kUsageExit);
  }

  // Runs f (e.g. reading WORLD_SIZE); an exception becomes a usage error (exit 2).
  template <class F>
  decltype(auto) environment(F&& f) const {
    try {
      return f();
    } catch (const std::exception& e) {
      usage_error(e.what());
    }
  }

 private:
  static std::string integer_range(int64_t lo, int64_t hi) {
    return hi == kNoLimit ? ">= " + std::to_string(lo) : "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  }
  static std::string real_range(double lo, double hi, bool above_lo) {
    return std::string(above_lo ? "> " : ">= ") + CLI::detail::to_string(lo) +
           (hi < std::numeric_limits<double>::max() ? ", <= " + CLI::detail::to_string(hi) : "");
  }
  static CLI::Validator integer_check(int64_t lo, int64_t hi) {
    const std::string range = "an integer " + integer_range(lo, hi);
    return CLI::Validator(
        [lo, hi, range](std::string& text) -> std::string {
          const std::optional<int64_t> v = parse_integer(text);
          if (!v) return "'" + text + "' is not a whole number; expected " + range;
          if (*v < lo || *v > hi) return text + " is out of range; expected " + range;
          text = std::to_string(*v);  // canonical decimal: CLI11 reads "010" as octal
          return "";
        },
        "", "integer");
  }
  static CLI::Validator real_check(double lo, double hi, bool above_lo) {
    const std::string range = "a number " + real_range(lo, hi, above_lo);
    return CLI::Validator(
        [lo, hi, above_lo, range](std::string& text) -> std::string {
          const std::optional<double> v = parse_real(text);
          if (!v) return "'" + text + "' is not a number; expected " + range;
          if (*v < lo || (above_lo && *v == lo) || *v > hi) return text + " is out of range; expected " + range;
          return "";
        },
        "", "real");
  }
  void warn_about_threads(int64_t threads) const {
    const char* local = std::getenv("LOCAL_WORLD_SIZE");
    const int64_t ranks_here = local ? parse_integer(local).value_or(1) : 1;
    const int cores = available_cores();
    if (threads * std::max<int64_t>(ranks_here, 1) <= cores) return;
    const char* local_rank = std::getenv("LOCAL_RANK");
    if (local_rank != nullptr && parse_integer(local_rank).value_or(0) != 0) return;  // one warning per machine
    std::fprintf(stderr, "%s: warning: --threads %lld%s exceeds the %d core%s this process may use; the threads "
                 "will compete for cores and run slower, not faster\n", name_.c_str(), static_cast<long long>(threads),
                 ranks_here > 1 ? (" x " + std::to_string(ranks_here) + " ranks").c_str() : "", cores,
                 cores == 1 ? "" : "s");
  }

  std::string name_;
  CLI::App app_;
  std::function<int64_t()> threads_;
};

// Runs body() and returns its status; an exception escaping it prints
// "PROG: what" on stderr and gives exit status 1 (never std::terminate).
inline int run(const std::string& name, const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), e.what());
    std::fflush(stdout);
    write_error_file(name, error_kind(e), e.what());
    return 1;
  }
}

}  // namespace lockstep::cli
