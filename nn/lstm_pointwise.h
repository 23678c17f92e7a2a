// nn/lstm_pointwise.h — the gate arithmetic of one LSTM time step, forward and
// backward, each as one pass over the batch: the kernels of the fused layer in
// nn/lstm_layer.cpp.
//
// Forward, per row b and unit j (gates in PyTorch's order i, f, g, o):
//   i = sigmoid(a_i), f = sigmoid(a_f), g = tanh(a_g), o = sigmoid(a_o)
//   c' = f * c + i * g,   h' = o * tanh(c')
// The activations overwrite the pre-activations a in `gates` (backward needs
// them), and tanh(c') is kept too. Backward, given dh' and dc' (the gradient of
// c' from step t + 1):
//   dc' += dh' * o * (1 - tanh(c')^2)
//   da_o = dh' * tanh(c') * o (1 - o),   da_i = dc' * g * i (1 - i)
//   da_f = dc' * c * f (1 - f),          da_g = dc' * i * (1 - g^2)
//   dc   = dc' * f                        (the gradient of the previous cell state)
//
// § Note [Fast sigmoid and tanh in the LSTM cell]
// float32 uses exp_simd (Note [Vectorisable exp and erf] in
// core/native/elementwise_loop.h) for both activations, tanh(x) = 1 - 2 / (exp(2x) + 1),
// so the loops vectorise; libm's tanhf, one element at a time, was 15 % of the word
// language model's epoch. That tanh is exact to about 1e-7 absolute (not relative:
// near 0 it loses the low digits), well below what the gates' float32 GEMMs round
// away; tests/nn/test_lstm_fused.cpp compares the fused layer with the composed
// reference. float64 (gradcheck) uses libm.
//
// Read before: nn/rnn_cell.h, core/native/elementwise_loop.h. Read next: nn/lstm_layer.h.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/native/elementwise_loop.h"

namespace lockstep::nn::detail {

template <class T>
[[gnu::always_inline]] inline T lstm_sigmoid(T x) {
  return T(1) / (T(1) + native::detail::exp_simd(-x));
}

template <class T>
[[gnu::always_inline]] inline T lstm_tanh(T x) {  // Note [Fast sigmoid and tanh in the LSTM cell]
  if constexpr (std::is_same_v<T, float>) {
    return 1.0f - 2.0f / (native::detail::exp_simd(2.0f * x) + 1.0f);
  } else {
    return std::tanh(x);
  }
}

// One step forward for B rows of H units. gates (B, 4H): pre-activations less
// the bias in, activations out; bias (4H): b_ih + b_hh, added here (one pass less
// over the gates than adding it to them first); c_prev (B, H); c, tanh_c, h (B, H) written.
template <class T>
void lstm_pointwise_forward(int64_t B, int64_t H, T* gates, const T* bias, const T* c_prev, T* c, T* tanh_c,
                            T* h) {
  for (int64_t b = 0; b < B; ++b) {
    T* a = gates + b * 4 * H;
    const T* cp = c_prev + b * H;
    T *cn = c + b * H, *tc = tanh_c + b * H, *hn = h + b * H;
#pragma omp simd
    for (int64_t j = 0; j < H; ++j) {
      const T i = lstm_sigmoid(a[j] + bias[j]), f = lstm_sigmoid(a[H + j] + bias[H + j]);
      const T g = lstm_tanh(a[2 * H + j] + bias[2 * H + j]), o = lstm_sigmoid(a[3 * H + j] + bias[3 * H + j]);
      const T cv = f * cp[j] + i * g;
      const T t = lstm_tanh(cv);
      a[j] = i, a[H + j] = f, a[2 * H + j] = g, a[3 * H + j] = o;
      cn[j] = cv, tc[j] = t, hn[j] = o * t;
    }
  }
}

// One step backward. act (B, 4H): the activations the forward kept; c_prev,
// tanh_c (B, H) as in the forward; dh (B, H): the gradient of h'; dc (B, H): the
// gradient of c' in, of c_prev out; dgates (B, 4H): the pre-activations' gradient.
template <class T>
void lstm_pointwise_backward(int64_t B, int64_t H, const T* act, const T* c_prev, const T* tanh_c,
                             const T* dh, T* dc, T* dgates) {
  for (int64_t b = 0; b < B; ++b) {
    const T* a = act + b * 4 * H;
    T* da = dgates + b * 4 * H;
    const T *cp = c_prev + b * H, *tc = tanh_c + b * H, *dhr = dh + b * H;
    T* dcr = dc + b * H;
#pragma omp simd
    for (int64_t j = 0; j < H; ++j) {
      const T i = a[j], f = a[H + j], g = a[2 * H + j], o = a[3 * H + j], t = tc[j];
      const T dcv = dcr[j] + dhr[j] * o * (T(1) - t * t);
      da[j] = dcv * g * i * (T(1) - i);
      da[H + j] = dcv * cp[j] * f * (T(1) - f);
      da[2 * H + j] = dcv * i * (T(1) - g * g);
      da[3 * H + j] = dhr[j] * t * o * (T(1) - o);
      dcr[j] = dcv * f;
    }
  }
}

}  // namespace lockstep::nn::detail
