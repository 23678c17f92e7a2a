// core/native/optim_step.cpp — the CPU loops of the fused optimizer steps and of the
// gradient norm; CUDA tensors go to core/cuda/optim_kernels.cu (Note [CUDA dispatch]).
// Read before: core/native/optim_step.h.
#include "core/native/optim_step.h"

#include "core/profiler.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/native/bf16_rows.h"
#include "core/native/cuda_dispatch.h"
#include "core/native/optim_update.h"
#include "core/parallel.h"

namespace lockstep::native {

namespace {

bool floating_32_64(const Tensor& t) { return t.dtype() == kFloat32 || t.dtype() == kFloat64; }

// Every defined operand is like p: contiguous, same dtype, device and numel.
void check_like_p(const char* op, const Tensor& p, std::initializer_list<const Tensor*> others) {
  LS_CHECK(fused_step_ok(p), op, ": the parameter of shape ", p.shape_str(), " (", p.dtype(), ", ",
           p.device(), ") must be contiguous float32 or float64");
  for (const Tensor* t : others) {
    if (!t->defined()) continue;
    LS_CHECK(t->is_contiguous() && t->dtype() == p.dtype() && t->device() == p.device() &&
                 t->numel() == p.numel(),
             op, ": an operand of shape ", t->shape_str(), " (", t->dtype(), ", ", t->device(),
             ") does not match the parameter of shape ", p.shape_str(), " (", p.dtype(), ", ",
             p.device(), ")");
  }
}

template <class T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

// The loops over raw memory: __restrict parameters, so that after inlining the
// element formulas still vectorise as hand-written loops do.
// p16 (float32 p only; may be null): each block of the new p rounded to bf16
// while the block is still in L1, so the copy costs its 2 bytes written and no
// second read of p from memory.
template <class T>
void sgd_loop(T* __restrict p, const T* __restrict g, T* __restrict buf, BFloat16* p16,
              int64_t n, const optim_update::SgdElementScalars<T>& s) {
  constexpr int64_t kBlock = 1024;  // 4 KB of float32 p
  parallel_for(0, n, kOptimGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; b += kBlock) {
      const int64_t e = std::min(hi, b + kBlock);
      // Note [Shared optimizer updates]. The branches test loop invariants; the
      // compiler hoists them (loop unswitching).
      for (int64_t i = b; i < e; ++i) optim_update::sgd_element(p, g, buf, i, s);
      if constexpr (std::is_same_v<T, float>) {
        if (p16 != nullptr) round_to_bf16(p + b, p16 + b, e - b);
      }
    }
  });
}

// (GCC vectorises this loop only with -fno-math-errno, because of sqrt; it is
// memory-bound either way: 4 streams in, 3 or 4 out.)
// p16 as in sgd_loop.
template <class T>
void adam_loop(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v,
               T* __restrict v_max, BFloat16* p16, int64_t n,
               const optim_update::AdamElementScalars<T>& s) {
  constexpr int64_t kBlock = 1024;
  parallel_for(0, n, kOptimGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; b += kBlock) {
      const int64_t e = std::min(hi, b + kBlock);
      // Note [Shared optimizer updates].
      for (int64_t i = b; i < e; ++i) optim_update::adam_element(p, g, m, v, v_max, i, s);
      if constexpr (std::is_same_v<T, float>) {
        if (p16 != nullptr) round_to_bf16(p + b, p16 + b, e - b);
      }
    }
  });
}

// The bf16 copy p16 of a float32 CPU p, or undefined: checked as sgd_step_ and adam_step_ take it.
void check_bf16_copy(const char* op, const Tensor& p, const Tensor& p16) {
  LS_CHECK(!p16.defined() || (p.device().is_cpu() && p.dtype() == kFloat32 &&
                              p16.device().is_cpu() && p16.dtype() == kBFloat16 &&
                              p16.is_contiguous() && p16.numel() == p.numel()),
           op, ": the bf16 copy (", p16.defined() ? p16.shape_str() : std::string(),
           ") must be a contiguous CPU bfloat16 tensor of the float32 CPU parameter's ",
           p.numel(), " elements");
}

}  // namespace

bool fused_step_ok(const Tensor& p) {
  return (p.device().is_cpu() || p.device().is_cuda()) && p.is_contiguous() && floating_32_64(p);
}

void sgd_step_(const Tensor& p, const Tensor& g, const Tensor& buf, double lr, double momentum,
               double dampening, double weight_decay, bool nesterov, bool first,
               const Tensor& p16) {
  check_bf16_copy("sgd_step_", p, p16);
  LS_DISPATCH_CUDA(p, sgd_step_(p, g, buf, lr, momentum, dampening, weight_decay, nesterov, first));
  check_like_p("sgd_step_", p, {&g, &buf});
  LS_CHECK(momentum == 0.0 || buf.defined(), "sgd_step_: momentum ", momentum,
           " needs a momentum buffer");
  // Note [Profiler bytes]: p and buf read and written, g read, the bf16 copy written.
  profiler::add_bytes(static_cast<int64_t>(2 * p.nbytes() + g.nbytes() +
                                           (buf.defined() ? 2 * buf.nbytes() : 0) +
                                           (p16.defined() ? p16.nbytes() : 0)));
  dispatch_floating(p.dtype(), "sgd_step_", [&]<class T>() {
    const optim_update::SgdElementScalars<T> s{static_cast<T>(lr),
                                               static_cast<T>(weight_decay),
                                               static_cast<T>(momentum),
                                               static_cast<T>(1.0 - dampening),
                                               momentum != 0.0,
                                               nesterov,
                                               first};
    sgd_loop<T>(p.data_ptr<T>(), g.data_ptr<T>(), data_or_null<T>(buf),
                p16.defined() ? p16.data_ptr<BFloat16>() : nullptr, p.numel(), s);
  });
}

void adam_step_(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                const Tensor& v_max, double beta1, double beta2, double eps, double step_size,
                double bc2_sqrt, double decay, double l2) {
  LS_DISPATCH_CUDA(
      p, adam_step_(p, g, m, v, v_max, beta1, beta2, eps, step_size, bc2_sqrt, decay, l2));
  adam_step_bf16_copy_(p, g, m, v, v_max, beta1, beta2, eps, step_size, bc2_sqrt, decay, l2,
                       Tensor());
}

void adam_step_bf16_copy_(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                          const Tensor& v_max, double beta1, double beta2, double eps,
                          double step_size, double bc2_sqrt, double decay, double l2,
                          const Tensor& p16) {
  check_bf16_copy("adam_step_", p, p16);
  LS_CHECK(p.device().is_cpu(), "adam_step_bf16_copy_: a CPU parameter, got ", p.device());
  check_like_p("adam_step_", p, {&g, &m, &v, &v_max});
  LS_CHECK(m.defined() && v.defined(), "adam_step_: needs both moments (exp_avg, exp_avg_sq)");
  // Note [Profiler bytes]: p, m, v (and v_max) read and written, g read.
  profiler::add_bytes(static_cast<int64_t>(
      2 * (p.nbytes() + m.nbytes() + v.nbytes() + (v_max.defined() ? v_max.nbytes() : 0)) +
      g.nbytes() + (p16.defined() ? p16.nbytes() : 0)));
  dispatch_floating(p.dtype(), "adam_step_", [&]<class T>() {
    const optim_update::AdamElementScalars<T> s{
        static_cast<T>(beta1),       static_cast<T>(1.0 - beta1), static_cast<T>(beta2),
        static_cast<T>(1.0 - beta2), static_cast<T>(eps),         static_cast<T>(step_size),
        static_cast<T>(bc2_sqrt),    static_cast<T>(decay),       static_cast<T>(l2)};
    adam_loop<T>(p.data_ptr<T>(), g.data_ptr<T>(), m.data_ptr<T>(), v.data_ptr<T>(),
                 data_or_null<T>(v_max), p16.defined() ? p16.data_ptr<BFloat16>() : nullptr,
                 p.numel(), s);
  });
}

double grad_norm_part(const Tensor& g, double norm_type) {
  LS_DISPATCH_CUDA(g, grad_norm_part(g, norm_type));
  LS_CHECK(floating_32_64(g), "grad_norm_part: expected a float32 or float64 gradient, got ",
           g.dtype());
  const Tensor c = g.contiguous();
  const bool inf = std::isinf(norm_type);
  const int64_t n = c.numel();
  const int64_t block = kOptimGrain;
  std::vector<double> partial(static_cast<size_t>((n + block - 1) / block), 0.0);
  dispatch_floating(c.dtype(), "grad_norm_part", [&]<class T>() {
    const T* data = c.data_ptr<T>();
    parallel_for(0, static_cast<int64_t>(partial.size()), 1, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b) {
        const int64_t end = std::min(n, (b + 1) * block);
        double acc = 0.0;
        if (!inf && norm_type == 2.0) {
          // The common case: 16 independent partial sums, so the adds do not wait on each
          // other (one running sum is bound by the add's latency) and the loop vectorises.
          constexpr int64_t kLanes = 16;
          double lane[kLanes] = {};
          int64_t i = b * block;
          for (; i + kLanes <= end; i += kLanes) {
            for (int64_t k = 0; k < kLanes; ++k) {
              const double v = static_cast<double>(data[i + k]);
              lane[k] += v * v;
            }
          }
          for (; i < end; ++i) acc += static_cast<double>(data[i]) * static_cast<double>(data[i]);
          for (double l : lane) acc += l;
          partial[static_cast<size_t>(b)] = acc;
          continue;
        }
        for (int64_t i = b * block; i < end; ++i) {
          const double a = std::abs(static_cast<double>(data[i]));
          if (inf) {
            acc = std::max(acc, a);
          } else if (norm_type == 2.0) {
            acc += a * a;
          } else {
            acc += std::pow(a, norm_type);
          }
        }
        partial[static_cast<size_t>(b)] = acc;
      }
    });
  });
  double total = 0.0;
  for (double part : partial) total = inf ? std::max(total, part) : total + part;
  return total;
}

}  // namespace lockstep::native
