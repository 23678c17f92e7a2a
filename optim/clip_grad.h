// optim/clip_grad.h — gradient clipping by total norm: torch.nn.utils.clip_grad_norm_.
//
//   loss.backward();
//   double norm = ls::optim::clip_grad_norm_(net->parameters(), /*max_norm=*/1.0);
//   opt.step();
//
// The total norm treats all gradients as one long vector:
//   total = (sum over grads, over elements |g|^p)^(1/p)      (p = norm_type)
//   total = max over grads, over elements |g|                (norm_type = infinity)
// If max_norm / (total + 1e-6) < 1, every gradient is multiplied by it in place,
// so the clipped total is just under max_norm. Undefined grads are skipped (they
// count as absent, not as zero: Note [Undefined gradients are skipped]). Sums run
// in double over fixed-size blocks added in a fixed order, so the result does not
// depend on the number of threads: every DDP replica computes the same norm.
// Read before: optim/optimizer.h. Read next: optim/optim.h.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace lockstep::optim {

// Returns the total norm of the gradients before clipping.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);

}  // namespace lockstep::optim

// libtorch's spelling: ls::nn::utils::clip_grad_norm_(net->parameters(), 1.0).
namespace lockstep::nn::utils {
using optim::clip_grad_norm_;
}  // namespace lockstep::nn::utils
