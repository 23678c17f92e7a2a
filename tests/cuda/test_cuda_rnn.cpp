// tests/cuda/test_cuda_rnn.cpp — nn::LSTM and nn::GRU on a GPU through cuDNN (Note
// [cuDNN RNN layer]) against the same modules on the CPU: outputs, final states and
// the gradients of the input, the given states and every parameter, over truncated
// BPTT (a detached state carried into a second batch), several layers, both
// directions, with and without biases, batch_first, float32 and float64; on the GPU
// against the composed path (autograd::set_cudnn_rnn(false)) with dropout between
// layers, and differentiated twice; which path runs (the output's node); a retained graph's second backward;
// a weight changed in place before backward is refused. Skipped without a GPU (Note
// [Skipping gpu tests]).
// Read before: autograd/functions/rnn_cudnn.h, tests/nn/test_rnn_fused.cpp.
#include <doctest/doctest.h>

#include <tuple>
#include <vector>

#include "autograd/functions/rnn_cudnn.h"
#include "autograd/node.h"
#include "core/autocast.h"
#include "core/factory.h"
#include "core/grad_mode.h"
#include "core/native/native.h"
#include "core/rng.h"
#include "nn/rnn.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/support/errors.h"
#include "tests/support/rnn_batches.h"

namespace nn = lockstep::nn;
using Values = std::vector<Tensor>;
using ls::testing::train_two_batches;

namespace {

// Turns cuDNN back on when a test case ends, whatever it set.
struct CudnnGuard {
  ~CudnnGuard() { ls::autograd::set_cudnn_rnn(true); }
};

struct Case {
  int64_t layers;
  bool bidirectional, bias, batch_first;
};
constexpr Case kCases[] = {{2, false, true, false}, {1, true, true, true}, {3, true, false, false},
                           {1, false, false, true}};

Tensor host(const Tensor& t) { return ls::native::to_device(t, ls::Device::cpu()); }

void check_close(const Values& got, const Values& want, ls::ScalarType dtype) {
  REQUIRE(got.size() == want.size());
  const double rtol = dtype == ls::kFloat64 ? 1e-9 : 1e-4, atol = dtype == ls::kFloat64 ? 1e-11 : 2e-5;
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    REQUIRE(got[i].defined());
    REQUIRE(got[i].sizes() == want[i].sizes());
    CHECK(ls::native::allclose(got[i], want[i], rtol, atol));
  }
}

// Every case of kCases, in float32 and float64: the module on the CPU, then a copy of
// it (the same parameters) on the GPU.
template <class Layer, class Options>
void check_gpu_equals_cpu() {
  for (const Case& c : kCases) {
    for (ls::ScalarType dtype : {ls::kFloat32, ls::kFloat64}) {
      CAPTURE(c.layers);
      CAPTURE(c.bidirectional);
      CAPTURE(c.bias);
      CAPTURE(dtype);
      ls::manual_seed(3);
      Layer cpu(Options(6, 8).num_layers(c.layers).bidirectional(c.bidirectional).bias(c.bias)
                    .batch_first(c.batch_first));
      ls::manual_seed(3);
      Layer gpu(Options(6, 8).num_layers(c.layers).bidirectional(c.bidirectional).bias(c.bias)
                    .batch_first(c.batch_first));
      cpu.to(dtype);
      gpu.to(dtype);
      gpu.to(cuda0());
      const IntList s1 = c.batch_first ? IntList{3, 7, 6} : IntList{7, 3, 6};
      const IntList s2 = c.batch_first ? IntList{3, 4, 6} : IntList{4, 3, 6};
      const Tensor x1 = random_cpu(s1, dtype), x2 = random_cpu(s2, dtype);
      const Values want = train_two_batches(cpu, x1, x2, ls::Device::cpu());
      check_close(train_two_batches(gpu, x1, x2, cuda0()), want, dtype);
    }
  }
}

}  // namespace

TEST_CASE("CUDA LSTM through cuDNN equals the CPU's, values and gradients, over truncated BPTT") {
  check_gpu_equals_cpu<nn::LSTM, nn::LSTMOptions>();
}

TEST_CASE("CUDA GRU through cuDNN equals the CPU's, values and gradients, over truncated BPTT") {
  check_gpu_equals_cpu<nn::GRU, nn::GRUOptions>();
}

TEST_CASE("CUDA LSTM and GRU: cuDNN equals the composed path on the GPU, dropout between layers included") {
  CudnnGuard guard;
  ls::manual_seed(4);
  nn::LSTM lstm(nn::LSTMOptions(5, 16).num_layers(3).bidirectional(true).dropout(0.3));
  nn::GRU gru(nn::GRUOptions(5, 16).num_layers(2).dropout(0.3));
  lstm.to(cuda0());
  gru.to(cuda0());
  const Tensor x1 = random_cpu({9, 4, 5}, ls::kFloat32), x2 = random_cpu({5, 4, 5}, ls::kFloat32);
  ls::autograd::set_cudnn_rnn(false);  // the same seeds, so the same dropout masks on both paths
  const Values lstm_ref = train_two_batches(lstm, x1, x2, cuda0(), 11);
  const Values gru_ref = train_two_batches(gru, x1, x2, cuda0(), 12);
  ls::autograd::set_cudnn_rnn(true);
  check_close(train_two_batches(lstm, x1, x2, cuda0(), 11), lstm_ref, ls::kFloat32);
  check_close(train_two_batches(gru, x1, x2, cuda0(), 12), gru_ref, ls::kFloat32);
}

TEST_CASE("CUDA LSTM and GRU through cuDNN are differentiated twice as the composed path is") {
  CudnnGuard guard;
  using ls::testing::second_derivatives;
  const Values lstm_cudnn = second_derivatives<nn::LSTM, nn::LSTMOptions>(cuda0());
  const Values gru_cudnn = second_derivatives<nn::GRU, nn::GRUOptions>(cuda0());
  ls::autograd::set_cudnn_rnn(false);
  check_close(lstm_cudnn, second_derivatives<nn::LSTM, nn::LSTMOptions>(cuda0()), ls::kFloat32);
  check_close(gru_cudnn, second_derivatives<nn::GRU, nn::GRUOptions>(cuda0()), ls::kFloat32);
}

TEST_CASE("CUDA LSTM: cuDNN runs for float32 and float64 outside autocast, the composed path otherwise") {
  CudnnGuard guard;
  ls::manual_seed(5);
  nn::LSTM lstm(nn::LSTMOptions(4, 4));
  lstm.to(cuda0());
  const Tensor x = on_cuda(random_cpu({3, 2, 4}, ls::kFloat32)).requires_grad_();
  CHECK(std::get<0>(lstm.forward(x)).grad_fn()->name() == "CudnnLSTMLayerBackward");
  ls::autograd::set_cudnn_rnn(false);
  CHECK(std::get<0>(lstm.forward(x)).grad_fn()->name() != "CudnnLSTMLayerBackward");
  ls::autograd::set_cudnn_rnn(true);
  {
    ls::AutocastGuard autocast(ls::kBFloat16);
    CHECK(std::get<0>(lstm.forward(x)).grad_fn()->name() != "CudnnLSTMLayerBackward");
  }
  nn::GRU gru(nn::GRUOptions(4, 4));
  gru.to(ls::kFloat64);
  gru.to(cuda0());
  const Tensor x64 = on_cuda(random_cpu({3, 2, 4}, ls::kFloat64)).requires_grad_();
  CHECK(std::get<0>(gru.forward(x64)).grad_fn()->name() == "CudnnGRULayerBackward");
}

TEST_CASE("CUDA LSTM: a retained graph's second backward gives the same gradients again") {
  ls::manual_seed(6);
  nn::LSTM lstm(nn::LSTMOptions(3, 5).num_layers(2));
  lstm.to(cuda0());
  const Tensor x = on_cuda(random_cpu({6, 2, 3}, ls::kFloat32)).requires_grad_();
  const Tensor loss = (std::get<0>(lstm.forward(x)) * 1.5).sum();
  loss.backward(Tensor(), /*retain_graph=*/true);
  const Tensor first = host(x.grad()).clone();
  x.grad().zero_();
  loss.backward();
  CHECK(ls::native::allclose(host(x.grad()), first, 1e-6, 1e-7));
}

TEST_CASE("CUDA LSTM: a weight changed in place between forward and backward is refused") {
  ls::manual_seed(8);
  nn::LSTM lstm(nn::LSTMOptions(3, 5));
  lstm.to(cuda0());
  const Tensor x = on_cuda(random_cpu({4, 2, 3}, ls::kFloat32));
  const Tensor loss = std::get<0>(lstm.forward(x)).sum();
  {
    ls::NoGradGuard no_grad;
    lstm.layer(0).w_hh.mul_(2.0);
  }
  CHECK_THROWS_WITH_AS(loss.backward(), doctest::Contains("modified by an in-place operation"),
                       ls::Error);
}
