// tests/core/test_env_flag.cpp — env_flag and env_int (core/env_flag.h): the default
// when unset or empty, the spellings of on and off, whole numbers in range, and an
// Error naming the variable for anything else.
#include <doctest/doctest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

#include "core/env_flag.h"
#include "core/error.h"

namespace ls = lockstep;

namespace {
constexpr const char* kVar = "LOCKSTEP_TEST_ENV_FLAG";
}  // namespace

TEST_CASE("env_flag: unset or empty gives the default") {
  ::unsetenv(kVar);
  CHECK(ls::env_flag(kVar, true));
  CHECK_FALSE(ls::env_flag(kVar, false));
  ::setenv(kVar, "", 1);
  CHECK(ls::env_flag(kVar, true));
  CHECK_FALSE(ls::env_flag(kVar, false));
  ::unsetenv(kVar);
}

TEST_CASE("env_flag: on and off in any case") {
  for (const char* on : {"1", "on", "ON", "true", "True"}) {
    ::setenv(kVar, on, 1);
    CHECK_MESSAGE(ls::env_flag(kVar, false), on);
  }
  for (const char* off : {"0", "off", "Off", "false", "FALSE"}) {
    ::setenv(kVar, off, 1);
    CHECK_FALSE_MESSAGE(ls::env_flag(kVar, true), off);
  }
  ::unsetenv(kVar);
}

TEST_CASE("env_flag: any other value is an error naming the variable and the choices") {
  ::setenv(kVar, "yes please", 1);
  try {
    (void)ls::env_flag(kVar, true);
    FAIL("no error for 'yes please'");
  } catch (const ls::Error& e) {
    const std::string msg = e.what();
    CHECK(msg.find(kVar) != std::string::npos);
    CHECK(msg.find("'yes please'") != std::string::npos);
    CHECK(msg.find("0 / off / false") != std::string::npos);
  }
  ::unsetenv(kVar);
}

TEST_CASE("env_int: the default when unset or empty, whole numbers at and inside the range") {
  ::unsetenv(kVar);
  CHECK(ls::env_int(kVar, 50, 0, 100, "what") == 50);
  ::setenv(kVar, "", 1);
  CHECK(ls::env_int(kVar, 50, 0, 100, "what") == 50);
  for (const auto& [text, value] : {std::pair{"0", 0LL}, {"100", 100LL}, {"7", 7LL}, {"+7", 7LL}}) {
    ::setenv(kVar, text, 1);
    CHECK_MESSAGE(ls::env_int(kVar, 50, 0, 100, "what") == value, text);
  }
  ::unsetenv(kVar);
}

TEST_CASE("env_int: letters, a sign out of range, digits past the range or past long long are errors") {
  // LOCKSTEP_CPU_CACHE_MB=-5 used to wrap to an unbounded cache, LOCKSTEP_SHM_SPIN_US=abc to 0.
  for (const char* bad : {"abc", "-5", "101", "12abc", "99999999999999999999", "1e3"}) {
    ::setenv(kVar, bad, 1);
    try {
      (void)ls::env_int(kVar, 50, 0, 100, "microseconds of something");
      FAIL("no error for '", bad, "'");
    } catch (const ls::Error& e) {
      const std::string msg = e.what();
      CHECK_MESSAGE(msg.find(std::string(kVar) + "='" + bad + "' is not an integer between 0 and 100") !=
                        std::string::npos, msg);
      CHECK_MESSAGE(msg.find("(microseconds of something); unset it for the default, 50") != std::string::npos, msg);
    }
  }
  ::unsetenv(kVar);
}

TEST_CASE("parse_flag: the same spellings as env_flag, nothing for anything else") {
  for (const char* on : {"1", "on", "TRUE"}) CHECK_MESSAGE(ls::parse_flag(on) == std::optional<bool>(true), on);
  for (const char* off : {"0", "Off", "false"}) CHECK_MESSAGE(ls::parse_flag(off) == std::optional<bool>(false), off);
  for (const char* bad : {"", "2", "yes", "offf"}) CHECK_MESSAGE(!ls::parse_flag(bad).has_value(), bad);
}
