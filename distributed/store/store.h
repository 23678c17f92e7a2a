// distributed/store/store.h — a key-value store every rank can reach: how ranks find
// each other (rendezvous) and exchange small facts (addresses, ids, flags).
//
// Implementations: TCPStore (server on rank 0 at MASTER_ADDR:MASTER_PORT),
// FileStore (a file on a shared file system), HashStore (in-process, tests),
// PrefixStore (namespaces keys of another store). Values are bytes. get() and
// wait() block until the keys exist or the timeout passes; on timeout they
// throw ls::Error naming the keys still missing.
// Read before: core/error.h. Read next: distributed/store/tcp_store.h,
// distributed/process_group/process_group.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::distributed {

using Bytes = std::vector<uint8_t>;

class Store {
 public:
  static constexpr std::chrono::milliseconds kDefaultTimeout{300000};  // 300 s

  virtual ~Store() = default;
  virtual void set(const std::string& key, const Bytes& value) = 0;
  // Blocks until `key` exists (or the timeout passes), then returns its value.
  virtual Bytes get(const std::string& key) = 0;
  // Atomically adds `delta` to the integer stored at key (0 if absent); returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Sets key to `desired` if its current value is `expected` (or if it is absent
  // and `expected` is empty); returns the value now stored.
  virtual Bytes compare_set(const std::string& key, const Bytes& expected,
                            const Bytes& desired) = 0;
  // Blocks until every key exists; throws after `timeout` naming the missing ones.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }
  virtual bool check(const std::vector<std::string>& keys) = 0;  // all exist, no blocking
  virtual bool delete_key(const std::string& key) = 0;           // true if it existed
  virtual int64_t num_keys() = 0;

  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }

  // Conveniences for string values.
  void set(const std::string& key, const std::string& value) { set(key, Bytes(value.begin(), value.end())); }
  std::string get_string(const std::string& key) {
    Bytes b = get(key);
    return std::string(b.begin(), b.end());
  }

 protected:
  std::chrono::milliseconds timeout_ = kDefaultTimeout;
};

}  // namespace lockstep::distributed
