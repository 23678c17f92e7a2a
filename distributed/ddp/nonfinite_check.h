// distributed/ddp/nonfinite_check.h — DDP's report of NaN and Inf gradients: which rank
// produced them, in which parameter and iteration, and what to do about it.
//
// Note [Non-finite gradients]
// A NaN or Inf loss on one rank gives that rank NaN/Inf gradients, and DDP's
// averaging hands them to every rank: all replicas go non-finite at once, the
// loss prints nan, and nothing says where it began. So at the end of each synced
// backward (Reducer::finalize_backward) DDP looks at the gradients twice:
//   1. before the averages are copied back: this rank's own gradients (their
//      .grad still holds the local values then, unless gradient_as_bucket_view),
//      to name the rank and the parameter where a non-finite value appeared;
//   2. after: the averaged gradients — bitwise the same on every rank, so every
//      rank takes the same decision — to apply the policy
//      (DDPOptions::non_finite_gradients, or LOCKSTEP_NONFINITE=off|warn|skip|stop):
//   WARN (default)  one line on stderr per rank and iteration (this rank's
//                   parameter if it produced them, else "from another rank"),
//                   up to 20 lines a run; training goes on.
//   SKIP_STEP       the same line, and every parameter's .grad is set undefined,
//                   so the next optimizer.step() leaves the parameters unchanged
//                   (optimizers skip undefined gradients) — a gradient scaler's
//                   skip, on every rank alike.
//   STOP            the backward throws an ls::Error with the same text.
//   OFF             no scan.
// Cost: two reads of every gradient per synced backward (memory bandwidth;
// the first overlaps the last buckets' AllReduce) — measured in README
// "Reliability".
// Read before: distributed/ddp/reducer.h. Read next: distributed/ddp/reducer.cpp
// (finalize_backward).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "distributed/ddp/ddp_options.h"

namespace lockstep::distributed {

namespace detail {

// The number of NaN or +-Inf elements of a floating-point tensor (0 for others).
int64_t count_non_finite(const Tensor& t);

// The policy from DDPOptions, unless LOCKSTEP_NONFINITE names another one.
NonFinitePolicy non_finite_policy(NonFinitePolicy option);

class NonFiniteCheck {
 public:
  NonFiniteCheck(NonFinitePolicy policy, std::vector<Tensor> params, std::vector<std::string> names, int rank);
  // Step 1 of the Note, before the averages are copied back. `local_values`:
  // the .grad tensors hold this rank's own values (not bucket views).
  void before_copy_back(bool local_values);
  // Step 2: applies the policy to the averaged gradients. `iteration`: synced backward number.
  void after_copy_back(int64_t iteration);
  NonFinitePolicy policy() const { return policy_; }

 private:
  NonFinitePolicy policy_;
  std::vector<Tensor> params_;
  std::vector<std::string> names_;
  int rank_;
  std::string local_;  // step 1's finding ("" when none)
  bool local_known_ = false;
  int reports_ = 0;
};

}  // namespace detail
}  // namespace lockstep::distributed
