"""bench/torch/mnist.py — pytorch/examples' cpp/mnist in PyTorch, to compare with its lockstep
port examples/mnist.cpp (bench/compare_examples.sh): the same network, data, order and
hyper-parameters.

    $TORCH_PY bench/torch/mnist.py --epochs 1 [--seed 1] [--threads 1] [--root DIR]

The network: conv 1->10 (5x5), max-pool 2, ReLU; conv 10->20 (5x5), Dropout2d, max-pool 2, ReLU;
fc 320->50, ReLU, dropout 0.5; fc 50->10; log_softmax; nll_loss, SGD lr 0.01 momentum 0.5,
batch 64 in file order (the original's SequentialSampler), test batch 1000, pixels / 255
normalised with mean 0.1307 and std 0.3081. Data: the IDX files of Debian's
dataset-fashion-mnist (bench/torch/fashion_mnist.py reads them). After each epoch it prints
"epoch E test_accuracy A test_loss L cpu_seconds C seconds S" (cpu: time.process_time of the
epoch's training and test, the lockstep port's line measures the same).
Read before: examples/mnist.cpp, bench/torch/fashion_mnist.py. Read next: bench/compare_examples.sh.
"""
import argparse
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fashion_mnist import DEFAULT_ROOT, load  # noqa: E402


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))                   # (N, 10, 12, 12)
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))  # (N, 20, 4, 4)
        x = F.relu(self.fc1(x.view(-1, 320)))
        x = F.dropout(x, p=0.5, training=self.training)
        return F.log_softmax(self.fc2(x), dim=1)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", default=DEFAULT_ROOT)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--test-batch", type=int, default=1000)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    x, y = load(a.root, "train")
    x_test, y_test = load(a.root, "t10k")
    x, x_test = (x - 0.1307) / 0.3081, (x_test - 0.1307) / 0.3081
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    for epoch in range(1, a.epochs + 1):
        start, cpu_start = time.perf_counter(), time.process_time()
        model.train()
        for first in range(0, len(x), a.batch):
            opt.zero_grad()
            loss = F.nll_loss(model(x[first:first + a.batch]), y[first:first + a.batch])
            loss.backward()
            opt.step()
        model.eval()
        test_loss, correct = 0.0, 0
        with torch.no_grad():
            for first in range(0, len(x_test), a.test_batch):
                out = model(x_test[first:first + a.test_batch])
                target = y_test[first:first + a.test_batch]
                test_loss += F.nll_loss(out, target, reduction="sum").item()
                correct += (out.argmax(1) == target).sum().item()
        print(f"epoch {epoch} test_accuracy {correct / len(x_test):.4f} test_loss "
              f"{test_loss / len(x_test):.4f} cpu_seconds {time.process_time() - cpu_start:.2f} "
              f"seconds {time.perf_counter() - start:.2f}", flush=True)


if __name__ == "__main__":
    main()
