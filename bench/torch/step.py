"""bench/torch/step.py — PyTorch's side of bench_step: median ms of one training step.

    $TORCH_PY bench/torch/step.py resnet50 --batch 8 --threads 1 [--channels-last] [--amp bf16]

The step is bench/bench_step.cpp's: fwd = forward + loss; bwd = zero_grad + backward; opt = SGD
step (lr 0.01, momentum 0.9); step = all three. One untimed warm-up step (--warmup), then --iters
timed ones; medians printed on one line of key=value fields (compare_step.sh reads step_ms).
  --channels-last   ResNet in NHWC memory format (PyTorch's fast CPU convolution layout).
  --amp bf16        forward and loss under torch.autocast("cpu", dtype=torch.bfloat16);
                    parameters, gradients and optimizer state stay float32. Implies
                    --channels-last for ResNets (lockstep's --amp bf16 is compared with that).
  --clock cpu       process CPU time instead of wall time (see bench/compare_step.sh).
  --compile         the model under torch.compile (inductor); the warm-up steps compile it,
                    and the compile time is printed (compile_s), not counted in the step.

Read before: bench/torch/models.py, bench/bench_step.cpp. Read next: bench/compare_step.sh.
"""
import argparse
import contextlib
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import MODELS, workload  # noqa: E402

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("model", choices=MODELS)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--image", "--size", dest="image", type=int, default=224)
p.add_argument("--seq", type=int, default=None)
p.add_argument("--layers", type=int, default=None)
p.add_argument("--iters", type=int, default=3)
p.add_argument("--warmup", type=int, default=1)
p.add_argument("--threads", type=int, default=1)
p.add_argument("--channels-last", action="store_true")
p.add_argument("--amp", choices=["none", "bf16"], default="none")
p.add_argument("--clock", choices=["wall", "cpu"], default="wall")
p.add_argument("--compile", action="store_true")
a = p.parse_args()

torch.set_num_threads(a.threads)
now = time.perf_counter if a.clock == "wall" else time.process_time
model, x, loss_fn = workload(a.model, a.batch, a.image, a.seq, a.layers)
is_resnet = a.model.startswith("resnet")
channels_last = is_resnet and (a.channels_last or a.amp == "bf16")
if channels_last:
    model = model.to(memory_format=torch.channels_last)
    x = x.contiguous(memory_format=torch.channels_last)
model.train()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
net = torch.compile(model) if a.compile else model
autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if a.amp == "bf16" else contextlib.nullcontext

times = {"step": [], "fwd": [], "bwd": [], "opt": []}
start = time.perf_counter()
for i in range(a.warmup + a.iters):
    if i == a.warmup:
        compile_s = time.perf_counter() - start  # the warm-up steps: compiling, with --compile
    t0 = now()
    with autocast():
        loss = loss_fn(net(x))
    t1 = now()
    opt.zero_grad()
    loss.backward()
    t2 = now()
    opt.step()
    t3 = now()
    if i >= a.warmup:
        for key, dt in (("step", t3 - t0), ("fwd", t1 - t0), ("bwd", t2 - t1), ("opt", t3 - t2)):
            times[key].append(1e3 * dt)

params = sum(t.numel() for t in model.parameters())
fields = [f"{a.model}", f"torch={torch.__version__}", f"batch={a.batch}", f"params={params}",
          f"threads={a.threads}", f"channels_last={int(channels_last)}", f"amp={a.amp}", f"clock={a.clock}",
          f"compiled={int(a.compile)}", f"compile_s={compile_s:.1f}",
          f"loss={loss.item():.4f}"]
fields += [f"{key}_ms={statistics.median(v):.1f}" for key, v in times.items()]
print(" ".join(fields), flush=True)
