// tests/core/test_env_flag.cpp — env_flag (core/env_flag.h): the default when
// unset or empty, the spellings of on and off, and an Error naming the variable
// for anything else.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

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
