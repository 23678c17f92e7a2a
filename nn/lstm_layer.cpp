// nn/lstm_layer.cpp — the fused LSTM layer: its forward, its backward node
// (LSTMLayerBackward) and the switch back to the composed path.
// Read before: nn/lstm_layer.h.
#include "nn/lstm_layer.h"

#include <atomic>
#include <vector>

#include "autograd/functions/functions.h"
#include "autograd/recompute_backward.h"
#include "core/env_flag.h"
#include "core/grad_mode.h"
#include "core/profiler.h"
#include "nn/lstm_pointwise.h"
#include "nn/rnn_composed.h"
#include "nn/rnn_layer_common.h"

namespace lockstep::nn {
namespace {

using detail::LayerDims;
using detail::time_of;

// LOCKSTEP_LSTM_FUSED=0 starts with the composed path (benchmarks compare the two).
std::atomic<bool> g_fused{env_flag("LOCKSTEP_LSTM_FUSED", true)};

// Forward in raw buffers. gates (T, B, 4H), cs, tanh_c, out (T, B, H) are written.
// Biases may be null (the layer has none).
template <class T_>
void forward_loop(const LayerDims& d, bool reverse, const T_* x, const T_* h0, const T_* c0, const T_* w_ih,
                  const T_* w_hh, const T_* b_ih, const T_* b_hh, T_* gates, T_* cs, T_* tanh_c, T_* out) {
  const int64_t G = 4 * d.H, rows = d.T * d.B;
  std::vector<T_> bias(static_cast<size_t>(G), T_(0));  // b_ih + b_hh, added by the gate pass
  for (int64_t j = 0; b_ih != nullptr && j < G; ++j) bias[static_cast<size_t>(j)] = b_ih[j] + b_hh[j];
  native::gemm<T_>(false, true, rows, G, d.I, T_(1), x, d.I, w_ih, d.I, T_(0), gates, G);
  // h W_hh^T per step, W_hh transposed once (Note [The recurrent weight transposed once]).
  const detail::RecurrentProduct<T_> h_w_hh(w_hh, G, d.H, d.T);
  const int64_t step = d.B * d.H;
  for (int64_t s = 0; s < d.T; ++s) {
    const int64_t t = time_of(s, d.T, reverse), tp = time_of(s - 1, d.T, reverse);
    const T_* h_prev = s == 0 ? h0 : out + tp * step;
    const T_* c_prev = s == 0 ? c0 : cs + tp * step;
    T_* g = gates + t * d.B * G;
    h_w_hh(h_prev, d.B, T_(1), g);  // gates[t] += h W_hh^T
    detail::lstm_pointwise_forward(d.B, d.H, g, bias.data(), c_prev, cs + t * step, tanh_c + t * step,
                                   out + t * step);
  }
}

struct LSTMLayerBackward final : autograd::BackwardNode {
  autograd::SavedVariable x, h0, c0, w_ih, w_hh, out;  // out: this node's output (T, B, H)
  autograd::SavedVariable b_ih, b_hh;                  // read only to differentiate twice
  Tensor gates, cs, tanh_c;  // activations (T, B, 4H), cell states and their tanh (T, B, H)
  LayerDims d{};
  bool reverse = false, has_bias = false;

  std::string name() const override { return "LSTMLayerBackward"; }
  void release_variables() override {
    for (autograd::SavedVariable* v : {&x, &h0, &c0, &w_ih, &w_hh, &out, &b_ih, &b_hh}) v->reset();
    gates = cs = tanh_c = Tensor();
  }
  // Under create_graph: the composed layer re-run (Note [Double backward by recomputation]).
  bool supports_double_backward() const override { return true; }

  // grads: output (T, B, H), h_n, c_n (B, H), any of them undefined.
  // Returns the gradients of x, h0, c0, w_ih, w_hh[, b_ih, b_hh].
  autograd::variable_list apply(autograd::variable_list&& grads) override {
    if (GradMode::is_enabled()) return recorded(grads);
    const Tensor xs = x.unpack(name()), h0s = h0.unpack(name()), c0s = c0.unpack(name());
    const Tensor wih = w_ih.unpack(name()), whh = w_hh.unpack(name()), outs = out.unpack(name());
    if (gates.dtype() == kFloat64) return run<double>(grads, xs, h0s, c0s, wih, whh, outs);
    return run<float>(grads, xs, h0s, c0s, wih, whh, outs);
  }

  autograd::variable_list recorded(const autograd::variable_list& grads) {
    std::vector<Tensor> inputs;
    for (const autograd::SavedVariable* v : {&x, &h0, &c0, &w_ih, &w_hh, &b_ih, &b_hh}) {
      inputs.push_back(v->unpack(name()));
    }
    const bool backwards = reverse;
    const auto composed = [backwards](const std::vector<Tensor>& in) {
      const auto [o, h, c] = lstm_layer_composed(in[0], in[1], in[2], RNNWeights{in[3], in[4], in[5], in[6]},
                                                 backwards);
      return std::vector<Tensor>{o, h, c};
    };
    autograd::variable_list result = autograd::recorded_gradients(name(), inputs, composed, grads);
    if (!has_bias) result.resize(5);
    return result;
  }

  template <class T_>
  autograd::variable_list run(const autograd::variable_list& grads, const Tensor& xs, const Tensor& h0s,
                              const Tensor& c0s, const Tensor& wih, const Tensor& whh, const Tensor& outs) {
    const ScalarType dt = gates.dtype();
    const int64_t G = 4 * d.H, step = d.B * d.H, rows = d.T * d.B;
    const Tensor dout = grads[0].defined() ? grads[0].contiguous() : Tensor();
    // dh_next: the gradient reaching h from later (h_n's, then each step's dh_prev); dc likewise.
    Tensor dh_next = grads[1].defined() ? grads[1].contiguous().clone() : native::zeros({d.B, d.H}, dt);
    Tensor dc = grads[2].defined() ? grads[2].contiguous().clone() : native::zeros({d.B, d.H}, dt);
    Tensor dh = native::empty({d.B, d.H}, dt), dgates = native::empty({d.T, d.B, G}, dt);
    Tensor h_prev = native::empty({d.T, d.B, d.H}, dt);  // the h each step read
    detail::previous_states(d, reverse, h0s.data_ptr<T_>(), outs.data_ptr<T_>(), h_prev.data_ptr<T_>());
    T_ *pdh = dh.data_ptr<T_>(), *pdn = dh_next.data_ptr<T_>(), *pdc = dc.data_ptr<T_>();
    T_* pdg = dgates.data_ptr<T_>();
    const T_ *php = h_prev.data_ptr<T_>(), *pdo = dout.defined() ? dout.data_ptr<T_>() : nullptr;
    const T_ *pg = gates.data_ptr<T_>(), *pcs = cs.data_ptr<T_>(), *ptc = tanh_c.data_ptr<T_>();
    const T_ *pc0 = c0s.data_ptr<T_>(), *pwhh = whh.data_ptr<T_>();
    for (int64_t s = d.T - 1; s >= 0; --s) {
      const int64_t t = time_of(s, d.T, reverse), tp = time_of(s - 1, d.T, reverse);
#pragma omp simd
      for (int64_t k = 0; k < step; ++k) pdh[k] = pdn[k] + (pdo != nullptr ? pdo[t * step + k] : T_(0));
      const T_* c_prev = s == 0 ? pc0 : pcs + tp * step;
      T_* dg = pdg + t * d.B * G;
      detail::lstm_pointwise_backward(d.B, d.H, pg + t * d.B * G, c_prev, ptc + t * step, pdh, pdc, dg);
      native::gemm<T_>(false, false, d.B, d.H, G, T_(1), dg, G, pwhh, d.H, T_(0), pdn, d.H);
    }
    autograd::variable_list result(has_bias ? 7 : 5);
    result[1] = dh_next, result[2] = dc;  // the gradients of h0 and c0
    if (should_compute_output(0)) result[0] = detail::input_grad(pdg, d, G, wih);
    if (should_compute_output(3)) result[3] = detail::weight_grad(pdg, rows, G, xs.data_ptr<T_>(), d.I, dt);
    if (should_compute_output(4)) result[4] = detail::weight_grad(pdg, rows, G, php, d.H, dt);
    if (has_bias && (should_compute_output(5) || should_compute_output(6))) {
      const Tensor db = detail::column_sums(pdg, rows, G, dt);
      result[5] = db, result[6] = db;  // the same tensor twice: Note [Gradients returned by nodes]
    }
    return result;
  }
};

template <class T_>
void run_forward(const LayerDims& d, bool reverse, const Tensor& x, const Tensor& h0, const Tensor& c0,
                 const RNNWeights& w, const Tensor& gates, const Tensor& cs, const Tensor& tanh_c,
                 const Tensor& out) {
  const T_* b_ih = w.b_ih.defined() ? w.b_ih.data_ptr<T_>() : nullptr;
  const T_* b_hh = w.b_hh.defined() ? w.b_hh.data_ptr<T_>() : nullptr;
  forward_loop<T_>(d, reverse, x.data_ptr<T_>(), h0.data_ptr<T_>(), c0.data_ptr<T_>(), w.w_ih.data_ptr<T_>(),
                   w.w_hh.data_ptr<T_>(), b_ih, b_hh, gates.data_ptr<T_>(), cs.data_ptr<T_>(),
                   tanh_c.data_ptr<T_>(), out.data_ptr<T_>());
}

}  // namespace

void set_lstm_fused(bool enabled) { g_fused.store(enabled); }
bool lstm_fused_enabled() { return g_fused.load(); }

bool lstm_layer_fusable(const Tensor& x, const Tensor& h0, const Tensor& c0, const RNNWeights& w) {
  return lstm_fused_enabled() && detail::fused_layer_operands_ok(x, {h0, c0}, w);
}

std::tuple<Tensor, Tensor, Tensor> lstm_layer_fused(const Tensor& x_in, const Tensor& h0_in,
                                                    const Tensor& c0_in, const RNNWeights& w_in,
                                                    bool reverse) {
  LS_CHECK(lstm_layer_fusable(x_in, h0_in, c0_in, w_in), "lstm_layer_fused: expected float32 or "
           "float64 CPU tensors of one dtype, outside autocast, with both biases or neither; "
           "nn::LSTM takes the composed path otherwise");
  profiler::Scope prof("lstm_layer");
  const Tensor x = x_in.contiguous(), h0 = h0_in.contiguous(), c0 = c0_in.contiguous();
  const RNNWeights w = detail::contiguous_weights(w_in);
  const LayerDims d{x.size(0), x.size(1), x.size(2), w.w_hh.size(1)};
  LS_CHECK(w.w_ih.sizes() == IntList({4 * d.H, d.I}) && h0.sizes() == IntList({d.B, d.H}) &&
               c0.sizes() == IntList({d.B, d.H}),
           "lstm_layer_fused: expected x (T, B, I), h0 and c0 (B, H), w_ih (4H, I) but got ", x.shape_str(),
           ", ", h0.shape_str(), ", ", c0.shape_str(), ", ", w.w_ih.shape_str());
  const ScalarType dt = x.dtype();
  Tensor gates = native::empty({d.T, d.B, 4 * d.H}, dt);
  Tensor cs = native::empty({d.T, d.B, d.H}, dt), tanh_c = native::empty({d.T, d.B, d.H}, dt);
  Tensor out = native::empty({d.T, d.B, d.H}, dt);
  if (dt == kFloat64) {
    run_forward<double>(d, reverse, x, h0, c0, w, gates, cs, tanh_c, out);
  } else {
    run_forward<float>(d, reverse, x, h0, c0, w, gates, cs, tanh_c, out);
  }
  const int64_t last = time_of(d.T - 1, d.T, reverse);
  Tensor h_n = native::select(out, 0, last).clone(), c_n = native::select(cs, 0, last).clone();
  std::vector<Tensor> inputs{x, h0, c0, w.w_ih, w.w_hh};
  if (w.b_ih.defined()) inputs.insert(inputs.end(), {w.b_ih, w.b_hh});
  if (autograd::compute_requires_grad(inputs)) {
    auto node = std::make_shared<LSTMLayerBackward>();
    node->x = autograd::SavedVariable(x), node->h0 = autograd::SavedVariable(h0);
    node->c0 = autograd::SavedVariable(c0), node->w_ih = autograd::SavedVariable(w.w_ih);
    node->w_hh = autograd::SavedVariable(w.w_hh), node->out = autograd::SavedVariable(out);
    node->b_ih = autograd::SavedVariable(w.b_ih), node->b_hh = autograd::SavedVariable(w.b_hh);
    node->gates = gates, node->cs = cs, node->tanh_c = tanh_c;
    node->d = d, node->reverse = reverse, node->has_bias = w.b_ih.defined();
    autograd::record(node, inputs, {out, h_n, c_n});
  }
  return {out, h_n, c_n};
}

}  // namespace lockstep::nn
