// tests/distributed/test_ddp_static_graph.cpp — DDPOptions().static_graph(true)
// (Note [Static graph], distributed/ddp/reducer_static_graph.cpp): with find_unused_parameters it
// trains like one process while issuing the used-parameter bitmap AllReduce in
// the first synced iteration only (counted on a wrapping process group and by
// the Reducer); with a block checkpointed twice (autograd/checkpoint.h), whose
// parameters become ready twice per backward, it gives the averaged gradients
// of plain training, also one bucket per parameter and with bucket views;
// without static_graph that model is a clear error; under join() a rank
// without inputs mirrors the first iteration's bitmap (reducer_join.cpp).
// Read before: distributed/ddp/reducer_static_graph.cpp, autograd/checkpoint.h,
// tests/distributed/ddp_beyond_util.h.
#include <doctest/doctest.h>

#include "autograd/checkpoint.h"
#include "tests/distributed/ddp_beyond_util.h"
#include "tests/support/multiprocess.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
using ls::testing::BranchyMLP;

namespace {

constexpr int kSteps = 3;
constexpr int64_t kPerRank = 4;
constexpr double kTolerance = 2e-5;

// fc1, then `block` twice (checkpointed or not), then fc2: (B, 6) -> (B, 3).
struct TwiceBlockMLP : ls::nn::Module {
  std::shared_ptr<ls::nn::Linear> fc1, block, fc2;
  bool checkpointed = true;
  TwiceBlockMLP() {
    fc1 = register_module("fc1", std::make_shared<ls::nn::Linear>(6, 8));
    block = register_module("block", std::make_shared<ls::nn::Linear>(8, 8));
    fc2 = register_module("fc2", std::make_shared<ls::nn::Linear>(8, 3));
  }
  ls::Tensor forward(const ls::Tensor& x) {
    ls::Tensor h = fc1->forward(x).relu();  // (B, 8)
    auto step = [this](const std::vector<ls::Tensor>& in) { return block->forward(in[0]).tanh(); };
    for (int k = 0; k < 2; ++k) h = checkpointed ? ls::autograd::checkpoint(step, {h}) : step({h});  // (B, 8)
    return fc2->forward(h);  // (B, 3)
  }
};

struct Data {
  ls::Tensor x, y;
};

Data make_data(int world) {
  ls::manual_seed(55);
  return {ls::randn({kSteps * world * kPerRank, 6}), ls::randint(0, 3, {kSteps * world * kPerRank})};
}

// The local reference: every step, `world` chunks with loss / world.
template <class M, class Fwd>
std::vector<ls::Tensor> train_locally(int world, const Data& d, Fwd fwd) {
  ls::manual_seed(0);
  auto model = std::make_shared<M>();
  ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < kSteps; ++step) {
    for (int r = 0; r < world; ++r) {
      const int64_t chunk = step * world + r;
      (ls::cross_entropy(fwd(*model, ls::testing::chunk_rows(d.x, chunk, kPerRank), r),
                         ls::testing::chunk_rows(d.y, chunk, kPerRank)) / static_cast<double>(world)).backward();
    }
    opt.step();
    opt.zero_grad();
  }
  return ls::testing::clone_all(model->parameters());
}

}  // namespace

TEST_CASE("ddp static_graph: find_unused training equals one process and reduces the bitmap once") {
  ls::testing::run_ranks(2, [](int rank) {
    const int world = 2;
    const Data d = make_data(world);
    // Rank 1 always uses the side branch, rank 0 never: side is locally unused
    // on rank 0 only, the same every iteration (a static graph per rank).
    auto uses_side = [](int r) { return r == 1; };
    const auto reference = train_locally<BranchyMLP>(
        world, d, [&](BranchyMLP& m, const ls::Tensor& x, int r) { return m.forward(x, uses_side(r)); });
    auto pg = dist::init_process_group("gloo");
    for (bool static_graph : {true, false}) {
      CAPTURE(static_graph);
      int unused_counter = 0;
      auto recording = std::make_shared<ls::testing::LaunchRecordingGroup>(pg, &unused_counter);
      ls::manual_seed(0);
      auto model = std::make_shared<BranchyMLP>();
      dist::DistributedDataParallel ddp(
          model, recording,
          dist::DDPOptions().bucket_cap_mb(0).find_unused_parameters(true).static_graph(static_graph));
      ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(0.1).momentum(0.9));
      std::vector<size_t> allreduces;  // per iteration
      for (int step = 0; step < kSteps; ++step) {
        const size_t before = recording->grads_ready_at_launch.size();
        const int64_t chunk = step * world + rank;
        ls::cross_entropy(ddp.forward(ls::testing::chunk_rows(d.x, chunk, kPerRank), uses_side(rank)),
                          ls::testing::chunk_rows(d.y, chunk, kPerRank)).backward();
        allreduces.push_back(recording->grads_ready_at_launch.size() - before);
        opt.step();
        opt.zero_grad();
      }
      const auto params = ls::testing::clone_all(model->parameters());
      CHECK(ls::testing::max_abs_diff(params, reference) < kTolerance);
      ls::testing::check_same_on_all_ranks(params, *recording);
      const size_t buckets = ddp.reducer().num_buckets();
      CHECK(buckets == model->parameters().size());  // bucket_cap_mb(0): one per parameter
      if (static_graph) {
        CHECK(ddp.reducer().static_graph_recorded());
        CHECK(ddp.reducer().bitmap_allreduces() == 1);
        CHECK(allreduces == std::vector<size_t>{buckets + 1, buckets, buckets});
      } else {
        CHECK(ddp.reducer().bitmap_allreduces() == kSteps);
        CHECK(allreduces == std::vector<size_t>(kSteps, buckets + 1));
      }
    }
  });
}

TEST_CASE("ddp static_graph: a block checkpointed twice gets the averaged gradients of plain training") {
  ls::testing::run_ranks(2, [](int rank) {
    const int world = 2;
    const Data d = make_data(world);
    // Reference without checkpointing: plain autograd, one ready per parameter.
    const auto reference = train_locally<TwiceBlockMLP>(world, d, [](TwiceBlockMLP& m, const ls::Tensor& x, int) {
      m.checkpointed = false;
      return m.forward(x);
    });
    const std::vector<dist::DDPOptions> variants = {
        dist::DDPOptions().static_graph(true),
        dist::DDPOptions().static_graph(true).bucket_cap_mb(0).first_bucket_mb(0),
        dist::DDPOptions().static_graph(true).bucket_cap_mb(0).first_bucket_mb(0).gradient_as_bucket_view(true),
        dist::DDPOptions().static_graph(true).find_unused_parameters(true).bucket_cap_mb(0.0005),
    };
    auto pg = dist::init_process_group("gloo");
    for (size_t v = 0; v < variants.size(); ++v) {
      CAPTURE(v);
      ls::manual_seed(0);
      auto model = std::make_shared<TwiceBlockMLP>();
      dist::DistributedDataParallel ddp(model, pg, variants[v]);
      ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(0.1).momentum(0.9));
      int block_readies = 0;
      auto handle = model->block->weight.register_post_accumulate_grad_hook([&](ls::Tensor&) { ++block_readies; });
      for (int step = 0; step < kSteps; ++step) {
        const int64_t chunk = step * world + rank;
        ls::cross_entropy(ddp.forward(ls::testing::chunk_rows(d.x, chunk, kPerRank)),
                          ls::testing::chunk_rows(d.y, chunk, kPerRank)).backward();
        opt.step();
        opt.zero_grad();
      }
      handle.remove();
      CHECK(block_readies == 2 * kSteps);  // the case static_graph exists for
      const auto params = ls::testing::clone_all(model->parameters());
      CHECK(ls::testing::max_abs_diff(params, reference) < kTolerance);
      ls::testing::check_same_on_all_ranks(params, *pg);
    }
  });
}

TEST_CASE("ddp static_graph: without it, a gradient ready twice is an error naming the fix") {
  ls::testing::run_ranks(2, [](int rank) {
    const Data d = make_data(2);
    auto pg = dist::init_process_group("gloo");
    ls::manual_seed(0);
    auto model = std::make_shared<TwiceBlockMLP>();
    dist::DistributedDataParallel ddp(model, pg, dist::DDPOptions().bucket_cap_mb(0));
    ls::Tensor loss = ls::cross_entropy(ddp.forward(ls::testing::chunk_rows(d.x, rank, kPerRank)),
                                        ls::testing::chunk_rows(d.y, rank, kPerRank));
    CHECK_THROWS_WITH_AS(loss.backward(), doctest::Contains("received a gradient twice"), ls::Error);
    // The next forward refuses to continue rather than train on wrong gradients.
    CHECK_THROWS_WITH_AS(ddp.forward(ls::testing::chunk_rows(d.x, rank, kPerRank)),
                         doctest::Contains("static_graph(true)"), ls::Error);
  });
}

TEST_CASE("ddp static_graph: under join() a rank with no inputs shadows the first iteration's bitmap") {
  ls::testing::run_ranks(2, [](int rank) {
    const Data d = make_data(2);
    auto pg = dist::init_process_group("gloo");
    // Rank 1 has no batches at all: it joins at once and mirrors rank 0's first
    // (counting) backward, bitmap included, then the later ones without it.
    auto train = [&](bool static_graph) {
      ls::manual_seed(0);
      auto model = std::make_shared<BranchyMLP>();
      dist::DistributedDataParallel ddp(
          model, pg, dist::DDPOptions().bucket_cap_mb(0).find_unused_parameters(true).static_graph(static_graph));
      ls::optim::SGD opt(model->parameters(), ls::optim::SGDOptions(0.1).momentum(0.9));
      const int batches = rank == 0 ? kSteps : 0;
      ddp.join([&] {
        for (int step = 0; step < batches; ++step) {
          ls::cross_entropy(ddp.forward(ls::testing::chunk_rows(d.x, step, kPerRank), /*use_side=*/false),
                            ls::testing::chunk_rows(d.y, step, kPerRank)).backward();
          opt.step();
          opt.zero_grad();
        }
      });
      CHECK(ddp.reducer().bitmap_allreduces() == (static_graph ? 1 : kSteps));
      return ls::testing::clone_all(model->parameters());
    };
    const auto with_static = train(true);
    CHECK(ls::testing::all_equal(with_static, train(false)));
    ls::testing::check_same_on_all_ranks(with_static, *pg);
  });
}
