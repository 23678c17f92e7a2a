// core/timeline.h — a per-rank timeline of a training step, written as a
// Chrome-trace / Perfetto JSON file: when did each op, backward node, bucket
// AllReduce and optimizer step run, on which thread?
//
//   LOCKSTEP_TIMELINE=trace.json lockstep-run --nproc-per-node 2 -- ./bench_ddp ...
//   # -> trace.rank0.json, trace.rank1.json, written at exit
//   python3 tools/timeline.py trace.rank*.json -o merged.json --png timeline.png
//
// or from a program (the file is written when the Recorder is destroyed):
//   { ls::timeline::Recorder rec("trace.json"); ... train ... }
//
// What is recorded (open ui.perfetto.dev or chrome://tracing and load the file):
//  - every profiler Scope (core/profiler.h) as a complete ("X") event on its
//    thread: forward ops ("conv2d", "batch_norm", ...), the backward pass
//    ("autograd.backward") and each node the engine runs ("Conv2dBackward",
//    "AccumulateGrad", ...), the optimizer step ("optimizer.step");
//  - DDP's forward ("DDP.forward"), each parameter's gradient becoming ready
//    (instant "ready", args: bucket, param, iteration), each bucket's launch
//    (instant "launch") and its AllReduce as an async span ("allreduce bucket
//    k", from launch to done) that trace viewers draw in a track of its own
//    (distributed/ddp/reducer_observers.cpp records these).
// Timestamps are microseconds of the monotonic clock, which every process on
// one host shares, so the ranks' files line up when merged. (Across hosts the
// clocks differ; tools/timeline.py then aligns each rank's first event.)
//
// § Note [Timeline cost when disabled]
// The timeline shares the profiler's flag word (profiler::detail::recording):
// with both off, a Scope's constructor is one relaxed load and a branch, and
// every recording function here returns after the same test. Callers that
// build strings for an event (names, args) do so behind is_enabled().
//
// § Note [Timeline threads and done events]
// Events from any thread are appended to one buffer under a mutex (only while
// recording). A collective's completion happens on the process group's
// thread, which knows nothing of the timeline: async_end_when() hands the
// timeline a predicate (work->is_completed()) that a small poller thread,
// started with the first such span, tests every 50 us; the span ends at the
// first poll that sees it done (so at most ~50 us late). async_end() ends a
// span at once if it is still open (the reducer calls it after waiting).
//
// Read before: core/profiler.h. Read next: distributed/ddp/reducer_timeline.h (the DDP
// events), tools/timeline.py (merging and the overlap summary).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "core/profiler.h"

namespace lockstep::timeline {

// One relaxed load; see Note [Timeline cost when disabled].
inline bool is_enabled() {
  return (profiler::detail::recording.load(std::memory_order_relaxed) &
          profiler::detail::kTimeline) != 0;
}

// The monotonic clock the events use, in nanoseconds.
int64_t now_ns();

// The rank written into the file name and the trace's process name. Unset:
// RANK or OMPI_COMM_WORLD_RANK from the environment, else the process id.
// DDP's reducer sets it.
void set_rank(int rank);
// "dir/trace.json" + rank 1 -> "dir/trace.rank1.json"; no ".json": appended.
std::string rank_path(const std::string& path, int rank);

// ---- events (each a no-op while the timeline is off) ----
// A span [start_ns, end_ns] on the calling thread ("X").
void complete(std::string_view name, std::string_view category, int64_t start_ns, int64_t end_ns);
// A point in time on the calling thread ("i"); args_json: "" or the members
// of a JSON object without braces, e.g. "\"bucket\":3".
void instant(std::string_view name, std::string_view category, std::string_view args_json = {});
// Spans that start on one thread and end elsewhere ("b"/"e", drawn in their
// own track); `key` identifies the span until it ends.
void async_begin(std::string_view name, std::string_view category, uint64_t key,
                 std::string_view args_json = {});
void async_end(uint64_t key);  // now, if still open
void async_end_when(uint64_t key,
                    std::function<bool()> done);  // Note [Timeline threads and done events]
// A span on the calling thread whose two ends are in different functions:
// open_span remembers the start, close_span records it (if one was opened).
void open_span(std::string_view name);
void close_span(std::string_view name, std::string_view category);

// Records from construction to destruction (or stop()), then writes
// rank_path(path, rank) — the rank known at that time. One Recorder at a time.
class Recorder {
 public:
  explicit Recorder(std::string path);
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;
  // Stops recording and writes the file; returns its path. Later calls return it again.
  std::string stop();

 private:
  std::string path_;
  std::string written_;
};

}  // namespace lockstep::timeline
