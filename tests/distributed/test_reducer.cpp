// tests/distributed/test_reducer.cpp — the core Reducer (distributed/ddp/reducer.cpp)
// on its own, in one process, through a recording process group that stands in
// for the other ranks: buckets launch strictly in index order once full (Note
// [Bucket launch order]), a bucket waits for its pending count, each gradient
// enters its bucket divided by the world size, finalize copies the reduced
// bucket back into .grad (or .grad is the bucket, with bucket views), a
// registered comm hook gets the undivided sums, deterministic mode launches
// through its rank-ordered hook, and unused parameters (find_unused_parameters)
// are ready at once, reported by the bitmap and left untouched; with
// static_graph the first backward only counts and reduces in finalize. A
// Reducer plug-in is called at its moments only (Note [Reducer plug-ins]).
// Read before: distributed/ddp/reducer.h, distributed/ddp/reducer_launch.h.
#include <doctest/doctest.h>

#include <cstdlib>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "core/factory.h"
#include "distributed/ddp/reducer.h"
#include "distributed/ddp/reducer_plugin.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;

namespace {

// One collective as the Reducer issued it.
struct Call {
  std::string kind;            // "allreduce", "allgather", "broadcast"
  ls::ScalarType dtype;
  std::vector<double> values;  // the input, as issued
  int hooks_before = 0;        // the test's own hooks that had run (see Model)
};

// Rank 0 of a group of `size` whose other ranks are simulated: an allreduce
// multiplies the tensor by `sum_factor` (size: every rank held the same
// values), an allgather returns `size` copies of the input. Every Work is
// complete at once.
class RecordingGroup : public dist::ProcessGroup {
 public:
  RecordingGroup(int size, double sum_factor, const int* hooks_fired)
      : ProcessGroup(0, size), sum_factor_(sum_factor), hooks_fired_(hooks_fired) {}
  std::string backend_name() const override { return "recording"; }
  std::shared_ptr<dist::Work> allreduce(ls::Tensor& t, dist::ReduceOp) override {
    record("allreduce", t);
    ls::Tensor summed = t * sum_factor_;
    t.copy_(summed.to(t.dtype()));
    return done({t});
  }
  std::shared_ptr<dist::Work> broadcast(ls::Tensor& t, int) override {
    record("broadcast", t);
    return done({t});
  }
  std::shared_ptr<dist::Work> allgather(std::vector<ls::Tensor>& outputs, const ls::Tensor& input) override {
    record("allgather", input);
    outputs.clear();
    for (int r = 0; r < size(); ++r) outputs.push_back(input.clone());
    return done(outputs);
  }
  std::shared_ptr<dist::Work> reduce_scatter(ls::Tensor&, std::vector<ls::Tensor>&, dist::ReduceOp) override {
    throw ls::Error("RecordingGroup: reduce_scatter is not used by the Reducer");
  }
  std::shared_ptr<dist::Work> barrier() override { return done({}); }
  std::shared_ptr<dist::Work> send(const ls::Tensor&, int, int) override {
    throw ls::Error("RecordingGroup: send is not used by the Reducer");
  }
  std::shared_ptr<dist::Work> recv(ls::Tensor&, int, int) override {
    throw ls::Error("RecordingGroup: recv is not used by the Reducer");
  }

  // The collectives on gradients (float buckets); fingerprints and bitmaps are int64.
  std::vector<Call> bucket_calls() const {
    std::vector<Call> out;
    for (const Call& c : calls) {
      if (c.dtype == ls::kFloat32) out.push_back(c);
    }
    return out;
  }
  std::vector<Call> calls;

 private:
  void record(const char* kind, const ls::Tensor& t) {
    calls.push_back({kind, t.dtype(), t.to_vector<double>(), *hooks_fired_});
  }
  static std::shared_ptr<dist::Work> done(std::vector<ls::Tensor> result) {
    auto work = std::make_shared<dist::Work>("recording");
    work->mark_completed(std::move(result));
    return work;
  }
  double sum_factor_;
  const int* hooks_fired_;
};

// Three parameters of 1, 2 and 3 elements (so a bucket's size names it); the
// loss gives p_k the gradient k + 1 everywhere. The test's own hooks,
// registered after the Reducer's, record the order gradients became ready.
struct Model {
  std::vector<ls::Tensor> params;
  std::vector<std::string> names{"p0", "p1", "p2"};
  int hooks_fired = 0;
  std::vector<size_t> ready_order;
  std::vector<ls::autograd::HookHandle> handles;

  Model() {
    for (int64_t k = 0; k < 3; ++k) {
      ls::Tensor p = ls::zeros({k + 1});
      p.requires_grad_();
      params.push_back(p);
    }
  }
  void watch() {
    for (size_t k = 0; k < params.size(); ++k) {
      handles.push_back(params[k].register_post_accumulate_grad_hook([this, k](ls::Tensor&) {
        ++hooks_fired;
        ready_order.push_back(k);
      }));
    }
  }
  ~Model() {
    for (auto& h : handles) h.remove();
  }
  // Built last-to-first, so that p0's gradient is computed first (the engine
  // runs the newest nodes first): bucket 0 (p2, reverse registration order) fills last.
  // `use_p1` false leaves p1 out of the graph.
  ls::Tensor loss(bool use_p1 = true) const {
    ls::Tensor l = (params[2] * 3.0).sum();
    if (use_p1) l = l + (params[1] * 2.0).sum();
    return l + (params[0] * 1.0).sum();
  }
};

dist::DDPOptions one_bucket_per_parameter() { return dist::DDPOptions().bucket_cap_mb(0).first_bucket_mb(0); }

// A Reducer over a Model's parameters on a RecordingGroup of `world` ranks;
// the test's hooks are registered after the Reducer's, so they run after them.
struct Rig {
  Model model;
  std::shared_ptr<RecordingGroup> group;
  RecordingGroup& pg;
  dist::Reducer reducer;
  explicit Rig(const dist::DDPOptions& options, int world = 2, double sum_factor = 2.0)
      : group(std::make_shared<RecordingGroup>(world, sum_factor, &model.hooks_fired)), pg(*group),
        reducer(model.params, model.names, group, options) {
    model.watch();
  }
};

// Runs one synced iteration: forward (the loss), prepare_for_backward, backward.
void iterate(dist::Reducer& reducer, const Model& model, bool use_p1 = true) {
  reducer.check_previous_reduction_finished();
  reducer.begin_synced_forward(/*exchange_fingerprint=*/false);
  ls::Tensor loss = model.loss(use_p1);
  reducer.prepare_for_backward({loss});
  loss.backward();
}

std::vector<double> values(const ls::Tensor& t) { return t.to_vector<double>(); }

}  // namespace

TEST_CASE("reducer: buckets launch in index order, each when it and every bucket before it are full") {
  Rig rig(one_bucket_per_parameter());
  REQUIRE(rig.reducer.num_buckets() == 3);
  // Reverse registration order: bucket 0 holds p2, bucket 2 holds p0.
  CHECK(rig.reducer.buckets()[0].param_indices == std::vector<size_t>{2});
  CHECK(rig.reducer.buckets()[2].param_indices == std::vector<size_t>{0});
  iterate(rig.reducer, rig.model);
  REQUIRE(rig.model.ready_order.size() == 3);
  // The order this test is about: p0 (bucket 2) first, p2 (bucket 0) last.
  REQUIRE(rig.model.ready_order == std::vector<size_t>{0, 1, 2});
  const std::vector<Call> launches = rig.pg.bucket_calls();
  REQUIRE(launches.size() == 3);
  for (size_t b = 0; b < 3; ++b) {
    CHECK(launches[b].kind == "allreduce");
    CHECK(launches[b].values.size() == 3 - b);  // bucket b, in index order
    // Launched inside p2's hook (the test's hook for p2 had not run yet):
    // buckets 1 and 2 were full earlier but waited for bucket 0.
    CHECK(launches[b].hooks_before == 2);
  }
}

TEST_CASE("reducer: a bucket launches when its pending count reaches zero, or at finalize without overlap") {
  for (bool overlap : {true, false}) {
    CAPTURE(overlap);
    Rig rig(dist::DDPOptions().overlap(overlap));
    REQUIRE(rig.reducer.num_buckets() == 1);  // 6 floats: one bucket
    iterate(rig.reducer, rig.model);
    const std::vector<Call> launches = rig.pg.bucket_calls();
    REQUIRE(launches.size() == 1);
    CHECK(launches[0].values.size() == 6);
    // With overlap: inside the last gradient's hook (2 of the test's hooks had
    // run); without: in finalize_backward, after all 3.
    CHECK(launches[0].hooks_before == (overlap ? 2 : 3));
  }
}

TEST_CASE("reducer: gradients enter the bucket divided by the world size, finalize copies the result into .grad") {
  // 0: the plain copy-out; 1: by reference (the default; Note [Copy-out by reference]);
  // 2: gradient_as_bucket_view. In 1 and 2 .grad ends as its slot.
  for (int mode : {0, 1, 2}) {
    CAPTURE(mode);
    const bool as_view = mode == 2;
    // World of 4; the simulated sum is 10x this rank's bucket, as if the
    // other ranks' gradients differed, so .grad shows the copy-out.
    setenv("LOCKSTEP_DDP_COPY_OUT_BY_REFERENCE", mode == 0 ? "0" : "1", 1);
    Rig rig(one_bucket_per_parameter().gradient_as_bucket_view(as_view), 4, 10.0);
    unsetenv("LOCKSTEP_DDP_COPY_OUT_BY_REFERENCE");
    for (int step = 0; step < 2; ++step) {
      rig.pg.calls.clear();
      for (auto& p : rig.model.params) p.mutable_grad() = ls::Tensor();  // zero_grad(set_to_none)
      iterate(rig.reducer, rig.model);
      const std::vector<Call> launches = rig.pg.bucket_calls();
      REQUIRE(launches.size() == 3);
      // Bucket b holds p_(2-b), whose local gradient is 3 - b: issued as (3 - b) / 4.
      for (size_t b = 0; b < 3; ++b) {
        CHECK(launches[b].values == std::vector<double>(3 - b, (3.0 - b) / 4));
      }
      for (size_t k = 0; k < 3; ++k) {
        const ls::Tensor& grad = rig.model.params[k].grad();
        REQUIRE(grad.defined());
        CHECK(values(grad) == std::vector<double>(k + 1, (k + 1.0) / 4 * 10));
        const dist::Bucket& bucket = rig.reducer.buckets()[2 - k];
        CHECK((grad.impl()->storage == bucket.flat.impl()->storage) == (mode != 0));
      }
    }
  }
}

TEST_CASE("reducer: a registered comm hook gets the undivided local sums and its result reaches .grad") {
  Rig rig(one_bucket_per_parameter(), 4, 4.0);
  std::vector<size_t> hooked;
  std::vector<std::vector<double>> seen;
  rig.reducer.register_comm_hook([&](dist::GradBucket& bucket) {
    hooked.push_back(bucket.index());
    seen.push_back(values(bucket.buffer()));
    CHECK(bucket.divisor() == 4.0);
    return dist::TensorFuture::ready(bucket.buffer() * 0.5);  // any average the hook computes
  });
  CHECK(rig.reducer.has_comm_hook());
  iterate(rig.reducer, rig.model);
  CHECK(hooked == std::vector<size_t>{0, 1, 2});
  REQUIRE(seen.size() == 3);
  for (size_t b = 0; b < 3; ++b) CHECK(seen[b] == std::vector<double>(3 - b, 3.0 - b));
  CHECK(rig.pg.bucket_calls().empty());  // the hook issued nothing; DDP's AllReduce did not run
  for (size_t k = 0; k < 3; ++k) CHECK(values(rig.model.params[k].grad()) == std::vector<double>(k + 1, (k + 1.0) / 2));
  auto another = [](dist::GradBucket& b) { return dist::TensorFuture::ready(b.buffer()); };
  CHECK_THROWS_WITH_AS(rig.reducer.register_comm_hook(another), doctest::Contains("only once"), ls::Error);
}

TEST_CASE("reducer: deterministic mode launches every bucket as an allgather summed in rank order") {
  Rig rig(one_bucket_per_parameter().deterministic(true));
  iterate(rig.reducer, rig.model);
  const std::vector<Call> launches = rig.pg.bucket_calls();
  REQUIRE(launches.size() == 3);
  for (size_t b = 0; b < 3; ++b) {
    CHECK(launches[b].kind == "allgather");
    CHECK(launches[b].values == std::vector<double>(3 - b, (3.0 - b) / 2));
  }
  // Two identical ranks: the rank-ordered sum of grad / 2 is grad.
  for (size_t k = 0; k < 3; ++k) CHECK(values(rig.model.params[k].grad()) == std::vector<double>(k + 1, k + 1.0));
}

TEST_CASE("reducer: with find_unused_parameters an unused parameter is ready at once and keeps its .grad") {
  Rig rig(one_bucket_per_parameter().find_unused_parameters(true));
  CHECK(rig.reducer.forward_issues_collective());
  iterate(rig.reducer, rig.model, /*use_p1=*/false);
  // The bitmap went first, from prepare_for_backward (no hook had run): p1 unused here.
  REQUIRE_FALSE(rig.pg.calls.empty());
  CHECK(rig.pg.calls[0].kind == "allreduce");
  CHECK(rig.pg.calls[0].dtype == ls::kInt64);
  CHECK(rig.pg.calls[0].values == std::vector<double>{1, 0, 1});
  CHECK(rig.pg.calls[0].hooks_before == 0);
  CHECK(rig.reducer.bitmap_allreduces() == 1);
  // All three buckets were reduced (p1's holds zeros) in index order; p1 is
  // unused on every simulated rank, so its .grad stays undefined.
  const std::vector<Call> launches = rig.pg.bucket_calls();
  REQUIRE(launches.size() == 3);
  CHECK(launches[1].values == std::vector<double>{0, 0});
  CHECK_FALSE(rig.model.params[1].grad().defined());
  CHECK(values(rig.model.params[0].grad()) == std::vector<double>{1});
  CHECK(values(rig.model.params[2].grad()) == std::vector<double>(3, 3.0));
  rig.reducer.check_previous_reduction_finished();  // nothing left unreduced
}

TEST_CASE("reducer: without find_unused_parameters an unused parameter is named at the next forward") {
  Rig rig(one_bucket_per_parameter());
  CHECK_FALSE(rig.reducer.forward_issues_collective());
  iterate(rig.reducer, rig.model, /*use_p1=*/false);
  // Bucket 1 (p1) never filled, so bucket 2 could not launch either.
  CHECK(rig.pg.bucket_calls().size() == 1);
  CHECK_THROWS_WITH_AS(rig.reducer.check_previous_reduction_finished(), doctest::Contains("'p1'"), ls::Error);
}

TEST_CASE("reducer: with static_graph the first backward only counts, later ones launch during backward") {
  Rig rig(one_bucket_per_parameter().static_graph(true));
  CHECK_FALSE(rig.reducer.forward_issues_collective());
  for (int step = 0; step < 2; ++step) {
    CAPTURE(step);
    rig.pg.calls.clear();
    rig.model.hooks_fired = 0;
    for (auto& p : rig.model.params) p.mutable_grad() = ls::Tensor();
    iterate(rig.reducer, rig.model);
    CHECK(rig.reducer.static_graph_recorded());
    CHECK(rig.reducer.bitmap_allreduces() == 1);  // in the first backward only
    const std::vector<Call> launches = rig.pg.bucket_calls();
    REQUIRE(launches.size() == 3);
    for (size_t b = 0; b < 3; ++b) {
      CHECK(launches[b].values.size() == 3 - b);  // index order
      // The counting backward launches in finalize (all 3 hooks done); later
      // ones inside the last gradient's hook, as without static_graph.
      CHECK(launches[b].hooks_before == (step == 0 ? 3 : 2));
    }
    for (size_t k = 0; k < 3; ++k) CHECK(values(rig.model.params[k].grad()) == std::vector<double>(k + 1, k + 1.0));
  }
}

namespace {

// Records the Reducer's calls, reverses each bucket's parameters, and may
// replace DDP's AllReduce with `reduction`; otherwise it does what the
// Reducer does without a plug-in.
class RecordingPlugin : public dist::ReducerPlugin {
 public:
  RecordingPlugin(std::vector<std::string>& log, dist::CommHook reduction = nullptr)
      : log_(log), reduction_(std::move(reduction)) {}
  bool arrange(std::vector<dist::BucketSpec>& specs) const override {
    log_.push_back("arrange");
    for (dist::BucketSpec& spec : specs) std::reverse(spec.param_indices.begin(), spec.param_indices.end());
    return true;
  }
  dist::CommHook reduction() override { return reduction_; }
  void copy_in(size_t index, bool locally_unused, double scale) override {
    log_.push_back("copy_in " + std::to_string(index));
    ReducerPlugin::copy_in(index, locally_unused, scale);
  }
  void bucket_launched(size_t bucket) override { log_.push_back("launched " + std::to_string(bucket)); }
  void finalize_bucket(size_t bucket, const std::vector<int64_t>& global_used) override {
    log_.push_back("finalize " + std::to_string(bucket));
    ReducerPlugin::finalize_bucket(bucket, global_used);
  }

 private:
  std::vector<std::string>& log_;
  dist::CommHook reduction_;
};

}  // namespace

TEST_CASE("reducer: a plug-in arranges the buckets at attach and is called per gradient, launch and finalize") {
  Rig rig{dist::DDPOptions()};  // one bucket of 6 floats: p2, p1, p0
  REQUIRE(rig.reducer.buckets()[0].param_indices == std::vector<size_t>{2, 1, 0});
  CHECK_FALSE(rig.reducer.has_plugin());
  std::vector<std::string> log;
  rig.reducer.attach_plugin(std::make_unique<RecordingPlugin>(log));
  CHECK(rig.reducer.has_plugin());
  CHECK(rig.reducer.buckets()[0].param_indices == std::vector<size_t>{0, 1, 2});
  CHECK(log == std::vector<std::string>{"arrange"});
  log.clear();
  iterate(rig.reducer, rig.model);
  CHECK(log == std::vector<std::string>{"copy_in 0", "copy_in 1", "copy_in 2", "launched 0", "finalize 0"});
  // DDP's own AllReduce, in the new slot order: p0, p1, p2 divided by the world of 2.
  const std::vector<Call> launches = rig.pg.bucket_calls();
  REQUIRE(launches.size() == 1);
  CHECK(launches[0].values == std::vector<double>{0.5, 1, 1, 1.5, 1.5, 1.5});
  for (size_t k = 0; k < 3; ++k) CHECK(values(rig.model.params[k].grad()) == std::vector<double>(k + 1, k + 1.0));
  CHECK_THROWS_WITH_AS(rig.reducer.attach_plugin(std::make_unique<RecordingPlugin>(log)),
                       doctest::Contains("already attached"), ls::Error);
}

TEST_CASE("reducer: a plug-in's reduction replaces DDP's AllReduce, and a comm hook registered later replaces it") {
  const dist::CommHook triple = [](dist::GradBucket& bucket) {
    return dist::TensorFuture::ready(bucket.buffer() * 3.0);
  };
  for (bool hook_after : {false, true}) {
    CAPTURE(hook_after);
    Rig rig(one_bucket_per_parameter());
    std::vector<std::string> log;
    rig.reducer.attach_plugin(std::make_unique<RecordingPlugin>(log, triple));
    if (hook_after) {
      rig.reducer.register_comm_hook([](dist::GradBucket& bucket) { return dist::TensorFuture::ready(bucket.buffer()); });
    }
    iterate(rig.reducer, rig.model);
    CHECK(rig.pg.bucket_calls().empty());  // neither issues a collective
    for (size_t k = 0; k < 3; ++k) {
      // The plug-in's: grad / 2 * 3; the comm hook's: the undivided local gradient.
      CHECK(values(rig.model.params[k].grad()) == std::vector<double>(k + 1, hook_after ? k + 1.0 : (k + 1.0) * 1.5));
    }
  }
}
