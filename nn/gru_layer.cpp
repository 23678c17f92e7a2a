// nn/gru_layer.cpp — the fused GRU layer: its forward, its backward node
// (GRULayerBackward) and the switch back to the composed path.
// Read before: nn/gru_layer.h, nn/lstm_layer.cpp (the same layout for the LSTM).
#include "nn/gru_layer.h"

#include <atomic>
#include <vector>

#include "autograd/functions/functions.h"
#include "autograd/recompute_backward.h"
#include "core/env_flag.h"
#include "core/grad_mode.h"
#include "core/profiler.h"
#include "nn/gru_pointwise.h"
#include "nn/rnn_composed.h"
#include "nn/rnn_layer_common.h"

namespace lockstep::nn {
namespace {

using detail::LayerDims;
using detail::time_of;

// LOCKSTEP_GRU_FUSED=0 starts with the composed path (benchmarks compare the two).
std::atomic<bool> g_fused{env_flag("LOCKSTEP_GRU_FUSED", true)};

// Forward in raw buffers. act (T, B, 3H), hn and out (T, B, H) are written.
// Biases may be null (the layer has none).
template <class T_>
void forward_loop(const LayerDims& d, bool reverse, const T_* x, const T_* h0, const T_* w_ih, const T_* w_hh,
                  const T_* b_ih, const T_* b_hh, T_* act, T_* hn, T_* out) {
  const int64_t G = 3 * d.H, rows = d.T * d.B, step = d.B * d.H;
  // bias: b_ih + b_hh for r and z, then b_in; b_hn apart (Note [Fused GRU layer]).
  std::vector<T_> bias(static_cast<size_t>(G), T_(0)), b_hn(static_cast<size_t>(d.H), T_(0));
  for (int64_t j = 0; b_ih != nullptr && j < G; ++j) {
    bias[static_cast<size_t>(j)] = j < 2 * d.H ? b_ih[j] + b_hh[j] : b_ih[j];
    if (j >= 2 * d.H) b_hn[static_cast<size_t>(j - 2 * d.H)] = b_hh[j];
  }
  native::gemm<T_>(false, true, rows, G, d.I, T_(1), x, d.I, w_ih, d.I, T_(0), act, G);  // gx, all steps
  // h W_hh^T per step, W_hh transposed once (Note [The recurrent weight transposed once]).
  const detail::RecurrentProduct<T_> h_w_hh(w_hh, G, d.H, d.T);
  std::vector<T_> gh(static_cast<size_t>(d.B * G));  // (B, 3H)
  for (int64_t s = 0; s < d.T; ++s) {
    const int64_t t = time_of(s, d.T, reverse);
    const T_* h_prev = s == 0 ? h0 : out + time_of(s - 1, d.T, reverse) * step;
    h_w_hh(h_prev, d.B, T_(0), gh.data());  // gh = h W_hh^T
    detail::gru_pointwise_forward(d.B, d.H, act + t * d.B * G, gh.data(), bias.data(), b_hn.data(), h_prev,
                                  hn + t * step, out + t * step);
  }
}

struct GRULayerBackward final : autograd::BackwardNode {
  autograd::SavedVariable x, h0, w_ih, w_hh, out;  // out: this node's output (T, B, H)
  autograd::SavedVariable b_ih, b_hh;             // read only to differentiate twice
  Tensor act, hn;  // r, z, n (T, B, 3H) and gh_n + b_hn (T, B, H)
  LayerDims d{};
  bool reverse = false, has_bias = false;

  std::string name() const override { return "GRULayerBackward"; }
  void release_variables() override {
    for (autograd::SavedVariable* v : {&x, &h0, &w_ih, &w_hh, &out, &b_ih, &b_hh}) v->reset();
    act = hn = Tensor();
  }
  // Under create_graph: the composed layer re-run (Note [Double backward by recomputation]).
  bool supports_double_backward() const override { return true; }

  // grads: output (T, B, H), h_n (B, H), either undefined.
  // Returns the gradients of x, h0, w_ih, w_hh[, b_ih, b_hh].
  autograd::variable_list apply(autograd::variable_list&& grads) override {
    if (GradMode::is_enabled()) return recorded(grads);
    const Tensor xs = x.unpack(name()), h0s = h0.unpack(name()), wih = w_ih.unpack(name());
    const Tensor whh = w_hh.unpack(name()), outs = out.unpack(name());
    if (act.dtype() == kFloat64) return run<double>(grads, xs, h0s, wih, whh, outs);
    return run<float>(grads, xs, h0s, wih, whh, outs);
  }

  autograd::variable_list recorded(const autograd::variable_list& grads) {
    std::vector<Tensor> inputs;
    for (const autograd::SavedVariable* v : {&x, &h0, &w_ih, &w_hh, &b_ih, &b_hh}) {
      inputs.push_back(v->unpack(name()));
    }
    const bool backwards = reverse;
    const auto composed = [backwards](const std::vector<Tensor>& in) {
      const auto [o, h] = gru_layer_composed(in[0], in[1], RNNWeights{in[2], in[3], in[4], in[5]}, backwards);
      return std::vector<Tensor>{o, h};
    };
    autograd::variable_list result = autograd::recorded_gradients(name(), inputs, composed, grads);
    if (!has_bias) result.resize(4);
    return result;
  }

  template <class T_>
  autograd::variable_list run(const autograd::variable_list& grads, const Tensor& xs, const Tensor& h0s,
                              const Tensor& wih, const Tensor& whh, const Tensor& outs) {
    const ScalarType dt = act.dtype();
    const int64_t G = 3 * d.H, step = d.B * d.H, rows = d.T * d.B;
    const Tensor dout = grads[0].defined() ? grads[0].contiguous() : Tensor();
    // dh_next: the gradient reaching h from later (h_n's, then each step's dh_prev).
    Tensor dh_next = grads[1].defined() ? grads[1].contiguous().clone() : native::zeros({d.B, d.H}, dt);
    Tensor dh = native::empty({d.B, d.H}, dt);
    Tensor dgx = native::empty({d.T, d.B, G}, dt), dgh = native::empty({d.T, d.B, G}, dt);
    Tensor h_prev = native::empty({d.T, d.B, d.H}, dt);  // the h each step read
    detail::previous_states(d, reverse, h0s.data_ptr<T_>(), outs.data_ptr<T_>(), h_prev.data_ptr<T_>());
    T_ *pdh = dh.data_ptr<T_>(), *pdn = dh_next.data_ptr<T_>();
    T_ *pdgx = dgx.data_ptr<T_>(), *pdgh = dgh.data_ptr<T_>();
    const T_ *php = h_prev.data_ptr<T_>(), *pdo = dout.defined() ? dout.data_ptr<T_>() : nullptr;
    const T_ *pa = act.data_ptr<T_>(), *phn = hn.data_ptr<T_>(), *pwhh = whh.data_ptr<T_>();
    for (int64_t s = d.T - 1; s >= 0; --s) {
      const int64_t t = time_of(s, d.T, reverse);
#pragma omp simd
      for (int64_t k = 0; k < step; ++k) pdh[k] = pdn[k] + (pdo != nullptr ? pdo[t * step + k] : T_(0));
      T_ *gx = pdgx + t * d.B * G, *gh = pdgh + t * d.B * G;
      detail::gru_pointwise_backward(d.B, d.H, pa + t * d.B * G, phn + t * step, php + t * step, pdh, gx, gh,
                                     pdn);
      native::gemm<T_>(false, false, d.B, d.H, G, T_(1), gh, G, pwhh, d.H, T_(1), pdn, d.H);  // += dgh W_hh
    }
    autograd::variable_list result(has_bias ? 6 : 4);
    result[1] = dh_next;  // the gradient of h0
    if (should_compute_output(0)) result[0] = detail::input_grad(pdgx, d, G, wih);
    if (should_compute_output(2)) result[2] = detail::weight_grad(pdgx, rows, G, xs.data_ptr<T_>(), d.I, dt);
    if (should_compute_output(3)) result[3] = detail::weight_grad(pdgh, rows, G, php, d.H, dt);
    if (has_bias && should_compute_output(4)) result[4] = detail::column_sums(pdgx, rows, G, dt);
    if (has_bias && should_compute_output(5)) result[5] = detail::column_sums(pdgh, rows, G, dt);
    return result;
  }
};

template <class T_>
void run_forward(const LayerDims& d, bool reverse, const Tensor& x, const Tensor& h0, const RNNWeights& w,
                 const Tensor& act, const Tensor& hn, const Tensor& out) {
  const T_* b_ih = w.b_ih.defined() ? w.b_ih.data_ptr<T_>() : nullptr;
  const T_* b_hh = w.b_hh.defined() ? w.b_hh.data_ptr<T_>() : nullptr;
  forward_loop<T_>(d, reverse, x.data_ptr<T_>(), h0.data_ptr<T_>(), w.w_ih.data_ptr<T_>(),
                   w.w_hh.data_ptr<T_>(), b_ih, b_hh, act.data_ptr<T_>(), hn.data_ptr<T_>(),
                   out.data_ptr<T_>());
}

}  // namespace

void set_gru_fused(bool enabled) { g_fused.store(enabled); }
bool gru_fused_enabled() { return g_fused.load(); }

bool gru_layer_fusable(const Tensor& x, const Tensor& h0, const RNNWeights& w) {
  return gru_fused_enabled() && detail::fused_layer_operands_ok(x, {h0}, w);
}

std::tuple<Tensor, Tensor> gru_layer_fused(const Tensor& x_in, const Tensor& h0_in, const RNNWeights& w_in,
                                           bool reverse) {
  LS_CHECK(gru_layer_fusable(x_in, h0_in, w_in), "gru_layer_fused: expected float32 or float64 CPU "
           "tensors of one dtype, outside autocast, with both biases or neither; nn::GRU takes the "
           "composed path otherwise");
  profiler::Scope prof("gru_layer");
  const Tensor x = x_in.contiguous(), h0 = h0_in.contiguous();
  const RNNWeights w = detail::contiguous_weights(w_in);
  const LayerDims d{x.size(0), x.size(1), x.size(2), w.w_hh.size(1)};
  const bool biases_ok = !w.b_ih.defined() || (w.b_ih.sizes() == IntList({3 * d.H}) &&
                                                 w.b_hh.sizes() == IntList({3 * d.H}));
  LS_CHECK(w.w_ih.sizes() == IntList({3 * d.H, d.I}) && w.w_hh.size(0) == 3 * d.H &&
               h0.sizes() == IntList({d.B, d.H}) && biases_ok,
           "gru_layer_fused: expected x (T, B, I), h0 (B, H), w_ih (3H, I), w_hh (3H, H) and biases (3H) "
           "but got ", x.shape_str(), ", ", h0.shape_str(), ", ", w.w_ih.shape_str(), ", ",
           w.w_hh.shape_str(),
           w.b_ih.defined() ? ", " + w.b_ih.shape_str() : std::string());
  const ScalarType dt = x.dtype();
  Tensor act = native::empty({d.T, d.B, 3 * d.H}, dt);
  Tensor hn = native::empty({d.T, d.B, d.H}, dt), out = native::empty({d.T, d.B, d.H}, dt);
  if (dt == kFloat64) {
    run_forward<double>(d, reverse, x, h0, w, act, hn, out);
  } else {
    run_forward<float>(d, reverse, x, h0, w, act, hn, out);
  }
  Tensor h_n = native::select(out, 0, time_of(d.T - 1, d.T, reverse)).clone();
  std::vector<Tensor> inputs{x, h0, w.w_ih, w.w_hh};
  if (w.b_ih.defined()) inputs.insert(inputs.end(), {w.b_ih, w.b_hh});
  if (autograd::compute_requires_grad(inputs)) {
    auto node = std::make_shared<GRULayerBackward>();
    node->x = autograd::SavedVariable(x), node->h0 = autograd::SavedVariable(h0);
    node->w_ih = autograd::SavedVariable(w.w_ih), node->w_hh = autograd::SavedVariable(w.w_hh);
    node->out = autograd::SavedVariable(out);
    node->b_ih = autograd::SavedVariable(w.b_ih), node->b_hh = autograd::SavedVariable(w.b_hh);
    node->act = act, node->hn = hn;
    node->d = d, node->reverse = reverse, node->has_bias = w.b_ih.defined();
    autograd::record(node, inputs, {out, h_n});
  }
  return {out, h_n};
}

}  // namespace lockstep::nn
