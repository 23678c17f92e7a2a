// core/timeline.cpp — the event buffer, the done-poller, the JSON writer and
// LOCKSTEP_TIMELINE.
// Read before: core/timeline.h (Note [Timeline threads and done events]).
#include "core/timeline.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/error.h"

namespace lockstep::timeline {

namespace {

struct Event {
  char phase;  // 'X' complete, 'i' instant, 'b' / 'e' async begin / end
  std::string name, category, args;
  int64_t ts_ns = 0, dur_ns = 0;
  int tid = 0;
  uint64_t id = 0;  // async spans
};

struct Pending {
  std::function<bool()> done;
};

// Everything recorded, behind one mutex; allocated once and never destroyed
// (the exit handler may run during static destruction).
struct State {
  std::mutex mutex;
  std::vector<Event> events;
  std::unordered_map<uint64_t, std::string> open_async;  // key -> name, category (for 'e')
  std::map<uint64_t, Pending> pending;                   // async_end_when, polled
  uint64_t next_id = 1;
  std::unordered_map<uint64_t, uint64_t> id_of_key;
  int rank = -1;
  bool recorder_alive = false;
  std::thread poller;
  std::atomic<bool> stop_poller{false};
  std::atomic<int> next_tid{1};
};

State& state() {
  static State* s = new State();
  return *s;
}

int this_tid() {
  thread_local int tid = state().next_tid.fetch_add(1);
  return tid;
}

thread_local std::unordered_map<std::string, int64_t> open_spans;

// Records the end of async span `key` at `ts`; caller holds the mutex.
void end_locked(State& s, uint64_t key, int64_t ts) {
  auto it = s.id_of_key.find(key);
  if (it == s.id_of_key.end()) return;
  Event e{'e', s.open_async[key], "", "", ts, 0, 0, it->second};
  const size_t bar = e.name.find('\x1f');  // stored as name \x1f category
  e.category = e.name.substr(bar + 1);
  e.name = e.name.substr(0, bar);
  s.events.push_back(std::move(e));
  s.open_async.erase(key);
  s.id_of_key.erase(it);
  s.pending.erase(key);
}

// Ends every pending span whose predicate now holds; caller holds the mutex.
void poll_locked(State& s) {
  const int64_t ts = now_ns();
  std::vector<uint64_t> done;
  for (auto& [key, p] : s.pending) {
    if (p.done()) done.push_back(key);
  }
  for (uint64_t key : done) end_locked(s, key, ts);
}

void poller_loop() {
  State& s = state();
  while (!s.stop_poller.load()) {
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      poll_locked(s);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void append_escaped(std::string& out, std::string_view text) {
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
}

int resolved_rank(const State& s) {
  if (s.rank >= 0) return s.rank;
  for (const char* var : {"RANK", "OMPI_COMM_WORLD_RANK"}) {
    if (const char* v = std::getenv(var); v != nullptr && *v != '\0') return std::atoi(v);
  }
  return -1;
}

// The trace as Chrome-trace JSON; caller holds the mutex.
std::string to_json(const State& s, int rank) {
  std::string out = "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"rank\":" + std::to_string(rank) +
                    "},\"traceEvents\":[\n";
  const int pid = rank >= 0 ? rank : static_cast<int>(getpid());
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":"
                "\"rank %d\"}}",
                pid, rank);
  out += buf;
  for (const Event& e : s.events) {
    out += ",\n{\"ph\":\"";
    out += e.phase;
    out += "\",\"name\":\"";
    append_escaped(out, e.name);
    out += "\",\"cat\":\"";
    append_escaped(out, e.category);
    std::snprintf(buf, sizeof buf, "\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f", pid, e.tid,
                  e.ts_ns * 1e-3);
    out += buf;
    if (e.phase == 'X') {
      std::snprintf(buf, sizeof buf, ",\"dur\":%.3f", e.dur_ns * 1e-3);
      out += buf;
    } else if (e.phase == 'i') {
      out += ",\"s\":\"t\"";
    } else {
      std::snprintf(buf, sizeof buf, ",\"id\":%llu", static_cast<unsigned long long>(e.id));
      out += buf;
    }
    if (!e.args.empty()) out += ",\"args\":{" + e.args + "}";
    out += "}";
  }
  out += "\n]}\n";
  return out;
}

void record(Event e) {
  e.tid = this_tid();
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.events.push_back(std::move(e));
}

}  // namespace

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void set_rank(int rank) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.rank = rank;
}

std::string rank_path(const std::string& path, int rank) {
  const std::string tag =
      rank >= 0 ? ".rank" + std::to_string(rank) : ".pid" + std::to_string(getpid());
  const std::string ext = ".json";
  if (path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0) {
    return path.substr(0, path.size() - ext.size()) + tag + ext;
  }
  return path + tag + ext;
}

void complete(std::string_view name, std::string_view category, int64_t start_ns, int64_t end_ns) {
  if (!is_enabled()) return;
  record(
      Event{'X', std::string(name), std::string(category), "", start_ns, end_ns - start_ns, 0, 0});
}

void instant(std::string_view name, std::string_view category, std::string_view args_json) {
  if (!is_enabled()) return;
  record(Event{'i', std::string(name), std::string(category), std::string(args_json), now_ns(), 0,
               0, 0});
}

void async_begin(std::string_view name, std::string_view category, uint64_t key,
                 std::string_view args_json) {
  if (!is_enabled()) return;
  Event e{'b',
          std::string(name),
          std::string(category),
          std::string(args_json),
          now_ns(),
          0,
          this_tid(),
          0};
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  e.id = s.next_id++;
  s.id_of_key[key] = e.id;
  s.open_async[key] = e.name + '\x1f' + e.category;
  s.events.push_back(std::move(e));
}

void async_end(uint64_t key) {
  if (!is_enabled()) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  poll_locked(s);  // a span whose predicate already holds ends at its poll time
  end_locked(s, key, now_ns());
}

void async_end_when(uint64_t key, std::function<bool()> done) {
  if (!is_enabled()) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.id_of_key.count(key)) return;
  s.pending[key] = Pending{std::move(done)};
  if (!s.poller.joinable()) {
    s.stop_poller = false;
    s.poller = std::thread(poller_loop);
  }
}

void open_span(std::string_view name) {
  if (!is_enabled()) return;
  open_spans[std::string(name)] = now_ns();
}

void close_span(std::string_view name, std::string_view category) {
  if (!is_enabled()) return;
  auto it = open_spans.find(std::string(name));
  if (it == open_spans.end()) return;
  const int64_t start = it->second;
  open_spans.erase(it);
  complete(name, category, start, now_ns());
}

Recorder::Recorder(std::string path) : path_(std::move(path)) {
  LS_CHECK(!path_.empty(),
           "timeline::Recorder: the output path is empty; pass e.g. \"trace.json\"");
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  LS_CHECK(!s.recorder_alive, "timeline::Recorder(\"", path_,
           "\"): another Recorder is recording "
           "(LOCKSTEP_TIMELINE, or one not yet stopped); stop it first");
  s.recorder_alive = true;
  s.events.clear();
  s.open_async.clear();
  s.id_of_key.clear();
  s.pending.clear();
  profiler::detail::recording.fetch_or(profiler::detail::kTimeline, std::memory_order_relaxed);
}

Recorder::~Recorder() {
  try {
    stop();
  } catch (...) {  // NOLINT: a destructor must not throw; stop() is the checked path
  }
}

std::string Recorder::stop() {
  if (!written_.empty()) return written_;
  State& s = state();
  profiler::detail::recording.fetch_and(~profiler::detail::kTimeline, std::memory_order_relaxed);
  if (s.poller.joinable()) {
    s.stop_poller = true;
    s.poller.join();
  }
  std::string json;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    poll_locked(s);
    const int rank = resolved_rank(s);
    written_ = rank_path(path_, rank);
    json = to_json(s, rank);
    s.events.clear();
    s.open_async.clear();
    s.id_of_key.clear();
    s.pending.clear();
    s.recorder_alive = false;
  }
  std::ofstream f(written_, std::ios::binary | std::ios::trunc);
  LS_CHECK(f.good(), "timeline: cannot open '", written_,
           "' for writing; check that its directory "
           "exists and is writable (LOCKSTEP_TIMELINE or the Recorder's path)");
  f << json;
  f.close();
  LS_CHECK(f.good(), "timeline: writing '", written_, "' failed (disk full?)");
  return written_;
}

namespace {

// LOCKSTEP_TIMELINE=path.json: record the whole program, write at exit. Runs at
// static initialisation of this file, which every program that links the
// profiler's scopes contains.
Recorder* env_recorder = nullptr;

void write_at_exit() {
  if (env_recorder == nullptr) return;
  try {
    const std::string file = env_recorder->stop();
    std::fprintf(stderr, "lockstep timeline: wrote %s\n", file.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lockstep timeline: %s\n", e.what());
  }
}

[[maybe_unused]] const bool env_timeline = [] {
  const char* v = std::getenv("LOCKSTEP_TIMELINE");
  if (v == nullptr || *v == '\0') return false;
  env_recorder = new Recorder(v);
  std::atexit(write_at_exit);
  return true;
}();

}  // namespace

}  // namespace lockstep::timeline
