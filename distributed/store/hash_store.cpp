// distributed/store/hash_store.cpp — HashStore: an unordered_map, a mutex and a
// condition variable notified on every write.
// Read before: distributed/store/hash_store.h.
#include "distributed/store/hash_store.h"

#include "distributed/store/store_util.h"

namespace lockstep::distributed {

void HashStore::set(const std::string& key, const Bytes& value) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    map_[key] = value;
  }
  changed_.notify_all();
}

Bytes HashStore::get(const std::string& key) {
  std::unique_lock<std::mutex> lock(mutex_);
  wait_locked(lock, {key}, timeout_, "get");
  return map_.at(key);
}

int64_t HashStore::add(const std::string& key, int64_t delta) {
  int64_t value = delta;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = map_.find(key);
    if (it != map_.end()) value += store_util::parse_counter("HashStore", key, it->second);
    map_[key] = store_util::format_counter(value);
  }
  changed_.notify_all();
  return value;
}

Bytes HashStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  Bytes now;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = map_.find(key);
    if (it == map_.end()) {
      if (!expected.empty()) return expected;  // absent and not expected absent: nothing stored
      map_[key] = desired;
      now = desired;
    } else if (it->second == expected) {
      it->second = desired;
      now = desired;
    } else {
      return it->second;
    }
  }
  changed_.notify_all();
  return now;
}

void HashStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  wait_locked(lock, keys, timeout, "wait");
}

void HashStore::wait_locked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                            std::chrono::milliseconds timeout, const char* op) {
  auto all_present = [&] {
    for (const auto& k : keys) {
      if (map_.find(k) == map_.end()) return false;
    }
    return true;
  };
  if (changed_.wait_for(lock, timeout, all_present)) return;
  std::vector<std::string> missing;
  for (const auto& k : keys) {
    if (map_.find(k) == map_.end()) missing.push_back(k);
  }
  store_util::throw_timeout("HashStore", op, timeout, missing);
}

bool HashStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& k : keys) {
    if (map_.find(k) == map_.end()) return false;
  }
  return true;
}

bool HashStore::delete_key(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  return map_.erase(key) > 0;
}

int64_t HashStore::num_keys() {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(map_.size());
}

}  // namespace lockstep::distributed
