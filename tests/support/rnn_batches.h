// tests/support/rnn_batches.h — the runs the recurrent-layer tests compare between
// paths (fused, composed, cuDNN) and devices: two batches of truncated BPTT through an
// nn::LSTM or nn::GRU, and second derivatives through one.
// Read before: nn/rnn.h. Used by tests/nn/test_rnn_fused.cpp, tests/cuda/test_cuda_rnn.cpp.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

#include "autograd/grad.h"
#include "core/factory.h"
#include "core/native/native.h"
#include "core/rng.h"
#include "nn/rnn.h"

namespace lockstep::testing {

// The batches x1 and x2 (host tensors) go to `device`; the state after batch 1,
// detached, starts batch 2; each batch has a backward. `seed` is set first, so two
// runs draw the same dropout masks. Returns, on the host: both outputs, the final
// states, both inputs' gradients and every parameter's (summed over both batches).
inline std::vector<Tensor> train_two_batches(nn::LSTM& lstm, const Tensor& x1, const Tensor& x2,
                                             Device device = Device::cpu(), uint64_t seed = 11) {
  lstm.zero_grad();
  manual_seed(seed);
  Tensor a = native::to_device(x1.detach(), device).requires_grad_();
  Tensor b = native::to_device(x2.detach(), device).requires_grad_();
  auto [out1, state1] = lstm.forward(a);
  (out1 * out1).sum().backward();
  const auto carried = std::make_tuple(std::get<0>(state1).detach(), std::get<1>(state1).detach());
  auto [out2, state2] = lstm.forward(b, carried);
  ((out2 * 0.5).sum() + std::get<0>(state2).sum() + (std::get<1>(state2) * 2.0).sum()).backward();
  std::vector<Tensor> values{out1, out2, std::get<0>(state2), std::get<1>(state2), a.grad(), b.grad()};
  for (const auto& p : lstm.parameters()) values.push_back(p.grad());
  for (Tensor& v : values) v = v.defined() ? native::to_device(v, Device::cpu()) : v;
  return values;
}

inline std::vector<Tensor> train_two_batches(nn::GRU& gru, const Tensor& x1, const Tensor& x2,
                                             Device device = Device::cpu(), uint64_t seed = 11) {
  gru.zero_grad();
  manual_seed(seed);
  Tensor a = native::to_device(x1.detach(), device).requires_grad_();
  Tensor b = native::to_device(x2.detach(), device).requires_grad_();
  auto [out1, h1] = gru.forward(a);
  (out1 * out1).sum().backward();
  auto [out2, h2] = gru.forward(b, h1.detach());
  ((out2 * 0.5).sum() + (h2 * 2.0).sum()).backward();
  std::vector<Tensor> values{out1, out2, h2, a.grad(), b.grad()};
  for (const auto& p : gru.parameters()) values.push_back(p.grad());
  for (Tensor& v : values) v = v.defined() ? native::to_device(v, Device::cpu()) : v;
  return values;
}

// Second derivatives through a 2-layer bidirectional `Layer` (3 inputs, 4 units) on
// `device`, the shape of a gradient penalty: g = d(sum out^2)/d(x, layer 0's W_hh) with
// create_graph, then d(sum g_x^2 + sum g_w / 2)/d(x, W_ih, W_hh). CHECKs that no .grad
// changed; returns both first derivatives and the three second ones, on the host.
template <class Layer, class Options>
std::vector<Tensor> second_derivatives(Device device) {
  manual_seed(9);
  Layer layer(Options(3, 4).num_layers(2).bidirectional(true));
  layer.to(device);
  const Tensor x = native::to_device(randn({5, 2, 3}), device).requires_grad_();
  const Tensor w_ih = layer.layer(0).w_ih, w_hh = layer.layer(0).w_hh;
  const Tensor out = std::get<0>(layer.forward(x));
  const auto g = autograd::grad({(out * out).sum()}, {x, w_hh}, {}, std::nullopt, /*create_graph=*/true);
  const Tensor penalty = (g[0] * g[0]).sum() + (g[1] * 0.5).sum();
  const auto gg = autograd::grad({penalty}, {x, w_ih, w_hh});
  for (const auto& p : layer.parameters()) CHECK_FALSE(p.grad().defined());
  std::vector<Tensor> values{g[0].detach(), g[1].detach(), gg[0], gg[1], gg[2]};
  for (Tensor& v : values) v = native::to_device(v, Device::cpu());
  return values;
}

}  // namespace lockstep::testing
