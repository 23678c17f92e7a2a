// core/profiler.h — a built-in op profiler: where does a training step spend its time?
//
//   ls::profiler::enable();
//   ... forward, backward, optimizer step ...
//   std::cerr << ls::profiler::report();   // table: name, calls, total ms, self ms, %
//
// or, without changing the program: LOCKSTEP_PROFILE=1 ./my_program prints the
// same table to stderr when the program exits (LOCKSTEP_PROFILE unset, empty,
// 0 / off / false: off; a value that is neither on nor off is named on stderr and
// leaves it off).
//
// What is recorded: a Scope is an RAII timer with a name. The library opens one
// around every differentiable op (autograd/functions/*.cpp, named like the op:
// "conv2d", "linear", "add", ...), around every backward node the engine runs
// (named by Node::name(): "Conv2dBackward", "AccumulateGrad", ...), around the
// whole backward pass ("autograd.backward") and around each optimizer step
// ("optimizer.step"). Programs may open their own scopes.
//
// § Note [Profiler cost when disabled]
// Scope's constructor is inline and, while profiling is off, does one relaxed
// atomic load and nothing else: no clock read, no lock, no allocation. Callers
// whose scope name costs something to build (the engine's node->name() returns
// a std::string) build it only when is_enabled() says so and pass an empty name
// otherwise; a Scope with an empty name records nothing.
//
// The timeline (core/timeline.h) reuses these scopes: while it records, each
// Scope also becomes one event of the trace (Note [Timeline cost when disabled]).
//
// § Note [Profiler self time and threads]
// Scopes nest per thread: a thread-local pointer names the innermost open Scope,
// and a closing Scope adds its duration to its parent's "children" time. So for
// each name: total = time between open and close, self = total minus the time
// spent in nested scopes. Self times never overlap on one thread, so the sum of
// all self times is the profiled time of all threads together; the report's
// percentages are of that sum (self % columns add up to 100). A name nested in
// itself (an op calling the same op) counts its inner time twice in total.
// Scopes on every thread are recorded (the data loader's thread, DDP's
// communication threads, test threads), merged by name under one mutex taken
// once per closing scope while profiling is on. OpenMP worker threads inside a
// kernel open no scopes: their work is part of the op that launched them.
// A Scope opened before enable() records nothing; one open across disable() or
// reset() is still recorded when it closes.
//
// § Note [Profiler bytes]
// Beside time, each scope counts the bytes its op moves: add_bytes(n) adds n to
// the innermost open Scope of the calling thread (its self bytes, as self time).
// The count is of tensors, not of cache lines, so it does not depend on the CPU:
// autograd counts, for every op it records, the bytes of its operands read once
// and of its results written once (autograd/traffic.h: views and results that
// alias an operand move nothing; a broadcast operand counts its distinct
// elements). The backward does the same for each node: the incoming gradients,
// the saved tensors it unpacks, the gradients it returns. Ops that update in
// place (gradient accumulation, the optimizer) add their own counts. So fusing
// two ops into one takes the intermediate tensor's write and read out of the
// column, whatever the machine. A scope in which a matrix product or a
// convolution ran (mark_gemm(), called by the GEMM and convolution kernels) is a
// "GEMM op"; the report's header sums the bytes of all other ops: the step's
// memory-bound traffic, the number a fusion has to lower.
//
// Read before: core/parallel.h. Read next: autograd/engine.cpp (the backward scopes).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep::profiler {

namespace detail {
// Who records Scopes: the profiler's table and/or the timeline (core/timeline.h),
// one word so that a Scope tests both with one load.
inline std::atomic<unsigned> recording{0};
constexpr unsigned kProfiling = 1u, kTimeline = 2u;
}  // namespace detail

// Starts / stops recording. enable() keeps what was recorded before (use reset()).
void enable();
void disable();
inline bool is_enabled() {
  return (detail::recording.load(std::memory_order_relaxed) & detail::kProfiling) != 0;
}
// The profiler or the timeline records Scopes: callers that build a scope name
// (the engine) test this one.
inline bool is_recording() { return detail::recording.load(std::memory_order_relaxed) != 0; }
namespace detail {
void add_bytes(int64_t bytes);
void mark_gemm();
}  // namespace detail
// Note [Profiler bytes]: adds `bytes` to the innermost open Scope of this thread.
inline void add_bytes(int64_t bytes) {
  if (is_enabled()) detail::add_bytes(bytes);
}
// Marks the innermost open Scope of this thread as one that ran a GEMM or a
// convolution (its bytes are then not counted as memory-bound traffic).
inline void mark_gemm() {
  if (is_enabled()) detail::mark_gemm();
}

// Forgets every recorded entry and restarts the wall-clock reference.
void reset();

// One row of the report: aggregated over calls and threads.
struct Entry {
  std::string name;
  int64_t calls = 0;
  double total_ms = 0.0;  // open to close, nested scopes included
  double self_ms = 0.0;   // total_ms minus the time in nested scopes
  double self_mb = 0.0;   // bytes moved, in 1e6 bytes (Note [Profiler bytes])
  bool gemm = false;      // some call ran a GEMM or a convolution
};

// The bytes of all scopes that ran no GEMM or convolution, in 1e6 bytes: the
// memory-bound traffic (Note [Profiler bytes]).
double non_gemm_mb(const std::vector<Entry>& rows);

// Every name recorded since the last reset(), sorted by total_ms, largest first.
std::vector<Entry> entries();

// The table as text: one line per name (calls, total ms, self ms, total %,
// self %), a header with the profiled time and the threads that recorded. See
// The timeline (core/timeline.h) reuses these scopes: while it records, each
// Scope also becomes one event of the trace (Note [Timeline cost when disabled]).
//
// Note [Profiler self time and threads] for what the percentages are of.
std::string report();

// RAII timer; see Note [Profiler cost when disabled]. `name` must outlive the
// Scope (string literals, or a string the caller keeps alive).
class Scope {
 public:
  explicit Scope(std::string_view name) {
    if (is_recording() && !name.empty()) open(name);
  }
  ~Scope() {
    if (active_) close();
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  void open(std::string_view name);
  void close();

  bool active_ = false;
  unsigned mode_ = 0;  // detail::recording when opened: who gets this scope
  std::string_view name_;
  int64_t start_ns_ = 0;
  int64_t children_ns_ = 0;  // time spent in scopes nested inside this one
  Scope* parent_ = nullptr;  // the enclosing open Scope on this thread
  int64_t bytes_ = 0;        // Note [Profiler bytes]
  bool gemm_ = false;

  friend void detail::add_bytes(int64_t);
  friend void detail::mark_gemm();
};

}  // namespace lockstep::profiler
