// core/native/optim_update.h — the per-element update formulas of SGD and
// Adam/AdamW, shared by the CPU loops (core/native/optim_step.cpp) and the
// CUDA kernels (core/cuda/optim_kernels.cu), so that a step does the same
// arithmetic in the same order and precision on either device.
//
// § Note [Shared optimizer updates]
// Each function updates element i of raw contiguous arrays, with the step's
// scalars already rounded to T (computed in double on the host). They are
// LS_HOST_DEVICE: plain inline functions in a C++ build, __host__ __device__
// under nvcc. The pointers are __restrict__ so that the CPU loop, after
// inlining, still vectorises as the hand-written loop did.
//
// Read before: optim/sgd.h, optim/adam.h. Read next: core/native/optim_step.h.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define LS_HOST_DEVICE __host__ __device__
#else
#define LS_HOST_DEVICE
#endif

namespace lockstep::optim_update {

// SGD's scalars, as T.
template <class T>
struct SgdElementScalars {
  T lr, wd, momentum, keep;  // keep = 1 - dampening
  bool use_momentum, nesterov, first;
};

//   d   = g + wd * p
//   buf = first ? d : momentum * buf + (1 - dampening) * d
//   d   = nesterov ? d + momentum * buf : buf          (when momentum != 0)
//   p   = p - lr * d
// buf is read and written only when momentum != 0 (it may be null otherwise).
template <class T>
LS_HOST_DEVICE inline void sgd_element(T* __restrict__ p, const T* __restrict__ g,
                                       T* __restrict__ buf, int64_t i, const SgdElementScalars<T>& s) {
  T d = g[i] + s.wd * p[i];
  if (s.use_momentum) {
    const T b = s.first ? d : s.momentum * buf[i] + s.keep * d;
    buf[i] = b;
    d = s.nesterov ? d + s.momentum * b : b;
  }
  p[i] -= s.lr * d;
}

// Adam's scalars of step t, as T.
template <class T>
struct AdamElementScalars {
  T beta1, keep1, beta2, keep2, eps;  // keep = 1 - beta
  T step_size;                        // lr / (1 - beta1^t)
  T bc2_sqrt;                         // sqrt(1 - beta2^t)
  T decay;                            // AdamW: 1 - lr * wd; Adam: 1
  T l2;                               // Adam: wd; AdamW: 0
};

//   p     = p * decay
//   grad  = g + l2 * p
//   m     = beta1 * m + (1 - beta1) * grad
//   v     = beta2 * v + (1 - beta2) * grad^2
//   v_max = max(v_max, v)                       (amsgrad, v_max != null: use v_max below)
//   p     = p - step_size * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
template <class T>
LS_HOST_DEVICE inline void adam_element(T* __restrict__ p, const T* __restrict__ g,
                                        T* __restrict__ m, T* __restrict__ v,
                                        T* __restrict__ v_max, int64_t i,
                                        const AdamElementScalars<T>& s) {
  const T pi = p[i] * s.decay;
  const T grad = g[i] + s.l2 * pi;
  const T mi = s.beta1 * m[i] + s.keep1 * grad;
  T vi = s.beta2 * v[i] + s.keep2 * grad * grad;
  m[i] = mi;
  v[i] = vi;
  if (v_max != nullptr) {
    vi = v_max[i] < vi ? vi : v_max[i];  // std::max(v_max[i], vi)
    v_max[i] = vi;
  }
#if defined(__CUDA_ARCH__)
  p[i] = pi - s.step_size * mi / (sqrt(vi) / s.bc2_sqrt + s.eps);
#else
  p[i] = pi - s.step_size * mi / (std::sqrt(vi) / s.bc2_sqrt + s.eps);
#endif
}

}  // namespace lockstep::optim_update
