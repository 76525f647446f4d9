#!/usr/bin/env python3
"""PNG plots from the JSON files of bench.py (search sweeps) and inserts.py (insert + search runs).

    plots.py [--out DIR] [--prefix NAME] [--label FILE=TEXT ...] FILE.json [FILE.json ...]

The kind of each file is recognised from its content: bench.py's has a "search" list, inserts.py's
a "batches" list and a "timeline". Every curve is labelled with its system (navis / pgvector), the
memory regime (a: no limit, b: memory cgroup, see memlimit.sh) and, when needed to tell curves
apart, the file name; --label FILE=TEXT overrides. Files of both systems go on the same axes.

Writes into --out (default: the directory of the first file), names starting with --prefix:
  PREFIX-recall-qps.png      recall@k against QPS (log scale), one curve per file and client count,
                             points labelled with navis.search_list / hnsw.ef_search
  PREFIX-insert-timeline.png rows inserted per second and search queries per second over time
                             (from the timeline, per sampling interval, smoothed over --smooth s),
                             batch boundaries dotted
  PREFIX-insert-recall.png   recall@10 per batch
  PREFIX-insert-latency.png  search latency P50 (solid) and P99 (dashed) per batch, in ms
The prefix defaults to the dataset name of the first file.
"""

import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

COLORS = {"navis": ["#1f77b4", "#17becf", "#2ca02c", "#9467bd"],
          "pgvector": ["#d62728", "#ff7f0e", "#8c564b", "#e377c2"]}


def regime_letter(doc):
    reg = (doc.get("memory") or {}).get("regime", "")
    return reg.split(":")[0] if reg else "?"


def labels_for(docs, overrides):
    """A readable label per file: system, regime, window, then the file name if still ambiguous."""
    base = {}
    for path, doc in docs:
        s = doc.get("system", "navis")
        lab = f"{s} ({regime_letter(doc)})"
        if (doc.get("settings") or {}).get("window"):
            lab += " window"
        base[path] = lab
    counts = {}
    for lab in base.values():
        counts[lab] = counts.get(lab, 0) + 1
    out = {}
    for path, _ in docs:
        lab = base[path]
        if counts[lab] > 1:
            lab += f" [{os.path.splitext(os.path.basename(path))[0]}]"
        out[path] = overrides.get(path, overrides.get(os.path.basename(path), lab))
    return out


def color(doc, i_by_system):
    s = doc.get("system", "navis")
    i = i_by_system.get(s, 0)
    i_by_system[s] = i + 1
    pal = COLORS.get(s, COLORS["navis"])
    return pal[i % len(pal)]


def plot_recall_qps(docs, labels, path):
    fig, ax = plt.subplots(figsize=(7, 5))
    used = {}
    k = 10
    for p, doc in docs:
        rows = doc["search"]
        for clients in dict.fromkeys(r.get("clients", 1) for r in rows):
            part = sorted((r for r in rows if r.get("clients", 1) == clients), key=lambda r: r["recall"])
            c = color(doc, used)
            lab = labels[p] + (f", {clients} clients" if clients != 1 else "")
            xs = [r["recall"] for r in part]
            ys = [r["qps"] for r in part]
            ax.plot(xs, ys, "o-", color=c, label=lab)
            for r in part:
                param = r.get("param", r.get("list", r.get("ef_search")))
                ax.annotate(str(param), (r["recall"], r["qps"]), textcoords="offset points",
                            xytext=(4, 4), fontsize=7, color=c)
    ax.set_yscale("log")
    ax.set_xlabel(f"recall@{k}")
    ax.set_ylabel("queries per second (log)")
    names = sorted({d.get("dataset", "?") for _, d in docs})
    ax.set_title(f"{', '.join(names)}: recall against QPS\n"
                 "(points: navis.search_list for navis, hnsw.ef_search for pgvector)", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def rates(timeline, key, smooth):
    """(t, rate per second) from cumulative samples, over windows of about `smooth` seconds."""
    ts, rs = [], []
    j = 0
    for i in range(1, len(timeline)):
        while timeline[i]["t"] - timeline[j]["t"] > smooth and j < i - 1:
            j += 1
        dt = timeline[i]["t"] - timeline[j]["t"]
        if dt > 0:
            ts.append(timeline[i]["t"])
            rs.append((timeline[i][key] - timeline[j][key]) / dt)
    return ts, rs


def plot_insert_timeline(docs, labels, path, smooth):
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    used = {}
    for p, doc in docs:
        c = color(doc, used)
        tl = doc.get("timeline") or []
        t, r = rates(tl, "inserted", smooth)
        a1.plot(t, r, color=c, label=labels[p])
        t, r = rates(tl, "searches", smooth)
        a2.plot(t, r, color=c, label=labels[p])
        for b in doc["batches"]:
            if "t_end" in b:
                for a in (a1, a2):
                    a.axvline(b["t_end"], color=c, alpha=0.25, linestyle=":", linewidth=0.8)
    a1.set_ylabel("rows inserted / s")
    a2.set_ylabel("search queries / s")
    a2.set_xlabel("seconds since the first batch started (gaps: recall measured, searches stopped)")
    names = sorted({os.path.basename(os.path.normpath(d.get("dataset", "?"))) for _, d in docs})
    a1.set_title(f"{', '.join(names)}: inserts with concurrent searches "
                 f"(rates over {smooth:g} s windows; dotted: batch ends)", fontsize=10)
    for a in (a1, a2):
        a.grid(True, alpha=0.3)
        a.set_ylim(bottom=0)
    a1.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_per_batch(docs, labels, path, keys, ylabel, title):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    used = {}
    for p, doc in docs:
        c = color(doc, used)
        for key, style in keys:
            pts = [(b["batch"], b[key]) for b in doc["batches"] if b.get(key) is not None]
            if pts:
                ax.plot(*zip(*pts), style, color=c,
                        label=labels[p] + (f" {key}" if len(keys) > 1 else ""))
    ax.set_xlabel("batch")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+")
    p.add_argument("--out")
    p.add_argument("--prefix")
    p.add_argument("--label", action="append", default=[], help="FILE=TEXT")
    p.add_argument("--smooth", type=float, default=2.0, help="seconds per rate window")
    args = p.parse_args()
    overrides = dict(x.split("=", 1) for x in args.label)
    docs = []
    for f in args.files:
        with open(f) as fh:
            docs.append((f, json.load(fh)))
    sweeps = [(f, d) for f, d in docs if "search" in d]
    runs = [(f, d) for f, d in docs if "batches" in d]
    other = [f for f, d in docs if "search" not in d and "batches" not in d]
    if other:
        sys.exit(f"not a bench.py or inserts.py JSON file: {', '.join(other)}")
    out = args.out or os.path.dirname(os.path.abspath(args.files[0]))
    os.makedirs(out, exist_ok=True)
    first = docs[0][1]
    prefix = args.prefix or os.path.basename(os.path.normpath(first.get("dataset", "bench")))
    written = []
    if sweeps:
        path = os.path.join(out, f"{prefix}-recall-qps.png")
        plot_recall_qps(sweeps, labels_for(sweeps, overrides), path)
        written.append(path)
    if runs:
        labels = labels_for(runs, overrides)
        path = os.path.join(out, f"{prefix}-insert-timeline.png")
        plot_insert_timeline(runs, labels, path, args.smooth)
        written.append(path)
        path = os.path.join(out, f"{prefix}-insert-recall.png")
        plot_per_batch(runs, labels, path, [("recall", "o-")], "recall@10",
                       "recall@10 after each batch, against exact top-10 of the rows present")
        written.append(path)
        path = os.path.join(out, f"{prefix}-insert-latency.png")
        plot_per_batch(runs, labels, path, [("search_p50_ms", "o-"), ("search_p99_ms", "s--")],
                       "search latency, ms", "concurrent search latency per batch: P50 and P99")
        written.append(path)
    for w in written:
        print(w)


if __name__ == "__main__":
    main()
