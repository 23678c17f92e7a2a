"""bench/torch/custom_dataset.py — pytorch/examples' cpp/custom-dataset in PyTorch, as its lockstep
port examples/custom_dataset.cpp runs it, to compare the two (bench/compare_examples_more.sh).

    $TORCH_PY bench/torch/custom_dataset.py --dataset DIR --info DIR/info.txt [--iterations 2]
        [--seed 1] [--threads 1] [--lr 0.001] [--image-size 64] [--width-divisor 4]

As the port: a Dataset that reads a binary PPM (P6) or PGM (P5) file in __getitem__ on every
visit, resizes it to S x S by nearest neighbour (source row y * h // S, column x * w // S) and
scales the bytes to [0, 1]; the info file's train and test lists each shuffled once by the
seed; a DataLoader in list order (batch 8, test batch 200, the last short batch kept);
AlexNet's layers with every width divided by --width-divisor, dropout 0.5 before the first two
fully connected layers, log_softmax, nll_loss, SGD with momentum 0.5. After each epoch it prints
"epoch E test_accuracy A cpu_seconds C seconds S" (time.process_time of the epoch's training
and test) and at the end "final test_accuracy A".
Read before: examples/custom_dataset.cpp, tools/make_shape_images.py.
Read next: bench/compare_examples_more.sh.
"""
import argparse
import os
import random
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


def read_netpbm(path):
    """A binary PPM (P6) or PGM (P5) file with maxval 255 as a (3, h, w) uint8 tensor."""
    with open(path, "rb") as f:
        raw = f.read()
    fields, at = [], 0
    while len(fields) < 4:  # magic, width, height, maxval, separated by whitespace
        while raw[at:at + 1].isspace():
            at += 1
        end = at
        while not raw[end:end + 1].isspace():
            end += 1
        fields.append(raw[at:end])
        at = end
    magic, width, height, maxval = fields[0], int(fields[1]), int(fields[2]), int(fields[3])
    if magic not in (b"P6", b"P5") or maxval != 255:
        raise ValueError(f"'{path}' is not a binary PPM (P6) or PGM (P5) image with maxval 255")
    channels = 3 if magic == b"P6" else 1
    pixels = torch.frombuffer(bytearray(raw[at + 1:at + 1 + width * height * channels]), dtype=torch.uint8)
    return pixels.view(height, width, channels).permute(2, 0, 1).expand(3, height, width)


class CustomDataset(Dataset):
    def __init__(self, data, root, image_size):
        self.data, self.root, self.size = data, root, image_size

    def __getitem__(self, index):
        path, label = self.data[index]
        image = read_netpbm(os.path.join(self.root, path))  # (3, h, w)
        rows = torch.arange(self.size) * image.shape[1] // self.size
        cols = torch.arange(self.size) * image.shape[2] // self.size
        return image[:, rows][:, :, cols].float() / 255, label  # (3, S, S)

    def __len__(self):
        return len(self.data)


def read_info(path, seed):
    train, test = [], []
    with open(path) as f:
        for line in f:
            if line.strip():
                name, label, split = line.split()
                (train if split == "train" else test).append((name, int(label)))
    generator = random.Random(seed)
    generator.shuffle(train)
    generator.shuffle(test)
    return train, test


def make_network(image_size, div, classes):
    """AlexNet's layers, widths divided by div: (N, 3, S, S) -> log-probabilities (N, classes)."""
    features = nn.Sequential(
        nn.Conv2d(3, 64 // div, 11, stride=4, padding=2), nn.ReLU(), nn.MaxPool2d(3, 2),
        nn.Conv2d(64 // div, 192 // div, 5, padding=2), nn.ReLU(), nn.MaxPool2d(3, 2),
        nn.Conv2d(192 // div, 384 // div, 3, padding=1), nn.ReLU(),
        nn.Conv2d(384 // div, 256 // div, 3, padding=1), nn.ReLU(),
        nn.Conv2d(256 // div, 256 // div, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2))
    with torch.no_grad():
        flat = features(torch.zeros(1, 3, image_size, image_size)).numel()
    return nn.Sequential(
        features, nn.Flatten(), nn.Dropout(), nn.Linear(flat, 4096 // div), nn.ReLU(), nn.Dropout(),
        nn.Linear(4096 // div, 4096 // div), nn.ReLU(), nn.Linear(4096 // div, classes), nn.LogSoftmax(1))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="./dataset")
    p.add_argument("--info", default="info.txt")
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--width-divisor", type=int, default=4)
    p.add_argument("--iterations", type=int, default=10, help="epochs")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--test-batch", type=int, default=200)
    p.add_argument("--lr", type=float, default=0.001)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    train, test = read_info(a.info, a.seed)
    classes = 1 + max(label for _, label in train + test)
    train_loader = DataLoader(CustomDataset(train, a.dataset, a.image_size), batch_size=a.batch)
    test_loader = DataLoader(CustomDataset(test, a.dataset, a.image_size), batch_size=a.test_batch)
    print(f"{len(train)} training and {len(test)} test images of {classes} classes, "
          f"{a.image_size} x {a.image_size}", flush=True)
    network = make_network(a.image_size, a.width_divisor, classes)
    optimizer = torch.optim.SGD(network.parameters(), lr=a.lr, momentum=0.5)
    accuracy = 0.0
    for epoch in range(1, a.iterations + 1):
        start, cpu_start = time.perf_counter(), time.process_time()
        network.train()
        for data, targets in train_loader:
            loss = F.nll_loss(network(data), targets)
            if torch.isnan(loss):
                raise SystemExit(f"the loss is NaN at epoch {epoch}; lower --lr")
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        network.eval()
        loss_sum, correct = 0.0, 0
        with torch.no_grad():
            for data, targets in test_loader:
                output = network(data)
                loss_sum += F.nll_loss(output, targets, reduction="sum").item()
                correct += (output.argmax(1) == targets).sum().item()
        accuracy = correct / len(test)
        print(f"Test Loss: {loss_sum / len(test):.4f}\tAcc: {accuracy:.4f}")
        print(f"epoch {epoch} test_accuracy {accuracy:.4f} cpu_seconds {time.process_time() - cpu_start:.2f} "
              f"seconds {time.perf_counter() - start:.2f}", flush=True)
    print(f"final test_accuracy {accuracy:.4f}", flush=True)


if __name__ == "__main__":
    main()
