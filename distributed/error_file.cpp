// distributed/error_file.cpp — the terminate handler of Note [TORCHELASTIC_ERROR_FILE]:
// an exception that escapes a rank's main (or one of its threads) is reported, with the
// rank, on stderr and in torchrun's error file, before the process aborts.
// Read before: distributed/error_file.h.
#include "distributed/error_file.h"

#include <errno.h>  // program_invocation_short_name (glibc)

#include <cstdio>
#include <exception>
#include <mutex>

namespace lockstep::distributed {
namespace {

std::terminate_handler g_previous = nullptr;

[[noreturn]] void on_terminate() {
  if (const std::exception_ptr current = std::current_exception()) {
    try {
      std::rethrow_exception(current);
    } catch (const std::exception& e) {
      const char* rank = std::getenv("RANK");
      const std::string program = program_invocation_short_name;
      const std::string kind = error_kind(e);
      std::fprintf(stderr, "%s%s: terminate called after an uncaught %s: %s\n", program.c_str(),
                   rank != nullptr ? (std::string(" (rank ") + rank + ")").c_str() : "", kind.c_str(), e.what());
      std::fflush(stderr);
      write_error_file(program, kind, e.what());
      // catch_fatal_signals' SIGABRT handler would replace the file with "fatal signal SIGABRT".
      ::signal(SIGABRT, SIG_DFL);
      std::abort();
    } catch (...) {
      // Not a std::exception: nothing to print beyond what the previous handler says.
    }
  }
  if (g_previous != nullptr) g_previous();
  std::abort();
}

}  // namespace

void install_terminate_handler() {
  static std::once_flag once;
  std::call_once(once, [] { g_previous = std::set_terminate(on_terminate); });
}

}  // namespace lockstep::distributed
