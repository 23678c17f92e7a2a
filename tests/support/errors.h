// tests/support/errors.h — reading the errors a test provokes: the message of
// what a call throws, and a substring check for it.
// Read before: core/error.h. Used by the failure and misuse tests
// (tests/distributed/test_*failures*.cpp, test_ddp_misuse.cpp, ...).
#pragma once

#include <exception>
#include <string>

namespace lockstep::testing {

// The message of the exception `fn` throws, or "(no error)" if it returns.
template <class F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace lockstep::testing
