// distributed/process_group_gloo_pending.h — internal to the Gloo backend: the
// queued form of one collective (ProcessGroupGloo::Pending) and the helpers the
// collectives share. Included by process_group_gloo.cpp and
// process_group_gloo_collectives.cpp only.
// Read before: distributed/process_group_gloo.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "distributed/collective_check.h"
#include "distributed/process_group_gloo.h"

namespace lockstep::distributed {

struct ProcessGroupGloo::Pending {
  detail::Fingerprint fingerprint;
  std::string description;
  std::chrono::milliseconds timeout;
  std::function<std::vector<Tensor>(uint32_t tag, std::chrono::milliseconds timeout)> body;
};

namespace gloo_detail {

// Gloo sizes segments in whole elements of sizeof(E); hand it an unsigned type of
// the tensor's element size (the reduce function knows the real dtype).
template <class F>
inline void with_element_type(size_t element_size, F&& fn) {
  switch (element_size) {
    case 1: return fn.template operator()<uint8_t>();
    case 2: return fn.template operator()<uint16_t>();
    case 4: return fn.template operator()<uint32_t>();
    case 8: return fn.template operator()<uint64_t>();
    default: throw Error(lockstep::detail::str("ProcessGroupGloo: unsupported element size ", element_size));
  }
}
constexpr uint8_t kPointToPointSlotPrefix = 0x20;  // beside Gloo's collective prefixes (0x01..0x08)

}  // namespace gloo_detail
}  // namespace lockstep::distributed
