// core/profiler.cpp — recording scopes, the report table, LOCKSTEP_PROFILE.
// Read before: core/profiler.h (Note [Profiler self time and threads]).
#include "core/profiler.h"

#include "core/env_flag.h"
#include "core/timeline.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

namespace lockstep::profiler {

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Stats {
  int64_t calls = 0;
  int64_t total_ns = 0;
  int64_t self_ns = 0;
  int64_t bytes = 0;
  bool gemm = false;
};

// Everything recorded, behind one mutex. Allocated once and never destroyed, so
// the LOCKSTEP_PROFILE exit handler can still read it during static destruction.
struct State {
  std::mutex mutex;
  std::map<std::string, Stats, std::less<>> stats;  // less<>: find() by string_view
  std::set<std::thread::id> threads;                // threads that recorded a scope
  int64_t wall_start_ns = now_ns();                 // reset() or first enable()
  int64_t enabled_ns = 0;                           // time enabled, closed intervals
  int64_t enabled_since_ns = -1;                    // -1 while disabled
};

State& state() {
  static State* s = new State();
  return *s;
}

// The innermost open (active) Scope of this thread.
thread_local Scope* innermost = nullptr;

}  // namespace

void enable() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.enabled_since_ns < 0) s.enabled_since_ns = now_ns();
  detail::recording.fetch_or(detail::kProfiling, std::memory_order_relaxed);
}

void disable() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  detail::recording.fetch_and(~detail::kProfiling, std::memory_order_relaxed);
  if (s.enabled_since_ns >= 0) {
    s.enabled_ns += now_ns() - s.enabled_since_ns;
    s.enabled_since_ns = -1;
  }
}

void reset() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.stats.clear();
  s.threads.clear();
  s.wall_start_ns = now_ns();
  s.enabled_ns = 0;
  if (s.enabled_since_ns >= 0) s.enabled_since_ns = s.wall_start_ns;
}

void Scope::open(std::string_view name) {
  active_ = true;
  mode_ = detail::recording.load(std::memory_order_relaxed);
  name_ = name;
  parent_ = innermost;
  innermost = this;
  start_ns_ = now_ns();
}

void Scope::close() {
  const int64_t elapsed = now_ns() - start_ns_;
  innermost = parent_;
  if (parent_ != nullptr) parent_->children_ns_ += elapsed;
  if (mode_ & detail::kTimeline) timeline::complete(name_, "scope", start_ns_, start_ns_ + elapsed);
  if (!(mode_ & detail::kProfiling)) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.stats.find(name_);
  if (it == s.stats.end()) it = s.stats.emplace(std::string(name_), Stats{}).first;
  it->second.calls += 1;
  it->second.total_ns += elapsed;
  it->second.self_ns += std::max<int64_t>(elapsed - children_ns_, 0);
  it->second.bytes += bytes_;
  it->second.gemm = it->second.gemm || gemm_;
  s.threads.insert(std::this_thread::get_id());
}

namespace detail {

void add_bytes(int64_t bytes) {
  if (innermost != nullptr) innermost->bytes_ += bytes;
}

void mark_gemm() {
  if (innermost != nullptr) innermost->gemm_ = true;
}

}  // namespace detail

double non_gemm_mb(const std::vector<Entry>& rows) {
  double mb = 0.0;
  for (const Entry& e : rows) {
    if (!e.gemm) mb += e.self_mb;
  }
  return mb;
}

std::vector<Entry> entries() {
  State& s = state();
  std::vector<Entry> out;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    out.reserve(s.stats.size());
    for (const auto& [name, st] : s.stats) {
      out.push_back({name, st.calls, st.total_ns * 1e-6, st.self_ns * 1e-6, st.bytes * 1e-6,
                     st.gemm});
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Entry& a, const Entry& b) { return a.total_ms > b.total_ms; });
  return out;
}

std::string report() {
  const std::vector<Entry> rows = entries();
  size_t threads = 0;
  double enabled_ms = 0.0;
  {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    threads = s.threads.size();
    int64_t ns = s.enabled_ns;
    if (s.enabled_since_ns >= 0) ns += now_ns() - s.enabled_since_ns;
    enabled_ms = ns * 1e-6;
  }
  double self_sum = 0.0;
  size_t width = 4;
  for (const Entry& e : rows) {
    self_sum += e.self_ms;
    width = std::max(width, e.name.size());
  }
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line,
                "lockstep profiler: %.1f ms profiled (sum of self times) on %zu thread(s), "
                "%.1f ms wall while enabled; %% columns are of the profiled time\n",
                self_sum, threads, enabled_ms);
  out += line;
  double gemm_mb = 0.0;
  for (const Entry& e : rows) gemm_mb += e.gemm ? e.self_mb : 0.0;
  std::snprintf(line, sizeof line,
                "bytes moved (Note [Profiler bytes]): %.1f MB by ops without a GEMM, %.1f MB by "
                "GEMM and convolution ops (marked G)\n",
                non_gemm_mb(rows), gemm_mb);
  out += line;
  const int w = static_cast<int>(width);
  std::snprintf(line, sizeof line, "%-*s %10s %12s %12s %8s %8s %10s\n", w, "name", "calls",
                "total ms", "self ms", "total %", "self %", "self MB");
  out += line;
  const double denom = self_sum > 0.0 ? self_sum : 1.0;
  for (const Entry& e : rows) {
    std::snprintf(line, sizeof line, "%-*s %10lld %12.3f %12.3f %8.2f %8.2f %10.1f%s\n", w,
                  e.name.c_str(), static_cast<long long>(e.calls), e.total_ms, e.self_ms,
                  100.0 * e.total_ms / denom, 100.0 * e.self_ms / denom, e.self_mb,
                  e.gemm ? " G" : "");
    out += line;
  }
  return out;
}

namespace {

// LOCKSTEP_PROFILE=1: profile the whole program and print the table at exit.
// Runs at static initialisation of this file, which every program that links
// the autograd engine contains (the engine opens scopes).
void print_report_at_exit() {
  const std::string table = report();
  std::fputs(table.c_str(), stderr);
}

[[maybe_unused]] const bool env_profiling = [] {
  const char* v = std::getenv("LOCKSTEP_PROFILE");
  if (v == nullptr || *v == '\0') return false;
  const std::optional<bool> on = parse_flag(v);  // no throwing here: the program has not started
  if (!on.has_value()) {
    std::fprintf(stderr, "lockstep: LOCKSTEP_PROFILE='%s' is neither 1 / on / true nor 0 / off / false; "
                         "the profiler stays off\n", v);
  }
  if (!on.value_or(false)) return false;
  enable();
  std::atexit(print_report_at_exit);
  return true;
}();

}  // namespace

}  // namespace lockstep::profiler
