// distributed/store/file_store.h — FileStore: a Store kept in one file on a file
// system every rank can see (a local disk for one host, NFS for several).
//
// § Note [FileStore log]
// The file is an append-only log of records, each
//     u8 kind ('S' set, 'D' delete) | u32 key length | key | u32 value length | value
// (lengths little-endian; a delete has an empty value). The current map is the
// log replayed from the start. Every operation opens the file afresh (so a
// FileStore made before fork() works in the children: flock belongs to the
// open file, not the process), takes flock(LOCK_SH) to read or LOCK_EX to
// read-modify-append, and replays only the bytes appended since this object's
// last look (it caches the map and the offset it reached). add() and
// compare_set() replay and append under one LOCK_EX, so they are atomic
// across processes. get() and wait() poll the file with a growing sleep
// (1 ms up to 20 ms): there is no portable change notification on shared file
// systems. The file is never shrunk; remove it when the job is done.
// Read before: distributed/store/store.h, distributed/store/hash_store.h. Read next:
// distributed/store/tcp_store.h.
#pragma once

#include <mutex>
#include <string>
#include <unordered_map>

#include "distributed/store/store.h"

namespace lockstep::distributed {

class FileStore : public Store {
 public:
  // Creates `path` if absent. Throws naming the path when it cannot be opened.
  explicit FileStore(std::string path);

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

  const std::string& path() const { return path_; }

 private:
  class Locked;  // an open, flocked file with the map brought up to date

  // Returns the keys of `keys` missing from the (refreshed) map.
  std::vector<std::string> missing(const std::vector<std::string>& keys);
  void wait_for(const std::vector<std::string>& keys, std::chrono::milliseconds timeout, const char* op);

  std::string path_;
  std::mutex mutex_;  // one operation of this object at a time (the cache below)
  std::unordered_map<std::string, Bytes> cache_;
  uint64_t offset_ = 0;  // bytes of the log replayed into cache_
};

}  // namespace lockstep::distributed
