"""bench/torch/dcgan.py — pytorch/examples' cpp/dcgan in PyTorch, to compare with its lockstep
port examples/dcgan.cpp (bench/compare_examples.sh): the same networks, data, order, losses and
hyper-parameters.

    $TORCH_PY bench/torch/dcgan.py --steps 500 [--seed 1] [--threads 1] [--root DIR]

The generator: noise (N, 100, 1, 1) through ConvTranspose2d 100->256 (4x4), 256->128 (3x3,
stride 2, padding 1), 128->64 and 64->1 (4x4, stride 2, padding 1), no biases, BatchNorm2d and
ReLU between them and tanh at the end: (N, 1, 28, 28). The discriminator: Conv2d 1->64, 64->128,
128->256 (4x4, stride 2, padding 1, no biases) with BatchNorm2d after the last two and
LeakyReLU(0.2) after each, then Conv2d 256->1 (3x3) and Sigmoid. PyTorch's default
initialisation (the C++ original calls no weights_init). Both train with Adam (lr 2e-4, betas
(0.5, 0.5)) on binary_cross_entropy; real labels drawn uniformly in [0.8, 1.0). Each step, as the
original: D on a real batch, D on G(noise).detach(), D's step; then G through D with labels 1,
G's step (D's gradients from G's pass are cleared by D's zero_grad at the next step). Data: the
training IDX files of Debian's dataset-fashion-mnist (bench/torch/fashion_mnist.py reads them),
pixels / 255 normalised with mean 0.5 and std 0.5 into [-1, 1], batch 64 in file order (the
port's loader is sequential; the last batch of an epoch has 32 images). No checkpoints or
samples (the port runs with --checkpoint-every beyond the steps for the comparison).
Random draws, in order: torch.manual_seed(--seed), G's weights, D's weights, then per step the
real labels and the noise.

Prints the original's log line every --log-interval steps, "[E/EPOCHS][B/BATCHES] D_loss: D |
G_loss: G", and at the end "final steps N cpu_seconds C seconds S" (cpu: time.process_time of
the training loop; the port's final line measures the same).
Read before: examples/dcgan.cpp, bench/torch/fashion_mnist.py. Read next: bench/compare_examples.sh.
"""
import argparse
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fashion_mnist import DEFAULT_ROOT, load  # noqa: E402


class Generator(nn.Module):
    def __init__(self, noise_size):
        super().__init__()
        self.conv1 = nn.ConvTranspose2d(noise_size, 256, 4, bias=False)
        self.conv2 = nn.ConvTranspose2d(256, 128, 3, stride=2, padding=1, bias=False)
        self.conv3 = nn.ConvTranspose2d(128, 64, 4, stride=2, padding=1, bias=False)
        self.conv4 = nn.ConvTranspose2d(64, 1, 4, stride=2, padding=1, bias=False)
        self.batch_norm1 = nn.BatchNorm2d(256)
        self.batch_norm2 = nn.BatchNorm2d(128)
        self.batch_norm3 = nn.BatchNorm2d(64)

    def forward(self, x):                                  # (N, noise, 1, 1)
        x = F.relu(self.batch_norm1(self.conv1(x)))        # (N, 256, 4, 4)
        x = F.relu(self.batch_norm2(self.conv2(x)))        # (N, 128, 7, 7)
        x = F.relu(self.batch_norm3(self.conv3(x)))        # (N, 64, 14, 14)
        return torch.tanh(self.conv4(x))                   # (N, 1, 28, 28)


def discriminator():
    """images (N, 1, 28, 28) -> probability of being real (N, 1, 1, 1)"""
    return nn.Sequential(
        nn.Conv2d(1, 64, 4, stride=2, padding=1, bias=False), nn.LeakyReLU(0.2),
        nn.Conv2d(64, 128, 4, stride=2, padding=1, bias=False), nn.BatchNorm2d(128), nn.LeakyReLU(0.2),
        nn.Conv2d(128, 256, 4, stride=2, padding=1, bias=False), nn.BatchNorm2d(256), nn.LeakyReLU(0.2),
        nn.Conv2d(256, 1, 3, stride=1, padding=0, bias=False), nn.Sigmoid())


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", default=DEFAULT_ROOT)
    # The port's options and defaults; --steps 0: all the epochs.
    for name, default in (("--epochs", 30), ("--steps", 0), ("--batch", 64), ("--noise", 100),
                          ("--log-interval", 10), ("--seed", 1), ("--threads", 1)):
        p.add_argument(name, type=int, default=default)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    generator = Generator(a.noise)
    disc = discriminator()
    x, _ = load(a.root, "train")
    x = (x - 0.5) / 0.5                                    # (60000, 1, 28, 28) in [-1, 1]
    batches_per_epoch = math.ceil(len(x) / a.batch)
    g_opt = torch.optim.Adam(generator.parameters(), lr=2e-4, betas=(0.5, 0.5))
    d_opt = torch.optim.Adam(disc.parameters(), lr=2e-4, betas=(0.5, 0.5))

    start, cpu_start = time.perf_counter(), time.process_time()
    step = 0
    for epoch in range(1, a.epochs + 1):
        for batch_index, first in enumerate(range(0, len(x), a.batch), start=1):
            real_images = x[first:first + a.batch]
            n = len(real_images)
            # Train the discriminator with real images.
            disc.zero_grad()
            real_labels = torch.empty(n).uniform_(0.8, 1.0)
            real_output = disc(real_images).reshape(real_labels.shape)
            d_loss_real = F.binary_cross_entropy(real_output, real_labels)
            d_loss_real.backward()
            # ... and with fake images.
            noise = torch.randn(n, a.noise, 1, 1)
            fake_images = generator(noise)
            fake_labels = torch.zeros(n)
            fake_output = disc(fake_images.detach()).reshape(fake_labels.shape)
            d_loss_fake = F.binary_cross_entropy(fake_output, fake_labels)
            d_loss_fake.backward()
            d_loss = d_loss_real + d_loss_fake
            d_opt.step()
            # Train the generator.
            generator.zero_grad()
            fake_labels.fill_(1)
            fake_output = disc(fake_images).reshape(fake_labels.shape)
            g_loss = F.binary_cross_entropy(fake_output, fake_labels)
            g_loss.backward()
            g_opt.step()
            step += 1
            d, g = d_loss.item(), g_loss.item()
            if not (math.isfinite(d) and math.isfinite(g)):
                sys.exit(f"dcgan.py: a loss is not finite at epoch {epoch} batch {batch_index} "
                         f"(D_loss {d}, G_loss {g})")
            if batch_index % a.log_interval == 0:
                print(f"[{epoch:2d}/{a.epochs:2d}][{batch_index:3d}/{batches_per_epoch:3d}] "
                      f"D_loss: {d:.4f} | G_loss: {g:.4f}", flush=True)
            if step == a.steps:
                break
        if step == a.steps:
            break
    print(f"final steps {step} cpu_seconds {time.process_time() - cpu_start:.2f} "
          f"seconds {time.perf_counter() - start:.2f}", flush=True)


if __name__ == "__main__":
    main()
