// examples/autograd.cpp — a port of pytorch/examples' cpp/autograd/autograd.cpp (the
// libtorch autograd tutorial) to lockstep, in three parts as the original:
//   1. basic autograd operations: requires_grad, grad_fn names, backward of a mean,
//      a vector-Jacobian product, NoGradGuard and detach();
//   2. higher-order gradients: a gradient penalty on the input gradient of a Linear
//      layer, taken with ls::autograd::grad(create_graph=true) and backpropagated;
//   3. a custom autograd function: LinearFunction and MulConstant.
// Differences from the original:
//   - libtorch writes a custom function as Function<T> with static forward/backward
//     and an AutogradContext; lockstep writes it as what the built-in ops are: a
//     backward Node (its apply() is the backward) recorded on the outputs with
//     autograd::record, its saved tensors in SavedVariables (autograd/function.h);
//   - the original passes `true` where its comment says create_graph, which is the
//     retain_graph position, so its penalty is not differentiated; here create_graph
//     is really on, and the program also shows a critic (Linear, Tanh, Linear)
//     whose penalty does change the input's gradient;
//   - `y.norm()` is written sqrt(sum(y^2)), `x.eq(y).all()` is ls::equal(x, y);
//   - every part ends with a "check" line comparing against a value computed another
//     way (tests/examples/check_ports.sh reads them); --seed sets the draws.
// Read before: docs/api.md ("Autograd"), autograd/grad.h, autograd/function.h.
// Read next: examples/dcgan.cpp.
#include <lockstep.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "autograd/function.h"
#include "tools/cli.h"

namespace ls = lockstep;
using ls::Tensor;
using ls::autograd::variable_list;

namespace {

void check(const char* what, bool ok) {
  std::printf("check %s: %s\n", what, ok ? "ok" : "FAILED");
  LS_CHECK(ok, "autograd example: the check '", what, "' failed");
}

void basic_autograd_operations_example() {
  std::cout << "====== Running: \"Basic autograd operations\" ======" << std::endl;
  // A tensor that requires grad: every op on it is recorded.
  auto x = ls::ones({2, 2}, ls::requires_grad());
  std::cout << x << std::endl;
  auto y = x + 2;
  std::cout << y << std::endl;
  std::cout << y.grad_fn()->name() << std::endl;  // y was made by an op: it has a grad_fn

  auto z = y * y * 3;
  auto out = z.mean();
  std::cout << z << std::endl << z.grad_fn()->name() << std::endl;
  std::cout << out << std::endl << out.grad_fn()->name() << std::endl;

  // requires_grad_(...) changes an existing tensor's flag in place.
  auto a = ls::randn({2, 2});
  a = ((a * 3) / (a - 1));
  std::cout << std::boolalpha << a.requires_grad() << std::endl;
  a.requires_grad_(true);
  std::cout << a.requires_grad() << std::endl;
  auto b = (a * a).sum();
  std::cout << b.grad_fn()->name() << std::endl;

  // out has one element, so out.backward() seeds it with 1.
  out.backward();
  std::cout << x.grad() << std::endl;  // d(out)/dx = 3 (x + 2) / 2 = 4.5
  check("d(out)/dx is 4.5 everywhere", ls::allclose(x.grad(), ls::full({2, 2}, 4.5)));

  // A vector-Jacobian product: pass the vector to backward.
  x = ls::randn(3, ls::requires_grad());
  y = x * 2;
  int64_t doublings = 1;
  while (y.pow(2.0).sum().sqrt().item<double>() < 1000) {
    y = y * 2;
    ++doublings;
  }
  std::cout << y << std::endl << y.grad_fn()->name() << std::endl;
  auto v = ls::tensor(std::vector<float>{0.1f, 1.0f, 0.0001f}, {3});
  y.backward(v);
  std::cout << x.grad() << std::endl;
  check("the vector-Jacobian product is v * 2^k",
        ls::allclose(x.grad(), v * static_cast<double>(int64_t{1} << doublings)));

  // Stop recording with NoGradGuard, or take a copy without history with detach().
  std::cout << x.requires_grad() << std::endl << x.pow(2).requires_grad() << std::endl;
  {
    ls::NoGradGuard no_grad;
    std::cout << x.pow(2).requires_grad() << std::endl;
  }
  std::cout << x.requires_grad() << std::endl;
  y = x.detach();
  std::cout << y.requires_grad() << std::endl << ls::equal(x, y) << std::endl;
  check("detach() keeps the values and drops the history", !y.requires_grad() && ls::equal(x, y));
}

// ((||g_n|| - 1)^2).mean() over the rows g_n of g: the WGAN-GP penalty.
Tensor penalty_of(const Tensor& g) { return ((g * g).sum({1}).sqrt() - 1.0).pow(2.0).mean(); }

void compute_higher_order_gradients_example() {
  std::cout << "====== Running \"Computing higher-order gradients in C++\" ======" << std::endl;
  // As the original: the norm of the input gradient of a Linear layer as a penalty.
  auto model = std::make_shared<ls::nn::Linear>(4, 3);
  auto input = ls::randn({3, 4}).requires_grad_(true);
  auto output = model->forward(input);
  auto target = ls::randn({3, 3});
  auto loss = ls::mse_loss(output, target);
  auto grad_output = ls::ones_like(output);
  auto gradient = ls::autograd::grad({output}, {input}, /*grad_outputs=*/{grad_output},
                                     /*retain_graph=*/{}, /*create_graph=*/true)[0];
  auto gradient_penalty = ls::pow((gradient * gradient).sum({1}).sqrt() - 1, 2).mean();
  auto combined_loss = loss + gradient_penalty;
  combined_loss.backward();
  std::cout << input.grad() << std::endl;
  // A Linear layer's input gradient is the column sums of W, whatever the input: the
  // penalty moves the weight but not the input's gradient.
  check("the input gradient of a Linear layer is W's column sums",
        ls::allclose(gradient.detach(), model->weight.sum({0}).expand({3, 4}).detach()));
  auto loss_only = ls::autograd::grad({ls::mse_loss(model->forward(input), target)}, {model->weight})[0];
  check("the penalty reaches the weight", !ls::allclose(model->weight.grad(), loss_only));

  // A critic with a tanh between two layers: there the penalty depends on the input,
  // and its second-order gradient adds to the input's gradient.
  auto critic = std::make_shared<ls::nn::Sequential>(std::make_shared<ls::nn::Linear>(4, 8),
                                                     std::make_shared<ls::nn::Tanh>(),
                                                     std::make_shared<ls::nn::Linear>(8, 1));
  auto x = ls::randn({3, 4}).requires_grad_(true);
  auto score = critic->forward(x);
  auto g = ls::autograd::grad({score}, {x}, {ls::ones_like(score)}, {}, /*create_graph=*/true)[0];
  auto with_penalty = score.mean() + 10.0 * penalty_of(g);
  auto dx = ls::autograd::grad({with_penalty}, {x})[0];
  auto dx_plain = ls::autograd::grad({critic->forward(x).mean()}, {x})[0];
  std::cout << "input gradient with the penalty:\n" << dx << std::endl;
  check("the penalty's second-order term changes the input gradient", !ls::allclose(dx, dx_plain));
}

// ---- custom autograd functions ----

// LinearFunction's backward: the gradients of output = input weight^T (+ bias).
struct LinearFunctionBackward final : ls::autograd::Node {
  ls::autograd::SavedVariable input, weight;
  std::string name() const override { return "LinearFunctionBackward"; }
  variable_list apply(variable_list&& grad_outputs) override {
    const Tensor& grad_output = grad_outputs[0];  // (N, out)
    Tensor grad_input = grad_output.matmul(weight.unpack(name()));         // (N, in)
    Tensor grad_weight = grad_output.t().matmul(input.unpack(name()));     // (out, in)
    const bool has_bias = next_edges().size() > 2 && next_edges()[2].is_valid();
    Tensor grad_bias = has_bias ? grad_output.sum({0}) : Tensor();         // (out)
    return {grad_input, grad_weight, grad_bias};
  }
  void release_variables() override {
    input.reset();
    weight.reset();
  }
};

// The forward: computes without recording, then records the node on the output.
Tensor linear_function(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor()) {
  Tensor output;
  {
    ls::NoGradGuard no_grad;  // the node below is the whole op's history
    output = input.matmul(weight.t());
    if (bias.defined()) output = output + bias.unsqueeze(0).expand(output.sizes());
  }
  if (ls::autograd::compute_requires_grad({input, weight, bias})) {
    auto node = std::make_shared<LinearFunctionBackward>();
    node->input = ls::autograd::SavedVariable(input);
    node->weight = ls::autograd::SavedVariable(weight);
    ls::autograd::record(node, {input, weight, bias}, {output});
  }
  return output;
}

// MulConstant: tensor * constant; the constant is kept on the node (libtorch's saved_data).
struct MulConstantBackward final : ls::autograd::Node {
  double constant = 1.0;
  std::string name() const override { return "MulConstantBackward"; }
  variable_list apply(variable_list&& grad_outputs) override { return {grad_outputs[0] * constant}; }
};

Tensor mul_constant(const Tensor& tensor, double constant) {
  Tensor output;
  {
    ls::NoGradGuard no_grad;
    output = tensor * constant;
  }
  if (ls::autograd::compute_requires_grad({tensor})) {
    auto node = std::make_shared<MulConstantBackward>();
    node->constant = constant;
    ls::autograd::record(node, {tensor}, {output});
  }
  return output;
}

void custom_autograd_function_example() {
  std::cout << "====== Running \"Using custom autograd function in C++\" ======" << std::endl;
  {
    auto x = ls::randn({2, 3}).requires_grad_(true);
    auto weight = ls::randn({4, 3}).requires_grad_(true);
    auto y = linear_function(x, weight);
    std::cout << y.grad_fn()->name() << std::endl;
    y.sum().backward();
    std::cout << x.grad() << std::endl << weight.grad() << std::endl;
    // The same gradients from the built-in op.
    auto x2 = x.detach().requires_grad_(true), w2 = weight.detach().requires_grad_(true);
    ls::linear(x2, w2, Tensor()).sum().backward();
    check("LinearFunction's gradients equal ls::linear's",
          ls::allclose(x.grad(), x2.grad()) && ls::allclose(weight.grad(), w2.grad()));
  }
  {
    auto x = ls::randn(2).requires_grad_(true);
    auto y = mul_constant(x, 5.5);
    y.sum().backward();
    std::cout << x.grad() << std::endl;
    check("MulConstant's gradient is 5.5", ls::allclose(x.grad(), ls::full({2}, 5.5)));
  }
}

}  // namespace

int main(int argc, char** argv) {
  ls::cli::Program p("autograd", "pytorch/examples' cpp/autograd on lockstep: basic autograd, a "
                                 "gradient penalty with autograd::grad(create_graph), and custom "
                                 "autograd functions.");
  int64_t seed = 0;
  p.integer("--seed", seed, "seed of the random tensors", 0);
  p.parse(argc, argv);
  return ls::cli::run("autograd", [&] {
    ls::manual_seed(static_cast<uint64_t>(seed));
    basic_autograd_operations_example();
    std::cout << "\n";
    compute_higher_order_gradients_example();
    std::cout << "\n";
    custom_autograd_function_example();
    return 0;
  });
}
