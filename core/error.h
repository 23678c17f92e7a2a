// core/error.h — lockstep::Error and the LS_CHECK macro.
//
// Every misuse a user can cause is reported by throwing lockstep::Error (a
// std::runtime_error) whose message names the op, the shapes/dtypes/devices
// involved and what to do. Library code never prints or exits on error.
// Read next: core/dtype.h.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace lockstep {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
// Streams every argument into one string: str("got ", 3, " dims") == "got 3 dims".
template <class... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace lockstep

// LS_CHECK(cond, parts...): throws lockstep::Error built from parts when cond is false.
#define LS_CHECK(cond, ...)                                          \
  do {                                                               \
    if (!(cond)) {                                                   \
      throw ::lockstep::Error(::lockstep::detail::str(__VA_ARGS__)); \
    }                                                                \
  } while (0)
