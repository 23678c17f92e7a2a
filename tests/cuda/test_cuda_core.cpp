// tests/cuda/test_cuda_core.cpp — every basic CUDA op (core/cuda/*.cu) against
// its CPU kernel on random inputs, including broadcast and non-contiguous
// operands. Skipped without a GPU (Note [Skipping gpu tests]).
// Read before: tests/cuda/cuda_test_util.h. Read next: tests/cuda/test_cuda_runtime.cpp.
#include <doctest/doctest.h>

#include <vector>

#include "core/factory.h"
#include "core/native/native.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/errors.h"

using ls::native::BinaryOp;
using ls::native::CompareOp;
using ls::native::UnaryOp;

namespace {

const std::vector<ls::ScalarType> kAllDtypes = {ls::kFloat32, ls::kFloat64, ls::kInt64, ls::kInt32,
                                               ls::kUInt8,   ls::kBool,    ls::kFloat16, ls::kBFloat16};
const std::vector<ls::ScalarType> kNumeric = {ls::kFloat32, ls::kFloat64, ls::kInt64, ls::kInt32};

// A (4, 3, 5) tensor that is a permuted (non-contiguous) view.
Tensor strided_cpu(ls::ScalarType dtype) {
  return ls::native::permute(random_cpu({3, 5, 4}, dtype), {2, 0, 1});
}

// t with non-negative values when it is floating and `to` is uint8: converting a
// negative float to an unsigned integer is undefined in C++ (x86 wraps, CUDA
// saturates), so only defined conversions are compared.
Tensor convertible(const Tensor& t, ls::ScalarType to) {
  if (to != ls::kUInt8 || !t.is_floating_point()) return t;
  const Tensor magnitude = ls::native::unary(UnaryOp::Abs, ls::native::to_dtype(t, ls::kFloat32));
  return ls::native::to_dtype(magnitude, t.dtype());
}

}  // namespace

TEST_CASE("CUDA host-device round trips keep every dtype, strided views and large tensors") {
  for (ls::ScalarType dtype : kAllDtypes) {
    CAPTURE(dtype);
    const Tensor cpu = strided_cpu(dtype);
    const Tensor gpu = on_cuda(cpu);
    CHECK(gpu.device() == ls::Device::cuda(0));
    CHECK(gpu.is_contiguous());
    check_matches(gpu, ls::native::contiguous(cpu), 0, 0);
  }
  // Larger than one 32 MiB staging chunk, so the chunked path runs.
  const Tensor big = ls::randn({9 * 1024 * 1024 + 7});
  check_matches(on_cuda(big), big, 0, 0);
  // Device -> host into a strided CPU destination.
  Tensor dst = ls::native::transpose(ls::native::empty({5, 4}), 0, 1);
  const Tensor src = random_cpu({4, 5}, ls::kFloat32);
  ls::native::copy_(dst, on_cuda(src));
  CHECK(ls::native::equal(dst, src));
}

TEST_CASE("CUDA copy_ broadcasts, converts dtypes, and writes strided device views") {
  for (ls::ScalarType to : kAllDtypes) {
    for (ls::ScalarType from : kAllDtypes) {
      CAPTURE(to);
      CAPTURE(from);
      const Tensor src = convertible(random_cpu({5}, from), to);
      Tensor want = ls::native::transpose(ls::native::zeros({5, 3}, to), 0, 1);  // (3, 5) view
      ls::native::copy_(want, src);
      Tensor got = ls::native::transpose(on_cuda(ls::native::zeros({5, 3}, to)), 0, 1);
      ls::native::copy_(got, on_cuda(src));
      check_matches(ls::native::contiguous(got), ls::native::contiguous(want), 1e-3, 1e-3);
    }
  }
  // Host -> device with broadcasting and conversion in one call.
  const Tensor src = random_cpu({1, 4}, ls::kFloat64);
  Tensor got = on_cuda(ls::native::zeros({3, 4}, ls::kFloat32));
  ls::native::copy_(got, src);
  check_matches(got, ls::native::to_dtype(ls::native::expand(src, {3, 4}), ls::kFloat32));
}

TEST_CASE("CUDA fill_, clone, contiguous, to_dtype and f16/bf16 conversions match the CPU") {
  for (ls::ScalarType dtype : kAllDtypes) {
    CAPTURE(dtype);
    const Tensor cpu = strided_cpu(dtype);
    const Tensor gpu = ls::native::permute(on_cuda(ls::native::contiguous(
                                               ls::native::permute(cpu, {1, 2, 0}))), {2, 0, 1});
    check_matches(ls::native::clone(gpu), ls::native::clone(cpu), 0, 0);
    check_matches(ls::native::contiguous(gpu), ls::native::contiguous(cpu), 0, 0);
    for (ls::ScalarType to : kAllDtypes) {
      CAPTURE(to);
      const Tensor c = convertible(cpu, to);
      check_matches(ls::native::to_dtype(on_cuda(c), to), ls::native::to_dtype(c, to), 1e-2, 1e-2);
    }
    check_matches(ls::native::to_dtype(gpu, dtype), cpu, 0, 0);  // the same dtype: no copy
    Tensor filled = on_cuda(ls::native::zeros({3, 2}, dtype));
    ls::native::fill_(ls::native::select(filled, 1, 1), 3.0);
    Tensor want = ls::native::zeros({3, 2}, dtype);
    ls::native::fill_(ls::native::select(want, 1, 1), 3.0);
    check_matches(filled, want, 0, 0);
  }
  // f16 / bf16 rounding agrees bit for bit with the CPU's round-to-nearest-even.
  const Tensor x = ls::randn({1000});
  for (ls::ScalarType half : {ls::kFloat16, ls::kBFloat16}) {
    const Tensor cpu = ls::native::to_dtype(ls::native::to_dtype(x, half), ls::kFloat32);
    check_matches(ls::native::to_dtype(ls::native::to_dtype(on_cuda(x), half), ls::kFloat32), cpu,
                  0, 0);
  }
}

TEST_CASE("CUDA binary ops match the CPU with broadcasting and strides") {
  for (ls::ScalarType dtype : kNumeric) {
    for (BinaryOp op : {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div,
                        BinaryOp::Maximum, BinaryOp::Minimum}) {
      CAPTURE(dtype);
      CAPTURE(ls::native::binary_op_name(op));
      const Tensor a = strided_cpu(dtype);                       // (4, 3, 5), permuted
      Tensor b = random_cpu({3, 1}, dtype);                      // broadcasts over dims 0 and 2
      if (op == BinaryOp::Div) b = ls::native::binary_scalar(BinaryOp::Add, ls::native::unary(UnaryOp::Abs, b), 1.0);
      check_matches(ls::native::binary(op, on_cuda(a), on_cuda(b)), ls::native::binary(op, a, b));
      // In place into a device view, and scalar forms.
      if (op != BinaryOp::Div || ls::is_floating_point(dtype)) {
        Tensor self_cpu = ls::native::clone(a);
        Tensor self_gpu = on_cuda(a);
        ls::native::binary_(op, self_cpu, b);
        ls::native::binary_(op, self_gpu, on_cuda(b));
        check_matches(self_gpu, self_cpu);
      }
      check_matches(ls::native::binary_scalar(op, on_cuda(a), 2.0), ls::native::binary_scalar(op, a, 2.0));
      check_matches(ls::native::scalar_binary(op, 3.0, on_cuda(b)), ls::native::scalar_binary(op, 3.0, b));
      check_matches(ls::native::binary_scalar(op, on_cuda(a), 0.5), ls::native::binary_scalar(op, a, 0.5));
    }
    const Tensor a = strided_cpu(dtype);
    const Tensor b = random_cpu({5}, dtype);
    check_matches(ls::native::add(on_cuda(a), on_cuda(b), -2.0), ls::native::add(a, b, -2.0));
    Tensor self_cpu = ls::native::clone(a);
    Tensor self_gpu = on_cuda(a);
    ls::native::binary_scalar_(BinaryOp::Mul, self_cpu, 3.0);
    ls::native::binary_scalar_(BinaryOp::Mul, self_gpu, 3.0);
    check_matches(self_gpu, self_cpu);
  }
  // Mixed dtypes promote as on the CPU.
  const Tensor i = random_cpu({2, 3}, ls::kInt32);
  const Tensor f = random_cpu({3}, ls::kFloat64);
  check_matches(ls::native::binary(BinaryOp::Mul, on_cuda(i), on_cuda(f)), ls::native::binary(BinaryOp::Mul, i, f));
}

TEST_CASE("CUDA comparisons, where, allclose and equal match the CPU") {
  for (ls::ScalarType dtype : {ls::kFloat32, ls::kFloat64, ls::kInt64, ls::kInt32, ls::kUInt8, ls::kBool}) {
    for (CompareOp op : {CompareOp::Eq, CompareOp::Ne, CompareOp::Lt, CompareOp::Le, CompareOp::Gt, CompareOp::Ge}) {
      CAPTURE(dtype);
      const Tensor a = strided_cpu(dtype);
      const Tensor b = ls::native::narrow(random_cpu({4, 3, 7}, dtype), 2, 1, 5);
      check_matches(ls::native::compare(op, on_cuda(a), on_cuda(b)), ls::native::compare(op, a, b));
      check_matches(ls::native::compare_scalar(op, on_cuda(a), 1.0), ls::native::compare_scalar(op, a, 1.0));
      check_matches(ls::native::compare_scalar(op, on_cuda(a), 0.5), ls::native::compare_scalar(op, a, 0.5));
    }
  }
  const Tensor c = random_cpu({4, 1, 5}, ls::kBool);
  const Tensor a = strided_cpu(ls::kFloat32);
  const Tensor b = random_cpu({5}, ls::kFloat64);
  check_matches(ls::native::where(on_cuda(c), on_cuda(a), on_cuda(b)), ls::native::where(c, a, b));

  const Tensor x = ls::randn({100});
  const Tensor y = ls::native::binary_scalar(BinaryOp::Add, x, 1e-7);
  CHECK(ls::native::allclose(on_cuda(x), on_cuda(y), 1e-5, 1e-6));
  CHECK_FALSE(ls::native::allclose(on_cuda(x), on_cuda(ls::native::binary_scalar(BinaryOp::Add, x, 1e-2)), 1e-5, 1e-6));
  CHECK(ls::native::equal(on_cuda(x), on_cuda(x)));
  CHECK_FALSE(ls::native::equal(on_cuda(x), on_cuda(y)));
  CHECK_FALSE(ls::native::equal(on_cuda(x), on_cuda(ls::native::view(x, {10, 10}))));
}

TEST_CASE("CUDA unary ops, pow and the relu and gelu backward helpers match the CPU") {
  for (ls::ScalarType dtype : {ls::kFloat32, ls::kFloat64}) {
    CAPTURE(dtype);
    const Tensor x = strided_cpu(dtype);
    const Tensor pos = ls::native::binary_scalar(BinaryOp::Add, ls::native::unary(UnaryOp::Abs, x), 0.1);
    for (UnaryOp op : {UnaryOp::Neg, UnaryOp::Abs, UnaryOp::Relu, UnaryOp::Gelu, UnaryOp::Exp,
                       UnaryOp::Log, UnaryOp::Tanh, UnaryOp::Sigmoid, UnaryOp::Sqrt, UnaryOp::Rsqrt,
                       UnaryOp::Sign, UnaryOp::Erf}) {
      CAPTURE(ls::native::unary_op_name(op));
      const bool needs_positive = op == UnaryOp::Log || op == UnaryOp::Sqrt || op == UnaryOp::Rsqrt;
      const Tensor in = needs_positive ? pos : x;
      check_matches(ls::native::unary(op, on_cuda(in)), ls::native::unary(op, in), 1e-5, 1e-6);
    }
    for (double e : {1.0, 2.0, 3.0, -1.0, 0.5, 1.7}) {
      CAPTURE(e);
      check_matches(ls::native::pow_scalar(on_cuda(pos), e), ls::native::pow_scalar(pos, e), 1e-5, 1e-6);
    }
    const Tensor g = random_cpu({4, 3, 5}, dtype);
    check_matches(ls::native::relu_backward(on_cuda(g), on_cuda(x)), ls::native::relu_backward(g, x));
    check_matches(ls::native::gelu_backward(on_cuda(g), on_cuda(x)), ls::native::gelu_backward(g, x), 1e-5, 1e-6);
  }
  for (ls::ScalarType dtype : {ls::kInt64, ls::kInt32, ls::kUInt8}) {
    const Tensor x = strided_cpu(dtype);
    for (UnaryOp op : {UnaryOp::Neg, UnaryOp::Abs, UnaryOp::Relu, UnaryOp::Sign}) {
      check_matches(ls::native::unary(op, on_cuda(x)), ls::native::unary(op, x));
    }
  }
}

TEST_CASE("CUDA gives clear errors for mixed devices and bad inputs") {
  const Tensor a = ls::randn({3});
  const std::string mixed = ls::testing::error_of([&] { ls::native::binary(BinaryOp::Add, on_cuda(a), a); });
  CHECK(ls::testing::contains(mixed, "cuda:0"));
  CHECK(ls::testing::contains(mixed, "cpu"));
  const std::string half = ls::testing::error_of([&] {
    ls::native::unary(UnaryOp::Exp, on_cuda(ls::native::to_dtype(a, ls::kFloat16)));
  });
  CHECK(ls::testing::contains(half, "float16"));
}
