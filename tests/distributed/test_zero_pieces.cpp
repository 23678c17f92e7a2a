// tests/distributed/test_zero_pieces.cpp — a bucket handed to the bucket-reduced
// hook while its reduction still arrives in pieces (Note [Handing a bucket over
// in pieces], distributed/zero/bucket_handover_pieces.cpp), and ZeRO stepping each
// piece as it arrives, with its broadcasts on a group of their own (Note [ZeRO
// broadcast group]): the gradients and parameters of plain DDP, bitwise.
// Read before: distributed/ddp/reducer.h, tests/distributed/zero_test_util.h.
#include <doctest/doctest.h>

#include "distributed/process_group/process_group_gloo.h"
#include "distributed/store/prefix_store.h"
#include "tests/distributed/zero_test_util.h"
#include "tests/support/multiprocess.h"

namespace ls = lockstep;
namespace dist = lockstep::distributed;
using namespace std::chrono_literals;
using ls::testing::ZeroMode;
using ls::testing::ZeroRun;

namespace {

std::shared_ptr<ls::testing::TanhMLP> wide() { return std::make_shared<ls::testing::TanhMLP>(32, 40, 3); }

// A second Gloo group over the same ranks, for the broadcasts.
std::shared_ptr<dist::ProcessGroup> second_group(const dist::ProcessGroup& pg, const std::string& prefix) {
  return std::make_shared<dist::ProcessGroupGloo>(std::make_shared<dist::PrefixStore>(prefix, pg.store()), pg.rank(),
                                                  pg.size());
}

}  // namespace

TEST_CASE("reducer: a hook registered with a piece size gets each bucket while it is reduced in pieces, "
          "wait(k, end) fills .grad up to end with plain DDP's averages") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo");
    const ls::Tensor x = [&] { ls::manual_seed(10 + rank); return ls::randn({5, 32}); }();
    // Plain DDP: the averaged gradients to expect.
    ls::manual_seed(0);
    auto ref_model = wide();
    dist::DistributedDataParallel ref(ref_model, pg);
    ref.forward(x).pow(2).mean().backward();
    std::vector<ls::Tensor> expected;
    for (auto& p : ref_model->parameters()) expected.push_back(p.grad().clone().reshape({-1}));

    ls::manual_seed(0);
    auto model = wide();
    dist::DistributedDataParallel ddp(model, pg);
    const std::vector<ls::Tensor> params = model->parameters();
    size_t most_pieces = 0;
    int prefixes_checked = 0;
    const dist::BucketHandover* handover = nullptr;  // the plug-in, which keeps each bucket's pieces
    handover = &dist::register_bucket_reduced_hook(ddp, [&](size_t bucket, const std::vector<size_t>& indices,
                                                            const dist::BucketHandover::GradientWait& wait) {
      most_pieces = std::max(most_pieces, handover->pieces(bucket).size());
      for (size_t k = 0; k < indices.size(); ++k) {
        const int64_t n = params[indices[k]].numel();
        for (int64_t end : {int64_t{1}, n / 2, n}) {
          wait(k, end);
          const ls::Tensor got = params[indices[k]].grad().reshape({-1}).narrow(0, 0, end);
          CHECK(ls::testing::all_equal({got}, {expected[indices[k]].narrow(0, 0, end)}));
          ++prefixes_checked;
        }
      }
    }, /*piece_bytes=*/1024);  // 256 floats: fc1.weight's 1280 elements in 5 pieces
    ddp.forward(x).pow(2).mean().backward();
    CHECK(most_pieces >= 5);
    CHECK(prefixes_checked == 3 * static_cast<int>(params.size()));
    std::vector<ls::Tensor> grads;
    for (auto& p : params) grads.push_back(p.grad().reshape({-1}));
    CHECK(ls::testing::all_equal(grads, expected));

    // A wait outside the bucket is refused, naming it; DDP stops after a failing hook.
    ls::manual_seed(0);
    auto other = wide();
    dist::DistributedDataParallel bad(other, pg);
    dist::register_bucket_reduced_hook(bad, [](size_t, const std::vector<size_t>& indices,
                                               const dist::BucketHandover::GradientWait& wait) {
      wait(indices.size(), 1);
    }, 1024);
    CHECK_THROWS_WITH_AS(bad.forward(x).pow(2).mean().backward(), doctest::Contains("a bucket-reduced hook waited for"),
                         ls::Error);
  }, 60s);
}

TEST_CASE("zero hand-over in pieces: 2 ranks, overlap and ZeRO-2, whole and split parameters, on the group made "
          "for the broadcasts, on one given, and on the shared group, with gradient views, equal plain DDP bitwise") {
  ls::testing::run_ranks(2, [](int) {
    auto pg = dist::init_process_group("gloo");
    auto given = second_group(*pg, "zero_broadcasts");
    for (double split_mb : {0.0, 0.001}) {
      for (int group = 0; group < 3; ++group) {  // made by the optimizer, given, shared
        CAPTURE(split_mb);
        CAPTURE(group);
        ZeroRun run;
        run.split_mb = split_mb;
        run.zero_options = [&](dist::ZeroOptions& zo) {
          zo.broadcast_piece_mb(0.001);  // 256 floats: TinyCNN's fc.weight (640) reduced and stepped in 3 pieces
          zo.hand_over_in_pieces(true);  // also on the shared group (off there by default)
          if (group == 1) zo.broadcast_group(given);
          if (group == 2) zo.own_broadcast_group(false);
        };
        ls::testing::check_equals_plain(pg, run, {ZeroMode::Overlap, ZeroMode::Zero2});
      }
    }
    // Gradients as bucket views: the pieces arrive in .grad itself (ZeRO-1 only; ZeRO-2 refuses views).
    ZeroRun views;
    views.ddp = dist::DDPOptions().bucket_cap_mb(0.002).gradient_as_bucket_view(true);
    views.zero_options = [](dist::ZeroOptions& zo) { zo.broadcast_piece_mb(0.001); };
    ls::testing::check_equals_plain(pg, views, {ZeroMode::Overlap});
    // Without the overlap: step() steps in pieces and broadcasts on the given group.
    ZeroRun plain_step;
    plain_step.zero_options = [&](dist::ZeroOptions& zo) { zo.broadcast_piece_mb(0.001).broadcast_group(given); };
    ls::testing::check_equals_plain(pg, plain_step, {ZeroMode::Zero});
  }, 120s);
}

TEST_CASE("zero hand-over in pieces: 4 ranks, SGD and AdamW, overlap and ZeRO-2 by default (their own broadcast "
          "group, pieces), equal plain DDP (ZeRO-2 within 1e-6)") {
  ls::testing::run_ranks(4, [](int) {
    auto pg = dist::init_process_group("gloo");
    for (auto opt : {ls::testing::ZeroOpt::SGD, ls::testing::ZeroOpt::AdamW}) {
      ZeroRun run;
      run.opt = opt;
      run.zero_options = [](dist::ZeroOptions& zo) { zo.broadcast_piece_mb(0.001); };
      ls::testing::check_equals_plain(pg, run, {ZeroMode::Overlap, ZeroMode::Zero2});
    }
  }, 120s);
}

TEST_CASE("zero broadcast group: made with the overlap on Gloo, pieces on by default with it, parameters above "
          "32 MB split by default with the overlap only, a group of another size is refused, naming both") {
  ls::testing::run_ranks(2, [](int rank) {
    auto pg = dist::init_process_group("gloo");
    auto model = wide();
    const auto adamw = ls::optim::AdamWOptions(1e-3);
    CHECK_FALSE(dist::ZeroOptions().hand_over_in_pieces().has_value());
    CHECK_FALSE(dist::ZeroOptions().split_parameters_mb().has_value());
    {
      dist::ZeroRedundancyOptimizer overlapped(model->parameters(), pg, adamw, dist::ZeroOptions().overlap_with_ddp(true));
      CHECK(overlapped.has_own_broadcast_group());
      CHECK(&overlapped.broadcast_group() != pg.get());
      CHECK(overlapped.broadcast_group().size() == 2);
      CHECK(overlapped.hands_over_in_pieces());
      CHECK(overlapped.split_parameters_mb() == dist::ZeroOptions::kAutoSplitMB);
    }
    {
      // Note [ZeRO split parameters]: one parameter just above 32 MB (and a bias) is split
      // by default with the overlap, dealt whole without it or when told 0.
      auto big = ls::zeros({(32 << 20) / 4 + 64}).requires_grad_(true);  // (8388672), 32 MB + 256 bytes
      auto bias = ls::zeros({16}).requires_grad_(true);                  // (16)
      const auto overlap = dist::ZeroOptions().overlap_with_ddp(true).own_broadcast_group(false);
      dist::ZeroRedundancyOptimizer split(std::vector<ls::Tensor>{big, bias}, pg, adamw, overlap);
      CHECK(split.owner(0) == dist::kEveryRank);
      CHECK(split.owner(1) != dist::kEveryRank);
      dist::ZeroRedundancyOptimizer whole(std::vector<ls::Tensor>{big, bias}, pg, adamw,
                                          dist::ZeroOptions(overlap).split_parameters_mb(0));
      CHECK(whole.owner(0) != dist::kEveryRank);
      CHECK(whole.split_parameters_mb() == 0);
      dist::ZeroRedundancyOptimizer plain(std::vector<ls::Tensor>{big, bias}, pg, adamw);
      CHECK(plain.owner(0) != dist::kEveryRank);
      CHECK(plain.split_parameters_mb() == 0);
    }
    {
      dist::ZeroRedundancyOptimizer shared(model->parameters(), pg, adamw,
                                           dist::ZeroOptions().overlap_with_ddp(true).own_broadcast_group(false));
      CHECK_FALSE(shared.has_own_broadcast_group());
      CHECK_FALSE(shared.hands_over_in_pieces());
      dist::ZeroRedundancyOptimizer forced(
          model->parameters(), pg, adamw,
          dist::ZeroOptions().overlap_with_ddp(true).own_broadcast_group(false).hand_over_in_pieces(true));
      CHECK(forced.hands_over_in_pieces());
      dist::ZeroRedundancyOptimizer not_overlapped(model->parameters(), pg, adamw);
      CHECK_FALSE(not_overlapped.has_own_broadcast_group());
      CHECK_FALSE(not_overlapped.hands_over_in_pieces());
    }
    auto store = std::make_shared<dist::PrefixStore>("alone", pg->store());
    auto alone = std::make_shared<dist::ProcessGroupGloo>(std::make_shared<dist::PrefixStore>(
        std::to_string(rank), store), 0, 1);
    CHECK_THROWS_WITH_AS(dist::ZeroRedundancyOptimizer(model->parameters(), pg, adamw,
                                                       dist::ZeroOptions().broadcast_group(alone)),
                         doctest::Contains("broadcast_group is rank 0 of 1 but the optimizer's group is rank"),
                         ls::Error);
  }, 60s);
}
