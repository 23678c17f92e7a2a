// distributed/store/prefix_store.cpp — PrefixStore: every key gets "<prefix>/".
// Read before: distributed/store/prefix_store.h.
#include "distributed/store/prefix_store.h"

#include "core/error.h"

namespace lockstep::distributed {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), base_(std::move(base)) {
  LS_CHECK(base_ != nullptr, "PrefixStore('", prefix_, "'): the base store is null");
  timeout_ = base_->timeout();
}

std::vector<std::string> PrefixStore::keys(const std::vector<std::string>& ks) const {
  std::vector<std::string> out;
  out.reserve(ks.size());
  for (const auto& k : ks) out.push_back(key(k));
  return out;
}

void PrefixStore::set(const std::string& k, const Bytes& value) { base_->set(key(k), value); }

Bytes PrefixStore::get(const std::string& k) {
  // Store::get has no timeout argument: wait with ours, then read.
  base_->wait({key(k)}, timeout_);
  return base_->get(key(k));
}

int64_t PrefixStore::add(const std::string& k, int64_t delta) { return base_->add(key(k), delta); }

Bytes PrefixStore::compare_set(const std::string& k, const Bytes& expected, const Bytes& desired) {
  return base_->compare_set(key(k), expected, desired);
}

void PrefixStore::wait(const std::vector<std::string>& ks, std::chrono::milliseconds timeout) {
  base_->wait(keys(ks), timeout);
}

bool PrefixStore::check(const std::vector<std::string>& ks) { return base_->check(keys(ks)); }

bool PrefixStore::delete_key(const std::string& k) { return base_->delete_key(key(k)); }

int64_t PrefixStore::num_keys() { return base_->num_keys(); }

}  // namespace lockstep::distributed
