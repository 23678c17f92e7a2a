// nn/ordered_dict.h — OrderedDict: what named_parameters(), named_buffers(),
// named_children() and named_modules() return.
//
// A list of (name, value) items in registration order, with libtorch's item
// spellings and lookup by name:
//   for (const auto& p : net->named_parameters()) use(p.key(), p.value());
//   for (const auto& [name, t] : net->named_parameters()) use(name, t);   // also works
//   net->named_parameters()["fc1.weight"];                                 // throws if absent
// It is a std::vector of items (index, size, push_back, iterate), so code
// written against the earlier std::vector<std::pair<...>> keeps compiling, and
// it converts to that type. Lookup by key is a linear scan: a model has a few
// hundred names and these lists are built once per call, not per element.
// Read before: nn/module.h. Read next: nn/module_holder.h.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace lockstep::nn {

// One (name, value) entry: a std::pair with libtorch's key() / value().
template <class V>
struct OrderedDictItem : std::pair<std::string, V> {
  using std::pair<std::string, V>::pair;
  OrderedDictItem(std::pair<std::string, V> p) : std::pair<std::string, V>(std::move(p)) {}
  const std::string& key() const { return this->first; }
  V& value() { return this->second; }
  const V& value() const { return this->second; }
  V& operator*() { return this->second; }
  const V& operator*() const { return this->second; }
  V* operator->() { return &this->second; }
  const V* operator->() const { return &this->second; }
};

template <class V>
class OrderedDict : public std::vector<OrderedDictItem<V>> {
 public:
  using Item = OrderedDictItem<V>;
  using Base = std::vector<Item>;
  using Base::Base;
  using Base::operator[];
  OrderedDict() = default;
  OrderedDict(const std::vector<std::pair<std::string, V>>& items) : Base(items.begin(), items.end()) {}

  // The value named `key`, or nullptr.
  const V* find(const std::string& key) const {
    for (const Item& item : *this) {
      if (item.first == key) return &item.second;
    }
    return nullptr;
  }
  V* find(const std::string& key) {
    return const_cast<V*>(static_cast<const OrderedDict&>(*this).find(key));
  }
  bool contains(const std::string& key) const { return find(key) != nullptr; }
  bool is_empty() const { return this->empty(); }
  // named["fc.weight"]; named[0] is still the first item (vector's overload).
  const V& operator[](const std::string& key) const { return at_key(key); }
  V& operator[](const std::string& key) {
    return const_cast<V&>(static_cast<const OrderedDict&>(*this).at_key(key));
  }

  std::vector<std::string> keys() const {
    std::vector<std::string> out;
    out.reserve(this->size());
    for (const Item& item : *this) out.push_back(item.first);
    return out;
  }
  std::vector<V> values() const {
    std::vector<V> out;
    out.reserve(this->size());
    for (const Item& item : *this) out.push_back(item.second);
    return out;
  }
  const Base& items() const { return *this; }

  operator std::vector<std::pair<std::string, V>>() const {
    return std::vector<std::pair<std::string, V>>(this->begin(), this->end());
  }

 private:
  const V& at_key(const std::string& key) const {
    const V* v = find(key);
    if (v == nullptr) {
      std::string known;
      for (size_t i = 0; i < this->size() && i < 8; ++i) known += (i ? ", " : "") + (*this)[i].first;
      if (this->size() > 8) known += ", ...";
      throw Error("OrderedDict: no key '" + key + "' (keys: " + (known.empty() ? "none" : known) +
                  "); use find(key) or contains(key) to test for a key");
    }
    return *v;
  }
};

}  // namespace lockstep::nn
