"""bench/torch/custom_dataset_replay.py SEED OUT_DIR --dataset DIR --info FILE [--epochs 1] [--lr 0.05]
— bench/torch/custom_dataset.py's training (its data set, network, loop and hyper-parameters,
--seed SEED), run so that lockstep can replay the very same run, and recorded:
  OUT_DIR/init.safetensors  the initial weights, under lockstep's names (examples/custom_dataset_net.h
                            names the feature block "features" where PyTorch's Sequential says "0")
  OUT_DIR/order.txt         the info file's lines in the order this run visits them (train, test)
  OUT_DIR/masks.bin         every dropout mask of the training, uint8 0/1, in forward order
It prints "step S loss L input_sum X" for every training step (X: the sum of the batch's
pixels, which checks the two data pipelines), "grad S NAME NORM" for every parameter at a few
steps, and "epoch E test_accuracy A". build/bin/bench_custom_dataset_replay prints the same
lines from the recorded files; bench/compare_custom_dataset_replay.sh compares them. With
--perturb 1e-7 the run starts from weights moved by about one float32 rounding: PyTorch against
itself so perturbed shows how far rounding alone carries this training apart.

Dropout: PyTorch's nn.Dropout and lockstep's draw their masks from different generators, so
both sides use a replay dropout here: x * (mask / (1 - p)) with the mask drawn once, by
torch.bernoulli, and recorded; this is torch.nn.functional.dropout's own formula.
Read before: bench/torch/custom_dataset.py, bench/torch/fashion_mnist_replay.py.
Read next: bench/bench_custom_dataset_replay.cpp, bench/compare_custom_dataset_replay.sh.
"""
import argparse
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import custom_dataset  # noqa: E402
from fashion_mnist_replay import write_f32_safetensors  # noqa: E402

GRAD_STEPS = {1, 2, 10, 50, 100}


class RecordedDropout(nn.Module):
    """Dropout that writes each training mask (uint8 0/1) to `sink`."""

    def __init__(self, p, sink):
        super().__init__()
        self.p, self.sink = p, sink

    def forward(self, x):
        if not self.training:
            return x
        mask = torch.bernoulli(torch.full_like(x, 1 - self.p))
        self.sink.write(mask.to(torch.uint8).numpy().tobytes())
        return x * (mask / (1 - self.p))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("seed", type=int)
    p.add_argument("out")
    p.add_argument("--dataset", required=True)
    p.add_argument("--info", required=True)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--width-divisor", type=int, default=4)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--test-batch", type=int, default=200)
    p.add_argument("--perturb", type=float, default=0.0,
                   help="after recording, multiply each initial weight by 1 + PERTURB * N(0, 1) (its own "
                        "generator: the masks and order stay the same); 1e-7, a float32 rounding, calibrates "
                        "how far rounding alone moves the training")
    a = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    os.makedirs(a.out, exist_ok=True)
    train, test = custom_dataset.read_info(a.info, a.seed)
    with open(os.path.join(a.out, "order.txt"), "w") as f:
        f.writelines(f"{name} {label} {split}\n" for split, rows in (("train", train), ("test", test))
                     for name, label in rows)
    classes = 1 + max(label for _, label in train + test)
    network = custom_dataset.make_network(a.image_size, a.width_divisor, classes)
    names = {name: "features." + name[2:] if name.startswith("0.") else name for name, _ in network.named_parameters()}
    write_f32_safetensors(os.path.join(a.out, "init.safetensors"),
                          {names[name]: t for name, t in network.named_parameters()})
    if a.perturb:
        generator = torch.Generator().manual_seed(12345)
        with torch.no_grad():
            for t in network.parameters():
                t.mul_(1 + a.perturb * torch.randn(t.shape, generator=generator))
    masks = open(os.path.join(a.out, "masks.bin"), "wb")
    for i, module in enumerate(network):
        if isinstance(module, nn.Dropout):
            network[i] = RecordedDropout(module.p, masks)
    train_loader = DataLoader(custom_dataset.CustomDataset(train, a.dataset, a.image_size), batch_size=a.batch)
    test_loader = DataLoader(custom_dataset.CustomDataset(test, a.dataset, a.image_size), batch_size=a.test_batch)
    optimizer = torch.optim.SGD(network.parameters(), lr=a.lr, momentum=0.5)
    step = 0
    for epoch in range(1, a.epochs + 1):
        network.train()
        for data, targets in train_loader:
            step += 1
            loss = F.nll_loss(network(data), targets)
            optimizer.zero_grad()
            loss.backward()
            if step in GRAD_STEPS:
                for name, t in network.named_parameters():
                    print(f"grad {step} {names[name]} {t.grad.double().norm().item():.9g}")
            optimizer.step()
            print(f"step {step} loss {loss.item():.9g} input_sum {data.double().sum().item():.9g}", flush=True)
        network.eval()
        correct = 0
        with torch.no_grad():
            for data, targets in test_loader:
                correct += (network(data).argmax(1) == targets).sum().item()
        print(f"epoch {epoch} test_accuracy {correct / len(test):.4f}", flush=True)
    masks.close()


if __name__ == "__main__":
    main()
