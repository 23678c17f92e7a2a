#!/usr/bin/env python3
# tests/examples/make_example_data.py — small synthetic data sets for the ports of
# pytorch/examples (tests/examples/check_ports.sh), so that their tests need no download:
#
#   make_example_data.py idx DIR TRAIN TEST
#     DIR in the MNIST layout (data/mnist.h): TRAIN and TEST 28 x 28 images of 10 classes,
#     class c a bright 6 x 6 square at one of 10 places (jittered by a pixel) on noise.
#     The training files are plain, the test files gzipped (the reader takes both).
#   make_example_data.py folder DIR PER_CLASS_TRAIN PER_CLASS_TEST
#     DIR/info.txt and DIR/<class>/image_NNNN.ppm (binary PPM, 72 x 72): 3 classes, each a
#     main colour (red, green, blue) with noise, for examples/custom_dataset.cpp.
# Deterministic (fixed seed); standard library only.
# Read before: data/mnist.h, examples/custom_dataset.cpp. Read next: tests/examples/check_ports.sh.
import gzip
import os
import random
import struct
import sys


def idx_bytes(magic_dims, sizes, payload):
    return struct.pack(">I", 0x800 + magic_dims) + b"".join(struct.pack(">I", s) for s in sizes) + payload


def digit_like(rng, label):
    """28 x 28 bytes: noise in [0, 40), a 6 x 6 square in [180, 256) at label's place."""
    pixels = bytearray(rng.randrange(40) for _ in range(28 * 28))
    y0 = 2 + 9 * (label // 4) + rng.randrange(-1, 2)
    x0 = 1 + 7 * (label % 4) + rng.randrange(-1, 2)
    y0, x0 = min(max(y0, 0), 22), min(max(x0, 0), 22)
    for y in range(y0, y0 + 6):
        for x in range(x0, x0 + 6):
            pixels[y * 28 + x] = rng.randrange(180, 256)
    return bytes(pixels)


def write_idx(root, train, test):
    rng = random.Random(1)
    os.makedirs(root, exist_ok=True)
    for prefix, n, opener in (("train", train, open), ("t10k", test, gzip.open)):
        labels = [i % 10 for i in range(n)]
        rng.shuffle(labels)
        images = b"".join(digit_like(rng, label) for label in labels)
        suffix = ".gz" if opener is gzip.open else ""
        with opener(os.path.join(root, f"{prefix}-images-idx3-ubyte{suffix}"), "wb") as f:
            f.write(idx_bytes(3, [n, 28, 28], images))
        with opener(os.path.join(root, f"{prefix}-labels-idx1-ubyte{suffix}"), "wb") as f:
            f.write(idx_bytes(1, [n], bytes(labels)))


def write_folder(root, per_class_train, per_class_test):
    rng = random.Random(2)
    classes = ["red", "green", "blue"]
    lines = []
    size = 72
    for label, name in enumerate(classes):
        os.makedirs(os.path.join(root, name), exist_ok=True)
        for i in range(per_class_train + per_class_test):
            pixels = bytearray()
            for _ in range(size * size):
                rgb = [rng.randrange(0, 90) for _ in range(3)]
                rgb[label] = rng.randrange(150, 256)
                pixels += bytes(rgb)
            path = f"{name}/image_{i:04d}.ppm"
            with open(os.path.join(root, path), "wb") as f:
                f.write(b"P6\n%d %d\n255\n" % (size, size) + bytes(pixels))
            lines.append(f"{path} {label} {'train' if i < per_class_train else 'test'}")
    with open(os.path.join(root, "info.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    if len(sys.argv) != 5 or sys.argv[1] not in ("idx", "folder"):
        sys.exit("usage: make_example_data.py idx DIR TRAIN TEST | folder DIR PER_CLASS_TRAIN PER_CLASS_TEST")
    kind, root, a, b = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    (write_idx if kind == "idx" else write_folder)(root, a, b)


if __name__ == "__main__":
    main()
