// distributed/process_group/shm/shm_channel.cpp — the shared-memory collectives: one Step
// per chunk (waits on the peers' counters, posts this rank's), and allreduce,
// broadcast and allgather as sequences of steps.
// Read before: distributed/process_group/shm/shm_channel.h (Note [Shared-memory
// allreduce], Note [Shared-memory waiting]), shm_layout.h.
// Read next: distributed/process_group/shm/shm_rendezvous.cpp.
#include "distributed/process_group/shm/shm_channel.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "core/env_flag.h"
#include "core/error.h"
#include "distributed/process_group/reduce_kernels.h"
#include "distributed/process_group/shm/shm_layout.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace lockstep::distributed::detail {
namespace {

using Clock = std::chrono::steady_clock;

enum class Phase { ARRIVED, REDUCED, LEFT };

const char* phase_text(Phase p) {
  switch (p) {
    case Phase::ARRIVED: return "copy in its chunk";
    case Phase::REDUCED: return "reduce its share";
    case Phase::LEFT: return "finish reading the previous chunk of this buffer";
  }
  return "?";
}

std::atomic<uint32_t>& counter(ShmRankControl& c, Phase p) {
  return p == Phase::ARRIVED ? c.arrived : p == Phase::REDUCED ? c.reduced : c.left;
}

// Counters wrap after 2^32 steps; compare as a window, like TCP sequence numbers.
bool reached(uint32_t value, uint32_t target) { return static_cast<int32_t>(value - target) >= 0; }

inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

// The counter's word, for the futex calls (std::atomic<uint32_t> is the bare word).
uint32_t* word(std::atomic<uint32_t>& a) { return reinterpret_cast<uint32_t*>(&a); }

void futex_wait(std::atomic<uint32_t>& a, uint32_t expected, std::chrono::microseconds slice) {
  timespec ts{static_cast<time_t>(slice.count() / 1000000), static_cast<long>(slice.count() % 1000000) * 1000};
  syscall(SYS_futex, word(a), FUTEX_WAIT, expected, &ts, nullptr, 0);  // shared: no FUTEX_PRIVATE_FLAG
}

void futex_wake_all(std::atomic<uint32_t>& a) { syscall(SYS_futex, word(a), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0); }

// False once `pid` has exited: gone (kill(pid, 0) needs no file descriptor, so
// a process out of them does not take its peer for dead), or a zombie waiting
// to be reaped (/proc/<pid>/stat, when it can be read).
bool process_alive(int32_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return true;  // unreadable, but kill found it
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos || paren + 2 >= text.size()) return true;
  const char state = text[paren + 2];
  return state != 'Z' && state != 'X';
}

constexpr auto kSlice = std::chrono::microseconds(50000);

// Rank q's share of n elements of `es` bytes among `size` ranks: [lo, hi), whole
// cache lines, the same on every rank (Note [Shared-memory allreduce]).
std::pair<int64_t, int64_t> share_of(int q, int size, int64_t n, size_t es) {
  const int64_t line = static_cast<int64_t>(kShmCacheLine / es);
  const int64_t per = (n + size * line - 1) / (size * line) * line;
  return {std::min(n, q * per), std::min(n, (q + 1) * per)};
}

}  // namespace

// One chunk of a collective: step number `step`, the fingerprint its ranks
// publish, and the timeout each of its waits keeps.
class ShmChannel::Step {
 public:
  Step(ShmChannel& channel, const Fingerprint& fingerprint, int64_t chunk, std::chrono::milliseconds timeout)
      : ch_(channel), step_(++channel.step_), fingerprint_(fingerprint), timeout_(timeout) {
    fingerprint_.reserved = chunk;
    // The buffer this step writes was last read at step - 2: wait until every rank is done with it.
    wait_all(Phase::LEFT, step_ - 2);
  }
  uint8_t* slot(int r) const { return ch_.slot(r, step_); }
  uint32_t number() const { return step_; }

  // Publishes this rank's chunk (its slot is filled) and waits for every rank's;
  // then checks that all ranks are in the same chunk of the same collective.
  void arrive() {
    ch_.control(ch_.rank_).fingerprint[step_ % 2] = fingerprint_;
    post(Phase::ARRIVED);
    wait_all(Phase::ARRIVED, step_);
    std::vector<Fingerprint> all(ch_.size_);
    for (int q = 0; q < ch_.size_; ++q) all[q] = ch_.control(q).fingerprint[step_ % 2];
    try {
      check_fingerprints(all.data(), ch_.size_, ch_.rank_, "gloo");
    } catch (const Error& e) {
      abort(e.what());
      throw;
    }
  }
  void post(Phase p) {
    counter(ch_.control(ch_.rank_), p).store(step_, std::memory_order_seq_cst);
    if (ch_.header().sleepers.load(std::memory_order_seq_cst) > 0) futex_wake_all(counter(ch_.control(ch_.rank_), p));
  }
  void wait_all(Phase p, uint32_t target) {
    for (int q = 0; q < ch_.size_; ++q) {
      if (q != ch_.rank_) wait_rank(q, p, target);
    }
  }
  // Gives up: every rank's next wait fails with `reason`.
  [[noreturn]] void fail(const std::string& reason) {
    abort(reason);
    throw ShmFailure(reason);
  }

 private:
  void wait_rank(int q, Phase p, uint32_t target) {
    std::atomic<uint32_t>& c = counter(ch_.control(q), p);
    if (reached(c.load(std::memory_order_acquire), target)) return;
    const auto start = Clock::now();
    for (int i = 1; ch_.spin_; ++i) {
      cpu_relax();
      if (reached(c.load(std::memory_order_acquire), target)) return;
      if (i % 64 == 0 && Clock::now() > start + ch_.spin_for_) break;
    }
    ShmHeader& h = ch_.header();
    for (;;) {
      check_peer(q, p, start);
      h.sleepers.fetch_add(1, std::memory_order_seq_cst);
      const uint32_t seen = c.load(std::memory_order_seq_cst);
      if (!reached(seen, target)) futex_wait(c, seen, kSlice);
      h.sleepers.fetch_sub(1, std::memory_order_seq_cst);
      if (reached(c.load(std::memory_order_acquire), target)) return;
    }
  }

  // Between futex slices: has the channel been aborted, has q died, has it
  // made no progress for the timeout (since this wait began, as Gloo times
  // each of its waits)?
  void check_peer(int q, Phase p, Clock::time_point since) {
    ShmHeader& h = ch_.header();
    if (h.aborted.load(std::memory_order_acquire) == 2) {
      throw ShmFailure(lockstep::detail::str("shared memory: rank ", h.aborted_by, " gave up: ", h.abort_reason));
    }
    const int32_t pid = ch_.control(q).pid;
    const std::string waiting = lockstep::detail::str("while rank ", ch_.rank_, " waited in step ", step_,
                                                      " (chunk ", fingerprint_.reserved, ") for it to ",
                                                      phase_text(p));
    if (!process_alive(pid)) fail(lockstep::detail::str("shared memory: rank ", q, " (pid ", pid, ") exited ", waiting));
    if (Clock::now() > since + timeout_) {
      fail(lockstep::detail::str("shared memory: rank ", q, " made no progress for ", timeout_.count(), " ms ",
                                 waiting, " (it is alive: it may be stuck, computing, or not issuing this collective)"));
    }
  }
  // Tells the other ranks to stop waiting (the first reason wins).
  void abort(const std::string& reason) {
    ShmHeader& h = ch_.header();
    uint32_t none = 0;
    if (!h.aborted.compare_exchange_strong(none, 1)) return;
    std::snprintf(h.abort_reason, sizeof(h.abort_reason), "%s", reason.c_str());
    h.aborted_by = ch_.rank_;
    h.aborted.store(2, std::memory_order_release);
  }

  ShmChannel& ch_;
  uint32_t step_;
  Fingerprint fingerprint_;
  std::chrono::milliseconds timeout_;
};

ShmChannel::ShmChannel(ShmSegment segment, int rank, int size, size_t slot_bytes, bool buffers)
    : segment_(std::move(segment)),
      rank_(rank),
      size_(size),
      slot_bytes_(slot_bytes),
      spin_(size <= sysconf(_SC_NPROCESSORS_ONLN)),
      spin_for_(shm_spin_from_env()) {
  if (buffers) buffers_ = std::make_unique<ShmBuffers>(rank, size, &control(0));
}

std::chrono::microseconds shm_spin_from_env() {
  return std::chrono::microseconds(env_int("LOCKSTEP_SHM_SPIN_US", 50, 0, 10'000'000,
                                           "microseconds a waiting rank spins before it sleeps"));
}

size_t ShmChannel::segment_bytes(int size, size_t slot_bytes) {
  return kShmHeaderBytes + shm_controls_bytes(size) + 2 * static_cast<size_t>(size) * slot_bytes;
}

ShmHeader& ShmChannel::header() const { return *static_cast<ShmHeader*>(segment_.data()); }

ShmRankControl& ShmChannel::control(int r) const {
  return reinterpret_cast<ShmRankControl*>(static_cast<uint8_t*>(segment_.data()) + kShmHeaderBytes)[r];
}

uint8_t* ShmChannel::slot(int r, uint32_t step) const {
  uint8_t* slots = static_cast<uint8_t*>(segment_.data()) + kShmHeaderBytes + shm_controls_bytes(size_);
  return slots + (2 * static_cast<size_t>(r) + step % 2) * slot_bytes_;
}

void ShmChannel::allreduce(void* data, int64_t numel, ScalarType dtype, ReduceOp op, const Fingerprint& fingerprint,
                           std::chrono::milliseconds timeout) {
  const ReduceFn reduce = reduce_function(dtype, op, "allreduce");
  const size_t es = element_size(dtype);
  const int64_t chunk = static_cast<int64_t>(slot_bytes_ / es);
  auto* bytes = static_cast<uint8_t*>(data);
  if (numel == 0) return check(fingerprint, timeout);
  if (buffers_ != nullptr && static_cast<size_t>(numel) * es >= kShmBufferMinBytes &&
      allreduce_in_buffers(data, numel, dtype, op, fingerprint, timeout)) {
    return;
  }
  for (int64_t off = 0, k = 0; off < numel; off += chunk, ++k) {
    const int64_t n = std::min(chunk, numel - off);  // elements in this chunk
    uint8_t* in = bytes + off * es;                  // this chunk of the tensor
    // Rank q's share of the chunk (share_of), whole cache lines.
    auto share = [&](int q) { return share_of(q, size_, n, es); };
    const auto [lo, hi] = share(rank_);
    Step step(*this, fingerprint, k, timeout);
    // Copy in every share but this rank's own: only rank q reads share q of
    // the slots, and this rank reads its own share straight from the tensor.
    std::memcpy(step.slot(rank_), in, lo * es);
    std::memcpy(step.slot(rank_) + hi * es, in + hi * es, (n - hi) * es);
    step.arrive();
    if (hi > lo) {
      // x_q of this share: rank q's slot, or the tensor itself for q == rank_.
      // The result builds up in this rank's own slot (((x0 op x1) op x2) ...),
      // where the others copy it from, then goes into the tensor.
      auto x = [&](int q) -> const uint8_t* { return (q == rank_ ? in : step.slot(q)) + lo * es; };
      uint8_t* result = step.slot(rank_) + lo * es;
      if (size_ == 1) std::memcpy(result, x(0), (hi - lo) * es);
      for (int q = 1; q < size_; ++q) reduce(result, q == 1 ? x(0) : result, x(q), hi - lo);
      if (op == ReduceOp::AVG) divide_in_place(result, dtype, hi - lo, size_);
      std::memcpy(in + lo * es, result, (hi - lo) * es);
    }
    step.post(Phase::REDUCED);
    step.wait_all(Phase::REDUCED, step.number());
    for (int q = 0; q < size_; ++q) {
      const auto [qlo, qhi] = share(q);
      if (q != rank_ && qhi > qlo) std::memcpy(in + qlo * es, step.slot(q) + qlo * es, (qhi - qlo) * es);
    }
    step.post(Phase::LEFT);
  }
}

// Note [Shared-memory buffers]: one step, no slots. Rank q's share is the slot
// path's, reduced in the same rank order, so the bits are the same.
bool ShmChannel::allreduce_in_buffers(void* data, int64_t numel, ScalarType dtype, ReduceOp op,
                                      const Fingerprint& fingerprint, std::chrono::milliseconds timeout) {
  const ReduceFn reduce = reduce_function(dtype, op, "allreduce");
  const size_t es = element_size(dtype);
  auto* mine = static_cast<uint8_t*>(data);
  Step step(*this, fingerprint, -1, timeout);
  const uint32_t parity = step.number() % 2;
  control(rank_).buffer[parity] = buffers_->find(data, static_cast<size_t>(numel) * es);
  step.arrive();  // every tensor is complete; the fingerprints agree
  for (int q = 0; q < size_; ++q) {
    if (control(q).buffer[parity].id == 0) {  // someone's is ordinary memory: the slot path
      step.post(Phase::LEFT);
      return false;
    }
  }
  std::vector<uint8_t*> x(size_);  // x[q]: rank q's tensor, as mapped here
  for (int q = 0; q < size_; ++q) {
    try {
      x[q] = q == rank_ ? mine : buffers_->peer(q, control(q).buffer[parity]);
    } catch (const Error& e) {
      step.fail(e.what());
    }
  }
  auto share = [&](int q) { return share_of(q, size_, numel, es); };
  // This rank's share, a cache-sized block at a time: the result is built in
  // `block` (every x[q] is read there before the result overwrites it), then
  // written into every rank's tensor. No rank reads another's share of x[q], so
  // the writes into the peers' tensors race with nothing (Note [Shared-memory buffers]).
  const auto [lo, hi] = share(rank_);
  const int64_t block_numel = static_cast<int64_t>((size_t{64} << 10) / es);
  std::vector<uint8_t> block(static_cast<size_t>(block_numel) * es);
  for (int64_t b = lo; b < hi; b += block_numel) {
    const int64_t m = std::min(block_numel, hi - b);
    if (size_ == 1) std::memcpy(block.data(), x[0] + b * es, m * es);
    for (int q = 1; q < size_; ++q) reduce(block.data(), q == 1 ? x[0] + b * es : block.data(), x[q] + b * es, m);
    if (op == ReduceOp::AVG) divide_in_place(block.data(), dtype, m, size_);
    for (int q = 0; q < size_; ++q) std::memcpy(x[q] + b * es, block.data(), m * es);
  }
  step.post(Phase::REDUCED);
  step.wait_all(Phase::REDUCED, step.number());  // every share reduced and written everywhere
  step.post(Phase::LEFT);
  step.wait_all(Phase::LEFT, step.number());  // every rank is out of this step (the step protocol's rule)
  return true;
}

void ShmChannel::check(const Fingerprint& fingerprint, std::chrono::milliseconds timeout) {
  Step step(*this, fingerprint, 0, timeout);
  step.arrive();
  step.post(Phase::LEFT);
}

void ShmChannel::broadcast(void* data, size_t bytes, int root, const Fingerprint& fingerprint,
                           std::chrono::milliseconds timeout) {
  if (bytes == 0) return check(fingerprint, timeout);
  auto* p = static_cast<uint8_t*>(data);
  for (size_t off = 0, k = 0; off < bytes; off += slot_bytes_, ++k) {
    const size_t n = std::min(slot_bytes_, bytes - off);
    Step step(*this, fingerprint, static_cast<int64_t>(k), timeout);
    if (rank_ == root) std::memcpy(step.slot(root), p + off, n);
    step.arrive();
    if (rank_ != root) std::memcpy(p + off, step.slot(root), n);
    step.post(Phase::LEFT);
  }
}

void ShmChannel::allgather(const void* input, const std::vector<void*>& outputs, size_t bytes,
                           const Fingerprint& fingerprint, std::chrono::milliseconds timeout) {
  const auto* in = static_cast<const uint8_t*>(input);
  if (bytes == 0) return check(fingerprint, timeout);
  for (size_t off = 0, k = 0; off < bytes; off += slot_bytes_, ++k) {
    const size_t n = std::min(slot_bytes_, bytes - off);
    Step step(*this, fingerprint, static_cast<int64_t>(k), timeout);
    std::memcpy(step.slot(rank_), in + off, n);
    step.arrive();
    for (int q = 0; q < size_; ++q) std::memcpy(static_cast<uint8_t*>(outputs[q]) + off, step.slot(q), n);
    step.post(Phase::LEFT);
  }
}

}  // namespace lockstep::distributed::detail
