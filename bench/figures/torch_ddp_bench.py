"""bench/figures/torch_ddp_bench.py — PyTorch's side of bench_ddp: the same flags, timings and
JSON lines, so the figure scripts read both the same way.

It extends bench/torch/ddp.py (same workloads from bench/torch/models.py, same
Gloo group, same SGD lr 0.01 momentum 0.9, same barrier before each iteration, same
local / ddp / flat modes) with the knobs the figures need and PyTorch has:
  --bucket-mb (DDP bucket_cap_mb), --sync-every S (DDP.no_sync for S-1 of every S
  iterations, optimizer step on the S-th), --rr K (torch.distributed's
  _round_robin_process_groups over K Gloo groups), --world N (mp.spawn N processes).
Models: models.workload's resnet50, resnet18 (torchvision), bert (models.Bert with --layers)
and bert-tiny (models.Bert.tiny(): lockstep's BertConfig::tiny() shapes).
PyTorch has no "launch every AllReduce at the end of backward" switch, so there is no
no-overlap mode; flat (one AllReduce after backward) is its no-overlap baseline.
Differences from ddp.py's flat: the averaged gradient is copied back into .grad
(as lockstep's flat mode does), so the step trains on averaged gradients.

Timing (as bench/bench_ddp.cpp, Note [Backward clock] there): fwd_ms = forward +
loss, bwd_ms = backward compute, comm_wait_ms = end of the last autograd node until
backward() returns (DDP's finalize waits for its buckets there) or the flat AllReduce,
opt_ms = step + zero_grad. The end of backward compute is read by a callback that a hook
on the first gradient accumulator to fire queues on the autograd engine; the hooks are
registered before DDP registers its own, so the callback runs before DDP's finalize.

  /usr/bin/python3 bench/figures/torch_ddp_bench.py --model resnet18 --image 64 --batch 4 \
      --iters 5 --mode ddp --world 2
"""
import argparse, datetime, json, os, statistics, sys, time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torch"))
import models  # noqa: E402  (bench/torch/models.py)


def make(a):
    """Model, input, loss closure and the shape fields of the JSON lines (models.workload)."""
    m, x, loss = models.workload(a.model, a.batch, a.image, a.seq, a.layers)
    if a.model.startswith("resnet"):
        return m, x, loss, {"image": a.image}
    return m, x, loss, {"seq": x.shape[1], "layers": len(m.enc.layers)}


class BackwardClock:
    """Reads the clock when the last autograd node of a backward has run (see the docstring)."""

    def __init__(self, params):
        self.queued, self.end = False, None
        self.accs = [p.expand_as(p).grad_fn.next_functions[0][0] for p in params]  # keep them alive
        for acc in self.accs:
            acc.register_hook(self._hook)

    def _hook(self, grad_inputs, grad_outputs):
        if not self.queued:
            self.queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._mark)

    def _mark(self):
        self.end = time.perf_counter()


def run(rank, a):
    if "RANK" not in os.environ:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(a.port))
    torch.set_num_threads(a.threads)
    # A bounded collective timeout: a rank that dies or stalls fails the run in --timeout-s
    # (Gloo's default is 30 min) and common.sh retries it on a fresh port.
    timeout = datetime.timedelta(seconds=a.timeout_s)
    dist.init_process_group("gloo", rank=rank, world_size=a.world, timeout=timeout)
    pg = None
    if a.rr > 1:
        pg = dist._round_robin_process_groups(
            [dist.new_group(backend="gloo", timeout=timeout) for _ in range(a.rr)])
    m, x, loss_of, shape = make(a)
    m.train()
    params = list(m.parameters())
    clock = BackwardClock(params)  # before DDP's hooks
    net = m
    if a.mode == "ddp":
        net = DDP(m, bucket_cap_mb=a.bucket_mb, process_group=pg)
    opt = torch.optim.SGD(params, lr=0.01, momentum=0.9)
    flat = torch.zeros(sum(p.numel() for p in params)) if a.mode == "flat" else None
    rows = []
    for i in range(a.warmup + a.iters):
        sync = i < a.warmup or (i - a.warmup + 1) % a.sync_every == 0
        dist.barrier()
        t0 = time.perf_counter()

        def fwd_bwd():
            loss = loss_of(net(x))
            t1 = time.perf_counter()
            clock.queued = False
            loss.backward()
            return loss, t1, time.perf_counter()

        if a.mode == "ddp" and not sync:
            with net.no_sync():
                loss, t1, t2 = fwd_bwd()
        else:
            loss, t1, t2 = fwd_bwd()
        compute_end = clock.end if clock.queued else t2
        if flat is not None and sync:
            with torch.no_grad():
                torch.cat([p.grad.reshape(-1) for p in params], out=flat)
                dist.all_reduce(flat, group=pg)  # group None: the world
                flat /= a.world
                off = 0
                for p in params:
                    p.grad.copy_(flat[off:off + p.numel()].view_as(p)); off += p.numel()
            t2 = time.perf_counter()
        if sync:
            opt.step(); opt.zero_grad()
        t3 = time.perf_counter()
        row = dict(iter_ms=1e3 * (t3 - t0), fwd_ms=1e3 * (t1 - t0), bwd_ms=1e3 * (compute_end - t1),
                   comm_wait_ms=1e3 * (t2 - compute_end), opt_ms=1e3 * (t3 - t2))
        if rank == 0:
            print(json.dumps(dict(bench="ddp", framework="pytorch", iter=i, warmup=i < a.warmup, sync=sync,
                                  **{k: round(v, 2) for k, v in row.items()}, loss=round(loss.item(), 5))), flush=True)
        if i >= a.warmup:
            rows.append(row)
    total = torch.tensor([sum(r["iter_ms"] for r in rows) / 1e3], dtype=torch.float64)
    dist.all_reduce(total, op=dist.ReduceOp.MAX)
    if rank == 0:
        med = lambda k: round(statistics.median(r[k] for r in rows), 2)
        print(json.dumps(dict(bench="ddp", summary=True, framework="pytorch", model=a.model, batch=a.batch, **shape,
                              mode=a.mode, backend="gloo", world=a.world, rr=a.rr, bucket_mb=a.bucket_mb,
                              sync_every=a.sync_every, threads=a.threads, iters=a.iters,
                              params=sum(p.numel() for p in params), iter_ms=med("iter_ms"),
                              mean_iter_ms=round(statistics.mean(r["iter_ms"] for r in rows), 2),
                              fwd_ms=med("fwd_ms"), bwd_ms=med("bwd_ms"), comm_wait_ms=med("comm_wait_ms"),
                              opt_ms=med("opt_ms"),
                              examples_per_s=round(a.world * a.batch * a.iters / total.item(), 2))), flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="resnet50", choices=["resnet50", "resnet18", "bert", "bert-tiny"])
    p.add_argument("--batch", type=int, default=4); p.add_argument("--image", type=int, default=224)
    p.add_argument("--seq", type=int, default=0); p.add_argument("--layers", type=int, default=0)
    p.add_argument("--iters", type=int, default=5); p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--mode", default="ddp", choices=["local", "ddp", "flat"])
    p.add_argument("--bucket-mb", type=float, default=25); p.add_argument("--rr", type=int, default=1)
    p.add_argument("--sync-every", type=int, default=1); p.add_argument("--threads", type=int, default=1)
    p.add_argument("--world", type=int, default=2); p.add_argument("--port", type=int, default=29533)
    p.add_argument("--timeout-s", type=float, default=300, help="collective timeout (s)")
    a = p.parse_args()
    if "RANK" in os.environ:  # one rank of a launcher (simulated hosts): MASTER_* from the environment
        a.world = int(os.environ["WORLD_SIZE"])
        run(int(os.environ["RANK"]), a)
    else:
        mp.spawn(run, args=(a,), nprocs=a.world)


if __name__ == "__main__":
    main()
