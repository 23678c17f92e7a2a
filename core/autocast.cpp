// core/autocast.cpp — the per-thread autocast state and the cast cache.
//
// The cache maps a parameter's TensorImpl to its converted copy. It holds the
// source alive (a shared_ptr), so an address cannot be reused by another tensor
// while the entry exists, and it records the storage version at conversion
// time: an in-place update of the parameter (an optimizer step inside the
// guard) makes the next use convert again.
// Read before: core/autocast.h.
#include "core/autocast.h"

#include <memory>
#include <unordered_map>

#include "core/native/native.h"

namespace lockstep {

namespace {

struct CacheEntry {
  std::shared_ptr<TensorImpl> source;  // keeps the key's address unique
  uint64_t version = 0;
  Tensor cast;
};

struct AutocastState {
  bool enabled = false;
  ScalarType dtype = kBFloat16;
  int enabled_depth = 0;  // enabled guards alive; the cache dies with the last
  std::unordered_map<const TensorImpl*, CacheEntry> cache;
  std::unordered_map<const TensorImpl*, CacheEntry> transposed;  // cached_cast_transposed's copies
};

AutocastState& state() {
  thread_local AutocastState s;
  return s;
}

uint64_t version_of(const Tensor& t) { return t.impl()->storage->version(); }

}  // namespace

AutocastGuard::AutocastGuard(ScalarType dtype, bool enabled)
    : previous_enabled_(state().enabled), previous_dtype_(state().dtype), counted_(enabled) {
  LS_CHECK(dtype == kBFloat16, "AutocastGuard: autocast computes in ls::kBFloat16 only, but ",
           dtype_name(dtype), " was asked for; use AutocastGuard(ls::kBFloat16)");
  AutocastState& s = state();
  s.enabled = enabled;
  s.dtype = dtype;
  if (enabled) ++s.enabled_depth;
}

AutocastGuard::~AutocastGuard() {
  AutocastState& s = state();
  s.enabled = previous_enabled_;
  s.dtype = previous_dtype_;
  if (counted_ && --s.enabled_depth == 0) {
    s.cache.clear();
    s.transposed.clear();
  }
}

bool is_autocast_enabled() { return state().enabled; }
ScalarType autocast_dtype() { return state().dtype; }

namespace autocast {

bool needs_cast(const Tensor& t, ScalarType dtype) {
  return t.defined() && t.is_floating_point() && t.dtype() != dtype && t.dtype() != kFloat64;
}

Tensor cached_cast(const Tensor& t, ScalarType dtype) {
  if (!t.defined() || t.dtype() == dtype) return t;
  AutocastState& s = state();
  const bool cacheable = s.enabled_depth > 0 && t.is_leaf() && t.requires_grad();
  if (!cacheable) return native::to_dtype(t, dtype);
  auto it = s.cache.find(t.impl());
  if (it != s.cache.end() && it->second.version == version_of(t) &&
      it->second.cast.dtype() == dtype && it->second.cast.sizes() == t.sizes()) {
    return it->second.cast;
  }
  Tensor cast = native::to_dtype(t, dtype);
  s.cache[t.impl()] = CacheEntry{t.impl_ptr(), version_of(t), cast};
  return cast;
}

Tensor cached_cast_transposed(const Tensor& t, ScalarType dtype) {
  LS_CHECK(t.defined() && t.dim() == 2, "cached_cast_transposed: expected a 2-d tensor, got ",
           t.defined() ? t.shape_str() : std::string("an undefined tensor"));
  AutocastState& s = state();
  const bool cacheable = s.enabled_depth > 0 && t.is_leaf() && t.requires_grad();
  auto fresh = [&] { return native::contiguous(native::transpose(cached_cast(t, dtype), 0, 1)); };
  if (!cacheable) return fresh();
  auto it = s.transposed.find(t.impl());
  if (it != s.transposed.end() && it->second.version == version_of(t) && it->second.cast.dtype() == dtype &&
      it->second.cast.size(0) == t.size(1) && it->second.cast.size(1) == t.size(0)) {
    return it->second.cast;
  }
  Tensor cast = fresh();
  s.transposed[t.impl()] = CacheEntry{t.impl_ptr(), version_of(t), cast};
  return cast;
}

size_t cache_size() { return state().cache.size(); }

}  // namespace autocast

}  // namespace lockstep
