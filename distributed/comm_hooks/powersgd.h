// distributed/comm_hooks/powersgd.h — PowerSGD gradient compression (Vogels et
// al., NeurIPS 2019; PyTorch's powerSGD_hook) as a DDP communication hook.
//
//   auto state = std::make_shared<comm_hooks::PowerSGDState>(
//       pg, comm_hooks::PowerSGDOptions().matrix_approximation_rank(2).start_powersgd_iter(10));
//   ddp.register_comm_hook(state, comm_hooks::powersgd_hook);
//
// § Note [PowerSGD]
// Each gradient of a bucket with more than one dimension is viewed as a matrix
// M (n = size(0), m = the rest) and sent as two thin factors instead of n*m
// numbers: with Q (m, r), one step of power iteration gives
//   P = M Q            (n, r)   AllReduced (SUM), then orthonormalised (Gram-Schmidt)
//   Q = M^T P          (m, r)   AllReduced (SUM), divided by bucket.divisor()
//   M ~ P Q^T          the average of the ranks' M, projected on span(P).
// Rank r = min(matrix_approximation_rank, n, m); a matrix is compressed only
// when (n + m) r * min_compression_rate < n m, otherwise — and for every 1-d
// gradient (biases, norms) — it goes in one flat uncompressed AllReduce, as in
// PyTorch. Warm start: Q is kept from the previous iteration (re-orthonormalised)
// instead of drawn afresh, so the power iteration continues across steps.
// Random Q are drawn from random_seed and a counter every rank advances alike,
// so all ranks draw the same. Error feedback: the bucket sent is local
// gradients + the error memorised last time for this bucket, and the new error
// is what went in minus what came back (PyTorch's definition; summed over ranks
// it is world x the compression error of the average). State (error, P, Q) is
// kept per bucket index and reset when a bucket's parameters change (after the
// bucket rebuild, Note [Bucket rebuild from the traced order]). For the first
// start_powersgd_iter backward passes the hook is a plain allreduce_hook
// (PyTorch's default, 1000: compression works better from a trained start).
// Collectives per bucket: uncompressed and P AllReduces start in the hook (in
// backward); the Q AllReduce starts in finalize (Note [Continuations run on
// the waiting thread]).
// Orthogonalisation, unlike PyTorch's single Gram-Schmidt pass: each column is
// orthogonalised twice against the previous ones, and a column left with less
// than 1e-4 (float64: 1e-10) of its norm is numerically dependent and is zeroed
// rather than normalised. This matters when a gradient's rank is below r (a
// classifier's weight gradient under cross-entropy has rank <= classes - 1):
// normalising the leftover rounding noise would add a random direction to the
// result (measured: 1.7e-2 parameter error after 3 steps at "full" rank; with
// the zeroing, 4e-8). A warm-start Q with a zero column is drawn afresh.
// Read before: distributed/comm_hooks/default_hooks.h. Read next: distributed/ddp/reducer.h.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "distributed/ddp/comm_hook.h"
#include "distributed/process_group/process_group.h"

namespace lockstep::distributed::comm_hooks {

class PowerSGDOptions {
 public:
  PowerSGDOptions& matrix_approximation_rank(int64_t v) { rank_ = v; return *this; }
  PowerSGDOptions& start_powersgd_iter(int64_t v) { start_iter_ = v; return *this; }
  PowerSGDOptions& min_compression_rate(double v) { min_compression_rate_ = v; return *this; }
  PowerSGDOptions& use_error_feedback(bool v) { use_error_feedback_ = v; return *this; }
  PowerSGDOptions& warm_start(bool v) { warm_start_ = v; return *this; }
  PowerSGDOptions& orthogonalization_epsilon(double v) { epsilon_ = v; return *this; }
  PowerSGDOptions& random_seed(uint64_t v) { seed_ = v; return *this; }

  int64_t matrix_approximation_rank() const { return rank_; }
  int64_t start_powersgd_iter() const { return start_iter_; }
  double min_compression_rate() const { return min_compression_rate_; }
  bool use_error_feedback() const { return use_error_feedback_; }
  bool warm_start() const { return warm_start_; }
  double orthogonalization_epsilon() const { return epsilon_; }
  uint64_t random_seed() const { return seed_; }

 private:
  int64_t rank_ = 1;
  int64_t start_iter_ = 1000;
  double min_compression_rate_ = 2.0;
  bool use_error_feedback_ = true;
  bool warm_start_ = true;
  double epsilon_ = 0.0;
  uint64_t seed_ = 0;
};

class PowerSGDState {
 public:
  PowerSGDState(std::shared_ptr<ProcessGroup> process_group, PowerSGDOptions options = PowerSGDOptions());

  ProcessGroup& process_group() const { return *process_group_; }
  const PowerSGDOptions& options() const { return options_; }
  // Backward passes seen so far (advanced by the last bucket of each).
  int64_t iteration() const { return iteration_; }
  // Error feedback memorised for bucket `index` (undefined before PowerSGD compressed it).
  Tensor error(size_t index) const;
  // How many buckets compressed at least one matrix in the last backward.
  int64_t compressed_buckets() const;

  // Per bucket index (used by powersgd_hook).
  struct BucketMemory {
    std::vector<size_t> parameter_indices;  // the layout this memory belongs to
    Tensor error;                           // (bucket numel)
    Tensor p, q;                            // all P (sum n r) and Q (sum m r) of the bucket, packed
    bool q_valid = false;                   // q holds last iteration's Q (warm start)
    bool compressed = false;                // compressed a matrix last time
  };
  BucketMemory& memory(const GradBucket& bucket);
  void advance(const GradBucket& bucket);     // after the last bucket of a backward
  uint64_t next_random_stream() { return draws_++; }

 private:
  std::shared_ptr<ProcessGroup> process_group_;
  PowerSGDOptions options_;
  int64_t iteration_ = 0;
  uint64_t draws_ = 0;
  std::map<size_t, BucketMemory> memory_;
};

TensorFuture powersgd_hook(PowerSGDState& state, GradBucket& bucket);

namespace detail {
// Gram-Schmidt on the columns of `matrix` (n, r), contiguous float32/float64,
// in place (twice per column; dependent columns zeroed; epsilon is added to
// each norm before dividing). See Note [PowerSGD].
void orthogonalize(Tensor& matrix, double epsilon);
// Whether some column of `matrix` (n, r) is all zeros.
bool has_zero_column(const Tensor& matrix);
}  // namespace detail

}  // namespace lockstep::distributed::comm_hooks
