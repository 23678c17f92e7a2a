// distributed/comm_hooks/powersgd.cpp — the PowerSGD hook: split a bucket into
// compressed matrices and uncompressed rest, two power-iteration AllReduces,
// decompression and error feedback.
// Read before: distributed/comm_hooks/powersgd.h (Note [PowerSGD]).
#include "distributed/comm_hooks/powersgd.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/native/native.h"
#include "distributed/comm_hooks/default_hooks.h"

namespace lockstep::distributed::comm_hooks {

PowerSGDState::PowerSGDState(std::shared_ptr<ProcessGroup> process_group, PowerSGDOptions options)
    : process_group_(std::move(process_group)), options_(options) {
  LS_CHECK(process_group_ != nullptr, "PowerSGDState: the process group is null");
  LS_CHECK(options_.matrix_approximation_rank() >= 1, "PowerSGDState: matrix_approximation_rank must be >= 1, got ",
           options_.matrix_approximation_rank());
  LS_CHECK(options_.start_powersgd_iter() >= 0 && options_.min_compression_rate() >= 0 &&
               options_.orthogonalization_epsilon() >= 0,
           "PowerSGDState: start_powersgd_iter, min_compression_rate and orthogonalization_epsilon must be >= 0");
}

Tensor PowerSGDState::error(size_t index) const {
  auto it = memory_.find(index);
  return it == memory_.end() ? Tensor() : it->second.error;
}

int64_t PowerSGDState::compressed_buckets() const {
  return std::count_if(memory_.begin(), memory_.end(), [](const auto& e) { return e.second.compressed; });
}

PowerSGDState::BucketMemory& PowerSGDState::memory(const GradBucket& bucket) {
  BucketMemory& m = memory_[bucket.index()];
  if (m.parameter_indices != bucket.parameter_indices()) {  // a new layout: start afresh
    m = BucketMemory{};
    m.parameter_indices = bucket.parameter_indices();
  }
  return m;
}

void PowerSGDState::advance(const GradBucket& bucket) {
  if (bucket.is_last()) ++iteration_;
}

namespace detail {

namespace {
// Modified Gram-Schmidt, each column orthogonalised twice against the ones
// before it ("twice is enough": one pass loses orthogonality when a column is
// nearly dependent). A column left with less than kDependent of its norm is
// numerically dependent — rounding noise — and is zeroed instead of normalised.
template <class T>
void gram_schmidt(T* a, int64_t n, int64_t r, double epsilon) {
  const double kDependent = sizeof(T) == 4 ? 1e-4 : 1e-10;
  auto column_norm = [&](int64_t i) {
    double sq = 0;
    for (int64_t k = 0; k < n; ++k) sq += static_cast<double>(a[k * r + i]) * a[k * r + i];
    return std::sqrt(sq);
  };
  for (int64_t i = 0; i < r; ++i) {
    const double before = column_norm(i);
    for (int pass = 0; pass < 2; ++pass) {
      for (int64_t j = 0; j < i; ++j) {
        double dot = 0;
        for (int64_t k = 0; k < n; ++k) dot += static_cast<double>(a[k * r + j]) * a[k * r + i];
        for (int64_t k = 0; k < n; ++k) a[k * r + i] = static_cast<T>(a[k * r + i] - dot * a[k * r + j]);
      }
    }
    const double norm = column_norm(i);
    const bool dependent = norm <= kDependent * before;
    for (int64_t k = 0; k < n; ++k) {
      a[k * r + i] = dependent ? T(0) : static_cast<T>(a[k * r + i] / (norm + epsilon));
    }
  }
}

}  // namespace

// A CPU copy of t (t itself on the CPU): the host reads it next. For a CUDA
// tensor the copy waits for the compute stream, which has waited for the
// collectives before it (Note [NCCL stream isolation]).
static Tensor on_host(const Tensor& t) {
  if (t.device().is_cpu()) return t;
  Tensor host = native::empty(t.sizes(), t.dtype());  // same shape, CPU
  native::copy_(host, t);
  return host;
}

bool has_zero_column(const Tensor& matrix) {
  const Tensor norms = native::sum(native::binary(native::BinaryOp::Mul, matrix, matrix), {0}, false);  // (r)
  for (double v : on_host(norms).to_vector<double>()) {
    if (v == 0) return true;
  }
  return false;
}

void orthogonalize(Tensor& matrix, double epsilon) {
  LS_CHECK(matrix.dim() == 2 && matrix.is_contiguous(), "PowerSGD orthogonalize: expected a contiguous 2-d "
           "tensor, got ", matrix.shape_str());
  const int64_t n = matrix.size(0), r = matrix.size(1);
  // Gram-Schmidt is sequential over r columns: on the host, also for a CUDA
  // matrix (copied down and back; P and Q are small next to the gradients).
  Tensor host = on_host(matrix);  // (n, r)
  if (host.dtype() == kFloat64) {
    gram_schmidt(host.data_ptr<double>(), n, r, epsilon);
  } else {
    LS_CHECK(host.dtype() == kFloat32, "PowerSGD orthogonalize: float32 or float64 only, got ",
             dtype_name(host.dtype()));
    gram_schmidt(host.data_ptr<float>(), n, r, epsilon);
  }
  if (!host.is_same(matrix)) native::copy_(matrix, host);
}

}  // namespace detail

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Standard normal values, a pure function of (seed, stream, first + k): every
// rank draws the same Q. Box-Muller on SplitMix64 uniforms.
void fill_normal(Tensor& t, uint64_t seed, uint64_t stream, int64_t first) {
  Tensor values = native::empty(t.sizes(), kFloat64);
  double* v = values.data_ptr<double>();
  const uint64_t base = splitmix64(seed ^ splitmix64(stream));
  for (int64_t k = 0; k < t.numel(); ++k) {
    const uint64_t bits1 = splitmix64(base + 2 * static_cast<uint64_t>(first + k));
    const uint64_t bits2 = splitmix64(base + 2 * static_cast<uint64_t>(first + k) + 1);
    const double u1 = (static_cast<double>(bits1 >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
    const double u2 = static_cast<double>(bits2 >> 11) * 0x1.0p-53;          // [0, 1)
    v[k] = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }
  native::copy_(t, values);
}

// One gradient compressed as a matrix: its view and where its factors live.
struct Matrix {
  Tensor m;                   // (n, cols) view of the bucket
  int64_t n, cols, rank;
  int64_t p_offset, q_offset;  // into the packed P (sum n r) and Q (sum cols r)
};

Tensor factor(const Tensor& packed, int64_t offset, int64_t rows, int64_t rank) {
  return native::view(native::narrow(packed, 0, offset, rows * rank), {rows, rank});  // (rows, rank)
}

}  // namespace

TensorFuture powersgd_hook(PowerSGDState& state, GradBucket& bucket) {
  const PowerSGDOptions& o = state.options();
  ProcessGroup& pg = state.process_group();
  if (state.iteration() < o.start_powersgd_iter()) {
    state.advance(bucket);
    return allreduce_hook(pg, bucket);
  }
  Tensor buffer = bucket.buffer();  // (numel)
  LS_CHECK(buffer.dtype() == kFloat32 || buffer.dtype() == kFloat64, "powersgd_hook: bucket ", bucket.index(),
           " holds ", dtype_name(buffer.dtype()), " gradients; PowerSGD compresses float32/float64 only");
  const double divisor = bucket.divisor();
  PowerSGDState::BucketMemory* mem = &state.memory(bucket);
  if (o.use_error_feedback()) {
    if (mem->error.defined()) {
      native::binary_(native::BinaryOp::Add, buffer, mem->error);  // what was lost last time goes now
    } else {
      mem->error = native::zeros_like(buffer);
    }
  }
  Tensor input = o.use_error_feedback() ? native::clone(buffer) : Tensor();  // (numel) what this rank sends

  // Which gradients are worth compressing (Note [PowerSGD]).
  std::vector<Matrix> matrices;
  std::vector<Tensor> plain;
  int64_t p_total = 0, q_total = 0;
  for (const Tensor& g : bucket.gradients()) {
    if (g.dim() > 1 && g.numel() > 0) {
      const int64_t n = g.size(0), cols = g.numel() / n;
      const int64_t r = std::min({o.matrix_approximation_rank(), n, cols});
      if (static_cast<double>((n + cols) * r) * o.min_compression_rate() < static_cast<double>(n * cols)) {
        matrices.push_back({native::view(g, {n, cols}), n, cols, r, p_total, q_total});
        p_total += n * r;
        q_total += cols * r;
        continue;
      }
    }
    plain.push_back(g);
  }
  mem->compressed = !matrices.empty();

  // 1. The uncompressed rest: one flat AllReduce, like allreduce_hook.
  TensorFuture rest = TensorFuture::ready(buffer);
  if (!plain.empty()) {
    std::vector<Tensor> flats;
    for (const Tensor& g : plain) flats.push_back(native::reshape(g, {-1}));
    Tensor packed = native::cat(flats, 0);  // (sum of their numels)
    native::binary_scalar_(native::BinaryOp::Mul, packed, 1.0 / divisor);
    rest = TensorFuture::from_work(pg.allreduce(packed, ReduceOp::SUM), packed)
               .then([plain, buffer](const Tensor& averaged) {
                 int64_t offset = 0;
                 for (const Tensor& g : plain) {
                   native::copy_(g, native::view(native::narrow(averaged, 0, offset, g.numel()), g.sizes()));
                   offset += g.numel();
                 }
                 return buffer;
               });
  }
  // 2. P = M Q for every matrix, one AllReduce for all of them.
  TensorFuture result = rest;
  if (!matrices.empty()) {
    const ScalarType dtype = buffer.dtype();
    // P and Q live where the bucket does (CPU or CUDA).
    if (!mem->p.defined() || mem->p.numel() != p_total) {
      mem->p = native::empty({p_total}, dtype, buffer.device());  // (sum n r)
      native::fill_(mem->p, 0.0);
    }
    if (!mem->q.defined() || mem->q.numel() != q_total) {
      mem->q = native::empty({q_total}, dtype, buffer.device());  // (sum cols r)
      native::fill_(mem->q, 0.0);
      mem->q_valid = false;
    }
    const bool fresh = !o.warm_start() || !mem->q_valid;
    const uint64_t stream = fresh ? state.next_random_stream() : 0;
    for (const Matrix& x : matrices) {
      Tensor q = factor(mem->q, x.q_offset, x.cols, x.rank);  // (cols, r)
      // A zero column (dependent last time) would stay zero: draw that Q afresh.
      // Q is the same on every rank (it came out of an AllReduce), so is the choice.
      if (fresh || detail::has_zero_column(q)) {
        fill_normal(q, o.random_seed(), fresh ? stream : state.next_random_stream(), x.q_offset);
      }
      detail::orthogonalize(q, o.orthogonalization_epsilon());
      native::copy_(factor(mem->p, x.p_offset, x.n, x.rank), native::mm(x.m, q));
    }
    Tensor p = mem->p, q = mem->q;
    TensorFuture p_sum = TensorFuture::from_work(pg.allreduce(p, ReduceOp::SUM), p);
    const double epsilon = o.orthogonalization_epsilon();
    const bool warm = o.warm_start();
    // 3. In finalize: orthonormalise P, Q = M^T P, AllReduce Q, M ~ P Q^T.
    result = rest.then_future([p_sum](const Tensor&) { return p_sum; })
                 .then_future([&pg, matrices, p, q, epsilon](const Tensor&) {
                   for (const Matrix& x : matrices) {
                     Tensor px = factor(p, x.p_offset, x.n, x.rank);  // (n, r)
                     detail::orthogonalize(px, epsilon);
                     native::copy_(factor(q, x.q_offset, x.cols, x.rank),
                                   native::mm(native::transpose(x.m, 0, 1), px));
                   }
                   Tensor q_sum = q;
                   return TensorFuture::from_work(pg.allreduce(q_sum, ReduceOp::SUM), q_sum);
                 })
                 .then([matrices, p, q, divisor, buffer, mem, warm](const Tensor&) {
                   native::binary_scalar_(native::BinaryOp::Mul, q, 1.0 / divisor);
                   for (const Matrix& x : matrices) {
                     Tensor qx = factor(q, x.q_offset, x.cols, x.rank);  // (cols, r)
                     native::copy_(x.m, native::mm(factor(p, x.p_offset, x.n, x.rank), native::transpose(qx, 0, 1)));
                   }
                   mem->q_valid = warm;
                   return buffer;
                 });
  }
  state.advance(bucket);
  if (!o.use_error_feedback()) return result;
  // 4. Error feedback: what this rank sent minus what came back.
  return result.then([input, buffer, mem](const Tensor&) {
    mem->error = native::binary(native::BinaryOp::Sub, input, buffer);
    return buffer;
  });
}

}  // namespace lockstep::distributed::comm_hooks
