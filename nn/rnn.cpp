// nn/rnn.cpp — LSTM and GRU: the layout of inputs and states, and the layer loops.
// Read before: nn/rnn.h.
#include "nn/rnn.h"

#include "autograd/functions/rnn_cudnn.h"
#include "autograd/functions/unbind.h"
#include "core/autocast.h"
#include "core/factory.h"
#include "core/nn_ops.h"
#include "core/shape.h"
#include "nn/gru_layer.h"
#include "nn/lstm_layer.h"
#include "nn/rnn_composed.h"

namespace lockstep::nn {

RNNBase::RNNBase(const char* name, int64_t gates, int64_t input_size, int64_t hidden_size,
                 int64_t num_layers, bool bias, bool batch_first, double dropout, bool bidirectional)
    : name_(name), input_size_(input_size), hidden_size_(hidden_size), num_layers_(num_layers),
      directions_(bidirectional ? 2 : 1), batch_first_(batch_first), dropout_(dropout) {
  LS_CHECK(input_size > 0 && hidden_size > 0 && num_layers > 0, name, ": input_size, hidden_size "
           "and num_layers must be positive but got ", name, "Options(", input_size, ", ",
           hidden_size, ").num_layers(", num_layers, ")");
  LS_CHECK(dropout >= 0.0 && dropout <= 1.0, name, ": dropout must be in [0, 1] but got ", dropout);
  for (int64_t l = 0; l < num_layers; ++l) {
    for (int64_t d = 0; d < directions_; ++d) {
      const std::string suffix = "_l" + std::to_string(l) + (d == 1 ? "_reverse" : "");
      layers_.push_back(RNNWeights::create(*this, suffix, gates, l == 0 ? input_size : directions_ * hidden_size,
                                           hidden_size, bias));
    }
  }
}

RNNBase::Sequence RNNBase::to_time_major(const Tensor& input) const {
  LS_CHECK(input.defined() && (input.dim() == 2 || input.dim() == 3) && input.size(-1) == input_size_,
           name_, "(", input_size_, ", ", hidden_size_, ").forward: expected input ",
           batch_first_ ? "(B, T, " : "(T, B, ", input_size_, ") or unbatched (T, ", input_size_,
           ") but got ", input.defined() ? input.shape_str() : "an undefined tensor");
  const Tensor& w = layers_[0].w_ih;
  LS_CHECK(is_autocast_enabled() || input.dtype() == w.dtype(), name_, ".forward: the input is ",
           input.dtype(), " but the parameters are ", w.dtype(), "; convert one of them "
           "(module->to(dtype) or input.to(dtype)), or run under ls::AutocastGuard");
  const bool batched = input.dim() == 3;
  const Tensor x = !batched ? input.unsqueeze(1) : batch_first_ ? input.transpose(0, 1) : input;
  LS_CHECK(x.size(0) > 0, name_, ".forward: the input has no time steps (", input.shape_str(), ")");
  return {x, batched};
}

Tensor RNNBase::state_or_zeros(const Tensor& state, const Sequence& seq, const char* what) const {
  const int64_t L = num_layers_ * directions_, B = seq.x.size(1), H = hidden_size_;
  const Tensor& w = layers_[0].w_ih;
  if (!state.defined()) return zeros({L, B, H}, TensorOptions().dtype(w.dtype()).device(w.device()));
  const IntList want = seq.batched ? IntList{L, B, H} : IntList{L, H};
  LS_CHECK(state.sizes() == want, name_, ".forward: expected ", what, " (num_layers * num_directions, ",
           seq.batched ? "batch, " : "", "hidden_size) = ", shape_str(want), " but got ",
           state.shape_str(), seq.batched && batch_first_ ? " (batch_first does not apply to the "
           "states, as in PyTorch)" : "");
  LS_CHECK(is_autocast_enabled() || state.dtype() == w.dtype(), name_, ".forward: ", what, " is ",
           state.dtype(), " but the parameters are ", w.dtype());
  return (seq.batched ? state : state.unsqueeze(1)).to(w.dtype());
}

Tensor RNNBase::output_layout(const Tensor& out, const Sequence& seq) const {
  if (!seq.batched) return out.squeeze(1);
  return batch_first_ ? out.transpose(0, 1) : out;
}

Tensor RNNBase::state_layout(const Tensor& state, const Sequence& seq) const {
  return seq.batched ? state : state.squeeze(1);
}

std::vector<autograd::RnnLayerParams> RNNBase::layer_params(int64_t l) const {
  std::vector<autograd::RnnLayerParams> params;
  for (int64_t d = 0; d < directions_; ++d) {
    const RNNWeights& w = layers_[static_cast<size_t>(l * directions_ + d)];
    params.push_back({w.w_ih, w.w_hh, w.b_ih, w.b_hh});
  }
  return params;
}

namespace {

// Appends the D states of `state` (D, B, H) to `to`, one (B, H) tensor each.
void append_states(std::vector<Tensor>& to, const Tensor& state) {
  for (const Tensor& t : unbind(state, 0)) to.push_back(t);
}

// The composed layer, both directions, over a cuDNN layer node's inputs: x, h0 (D, B, H)
// [, c0], then per direction w_ih, w_hh[, b_ih, b_hh]. What that node re-runs to be
// differentiated twice (Note [Double backward by recomputation]).
autograd::ReferenceFunction composed_layer(bool lstm, int64_t directions, bool bias) {
  return [=](const std::vector<Tensor>& in) {
    const size_t first = lstm ? 3 : 2, per = bias ? 4 : 2;
    std::vector<Tensor> outs, hs, cs;
    for (int64_t d = 0; d < directions; ++d) {
      const size_t k = first + static_cast<size_t>(d) * per;
      const RNNWeights w{in[k], in[k + 1], bias ? in[k + 2] : Tensor(), bias ? in[k + 3] : Tensor()};
      Tensor out, h, c;
      if (lstm) {
        std::tie(out, h, c) = lstm_layer_composed(in[0], in[1].select(0, d), in[2].select(0, d), w, d == 1);
        cs.push_back(c);
      } else {
        std::tie(out, h) = gru_layer_composed(in[0], in[1].select(0, d), w, d == 1);
      }
      outs.push_back(out);
      hs.push_back(h);
    }
    std::vector<Tensor> result{outs.size() == 1 ? outs[0] : cat(outs, 2), stack(hs, 0)};
    if (lstm) result.push_back(stack(cs, 0));
    return result;
  };
}

}  // namespace

Tensor RNNBase::between_layers(const std::vector<Tensor>& outs, int64_t l) const {
  const Tensor out = outs.size() == 1 ? outs[0] : cat(outs, 2);  // (T, B, D*H)
  if (l + 1 == num_layers_ || dropout_ == 0.0) return out;
  return lockstep::dropout(out, dropout_, is_training());
}

std::tuple<Tensor, std::tuple<Tensor, Tensor>> LSTM::forward(
    const Tensor& input, const std::optional<std::tuple<Tensor, Tensor>>& hx) {
  const Sequence seq = to_time_major(input);
  const Tensor h0 = state_or_zeros(hx ? std::get<0>(*hx) : Tensor(), seq, "h0");
  const Tensor c0 = state_or_zeros(hx ? std::get<1>(*hx) : Tensor(), seq, "c0");
  const std::vector<Tensor> h_init = unbind(h0, 0), c_init = unbind(c0, 0);  // L*D x (B, H)
  std::vector<Tensor> h_n, c_n;
  Tensor x = seq.x;  // (T, B, I), then (T, B, D*H)
  for (int64_t l = 0; l < num_layers_; ++l) {
    const Tensor h0_l = h0.narrow(0, l * directions_, directions_), c0_l = c0.narrow(0, l * directions_, directions_);
    const std::vector<autograd::RnnLayerParams> params = layer_params(l);
    if (autograd::cudnn_rnn_usable(x, h0_l, c0_l, params)) {  // Note [cuDNN RNN layer]
      const auto [out, h_l, c_l] = autograd::cudnn_rnn_layer(
          autograd::RnnCell::kLSTM, x, h0_l, c0_l, params, composed_layer(true, directions_, params[0].b_ih.defined()));
      append_states(h_n, h_l);
      append_states(c_n, c_l);
      x = between_layers({out}, l);
      continue;
    }
    std::vector<Tensor> outs;  // per direction, (T, B, H)
    for (int64_t d = 0; d < directions_; ++d) {
      const size_t i = static_cast<size_t>(l * directions_ + d);
      const RNNWeights& w = layers_[i];
      Tensor h = h_init[i], c = c_init[i];
      if (lstm_layer_fusable(x, h, c, w)) {  // Note [Fused LSTM layer]
        Tensor out;
        std::tie(out, h, c) = lstm_layer_fused(x, h, c, w, d == 1);
        outs.push_back(out);
        h_n.push_back(h);
        c_n.push_back(c);
        continue;
      }
      Tensor out;  // the reference path: composed ops, one node each
      std::tie(out, h, c) = lstm_layer_composed(x, h, c, w, d == 1);
      outs.push_back(out);
      h_n.push_back(h);
      c_n.push_back(c);
    }
    x = between_layers(outs, l);
  }
  return {output_layout(x, seq), {state_layout(stack(h_n, 0), seq), state_layout(stack(c_n, 0), seq)}};
}

std::tuple<Tensor, Tensor> GRU::forward(const Tensor& input, const Tensor& hx) {
  const Sequence seq = to_time_major(input);
  const Tensor h0 = state_or_zeros(hx, seq, "h0");  // (L*D, B, H)
  const std::vector<Tensor> h_init = unbind(h0, 0);  // L*D x (B, H)
  std::vector<Tensor> h_n;
  Tensor x = seq.x;
  for (int64_t l = 0; l < num_layers_; ++l) {
    const Tensor h0_l = h0.narrow(0, l * directions_, directions_);
    const std::vector<autograd::RnnLayerParams> params = layer_params(l);
    if (autograd::cudnn_rnn_usable(x, h0_l, Tensor(), params)) {  // Note [cuDNN RNN layer]
      const auto [out, h_l, unused] = autograd::cudnn_rnn_layer(
          autograd::RnnCell::kGRU, x, h0_l, Tensor(), params, composed_layer(false, directions_, params[0].b_ih.defined()));
      append_states(h_n, h_l);
      x = between_layers({out}, l);
      continue;
    }
    std::vector<Tensor> outs;
    for (int64_t d = 0; d < directions_; ++d) {
      const size_t i = static_cast<size_t>(l * directions_ + d);
      const RNNWeights& w = layers_[i];
      Tensor h = h_init[i];
      if (gru_layer_fusable(x, h, w)) {  // Note [Fused GRU layer]
        Tensor out;
        std::tie(out, h) = gru_layer_fused(x, h, w, d == 1);
        outs.push_back(out);
        h_n.push_back(h);
        continue;
      }
      Tensor out;  // the reference path: composed ops, one node each
      std::tie(out, h) = gru_layer_composed(x, h, w, d == 1);
      outs.push_back(out);
      h_n.push_back(h);
    }
    x = between_layers(outs, l);
  }
  return {output_layout(x, seq), state_layout(stack(h_n, 0), seq)};
}

}  // namespace lockstep::nn
