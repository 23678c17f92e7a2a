"""bench/torch/ddp.py — PyTorch DistributedDataParallel over Gloo: ms per training iteration.

    $TORCH_PY bench/torch/ddp.py resnet50 --mode ddp --world 2 --batch 4      # local processes
    RANK=.. WORLD_SIZE=.. MASTER_ADDR=.. MASTER_PORT=.. $TORCH_PY bench/torch/ddp.py resnet50 --env

Without --env it spawns --world processes on this machine (rendezvous 127.0.0.1:--port); with
--env it is one rank whose place comes from RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
(torchrun's variables), which is how bench/hosts.sh runs it in each simulated host.
Every rank trains the workload of bench/torch/models.py (the same input on every rank), SGD lr
0.01 momentum 0.9, a barrier before each iteration; one warm-up iteration, then --iters timed.
Modes:
  local  no communication at all (the compute-only baseline)
  ddp    DDP(bucket_cap_mb=--bucket-mb, find_unused_parameters=--unused): AllReduce overlapped
         with backward
  flat   after backward, one AllReduce of all gradients concatenated (no overlap; the averaged
         result is not copied back, as in the paper's baseline)
  after  after backward, one AllReduce per gradient, then divided by the world size
--channels-last runs a ResNet in NHWC memory format (PyTorch's faster CPU layout for one
step; see bench/compare_step.sh). --amp bf16 runs forward and loss under
torch.autocast("cpu", dtype=torch.bfloat16) (a ResNet then in channels_last, PyTorch's
recommended pairing), as bench_ddp --amp bf16 does under ls::AutocastGuard.
Rank 0 prints "<model> mode=.. world=.. batch/rank=.. bucket_mb=.. iter_ms=<median> min=<min>".
Read before: bench/torch/models.py, bench/bench_ddp.cpp. Read next: bench/hosts.sh,
bench/figures/torch_ddp_bench.py (the figures' variant with more knobs).
"""
import argparse
import contextlib
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import MODELS, workload  # noqa: E402


def train(rank, world, a):
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model, x, loss_fn = workload(a.model, a.batch, a.image, a.seq, a.layers)
    if (a.channels_last or a.amp == "bf16") and a.model.startswith("resnet"):
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    net = model
    if a.mode == "ddp":
        net = DistributedDataParallel(model, bucket_cap_mb=a.bucket_mb, find_unused_parameters=a.unused)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    grads = lambda: [q.grad for q in model.parameters() if q.grad is not None]  # noqa: E731
    times = []
    for i in range(1 + a.iters):
        dist.barrier()
        start = time.perf_counter()
        opt.zero_grad()
        amp = torch.autocast("cpu", dtype=torch.bfloat16) if a.amp == "bf16" else contextlib.nullcontext()
        with amp:
            loss = loss_fn(net(x))
        loss.backward()
        if a.mode == "flat":
            dist.all_reduce(torch.cat([g.reshape(-1) for g in grads()]))
        elif a.mode == "after":
            for g in grads():
                dist.all_reduce(g)
                g.div_(world)
        opt.step()
        if i > 0:
            times.append(1e3 * (time.perf_counter() - start))
    if rank == 0:
        print(f"{a.model} mode={a.mode} world={world} batch/rank={a.batch} bucket_mb={a.bucket_mb} "
              f"amp={a.amp} iter_ms={statistics.median(times):.1f} min={min(times):.1f}", flush=True)
    dist.destroy_process_group()


def spawned(rank, train_fn, a):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(a.port)
    train_fn(rank, a.world, a)


def add_common_args(p):
    """The options bench/torch/ddp_overlap.py shares: the workload, world, threads, buckets, amp, port."""
    p.add_argument("model", choices=MODELS)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--image", "--size", dest="image", type=int, default=224)
    p.add_argument("--seq", type=int, default=None)
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--bucket-mb", type=float, default=25)
    p.add_argument("--amp", default="off", choices=["off", "bf16"])
    p.add_argument("--port", type=int, default=29533)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(p)
    p.add_argument("--mode", default="ddp", choices=["local", "ddp", "flat", "after"])
    p.add_argument("--env", action="store_true", help="one rank, placed by RANK/WORLD_SIZE/MASTER_*")
    p.add_argument("--iters", type=int, default=4)
    p.add_argument("--unused", action="store_true")
    p.add_argument("--channels-last", action="store_true")
    args = p.parse_args()
    if args.env:
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
    else:
        mp.spawn(spawned, args=(train, args), nprocs=args.world)
