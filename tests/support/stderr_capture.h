// tests/support/stderr_capture.h — what a piece of code writes to this process's
// stderr (file descriptor 2), for tests of log lines.
// Read before: nothing. Used by tests/core/test_dispatch_verbose.cpp and
// tests/distributed/test_ddp_debug.cpp.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <string>

#include <doctest/doctest.h>

namespace lockstep::testing {

// Runs fn with file descriptor 2 going to a temporary file; returns what was written
// (also when fn throws, after which stderr is restored and the exception goes on).
template <class F>
std::string stderr_of(F&& fn) {
  std::fflush(stderr);
  FILE* capture = std::tmpfile();
  REQUIRE(capture != nullptr);
  const int saved = dup(2);
  dup2(fileno(capture), 2);
  auto restore = [&] {
    std::fflush(stderr);
    dup2(saved, 2);
    close(saved);
  };
  try {
    fn();
  } catch (...) {
    restore();
    std::fclose(capture);
    throw;
  }
  restore();
  std::string out;
  std::rewind(capture);
  for (int c = std::fgetc(capture); c != EOF; c = std::fgetc(capture)) out += static_cast<char>(c);
  std::fclose(capture);
  return out;
}

}  // namespace lockstep::testing
