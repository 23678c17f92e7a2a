// tests/support/skip.h — the skip protocol inside a doctest binary: a test case
// that needs something the machine may lack (a data set, a Python module).
//
// § Note [Skipping a test case]
// CTest counts a test as skipped only when it exits with the code its
// SKIP_RETURN_CODE names (77 in this project); a test case that returns early
// is counted as passed, claiming checks that never ran. So a case that depends
// on something absent on some machines is declared with `* doctest::skip()`
// (left out of the binary's default run and of doctest_discover_tests' list),
// registered on its own by lockstep_add_skippable_case in tests/CMakeLists.txt
// (run with --no-skip, SKIP_RETURN_CODE 77), and calls skip_test(why) first
// thing when what it needs is missing: that prints "skipped: why" and exits 77,
// so the case is either run in full or reported as skipped. The GPU tests do
// the same for the whole binary (Note [Skipping gpu tests], tests/cuda/main.cpp).
//
// Read before: tests/support/main.cpp. Used by: tests/data/test_fashion_mnist.cpp,
// tests/distributed/test_timeline.cpp.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

namespace lockstep::testing {

// The code CTest's SKIP_RETURN_CODE names for every skippable test.
constexpr int kSkipReturnCode = 77;

// Reports why the running test case cannot run and exits with kSkipReturnCode.
[[noreturn]] inline void skip_test(const std::string& why) {
  std::printf("skipped: %s\n", why.c_str());
  std::fflush(stdout);
  std::_Exit(kSkipReturnCode);
}

}  // namespace lockstep::testing
