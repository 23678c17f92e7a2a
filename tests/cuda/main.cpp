// tests/cuda/main.cpp — the doctest main of test_cuda, the CUDA backend's tests
// (label gpu).
//
// § Note [Skipping gpu tests]
// Without a visible CUDA device every test of test_cuda must be reported by CTest
// as Skipped, not Passed (a pass would claim the GPU code was checked). So
// before running any test this main asks ls::cuda::is_available(); if it is
// false it prints "skipped: no CUDA device (...)" and exits with 77, which
// tests/CMakeLists.txt declares as each test's SKIP_RETURN_CODE. Listing the
// tests (doctest_discover_tests runs `test_cuda --list-test-cases` at build
// time) works without a GPU, so the tests are registered on any machine.
// Read before: tests/support/main.cpp. Read next: tests/cuda/test_cuda_core.cpp.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include "core/device.h"

int main(int argc, char** argv) {
  bool only_listing = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--list", 0) == 0 || arg.rfind("-l", 0) == 0 || arg.rfind("--count", 0) == 0 ||
        arg == "-c" || arg == "--help" || arg == "-h" || arg == "-?" || arg == "--version" ||
        arg == "-v") {
      only_listing = true;
    }
  }
  if (!only_listing && !lockstep::cuda::is_available()) {
    std::printf("skipped: no CUDA device (ls::cuda::is_available() is false: no NVIDIA GPU or "
                "driver is visible to this process)\n");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
