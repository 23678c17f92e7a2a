// nn/rnn_cell.h — one time step of an LSTM or a GRU: the functions
// ls::lstm_cell / ls::gru_cell (libtorch's torch::lstm_cell / torch::gru_cell)
// and the modules LSTMCell / GRUCell, with torch.nn's parameters.
//
// LSTM, gates in PyTorch's order i, f, g, o (rows [0, H), [H, 2H), ... of the weights):
//   [i f g o] = x W_ih^T + b_ih + h W_hh^T + b_hh          (B, 4H)
//   i, f, o = sigmoid(.), g = tanh(.)
//   c' = f * c + i * g,   h' = o * tanh(c')
// GRU, gates r, z, n:
//   [xr xz xn] = x W_ih^T + b_ih,  [hr hz hn] = h W_hh^T + b_hh    (B, 3H) each
//   r = sigmoid(xr + hr), z = sigmoid(xz + hz), n = tanh(xn + r * hn)
//   h' = (1 - z) * n + z * h   (computed as n + z * (h - n))
// Parameters (PyTorch's names and order): weight_ih (G*H, I), weight_hh (G*H, H),
// bias_ih (G*H), bias_hh (G*H), G = 4 (LSTM) or 3 (GRU), all drawn from
// U(-1/sqrt(H), 1/sqrt(H)) as torch.nn.LSTMCell / GRUCell do.
// Built from linear, sigmoid, tanh and elementwise ops, so autograd differentiates
// them; the gates are split with one unbind (autograd/functions/unbind.h).
//
// § Note [Recurrent layers under autocast]
// Under bf16 autocast the GEMMs (x W_ih^T, h W_hh^T) run in bf16 like every
// linear; their outputs are widened to the parameters' dtype (float32) before the
// gate arithmetic, and the states h, c and the returned tensors stay in that
// dtype. A bf16 cell state c, updated T times, would accumulate rounding
// (PyTorch's fused CPU kernel also keeps the gates in float32). Without autocast
// the input, states and parameters must share one dtype.
//
// Read before: nn/linear.h, autograd/functions/unbind.h. Read next: nn/rnn.h.
#pragma once

#include <optional>
#include <tuple>
#include <vector>

#include "nn/module.h"

namespace lockstep {

// One LSTM step: input (B, I) or (I), hx = {h (B, H), c (B, H)} (or (H) each);
// returns (h', c'). Biases may be undefined.
std::tuple<Tensor, Tensor> lstm_cell(const Tensor& input, const std::vector<Tensor>& hx,
                                     const Tensor& w_ih, const Tensor& w_hh,
                                     const Tensor& b_ih = Tensor(), const Tensor& b_hh = Tensor());
// One GRU step: input (B, I) or (I), hx (B, H) or (H); returns h'.
Tensor gru_cell(const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh,
                const Tensor& b_ih = Tensor(), const Tensor& b_hh = Tensor());

namespace nn {

// The step functions given the gate pre-activations (the GEMMs already done), shared
// by the cells and the layers of nn/rnn.h (which compute x W_ih^T for all steps at once).
// lstm: gates (*, 4H) = x W_ih^T + b_ih + h W_hh^T + b_hh, c (*, H) -> (h', c').
std::tuple<Tensor, Tensor> lstm_step(const Tensor& gates, const Tensor& c);
// gru: xg = x W_ih^T + b_ih (*, 3H), hg = h W_hh^T + b_hh (*, 3H), h (*, H) -> h'.
Tensor gru_step(const Tensor& xg, const Tensor& hg, const Tensor& h);

// Options of one cell, as libtorch's LSTMCellOptions / GRUCellOptions.
class RNNCellOptions {
 public:
  RNNCellOptions(int64_t input_size, int64_t hidden_size)
      : input_size_(input_size), hidden_size_(hidden_size) {}
  RNNCellOptions& bias(bool v) { bias_ = v; return *this; }
  int64_t input_size() const { return input_size_; }
  int64_t hidden_size() const { return hidden_size_; }
  bool bias() const { return bias_; }

 private:
  int64_t input_size_, hidden_size_;
  bool bias_ = true;
};
using LSTMCellOptions = RNNCellOptions;
using GRUCellOptions = RNNCellOptions;

// weight_ih, weight_hh, bias_ih, bias_hh of one cell (or of one layer of nn/rnn.h),
// registered on `owner` with `suffix` ("" for a cell, "_l0", "_l1", ... for a layer).
struct RNNWeights {
  Tensor w_ih, w_hh, b_ih, b_hh;  // (G*H, I), (G*H, H), (G*H), (G*H); biases may be undefined
  static RNNWeights create(Module& owner, const std::string& suffix, int64_t gates,
                           int64_t input_size, int64_t hidden_size, bool bias);
};

struct LSTMCell : Module {
  explicit LSTMCell(const LSTMCellOptions& options);
  LSTMCell(int64_t input_size, int64_t hidden_size) : LSTMCell(LSTMCellOptions(input_size, hidden_size)) {}

  std::string type_name() const override { return "LSTMCell"; }
  bool runs_forward_pre_hooks() const override { return true; }  // Note [Forward pre-hooks]
  // input (B, I) or (I); hx = (h, c), zeros when absent; returns (h', c').
  std::tuple<Tensor, Tensor> forward(const Tensor& input,
                                     const std::optional<std::tuple<Tensor, Tensor>>& hx = std::nullopt);

  LSTMCellOptions options;
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;
};

struct GRUCell : Module {
  explicit GRUCell(const GRUCellOptions& options);
  GRUCell(int64_t input_size, int64_t hidden_size) : GRUCell(GRUCellOptions(input_size, hidden_size)) {}

  std::string type_name() const override { return "GRUCell"; }
  bool runs_forward_pre_hooks() const override { return true; }  // Note [Forward pre-hooks]
  // input (B, I) or (I); hx (B, H) or (H), zeros when undefined; returns h'.
  Tensor forward(const Tensor& input, const Tensor& hx = Tensor());

  GRUCellOptions options;
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;
};

}  // namespace nn
}  // namespace lockstep
