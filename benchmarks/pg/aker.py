#!/usr/bin/env python3
"""The Aker result cache (navis.result_cache) on the Aker paper's workload shape (issue 17).

    aker.py DATA_DIR [--host H --port P] [--groups 1000] [--group-size 50] [--requests 20000]
            [--zipf 0.30,0.60,0.99] [--configs none,fixed,aker] [--search-list 40] [--k 10]
            [--refresh] [--skip-load] [--json OUT.json] [--seed 1]

Workload (paper §6, "simZipf"): GROUPS seed queries from query.fbin, each with GROUP_SIZE
similar queries q' = (1 - λ)·q + λ·p (λ uniform in [0, 0.5], p another seed query); a
Zipfian choice of group (exponent s, groups ranked in a random order) and a uniform choice of
member per request, REQUESTS requests per exponent, sent one after another by one client
through a prepared `ORDER BY embedding <-> %s LIMIT k`.

For each exponent and each configuration, on an emptied cache (navis_result_cache_reset()):
  none   navis.result_cache = off
  fixed  one global reuse radius: the 1st percentile of the distances between the workload's
         distinct queries (the paper's Proximity+ baseline; no aliases)
  aker   adaptive per-entry thresholds, aliases
it reports recall@k against exact ground truth (numpy, over the rows in the table), hits by
kind (equality, alias, approximate) from navis_result_cache_stats, QPS, P50/P99 latency and
the cache's memory. Before each run the connection runs 300 other queries with the cache off
(CASR calibration, warm buffers).

--refresh: the table holds 95% of base.fbin; after an Aker run of the highest exponent (the
warm-up), the other 5% are inserted, then 5%, 10% and 25% (cumulative) of the rows the
warm-up's answers returned are deleted (VACUUM after each step), and the same requests run
again each time, for Aker and, on the same state, without the cache. Ground truth is
recomputed on the live rows at every step.
"""

import argparse
import json
import sys
import time

import numpy as np

from bench import connect, encode_params, load, read_fbin, build_index, resolve_system_args, setup_system

TABLE_PREFIX = "aker_"
RESERVE = 10  # navis.result_cache_reserve, from --reserve


def exact_topk(base, live, queries, k):
    """Exact top-k row ids (squared L2) of each query over base[live]."""
    ids = np.flatnonzero(live)
    rows = np.asarray(base[ids], dtype=np.float32)
    norms = (rows * rows).sum(1)
    out = np.empty((len(queries), k), dtype=np.int64)
    for s in range(0, len(queries), 512):
        q = np.asarray(queries[s:s + 512], dtype=np.float32)
        d = norms[None, :] - 2.0 * (q @ rows.T)
        part = np.argpartition(d, k, axis=1)[:, :k]
        order = np.take_along_axis(d, part, 1).argsort(1)
        out[s:s + 512] = ids[np.take_along_axis(part, order, 1)]
    return out


def zipf_sequence(rng, n_items, s, n):
    """n draws of item ranks 0..n_items-1 with P(rank r) proportional to 1/(r+1)^s, mapped to items
    through a random permutation (YCSB's Zipfian key choice)."""
    p = 1.0 / np.arange(1, n_items + 1) ** s
    p /= p.sum()
    ranks = rng.choice(n_items, size=n, p=p)
    return rng.permutation(n_items)[ranks]


def build_workload(queries, groups, size, rng):
    seeds = np.asarray(queries[:groups], dtype=np.float32)
    lam = rng.uniform(0.0, 0.5, size=(groups, size, 1)).astype(np.float32)
    other = rng.integers(0, groups - 1, size=(groups, size))
    other += other >= np.arange(groups)[:, None]  # p is another seed query
    members = (1.0 - lam) * seeds[:, None, :] + lam * seeds[other]
    return members  # (groups, size, dim)


def cache_stats(conn, index):
    rows = conn.execute("SELECT name, value FROM navis_result_cache_stats WHERE index = %s::regclass",
                        (index,)).fetchall()
    return {n: v for n, v in rows}


def warm_up(conn, table, vectors, k, warmup):
    """Runs the warm-up queries with the cache off; returns the request SQL and parameters."""
    params = encode_params(vectors, "real")
    sql = f"SELECT id FROM {table} ORDER BY embedding <-> %s LIMIT {k}"
    with conn.cursor() as cur:
        cur.execute("SET navis.result_cache = off")
        for w in encode_params(warmup, "real"):
            cur.execute(sql, (w,), prepare=True)
            cur.fetchall()
    return sql, params


def measure(conn, table, index, config, threshold, vectors, requests, gt, k, warmup, list_size):
    with conn.cursor() as cur:
        cur.execute(f"SET navis.result_cache_reserve = {RESERVE}")
        cur.execute("SELECT navis_result_cache_reset()")
        cur.execute("SET enable_seqscan = off")
        cur.execute(f"SET navis.search_list = {list_size}")
        cur.execute(f"SET navis.casr_warmup = {len(warmup)}")
        cur.execute("SET navis.result_cache_fixed_threshold = %s" % (threshold if config == "fixed" else 0))
    sql, params = warm_up(conn, table, vectors, k, warmup)
    return replay(conn, table, index, config, sql, params, requests, gt, k)


def replay(conn, table, index, config, sql, params, requests, gt, k):
    """The requests against the cache as it is now (no reset)."""
    lat = np.empty(len(requests))
    answers = []
    hits = 0
    with conn.cursor() as cur:
        cur.execute(f"SET navis.result_cache = {'off' if config == 'none' else 'on'}")
        before = cache_stats(conn, index)
        t0 = time.perf_counter()
        for i, r in enumerate(requests):
            s = time.perf_counter()
            cur.execute(sql, (params[r],), prepare=True)
            got = [row[0] for row in cur.fetchall()]
            lat[i] = time.perf_counter() - s
            answers.append(got)
            hits += len(set(got) & set(gt[r].tolist()))
        wall = time.perf_counter() - t0
    after = cache_stats(conn, index)
    delta = {n: after.get(n, 0) - before.get(n, 0) for n in
             ("hits_equality", "hits_alias", "hits_approximate", "misses", "fall_throughs")}
    n = len(requests)
    # Requests for a vector not seen before in the stream: misses (or rare approximate hits)
    # under any cache, so their mean under Aker against no cache is what a miss costs extra.
    seen, first = set(), np.zeros(n, dtype=bool)
    for i, r in enumerate(requests):
        first[i] = r not in seen
        seen.add(r)
    return {
        "config": config,
        "first_seen_ms": float(lat[first].mean() * 1e3),
        "repeat_ms": float(lat[~first].mean() * 1e3) if (~first).any() else None,
        "recall": hits / (n * k),
        "hit_equality": delta["hits_equality"] / n,
        "hit_alias": delta["hits_alias"] / n,
        "hit_approximate": delta["hits_approximate"] / n,
        "fall_throughs": delta["fall_throughs"],
        "qps": n / wall,
        "p50_ms": float(np.percentile(lat, 50) * 1e3),
        "p99_ms": float(np.percentile(lat, 99) * 1e3),
        "cache_bytes": after.get("memory_bytes", 0),
        "entries": after.get("entries", 0),
        "objects": after.get("objects", 0),
        "threshold_p50": after.get("threshold_p50"),
        "answers": answers,
    }


def fixed_threshold(vectors, rng, sample=3000):
    """The 1st percentile of Euclidean distances between distinct workload queries."""
    pick = vectors[rng.choice(len(vectors), size=min(sample, len(vectors)), replace=False)]
    sq = (pick * pick).sum(1)
    d2 = sq[:, None] + sq[None, :] - 2.0 * pick @ pick.T
    iu = np.triu_indices(len(pick), 1)
    return float(np.sqrt(max(np.percentile(d2[iu], 1), 0.0)))


def row(r):
    return (f"| {r['config']} | {r['recall']:.3f} | {r['hit_equality']:.3f} | {r['hit_alias']:.3f} | "
            f"{r['hit_approximate']:.3f} | {r['qps']:.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
            f"{r['cache_bytes'] / 2**20:.1f} | {int(r['entries'])} |")


HEADER = ("| config | recall@10 | equality hits | alias hits | approximate hits | QPS | P50 ms | "
          "P99 ms | cache MB | entries |\n|---|---|---|---|---|---|---|---|---|---|")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data")
    p.add_argument("--host", default="/tmp/navis-aker")
    p.add_argument("--port", type=int, default=54343)
    p.add_argument("--user", default="postgres")
    p.add_argument("--dbname", default="postgres")
    p.add_argument("--groups", type=int, default=1000)
    p.add_argument("--group-size", type=int, default=50)
    p.add_argument("--requests", type=int, default=20000)
    p.add_argument("--zipf", default="0.30,0.60,0.99")
    p.add_argument("--configs", default="none,fixed,aker")
    p.add_argument("--search-list", type=int, default=40)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--reserve", type=int, default=10, help="navis.result_cache_reserve (Δ)")
    p.add_argument("--refresh", action="store_true")
    p.add_argument("--skip-load", action="store_true", help="reuse table and index")
    p.add_argument("--load-only", action="store_true", help="load and build, then stop")
    p.add_argument("--json")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    global RESERVE
    RESERVE = args.reserve
    args.system, args.coltype, args.opclass = "navis", "real", None
    args.max_degree = args.build_list = args.pq_bytes = args.alpha = None
    args.build_threads = 2
    resolve_system_args(args)
    rng = np.random.default_rng(args.seed)
    base = read_fbin(f"{args.data}/base.fbin")
    queries = read_fbin(f"{args.data}/query.fbin")
    groups = min(args.groups, len(queries) - 300)
    name = args.data.rstrip("/").split("/")[-1].replace("-", "_")
    table, index = TABLE_PREFIX + name, TABLE_PREFIX + name + "_idx"
    n_rows = len(base) - (len(base) // 20 if args.refresh else 0)
    live = np.zeros(len(base), dtype=bool)
    live[:n_rows] = True
    conn = connect(args)
    setup_system(conn, args)
    report = {"dataset": name, "rows": n_rows, "groups": groups, "group_size": args.group_size,
              "requests": args.requests, "k": args.k, "search_list": args.search_list, "runs": []}
    if not args.skip_load:
        load(conn, table, base[:n_rows])
        report["build"] = build_index(conn, table, index, args)
        print(f"# built {index} in {report['build']['build_s']:.0f} s", flush=True)
    if args.load_only:
        return 0
    report["partition_bytes"] = conn.execute(
        "SELECT current_setting('navis.result_cache_size')").fetchone()[0]
    members = build_workload(queries, groups, args.group_size, rng)
    flat = members.reshape(-1, members.shape[-1])
    warmup = np.asarray(queries[groups:groups + 300], dtype=np.float32)
    threshold = fixed_threshold(flat, rng)
    report["fixed_threshold"] = threshold
    print(f"# {name}: {n_rows} rows, {groups} groups x {args.group_size}, {args.requests} requests, "
          f"L = {args.search_list}, reserve {args.reserve}, fixed threshold {threshold:.4f}", flush=True)
    exponents = [float(s) for s in args.zipf.split(",")]
    sequences = {s: zipf_sequence(rng, groups, s, args.requests) * args.group_size
                 + rng.integers(0, args.group_size, args.requests) for s in exponents}
    used = np.unique(np.concatenate(list(sequences.values())))
    remap = -np.ones(len(flat), dtype=np.int64)
    remap[used] = np.arange(len(used))
    vectors = flat[used]
    t0 = time.perf_counter()
    gt = exact_topk(base, live, vectors, args.k)
    print(f"# ground truth for {len(used)} distinct queries in {time.perf_counter() - t0:.0f} s", flush=True)
    for s in exponents:
        requests = remap[sequences[s]]
        print(f"\n## simZipf {s}\n\n{HEADER}", flush=True)
        for config in args.configs.split(","):
            r = measure(conn, table, index, config, threshold, vectors, requests, gt, args.k, warmup,
                        args.search_list)
            print(row(r), flush=True)
            r.pop("answers")
            report["runs"].append({"zipf": s, **r})
        print("\n" + "; ".join(f"{r['config']}: first-seen {r['first_seen_ms']:.2f} ms, repeats "
                                f"{r['repeat_ms'] or 0:.2f} ms" for r in report["runs"] if r["zipf"] == s),
              flush=True)
    if args.refresh:
        s = max(exponents)
        requests = remap[sequences[s]]
        print(f"\n## refresh stress (simZipf {s}): warm-up, +5% rows, then deletes of cached rows\n\n"
              f"| step | {HEADER[2:]}", flush=True)
        warm = measure(conn, table, index, "aker", threshold, vectors, requests, gt, args.k, warmup,
                       args.search_list)
        print(f"| warm-up {row(warm)}", flush=True)
        answered = np.unique(np.concatenate([np.asarray(a, dtype=np.int64) for a in warm.pop("answers") if a]))
        report["refresh"] = [{"step": "warm-up", **warm}]
        held = np.arange(n_rows, len(base))
        with conn.cursor() as cur:
            params = encode_params(np.asarray(base[held], dtype=np.float32), "real")
            for i, v in zip(held, params):
                cur.execute(f"INSERT INTO {table} (id, embedding) VALUES (%s, %s)", (int(i), v))
        live[held] = True
        order = rng.permutation(answered)
        sql = f"SELECT id FROM {table} ORDER BY embedding <-> %s LIMIT {args.k}"
        params = encode_params(vectors, "real")
        deleted = 0
        for share in (0.05, 0.10, 0.25):
            upto = int(round(share * len(order)))
            gone = order[deleted:upto]
            deleted = upto
            with conn.cursor() as cur:
                cur.execute(f"DELETE FROM {table} WHERE id = ANY(%s)", (gone.tolist(),))
                cur.execute(f"VACUUM {table}")
            live[gone] = False
            gt_now = exact_topk(base, live, vectors, args.k)
            label = f"+5% rows, {int(share * 100)}% of cached rows deleted"
            for config in ("aker", "none"):
                r = replay(conn, table, index, config, sql, params, requests, gt_now, args.k)
                r.pop("answers")
                print(f"| {label} {row(r)}", flush=True)
                report["refresh"].append({"step": label, **r})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, default=float)


if __name__ == "__main__":
    sys.exit(main())
