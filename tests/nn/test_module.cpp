// tests/nn/test_module.cpp — Module: registration order and dotted names,
// buffers, children, train/eval, zero_grad, to(dtype), state dicts and their
// errors, and the docs/api.md `struct Net` example.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/grad_mode.h"
#include "core/rng.h"
#include "nn/nn.h"

namespace ls = lockstep;
using Names = std::vector<std::string>;

namespace {

Names names_of(const ls::nn::NamedTensors& named) {
  Names out;
  for (const auto& [name, t] : named) out.push_back(name);
  return out;
}

// Leaf modules built from core ops only, so these tests need no layer kernels.
struct Leaf : ls::nn::Module {
  ls::Tensor w, b, stat;
  explicit Leaf(int64_t n) {
    w = register_parameter("w", ls::randn({n}));
    stat = register_buffer("stat", ls::zeros({n}));
    b = register_parameter("b", ls::randn({n}));
  }
  std::string type_name() const override { return "Leaf"; }
  ls::Tensor forward(const ls::Tensor& x) { return x * w + b; }
};

struct Middle : ls::nn::Module {
  std::shared_ptr<Leaf> first, second;
  ls::Tensor scale;
  Middle() {
    first = register_module("first", std::make_shared<Leaf>(3));
    scale = register_parameter("scale", ls::ones({1}));
    second = register_module("second", std::make_shared<Leaf>(3));
  }
  std::string type_name() const override { return "Middle"; }
  ls::Tensor forward(const ls::Tensor& x) { return second->forward(first->forward(x) * scale); }
};

struct Top : ls::nn::Module {
  ls::Tensor bias;
  std::shared_ptr<Middle> body;
  std::shared_ptr<Leaf> head;
  Top() {
    bias = register_parameter("bias", ls::zeros({3}));
    body = register_module("body", std::make_shared<Middle>());
    head = register_module("head", std::make_shared<Leaf>(3));
  }
  std::string type_name() const override { return "Top"; }
  ls::Tensor forward(const ls::Tensor& x) { return head->forward(body->forward(x + bias)); }
};

// The example from docs/api.md, verbatim apart from the namespace alias.
struct Net : ls::nn::Module {
  std::shared_ptr<ls::nn::Linear> fc1, fc2;
  Net() {
    fc1 = register_module("fc1", std::make_shared<ls::nn::Linear>(784, 128));
    fc2 = register_module("fc2", std::make_shared<ls::nn::Linear>(128, 10));
  }
  ls::Tensor forward(const ls::Tensor& x) { return fc2->forward(fc1->forward(x).relu()); }
};

}  // namespace

TEST_CASE("module: named_parameters are depth-first in registration order with dotted names") {
  Top top;
  // As in PyTorch, a module's own parameters come before its children's, even
  // when a child was registered first (Middle registers first, scale, second).
  CHECK(names_of(top.named_parameters()) ==
        Names{"bias", "body.scale", "body.first.w", "body.first.b", "body.second.w",
              "body.second.b", "head.w", "head.b"});
  CHECK(names_of(top.named_parameters(/*recurse=*/false)) == Names{"bias"});
  std::vector<ls::Tensor> params = top.parameters();
  REQUIRE(params.size() == 8);
  CHECK(params[0].is_same(top.bias));
  CHECK(params[1].is_same(top.body->scale));
  CHECK(params[2].is_same(top.body->first->w));
  CHECK(params[7].is_same(top.head->b));
  for (const auto& p : params) CHECK(p.requires_grad());
}

TEST_CASE("module: buffers are collected recursively and do not require grad") {
  Top top;
  CHECK(names_of(top.named_buffers()) ==
        Names{"body.first.stat", "body.second.stat", "head.stat"});
  CHECK(top.named_buffers(/*recurse=*/false).empty());
  for (const auto& b : top.buffers()) CHECK_FALSE(b.requires_grad());
  CHECK(top.buffers()[2].is_same(top.head->stat));
}

TEST_CASE("module: children, named_children and named_modules") {
  auto top = std::make_shared<Top>();
  auto children = top->named_children();
  REQUIRE(children.size() == 2);
  CHECK(children[0].first == "body");
  CHECK(children[0].second.get() == top->body.get());
  CHECK(children[1].first == "head");
  CHECK(top->children().size() == 2);
  Names modules;
  for (const auto& [name, m] : top->named_modules()) modules.push_back(name + ":" + m->type_name());
  CHECK(modules == Names{":Top", "body:Middle", "body.first:Leaf", "body.second:Leaf", "head:Leaf"});
}

TEST_CASE("module: registering a duplicate or dotted name throws") {
  Leaf leaf(2);
  CHECK_THROWS_AS(leaf.register_parameter("w", ls::zeros({2})), ls::Error);
  CHECK_THROWS_AS(leaf.register_buffer("b", ls::zeros({2})), ls::Error);
  CHECK_THROWS_AS(leaf.register_parameter("a.b", ls::zeros({2})), ls::Error);
  CHECK_THROWS_AS(leaf.register_parameter("", ls::zeros({2})), ls::Error);
  CHECK_THROWS_AS(leaf.register_module("stat", std::make_shared<Leaf>(1)), ls::Error);
  CHECK_THROWS_AS(leaf.register_module("child", std::shared_ptr<Leaf>()), ls::Error);
}

TEST_CASE("module: train and eval propagate to every descendant") {
  Top top;
  CHECK(top.is_training());
  top.eval();
  CHECK_FALSE(top.is_training());
  CHECK_FALSE(top.body->is_training());
  CHECK_FALSE(top.body->second->is_training());
  top.body->train();
  CHECK(top.body->first->is_training());
  CHECK_FALSE(top.head->is_training());
  top.train();
  CHECK(top.head->is_training());
}

TEST_CASE("module: zero_grad sets gradients to none or to zero") {
  Top top;
  ls::Tensor x = ls::randn({3});
  top.forward(x).sum().backward();
  for (const auto& p : top.parameters()) CHECK(p.grad().defined());

  top.zero_grad(/*set_to_none=*/false);
  for (const auto& p : top.parameters()) {
    REQUIRE(p.grad().defined());
    CHECK(p.grad().abs().sum().item<float>() == 0.0f);
  }
  top.forward(x).sum().backward();
  CHECK(top.head->b.grad().sum().item<float>() == doctest::Approx(3.0));
  top.zero_grad();
  for (const auto& p : top.parameters()) CHECK_FALSE(p.grad().defined());
}

TEST_CASE("module: to(dtype) converts floating tensors in place, keeping the handles") {
  Top top;
  ls::Tensor w = top.body->first->w;
  std::vector<float> before = w.to_vector<float>();
  top.to(ls::kFloat64);
  CHECK(w.dtype() == ls::kFloat64);
  CHECK(top.head->stat.dtype() == ls::kFloat64);
  for (const auto& p : top.parameters()) CHECK(p.dtype() == ls::kFloat64);
  std::vector<double> after = w.to_vector<double>();
  for (size_t i = 0; i < before.size(); ++i) CHECK(after[i] == doctest::Approx(before[i]));
  CHECK(top.forward(ls::randn({3}, ls::kFloat64)).dtype() == ls::kFloat64);
  CHECK_THROWS_AS(top.to(ls::kInt64), ls::Error);
}

TEST_CASE("module: state_dict holds parameters and buffers and round-trips") {
  ls::manual_seed(1);
  Top a;
  ls::manual_seed(2);
  Top b;
  ls::nn::StateDict sd = a.state_dict();
  Names keys;
  for (const auto& [k, v] : sd) keys.push_back(k);
  CHECK(keys == Names{"bias", "body.first.b", "body.first.stat", "body.first.w", "body.scale",
                      "body.second.b", "body.second.stat", "body.second.w", "head.b", "head.stat",
                      "head.w"});
  CHECK_FALSE(sd["head.w"].requires_grad());
  CHECK_FALSE(ls::equal(a.head->w, b.head->w));

  ls::Tensor handle = b.head->w;
  b.load_state_dict(sd);
  CHECK(handle.is_same(b.head->w));  // copied in place
  CHECK(b.head->w.requires_grad());
  for (const auto& [name, t] : a.named_parameters()) {
    CAPTURE(name);
    CHECK(ls::equal(t, b.state_dict()[name]));
  }
  // The state dict shares storage with the module (clone to snapshot).
  {
    ls::NoGradGuard no_grad;
    a.head->w.fill_(7.0);
  }
  CHECK(sd["head.w"].to_vector<float>()[0] == 7.0f);
}

TEST_CASE("module: load_state_dict names missing, unexpected and mis-shaped keys") {
  Top top;
  ls::nn::StateDict sd = top.state_dict();

  ls::nn::StateDict missing = sd;
  missing.erase("body.second.w");
  try {
    top.load_state_dict(missing);
    FAIL("expected an error");
  } catch (const ls::Error& e) {
    CHECK(std::string(e.what()).find("body.second.w") != std::string::npos);
    CHECK(std::string(e.what()).find("Missing") != std::string::npos);
  }

  ls::nn::StateDict unexpected = sd;
  unexpected["body.third.w"] = ls::zeros({3});
  try {
    top.load_state_dict(unexpected);
    FAIL("expected an error");
  } catch (const ls::Error& e) {
    CHECK(std::string(e.what()).find("body.third.w") != std::string::npos);
    CHECK(std::string(e.what()).find("Unexpected") != std::string::npos);
  }

  ls::nn::StateDict wrong_shape = sd;
  wrong_shape["head.w"] = ls::zeros({4});
  try {
    top.load_state_dict(wrong_shape);
    FAIL("expected an error");
  } catch (const ls::Error& e) {
    const std::string msg = e.what();
    CHECK(msg.find("head.w") != std::string::npos);
    CHECK(msg.find("[4]") != std::string::npos);
    CHECK(msg.find("[3]") != std::string::npos);
  }
  CHECK_THROWS_AS(top.load_state_dict(wrong_shape, /*strict=*/false), ls::Error);

  // An undefined tensor is named by its key (it said "sizes: called on an undefined tensor").
  ls::nn::StateDict undefined = sd;
  undefined["head.w"] = ls::Tensor();
  try {
    top.load_state_dict(undefined);
    FAIL("expected an error");
  } catch (const ls::Error& e) {
    const std::string msg = e.what();
    CHECK_MESSAGE(msg.find("'head.w' is an undefined tensor") != std::string::npos, msg);
  }

  // strict = false loads what matches and ignores the rest.
  ls::nn::StateDict partial;
  partial["head.b"] = ls::full({3}, 5.0);
  partial["nonsense"] = ls::zeros({1});
  top.load_state_dict(partial, /*strict=*/false);
  CHECK(top.head->b.to_vector<float>() == std::vector<float>{5, 5, 5});
}

TEST_CASE("module: the docs/api.md Net example builds, names its parameters and runs") {
  ls::manual_seed(0);
  auto net = std::make_shared<Net>();
  CHECK(names_of(net->named_parameters()) ==
        Names{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"});
  CHECK(net->parameters()[0].sizes() == ls::IntList{128, 784});
  CHECK(net->buffers().empty());
  CHECK(net->children().size() == 2);
  ls::Tensor x = ls::randn({2, 784});
  ls::Tensor y = net->forward(x);
  CHECK(y.sizes() == ls::IntList{2, 10});
  y.sum().backward();
  for (const auto& p : net->parameters()) CHECK(p.grad().defined());
  net->zero_grad();
  CHECK_FALSE(net->fc1->weight.grad().defined());
  net->eval();
  CHECK_FALSE(net->fc2->is_training());
  net->to(ls::Device::cpu());
  auto sd = net->state_dict();
  net->load_state_dict(sd);
  CHECK(sd.size() == 4);
}
