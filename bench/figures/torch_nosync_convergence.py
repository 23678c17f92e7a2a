"""bench/figures/torch_nosync_convergence.py — PyTorch's twin of bench_nosync_convergence:
Fashion-MNIST, the small CNN of bench/torch/models.py (lockstep's SmallCNN), DDP over Gloo with
N processes (mp.spawn), no_sync for S-1 of every S iterations (--sync-every takes a list;
each S trains a fresh model with the same seed, in the same processes), loss / S per backward, SGD
step and zero_grad after each synchronized iteration; per-iteration JSON lines of rank 0's
batch loss and a summary with test accuracy — the same fields as the C++ program.
Data: a DistributedSampler (shuffle, seed, set_epoch every epoch) over the IDX files of
Debian's dataset-fashion-mnist; the shuffles are PyTorch's, so the batches differ from
lockstep's (same distribution, different order).

  /usr/bin/python3 bench/figures/torch_nosync_convergence.py --world 2 --batch 32 --iters 400 --sync-every 1,2,4,8
"""
import argparse, json, os, sys, time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torch"))
from fashion_mnist import load  # noqa: E402  (bench/torch/fashion_mnist.py)
from models import SmallCNN  # noqa: E402  (bench/torch/models.py)




def train(rank, a, sync_every, x, y, xt, yt):
    torch.manual_seed(a.seed)
    model = SmallCNN()
    ddp = DDP(model)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    sampler = DistributedSampler(TensorDataset(x, y), num_replicas=a.world, rank=rank, shuffle=True, seed=a.seed)
    loader = DataLoader(TensorDataset(x, y), batch_size=a.batch, sampler=sampler)
    t0 = time.perf_counter()
    it = steps = epoch = 0
    while it < a.iters:
        sampler.set_epoch(epoch); epoch += 1
        for data, target in loader:
            if it == a.iters:
                break
            sync = (it + 1) % sync_every == 0
            if sync:
                loss = F.cross_entropy(ddp(data), target); (loss / sync_every).backward()
                opt.step(); opt.zero_grad(); steps += 1
            else:
                with ddp.no_sync():
                    loss = F.cross_entropy(ddp(data), target); (loss / sync_every).backward()
            if rank == 0:
                print(json.dumps(dict(bench="nosync", sync_every=sync_every, iter=it, sync=sync, loss=round(loss.item(), 5))))
            it += 1
    seconds = time.perf_counter() - t0
    if rank == 0:
        model.eval()
        with torch.no_grad():
            acc = (model(xt).argmax(1) == yt).float().mean().item()
        print(json.dumps(dict(bench="nosync", summary=True, framework="pytorch", world=a.world, batch=a.batch,
                              sync_every=sync_every, iters=a.iters, steps=steps, lr=a.lr,
                              seconds=round(seconds, 2), test_accuracy=round(acc, 4))), flush=True)


def run(rank, a):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(a.port))
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", rank=rank, world_size=a.world)
    (x, y), (xt, yt) = load(a.root, "train"), load(a.root, "t10k")
    for s in a.sync_every:
        train(rank, a, s, x, y, xt, yt)
    dist.destroy_process_group()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--world", type=int, default=2); p.add_argument("--batch", type=int, default=32)
    p.add_argument("--iters", type=int, default=400); p.add_argument("--sync-every", type=lambda v: [int(s) for s in v.split(",")], default=[1])
    p.add_argument("--lr", type=float, default=0.05); p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0); p.add_argument("--threads", type=int, default=1)
    p.add_argument("--root", default="/usr/share/datasets/fashion-mnist"); p.add_argument("--port", type=int, default=29555)
    a = p.parse_args()
    mp.spawn(run, args=(a,), nprocs=a.world)
