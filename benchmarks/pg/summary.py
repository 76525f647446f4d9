#!/usr/bin/env python3
"""Side-by-side summary of one compare.sh run: navis and pgvector HNSW, the ratio navis/pgvector
for each metric, and where navis stands against the project's targets (issue 7).

    summary.py OUT_DIR REGIME DEVICE_JSON

Reads OUT_DIR/search-{navis,pgvector}.json (bench.py) and OUT_DIR/inserts-{navis,pgvector}.json
(inserts.py); either system may be missing. Prints markdown.
"""

import json
import os
import sys

TARGET_RECALL = 0.95
# The project's targets (issue 7): navis / pgvector, per regime.
# issue 15's targets: navis / pgvector in one run, recall@10 >= 0.95 for both
TARGETS = {"a": {"insert": 1.5, "search": 1.2, "concurrent_search": 1.0},
           "b": {"insert": 5.0, "search": 10.0, "concurrent_search": None}}


def load(path):
    return json.load(open(path)) if os.path.exists(path) else None


def at_target(rows, clients):
    """The cheapest sweep point with recall >= TARGET_RECALL (else the best recall)."""
    part = [r for r in rows if r["clients"] == clients]
    if not part:
        return None
    ok = [r for r in part if r["recall"] >= TARGET_RECALL]
    return min(ok, key=lambda r: r["param"]) if ok else max(part, key=lambda r: r["recall"])


def ratio(a, b):
    return f"{a / b:.2f}x" if a and b else "-"


def main():
    out, regime, device = sys.argv[1], sys.argv[2], sys.argv[3]
    s = {k: load(f"{out}/search-{k}.json") for k in ("navis", "pgvector")}
    i = {k: load(f"{out}/inserts-{k}.json") for k in ("navis", "pgvector")}
    dev = load(device) or {}
    ceiling = next((q.get("iops") for q in dev.get("results", []) if q.get("qd") == 64), None)
    first = s["navis"] or i["navis"] or {}
    mem = first.get("memory", {})
    limit_bytes = mem.get("memory_limit_bytes")
    limit = f"{limit_bytes / 2**20:.0f} MiB" if limit_bytes else "none"
    measured = f" (measured {dev['date']})" if ceiling and dev.get("date") else ""
    print(f"## {first.get('dataset', os.path.basename(out))}, regime {regime}\n")
    print(f"Regime: {mem.get('regime', regime)}; shared_buffers {mem.get('shared_buffers', '?')}; "
          f"memory limit {limit}; "
          f"navis.cache_size {mem.get('navis_cache_size', '?')}. Device ceiling (fio, QD 64): "
          f"{f'{ceiling:,.0f} IOPS' if ceiling else 'not measured'}{measured}.")
    if not s["pgvector"] and not i["pgvector"]:
        print("\npgvector is not installed here: navis alone.")
    builds = {k: load(f"{out}/build-{k}.json") for k in ("navis", "pgvector")}
    if any(builds.values()):
        print("\n### Build (CREATE INDEX over all rows, 2 threads, one run)\n")
        print("| system | rows | seconds | backend peak RSS | index on disk |")
        print("|---|---|---|---|---|")
        for name, b in builds.items():
            if not b or "build" not in b:
                continue
            bb = b["build"]
            peak = bb.get("backend_peak_rss")
            print(f"| {name} | {b['rows']:,} | {bb['build_s']:.1f} | "
                  f"{f'{peak / 2**20:.0f} MiB' if peak else '-'} | {bb['index_bytes'] / 2**20:.0f} MiB |")
    print("\n### Search only (the cheapest sweep point with recall@10 >= 0.95)\n")
    print("| clients | system | point | recall@10 | QPS | P50 ms | P99 ms | device reads / query "
          "| reads/s | share of fio ceiling |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    qps = {}
    # every client count the run measured (compare.sh CLIENTS); the targets are at 1 and 2
    counts = sorted({r["clients"] for run in s.values() if run for r in run["search"]})
    for clients in counts:
        for name in ("navis", "pgvector"):
            if not s[name]:
                continue
            r = at_target(s[name]["search"], clients)
            if not r:
                continue
            qps[(clients, name)] = r["qps"]
            point = f"L={r['param']}" if name == "navis" else f"ef_search={r['param']}"
            # device reads: what navis read minus what the page cache served (page_cache.rs)
            reads = ((r.get("bytes_q", 0) - r.get("page_cache_bytes_q", 0)) / 4096
                     if name == "navis" else None)
            rps = reads * r["qps"] if reads is not None else None
            print(f"| {clients} | {name} | {point} | {r['recall']:.4f} | {r['qps']:.0f} | "
                  f"{r['p50_us'] / 1000:.2f} | {r['p99_us'] / 1000:.2f} | "
                  f"{f'{reads:.1f}' if reads is not None else '-'} | "
                  f"{f'{rps:,.0f}' if rps is not None else '-'} | "
                  f"{f'{rps / ceiling:.1%}' if rps is not None and ceiling else '-'} |")
        if (clients, "navis") in qps and (clients, "pgvector") in qps:
            print(f"| {clients} | **navis / pgvector** | | | "
                  f"**{ratio(qps[(clients, 'navis')], qps[(clients, 'pgvector')])}** | | | | | |")
    print("\n### Inserts with concurrent searches (averages over the batches)\n")
    # NAVIS-Cache misses: edge pages read from outside the cache, by the page cache or the
    # device (the JSON keys say "device reads", an older and wrong name kept for old files).
    print("| system | rows/s | search q/s | P50 ms | P99 ms | recall@10 after | NAVIS-Cache "
          "misses / insert | / query | NAVIS-Cache hit rate search / insert | writer backend CPU "
          "ms / insert |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    avg = {}
    for name in ("navis", "pgvector"):
        if not i[name]:
            continue
        a = i[name]["averages"]
        avg[name] = a
        last = i[name]["batches"][-1] if i[name]["batches"] else {}
        f = lambda k, fmt: format(a[k], fmt) if a.get(k) is not None else "-"
        print(f"| {name} | {f('rows_per_s', '.1f')} | {f('search_qps', '.1f')} | "
              f"{f('search_p50_ms', '.2f')} | {f('search_p99_ms', '.2f')} | "
              f"{last.get('recall', a.get('recall')) or 0:.4f} | "
              f"{f('edge_device_reads_per_insert', '.1f')} | {f('edge_device_reads_per_query', '.1f')} | "
              f"{f('cache_search_hit_rate', '.3f')} / {f('cache_insert_hit_rate', '.3f')} | "
              f"{f('writer_cpu_ms_per_insert', '.2f')} |")
    if len(avg) == 2:
        n, p = avg["navis"], avg["pgvector"]
        print(f"| **navis / pgvector** | **{ratio(n['rows_per_s'], p['rows_per_s'])}** | "
              f"**{ratio(n['search_qps'], p['search_qps'])}** | | | | | | | "
              f"{ratio(p.get('writer_cpu_ms_per_insert'), n.get('writer_cpu_ms_per_insert'))} |")
    t = TARGETS.get(regime)
    if not t:
        return
    checks = []
    for clients in (1, 2):
        if (clients, "navis") in qps and (clients, "pgvector") in qps:
            checks.append((f"search QPS at recall 0.95, {clients} client(s)", t["search"],
                           qps[(clients, "navis")] / qps[(clients, "pgvector")]))
    if len(avg) == 2:
        checks.append(("inserts under concurrent search", t["insert"],
                       avg["navis"]["rows_per_s"] / avg["pgvector"]["rows_per_s"]))
        if t["concurrent_search"]:
            checks.append(("the concurrent searches", t["concurrent_search"],
                           avg["navis"]["search_qps"] / avg["pgvector"]["search_qps"]))
    if checks:
        print(f"\nTargets for regime {regime} (issue 15):\n")
        for what, goal, got in checks:
            print(f"- {what} >= {goal}x pgvector: **{got:.2f}x** "
                  f"({'met' if got >= goal else 'not met'})")


if __name__ == "__main__":
    main()
