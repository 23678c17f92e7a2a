// distributed/store/prefix_store.h — PrefixStore: a namespace inside another Store.
//
// PrefixStore("pg1", base) turns key "k" into "pg1/k" on `base`, so several
// process groups (or a round-robin group's K members) can share one TCPStore
// without their keys colliding. Timeouts start as the base store's; num_keys()
// counts the whole base store (stores cannot list keys by prefix).
// Read before: distributed/store/store.h. Read next: distributed/rendezvous.h.
#pragma once

#include <memory>
#include <string>

#include "distributed/store/store.h"

namespace lockstep::distributed {

class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);

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

  const std::string& prefix() const { return prefix_; }
  const std::shared_ptr<Store>& base() const { return base_; }

 private:
  std::string key(const std::string& k) const { return prefix_ + "/" + k; }
  std::vector<std::string> keys(const std::vector<std::string>& ks) const;

  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace lockstep::distributed
