// tests/nn/test_rnn.cpp — LSTM, GRU, LSTMCell, GRUCell and unbind: names, shapes and
// layouts, the layers against a loop of the cell functions, gradchecks (float64),
// dropout between layers, bf16 autocast, and the messages of misuse. Their values
// against PyTorch are in tests/nn/test_parity.cpp.
// Read before: nn/rnn.h, tests/support/gradcheck.h.
#include <doctest/doctest.h>

#include <string>
#include <tuple>
#include <vector>

#include "autograd/functions/unbind.h"
#include "core/autocast.h"
#include "core/factory.h"
#include "core/grad_mode.h"
#include "core/rng.h"
#include "nn/rnn.h"
#include "tests/support/errors.h"
#include "tests/support/gradcheck.h"

namespace ls = lockstep;
namespace nn = lockstep::nn;
using ls::testing::contains;
using ls::testing::error_of;
using ls::testing::randn64;
using Inputs = std::vector<ls::Tensor>;
using Names = std::vector<std::string>;

namespace {

Names names_of(const nn::Module& m) {
  Names out;
  for (const auto& [name, t] : m.named_parameters()) out.push_back(name);
  return out;
}

// Tensors flattened and joined, so one gradcheck covers output and states.
ls::Tensor flat(const std::vector<ls::Tensor>& ts) {
  std::vector<ls::Tensor> parts;
  for (const auto& t : ts) parts.push_back(t.reshape({-1}));
  return ls::cat(parts, 0);
}

double max_abs_diff(const ls::Tensor& a, const ls::Tensor& b) {
  return (a.to(ls::kFloat64) - b.to(ls::kFloat64)).abs().max().item<double>();
}

}  // namespace

TEST_CASE("rnn: unbind gives views and one backward that leaves unused slices zero") {
  ls::manual_seed(1);
  ls::Tensor x = ls::randn({3, 2, 4}, ls::requires_grad());
  std::vector<ls::Tensor> s = ls::unbind(x, 1);
  REQUIRE(s.size() == 2);
  CHECK(s[1].sizes() == ls::IntList{3, 4});
  CHECK(ls::equal(s[1], x.select(1, 1)));
  (s[1] * 3.0).sum().backward();  // slice 0 gets no gradient
  CHECK(ls::equal(x.grad().select(1, 0), ls::zeros({3, 4})));
  CHECK(ls::equal(x.grad().select(1, 1), ls::full({3, 4}, 3.0)));
  CHECK_GRADCHECK([](const Inputs& v) {
    std::vector<ls::Tensor> t = ls::unbind(v[0], -1);
    return t[0] * t[2] + t[3];
  }, {randn64({2, 4})});
  CHECK(contains(error_of([] { ls::unbind(ls::scalar_tensor(1.0)); }), "at least one dim"));
}

TEST_CASE("rnn: LSTM and GRU have PyTorch's parameter names, shapes and init range") {
  ls::manual_seed(2);
  nn::LSTM lstm(nn::LSTMOptions(3, 4).num_layers(2));
  CHECK(names_of(lstm) == Names{"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0",
                                "weight_ih_l1", "weight_hh_l1", "bias_ih_l1", "bias_hh_l1"});
  CHECK(lstm.layer(0).w_ih.sizes() == ls::IntList{16, 3});
  CHECK(lstm.layer(1).w_ih.sizes() == ls::IntList{16, 4});
  CHECK(lstm.layer(1).w_hh.sizes() == ls::IntList{16, 4});
  for (const auto& p : lstm.parameters()) {  // U(-1/sqrt(4), 1/sqrt(4))
    CHECK(p.abs().max().item<double>() <= 0.5);
    CHECK(p.abs().max().item<double>() > 0.3);
  }
  nn::GRU bi(nn::GRUOptions(3, 4).num_layers(2).bidirectional(true));
  CHECK(names_of(bi) == Names{"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0",
                              "weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse",
                              "bias_hh_l0_reverse", "weight_ih_l1", "weight_hh_l1", "bias_ih_l1",
                              "bias_hh_l1", "weight_ih_l1_reverse", "weight_hh_l1_reverse",
                              "bias_ih_l1_reverse", "bias_hh_l1_reverse"});
  CHECK(bi.layer(1, /*reverse=*/true).w_ih.sizes() == ls::IntList{12, 8});  // reads both directions
  nn::GRU gru(nn::GRUOptions(3, 4).bias(false));
  CHECK(names_of(gru) == Names{"weight_ih_l0", "weight_hh_l0"});
  CHECK(gru.layer(0).w_ih.sizes() == ls::IntList{12, 3});
  nn::LSTMCell cell(3, 4);
  CHECK(names_of(cell) == Names{"weight_ih", "weight_hh", "bias_ih", "bias_hh"});
  CHECK(nn::GRUCell(3, 4).weight_hh.sizes() == ls::IntList{12, 4});
}

TEST_CASE("rnn: LSTM and GRU equal a loop of lstm_cell / gru_cell over layers and steps") {
  ls::manual_seed(3);
  const int64_t T = 4, B = 2, I = 3, H = 5, L = 2;
  nn::LSTM lstm(nn::LSTMOptions(I, H).num_layers(L));
  nn::GRU gru(nn::GRUOptions(I, H).num_layers(L));
  ls::Tensor x = ls::randn({T, B, I}), h0 = ls::randn({L, B, H}), c0 = ls::randn({L, B, H});
  auto [out, state] = lstm.forward(x, std::make_tuple(h0, c0));
  auto [gout, gh] = gru.forward(x, h0);

  ls::Tensor seq = x, gseq = x;
  for (int64_t l = 0; l < L; ++l) {
    const nn::RNNWeights& w = lstm.layer(l);
    const nn::RNNWeights& g = gru.layer(l);
    ls::Tensor h = h0.select(0, l), c = c0.select(0, l), hg = h0.select(0, l);
    std::vector<ls::Tensor> outs, gouts;
    for (int64_t t = 0; t < T; ++t) {
      std::tie(h, c) = ls::lstm_cell(seq.select(0, t), {h, c}, w.w_ih, w.w_hh, w.b_ih, w.b_hh);
      hg = ls::gru_cell(gseq.select(0, t), hg, g.w_ih, g.w_hh, g.b_ih, g.b_hh);
      outs.push_back(h);
      gouts.push_back(hg);
    }
    CHECK(ls::allclose(std::get<0>(state).select(0, l), h, 1e-5, 1e-6));
    CHECK(ls::allclose(std::get<1>(state).select(0, l), c, 1e-5, 1e-6));
    CHECK(ls::allclose(gh.select(0, l), hg, 1e-5, 1e-6));
    seq = ls::stack(outs, 0);
    gseq = ls::stack(gouts, 0);
  }
  CHECK(out.sizes() == ls::IntList{T, B, H});
  CHECK(ls::allclose(out, seq, 1e-5, 1e-6));
  CHECK(ls::allclose(gout, gseq, 1e-5, 1e-6));

  // batch_first: the same numbers in (B, T, .); unbatched (T, I): batch 1 without its dim.
  nn::LSTM bf(nn::LSTMOptions(I, H).num_layers(L).batch_first(true));
  bf.load_state_dict(lstm.state_dict());
  auto [bout, bstate] = bf.forward(x.transpose(0, 1), std::make_tuple(h0, c0));
  CHECK(ls::allclose(bout, out.transpose(0, 1), 1e-6, 1e-7));
  CHECK(ls::allclose(std::get<1>(bstate), std::get<1>(state), 1e-6, 1e-7));
  auto [uout, ustate] = lstm.forward(x.select(1, 1), std::make_tuple(h0.select(1, 1), c0.select(1, 1)));
  CHECK(uout.sizes() == ls::IntList{T, H});
  CHECK(std::get<0>(ustate).sizes() == ls::IntList{L, H});
  CHECK(ls::allclose(uout, out.select(1, 1), 1e-5, 1e-6));
  // No state: zeros.
  auto [zout, zstate] = lstm.forward(x);
  auto [zref, zref_state] = lstm.forward(x, std::make_tuple(ls::zeros({L, B, H}), ls::zeros({L, B, H})));
  CHECK(ls::equal(zout, zref));
  CHECK(ls::equal(std::get<0>(gru.forward(x)), std::get<0>(gru.forward(x, ls::zeros({L, B, H})))));
}

TEST_CASE("rnn: a bidirectional layer's reverse half is the forward recurrence on the reversed sequence") {
  ls::manual_seed(8);
  const int64_t T = 4, B = 2, I = 3, H = 5;
  nn::LSTM bi(nn::LSTMOptions(I, H).bidirectional(true));
  nn::LSTM fwd(I, H), bwd(I, H);
  const auto copy = [](const nn::RNNWeights& from, nn::LSTM& to) {
    ls::NoGradGuard no_grad;
    to.layer(0).w_ih.copy_(from.w_ih);
    to.layer(0).w_hh.copy_(from.w_hh);
    to.layer(0).b_ih.copy_(from.b_ih);
    to.layer(0).b_hh.copy_(from.b_hh);
  };
  copy(bi.layer(0), fwd);
  copy(bi.layer(0, /*reverse=*/true), bwd);
  ls::Tensor x = ls::randn({T, B, I});
  std::vector<ls::Tensor> steps = ls::unbind(x, 0);
  const ls::Tensor reversed = ls::stack(std::vector<ls::Tensor>(steps.rbegin(), steps.rend()), 0);
  auto [out, state] = bi.forward(x);
  CHECK(out.sizes() == ls::IntList{T, B, 2 * H});
  CHECK(std::get<0>(state).sizes() == ls::IntList{2, B, H});
  auto [fout, fstate] = fwd.forward(x);
  auto [rout, rstate] = bwd.forward(reversed);
  CHECK(ls::allclose(out.narrow(2, 0, H), fout, 1e-6, 1e-7));
  for (int64_t t = 0; t < T; ++t) {
    CHECK(ls::allclose(out.select(0, t).narrow(1, H, H), rout.select(0, T - 1 - t), 1e-6, 1e-7));
  }
  CHECK(ls::allclose(std::get<0>(state).select(0, 1), std::get<0>(rstate).select(0, 0), 1e-6, 1e-7));
  CHECK(ls::allclose(std::get<1>(state).select(0, 0), std::get<1>(fstate).select(0, 0), 1e-6, 1e-7));
}

TEST_CASE("rnn: gradcheck of lstm_cell and gru_cell in every input and weight (float64)") {
  ls::manual_seed(4);
  const int64_t B = 2, I = 3, H = 2;
  CHECK_GRADCHECK([](const Inputs& v) {
    auto [h, c] = ls::lstm_cell(v[0], {v[1], v[2]}, v[3], v[4], v[5], v[6]);
    return flat({h, c});
  }, {randn64({B, I}), randn64({B, H}), randn64({B, H}), randn64({4 * H, I}), randn64({4 * H, H}),
      randn64({4 * H}), randn64({4 * H})});
  CHECK_GRADCHECK([](const Inputs& v) { return ls::gru_cell(v[0], v[1], v[2], v[3], v[4], v[5]); },
                  {randn64({B, I}), randn64({B, H}), randn64({3 * H, I}), randn64({3 * H, H}),
                   randn64({3 * H}), randn64({3 * H})});
  // Unbatched, without biases.
  CHECK_GRADCHECK([](const Inputs& v) { return ls::gru_cell(v[0], v[1], v[2], v[3]); },
                  {randn64({I}), randn64({H}), randn64({3 * H, I}), randn64({3 * H, H})});
}

TEST_CASE("rnn: gradcheck of 2-layer LSTM and bidirectional GRU in input and initial states (float64)") {
  ls::manual_seed(5);
  auto lstm = std::make_shared<nn::LSTM>(nn::LSTMOptions(3, 2).num_layers(2).batch_first(true));
  auto gru = std::make_shared<nn::GRU>(nn::GRUOptions(3, 2).num_layers(2).bidirectional(true));
  lstm->to(ls::kFloat64);
  gru->to(ls::kFloat64);
  CHECK_GRADCHECK([&](const Inputs& v) {
    auto [out, state] = lstm->forward(v[0], std::make_tuple(v[1], v[2]));
    return flat({out, std::get<0>(state), std::get<1>(state)});
  }, {randn64({2, 3, 3}), randn64({2, 2, 2}), randn64({2, 2, 2})});
  CHECK_GRADCHECK([&](const Inputs& v) {
    auto [out, h] = gru->forward(v[0], v[1]);
    return flat({out, h});
  }, {randn64({3, 2, 3}), randn64({4, 2, 2})});
}

TEST_CASE("rnn: dropout acts between layers while training only, never after the last layer") {
  ls::manual_seed(6);
  nn::LSTM with(nn::LSTMOptions(3, 4).num_layers(2).dropout(0.5));
  nn::LSTM without(nn::LSTMOptions(3, 4).num_layers(2));
  without.load_state_dict(with.state_dict());
  ls::Tensor x = ls::randn({5, 2, 3});
  const ls::Tensor reference = std::get<0>(without.forward(x));
  CHECK_FALSE(ls::allclose(std::get<0>(with.forward(x)), reference));  // training: layer 0's output dropped
  with.eval();
  CHECK(ls::equal(std::get<0>(with.forward(x)), reference));
  nn::GRU one(nn::GRUOptions(3, 4).dropout(0.5));  // one layer: nothing to drop between
  CHECK(ls::equal(std::get<0>(one.forward(x)), std::get<0>(one.forward(x))));
}

TEST_CASE("rnn: under bf16 autocast the GEMMs run in bf16 and the states stay float32") {
  ls::manual_seed(7);
  nn::LSTM lstm(nn::LSTMOptions(8, 16).num_layers(2));
  nn::GRU gru(nn::GRUOptions(8, 16));
  ls::Tensor x = ls::randn({6, 3, 8});
  const ls::Tensor ref = std::get<0>(lstm.forward(x)), gref = std::get<0>(gru.forward(x));
  ls::AutocastGuard amp(ls::kBFloat16);
  auto [out, state] = lstm.forward(x);
  CHECK(out.dtype() == ls::kFloat32);
  CHECK(std::get<1>(state).dtype() == ls::kFloat32);
  CHECK(max_abs_diff(out, ref) < 3e-2);  // bf16 operands: ~3 significant digits per GEMM
  CHECK(max_abs_diff(out, ref) > 0.0);   // the GEMMs did run in bf16
  const ls::Tensor gout = std::get<0>(gru.forward(x.to(ls::kBFloat16)));  // a bf16 input is fine here
  CHECK(gout.dtype() == ls::kFloat32);
  CHECK(max_abs_diff(gout, gref) < 3e-2);
  out.sum().backward();
  for (const auto& p : lstm.parameters()) {
    REQUIRE(p.grad().defined());
    CHECK(p.grad().dtype() == ls::kFloat32);
  }
}

TEST_CASE("rnn: misuse gets a message naming the layer, the expected shape or dtype") {
  nn::LSTM lstm(nn::LSTMOptions(3, 4).num_layers(2).batch_first(true));
  nn::GRU gru(3, 4);
  const ls::Tensor x = ls::randn({2, 5, 3});
  CHECK(contains(error_of([&] { lstm.forward(ls::randn({2, 5, 7})); }), "LSTM(3, 4).forward: expected input (B, T, 3)"));
  CHECK(contains(error_of([&] { lstm.forward(ls::randn({5})); }), "or unbatched (T, 3)"));
  CHECK(contains(error_of([&] { lstm.forward(x, std::make_tuple(ls::zeros({2, 5, 4}), ls::zeros({2, 2, 4}))); }),
                 "batch_first does not apply to the states"));
  CHECK(contains(error_of([&] { lstm.forward(x, std::make_tuple(ls::zeros({2, 2, 4}), ls::zeros({1, 2, 4}))); }),
                 "expected c0 (num_layers * num_directions, batch, hidden_size) = [2, 2, 4]"));
  CHECK(contains(error_of([&] { gru.forward(x.to(ls::kFloat64)); }), "the input is float64 but the parameters are float32"));
  CHECK(contains(error_of([&] { gru.forward(ls::randn({0, 2, 3})); }), "no time steps"));
  CHECK(contains(error_of([] { nn::LSTM(nn::LSTMOptions(3, 4).num_layers(0)); }), "must be positive"));
  CHECK(contains(error_of([] { nn::GRU(nn::GRUOptions(3, 4).dropout(1.5)); }), "dropout must be in [0, 1]"));
  CHECK(contains(error_of([] { nn::LSTMCell(0, 4); }), "LSTMCell: input_size and hidden_size must be positive"));
  const ls::Tensor w_ih = ls::randn({16, 3}), w_hh = ls::randn({16, 4}), h = ls::zeros({2, 4});
  CHECK(contains(error_of([&] { ls::lstm_cell(ls::randn({2, 3}), {h}, w_ih, w_hh); }), "hx must be {h, c}"));
  CHECK(contains(error_of([&] { ls::lstm_cell(ls::randn({2, 3}), {h, ls::zeros({2, 5})}, w_ih, w_hh); }),
                 "c must have h's shape"));
  CHECK(contains(error_of([&] { ls::gru_cell(ls::randn({2, 3}), h, w_ih, w_hh); }), "expected w_ih (3H, I)"));
  CHECK(contains(error_of([&] { nn::GRUCell(3, 4).forward(ls::randn({2, 3}), ls::zeros({3, 4})); }),
                 "expected a hidden state [2, 4]"));
}
