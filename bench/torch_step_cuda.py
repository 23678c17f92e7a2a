#!/usr/bin/env python3
"""bench/torch_step_cuda.py — PyTorch's training step on the GPU, beside bench_step --device cuda.

    python3 bench/torch_step_cuda.py --model resnet50 --batch 64 --image 224 --iters 10 [--dtype fp32|tf32|bf16]
    python3 bench/torch_step_cuda.py --model bert --batch 32 --seq 128 --iters 10

The same models, inputs and step as bench_step (bench/bench_models.h, and the CPU reference
bench/torch/models.py): ResNet50 (torchvision's if installed, else the identical
definition below) on randn (B, 3, S, S) with labels in [0, 1000); BERT-base encoder + MLM head
(vocab 30522, hidden 768, 12 layers, 12 heads, FFN 3072, GELU, dropout 0.1, post-norm
TransformerEncoderLayer) on random ids (B, T) with cross-entropy over every position. Seed 0.
SGD lr 0.01 momentum 0.9. Eager mode (no torch.compile). --dtype fp32 turns TF32 off for
matmuls and cuDNN both (PyTorch's default leaves it on for cuDNN: that would compare TF32
convolutions with lockstep's float32 ones); --dtype tf32 turns it on for both, the setting
to compare with lockstep under LOCKSTEP_CUDA_TF32=1; --dtype bf16 runs forward + loss under
torch.autocast("cuda", dtype=torch.bfloat16) (TF32 off). The settings are reported as
allow_tf32_matmul / allow_tf32_cudnn.

Timing as bench_step: the device is synchronised before t0 and after forward + loss (fwd_ms),
zero_grad + backward (bwd_ms) and the optimizer step (opt_ms); warm-up steps are printed
(warmup: true) and left out of the medians. Output: one JSON line per step, then a summary
line with bench_step's fields (step_ms, fwd_ms, bwd_ms, opt_ms, cpu_ms, params, train_gflop,
gflops, peak_rss_mb, alloc_peak_mb, device, cuda_peak_mb = torch.cuda.max_memory_allocated
over the timed steps, cuda_reserved_mb) plus framework, dtype and torch. train_gflop counts
3 x the forward FLOPs of convolutions, linear layers and attention matmuls (2 per
multiply-add), as bench/bench_models.h does.
Read before: bench/bench_step.cpp. Read next: scripts/gpu_check.sh.
"""
import argparse
import json
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn


# ---- ResNet50 (torchvision.models.resnet50 when available; this is the same network) ----
class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, width, stride, downsample):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, width * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(width * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet50(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        cin, stages = 64, []
        for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            layers = []
            for i in range(blocks):
                s = stride if i == 0 else 1
                down = None
                if s != 1 or cin != width * 4:
                    down = nn.Sequential(nn.Conv2d(cin, width * 4, 1, stride=s, bias=False), nn.BatchNorm2d(width * 4))
                layers.append(Bottleneck(cin, width, s, down))
                cin = width * 4
            stages.append(nn.Sequential(*layers))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(2048, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet50():
    try:
        import torchvision
        return torchvision.models.resnet50(weights=None), "torchvision"
    except Exception:  # not installed, or an incompatible build: the same network, defined above
        return ResNet50(), "builtin"


# ---- BERT (as bench/torch/models.py's Bert) ----
class Bert(nn.Module):
    def __init__(self, vocab=30522, hidden=768, layers=12, heads=12, ffn=3072, max_len=512, type_vocab=2):
        super().__init__()
        self.tok = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(max_len, hidden)
        self.typ = nn.Embedding(type_vocab, hidden)
        self.ln = nn.LayerNorm(hidden, eps=1e-12)
        self.drop = nn.Dropout(0.1)
        layer = nn.TransformerEncoderLayer(hidden, heads, ffn, dropout=0.1, activation="gelu", batch_first=True,
                                           layer_norm_eps=1e-12)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.GELU(), nn.LayerNorm(hidden, eps=1e-12))
        self.dec = nn.Linear(hidden, vocab)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        x = self.tok(ids) + self.pos(pos) + self.typ(torch.zeros_like(ids))
        x = self.drop(self.ln(x))
        return self.dec(self.head(self.enc(x)))


def conv_linear_flops(model, x):
    """Forward FLOPs of every Conv2d and Linear, measured with hooks on one no-grad forward."""
    total = [0.0]

    def conv_hook(m, inp, out):
        kh, kw = m.kernel_size
        total[0] += 2.0 * out.numel() * (m.in_channels // m.groups) * kh * kw

    def linear_hook(m, inp, out):
        total[0] += 2.0 * out.numel() * m.in_features

    hooks = [m.register_forward_hook(conv_hook) for m in model.modules() if isinstance(m, nn.Conv2d)]
    hooks += [m.register_forward_hook(linear_hook) for m in model.modules() if isinstance(m, nn.Linear)]
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    return total[0]


def bert_forward_flops(batch, seq, hidden=768, ffn=3072, layers=12, vocab=30522):
    tokens = batch * seq
    per_layer = 2.0 * tokens * hidden * 4 * hidden + 2.0 * tokens * hidden * 2 * ffn + 2.0 * 2.0 * tokens * seq * hidden
    return per_layer * layers + 2.0 * tokens * hidden * hidden + 2.0 * tokens * hidden * vocab


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet50", choices=["resnet50", "bert"])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--image", type=int, default=224)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--dtype", default="fp32", choices=["fp32", "tf32", "bf16"])
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = a.dtype == "tf32"
    torch.backends.cudnn.allow_tf32 = a.dtype == "tf32"
    if not torch.cuda.is_available():
        sys.exit("torch_step_cuda.py: torch.cuda.is_available() is False (no GPU, or a CPU-only PyTorch)")
    dev = torch.device("cuda", 0)
    torch.manual_seed(0)
    source = "torch_models"
    if a.model == "resnet50":
        model, source = resnet50()
        x = torch.randn(a.batch, 3, a.image, a.image)
        y = torch.randint(0, 1000, (a.batch,))
        shape = {"image": a.image}
    else:
        model = Bert(layers=a.layers)
        x = torch.randint(0, 30522, (a.batch, a.seq))
        y = torch.randint(0, 30522, (a.batch, a.seq))
        shape = {"seq": a.seq, "layers": a.layers}
    model, x, y = model.to(dev), x.to(dev), y.to(dev)
    model.train()
    flops = conv_linear_flops(model, x) if a.model == "resnet50" else bert_forward_flops(a.batch, a.seq, layers=a.layers)

    def loss_of(out):
        return nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]).float(), y.reshape(-1))

    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    params = sum(t.numel() for t in model.parameters())
    steps = {"step": [], "fwd": [], "bwd": [], "opt": [], "cpu": []}
    for i in range(a.warmup + a.iters):
        if i == a.warmup:
            torch.cuda.reset_peak_memory_stats(dev)
        torch.cuda.synchronize(dev)
        c0 = time.process_time()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = loss_of(model(x))
        torch.cuda.synchronize(dev)
        t1 = time.perf_counter()
        opt.zero_grad()
        loss.backward()
        torch.cuda.synchronize(dev)
        t2 = time.perf_counter()
        opt.step()
        torch.cuda.synchronize(dev)
        t3 = time.perf_counter()
        c = (time.process_time() - c0) * 1e3
        warm = i < a.warmup
        s, f, b, u = (t3 - t0) * 1e3, (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3
        print(json.dumps({"bench": "step", "framework": "pytorch", "model": a.model, "iter": i, "warmup": warm,
                          "step_ms": round(s, 2), "fwd_ms": round(f, 2), "bwd_ms": round(b, 2), "opt_ms": round(u, 2),
                          "cpu_ms": round(c, 2), "loss": round(loss.item(), 5)}), flush=True)
        if warm:
            continue
        for k, v in (("step", s), ("fwd", f), ("bwd", b), ("opt", u), ("cpu", c)):
            steps[k].append(v)
    med = {k: statistics.median(v) for k, v in steps.items()}
    train_gflop = 3.0 * flops * 1e-9
    summary = {"bench": "step", "summary": True, "framework": "pytorch", "model": a.model, "batch": a.batch, **shape,
               "threads": torch.get_num_threads(), "iters": a.iters, "params": params,
               "step_ms": round(med["step"], 2), "fwd_ms": round(med["fwd"], 2), "bwd_ms": round(med["bwd"], 2),
               "opt_ms": round(med["opt"], 2), "cpu_ms": round(med["cpu"], 2), "train_gflop": round(train_gflop, 3),
               "gflops": round(train_gflop / (med["step"] * 1e-3), 2),
               "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
               "alloc_peak_mb": 0.0, "device": "cuda",
               "cuda_peak_mb": round(torch.cuda.max_memory_allocated(dev) / 2**20, 1),
               "cuda_reserved_mb": round(torch.cuda.memory_reserved(dev) / 2**20, 1),
               "dtype": a.dtype, "torch": torch.__version__, "resnet_source": source if a.model == "resnet50" else "",
               "allow_tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
               "allow_tf32_cudnn": torch.backends.cudnn.allow_tf32, "gpu": torch.cuda.get_device_name(dev)}
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
