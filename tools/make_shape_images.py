#!/usr/bin/env python3
"""tools/make_shape_images.py — a small image-classification data set of simple shapes, written
deterministically in the layout examples/custom_dataset.cpp reads, so that the lockstep port and
its PyTorch twin (bench/torch/custom_dataset.py) train on the same files
(bench/compare_examples_more.sh).

    tools/make_shape_images.py DIR TRAIN_PER_CLASS TEST_PER_CLASS [--size 72] [--seed 3]

Writes DIR/<class>/image_NNNN.ppm (binary PPM, P6, SIZE x SIZE) and DIR/info.txt, one line
"<class>/image_NNNN.ppm LABEL train|test" per image. Four classes, one shape each: disc (0),
square (1), triangle (2), cross (3); every image draws its shape at a random place and size
(half-width SIZE / 5 to SIZE / 2 - 2) over dark noise, in a colour whose brightest channel is red, green,
blue, red for the four classes (the others random and dimmer). So colour alone tells apart
three groups (75 % accuracy at best) and only the outline separates disc from cross: a task
that is learned in a few epochs but not at once. (Shape alone, in random colours, left the
AlexNet of custom_dataset at chance for 15 epochs at any learning rate tried; colour alone, as
in tests/examples/make_example_data.py, is learned to 100 % in a few steps.) Python's
random.Random(--seed) drives every draw: the same arguments give the same bytes everywhere.
Read before: examples/custom_dataset.cpp. Read next: bench/torch/custom_dataset.py.
"""
import argparse
import os
import random

CLASSES = ("disc", "square", "triangle", "cross")
DARK = bytes(b >> 2 for b in range(256))  # a byte translation table: b -> b / 4


def inside(shape, dx, dy, r):
    """Whether the pixel at offset (dx, dy) from the centre lies in the shape of half-width r."""
    if shape == "disc":
        return dx * dx + dy * dy <= r * r
    if shape == "square":
        return abs(dx) <= 0.8 * r and abs(dy) <= 0.8 * r
    if shape == "triangle":  # apex up, base at dy = r
        return -r <= dy <= r and 2 * abs(dx) <= dy + r
    return (abs(dx) <= r / 4 and abs(dy) <= r) or (abs(dy) <= r / 4 and abs(dx) <= r)  # cross


def image(rng, label, size):
    """The P6 bytes of one image of class `label`: noise in [0, 64) per channel, the shape in
    one colour."""
    shape = CLASSES[label]
    pixels = bytearray(rng.randbytes(size * size * 3).translate(DARK))
    r = rng.randint(size // 5, size // 2 - 2)
    cy, cx = rng.randint(r, size - 1 - r), rng.randint(r, size - 1 - r)
    colour = [rng.randint(64, 160) for _ in range(3)]
    colour[label % 3] = rng.randint(200, 255)  # the class's bright channel
    for y in range(cy - r, cy + r + 1):
        for x in range(cx - r, cx + r + 1):
            if inside(shape, x - cx, y - cy, r):
                pixels[3 * (y * size + x):3 * (y * size + x) + 3] = bytes(colour)
    return b"P6\n%d %d\n255\n" % (size, size) + bytes(pixels)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir")
    p.add_argument("train_per_class", type=int)
    p.add_argument("test_per_class", type=int)
    p.add_argument("--size", type=int, default=72, help="image width and height (at least 32)")
    p.add_argument("--seed", type=int, default=3)
    a = p.parse_args()
    if a.size < 32 or a.train_per_class < 1 or a.test_per_class < 1:
        p.error("--size must be at least 32 and both per-class counts at least 1")
    rng = random.Random(a.seed)
    lines = []
    for label, shape in enumerate(CLASSES):
        os.makedirs(os.path.join(a.dir, shape), exist_ok=True)
        for i in range(a.train_per_class + a.test_per_class):
            path = f"{shape}/image_{i:04d}.ppm"
            with open(os.path.join(a.dir, path), "wb") as f:
                f.write(image(rng, label, a.size))
            lines.append(f"{path} {label} {'train' if i < a.train_per_class else 'test'}")
    with open(os.path.join(a.dir, "info.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
