#!/usr/bin/env python3
"""NAVIS-Cache against plain LRU and no cache, inside PostgreSQL, on an insert-and-search
workload (issue 6). Driven by cache.sh, which starts one server per policy on a copy of the
same freshly built index; this script does the client side.

    cache.py prepare DATA --base N             load base rows 0..N-1, build the navis index
    cache.py run DATA --base N --insert M ...  on a running server: warm-up searches, then M
                                               rows inserted in batches by --writers sessions
                                               while --searchers sessions search, then a
                                               search-only phase; JSON with every number

Every number that matters comes from counters: navis_cache_stats (hits and misses by caller
and region, promotions, evictions) and navis_index_counters (inserts). An edge-page cache miss
is one device read (edge pages are read with O_DIRECT); vector reads for reranking are not
cached by any policy and are the same for all three. Wall-clock rates are reported too, but on
a shared 2-core machine only their ratios within one run mean much.
"""

import argparse
import json
import threading
import time

import numpy as np

from bench import connect, encode_params, load, read_fbin

TABLE, INDEX = "cb", "cb_v"


def cache_stats(conn):
    with conn.cursor() as cur:
        cur.execute("SELECT name, value FROM navis_cache_stats")
        out = {}
        for name, value in cur.fetchall():
            try:
                out[name] = float(value) if "." in value else int(value)
            except ValueError:
                out[name] = value
        return out


def delta(after, before):
    keys = ("search_hits_frozen", "search_hits_window", "search_misses", "insert_hits_frozen",
            "insert_hits_window", "insert_misses", "admitted", "admit_skipped", "promoted",
            "window_evictions", "frozen_evictions", "refreshed", "dropped")
    d = {k: after.get(k, 0) - before.get(k, 0) for k in keys}
    s_look = d["search_hits_frozen"] + d["search_hits_window"] + d["search_misses"]
    i_look = d["insert_hits_frozen"] + d["insert_hits_window"] + d["insert_misses"]
    d["search_lookups"], d["insert_lookups"] = s_look, i_look
    d["search_hit_rate"] = (s_look - d["search_misses"]) / s_look if s_look else 0.0
    d["insert_hit_rate"] = (i_look - d["insert_misses"]) / i_look if i_look else 0.0
    d["frozen_frames"] = after.get("frozen_frames", 0)
    return d


def searcher(args, enc, offset, stop, count_limit, lat_out):
    conn = connect(args)
    lat = []
    with conn.cursor() as cur:
        cur.execute("SET enable_seqscan = off")
        cur.execute(f"SET navis.search_list = {args.search_list}")
        n = offset
        while not stop.is_set() and (count_limit is None or len(lat) < count_limit):
            t0 = time.perf_counter()
            cur.execute(f"SELECT id FROM {TABLE} ORDER BY embedding <-> %s LIMIT 10",
                        (enc[n % len(enc)],))
            cur.fetchall()
            lat.append(time.perf_counter() - t0)
            n += 1
    lat_out.append(lat)
    conn.close()


def writer(args, base, ids):
    conn = connect(args)
    with conn.cursor() as cur:
        for start in range(0, len(ids), 100):
            part = ids[start:start + 100]
            vals = encode_params(base[part[0]:part[-1] + 1])
            cur.execute("BEGIN")
            for i, v in zip(part, vals):
                cur.execute(f"INSERT INTO {TABLE} (id, embedding) VALUES (%s, %s)", (int(i), v))
            cur.execute("COMMIT")
    conn.close()


def pct(lat, p):
    return float(np.percentile(np.asarray(lat) * 1000, p)) if len(lat) else 0.0


def search_phase(args, enc, queries_per_client):
    """Searchers alone, each running queries_per_client queries."""
    stop, lats = threading.Event(), []
    t0 = time.perf_counter()
    threads = [threading.Thread(target=searcher, args=(args, enc, c * 997, stop,
                                                       queries_per_client, lats))
               for c in range(args.searchers)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    secs = time.perf_counter() - t0
    lat = [x for part in lats for x in part]
    return {"queries": len(lat), "secs": secs, "qps": len(lat) / secs,
            "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99)}


def recall_at_10(conn, args, base, present, queries, enc):
    """Index top-10 of each query against numpy brute force over the rows present."""
    rows = base[:present]
    hits = 0
    with conn.cursor() as cur:
        cur.execute("SET enable_seqscan = off")
        cur.execute(f"SET navis.search_list = {args.search_list}")
        for q, e in zip(queries, enc):
            cur.execute(f"SELECT id FROM {TABLE} ORDER BY embedding <-> %s LIMIT 10", (e,))
            got = {r[0] for r in cur.fetchall()}
            d = ((rows - q) ** 2).sum(axis=1)
            exact = set(np.argpartition(d, 10)[:10].tolist())
            hits += len(got & exact)
    return hits / (10 * len(queries))


def run(args):
    base = read_fbin(f"{args.data}/base.fbin")
    queries = read_fbin(f"{args.data}/query.fbin")[:args.queries]
    enc = encode_params(queries)
    conn = connect(args)
    with conn.cursor() as cur:
        cur.execute("SELECT current_setting('navis.cache_size'), current_setting('navis.cache_policy')")
        size, policy = cur.fetchone()
        cur.execute(f"SELECT edge_pages FROM navis_index_stats('{INDEX}')")
        pages_at_start = cur.fetchone()[0]
    out = {"policy": policy, "cache_size": size, "edge_pages_at_start": pages_at_start,
           "base": args.base, "insert": args.insert, "batch": args.batch,
           "writers": args.writers, "searchers": args.searchers,
           "search_list": args.search_list, "stats_at_start": cache_stats(conn)}

    # 1. Warm-up: searches alone from a cold cache.
    before = cache_stats(conn)
    out["warmup"] = search_phase(args, enc, args.warmup // max(args.searchers, 1))
    out["warmup"]["cache"] = delta(cache_stats(conn), before)

    # 2. Inserts in batches while searchers run.
    batches = []
    next_id = args.base
    while next_id < args.base + args.insert:
        hi = min(next_id + args.batch, args.base + args.insert)
        ids = np.arange(next_id, hi)
        before = cache_stats(conn)
        stop, lats = threading.Event(), []
        searchers = [threading.Thread(target=searcher, args=(args, enc, c * 991 + next_id, stop,
                                                             None, lats))
                     for c in range(args.searchers)]
        writers = [threading.Thread(target=writer, args=(args, base, part))
                   for part in np.array_split(ids, args.writers)]
        t0 = time.perf_counter()
        [t.start() for t in searchers + writers]
        [t.join() for t in writers]
        secs = time.perf_counter() - t0
        stop.set()
        [t.join() for t in searchers]
        lat = [x for part in lats for x in part]
        d = delta(cache_stats(conn), before)
        rows = hi - next_id
        batch = {"rows": rows, "secs": secs, "rows_per_s": rows / secs,
                 "queries": len(lat), "qps": len(lat) / secs,
                 "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99), "cache": d,
                 "device_reads_per_query": d["search_misses"] / max(len(lat), 1),
                 "device_reads_per_insert": d["insert_misses"] / rows}
        batches.append(batch)
        print(f"[{policy}] batch {len(batches)}: {rows / secs:.1f} rows/s, {len(lat) / secs:.1f} q/s, "
              f"search hit {d['search_hit_rate']:.3f}, insert hit {d['insert_hit_rate']:.3f}, "
              f"reads/query {batch['device_reads_per_query']:.1f}, "
              f"reads/insert {batch['device_reads_per_insert']:.1f}", flush=True)
        next_id = hi
    out["batches"] = batches

    # 3. Searches alone again, after the inserts.
    before = cache_stats(conn)
    out["search_only"] = search_phase(args, enc, args.search_queries // max(args.searchers, 1))
    out["search_only"]["cache"] = delta(cache_stats(conn), before)
    out["recall_at_10"] = recall_at_10(conn, args, base, args.base + args.insert,
                                       queries[:args.recall_queries], enc[:args.recall_queries])
    out["stats_at_end"] = cache_stats(conn)
    conn.close()
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)
    print(f"[{policy}] search-only {out['search_only']['qps']:.1f} q/s, hit rate "
          f"{out['search_only']['cache']['search_hit_rate']:.3f}; recall@10 {out['recall_at_10']:.3f}")


def prepare(args):
    base = read_fbin(f"{args.data}/base.fbin")[:args.base]
    conn = connect(args)
    with conn.cursor() as cur:
        cur.execute("CREATE EXTENSION IF NOT EXISTS navis")
    copy_s, vacuum_s, table_bytes = load(conn, TABLE, base)
    with conn.cursor() as cur:
        cur.execute(f"SET max_parallel_maintenance_workers = {args.build_threads - 1}")
        t0 = time.perf_counter()
        cur.execute(f"CREATE INDEX {INDEX} ON {TABLE} USING navis (embedding)")
        build_s = time.perf_counter() - t0
        cur.execute(f"SELECT edge_pages, relation_bytes, max_degree, pq_bytes "
                    f"FROM navis_index_stats('{INDEX}')")
        pages, index_bytes, r, pq = cur.fetchone()
    info = {"base": args.base, "copy_s": copy_s, "table_bytes": table_bytes, "build_s": build_s,
            "edge_pages": pages, "edge_mb": pages * 8192 / 2**20, "index_bytes": index_bytes,
            "max_degree": r, "pq_bytes": pq}
    print(json.dumps(info))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("phase", choices=("prepare", "run"))
    p.add_argument("data")
    p.add_argument("--host", default="/tmp/navis-cachebench/run")
    p.add_argument("--port", type=int, default=54341)
    p.add_argument("--user", default="postgres")
    p.add_argument("--dbname", default="postgres")
    p.add_argument("--base", type=int, default=180000)
    p.add_argument("--insert", type=int, default=20000)
    p.add_argument("--batch", type=int, default=5000)
    p.add_argument("--writers", type=int, default=2)
    p.add_argument("--searchers", type=int, default=2)
    p.add_argument("--search-list", type=int, default=40)
    p.add_argument("--queries", type=int, default=1000, help="distinct query vectors cycled")
    p.add_argument("--warmup", type=int, default=400)
    p.add_argument("--search-queries", type=int, default=1000)
    p.add_argument("--recall-queries", type=int, default=200)
    p.add_argument("--build-threads", type=int, default=2)
    p.add_argument("--json", default="cache.json")
    args = p.parse_args()
    args.system, args.coltype = "navis", "real"
    (prepare if args.phase == "prepare" else run)(args)


if __name__ == "__main__":
    main()
