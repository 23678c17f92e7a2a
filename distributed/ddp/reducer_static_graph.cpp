// distributed/ddp/reducer_static_graph.cpp — the readiness policy of
// DDPOptions().static_graph(true): count the readies once, AllReduce the
// used-parameter bitmap once (Note [Readiness policies] in reducer_readiness.h).
//
// § Note [Static graph]
// DDPOptions().static_graph(true) promises that every synced iteration uses the
// same parameters and the same graph (PyTorch's static_graph). Two things
// follow. (1) Unused parameters need finding once: no traversal after forward
// and no used-parameter bitmap per iteration — the first synced backward
// AllReduces the bitmap, and every later one marks the parameters this rank
// never produced as ready in prepare_for_backward and leaves the globally
// unused ones' .grad alone in finalize. (2) A gradient may become ready more
// than once in one backward: with activation checkpointing (autograd/
// checkpoint.h) a block checkpointed twice accumulates its parameters' .grad in
// two nested backwards (Note [Checkpoint and gradient hooks]). Copying the
// first partial sum into the bucket would reduce a wrong value, so DDP must
// know how many readies to wait for. The first synced backward therefore only
// counts each parameter's hook calls and reduces nothing while backward runs;
// finalize_backward records the counts as the expected ones, AllReduces the
// bitmap, copies every gradient in and launches all buckets (no overlap in
// that one iteration). It marks the parameters ready in the order of their
// LAST readies, which is the order the bucket rebuild records (Note [Bucket
// rebuild from the traced order]). From the second synced backward on, a
// parameter is marked ready on its expected count, so buckets launch during
// backward as usual. Unlike graph traversal, counting sees the parameters
// hidden inside checkpointed functions. A parameter that becomes ready more
// often than in the first iteration is an error (the graph was not static);
// fewer, the usual unfinished-reduction error at the next forward. Under
// join() a rank that never trained mirrors the first iteration's bitmap and
// learns the used set from it (reducer_join.cpp).
// Read before: distributed/ddp/reducer_readiness.cpp. Read next:
// distributed/ddp/reducer_buckets.cpp.
#include <algorithm>

#include "distributed/ddp/reducer_readiness.h"

namespace lockstep::distributed {

namespace {

class StaticGraphReadiness final : public ReadinessPolicy {
 public:
  StaticGraphReadiness(std::vector<std::string> names, ProcessGroup& process_group)
      : names_(std::move(names)), process_group_(process_group), used_(names_.size()),
        ready_count_(names_.size(), 0), last_ready_at_(names_.size(), 0) {}

  // No traversal: the parameters this rank never produces are ready at once.
  std::vector<size_t> prepare(const std::vector<Tensor>&) override {
    std::fill(ready_count_.begin(), ready_count_.end(), 0);
    std::vector<size_t> unused;
    if (!counted_) return unused;  // the counting backward reduces everything at its end
    for (size_t i = 0; i < names_.size(); ++i) {
      if (expected_ready_[i] == 0) unused.push_back(i);
    }
    return unused;
  }

  // Hooks (no_sync ones too) feed the first bitmap; later, DETAIL logging.
  void record_use(size_t index) override { used_.mark(index); }

  bool ready_on_hook(size_t index) override {
    const int count = ++ready_count_[index];
    last_ready_at_[index] = ++ready_clock_;
    if (!counted_) return false;
    if (count > expected_ready_[index]) {
      throw Error(lockstep::detail::str(
          "DDP (rank ", process_group_.rank(), "): parameter '", names_[index], "' became ready ", count,
          " times in this backward but ", expected_ready_[index], " times in the first one; "
          "DDPOptions().static_graph(true) requires every iteration to use the same parameters the same "
          "number of times. Drop static_graph (and use find_unused_parameters) for a graph that changes"));
    }
    return count == expected_ready_[index];
  }

  // The counting backward ends: record the counts, start the one bitmap, and
  // mark every parameter ready, those produced in the order of their last readies.
  std::vector<Late> at_finalize() override {
    if (counted_) return {};
    std::vector<size_t> produced;
    std::vector<Late> late;
    for (size_t i = 0; i < names_.size(); ++i) {
      if (ready_count_[i] > 0) {
        produced.push_back(i);
      } else {
        late.push_back({i, /*locally_unused=*/true});
      }
    }
    std::sort(produced.begin(), produced.end(),
              [&](size_t a, size_t b) { return last_ready_at_[a] < last_ready_at_[b]; });
    if (!used_known_) used_.start(process_group_);  // includes the no_sync iterations before
    expected_ready_ = ready_count_;
    counted_ = true;
    std::vector<Late> out;
    for (size_t i : produced) out.push_back({i, false});
    out.insert(out.end(), late.begin(), late.end());
    return out;
  }

  // The first bitmap decides for every later iteration.
  std::vector<int64_t> globally_used(const BitmapWait& wait) override {
    std::vector<int64_t> used = used_.wait(wait);
    if (!used_known_) global_used_ = std::move(used);
    used_known_ = true;
    return global_used_;
  }
  void backward_finished() override { used_.clear(); }

  bool tracks_unused() const override { return true; }
  std::vector<int64_t> locally_used() const override { return used_.local(); }
  // The others' counting backward AllReduces the bitmap at its end, before the
  // buckets; a joined rank learns the used set from it.
  void shadow_after_fingerprint() override {
    if (!used_known_) used_.start(process_group_, /*zeros=*/true);
  }
  void shadow_wait(const BitmapWait& wait) override {
    if (!used_.in_flight()) return;
    global_used_ = used_.wait(wait);
    used_known_ = true;
  }
  int64_t bitmap_allreduces() const override { return used_.allreduces(); }
  bool counted() const override { return counted_; }
  std::string unfinished_hint() const override {
    return ". With static_graph(true), every iteration must produce the gradients the first one did, as many "
           "times (Note [Static graph])";
  }

 private:
  std::vector<std::string> names_;
  ProcessGroup& process_group_;
  UsedBitmap used_;
  std::vector<int> ready_count_;     // readies per parameter in this backward
  std::vector<int> expected_ready_;  // ... in the counting one (expected from then on)
  std::vector<uint64_t> last_ready_at_;
  uint64_t ready_clock_ = 0;
  bool counted_ = false;     // expected_ready_ is known
  bool used_known_ = false;  // global_used_ is known
  std::vector<int64_t> global_used_;
};

}  // namespace

std::unique_ptr<ReadinessPolicy> make_static_graph_readiness(std::vector<std::string> names,
                                                             ProcessGroup& process_group) {
  return std::make_unique<StaticGraphReadiness>(std::move(names), process_group);
}

}  // namespace lockstep::distributed
