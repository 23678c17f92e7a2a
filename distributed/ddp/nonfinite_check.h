// distributed/ddp/nonfinite_check.h — DDP's report of NaN and Inf gradients: which rank
// produced them, in which parameter and iteration, and what to do about it.
//
// § Note [Non-finite gradients]
// A NaN or Inf loss on one rank gives that rank NaN/Inf gradients, and DDP's
// averaging hands them to every rank: all replicas go non-finite at once, the
// loss prints nan, and nothing says where it began. So at the end of each synced
// backward (Reducer::finalize_backward) DDP looks at the gradients:
//   1. before the averages are copied back: this rank's own gradients (their
//      .grad still holds the local values then, unless gradient_as_bucket_view),
//      to name the rank and the parameter where a non-finite value appeared;
//   2. for SKIP_STEP and STOP (and WARN with gradient_as_bucket_view), after:
//      the averaged gradients — bitwise the same on every rank, so every rank
//      takes the same decision. The policy (DDPOptions::non_finite_gradients, or
//      LOCKSTEP_NONFINITE=off|warn|skip|stop):
//   WARN (default)  the rank that produced them prints one line on stderr
//                   (rank, parameter, iteration), up to 20 lines a run; training
//                   goes on. One read of the gradients, while the last buckets'
//                   AllReduce is in flight.
//   SKIP_STEP       every rank prints the line (naming its own parameter, or
//                   "another rank produced them") and sets every .grad
//                   undefined, so the next optimizer.step() leaves the
//                   parameters unchanged (optimizers skip undefined gradients) —
//                   a gradient scaler's skip, on every rank alike.
//   STOP            the backward throws an ls::Error with the same text, on every rank.
//   OFF             no scan.
// Not with a bucket-reduced hook (ZeRO's overlap), which has stepped by then.
// Cost: WARN counts in the pass that copies each gradient into its bucket anyway
// (copy_scaled_counting_non_finite); SKIP_STEP and STOP add one read of the
// averaged gradients (measured: docs/results/collective_checks.md).
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

// dst = src * scale (dst, src: (n)), and the number of NaN or +-Inf elements of
// src when `count` (else 0): DDP's copy of a gradient into its bucket slot, the
// division by the world size and the scan of step 1 of Note [Non-finite
// gradients] in one pass over memory (a float32 dst on the CPU from a float32 or
// bfloat16 src, converted in the same pass — Note [Gradient sinks]; other cases
// copy, scale and count one after the other, the reference path; a float32
// src of 12 MiB and more is written with non-temporal stores: Note [Large
// bucket copies stream past the cache] in nonfinite_check.cpp). dst may be src
// itself: the gradient scaled in place (Note [Copy-out by reference]).
int64_t copy_scaled_counting_non_finite(const Tensor& dst, const Tensor& src, double scale, bool count);

class NonFiniteCheck {
 public:
  NonFiniteCheck(NonFinitePolicy policy, std::vector<Tensor> params, std::vector<std::string> names, int rank);
  // Step 1's count for parameter `index`, taken while its gradient was copied
  // into its bucket (copy_scaled_counting_non_finite), so step 1 need not read
  // that gradient again.
  void record(size_t index, int64_t non_finite);
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
  std::vector<int64_t> recorded_;  // per parameter: record()'s count this backward, -1 if none
  std::string local_;  // step 1's finding ("" when none)
  bool local_known_ = false;
  int reports_ = 0;

  void report(const std::string& message);  // stderr, up to 20 lines a run
};

}  // namespace detail
}  // namespace lockstep::distributed
