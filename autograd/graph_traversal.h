// autograd/graph_traversal.h — which leaves can a backward from these outputs reach?
//
// DDP with find_unused_parameters walks the graph from the forward outputs
// right after forward: a parameter whose AccumulateGrad is not reached will get
// no gradient this iteration, so the Reducer marks it ready at once instead of
// waiting for a hook that never fires.
// Read before: autograd/engine.h. Read next: autograd/functions/ (the backward formulas).
#pragma once

#include <memory>
#include <vector>

#include "autograd/accumulate_grad.h"

namespace lockstep::autograd {

// Every AccumulateGrad reachable from the outputs' grad_fns (or the outputs
// themselves, if they are leaves), each once, in discovery order.
std::vector<std::shared_ptr<AccumulateGrad>> reachable_accumulators(
    const std::vector<Tensor>& outputs);

}  // namespace lockstep::autograd
