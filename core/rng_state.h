// core/rng_state.h — a Generator's state as a uint8 tensor, for checkpoints.
//
//   ls::Tensor s = ls::get_rng_state();     // torch.get_rng_state()
//   ... save s with the model and optimizer state dicts ...
//   ls::set_rng_state(s);                   // the same random stream from here on
//
// The bytes are Generator::get_state()'s text (Note [Generator state] in
// core/rng.h); a tensor that is not such a state is refused with an ls::Error.
// Read before: core/rng.h. Read next: optim/lr_scheduler.h (scheduler state).
#pragma once

#include "core/rng.h"
#include "core/tensor.h"

namespace lockstep {

Tensor get_rng_state(Generator& generator = default_generator());  // uint8 (n)
void set_rng_state(const Tensor& state, Generator& generator = default_generator());

}  // namespace lockstep
