// tests/nn/test_rnn_fused.cpp — the fused LSTM and GRU layers (Note [Fused LSTM
// layer], Note [Fused GRU layer]) against the composed reference path
// (ls::nn::set_lstm_fused(false), set_gru_fused(false)): outputs, states and
// every gradient, in float32 with stated tolerances, over several layers, both
// directions, dropout between layers, no biases, and truncated BPTT (the state
// detached and carried to a second batch); a gradcheck of each fused layer in
// every operand (float64); which operands take the fused path (autocast does not);
// at 35 steps in float64 the fused GRU agrees with the composed one to rounding;
// differentiated twice (Note [Double backward by recomputation]) both equal the
// composed path, and pass gradgradcheck.
// Read before: nn/lstm_layer.h, nn/gru_layer.h, tests/nn/test_rnn.cpp.
#include <doctest/doctest.h>

#include <tuple>
#include <utility>
#include <vector>

#include "autograd/grad.h"
#include "core/autocast.h"
#include "core/factory.h"
#include "core/rng.h"
#include "nn/gru_layer.h"
#include "nn/lstm_layer.h"
#include "nn/rnn.h"
#include "tests/support/gradcheck.h"
#include "tests/support/rnn_batches.h"

namespace ls = lockstep;
namespace nn = lockstep::nn;
using ls::testing::randn64;
using ls::testing::train_two_batches;
using Inputs = std::vector<ls::Tensor>;
using Values = std::vector<ls::Tensor>;

namespace {

// Restores both fused paths when a test case ends, whatever it set.
struct FusedGuard {
  ~FusedGuard() {
    nn::set_lstm_fused(true);
    nn::set_gru_fused(true);
  }
};

// The layer stacks compared, and the two batches' lengths: 7 steps transpose W_hh once,
// 3 read it transposed in every step's GEMM (Note [The recurrent weight transposed once]).
struct Case {
  int64_t layers;
  bool bidirectional, bias;
  double dropout;
};
constexpr Case kCases[] = {{2, false, true, 0.3}, {1, true, true, 0.0}, {3, true, false, 0.5},
                           {1, false, false, 0.0}};
constexpr int64_t kSteps1 = 7, kSteps2 = 3;
// The gradchecks' runs, (steps, reverse): both sides of that threshold, both directions.
constexpr std::pair<int64_t, bool> kGradcheckRuns[] = {{3, false}, {3, true}, {5, false}, {5, true}};

void check_close(const Values& fused, const Values& ref) {
  REQUIRE(fused.size() == ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    CAPTURE(i);
    REQUIRE(fused[i].defined());
    // float32 sums in another order and the fast tanh/sigmoid (Note [Fast sigmoid and tanh
    // in the LSTM cell]): a few units in the last place of O(1) values.
    CHECK(ls::allclose(fused[i], ref[i], 1e-4, 2e-5));
  }
}

// Every case of kCases trained on the composed path, then on the fused one.
template <class Layer, class Options>
void check_fused_equals_composed(void (*set_fused)(bool)) {
  FusedGuard guard;
  for (const Case& c : kCases) {
    CAPTURE(c.layers);
    CAPTURE(c.bidirectional);
    CAPTURE(c.bias);
    ls::manual_seed(3);
    Layer layer(Options(6, 8).num_layers(c.layers).bidirectional(c.bidirectional).bias(c.bias)
                    .dropout(c.dropout));
    const ls::Tensor x1 = ls::randn({kSteps1, 3, 6}), x2 = ls::randn({kSteps2, 3, 6});
    set_fused(false);
    const Values ref = train_two_batches(layer, x1, x2);
    set_fused(true);
    check_close(train_two_batches(layer, x1, x2), ref);
  }
}

// A gradcheck for every run of kGradcheckRuns; make(T, reverse) gives the
// function of the inputs to check and the inputs.
template <class Make>
void gradcheck_each_run(Make make) {
  for (const auto& [T, reverse] : kGradcheckRuns) {
    CAPTURE(T);
    CAPTURE(reverse);
    const auto [fn, inputs] = make(T, reverse);
    CHECK_GRADCHECK(fn, inputs);
  }
}

}  // namespace

TEST_CASE("lstm fused: equals the composed layer, values and gradients, over truncated BPTT (float32)") {
  check_fused_equals_composed<nn::LSTM, nn::LSTMOptions>(nn::set_lstm_fused);
}

TEST_CASE("gru fused: equals the composed layer, values and gradients, over truncated BPTT (float32)") {
  check_fused_equals_composed<nn::GRU, nn::GRUOptions>(nn::set_gru_fused);
}

TEST_CASE("gru fused: equals the composed layer at 35 steps, 2 layers of 64 units (float32, float64)") {
  FusedGuard guard;
  ls::manual_seed(4);
  nn::GRU gru(nn::GRUOptions(32, 64).num_layers(2).dropout(0.2));
  const ls::Tensor x1 = ls::randn({35, 8, 32}), x2 = ls::randn({35, 8, 32});
  nn::set_gru_fused(false);
  const Values ref = train_two_batches(gru, x1, x2);
  nn::set_gru_fused(true);
  check_close(train_two_batches(gru, x1, x2), ref);
  // In float64 (libm's tanh and exp on both paths) the two agree to rounding: no formula differs.
  gru.to(ls::kFloat64);
  nn::set_gru_fused(false);
  const Values ref64 = train_two_batches(gru, x1.to(ls::kFloat64), x2.to(ls::kFloat64));
  nn::set_gru_fused(true);
  const Values fused64 = train_two_batches(gru, x1.to(ls::kFloat64), x2.to(ls::kFloat64));
  for (size_t i = 0; i < ref64.size(); ++i) {
    CAPTURE(i);
    CHECK(ls::allclose(fused64[i], ref64[i], 1e-10, 1e-12));
  }
}

TEST_CASE("lstm fused: gradcheck of the layer in x, h0, c0 and every weight, both directions, short and long (float64)") {
  ls::manual_seed(5);
  gradcheck_each_run([](int64_t T, bool reverse) {
    const auto layer = [reverse](const Inputs& v) {
      const nn::RNNWeights w{v[3], v[4], v[5], v[6]};
      auto [out, h, c] = nn::lstm_layer_fused(v[0], v[1], v[2], w, reverse);
      return ls::cat({out.reshape({-1}), h.reshape({-1}), (c * 0.7).reshape({-1})}, 0);
    };
    const int64_t B = 2, I = 3, H = 2;
    return std::make_pair(layer, Inputs{randn64({T, B, I}), randn64({B, H}), randn64({B, H}),
                                        randn64({4 * H, I}), randn64({4 * H, H}), randn64({4 * H}),
                                        randn64({4 * H})});
  });
}

TEST_CASE("gru fused: gradcheck of the layer in x, h0 and every weight, both directions, short and long (float64)") {
  ls::manual_seed(5);
  gradcheck_each_run([](int64_t T, bool reverse) {
    const auto layer = [reverse](const Inputs& v) {
      auto [out, h] = nn::gru_layer_fused(v[0], v[1], nn::RNNWeights{v[2], v[3], v[4], v[5]}, reverse);
      return ls::cat({out.reshape({-1}), (h * 0.7).reshape({-1})}, 0);
    };
    const int64_t B = 2, I = 3, H = 2;
    return std::make_pair(layer, Inputs{randn64({T, B, I}), randn64({B, H}), randn64({3 * H, I}),
                                        randn64({3 * H, H}), randn64({3 * H}), randn64({3 * H})});
  });
  // Without biases.
  CHECK_GRADCHECK([](const Inputs& v) {
    auto [out, h] = nn::gru_layer_fused(v[0], v[1], nn::RNNWeights{v[2], v[3], {}, {}}, true);
    return ls::cat({out.reshape({-1}), h.reshape({-1})}, 0);
  }, {randn64({4, 2, 3}), randn64({2, 2}), randn64({6, 3}), randn64({6, 2})});
}

TEST_CASE("lstm fused: the fused path is taken in float32/64 on the CPU, never under autocast") {
  FusedGuard guard;
  ls::manual_seed(7);
  nn::LSTM lstm(nn::LSTMOptions(4, 4));
  const ls::Tensor x = ls::randn({3, 2, 4}), h = ls::zeros({2, 4});
  const nn::RNNWeights& w = lstm.layer(0);
  CHECK(nn::lstm_layer_fusable(x, h, h, w));
  CHECK_FALSE(nn::lstm_layer_fusable(x.to(ls::kFloat64), h, h, w));  // mixed dtypes
  nn::set_lstm_fused(false);
  CHECK_FALSE(nn::lstm_layer_fusable(x, h, h, w));
  nn::set_lstm_fused(true);
  ls::AutocastGuard amp(ls::kBFloat16);
  CHECK_FALSE(nn::lstm_layer_fusable(x, h, h, w));  // Note [Recurrent layers under autocast]
}

TEST_CASE("gru fused: the fused path is taken in float32/64 on the CPU, never under autocast") {
  FusedGuard guard;
  ls::manual_seed(7);
  nn::GRU gru(nn::GRUOptions(4, 4));
  const ls::Tensor x = ls::randn({3, 2, 4}).requires_grad_(), h = ls::zeros({2, 4});
  const nn::RNNWeights& w = gru.layer(0);
  auto node_of = [&](const ls::Tensor& input) { return std::get<0>(gru.forward(input)).grad_fn()->name(); };
  CHECK(nn::gru_layer_fusable(x, h, w));
  CHECK(node_of(x) == "GRULayerBackward");
  CHECK_FALSE(nn::gru_layer_fusable(x.to(ls::kFloat64), h, w));  // mixed dtypes
  nn::set_gru_fused(false);
  CHECK_FALSE(nn::gru_layer_fusable(x, h, w));
  CHECK(node_of(x) != "GRULayerBackward");
  nn::set_gru_fused(true);
  gru.to(ls::kFloat64);
  CHECK(node_of(x.to(ls::kFloat64)) == "GRULayerBackward");
  gru.to(ls::kFloat32);
  ls::AutocastGuard amp(ls::kBFloat16);
  CHECK_FALSE(nn::gru_layer_fusable(x, h, w));  // Note [Recurrent layers under autocast]
  CHECK(node_of(x) != "GRULayerBackward");
}

TEST_CASE("gru fused: operands of the wrong shape are refused with a message") {
  const ls::Tensor x = ls::randn({3, 2, 4}), h = ls::zeros({2, 5});
  const nn::RNNWeights w{ls::randn({12, 4}), ls::randn({12, 4}), ls::randn({12}), ls::randn({12})};
  CHECK_THROWS_WITH_AS(nn::gru_layer_fused(x, h, w, false),
                       doctest::Contains("expected x (T, B, I), h0 (B, H)"), ls::Error);
}


TEST_CASE("lstm and gru fused: differentiated twice (the composed layer re-run) as the composed path is") {
  FusedGuard guard;
  using ls::testing::second_derivatives;
  const Values lstm_fused = second_derivatives<nn::LSTM, nn::LSTMOptions>(ls::Device::cpu());
  const Values gru_fused = second_derivatives<nn::GRU, nn::GRUOptions>(ls::Device::cpu());
  nn::set_lstm_fused(false);
  nn::set_gru_fused(false);
  check_close(lstm_fused, second_derivatives<nn::LSTM, nn::LSTMOptions>(ls::Device::cpu()));
  check_close(gru_fused, second_derivatives<nn::GRU, nn::GRUOptions>(ls::Device::cpu()));
}

TEST_CASE("lstm and gru fused: gradgradcheck of the layer in x, h0, c0 and every weight (float64)") {
  ls::manual_seed(12);
  for (bool reverse : {false, true}) {
    CAPTURE(reverse);
    CHECK_GRADGRADCHECK([reverse](const Inputs& v) {
      auto [out, h, c] = nn::lstm_layer_fused(v[0], v[1], v[2], nn::RNNWeights{v[3], v[4], v[5], v[6]}, reverse);
      return ls::cat({out.reshape({-1}), h.reshape({-1}), (c * 0.7).reshape({-1})}, 0);
    }, {randn64({3, 2, 2}), randn64({2, 2}), randn64({2, 2}), randn64({8, 2}), randn64({8, 2}), randn64({8}),
        randn64({8})});
    CHECK_GRADGRADCHECK([reverse](const Inputs& v) {
      auto [out, h] = nn::gru_layer_fused(v[0], v[1], nn::RNNWeights{v[2], v[3], v[4], v[5]}, reverse);
      return ls::cat({out.reshape({-1}), (h * 0.7).reshape({-1})}, 0);
    }, {randn64({3, 2, 2}), randn64({2, 2}), randn64({6, 2}), randn64({6, 2}), randn64({6}), randn64({6})});
  }
}

TEST_CASE("cudnn rnn: CPU operands never take the cuDNN path, and a direct call says what it needs") {
  ls::manual_seed(10);
  nn::LSTM lstm(nn::LSTMOptions(3, 4));
  const std::vector<ls::autograd::RnnLayerParams> params = lstm.layer_params(0);
  const ls::Tensor x = ls::randn({5, 2, 3}), h = ls::zeros({1, 2, 4});
  CHECK_FALSE(ls::autograd::cudnn_rnn_usable(x, h, h, params));  // the GPU path only
  CHECK_THROWS_WITH_AS(ls::autograd::cudnn_rnn_layer(ls::autograd::RnnCell::kLSTM, x, h, h, params, {}),
                       doctest::Contains("on one CUDA device"), ls::Error);
}
