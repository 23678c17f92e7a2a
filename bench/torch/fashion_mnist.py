"""bench/torch/fashion_mnist.py — the Fashion-MNIST reference training in PyTorch, to compare
with examples/train_fashion_mnist.cpp (bench/compare_fashion_mnist.sh).

    $TORCH_PY bench/torch/fashion_mnist.py --epochs 2 [--seed 0] [--threads 1]

The network is models.SmallCNN; SGD lr 0.05 momentum 0.9, batch 64, a fresh torch.randperm
shuffle every epoch, inputs scaled to [0, 1]. Data: the IDX files (gzip) of Debian's
dataset-fashion-mnist under /usr/share/datasets/fashion-mnist (--root). After each epoch it
prints "epoch E train_loss L test_accuracy A seconds S".
Random draws, in order: torch.manual_seed(--seed), the model's initial weights, then one
randperm per epoch. bench/torch/fashion_mnist_replay.py calls train() with hooks to record
exactly these draws for lockstep to replay.
Read before: bench/torch/models.py, models/small_cnn.h. Read next: bench/compare_fashion_mnist.sh.
"""
import argparse
import gzip
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import SmallCNN  # noqa: E402

DEFAULT_ROOT = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    """An IDX file (gzip): big-endian magic whose low byte is the rank, the dims, then uint8 data."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    rank = struct.unpack(">I", raw[:4])[0] & 0xFF
    dims = struct.unpack(">" + "I" * rank, raw[4:4 + 4 * rank])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * rank).reshape(dims)


def load(root, split):
    """split "train" or "t10k": images (N, 1, 28, 28) float32 in [0, 1], labels (N,) int64."""
    images = torch.tensor(read_idx(f"{root}/{split}-images-idx3-ubyte.gz"), dtype=torch.float32)
    labels = torch.tensor(read_idx(f"{root}/{split}-labels-idx1-ubyte.gz").astype(np.int64))
    return images.unsqueeze(1) / 255, labels


def arguments(argv=None, extra=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", default=DEFAULT_ROOT)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    if extra:
        extra(p)
    return p.parse_args(argv)


def train(a, on_start=None, on_shuffle=None, on_step=None):
    """Trains and prints one line per epoch. Hooks: on_start(model) before the first step,
    on_shuffle(epoch, perm) for each epoch's order, on_step(epoch, step, loss) after each step
    (step counts from 1)."""
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    x, y = load(a.root, "train")
    x_test, y_test = load(a.root, "t10k")
    model = SmallCNN()
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    if on_start:
        on_start(model)
    for epoch in range(a.epochs):
        start = time.perf_counter()
        perm = torch.randperm(len(x))
        if on_shuffle:
            on_shuffle(epoch, perm)
        model.train()
        loss_sum = 0.0
        for step, first in enumerate(range(0, len(x), a.batch), start=1):
            rows = perm[first:first + a.batch]
            opt.zero_grad()
            loss = F.cross_entropy(model(x[rows]), y[rows])
            loss.backward()
            opt.step()
            loss_sum += loss.item() * len(rows)
            if on_step:
                on_step(epoch, step, loss.item())
        model.eval()
        with torch.no_grad():
            accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
        print(f"epoch {epoch + 1} train_loss {loss_sum / len(x):.4f} test_accuracy {accuracy:.4f} "
              f"seconds {time.perf_counter() - start:.1f}", flush=True)
    return model


if __name__ == "__main__":
    train(arguments())
