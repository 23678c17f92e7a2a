// core/native/dispatch_verbose.cpp — reads LOCKSTEP_VERBOSE once and prints the
// dispatch lines of Note [Kernel dispatch].
// Read before: core/native/dispatch_verbose.h. Read next: core/native/conv_dispatch.cpp.
#include "core/native/dispatch_verbose.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace lockstep::native {

namespace {

// Whether the comma-separated list `value` names "dispatch"; throws for an unknown word.
bool parse_verbose(std::string_view value) {
  bool dispatch = false;
  while (!value.empty()) {
    const size_t comma = value.find(',');
    const std::string_view word = value.substr(0, comma);
    value = comma == std::string_view::npos ? std::string_view() : value.substr(comma + 1);
    if (word == "dispatch" || word == "all") {
      dispatch = true;
    } else if (!word.empty() && word != "0" && word != "none") {
      throw Error(lockstep::detail::str(
          "LOCKSTEP_VERBOSE: unknown value '", word,
          "'; accepted: 'dispatch' (one line on stderr per kernel choice), 'all', '0' or 'none', "
          "or a comma-separated list of them"));
    }
  }
  return dispatch;
}

}  // namespace

bool dispatch_verbose_from_env() {
  const char* value = std::getenv("LOCKSTEP_VERBOSE");
  return value != nullptr && parse_verbose(value);
}

namespace {
// -1 until the environment is read (two threads reading it at once store the same value).
std::atomic<int> g_dispatch_verbose{-1};
}  // namespace

bool dispatch_verbose() {
  int state = g_dispatch_verbose.load(std::memory_order_relaxed);
  if (state < 0) {
    state = dispatch_verbose_from_env() ? 1 : 0;
    g_dispatch_verbose.store(state, std::memory_order_relaxed);
  }
  return state == 1;
}

void set_dispatch_verbose(bool on) { g_dispatch_verbose.store(on ? 1 : 0); }

void log_dispatch(std::string_view family, std::string_view impl, ScalarType dtype,
                  std::string_view shapes) {
  // One write per line, so lines from threads choosing at once do not interleave.
  const std::string line = lockstep::detail::str("lockstep_verbose,dispatch,", family, ",", impl,
                                                 ",", dtype_name(dtype), ",", shapes, "\n");
  std::fputs(line.c_str(), stderr);
}

}  // namespace lockstep::native
