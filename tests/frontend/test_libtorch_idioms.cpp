// tests/frontend/test_libtorch_idioms.cpp — libtorch lines as pytorch/examples' C++
// programs (mnist, distributed, dcgan, custom-dataset, autograd) write them, with
// `ls::` for `torch::` and LS_MODULE for TORCH_MODULE. Each numbered line [n] is one
// idiom; what it returns is checked. The habits that lockstep spells differently
// fail to compile with a message naming the lockstep spelling:
// tests/frontend/check_idiom_errors.sh compiles those (the list and count are in
// docs/api.md "Coming from libtorch").
// Read before: docs/api.md. Read next: tests/frontend/test_holders.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "lockstep.h"
#include "tests/support/temp_files.h"

namespace ls = lockstep;

namespace {

// mnist.cpp's network, written the holder way (ConvNetImpl + LS_MODULE).
struct ConvNetImpl : ls::nn::Module {
  ConvNetImpl()
      : conv1(std::make_shared<ls::nn::Conv2d>(ls::nn::Conv2dOptions(1, 4, 3))),
        fc1(std::make_shared<ls::nn::Linear>(4 * 3 * 3, 10)) {
    register_module("conv1", conv1);                                          // [1]
    register_module("fc1", fc1);
  }
  ls::Tensor forward(ls::Tensor x) {
    x = ls::relu(ls::max_pool2d(conv1->forward(x), 2));                       // [2]
    x = x.view({-1, 4 * 3 * 3});                                              // [3]
    x = ls::dropout(x, /*p=*/0.5, /*training=*/is_training());                // [4]
    return ls::log_softmax(fc1->forward(x), /*dim=*/1);                       // [5]
  }
  std::shared_ptr<ls::nn::Conv2d> conv1;
  std::shared_ptr<ls::nn::Linear> fc1;
};
LS_MODULE(ConvNet);  // libtorch: TORCH_MODULE(ConvNet), a habit of check_idiom_errors.sh

// A module holding another through its holder, libtorch's member style.
struct HeadImpl : ls::nn::Module {
  explicit HeadImpl(int64_t n) { fc = register_module("fc", std::make_shared<ls::nn::Linear>(n, 2)); }
  ls::Tensor forward(const ls::Tensor& x) { return fc->forward(x); }
  std::shared_ptr<ls::nn::Linear> fc;
};
LS_MODULE(Head);

struct ModelImpl : ls::nn::Module {
  explicit ModelImpl(int64_t n) {
    head = register_module("head", Head(n));                                  // [6]
  }
  ls::Tensor forward(const ls::Tensor& x) { return head(x); }                 // [7]
  Head head{nullptr};                                                         // [8]
};
LS_MODULE(Model);

ls::Tensor images(int64_t n) { return ls::randn({n, 1, 8, 8}); }
ls::Tensor labels(int64_t n) { return ls::randint(0, 10, {n}); }

}  // namespace

TEST_CASE("idioms: mnist and dist-mnist (holders, free functions, training loop)") {
  ls::manual_seed(1);                                                         // [9]
  ls::Device device(ls::kCPU);                                                // [10]
  if (ls::cuda::is_available()) device = ls::Device(ls::kCUDA);               // [11]
  device = ls::Device(ls::kCPU);  // this test stays on the CPU
  ConvNet model;                                                              // [12]
  model->to(device);                                                          // [13]
  CHECK(model->parameters().size() == 4);                                     // [14]
  ls::optim::SGD optimizer(model->parameters(), ls::optim::SGDOptions(0.01).momentum(0.5));   // [15]
  ls::optim::SGD plain(model->parameters(), /*lr=*/0.01);                    // [16]
  CHECK(plain.lr() == doctest::Approx(0.01));

  model->train();                                                             // [17]
  ls::Tensor data = images(6).to(device), target = labels(6).to(device);      // [18]
  optimizer.zero_grad();                                                      // [19]
  ls::Tensor output = model->forward(data);                                   // [20]
  ls::Tensor loss = ls::nll_loss(output, target);                             // [21]
  loss.backward();                                                            // [22]
  optimizer.step();                                                           // [23]
  float value = loss.item<float>();                                           // [24]
  CHECK(value > 0.0f);
  CHECK(model(data).sizes() == std::vector<int64_t>{6, 10});                  // [25]

  model->eval();                                                              // [26]
  ls::NoGradGuard no_grad;                                                    // [27]
  ls::Tensor pred = model->forward(data).argmax(1);                           // [28]
  int64_t correct = pred.eq(target).sum().item<int64_t>();                    // [29]
  CHECK(correct == ls::sum(pred.eq(target)).item<int64_t>());                 // [30]
  CHECK((correct >= 0 && correct <= 6));
  ls::Tensor test_loss = ls::nll_loss(model->forward(data), target, {}, ls::Reduction::Sum);   // [31]
  CHECK(test_loss.item<double>() == doctest::Approx(ls::nll_loss(model->forward(data), target, ls::kSum).item<double>()));
  model->zero_grad();                                                         // [32]
  for (const auto& p : model->parameters()) CHECK_FALSE(p.grad().defined());
}

TEST_CASE("idioms: named_parameters items, holder copies, optimizer save and load") {
  ls::manual_seed(2);
  Model model(3);                                                             // [33]
  Model same = model;                                                         // [34]
  CHECK(same.get() == model.get());
  CHECK(model->named_parameters().size() == 2);
  for (auto& param : model->named_parameters()) {                             // [35]
    CHECK(param.key().rfind("head.fc.", 0) == 0);                             // [36]
    CHECK(param.value().requires_grad());                                     // [37]
  }
  CHECK(model->named_parameters()["head.fc.weight"].sizes() == std::vector<int64_t>{2, 3});   // [38]
  CHECK(model->named_parameters().contains("head.fc.bias"));                  // [39]
  CHECK(model->named_children()[0].key() == "head");                          // [40]
  CHECK(model->named_buffers().is_empty());                                   // [41]
  auto* found = model->named_parameters().find("missing");                    // [42]
  CHECK(found == nullptr);

  ls::optim::Adam adam(model->parameters(), ls::optim::AdamOptions(2e-4).betas({0.5, 0.999}));   // [43]
  ls::Tensor loss = ls::binary_cross_entropy(ls::sigmoid(model(ls::randn({4, 3}))),   // [44]
                                             ls::empty({4, 2}).uniform_(0.8, 1.0));    // [45]
  loss.backward();
  ls::nn::utils::clip_grad_norm_(model->parameters(), /*max_norm=*/1.0);      // [46]
  adam.step();

  ls::testing::TempDir dir("idioms");
  const std::string model_path = dir.file("model.safetensors");
  const std::string opt_path = dir.file("optimizer.safetensors");
  ls::save(model, model_path);                                                // [47]
  ls::save(adam, opt_path);                                                   // [48]
  Model restored(3);
  ls::optim::Adam restored_adam(restored->parameters(), ls::optim::AdamOptions(2e-4).betas({0.5, 0.999}));
  ls::load(restored, model_path);                                             // [49]
  ls::load(restored_adam, opt_path);                                          // [50]
  CHECK(ls::allclose(restored->named_parameters()["head.fc.weight"], model->head->fc->weight));
  CHECK(restored_adam.step_count(0) == 1);

  ls::Tensor samples = ls::randn({2, 1, 4, 4});
  ls::save((samples + 1.0) / 2.0, dir.file("samples.safetensors"));          // [51]
  ls::Tensor back;
  ls::load(back, dir.file("samples.safetensors"));
  CHECK(ls::allclose(back, (samples + 1.0) / 2.0));
}

TEST_CASE("idioms: dcgan (options builders, tensors on a device, losses)") {
  ls::manual_seed(3);
  ls::Device device(ls::kCPU);
  auto generator = std::make_shared<ls::nn::Sequential>(
      std::make_shared<ls::nn::ConvTranspose2d>(
          ls::nn::ConvTranspose2dOptions(8, 4, 4).bias(false)),                // [52]
      std::make_shared<ls::nn::BatchNorm2d>(4),
      std::make_shared<ls::nn::Functional>(ls::relu),
      std::make_shared<ls::nn::Conv2d>(
          ls::nn::Conv2dOptions(4, 1, 3).stride(1).padding(1).bias(false)),   // [53]
      std::make_shared<ls::nn::Functional>(ls::tanh));
  generator->to(device);                                                      // [54]
  ls::optim::Adam opt(generator->parameters(), ls::optim::AdamOptions(2e-4).betas({0.5, 0.999}));
  ls::Tensor noise = ls::randn({2, 8, 1, 1}, device);                         // [55]
  ls::Tensor fake = generator->forward(noise);                                // [56]
  CHECK(fake.sizes() == std::vector<int64_t>{2, 1, 4, 4});
  ls::Tensor real_labels = ls::empty({2}, device).uniform_(0.8, 1.0);         // libtorch: empty(2, device)
  CHECK(real_labels.min().item<float>() >= 0.8f);
  ls::Tensor fake_labels = ls::zeros({2}, device);
  fake_labels.fill_(1);                                                       // [57]
  CHECK(fake_labels.sum().item<float>() == 2.0f);
  ls::Tensor scores = ls::sigmoid(fake.detach().mean({1, 2, 3}));             // [58]
  CHECK_FALSE(scores.requires_grad());
  ls::Tensor g_loss = ls::binary_cross_entropy(ls::sigmoid(fake.mean({1, 2, 3})), fake_labels);
  g_loss.backward();
  opt.step();
  CHECK(std::isfinite(g_loss.item<float>()));
}

TEST_CASE("idioms: custom-dataset and distributed (data loader, process group, DDP)") {
  ls::manual_seed(4);
  auto dataset = ls::data::TensorDataset(images(8), labels(8));
  auto data_loader = ls::data::make_data_loader(                              // [59]
      std::move(dataset), ls::data::DataLoaderOptions().batch_size(4).workers(1));   // [60]
  int64_t batches = 0;
  for (auto& batch : *data_loader) {                                          // [61]
    CHECK(batch.data.size(0) == 4);                                           // [62]
    CHECK(batch.target.dtype() == ls::kLong);                                 // [63]
    ++batches;
  }
  CHECK(batches == 2);

  auto store = std::make_shared<ls::distributed::HashStore>();
  std::shared_ptr<ls::distributed::ProcessGroup> pg =
      std::make_shared<ls::distributed::ProcessGroupGloo>(store, 0, 1);
  auto numranks = pg->getSize();                                              // [64]
  auto rank = pg->getRank();                                                  // [65]
  CHECK(numranks == 1);
  CHECK(rank == 0);
  ls::Tensor grad = ls::ones({3});
  std::vector<ls::Tensor> tmp = {grad};
  auto work = pg->allreduce(tmp);                                             // [66]
  work->wait();                                                               // [67]
  CHECK(ls::allclose(grad, ls::ones({3})));  // a world of one: the sum is the tensor

  ConvNet net;
  ls::distributed::DistributedDataParallel ddp(net, pg);                      // [68]
  ls::Tensor out = ddp(images(2));                                            // [69]
  CHECK(out.sizes() == std::vector<int64_t>{2, 10});
  ls::nll_loss(out, labels(2)).backward();
  CHECK(ddp.parameters().size() == net->parameters().size());                 // [70]
  CHECK(ddp->module().get() == net.get());                                    // [71]
  for (auto& param : ddp.named_parameters()) CHECK(param.value().grad().defined());   // [72]
}

TEST_CASE("idioms: autograd example") {
  ls::Tensor x = ls::ones({2, 2}, ls::requires_grad());                       // [73]
  ls::Tensor y = x + 2;                                                       // [74]
  CHECK(y.grad_fn() != nullptr);                                              // [75]
  ls::Tensor z = y * y * 3;
  ls::Tensor out = z.mean();                                                  // [76]
  out.backward();                                                             // [77]
  CHECK(ls::allclose(x.grad(), ls::full({2, 2}, 4.5)));                       // [78]
  ls::Tensor a = ls::randn({2, 2});
  a = ((a * 3) / (a - 1));
  CHECK_FALSE(a.requires_grad());                                             // [79]
  a.requires_grad_(true);                                                     // [80]
  CHECK(a.requires_grad());
  ls::Tensor b = (a * a).sum();
  CHECK(b.grad_fn()->name().size() > 0);                                      // [81]
  ls::Tensor v = ls::tensor(std::vector<float>{0.1f, 1.0f, 0.0001f}, {3});
  ls::Tensor w = ls::randn({3}, ls::requires_grad());
  ls::Tensor w2 = w * 2;
  w2.backward(v);                                                             // [82]
  CHECK(ls::allclose(w.grad(), v * 2));
  {
    ls::NoGradGuard no_grad;
    CHECK_FALSE(w.pow(2).requires_grad());                                    // [83]
  }
  CHECK_FALSE(w.detach().requires_grad());                                    // [84]
}

TEST_CASE("idioms: short dtype names, one-integer sizes, autograd::grad (dcgan, autograd)") {
  ls::manual_seed(5);
  ls::Device device(ls::kCPU);
  ls::Tensor labels = ls::empty(4, device).uniform_(0.8, 1.0);                  // [85]
  CHECK(labels.sizes() == std::vector<int64_t>{4});
  ls::Tensor zs = ls::zeros(3, ls::TensorOptions().dtype(ls::kF32).device(device));   // [86] [87]
  CHECK((zs.dtype() == ls::kFloat32 && zs.numel() == 3));
  CHECK(ls::zeros({}).dim() == 0);  // a braced list still means the sizes

  auto model = std::make_shared<ls::nn::Linear>(4, 3);
  ls::Tensor input = ls::randn({3, 4}).requires_grad_(true);
  ls::Tensor output = model->forward(input);
  ls::Tensor grad_output = ls::ones_like(output);
  ls::Tensor gradient = ls::autograd::grad({output}, {input}, /*grad_outputs=*/{grad_output},   // [88]
                                           /*retain_graph=*/true, /*create_graph=*/true)[0];
  CHECK(ls::allclose(gradient, model->weight.sum({0}).expand({3, 4})));
  ls::Tensor gradient_penalty = ((gradient * gradient).sum({1}).sqrt() - 1.0).pow(2.0).mean();
  gradient_penalty.backward();
  CHECK(model->weight.grad().defined());  // the penalty reaches the weight through the gradient
}
