// distributed/ddp/reducer_timeline.h — the DDP events of the timeline (core/timeline.h),
// recorded through the Reducer's observers (distributed/ddp/reducer_observers.cpp)
// and its AllReduce hook (distributed/ddp/reducer_launch.cpp):
//   "ready"   instant, per parameter, when its gradient reached the bucket;
//             args: bucket, index, param, iteration
//   "launch"  instant, per bucket, when its AllReduce was issued; args: bucket, params, iteration
//   "allreduce bucket k"  async span, category "allreduce", from the launch to
//             the collective's completion (polled, Note [Timeline threads and
//             done events]); args: bucket, iteration
// `iteration` counts synced backwards from 1, so tools/timeline.py and the
// tests can pair a bucket's ready, launch and done events.
// Each call sits behind timeline::is_enabled() at the call site (the strings
// cost something), or is a no-op while the timeline is off.
// Read before: core/timeline.h, distributed/ddp/reducer.h. Read next: tools/timeline.py.
#pragma once

#include <cstdint>
#include <string>

#include "core/timeline.h"

namespace lockstep::distributed {

// The async span of bucket `bucket` in synced backward `iteration`.
inline uint64_t timeline_key(int64_t iteration, size_t bucket) {
  return (static_cast<uint64_t>(iteration) << 24) | static_cast<uint64_t>(bucket);
}

inline void timeline_ready(const std::string& name, size_t index, size_t bucket,
                           int64_t iteration) {
  std::string args = "\"bucket\":" + std::to_string(bucket) +
                     ",\"index\":" + std::to_string(index) +
                     ",\"iteration\":" + std::to_string(iteration) + ",\"param\":\"";
  for (char c : name) {
    if (c == '"' || c == '\\') args += '\\';
    args += c;
  }
  args += '"';
  timeline::instant("ready", "ddp", args);
}

inline void timeline_launch(size_t bucket, int64_t iteration) {
  const std::string args =
      "\"bucket\":" + std::to_string(bucket) + ",\"iteration\":" + std::to_string(iteration);
  timeline::instant("launch", "ddp", args);
  timeline::async_begin("allreduce bucket " + std::to_string(bucket), "allreduce",
                        timeline_key(iteration, bucket), args);
}

}  // namespace lockstep::distributed
