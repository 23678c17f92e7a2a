// examples/dcgan.cpp — a port of pytorch/examples' cpp/dcgan/dcgan.cpp to
// lockstep, written for lockstep's API: a deep convolutional GAN that learns
// to draw 28 x 28 digits (or clothes: any directory in the MNIST layout,
// data/mnist.h; Fashion-MNIST by default).
//
// The generator: noise (N, 100, 1, 1) through ConvTranspose2d 100->256 (4x4),
// 256->128 (3x3, stride 2), 128->64 and 64->1 (4x4, stride 2), BatchNorm2d and
// ReLU between them and tanh at the end: (N, 1, 28, 28) in [-1, 1]. The
// discriminator: Conv2d 1->64->128->256 (4x4, stride 2) with BatchNorm2d and
// LeakyReLU(0.2), then 256->1 (3x3) and Sigmoid. Both train with Adam (lr 2e-4,
// betas (0.5, 0.5)) on binary_cross_entropy, real labels drawn in [0.8, 1.0]
// (one-sided label smoothing), on the images mapped through Normalize(0.5, 0.5)
// into [-1, 1]. Every --checkpoint-every batches the models and optimizers are
// saved (safetensors) and the generator draws --samples images, saved as
// dcgan-sample-K.safetensors ((samples + 1) / 2, in [0, 1]) and, to look at,
// dcgan-sample-K.pgm (the samples side by side).
//   build/bin/dcgan --epochs 30
//   build/bin/dcgan --restore       # continue from the checkpoints in --out
// Differences from the original: the constants are options (`dcgan --help`);
// checkpoints are safetensors files (the original's torch::save .pt files);
// the PGM picture replaces display_samples.py; --steps N stops after N steps,
// and the run ends with a line "final steps N cpu_seconds C seconds S" (process
// CPU time and wall time of the training loop), for scripts
// (bench/compare_examples.sh runs it beside bench/torch/dcgan.py).
// Read before: examples/mnist.cpp, nn/conv_transpose.h. Read next: examples/distributed.cpp.
#include <lockstep.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>

#include "tools/cli.h"

namespace ls = lockstep;
using namespace lockstep;

namespace {

struct Options {
  std::string root = data::FashionMNIST::kDefaultRoot;
  std::string out = ".";
  int64_t noise_size = 100;
  int64_t batch_size = 64;
  int64_t epochs = 30;
  int64_t steps = 0;  // 0: all the epochs
  int64_t checkpoint_every = 200;
  int64_t samples_per_checkpoint = 10;
  int64_t log_interval = 10;
  int64_t workers = 2;
  int64_t seed = 1;
  int64_t threads = 1;
  bool restore = false;
};

struct DCGANGenerator : nn::Module {
  explicit DCGANGenerator(int64_t noise_size) {
    conv1 = register_module("conv1", std::make_shared<nn::ConvTranspose2d>(
                                         nn::ConvTranspose2dOptions(noise_size, 256, 4).bias(false)));
    conv2 = register_module("conv2", std::make_shared<nn::ConvTranspose2d>(
                                         nn::ConvTranspose2dOptions(256, 128, 3).stride(2).padding(1).bias(false)));
    conv3 = register_module("conv3", std::make_shared<nn::ConvTranspose2d>(
                                         nn::ConvTranspose2dOptions(128, 64, 4).stride(2).padding(1).bias(false)));
    conv4 = register_module("conv4", std::make_shared<nn::ConvTranspose2d>(
                                         nn::ConvTranspose2dOptions(64, 1, 4).stride(2).padding(1).bias(false)));
    batch_norm1 = register_module("batch_norm1", std::make_shared<nn::BatchNorm2d>(256));
    batch_norm2 = register_module("batch_norm2", std::make_shared<nn::BatchNorm2d>(128));
    batch_norm3 = register_module("batch_norm3", std::make_shared<nn::BatchNorm2d>(64));
  }

  // x (N, noise, 1, 1) -> images (N, 1, 28, 28) in [-1, 1]
  Tensor forward(Tensor x) {
    x = relu(batch_norm1->forward(conv1->forward(x)));  // (N, 256, 4, 4)
    x = relu(batch_norm2->forward(conv2->forward(x)));  // (N, 128, 7, 7)
    x = relu(batch_norm3->forward(conv3->forward(x)));  // (N, 64, 14, 14)
    x = tanh(conv4->forward(x));                        // (N, 1, 28, 28)
    return x;
  }

  std::shared_ptr<nn::ConvTranspose2d> conv1, conv2, conv3, conv4;
  std::shared_ptr<nn::BatchNorm2d> batch_norm1, batch_norm2, batch_norm3;
};

// images (N, 1, 28, 28) -> probability of being real (N, 1, 1, 1)
std::shared_ptr<nn::Sequential> create_discriminator() {
  using nn::Conv2d, nn::Conv2dOptions, nn::BatchNorm2d, nn::LeakyReLU;
  return std::make_shared<nn::Sequential>(
      // Layer 1
      std::make_shared<Conv2d>(Conv2dOptions(1, 64, 4).stride(2).padding(1).bias(false)),
      std::make_shared<LeakyReLU>(0.2),
      // Layer 2
      std::make_shared<Conv2d>(Conv2dOptions(64, 128, 4).stride(2).padding(1).bias(false)),
      std::make_shared<BatchNorm2d>(128), std::make_shared<LeakyReLU>(0.2),
      // Layer 3
      std::make_shared<Conv2d>(Conv2dOptions(128, 256, 4).stride(2).padding(1).bias(false)),
      std::make_shared<BatchNorm2d>(256), std::make_shared<LeakyReLU>(0.2),
      // Layer 4
      std::make_shared<Conv2d>(Conv2dOptions(256, 1, 3).stride(1).padding(0).bias(false)),
      std::make_shared<nn::Sigmoid>());
}

// samples (S, 1, 28, 28) in [0, 1] -> one binary PGM, the samples side by side.
void write_pgm(const Tensor& samples, const std::string& path) {
  const Tensor cpu = samples.to(Device::cpu()).contiguous();
  const int64_t n = cpu.size(0), h = cpu.size(2), w = cpu.size(3);
  const float* pixels = cpu.data_ptr<float>();
  std::ofstream out(path, std::ios::binary);
  out << "P5\n" << n * w << " " << h << "\n255\n";
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t x = 0; x < w; ++x) {
        const float v = std::fmin(std::fmax(pixels[(i * h + y) * w + x], 0.0f), 1.0f);
        out.put(static_cast<char>(std::lround(v * 255.0f)));
      }
    }
  }
  LS_CHECK(out.good(), "cannot write '", path, "'");
}

int run(const Options& o) {
  set_num_threads(static_cast<int>(o.threads));
  std::printf("Training with number of epochs: %lld\n", static_cast<long long>(o.epochs));
  manual_seed(static_cast<uint64_t>(o.seed));

  // Create the device we pass around based on whether CUDA is available.
  Device device = Device::cpu();
  if (cuda::is_available()) {
    std::printf("CUDA is available! Training on GPU.\n");
    device = Device::cuda(0);
  }
  auto generator = std::make_shared<DCGANGenerator>(o.noise_size);
  generator->to(device);
  auto discriminator = create_discriminator();
  discriminator->to(device);

  auto dataset = data::datasets::MNIST(o.root)
                     .map(data::transforms::Normalize<>(0.5, 0.5))
                     .map(data::transforms::Stack<>());
  const auto batches_per_epoch =
      static_cast<int64_t>(std::ceil(static_cast<double>(dataset.size()) / static_cast<double>(o.batch_size)));
  auto data_loader = data::make_data_loader(
      std::move(dataset), data::DataLoaderOptions().batch_size(o.batch_size).workers(o.workers));

  optim::Adam generator_optimizer(generator->parameters(), optim::AdamOptions(2e-4).betas(std::make_tuple(0.5, 0.5)));
  optim::Adam discriminator_optimizer(discriminator->parameters(),
                                      optim::AdamOptions(2e-4).betas(std::make_tuple(0.5, 0.5)));

  const std::filesystem::path out(o.out);
  auto file = [&](const std::string& name) { return (out / name).string(); };
  if (o.restore) {
    nn::load(*generator, file("generator-checkpoint.safetensors"));
    generator_optimizer.load_state_dict(nn::load_tensors(file("generator-optimizer-checkpoint.safetensors")));
    nn::load(*discriminator, file("discriminator-checkpoint.safetensors"));
    discriminator_optimizer.load_state_dict(nn::load_tensors(file("discriminator-optimizer-checkpoint.safetensors")));
  }

  int64_t checkpoint_counter = 1, steps = 0;
  const auto start = std::chrono::steady_clock::now();
  const std::clock_t cpu_start = std::clock();
  auto more_steps = [&] { return o.steps == 0 || steps < o.steps; };
  for (int64_t epoch = 1; epoch <= o.epochs && more_steps(); ++epoch) {
    int64_t batch_index = 0;
    for (const data::Batch& batch : *data_loader) {
      // Train discriminator with real images.
      discriminator->zero_grad();
      Tensor real_images = batch.data.to(device);
      Tensor real_labels = empty({batch.data.size(0)}, TensorOptions().device(device)).uniform_(0.8, 1.0);
      Tensor real_output = discriminator->forward(real_images).reshape(real_labels.sizes());
      Tensor d_loss_real = binary_cross_entropy(real_output, real_labels);
      d_loss_real.backward();

      // Train discriminator with fake images.
      Tensor noise = randn({batch.data.size(0), o.noise_size, 1, 1}, TensorOptions().device(device));
      Tensor fake_images = generator->forward(noise);
      Tensor fake_labels = zeros({batch.data.size(0)}, TensorOptions().device(device));
      Tensor fake_output = discriminator->forward(fake_images.detach()).reshape(fake_labels.sizes());
      Tensor d_loss_fake = binary_cross_entropy(fake_output, fake_labels);
      d_loss_fake.backward();

      Tensor d_loss = d_loss_real + d_loss_fake;
      discriminator_optimizer.step();

      // Train generator.
      generator->zero_grad();
      fake_labels.fill_(1);
      fake_output = discriminator->forward(fake_images).reshape(fake_labels.sizes());
      Tensor g_loss = binary_cross_entropy(fake_output, fake_labels);
      g_loss.backward();
      generator_optimizer.step();
      batch_index++;
      steps++;
      const float d = d_loss.item<float>(), g = g_loss.item<float>();
      LS_CHECK(std::isfinite(d) && std::isfinite(g), "a loss is not finite at epoch ", epoch,
               " batch ", batch_index, " (D_loss ", d, ", G_loss ", g, ")");
      if (batch_index % o.log_interval == 0) {
        std::printf("[%2lld/%2lld][%3lld/%3lld] D_loss: %.4f | G_loss: %.4f\n", static_cast<long long>(epoch),
                    static_cast<long long>(o.epochs), static_cast<long long>(batch_index),
                    static_cast<long long>(batches_per_epoch), d, g);
        std::fflush(stdout);
      }

      if (batch_index % o.checkpoint_every == 0) {
        // Checkpoint the model and optimizer state.
        nn::save(*generator, file("generator-checkpoint.safetensors"));
        nn::save_tensors(generator_optimizer.state_dict(), file("generator-optimizer-checkpoint.safetensors"));
        nn::save(*discriminator, file("discriminator-checkpoint.safetensors"));
        nn::save_tensors(discriminator_optimizer.state_dict(),
                         file("discriminator-optimizer-checkpoint.safetensors"));
        // Sample the generator and save the images.
        NoGradGuard no_grad;
        Tensor samples = generator->forward(randn({o.samples_per_checkpoint, o.noise_size, 1, 1},
                                                  TensorOptions().device(device)));
        const Tensor unit = ((samples + 1.0) / 2.0).to(Device::cpu());  // (S, 1, 28, 28) in [0, 1]
        const std::string name = "dcgan-sample-" + std::to_string(checkpoint_counter);
        nn::save_tensors({{"samples", unit}}, file(name + ".safetensors"));
        write_pgm(unit, file(name + ".pgm"));
        std::printf("-> checkpoint %lld\n", static_cast<long long>(++checkpoint_counter));
      }
      if (!more_steps()) break;
    }
  }
  std::printf("final steps %lld cpu_seconds %.2f seconds %.2f\n", static_cast<long long>(steps),
              static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  std::printf("Training complete!\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  cli::Program p("dcgan", "pytorch/examples' cpp/dcgan on lockstep: a DCGAN trained on 28 x 28 images "
                          "in the MNIST layout (MNIST or Fashion-MNIST).");
  Options o;
  p.text("--root", o.root, "directory in the MNIST layout (data/mnist.h): MNIST or Fashion-MNIST");
  p.text("--out", o.out, "directory for the checkpoints and samples");
  p.integer("--epochs", o.epochs, "number of epochs to train", 1, 100000);
  p.integer("--steps", o.steps, "stop after this many steps (batches) in all; 0: train all the epochs", 0);
  p.integer("--batch", o.batch_size, "batch size", 1, 1000000);
  p.integer("--noise", o.noise_size, "size of the noise vector fed to the generator", 1, 100000);
  p.integer("--checkpoint-every", o.checkpoint_every, "batches between checkpoints and samples", 1);
  p.integer("--samples", o.samples_per_checkpoint, "images sampled at every checkpoint", 1, 10000);
  p.integer("--log-interval", o.log_interval, "print the losses every N batches", 1);
  p.integer("--workers", o.workers, "data loading threads", 0, 64);
  p.integer("--seed", o.seed, "seed of the weights, the noise and the labels", 0);
  p.flag("--restore", o.restore, "start from the checkpoints in --out");
  p.threads(o.threads);
  p.parse(argc, argv);
  return cli::run("dcgan", [&] { return run(o); });
}
