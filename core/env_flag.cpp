// core/env_flag.cpp — env_flag and env_int: a switch or an integer from the environment.
//
// Read before: core/env_flag.h.
#include "core/env_flag.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace lockstep {

std::optional<bool> parse_flag(const char* text) {
  std::string v = text;
  std::transform(v.begin(), v.end(), v.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (v == "1" || v == "on" || v == "true") return true;
  if (v == "0" || v == "off" || v == "false") return false;
  return std::nullopt;
}

bool env_flag(const char* name, bool default_value) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') return default_value;
  if (const std::optional<bool> on = parse_flag(raw)) return *on;
  throw Error(detail::str(name, " is '", raw, "'; expected 1 / on / true or 0 / off / false (or ",
                          "unset for the default, ", default_value ? "on" : "off", ")"));
}

long long env_int(const char* name, long long default_value, long long min, long long max,
                  const char* meaning) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') return default_value;
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(raw, &end, 10);
  if (errno == 0 && end != raw && *end == '\0' && value >= min && value <= max) return value;
  throw Error(detail::str(name, "='", raw, "' is not an integer between ", min, " and ", max, " (",
                          meaning, "); unset it for the default, ", default_value));
}

}  // namespace lockstep
