// nn/rnn_cell.cpp — the LSTM and GRU steps, their checks, and the cell modules.
// Read before: nn/rnn_cell.h.
#include "nn/rnn_cell.h"

#include <cmath>

#include "autograd/functions/unbind.h"
#include "core/autocast.h"
#include "core/factory.h"
#include "core/nn_ops.h"
#include "core/shape.h"
#include "nn/init.h"

namespace lockstep {
namespace {

// The last dim of gates (*, n * H) as n tensors (*, H), with one autograd node.
std::vector<Tensor> split_gates(const Tensor& gates, int64_t n) {
  IntList sizes = gates.sizes();
  const int64_t H = sizes.back() / n;
  sizes.back() = n;
  sizes.push_back(H);
  return unbind(gates.reshape(sizes), -2);
}

// The checks both steps share: shapes of input, h and the weights; one dtype
// unless autocast picks the GEMMs' (Note [Recurrent layers under autocast]).
void check_step(const char* op, const Tensor& input, const Tensor& h, const Tensor& w_ih,
                const Tensor& w_hh, int64_t gates) {
  LS_CHECK(w_ih.defined() && w_hh.defined() && w_ih.dim() == 2 && w_hh.dim() == 2 &&
               w_hh.size(0) == gates * w_hh.size(1) && w_ih.size(0) == w_hh.size(0),
           op, ": expected w_ih (", gates, "H, I) and w_hh (", gates, "H, H) but got ",
           w_ih.defined() ? w_ih.shape_str() : "undefined", " and ",
           w_hh.defined() ? w_hh.shape_str() : "undefined");
  const int64_t I = w_ih.size(1), H = w_hh.size(1);
  LS_CHECK(input.defined() && (input.dim() == 1 || input.dim() == 2) && input.size(-1) == I, op,
           ": expected input (B, ", I, ") or (", I, ") but got ",
           input.defined() ? input.shape_str() : "an undefined tensor");
  const IntList want = input.dim() == 2 ? IntList{input.size(0), H} : IntList{H};
  LS_CHECK(h.defined() && h.sizes() == want, op, ": expected a hidden state ", shape_str(want),
           " for input ", input.shape_str(), " but got ", h.defined() ? h.shape_str() : "an undefined tensor");
  if (!is_autocast_enabled()) {
    LS_CHECK(input.dtype() == w_ih.dtype() && h.dtype() == w_ih.dtype(), op, ": input (",
             input.dtype(), "), hidden state (", h.dtype(), ") and weights (", w_ih.dtype(),
             ") must have one dtype; convert the module with module.to(dtype) or the tensors "
             "with .to(dtype)");
  }
}

}  // namespace

std::tuple<Tensor, Tensor> lstm_cell(const Tensor& input, const std::vector<Tensor>& hx,
                                     const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                                     const Tensor& b_hh) {
  constexpr const char* kOp = "lstm_cell";
  LS_CHECK(hx.size() == 2, kOp, ": hx must be {h, c} (two tensors) but got ", hx.size());
  check_step(kOp, input, hx[0], w_ih, w_hh, 4);
  LS_CHECK(hx[1].defined() && hx[1].sizes() == hx[0].sizes(), kOp, ": c must have h's shape ",
           hx[0].shape_str(), " but got ", hx[1].defined() ? hx[1].shape_str() : "an undefined tensor");
  const ScalarType dt = w_ih.dtype();  // Note [Recurrent layers under autocast]
  const Tensor gates = linear(input, w_ih, b_ih).to(dt) + linear(hx[0], w_hh, b_hh).to(dt);
  return nn::lstm_step(gates, hx[1].to(dt));
}

Tensor gru_cell(const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh,
                const Tensor& b_ih, const Tensor& b_hh) {
  check_step("gru_cell", input, hx, w_ih, w_hh, 3);
  const ScalarType dt = w_ih.dtype();
  return nn::gru_step(linear(input, w_ih, b_ih).to(dt), linear(hx, w_hh, b_hh).to(dt), hx.to(dt));
}

namespace nn {

std::tuple<Tensor, Tensor> lstm_step(const Tensor& gates, const Tensor& c) {
  const std::vector<Tensor> g = split_gates(gates, 4);  // i, f, g, o: each (*, H)
  const Tensor c_next = g[1].sigmoid() * c + g[0].sigmoid() * g[2].tanh();
  return {g[3].sigmoid() * c_next.tanh(), c_next};
}

Tensor gru_step(const Tensor& xg, const Tensor& hg, const Tensor& h) {
  const std::vector<Tensor> x = split_gates(xg, 3), hh = split_gates(hg, 3);  // r, z, n
  const Tensor r = (x[0] + hh[0]).sigmoid();
  const Tensor z = (x[1] + hh[1]).sigmoid();
  const Tensor n = (x[2] + r * hh[2]).tanh();
  return n + z * (h - n);
}

RNNWeights RNNWeights::create(Module& owner, const std::string& suffix, int64_t gates,
                              int64_t input_size, int64_t hidden_size, bool bias) {
  // torch.nn's RNNBase / RNNCellBase reset_parameters: every tensor U(-k, k), k = 1/sqrt(H).
  const double k = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  const int64_t rows = gates * hidden_size;
  RNNWeights w;
  w.w_ih = owner.register_parameter("weight_ih" + suffix, empty({rows, input_size}));
  w.w_hh = owner.register_parameter("weight_hh" + suffix, empty({rows, hidden_size}));
  if (bias) {
    w.b_ih = owner.register_parameter("bias_ih" + suffix, empty({rows}));
    w.b_hh = owner.register_parameter("bias_hh" + suffix, empty({rows}));
  }
  for (Tensor t : {w.w_ih, w.w_hh, w.b_ih, w.b_hh}) {
    if (t.defined()) init::uniform_(t, -k, k);
  }
  return w;
}

namespace {
void check_sizes(const char* cell, const RNNCellOptions& o) {
  LS_CHECK(o.input_size() > 0 && o.hidden_size() > 0, cell, ": input_size and hidden_size must "
           "be positive but got ", cell, "(", o.input_size(), ", ", o.hidden_size(), ")");
}
// Zeros (B, H) or (H) for input (B, I) or (I), in the weights' dtype and the input's device.
Tensor zero_state(const Tensor& input, const Tensor& weight, int64_t H) {
  const IntList sizes = input.defined() && input.dim() == 2 ? IntList{input.size(0), H} : IntList{H};
  return zeros(sizes, TensorOptions().dtype(weight.dtype()).device(weight.device()));
}
}  // namespace

LSTMCell::LSTMCell(const LSTMCellOptions& o) : options(o) {
  check_sizes("LSTMCell", o);
  RNNWeights w = RNNWeights::create(*this, "", 4, o.input_size(), o.hidden_size(), o.bias());
  weight_ih = w.w_ih, weight_hh = w.w_hh, bias_ih = w.b_ih, bias_hh = w.b_hh;
}

std::tuple<Tensor, Tensor> LSTMCell::forward(const Tensor& input,
                                             const std::optional<std::tuple<Tensor, Tensor>>& hx) {
  run_forward_pre_hooks();  // Note [Forward pre-hooks], nn/module.h
  if (hx) return lstm_cell(input, {std::get<0>(*hx), std::get<1>(*hx)}, weight_ih, weight_hh, bias_ih, bias_hh);
  const Tensor zero = zero_state(input, weight_ih, options.hidden_size());
  return lstm_cell(input, {zero, zero}, weight_ih, weight_hh, bias_ih, bias_hh);
}

GRUCell::GRUCell(const GRUCellOptions& o) : options(o) {
  check_sizes("GRUCell", o);
  RNNWeights w = RNNWeights::create(*this, "", 3, o.input_size(), o.hidden_size(), o.bias());
  weight_ih = w.w_ih, weight_hh = w.w_hh, bias_ih = w.b_ih, bias_hh = w.b_hh;
}

Tensor GRUCell::forward(const Tensor& input, const Tensor& hx) {
  run_forward_pre_hooks();  // Note [Forward pre-hooks], nn/module.h
  const Tensor h = hx.defined() ? hx : zero_state(input, weight_ih, options.hidden_size());
  return gru_cell(input, h, weight_ih, weight_hh, bias_ih, bias_hh);
}

}  // namespace nn
}  // namespace lockstep
