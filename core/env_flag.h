// core/env_flag.h — on/off switches and integer settings read from environment variables.
//
// Several fast paths can be turned off for A/B benchmarks by an environment
// variable (LOCKSTEP_BF16_DIRECT_CONV=0 and the like). env_flag reads such a
// switch once, the same way for all of them: unset or empty gives the default;
// 1 / on / true and 0 / off / false (any case) turn it on and off; any other
// value is a mistake the user should hear about, so it throws an Error naming
// the variable and the values it takes, instead of silently keeping the default.
// env_int does the same for an integer setting (LOCKSTEP_CPU_CACHE_MB and the
// like): unset or empty gives the default; anything but a whole number in its
// range (letters, a sign where none fits, digits past the range) throws.
//
// Read next: core/profiler.h (another switch read from the environment).
#pragma once

#include <optional>

namespace lockstep {

// The switch spelled `text`: true for 1 / on / true, false for 0 / off / false (any
// case), nullopt for anything else (for readers that must not throw: a switch read
// while the program starts warns instead).
std::optional<bool> parse_flag(const char* text);

// The switch `name`, or `default_value` when the variable is unset or empty.
// Throws lockstep::Error for a value that is neither on nor off.
bool env_flag(const char* name, bool default_value);

// The integer `name`, or `default_value` when the variable is unset or empty.
// Throws lockstep::Error for anything but a decimal integer in [min, max]; the
// message names the variable, the range and `meaning` (what the number is, e.g.
// "MiB kept in the CPU block cache").
long long env_int(const char* name, long long default_value, long long min, long long max,
                  const char* meaning);

}  // namespace lockstep
