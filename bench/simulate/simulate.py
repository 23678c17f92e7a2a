#!/usr/bin/env python3
# bench/simulate/simulate.py — predicts DDP iteration time past this machine (1-256 workers,
# bucket sizes, sync frequencies) from measured inputs; the model is bench/simulate/ddp_model.py.
#
#   # one configuration (JSON line out)
#   python3 bench/simulate/simulate.py predict --profile grad_ready.jsonl --comm comm.json
#       [--comm-world 2|pooled] --world 4 --bucket-mb 25 [--first-bucket-mb 1]
#       [--sync-every 1] [--share 1] [--compute-scale 1]
#   # the sweep: workers 1..256 x bucket MB 0..200 x sync every 1,2,4,8, per profile
#   python3 bench/simulate/simulate.py sweep --profile resnet.jsonl --profile bert.jsonl
#       --comm comm.json [--comm-world 2] [--share 1] [--compute-scale 1] [--out DIR]
#
# --profile: bench_grad_ready output (its last summary line is used). --comm: comm_fit.py's
# JSON; --comm-world picks the fit of one measured world size (default: 2, one rank per
# core, the closest this machine gets to one worker per host) or "pooled".
# --share: Note [Simulated core sharing] in ddp_model.py (1: communication does not slow
# compute, the GPU-cluster assumption, used for the sweep). --compute-scale k multiplies
# every measured compute time (forward, ready times, backward, optimizer, and the bucket
# copies) by k: k < 1 asks "what if compute were 1/k times faster" at the same network.
# Sweep output in --out (default docs/results/figures): simulate_sweep.csv and
# simulate_fig7_8.png (latency vs bucket size), simulate_fig9.png (latency vs workers),
# simulate_fig10.png (mean latency vs workers, sync every 1/2/4/8).
#
# Read before: bench/simulate/ddp_model.py, bench/simulate/comm_fit.py.
# Read next: bench/simulate/validate.sh, docs/results/simulate.md.
import argparse
import csv
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ddp_model  # noqa: E402

WORLDS = [1, 2, 4, 8, 16, 32, 64, 128, 256]
BUCKETS = [0, 1, 5, 10, 25, 50, 100, 200]
SYNCS = [1, 2, 4, 8]
REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def load_profile(path, compute_scale=1.0):
    summary = None
    if not os.path.isfile(path):
        raise SystemExit(f"simulate: no profile {path}; write one with "
                         "build/bin/bench_grad_ready --model ... > FILE")
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{") and '"summary":true' in line.replace(" ", ""):
                summary = json.loads(line)
    if summary is None or summary.get("bench") != "grad_ready":
        raise SystemExit(f"simulate: {path} holds no bench_grad_ready summary line; run "
                         "build/bin/bench_grad_ready --model ... > FILE")
    if compute_scale <= 0:
        raise SystemExit(f"simulate: --compute-scale must be > 0, got {compute_scale}")
    k = compute_scale
    for key in ("fwd_ms", "bwd_ms", "opt_ms"):
        summary[key] *= k
    summary["copy_gbps"] /= k
    for p in summary["params"]:
        if p["ready_ms"] >= 0:
            p["ready_ms"] *= k
    return summary


def load_comm(path, world_key):
    if not os.path.isfile(path):
        raise SystemExit(f"simulate: no AllReduce fit {path}; write one with "
                         "bench/simulate/comm_fit.py bench_allreduce.jsonl... > FILE")
    with open(path) as f:
        fits = json.load(f)
    if world_key == "pooled":
        return fits["pooled"]
    if world_key not in fits["by_world"]:
        raise SystemExit(f"simulate: {path} has fits for worlds {sorted(fits['by_world'])} "
                         f"and pooled, not {world_key}; pass --comm-world")
    return fits["by_world"][world_key]


def label(profile):
    shape = ", ".join(f"{k} {profile[k]}" for k in ("image", "seq", "layers") if k in profile)
    return f"{profile['model']} ({shape}, batch {profile['batch']})"


def cmd_predict(a):
    prof = load_profile(a.profile[0], a.compute_scale)
    comm = load_comm(a.comm, a.comm_world)
    r = ddp_model.simulate_mean(prof, comm, a.world, a.bucket_mb, a.first_bucket_mb, a.share,
                                a.sync_every)
    r.update(model=prof["model"], world=a.world, bucket_mb=a.bucket_mb,
             first_bucket_mb=a.first_bucket_mb, sync_every=a.sync_every, share=a.share)
    print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()}))


def sweep_rows(prof, comm, share, first_bucket_mb):
    rows = []
    local = ddp_model.simulate_iteration(prof, comm, 1, sync=False)["iter_ms"] + prof["opt_ms"]
    for world in WORLDS:
        for mb in BUCKETS:
            for s in SYNCS:
                r = ddp_model.simulate_mean(prof, comm, world, mb, first_bucket_mb, share, s)
                rows.append({"model": prof["model"], "world": world, "bucket_mb": mb,
                             "sync_every": s, "mean_iter_ms": r["mean_iter_ms"],
                             "synced_iter_ms": r["iter_ms"], "fwd_ms": r["fwd_ms"],
                             "bwd_compute_ms": r["bwd_ms"], "comm_end_ms": r["comm_end_ms"],
                             "comm_wait_ms": r["comm_wait_ms"], "opt_ms": r["opt_ms"],
                             "buckets": r["buckets"], "local_iter_ms": local})
    return rows


def plot(rows_by_model, labels, out, note):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(rows_by_model)

    def pick(rows, **kw):
        return [r for r in rows if all(r[k] == v for k, v in kw.items())]

    fig, axes = plt.subplots(1, len(models), figsize=(5.5 * len(models), 4), squeeze=False)
    for ax, m in zip(axes[0], models):
        for world in (8, 32, 128, 256):
            rs = pick(rows_by_model[m], world=world, sync_every=1)
            ax.plot(range(len(BUCKETS)), [r["mean_iter_ms"] for r in rs], "o-", label=f"{world} workers")
        ax.set_xticks(range(len(BUCKETS)), [str(b) for b in BUCKETS])
        ax.set_yscale("log")
        ax.set_xlabel("bucket_cap_mb")
        ax.set_ylabel("predicted iteration (ms)")
        ax.set_title(labels[m], fontsize=9)
        ax.legend(fontsize=8)
    fig.suptitle("Simulated Figs. 7-8: latency vs bucket size\n" + note, fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "simulate_fig7_8.png"), dpi=80)
    plt.close(fig)

    fig, axes = plt.subplots(1, len(models), figsize=(5.5 * len(models), 4), squeeze=False)
    for ax, m in zip(axes[0], models):
        for mb in (0, 1, 25, 200):
            rs = pick(rows_by_model[m], bucket_mb=mb, sync_every=1)
            ax.plot([r["world"] for r in rs], [r["mean_iter_ms"] for r in rs], "o-", label=f"{mb} MB")
        rs = pick(rows_by_model[m], bucket_mb=25, sync_every=1)
        ax.plot([r["world"] for r in rs], [r["local_iter_ms"] for r in rs], "k--", label="local")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("workers")
        ax.set_ylabel("predicted iteration (ms)")
        ax.set_title(labels[m], fontsize=9)
        ax.legend(fontsize=8)
    fig.suptitle("Simulated Fig. 9: latency vs workers\n" + note, fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "simulate_fig9.png"), dpi=80)
    plt.close(fig)

    fig, axes = plt.subplots(1, len(models), figsize=(5.5 * len(models), 4), squeeze=False)
    for ax, m in zip(axes[0], models):
        for s in SYNCS:
            rs = pick(rows_by_model[m], bucket_mb=25, sync_every=s)
            ax.plot([r["world"] for r in rs], [r["mean_iter_ms"] for r in rs], "o-",
                    label=f"sync every {s}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("workers")
        ax.set_ylabel("predicted mean iteration (ms)")
        ax.set_title(labels[m] + ", 25 MB buckets", fontsize=9)
        ax.legend(fontsize=8)
    fig.suptitle("Simulated Fig. 10: skipping synchronization\n" + note, fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "simulate_fig10.png"), dpi=80)
    plt.close(fig)


def cmd_sweep(a):
    comm = load_comm(a.comm, a.comm_world)
    os.makedirs(a.out, exist_ok=True)
    rows_by_model, labels, all_rows = {}, {}, []
    for path in a.profile:
        prof = load_profile(path, a.compute_scale)
        key = f"{prof['model']}#{len(rows_by_model)}"
        rows_by_model[key] = sweep_rows(prof, comm, a.share, a.first_bucket_mb)
        labels[key] = label(prof)
        all_rows += rows_by_model[key]
    csv_path = os.path.join(a.out, "simulate_sweep.csv")
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(all_rows[0]))
        w.writeheader()
        for r in all_rows:
            w.writerow({k: (f"{v:.3f}" if isinstance(v, float) else v) for k, v in r.items()})
    note = (f"(alpha {comm['alpha_ms'] * 1e3:.0f} us, {comm['gbps']:.2f} GB/s per link, "
            f"compute x{a.compute_scale:g}, share {a.share:g})")
    if not a.no_plot:
        plot(rows_by_model, labels, a.out, note)
    print(f"simulate: wrote {csv_path} ({len(all_rows)} rows)"
          + ("" if a.no_plot else " and simulate_fig7_8/9/10.png"), file=sys.stderr)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("predict", "sweep"):
        s = sub.add_parser(name)
        s.add_argument("--profile", action="append", required=True)
        s.add_argument("--comm", required=True)
        s.add_argument("--comm-world", default="2")
        s.add_argument("--first-bucket-mb", type=float, default=1.0)
        s.add_argument("--share", type=float, default=1.0)
        s.add_argument("--compute-scale", type=float, default=1.0)
    pr = sub.choices["predict"]
    pr.add_argument("--world", type=int, required=True)
    pr.add_argument("--bucket-mb", type=float, default=25.0)
    pr.add_argument("--sync-every", type=int, default=1)
    sw = sub.choices["sweep"]
    sw.add_argument("--out", default=os.path.join(REPO, "docs", "results", "figures"))
    sw.add_argument("--no-plot", action="store_true")
    a = p.parse_args(argv)
    if a.share < 1:
        p.error(f"--share must be >= 1 (1: no contention), got {a.share}")
    (cmd_predict if a.cmd == "predict" else cmd_sweep)(a)


if __name__ == "__main__":
    main(sys.argv[1:])
