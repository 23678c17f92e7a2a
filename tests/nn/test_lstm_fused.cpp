// tests/nn/test_lstm_fused.cpp — the fused LSTM layer (Note [Fused LSTM layer])
// against the composed reference path (ls::nn::set_lstm_fused(false)): outputs,
// states and every gradient, in float32 with stated tolerances, over several
// layers, both directions, dropout between layers, no biases, and truncated BPTT
// (the state detached and carried to a second batch); a gradcheck of the fused
// layer in every operand (float64); autocast takes the reference path.
// Read before: nn/lstm_layer.h, tests/nn/test_rnn.cpp.
#include <doctest/doctest.h>

#include <tuple>
#include <vector>

#include "core/autocast.h"
#include "core/factory.h"
#include "core/rng.h"
#include "nn/lstm_layer.h"
#include "nn/rnn.h"
#include "tests/support/gradcheck.h"

namespace ls = lockstep;
namespace nn = lockstep::nn;
using ls::testing::randn64;
using Inputs = std::vector<ls::Tensor>;

namespace {

// Restores the fused path when a test case ends, whatever it set.
struct FusedGuard {
  ~FusedGuard() { nn::set_lstm_fused(true); }
};

// What one training run gives: two batches of truncated BPTT (the state after
// batch 1, detached, starts batch 2), each with a backward; then the outputs,
// the final states, the gradients of every parameter (summed over both batches)
// and of both batches' inputs.
struct Run {
  std::vector<ls::Tensor> values;
};

Run train_two_batches(nn::LSTM& lstm, const ls::Tensor& x1, const ls::Tensor& x2, bool fused) {
  nn::set_lstm_fused(fused);
  lstm.zero_grad();
  ls::manual_seed(11);  // the same dropout masks on both paths
  ls::Tensor a = x1.detach().requires_grad_(), b = x2.detach().requires_grad_();
  auto [out1, state1] = lstm.forward(a);
  (out1 * out1).sum().backward();
  const auto carried = std::make_tuple(std::get<0>(state1).detach(), std::get<1>(state1).detach());
  auto [out2, state2] = lstm.forward(b, carried);
  ((out2 * 0.5).sum() + std::get<0>(state2).sum() + (std::get<1>(state2) * 2.0).sum()).backward();
  Run r{{out1, out2, std::get<0>(state2), std::get<1>(state2), a.grad(), b.grad()}};
  for (const auto& p : lstm.parameters()) r.values.push_back(p.grad());
  return r;
}

void check_close(const Run& fused, const Run& ref, double rtol, double atol) {
  REQUIRE(fused.values.size() == ref.values.size());
  for (size_t i = 0; i < ref.values.size(); ++i) {
    CAPTURE(i);
    REQUIRE(fused.values[i].defined());
    CHECK(ls::allclose(fused.values[i], ref.values[i], rtol, atol));
  }
}

}  // namespace

TEST_CASE("lstm fused: equals the composed layer, values and gradients, over truncated BPTT (float32)") {
  FusedGuard guard;
  struct Case {
    int64_t layers;
    bool bidirectional, bias;
    double dropout;
  };
  for (const Case& c : {Case{2, false, true, 0.3}, Case{1, true, true, 0.0}, Case{3, true, false, 0.5}}) {
    CAPTURE(c.layers);
    CAPTURE(c.bidirectional);
    ls::manual_seed(3);
    nn::LSTM lstm(nn::LSTMOptions(6, 8).num_layers(c.layers).bidirectional(c.bidirectional)
                      .bias(c.bias).dropout(c.dropout));
    const ls::Tensor x1 = ls::randn({7, 3, 6}), x2 = ls::randn({5, 3, 6});
    const Run ref = train_two_batches(lstm, x1, x2, false);
    const Run fused = train_two_batches(lstm, x1, x2, true);
    // float32 sums in another order and the fast tanh/sigmoid (Note [Fast sigmoid and tanh
    // in the LSTM cell]): a few units in the last place of O(1) values.
    check_close(fused, ref, 1e-4, 2e-5);
  }
}

TEST_CASE("lstm fused: gradcheck of the layer in x, h0, c0 and every weight, both directions (float64)") {
  ls::manual_seed(5);
  const int64_t T = 3, B = 2, I = 3, H = 2;
  for (bool reverse : {false, true}) {
    CAPTURE(reverse);
    CHECK_GRADCHECK([&](const Inputs& v) {
      const nn::RNNWeights w{v[3], v[4], v[5], v[6]};
      auto [out, h, c] = nn::lstm_layer_fused(v[0], v[1], v[2], w, reverse);
      return ls::cat({out.reshape({-1}), h.reshape({-1}), (c * 0.7).reshape({-1})}, 0);
    }, {randn64({T, B, I}), randn64({B, H}), randn64({B, H}), randn64({4 * H, I}),
        randn64({4 * H, H}), randn64({4 * H}), randn64({4 * H})});
  }
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
