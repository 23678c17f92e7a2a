// nn/rnn_layer_common.h — what the fused LSTM and GRU layers (nn/lstm_layer.cpp,
// nn/gru_layer.cpp) share: a layer run's shapes and step order, the recurrent
// product h W_hh^T with W_hh transposed once, the check that a layer can run
// fused, and the GEMMs of the backward that span all steps.
//
// § Note [The recurrent weight transposed once]
// Every step multiplies its (B, H) hidden state by W_hh^T, W_hh stored (G*H, H)
// (G = 4 gates for the LSTM, 3 for the GRU). Handed W_hh with trans_b, oneDNN's
// sgemm re-reads it across its rows in every call, and at the word model's shape
// (B 20, H 200) a step's product is then clearly slower than the same product
// with B stored (H, G*H) row-major (measured: docs/results/examples.md). So a
// layer run of kTransposeFromSteps steps or more first copies W_hh^T once (one
// pass over G*H x H values) and runs every step's GEMM on that copy. The products
// are the same sums up to the order oneDNN adds them in.
//
// Read before: nn/rnn_cell.h, core/native/gemm.h. Read next: nn/lstm_layer.h, nn/gru_layer.h.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/autocast.h"
#include "core/native/gemm.h"
#include "core/native/native.h"
#include "nn/rnn_cell.h"

namespace lockstep::nn::detail {

// The shapes of one layer's run: T steps, B rows, I inputs, H units.
struct LayerDims {
  int64_t T, B, I, H;
};

// Time index of step s (0 = the first step the recurrence takes).
inline int64_t time_of(int64_t s, int64_t T, bool reverse) { return reverse ? T - 1 - s : s; }

// Whether a fused layer can run these operands: x and every defined tensor of
// `others` and `w` float32 or float64 of one dtype on the CPU, outside autocast
// (Note [Recurrent layers under autocast]), with both biases or neither.
inline bool fused_layer_operands_ok(const Tensor& x, std::initializer_list<Tensor> others,
                                    const RNNWeights& w) {
  if (is_autocast_enabled() || x.device().is_cuda()) return false;
  const ScalarType dt = x.dtype();
  if (dt != kFloat32 && dt != kFloat64) return false;
  for (const std::initializer_list<Tensor>& group : {others, {w.w_ih, w.w_hh, w.b_ih, w.b_hh}}) {
    for (const Tensor& t : group) {
      if (t.defined() && (t.dtype() != dt || t.device().is_cuda())) return false;
    }
  }
  return w.b_ih.defined() == w.b_hh.defined();
}

// The layer's weights made contiguous (biases stay undefined when absent).
inline RNNWeights contiguous_weights(const RNNWeights& w) {
  return {w.w_ih.contiguous(), w.w_hh.contiguous(), w.b_ih.defined() ? w.b_ih.contiguous() : Tensor(),
          w.b_hh.defined() ? w.b_hh.contiguous() : Tensor()};
}

constexpr int64_t kTransposeFromSteps = 4;  // Note [The recurrent weight transposed once]

// dst (cols, rows) = src (rows, cols)^T, in 16 x 16 tiles.
template <class T_>
void transpose_into(const T_* src, int64_t rows, int64_t cols, T_* dst) {
  constexpr int64_t kTile = 16;
  for (int64_t i0 = 0; i0 < rows; i0 += kTile) {
    for (int64_t j0 = 0; j0 < cols; j0 += kTile) {
      for (int64_t i = i0; i < std::min(rows, i0 + kTile); ++i) {
        for (int64_t j = j0; j < std::min(cols, j0 + kTile); ++j) dst[j * rows + i] = src[i * cols + j];
      }
    }
  }
}

// h W_hh^T for every step of one layer run, W_hh (G, H) (G = gates * H): reads
// a transposed copy made once when the run has kTransposeFromSteps steps or more.
template <class T_>
class RecurrentProduct {
 public:
  RecurrentProduct(const T_* w_hh, int64_t G, int64_t H, int64_t steps) : w_hh_(w_hh), G_(G), H_(H) {
    if (steps < kTransposeFromSteps) return;
    w_hh_t_.resize(static_cast<size_t>(G * H));  // (H, G)
    transpose_into(w_hh, G, H, w_hh_t_.data());
  }
  // out (B, G) = h (B, H) W_hh^T + beta * out.
  void operator()(const T_* h, int64_t B, T_ beta, T_* out) const {
    if (w_hh_t_.empty()) {
      native::gemm<T_>(false, true, B, G_, H_, T_(1), h, H_, w_hh_, H_, beta, out, G_);
    } else {
      native::gemm<T_>(false, false, B, G_, H_, T_(1), h, H_, w_hh_t_.data(), G_, beta, out, G_);
    }
  }

 private:
  const T_* w_hh_;
  int64_t G_, H_;
  std::vector<T_> w_hh_t_;
};

// dst (T, B, H): the hidden state each step read (h0 for the first step, else
// the output of the step before it).
template <class T_>
void previous_states(const LayerDims& d, bool reverse, const T_* h0, const T_* out, T_* dst) {
  const int64_t step = d.B * d.H;
  for (int64_t s = 0; s < d.T; ++s) {
    const T_* hp = s == 0 ? h0 : out + time_of(s - 1, d.T, reverse) * step;
    std::copy(hp, hp + step, dst + time_of(s, d.T, reverse) * step);
  }
}

// The backward's products over all steps, given the gradient dg (rows, G) of a
// product a W^T with a (rows, K), W (G, K): da = dg W and dW = dg^T a (G, K).
// input_grad gives da for the layer's input, a = x (T, B, I), rows = T*B.
template <class T_>
Tensor input_grad(const T_* dg, const LayerDims& d, int64_t G, const Tensor& w_ih) {
  Tensor dx = native::empty({d.T, d.B, d.I}, w_ih.dtype());
  native::gemm<T_>(false, false, d.T * d.B, d.I, G, T_(1), dg, G, w_ih.data_ptr<T_>(), d.I, T_(0),
                   dx.data_ptr<T_>(), d.I);
  return dx;
}

template <class T_>
Tensor weight_grad(const T_* dg, int64_t rows, int64_t G, const T_* a, int64_t K, ScalarType dt) {
  Tensor dw = native::empty({G, K}, dt);
  native::gemm<T_>(true, false, G, K, rows, T_(1), dg, G, a, K, T_(0), dw.data_ptr<T_>(), K);
  return dw;
}

// The gradient of a bias added to every row: the column sums of dg (rows, G).
template <class T_>
Tensor column_sums(const T_* dg, int64_t rows, int64_t G, ScalarType dt) {
  Tensor db = native::zeros({G}, dt);
  T_* pb = db.data_ptr<T_>();
  for (int64_t r = 0; r < rows; ++r) {
    const T_* g = dg + r * G;
#pragma omp simd
    for (int64_t j = 0; j < G; ++j) pb[j] += g[j];
  }
  return db;
}

}  // namespace lockstep::nn::detail
