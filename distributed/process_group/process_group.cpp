// distributed/process_group/process_group.cpp — what every backend shares: ReduceOp names.
// Read before: distributed/process_group/process_group.h.
#include "distributed/process_group/process_group.h"

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

}  // namespace lockstep::distributed
