// distributed/store/hash_store.h — HashStore: a Store inside one process.
//
// A map guarded by a mutex; get() and wait() sleep on a condition variable
// that every write notifies, so threads of one process can rendezvous through
// it (tests, ProcessGroups over threads). It does not cross fork(): for
// several processes use FileStore or TCPStore.
// Read before: distributed/store/store.h. Read next: distributed/store/file_store.h.
#pragma once

#include <condition_variable>
#include <mutex>
#include <unordered_map>

#include "distributed/store/store.h"

namespace lockstep::distributed {

class HashStore : public Store {
 public:
  HashStore() = default;

  using Store::set;
  using Store::wait;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;

 private:
  // Waits (lock held) until all keys exist; throws naming the missing ones.
  void wait_locked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                   std::chrono::milliseconds timeout, const char* op);

  std::mutex mutex_;
  std::condition_variable changed_;
  std::unordered_map<std::string, Bytes> map_;
};

}  // namespace lockstep::distributed
