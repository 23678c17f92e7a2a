"""bench/torch/fashion_mnist_replay.py SEED OUT_DIR [--epochs E] — runs the reference training of
bench/torch/fashion_mnist.py with --seed SEED, unchanged, and records what lockstep needs to
replay the very same run:
  OUT_DIR/init.safetensors  the initial weights (PyTorch's names, which are SmallCNN's names)
  OUT_DIR/order.bin         each epoch's shuffle: EPOCHS x 60000 int64, little-endian
It prints the training loss at a few steps of epoch 1 ("step S loss L") and the reference's
epoch lines, which bench/bench_fashion_mnist_replay prints in the same format.

Why: the two frameworks draw initial weights and shuffles from different generators, so seed
for seed they differ by the draws as much as by the implementations. Started from the same
weights and fed the same batches, they differ only by floating-point rounding.
Read before: bench/torch/fashion_mnist.py. Read next: bench/bench_fashion_mnist_replay.cpp,
bench/compare_fashion_mnist_replay.sh.
"""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fashion_mnist  # noqa: E402

LOGGED_STEPS = {1, 2, 5, 10, 20, 50, 100, 200, 500, 937}


def write_f32_safetensors(path, tensors):
    """safetensors by hand: u64 header length, JSON header, raw little-endian float32 data."""
    header, chunks, offset = {}, [], 0
    for name, t in tensors.items():
        data = t.detach().contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        f.write(b"".join(chunks))


def main():
    def positional(p):
        p.add_argument("seed_arg", metavar="SEED", type=int)
        p.add_argument("out", metavar="OUT_DIR")
    a = fashion_mnist.arguments(extra=positional)
    a.seed = a.seed_arg
    a.threads = 1
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "order.bin"), "wb") as order:
        fashion_mnist.train(
            a,
            on_start=lambda model: write_f32_safetensors(os.path.join(a.out, "init.safetensors"),
                                                         dict(model.state_dict())),
            on_shuffle=lambda epoch, perm: order.write(perm.numpy().astype("<i8").tobytes()),
            on_step=lambda epoch, step, loss: (epoch == 0 and step in LOGGED_STEPS
                                               and print(f"step {step} loss {loss:.6f}", flush=True)))


if __name__ == "__main__":
    main()
