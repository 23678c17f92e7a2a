// autograd/functions/linalg.cpp — matmul and bmm.
//
// For matrices C = A B (A: (n, k), B: (k, m), G = dL/dC: (n, m)):
//   dA = G B^T   (n, k)        dB = A^T G   (k, m)
// BmmBackward applies this to each of the B matrices of a batch.
//
// § Note [matmul backward]
// matmul also takes vectors and batches (torch.matmul's rules). Its backward
// reduces every case to the matrix one:
//   1. a 1-d `a` (k) is the matrix (1, k), a 1-d `b` (k) is the matrix (k, 1);
//      matmul dropped those size-1 dims from the result, so G is reshaped to
//      (batch..., n, m) to put them back;
//   2. dA = matmul(G, B^T) and dB = matmul(A^T, G) then have the broadcast
//      batch dims; a batch dim that A (or B) was broadcast along is summed away
//      (sum_to, see Note [Gradient of a broadcast input] in functions.h);
//   3. finally each gradient is reshaped to its input's own shape.
// Fast path: when `a` is batched and `b` is a matrix or vector (a Linear layer
// on (B, T, C) input), the batch folds into the rows: A as (B*T, k) and G as
// (B*T, m), so dB is one (k, B*T) x (B*T, m) product instead of B products
// followed by a sum.
//
// Both support double backward (their formulas use grad_ops.h).
//
// Read before: autograd/functions/functions.h. Read next: autograd/functions/shape.cpp.
#include "autograd/functions/autocast_ops.h"
#include "autograd/functions/functions.h"
#include "core/profiler.h"
#include "core/shape.h"

namespace lockstep::autograd {
namespace {

// The transpose of the last two dims: (..., r, c) -> (..., c, r), a view.
Tensor mT(const Tensor& t) { return grad_ops::transpose(t, -2, -1); }

// The shape a matmul operand has as a matrix (step 1 of Note [matmul backward]).
IntList as_matrix(const IntList& sizes, bool is_left) {
  if (sizes.size() != 1) return sizes;
  return is_left ? IntList{1, sizes[0]} : IntList{sizes[0], 1};
}

// Steps 2-3 of Note [matmul backward]: sum the broadcast batch dims away, then
// reshape and convert to the input's shape and dtype.
Tensor to_input(const Tensor& grad, const IntList& matrix_sizes, const InputMeta& input) {
  Tensor g = grad.sizes() == matrix_sizes ? grad : grad_ops::sum_to(grad, matrix_sizes);
  return grad_ops::to_dtype(grad_ops::reshape(g, input.sizes), input.dtype);
}

struct MatmulBackward final : DoubleBackwardNode {
  InputMeta self_meta, other_meta;
  SavedVariable self, other;  // each saved only when the other's gradient needs it
  std::string name() const override { return "MatmulBackward"; }

  variable_list apply(variable_list&& grads) override {
    const Tensor& g = grads[0];
    const IntList& a_sizes = self_meta.sizes;
    const IntList& b_sizes = other_meta.sizes;
    IntList a2 = as_matrix(a_sizes, /*is_left=*/true);   // (..., n, k)
    IntList b2 = as_matrix(b_sizes, /*is_left=*/false);  // (..., k, m)
    const int64_t k = a2.back();
    const int64_t m = b2.back();
    Tensor da, db;

    if (a2.size() >= 3 && b2.size() == 2) {  // fast path: fold a's batch into rows
      Tensor g_rows = grad_ops::reshape(g, {-1, m});  // (N, m)
      if (should_compute_output(0)) {
        Tensor b = grad_ops::reshape(other.unpack(name()), b2);
        da = to_input(grad_ops::mm(g_rows, mT(b)), {g_rows.size(0), k}, self_meta);  // (N, k)
      }
      if (should_compute_output(1)) {
        Tensor a_rows = grad_ops::reshape(self.unpack(name()), {-1, k});       // (N, k)
        db = to_input(grad_ops::mm(mT(a_rows), g_rows), b2, other_meta);        // (k, m)
      }
      return {da, db};
    }

    IntList out2 = broadcast_shapes(IntList(a2.begin(), a2.end() - 2),
                                    IntList(b2.begin(), b2.end() - 2), "matmul backward");
    out2.push_back(a2[a2.size() - 2]);
    out2.push_back(m);
    Tensor g2 = grad_ops::reshape(g, out2);  // (batch..., n, m)
    if (should_compute_output(0)) {
      Tensor b = grad_ops::reshape(other.unpack(name()), b2);
      da = to_input(grad_ops::matmul(g2, mT(b)), a2, self_meta);  // (batch..., n, k)
    }
    if (should_compute_output(1)) {
      Tensor a = grad_ops::reshape(self.unpack(name()), a2);
      db = to_input(grad_ops::matmul(mT(a), g2), b2, other_meta);  // (batch..., k, m)
    }
    return {da, db};
  }

  void release_variables() override {
    self.reset();
    other.reset();
  }
};

struct BmmBackward final : DoubleBackwardNode {
  InputMeta self_meta, other_meta;
  SavedVariable self, other;
  std::string name() const override { return "BmmBackward"; }
  variable_list apply(variable_list&& grads) override {
    const Tensor& g = grads[0];  // (B, n, m)
    Tensor da, db;
    if (should_compute_output(0)) {
      Tensor b = other.unpack(name());
      da = grad_ops::to_dtype(grad_ops::bmm(g, mT(b)), self_meta.dtype);  // (B, n, k)
    }
    if (should_compute_output(1)) {
      Tensor a = self.unpack(name());
      db = grad_ops::to_dtype(grad_ops::bmm(mT(a), g), other_meta.dtype);  // (B, k, m)
    }
    return {da, db};
  }
  void release_variables() override {
    self.reset();
    other.reset();
  }
};

// Records the node of a two-operand product, saving each operand only when the
// other operand's gradient needs it.
template <class NodeT>
Tensor record_product(Tensor out, const Tensor& a, const Tensor& b) {
  if (compute_requires_grad({a, b})) {
    auto node = std::make_shared<NodeT>();
    node->self_meta = InputMeta(a);
    node->other_meta = InputMeta(b);
    if (b.requires_grad()) node->self = SavedVariable(a);
    if (a.requires_grad()) node->other = SavedVariable(b);
    record(node, {a, b}, {out});
  }
  return out;
}

}  // namespace
}  // namespace lockstep::autograd

namespace lockstep {

using namespace autograd;  // NOLINT: this file defines the ops that record these nodes

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (autocast_applies({&a, &b})) {  // Note [Autocast policy]: both operands in bf16
    const Tensor a16 = bf16_input(a), b16 = bf16_input(b);
    profiler::Scope prof("matmul");
    return record_product<MatmulBackward>(native::matmul(a16, b16), a16, b16);
  }
  profiler::Scope prof("matmul");
  return record_product<MatmulBackward>(native::matmul(a, b), a, b);
}

Tensor Tensor::matmul(const Tensor& other) const { return lockstep::matmul(*this, other); }

Tensor bmm(const Tensor& a, const Tensor& b) {
  if (autocast_applies({&a, &b})) {  // Note [Autocast policy]: both operands in bf16
    const Tensor a16 = bf16_input(a), b16 = bf16_input(b);
    profiler::Scope prof("bmm");
    return record_product<BmmBackward>(native::bmm(a16, b16), a16, b16);
  }
  profiler::Scope prof("bmm");
  return record_product<BmmBackward>(native::bmm(a, b), a, b);
}

}  // namespace lockstep
