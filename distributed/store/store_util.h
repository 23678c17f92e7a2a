// distributed/store/store_util.h — small pieces every Store implementation shares:
// the counter encoding used by add() and the wording of timeout errors.
//
// Counters are stored as decimal ASCII (add("n", 2) leaves "2"), as in
// PyTorch's stores, so get_string() of a counter is readable and every store
// agrees on the bytes.
// Read before: distributed/store/store.h. Read next: distributed/store/hash_store.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "distributed/store/store.h"

namespace lockstep::distributed::store_util {

inline Bytes to_bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }
inline std::string to_string(const Bytes& b) { return std::string(b.begin(), b.end()); }

// The integer held by a counter key; throws naming the store and key when the
// value is not a decimal integer (the key was set() to something else).
inline int64_t parse_counter(const char* store, const std::string& key, const Bytes& value) {
  std::string s = to_string(value);
  size_t used = 0;
  int64_t v = 0;
  bool ok = !s.empty();
  if (ok) {
    try {
      v = std::stoll(s, &used);
    } catch (const std::exception&) {
      ok = false;
    }
  }
  LS_CHECK(ok && used == s.size(), store, "::add: key '", key, "' holds '",
           s.size() > 32 ? s.substr(0, 32) + "..." : s,
           "', not an integer counter; use add() only on keys that add() created");
  return v;
}

inline Bytes format_counter(int64_t v) { return to_bytes(std::to_string(v)); }

// "a, b, c" (at most 16 keys, then "... (N more)").
inline std::string join_keys(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i == 16) {
      out += ", ... (" + std::to_string(keys.size() - 16) + " more)";
      break;
    }
    if (i > 0) out += ", ";
    out += "'" + keys[i] + "'";
  }
  return out;
}

[[noreturn]] inline void throw_timeout(const char* store, const char* op, std::chrono::milliseconds timeout,
                                       const std::vector<std::string>& missing) {
  throw Error(detail::str(store, "::", op, ": timed out after ", timeout.count(), " ms waiting for key",
                          missing.size() == 1 ? " " : "s ", join_keys(missing),
                          "; the rank that should set ", missing.size() == 1 ? "it" : "them",
                          " may be slow, dead, or using a different key (raise the timeout with "
                          "Store::set_timeout or LOCKSTEP_TIMEOUT_S)"));
}

}  // namespace lockstep::distributed::store_util
