// autograd/functions/unbind.h — unbind: a tensor's slices along one dim, as torch.unbind.
//
// unbind(x, dim) returns x.size(dim) views of x, slice i being x.select(dim, i).
// The difference from calling select in a loop is the backward: select's node
// writes its gradient into a zero tensor of x's full size, so taking all T
// slices costs T full-size zero fills and T full-size additions in backward
// (quadratic in T; an RNN over T time steps, nn/rnn.cpp, is the user). unbind
// records one node for all slices, whose backward writes every slice's gradient
// into one zero tensor: linear in T. A slice that received no gradient stays zero.
// Read before: autograd/functions/indexing.cpp. Read next: nn/rnn.h.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace lockstep {

// The x.size(dim) slices of x along dim (each x.select(dim, i), a view).
std::vector<Tensor> unbind(const Tensor& x, int64_t dim = 0);

}  // namespace lockstep
