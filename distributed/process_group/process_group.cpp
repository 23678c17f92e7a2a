// distributed/process_group/process_group.cpp — what every backend shares: ReduceOp names
// and the ordinary empty_buffer.
// Read before: distributed/process_group/process_group.h.
#include "distributed/process_group/process_group.h"

#include "core/native/native.h"

namespace lockstep::distributed {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM: return "SUM";
    case ReduceOp::AVG: return "AVG";
    case ReduceOp::MAX: return "MAX";
    case ReduceOp::MIN: return "MIN";
    case ReduceOp::PRODUCT: return "PRODUCT";
  }
  return "UNKNOWN";
}

Tensor ProcessGroup::empty_buffer(int64_t numel, ScalarType dtype, Device device) {
  Tensor t = native::empty({numel}, dtype, device);  // (numel)
  native::fill_(t, 0.0);
  return t;
}

}  // namespace lockstep::distributed
