// nn/rnn_composed.cpp — the composed LSTM and GRU layers.
// Read before: nn/rnn_composed.h.
#include "nn/rnn_composed.h"

#include <vector>

#include "autograd/functions/unbind.h"
#include "core/nn_ops.h"
#include "core/shape.h"

namespace lockstep::nn {
namespace {

// Runs one direction over the steps xg (T x (B, G*H), the input projections):
// h = step(xg[t]) for t = 0..T-1, or T-1..0 when reverse; returns the h's as
// (T, B, H) in time order.
template <class Step>
Tensor scan(const std::vector<Tensor>& xg, bool reverse, Step&& step) {
  std::vector<Tensor> outputs(xg.size());
  const size_t T = xg.size();
  for (size_t s = 0; s < T; ++s) {
    const size_t t = reverse ? T - 1 - s : s;
    outputs[t] = step(xg[t]);
  }
  return stack(outputs, 0);
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> lstm_layer_composed(const Tensor& x, const Tensor& h0, const Tensor& c0,
                                                       const RNNWeights& w, bool reverse) {
  const ScalarType dt = w.w_ih.dtype();  // Note [Recurrent layers under autocast]
  const std::vector<Tensor> xg = unbind(linear(x, w.w_ih, w.b_ih).to(dt), 0);  // T x (B, 4H)
  Tensor h = h0, c = c0;
  const Tensor out = scan(xg, reverse, [&](const Tensor& xt) {
    std::tie(h, c) = lstm_step(xt + linear(h, w.w_hh, w.b_hh).to(dt), c);
    return h;
  });
  return {out, h, c};
}

std::tuple<Tensor, Tensor> gru_layer_composed(const Tensor& x, const Tensor& h0, const RNNWeights& w,
                                              bool reverse) {
  const ScalarType dt = w.w_ih.dtype();  // Note [Recurrent layers under autocast]
  const std::vector<Tensor> xg = unbind(linear(x, w.w_ih, w.b_ih).to(dt), 0);  // T x (B, 3H)
  Tensor h = h0;
  const Tensor out = scan(xg, reverse, [&](const Tensor& xt) {
    h = gru_step(xt, linear(h, w.w_hh, w.b_hh).to(dt), h);
    return h;
  });
  return {out, h};
}

}  // namespace lockstep::nn
