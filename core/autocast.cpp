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
#include <mutex>
#include <unordered_map>

#include "core/autocast_offer.h"
#include "core/env_flag.h"

#include "core/native/native.h"
#include "core/profiler.h"

namespace lockstep {

namespace {

struct CacheEntry {
  std::shared_ptr<TensorImpl> source;  // keeps the key's address unique
  uint64_t version = 0;
  Tensor cast;
};

// Note [bf16 copies written by the op that made the activation].
struct OfferedCast {
  std::weak_ptr<TensorImpl> source;  // not kept alive: expired, the offer is stale
  uint64_t version = 0;
  Tensor cast;
};

struct AutocastState {
  bool enabled = false;
  ScalarType dtype = kBFloat16;
  int enabled_depth = 0;  // enabled guards alive; the cache dies with the last
  std::unordered_map<const TensorImpl*, CacheEntry> cache;
  std::unordered_map<const TensorImpl*, CacheEntry> transposed;  // cached_cast_transposed's copies
  std::unordered_map<const TensorImpl*, OfferedCast> offered;    // offer_cast's copies
};

AutocastState& state() {
  thread_local AutocastState s;
  return s;
}

uint64_t version_of(const Tensor& t) { return t.impl()->storage->version(); }

// Note [bf16 copies written by the optimizer]: one copy per parameter, for all threads.
struct KeptCast {
  std::weak_ptr<TensorImpl> source;  // expired: the parameter is gone, the entry is stale
  uint64_t version = 0;
  bool valid = false;  // false between kept_cast_to_write and kept_cast_written
  Tensor cast;
};

struct KeptCasts {
  std::mutex mutex;
  std::unordered_map<const TensorImpl*, KeptCast> map;
};

KeptCasts& kept() {
  static KeptCasts* k = new KeptCasts();  // never destroyed: used from exit-time code
  return *k;
}

bool keep_casts() {
  static const bool on = env_flag("LOCKSTEP_BF16_KEEP_CASTS", true);
  return on;
}

// The entry of `t` when it is t's own (not a dead tensor's at the same address).
KeptCast* kept_entry(const Tensor& t) {
  auto it = kept().map.find(t.impl());
  if (it == kept().map.end()) return nullptr;
  if (it->second.source.lock() != t.impl_ptr()) {
    kept().map.erase(it);
    return nullptr;
  }
  return &it->second;
}

// The kept copy of t in `dtype` at t's current version, or an undefined tensor.
Tensor find_kept(const Tensor& t, ScalarType dtype) {
  if (!keep_casts()) return Tensor();
  std::lock_guard<std::mutex> lock(kept().mutex);
  const KeptCast* e = kept_entry(t);
  if (e == nullptr || !e->valid || e->version != version_of(t) || e->cast.dtype() != dtype ||
      e->cast.sizes() != t.sizes()) {
    return Tensor();
  }
  return e->cast;
}

void keep(const Tensor& t, const Tensor& cast) {
  if (!keep_casts() || !t.device().is_cpu()) return;
  std::lock_guard<std::mutex> lock(kept().mutex);
  if (kept().map.size() > 64 && kept_entry(t) == nullptr) {  // drop dead parameters' copies
    std::erase_if(kept().map, [](const auto& e) { return e.second.source.expired(); });
  }
  kept().map[t.impl()] = KeptCast{t.impl_ptr(), version_of(t), true, cast};
}

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
    s.offered.clear();
  }
}

bool is_autocast_enabled() { return state().enabled; }
ScalarType autocast_dtype() { return state().dtype; }

namespace autocast {

bool needs_cast(const Tensor& t, ScalarType dtype) {
  return t.defined() && t.is_floating_point() && t.dtype() != dtype && t.dtype() != kFloat64;
}

// A conversion as its own profiler row: a pass over memory, not part of the op
// that asked for it (Note [Profiler bytes] in core/profiler.h).
Tensor counted_cast(const Tensor& t, ScalarType dtype) {
  profiler::Scope prof("autocast.cast");
  Tensor cast = native::to_dtype(t, dtype);
  profiler::add_bytes(static_cast<int64_t>(t.nbytes() + cast.nbytes()));
  return cast;
}

// The copy offered for t in `dtype`, taken (the offer is used up), or an undefined tensor.
Tensor take_offered(AutocastState& s, const Tensor& t, ScalarType dtype) {
  if (s.offered.empty()) return Tensor();
  auto it = s.offered.find(t.impl());
  if (it == s.offered.end()) return Tensor();
  OfferedCast e = std::move(it->second);
  s.offered.erase(it);
  const bool same = e.source.lock() == t.impl_ptr() && e.version == version_of(t) &&
                    e.cast.dtype() == dtype && e.cast.sizes() == t.sizes();
  return same ? e.cast : Tensor();
}

void offer_cast(const Tensor& t, const Tensor& cast) {
  AutocastState& s = state();
  if (s.enabled_depth == 0 || !t.defined() || !cast.defined()) return;
  if (s.offered.size() > 64) {  // drop the offers of tensors that died untaken
    std::erase_if(s.offered, [](const auto& e) { return e.second.source.expired(); });
  }
  s.offered[t.impl()] = OfferedCast{t.impl_ptr(), version_of(t), cast};
}

size_t offered_cast_count() { return state().offered.size(); }

Tensor cached_cast(const Tensor& t, ScalarType dtype) {
  if (!t.defined() || t.dtype() == dtype) return t;
  AutocastState& s = state();
  const bool cacheable = s.enabled_depth > 0 && t.is_leaf() && t.requires_grad();
  if (!cacheable) {
    // An offered copy, if any: Note [bf16 copies written by the op that made the activation].
    Tensor offered = take_offered(s, t, dtype);
    return offered.defined() ? offered : counted_cast(t, dtype);
  }
  auto it = s.cache.find(t.impl());
  if (it != s.cache.end() && it->second.version == version_of(t) &&
      it->second.cast.dtype() == dtype && it->second.cast.sizes() == t.sizes()) {
    return it->second.cast;
  }
  Tensor cast = find_kept(t, dtype);  // Note [bf16 copies written by the optimizer]
  if (!cast.defined()) {
    cast = counted_cast(t, dtype);
    keep(t, cast);
  }
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

Tensor kept_cast_to_write(const Tensor& p) {
  if (!keep_casts() || !p.defined()) return Tensor();
  std::lock_guard<std::mutex> lock(kept().mutex);
  KeptCast* e = kept_entry(p);
  if (e == nullptr || e->cast.sizes() != p.sizes()) return Tensor();
  e->valid = false;
  // Written in place only when the kept entry is its one holder (Note [bf16
  // copies written by the optimizer]); otherwise a fresh buffer takes its place.
  const bool exclusive = e->cast.impl_ptr().use_count() == 1 &&
                         e->cast.impl()->storage.use_count() == 1 && e->cast.is_contiguous();
  if (!exclusive) e->cast = native::empty(p.sizes(), e->cast.dtype());
  return e->cast;
}

void kept_cast_written(const Tensor& p) {
  std::lock_guard<std::mutex> lock(kept().mutex);
  KeptCast* e = kept_entry(p);
  if (e == nullptr) return;
  e->version = version_of(p);
  e->valid = true;
}

size_t kept_cast_count() {
  std::lock_guard<std::mutex> lock(kept().mutex);
  return kept().map.size();
}

}  // namespace autocast

}  // namespace lockstep
