"""bench/torch_fashion_mnist_replay.py SEED OUT_DIR [--epochs 4] — trains the CNN of
../shared/ref/torch_fashion_mnist.py exactly as that script does (same calls, same order of
random draws, with torch.manual_seed(SEED)) and records what lockstep needs to replay the same
run: the initial weights (OUT_DIR/init.safetensors, PyTorch's parameter names, which are
lockstep's SmallCNN names) and each epoch's shuffle (OUT_DIR/order.bin: EPOCHS x 60000 int64,
little-endian). It prints the training loss at a few steps and each epoch's line in the
reference's format, so that bench/bench_fashion_mnist_replay's output lines up with it.

Why: the two frameworks draw their initial weights and shuffles from different generators, so
comparing them seed by seed compares random draws as much as implementations. Started from the
same weights and fed the same batches, the two runs differ only by floating-point rounding.
Read next: bench/bench_fashion_mnist_replay.cpp, bench/compare_fashion_mnist_replay.sh."""
import argparse, json, os, struct, sys, time
import numpy as np, torch, torch.nn.functional as F

ref_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "ref")
sys.path.insert(0, ref_dir)

p = argparse.ArgumentParser()
p.add_argument("seed", type=int); p.add_argument("out")
p.add_argument("--epochs", type=int, default=4); p.add_argument("--batch", type=int, default=64)
p.add_argument("--lr", type=float, default=0.05)
p.add_argument("--root", default="/usr/share/datasets/fashion-mnist")
a = p.parse_args()

# The reference script trains at import; take its pieces without running it.
src = open(os.path.join(ref_dir, "torch_fashion_mnist.py")).read()
pieces = {}
exec(compile(src.split("p = argparse.ArgumentParser()")[0], "torch_fashion_mnist.py", "exec"), pieces)
CNN, idx = pieces["CNN"], pieces["idx"]


def save_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        b = t.detach().contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b); offset += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h))); f.write(h); f.write(b"".join(blobs))


os.makedirs(a.out, exist_ok=True)
torch.set_num_threads(1); torch.manual_seed(a.seed)
X = torch.tensor(idx(f"{a.root}/train-images-idx3-ubyte.gz"), dtype=torch.float32).unsqueeze(1) / 255
Y = torch.tensor(idx(f"{a.root}/train-labels-idx1-ubyte.gz").astype(np.int64))
Xt = torch.tensor(idx(f"{a.root}/t10k-images-idx3-ubyte.gz"), dtype=torch.float32).unsqueeze(1) / 255
Yt = torch.tensor(idx(f"{a.root}/t10k-labels-idx1-ubyte.gz").astype(np.int64))
m = CNN(); opt = torch.optim.SGD(m.parameters(), lr=a.lr, momentum=0.9)
save_safetensors(os.path.join(a.out, "init.safetensors"), dict(m.state_dict()))
log_steps = {1, 2, 5, 10, 20, 50, 100, 200, 500, 937}
with open(os.path.join(a.out, "order.bin"), "wb") as order:
    for ep in range(a.epochs):
        t0 = time.perf_counter(); perm = torch.randperm(len(X)); m.train(); tot = 0
        order.write(perm.numpy().astype("<i8").tobytes())
        for step, i in enumerate(range(0, len(X), a.batch), start=1):
            idxs = perm[i:i + a.batch]; opt.zero_grad()
            loss = F.cross_entropy(m(X[idxs]), Y[idxs]); loss.backward(); opt.step()
            tot += loss.item() * len(idxs)
            if ep == 0 and step in log_steps:
                print(f"step {step} loss {loss.item():.6f}", flush=True)
        m.eval()
        with torch.no_grad():
            acc = (m(Xt).argmax(1) == Yt).float().mean().item()
        print(f"epoch {ep + 1} train_loss {tot / len(X):.4f} test_accuracy {acc:.4f} "
              f"seconds {time.perf_counter() - t0:.1f}", flush=True)
