"""bench/figures/plot.py — draws one figure from the JSON lines its script collected.

  /usr/bin/python3 bench/figures/plot.py FIG DIR      FIG: fig2 fig6 fig7_8 fig9_10 fig11 fig12
                                                        hooks beyond_view beyond_det beyond_autotune
                                                        beyond_syncbn beyond_static beyond_rebuild

Reads DIR/FIG.jsonl (one record per run, written by bench/figures/common.sh or the figure
script), writes DIR/FIG.csv (every record, the union of their fields as columns) and
DIR/FIG.png (small: about 800x330 pixels). lockstep is drawn solid, PyTorch dashed.
Needs Debian's python3-matplotlib (apt-get install -y python3-matplotlib).

Read before: bench/figures/common.sh. Read next: docs/results/evaluation.md.
"""
import csv, json, os, statistics, sys
from collections import defaultdict

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

plt.rcParams.update({"axes.titlesize": 9, "axes.labelsize": 8, "xtick.labelsize": 7, "ytick.labelsize": 7})

STYLE = {"lockstep": dict(color="tab:blue", ls="-", marker="o"),
         "pytorch": dict(color="tab:orange", ls="--", marker="s")}


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def write_csv(rows, path):
    keys = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)


def model_title(r):
    m = r["model"]
    if m == "mlp-reversed":
        return f"{m} {r['layers']} x Linear({r['width']}) batch {r['batch']}/rank"
    if m.startswith("resnet"):
        return f"{m} {r['image']}x{r['image']} batch {r['batch']}/rank"
    return f"{m} {r['layers']} layers seq {r['seq']} batch {r['batch']}/rank"


def models_in(rows):
    """Model names, ResNets first (the paper's order: Figure 7 ResNet, Figure 8 BERT)."""
    return sorted({r["model"] for r in rows}, key=lambda m: (not m.startswith("resnet"), m))


def med(values):
    return statistics.median(values) if values else float("nan")


def grouped(rows, key_fn, value):
    """{key: median of value over the rows with that key} (rounds of one configuration)."""
    g = defaultdict(list)
    for r in rows:
        g[key_fn(r)].append(r[value])
    return {k: med(v) for k, v in g.items()}


def fig2(rows, ax_row):
    ax = ax_row[0]
    for impl in sorted({r["impl"] for r in rows}):
        pts = grouped([r for r in rows if r["impl"] == impl], lambda r: r["per_call"], "total_s")
        xs = sorted(pts)
        style = STYLE["pytorch" if impl.startswith("pytorch") else "lockstep"].copy()
        if impl.endswith("mpi"):
            style.update(color="tab:green", marker="^")
        ax.plot(xs, [pts[x] for x in xs], label=impl, **style)
    r0 = rows[0]
    ax.set(xscale="log", yscale="log", xlabel="floats per AllReduce call",
           ylabel="total seconds", title=f"AllReduce {r0['total']:.0e} floats, world {r0['world']}")
    ax.legend(fontsize=8)


def fig6(rows, axes):
    parts = [("fwd_ms", "forward"), ("bwd_ms", "backward compute"),
             ("comm_wait_ms", "backward comm (exposed)"), ("opt_ms", "optimizer")]
    colors = ["tab:blue", "tab:green", "tab:red", "tab:gray"]
    for ax, model in zip(axes, models_in(rows)):
        sub = [r for r in rows if r["model"] == model]
        bars = []
        for fw in ("lockstep", "pytorch"):
            for mode in ("local", "ddp", "no-overlap", "flat"):
                sel = [r for r in sub if r["framework"] == fw and r["mode"] == mode]
                if sel:
                    bars.append((f"{'ours' if fw == 'lockstep' else 'torch'}\n{mode}", sel))
        bottom = [0.0] * len(bars)
        for (key, name), c in zip(parts, colors):
            h = [med([r[key] for r in sel]) for _, sel in bars]
            ax.bar(range(len(bars)), h, bottom=bottom, color=c, label=name)
            bottom = [b + x for b, x in zip(bottom, h)]
        ax.set_xticks(range(len(bars)), [b[0] for b in bars], fontsize=7)
        ax.set(ylabel="ms per iteration (medians)", title=model_title(sub[0]))
    axes[0].legend(fontsize=7)


def lines(ax, rows, x, y, xlabel, ylabel, title, label_fn=lambda r: r["framework"]):
    for label in sorted({label_fn(r) for r in rows}):
        pts = grouped([r for r in rows if label_fn(r) == label], lambda r: r[x], y)
        xs = sorted(pts)
        style = STYLE["pytorch" if label.startswith("pytorch") else "lockstep"]
        ax.plot(xs, [pts[k] for k in xs], label=label, **style)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.legend(fontsize=8)


def fig7_8(rows, axes):
    for ax, model in zip(axes, models_in(rows)):
        sub = [r for r in rows if r["model"] == model]
        lines(ax, sub, "bucket_mb", "iter_ms", "bucket_cap_mb", "median ms per iteration",
              f"{model_title(sub[0])}, world {sub[0]['world']}")
        ax.set_xscale("symlog", linthresh=1)


def fig9_10(rows, axes):
    scale = [r for r in rows if r["part"] == "world"]
    lines(axes[0], scale, "world", "examples_per_s", "world size (processes on this machine)",
          "examples/s, all ranks", f"scaling: {model_title(scale[0])}")
    axes[0].set_xticks(sorted({r["world"] for r in scale}))
    skip = [r for r in rows if r["part"] == "sync"]
    lines(axes[1], skip, "sync_every", "mean_iter_ms", "synchronize every S iterations (no_sync)",
          "mean ms per iteration", f"no_sync: {model_title(skip[0])}, world {skip[0]['world']}")
    axes[1].set_xscale("log", base=2)


def fig11(rows, axes):
    rows = [r for r in rows if not r.get("summary")]
    batches = sorted({r["batch"] for r in rows})
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red"]
    for ax, batch in zip(axes, batches):
        for fw, ls in (("lockstep", "-"), ("pytorch", "--")):
            for c, s in zip(colors, sorted({r["sync_every"] for r in rows})):
                sel = sorted((r for r in rows if r["framework"] == fw and r["batch"] == batch
                              and r["sync_every"] == s), key=lambda r: r["iter"])
                if not sel:
                    continue
                window = 10  # moving average of the per-iteration loss
                ys = [r["loss"] for r in sel]
                sm = [sum(ys[max(0, i - window + 1):i + 1]) / len(ys[max(0, i - window + 1):i + 1]) for i in range(len(ys))]
                ax.plot([r["iter"] for r in sel], sm, ls=ls, color=c,
                        label=f"{'ours' if fw == 'lockstep' else 'torch'} S={s}", lw=1)
        world = rows[0]["world"]
        ax.set(xlabel="iteration", ylabel="train loss (10-iteration mean)",
               title=f"Fashion-MNIST CNN, batch {batch}/rank, world {world}")
        ax.legend(fontsize=6, ncol=2)


def fig12(rows, axes):
    for ax, model in zip(axes, models_in(rows)):
        sub = [r for r in rows if r["model"] == model]
        lines(ax, sub, "rr", "iter_ms", "process groups (round robin)", "median ms per iteration",
              f"{model_title(sub[0])}, world {sub[0]['world']}")
        ax.set_xticks(sorted({r["rr"] for r in sub}))


def hooks(rows, axes):
    """Communication hooks on Fashion-MNIST: loss curves, then test accuracy and bytes."""
    its = [r for r in rows if not r.get("summary")]
    sums = [r for r in rows if r.get("summary")]
    labels = list(dict.fromkeys(r["label"] for r in rows))  # in run order
    colors = dict(zip(labels, ["black", "tab:gray", "tab:blue", "tab:green", "tab:orange", "tab:red", "tab:purple"]))
    window = 20
    for label in labels:
        sel = sorted((r for r in its if r["label"] == label), key=lambda r: r["iter"])
        ys = [r["loss"] for r in sel]
        sm = [sum(ys[max(0, i - window + 1):i + 1]) / len(ys[max(0, i - window + 1):i + 1]) for i in range(len(ys))]
        ls = ":" if label == "allreduce" else "-"
        axes[0].plot([r["iter"] for r in sel], sm, ls=ls, lw=1.2 if ls == ":" else 1, color=colors[label], label=label)
    r0 = sums[0]  # per-iteration records carry no batch
    axes[0].set(xlabel="iteration", ylabel=f"train loss ({window}-iteration mean)",
                title=f"Fashion-MNIST CNN, batch {r0['batch']}/rank, world {r0['world']}, per hook")
    axes[0].legend(fontsize=7)
    names = [r["label"] for r in sums]
    acc = [100 * r["test_accuracy"] for r in sums]
    bars = axes[1].bar(range(len(sums)), acc, color=[colors[n] for n in names])
    for b, r in zip(bars, sums):
        axes[1].annotate(f"{100 * r['wire_ratio']:.1f}% bytes", (b.get_x() + b.get_width() / 2, b.get_height()),
                         ha="center", va="bottom", fontsize=7)
    axes[1].set_xticks(range(len(sums)), names, fontsize=7, rotation=15)
    axes[1].set(ylabel="test accuracy % (10,000 images)", ylim=(min(acc) - 10, 100),
                title=f"after {sums[0]['iters']} iterations; label: bytes sent vs fp32 AllReduce")


def by_label(rows):
    """[(label, rows)] in first-appearance order (the script's configuration order)."""
    return [(lab, [r for r in rows if r["label"] == lab]) for lab in dict.fromkeys(r["label"] for r in rows)]


def breakdown(ax, bars, title):
    """Stacked medians of fwd / bwd compute / exposed comm / optimizer per bar (label, rows)."""
    parts = [("fwd_ms", "forward"), ("bwd_ms", "backward compute"),
             ("comm_wait_ms", "backward comm (exposed)"), ("opt_ms", "optimizer")]
    colors = ["tab:blue", "tab:green", "tab:red", "tab:gray"]
    bottom = [0.0] * len(bars)
    for (key, name), c in zip(parts, colors):
        h = [med([r[key] for r in sel]) for _, sel in bars]
        ax.bar(range(len(bars)), h, bottom=bottom, color=c, label=name)
        bottom = [b + x for b, x in zip(bottom, h)]
    for i, (_, sel) in enumerate(bars):
        ax.annotate(f"{med([r['iter_ms'] for r in sel]):.0f}", (i, bottom[i]), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(bars)), [b[0] for b in bars], fontsize=7)
    ax.set(ylabel="ms per iteration (medians; label: iter_ms)", title=title, ylim=(0, 1.3 * max(bottom)))
    ax.legend(fontsize=6, ncol=2, loc="upper left")


def beyond_view(rows, axes):
    models = models_in(rows)
    bars = [(f"{m.split('-')[0]}\n{lab}", [r for r in sel if r["model"] == m])
            for m in models for lab, sel in by_label(rows)]
    rss = [med([r["peak_rss_mb"] for r in sel]) for _, sel in bars]
    axes[0].bar(range(len(bars)), rss, color=["tab:blue", "tab:green"] * len(models))
    for i, v in enumerate(rss):
        axes[0].annotate(f"{v:.0f}", (i, v), ha="center", va="bottom", fontsize=7)
    axes[0].set_xticks(range(len(bars)), [b[0] for b in bars], fontsize=7)
    axes[0].set(ylabel="peak RSS MB (max over ranks, median)",
                title="gradient_as_bucket_view: memory; " + "; ".join(model_title(
                    [r for r in rows if r["model"] == m][0]) for m in models), )
    axes[0].title.set_fontsize(7)
    breakdown(axes[1], bars, f"iteration time, world {rows[0]['world']}")


def beyond_det(rows, axes):
    bars = [(f"{lab}\nworld {w}", [r for r in sel if r["world"] == w])
            for w in sorted({r["world"] for r in rows}) for lab, sel in by_label(rows)]
    breakdown(axes[0], bars, f"deterministic reduction vs AllReduce: {model_title(rows[0])}")


def beyond_autotune(rows, axes):
    bars = []
    for lab, sel in by_label(rows):
        if lab == "auto":
            lab = f"auto\n({med([r['bucket_mb'] for r in sel]):.2g} / {med([r['first_bucket_mb'] for r in sel]):.2g} MB)"
        bars.append((lab, sel))
    breakdown(axes[0], bars, f"bucket autotune vs fixed bucket_cap_mb: {model_title(rows[0])}, world {rows[0]['world']}")


def beyond_simple(what):
    def draw(rows, axes):
        breakdown(axes[0], by_label(rows), f"{what}: {model_title(rows[0])}, world {rows[0]['world']}")
    return draw


def zero(rows, axes):
    """ZeRO (bench/figures/zero.sh): per model, memory per rank, then iteration time, against world size."""
    colors = {"plain": "black", "zero": "tab:blue", "zero-overlap": "tab:orange", "zero2": "tab:green",
              "zero-overlap-shared": "tab:red", "zero2-shared": "tab:purple",
              "zero-overlap-shared-pieces": "tab:brown", "zero2-shared-pieces": "tab:pink",
              "zero-overlap-whole": "tab:olive", "zero2-whole": "tab:cyan",
              "zero-wait": "tab:gray", "zero-overlap-wait": "gold", "zero2-wait": "lime"}
    models = sorted({r["model"] for r in rows})
    for m, model in enumerate(models):
        mem, time = axes[2 * m], axes[2 * m + 1]
        mine = [r for r in rows if r["model"] == model]
        for label, sel in by_label(mine):
            sel = sorted(sel, key=lambda r: r["world"])
            ws = [r["world"] for r in sel]
            mem.plot(ws, [max(r["opt_state_mb_per_rank"]) for r in sel], "o-", color=colors.get(label),
                     label=f"{label}: optimizer state")
            mem.plot(ws, [max(r["peak_rss_mb_per_rank"]) for r in sel], "s--", color=colors.get(label),
                     label=f"{label}: peak RSS")
            time.plot(ws, [r["iter_ms"] / 1000 for r in sel], "o-", color=colors.get(label), label=label)
        mem.set(xlabel="ranks", ylabel="MB per rank (largest rank)", title=f"{model_title(mine[0])} AdamW: memory per rank")
        time.set(xlabel="ranks", ylabel="median iteration (s)", title=f"{model_title(mine[0])}: iteration time (2 shared cores)")
        for ax in (mem, time):
            ax.set_xticks(sorted({r["world"] for r in mine}))
            ax.legend(fontsize=7)


FIGS = {"zero": (zero, 2), "hooks": (hooks, 2), "beyond_view": (beyond_view, 2), "beyond_det": (beyond_det, 1),
        "beyond_autotune": (beyond_autotune, 1),
        "beyond_syncbn": (beyond_simple("SyncBatchNorm vs BatchNorm"), 1),
        "beyond_static": (beyond_simple("find_unused_parameters and static_graph"), 1),
        "beyond_rebuild": (beyond_simple("traced-order bucket rebuild"), 1),
        "fig2": (fig2, 1), "fig6": (fig6, 2), "fig7_8": (fig7_8, 2), "fig9_10": (fig9_10, 2),
        "fig11": (fig11, 2), "fig12": (fig12, 2)}


def main():
    fig, out = sys.argv[1], sys.argv[2]
    rows = load(os.path.join(out, fig + ".jsonl"))
    if not rows:
        sys.exit(f"plot: {fig}.jsonl in {out} has no records")
    write_csv(rows, os.path.join(out, fig + ".csv"))
    draw, panels = FIGS[fig]
    if fig in ("fig7_8", "fig12", "fig6"):
        panels = min(panels, len({r["model"] for r in rows}))
    nrows = len({r["model"] for r in rows}) if fig == "zero" else 1  # zero: one row of panels per model
    f, axes = plt.subplots(nrows, panels, figsize=(5 * panels if panels > 1 else 6, 4 * nrows), dpi=80, squeeze=False)
    draw(rows, [ax for row in axes for ax in row])
    loads = [r["load"] for r in rows if "load" in r]
    if loads:
        f.text(0.995, 0.005, f"load average {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores",
               ha="right", va="bottom", fontsize=7, color="gray")
    f.tight_layout()
    f.savefig(os.path.join(out, fig + ".png"))
    print(f"plot: wrote {os.path.join(out, fig + '.csv')} and {fig}.png", file=sys.stderr)


if __name__ == "__main__":
    main()
