// tests/distributed/test_ddp_grad_sink.cpp — Note [Gradient sinks]
// (autograd/accumulate_grad.h; DDP's side in distributed/ddp/reducer_grad_handover.cpp):
// in a synced backward DDP writes each incoming gradient straight into its bucket slot,
// a bf16 gradient of a float32 parameter converted in that pass. Training is bitwise
// what the plain copies give (LOCKSTEP_DDP_GRAD_SINKS=0 and
// LOCKSTEP_DDP_COPY_OUT_BY_REFERENCE=0), in float32 and
// under bf16 autocast, with bucket views too; the sink declines for a parameter with
// a user's post-accumulate-grad hook (which sees the unscaled local gradient), under
// static_graph, in no_sync and while .grad is defined. The fused bf16 copy is tested
// beside the float32 one in test_ddp_nonfinite.cpp.
// Read before: distributed/ddp/reducer_grad_handover.cpp, tests/distributed/test_ddp_copy_out_by_reference.cpp.
#include <doctest/doctest.h>

#include <cstdlib>

#include "core/autocast.h"
#include "tests/distributed/ddp_beyond_util.h"
#include "tests/support/multiprocess.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
using namespace std::chrono_literals;

namespace {

constexpr int64_t kPerRank = 4;
constexpr int kSteps = 3;

struct Run {
  std::vector<ls::Tensor> params;  // after the last step
  std::vector<ls::Tensor> grads;   // every step's averaged gradients
  std::vector<ls::Tensor> seen;    // what a user's hook on parameter 0 saw, each backward
  int64_t placed = 0;              // gradients the sinks placed
};

struct Setup {
  bool by_reference = true;
  bool autocast = false;
  bool user_hook = false;  // a post-accumulate-grad hook on parameter 0, before DDP's
  int sync_every = 1;      // micro-batches per step, the others under no_sync
  bool set_to_none = true;
  dist::DDPOptions options = dist::DDPOptions();
};

// TinyCNN trained kSteps optimizer steps, DDP built as `s` says.
Run train(const std::shared_ptr<dist::ProcessGroup>& pg, const Setup& s) {
  const int world = pg->size(), rank = pg->rank();
  auto [x, y] = ls::testing::image_data(kSteps * s.sync_every * world * kPerRank, 654);
  ls::manual_seed(0);
  auto model = std::make_shared<ls::testing::TinyCNN>();
  Run run;
  ls::autograd::HookHandle hook;
  if (s.user_hook) {
    hook = model->parameters()[0].register_post_accumulate_grad_hook(
        [&run](ls::Tensor& p) { run.seen.push_back(p.grad().clone()); });
  }
  ls::testing::ByReference env(s.by_reference);
  dist::DistributedDataParallel ddp(model, pg, dist::DDPOptions(s.options).bucket_cap_mb(0.002).first_bucket_mb(0.001));
  ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < kSteps * s.sync_every; ++step) {
    const int64_t chunk = step * world + rank;
    auto backward = [&] {
      ls::AutocastGuard amp(ls::kBFloat16, s.autocast);
      ls::Tensor loss = ls::cross_entropy(ddp.forward(ls::testing::chunk_rows(x, chunk, kPerRank)),
                                          ls::testing::chunk_rows(y, chunk, kPerRank));
      loss.backward();
    };
    if ((step + 1) % s.sync_every == 0) {
      backward();
      for (const ls::Tensor& g : ls::testing::grads_of(model->parameters())) run.grads.push_back(g.clone());
      opt.step();
      opt.zero_grad(s.set_to_none);
    } else {
      auto guard = ddp.no_sync();
      backward();
    }
  }
  hook.remove();
  run.params = ls::testing::clone_all(model->parameters());
  run.placed = ddp.reducer().gradients_placed();
  return run;
}

// Sets LOCKSTEP_DDP_GRAD_SINKS for the DDP modules built in its scope.
struct GradSinks {
  explicit GradSinks(bool on) { setenv("LOCKSTEP_DDP_GRAD_SINKS", on ? "1" : "0", 1); }
  ~GradSinks() { unsetenv("LOCKSTEP_DDP_GRAD_SINKS"); }
};

// Run `s` with the plain copies: neither sinks nor the copy back by reference.
Run train_plain(const std::shared_ptr<dist::ProcessGroup>& pg, Setup s) {
  GradSinks off(false);
  s.by_reference = false;
  return train(pg, s);
}

// Every step's gradients and the final parameters bitwise those of the plain copies.
void check_same_as_plain(const std::shared_ptr<dist::ProcessGroup>& pg, const Setup& s) {
  const Run plain = train_plain(pg, s);
  const Run sunk = train(pg, s);
  CHECK(plain.placed == 0);
  CHECK(ls::testing::all_equal(plain.params, sunk.params));
  CHECK(ls::testing::all_equal(plain.grads, sunk.grads));
  ls::testing::check_same_on_all_ranks(sunk.params, *pg);
}

}  // namespace

TEST_CASE("ddp gradient sinks: float32 and bf16 autocast training bitwise the plain copies'") {
  ls::testing::run_ranks(2, [](int) {
    auto pg = dist::init_process_group("gloo");
    const size_t n = ls::testing::TinyCNN().parameters().size();
    for (bool autocast : {false, true}) {
      CAPTURE(autocast);
      Setup s;
      s.autocast = autocast;
      check_same_as_plain(pg, s);
      // Every gradient of every synced backward went straight into its slot.
      CHECK(train(pg, s).placed == static_cast<int64_t>(n) * kSteps);
    }
    // With bucket views (no copy back at all) the sinks place too; zero_grad(false)
    // keeps .grad defined, so only the first backward places, later ones accumulate.
    Setup view;
    view.autocast = true;
    view.options = dist::DDPOptions().gradient_as_bucket_view(true);
    check_same_as_plain(pg, view);
    view.set_to_none = false;
    CHECK(train(pg, view).placed == static_cast<int64_t>(n));
  }, 180s);
}

TEST_CASE("ddp gradient sinks: no_sync micro-batches accumulate as before, the synced one places") {
  ls::testing::run_ranks(2, [](int) {
    auto pg = dist::init_process_group("gloo");
    Setup s;
    s.autocast = true;
    s.sync_every = 3;
    check_same_as_plain(pg, s);
    // .grad is defined after the no_sync backwards: nothing to place.
    CHECK(train(pg, s).placed == 0);
  }, 120s);
}

TEST_CASE("ddp gradient sinks: declined under a user's post-accumulate-grad hook and under static_graph") {
  ls::testing::run_ranks(2, [](int) {
    auto pg = dist::init_process_group("gloo");
    const size_t n = ls::testing::TinyCNN().parameters().size();
    Setup s;
    s.autocast = true;
    s.user_hook = true;
    check_same_as_plain(pg, s);
    // The hook saw this rank's own gradient, not grad / world, as without sinks.
    const Run plain = train_plain(pg, s);
    const Run sunk = train(pg, s);
    REQUIRE(sunk.seen.size() == static_cast<size_t>(kSteps));
    CHECK(ls::testing::all_equal(plain.seen, sunk.seen));
    CHECK(sunk.placed == static_cast<int64_t>(n - 1) * kSteps);  // every parameter but the hooked one

    Setup fixed;
    fixed.options = dist::DDPOptions().static_graph(true);
    check_same_as_plain(pg, fixed);
    CHECK(train(pg, fixed).placed == 0);
  }, 180s);
}
