#!/usr/bin/env python3
"""Inserts inside PostgreSQL with searches running at the same time (the NAVIS workload shape,
issue 7), for navis or pgvector's HNSW, measured against exact results and, for navis, by the
index's own counters (navis_index_counters).

    inserts.py DATA_DIR [--host /tmp/navis-pgbench --port 54340] [--base 50000] [--insert 10000]
               [--batch 1000] [--writers 2] [--searchers 1] [--max-degree R] [--build-list L]
               [--queries 100] [--json OUT.json]
               [--system navis|pgvector] [--hnsw-m 16] [--hnsw-ef-construction 64]
               [--ef-search N] [--search-list N] [--coltype real|vector] [--window]
               [--recall-every 1] [--sample-interval 0.5]
               [--set NAME=VALUE ...] [--baseline-seconds S]

1. loads the first BASE rows of base.fbin (ids = row numbers) and builds the index: navis on a
   real[] column (or vector(dim) with --coltype vector), or with --system pgvector `USING hnsw
   (embedding vector_l2_ops) WITH (m, ef_construction)` on a vector(dim) column;
2. inserts the next INSERT rows in batches of BATCH rows, each batch split over WRITERS
   connections (one INSERT ... per row, one transaction per 100 rows), while SEARCHERS connections
   run `ORDER BY embedding <-> q LIMIT 10` queries in a loop (navis.search_list from --search-list,
   hnsw.ef_search from --ef-search; the server's defaults otherwise);
3. per batch reports rows/s (rows over the batch's insert time), the search queries/s during the
   batch and their latency P50/P99 (ms), and, for navis only, per insert the edge pages read
   (position seeking and re-reads), edge pages written, the pages an in-place update of the same
   lists would rewrite, vectors loaded by CASR; after each batch (--recall-every), with the
   searchers stopped, recall@10 over QUERIES queries against the exact top-10 of the rows present
   (numpy brute force);
4. at the end VACUUM, navis_verify (navis), and recall@10 over the rows present.

--window (sliding window): a btree on id is added before the run; each batch, after its inserts
and with the searchers still running, deletes the BATCH oldest rows present and runs VACUUM on the
table (as autovacuum would, concurrently with the searches); the row reports the delete and VACUUM
times, rows/s stays rows over the insert time, search q/s and latencies cover the whole batch.

--set NAME=VALUE (repeatable) sets a setting in every session (writers, searchers, recall), e.g.
--set navis.lios=on. --baseline-seconds S first runs the searchers alone for S seconds (no
inserts) and reports their mean, P50 and P99 latency: the no-update baseline LIOS is held to. With
navis, the server's navis_lios_stats before and after the run are reported when the view exists.

--json writes every per-batch row, the final numbers, the settings and the memory regime, plus a
timeline sampled every --sample-interval seconds of (t, rows inserted so far, searches so far,
rows deleted so far) for plots.py; a row counts as inserted when its INSERT has executed (the
transactions commit every 100 rows).

Wall times on shared machines are noisy; the per-insert counters are deterministic.
"""

import argparse
import json
import multiprocessing
import os
import queue
import sys
import threading
import time

import numpy as np

from bench import (connect, encode_params, load, read_fbin, build_index, resolve_system_args,
                   server_memory, setup_system)

COUNTERS = ("inserts", "insert_pages_read", "edge_pages_written", "insert_pages_in_place",
            "insert_vectors_loaded", "edge_lists_written")


def counters(conn, index):
    with conn.cursor() as cur:
        cur.execute("SELECT counter, value FROM navis_index_counters(%s::regclass)", (index,))
        return dict(cur.fetchall())


# Writers and searchers are processes, not threads: with threads, one interpreter's GIL
# serialised every client's Python work, and in memory (where a query takes well under a
# millisecond) the clients, not the server, set the pace: perf over an insert phase put two
# Python threads at 48% of the two cores' samples, about one core, and the faster system's
# searchers took the GIL from its writers most. Forked, so the loaded rows are shared, not copied.
MP = multiprocessing.get_context("fork")


class Progress:
    """Counts shared by the writer and searcher processes and the sampler thread."""

    def __init__(self):
        self.lock = MP.Lock()
        self.counts = {f: MP.Value("q", 0, lock=False)
                       for f in ("inserted", "searches", "deleted", "writer_cpu_ticks")}

    def add(self, field, n):
        with self.lock:
            self.counts[field].value += n

    def snapshot(self):
        with self.lock:
            return tuple(self.counts[f].value for f in ("inserted", "searches", "deleted"))

    def value(self, field):
        with self.lock:
            return self.counts[field].value


def backend_cpu_ticks(pid):
    """User + system CPU of a server process so far, in clock ticks (/proc/PID/stat fields 14
    and 15); None when it cannot be read (another user's process without root)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return None


def start_searchers(args, table, enc, progress):
    """Starts args.searchers searcher processes; returns (stop event, processes, latency queue)."""
    stop, done = MP.Event(), MP.Queue()
    procs = [MP.Process(target=search_loop, args=(args, table, enc, stop, done, progress))
             for _ in range(args.searchers)]
    for p in procs:
        p.start()
    return stop, procs, done


def stop_searchers(stop, procs, done):
    """Stops the searchers; returns their latency lists (taken before joining, so that no
    process blocks on a full queue)."""
    stop.set()
    lists, deadline = [], time.monotonic() + 600
    while len(lists) < len(procs):
        try:
            lists.append(done.get(timeout=1))
        except queue.Empty:
            # a searcher that died (its server backend killed, say) never reports: stop at
            # once rather than after the deadline
            if any(p.exitcode not in (None, 0) for p in procs) or time.monotonic() > deadline:
                sys.exit(f"a searcher process failed (exit codes {[p.exitcode for p in procs]})")
    for p in procs:
        p.join()
    return lists


def run_writers(args, table, base, ids, progress):
    """Runs args.writers writer processes over ids and waits for them; a failed one is an error."""
    procs = [MP.Process(target=insert_rows, args=(args, table, base, part, progress))
             for part in np.array_split(ids, args.writers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    failed = [p.exitcode for p in procs if p.exitcode != 0]
    if failed:
        sys.exit(f"a writer process failed (exit codes {failed})")


def cache_counters(conn):
    """NAVIS-Cache's integer counters (navis_cache_stats), {} when it has none."""
    with conn.cursor() as cur:
        cur.execute("SELECT name, value FROM navis_cache_stats")
        return {k: int(v) for k, v in cur.fetchall() if v.isdigit()}


def hit_rate(d, caller):
    hits = d.get(f"{caller}_hits_frozen", 0) + d.get(f"{caller}_hits_window", 0)
    lookups = hits + d.get(f"{caller}_misses", 0)
    return hits / lookups if lookups else None


def session_settings(args):
    """SET statements from --set NAME=VALUE."""
    out = []
    for item in args.set or []:
        name, _, value = item.partition("=")
        out.append(f"SET {name} = '{value}'")
    return out


def search_settings(args):
    if args.system == "pgvector":
        own = [f"SET hnsw.ef_search = {args.ef_search}"] if args.ef_search else []
    else:
        own = [f"SET navis.search_list = {args.search_list}"] if args.search_list else []
    return own + session_settings(args)


def lios_stats(conn):
    """navis_lios_stats as a dict, or {} when the view does not exist."""
    with conn.cursor() as cur:
        cur.execute("SELECT to_regclass('navis_lios_stats') IS NOT NULL")
        if not cur.fetchone()[0]:
            return {}
        cur.execute("SELECT name, value FROM navis_lios_stats WHERE name NOT LIKE 'backend_%'")
        return dict(cur.fetchall())


def latency_summary(lat):
    """mean, P50, P99 in ms of latencies in seconds."""
    if not lat:
        return {"mean_ms": None, "p50_ms": None, "p99_ms": None, "n": 0}
    lat = sorted(lat)
    return {"mean_ms": 1000 * sum(lat) / len(lat), "p50_ms": pct(lat, 0.5),
            "p99_ms": pct(lat, 0.99), "n": len(lat)}


def insert_rows(args, table, base, ids, progress):
    conn = connect(args)
    with conn.cursor() as cur:
        for setting in session_settings(args):
            cur.execute(setting)
        cur.execute("SELECT pg_backend_pid()")
        pid = cur.fetchone()[0]
        cpu_before = backend_cpu_ticks(pid)
        for start in range(0, len(ids), 100):
            part = ids[start:start + 100]
            vals = encode_params(base[part[0]:part[-1] + 1], args.coltype)
            cur.execute("BEGIN")
            for i, v in zip(part, vals):
                cur.execute(f"INSERT INTO {table} (id, embedding) VALUES (%s, %s)", (int(i), v))
                progress.add("inserted", 1)  # counted when executed (committed per 100 rows)
            cur.execute("COMMIT")
        # The inserting backend's own CPU: what an insert costs the server, whatever share of
        # the cores the concurrent searchers leave the writers.
        cpu_after = backend_cpu_ticks(pid)
        if cpu_before is not None and cpu_after is not None:
            progress.add("writer_cpu_ticks", cpu_after - cpu_before)
    conn.close()


def search_loop(args, table, enc, stop, done, progress):
    """Queries until stop is set; puts the latencies (seconds) of its queries on done."""
    conn = connect(args)
    lat = []
    with conn.cursor() as cur:
        cur.execute("SET enable_seqscan = off")
        for s in search_settings(args):
            cur.execute(s)
        n = 0
        while not stop.is_set():
            t0 = time.perf_counter()
            cur.execute(f"SELECT id FROM {table} ORDER BY embedding <-> %s LIMIT 10",
                        (enc[n % len(enc)],))
            cur.fetchall()
            lat.append(time.perf_counter() - t0)
            progress.add("searches", 1)
            n += 1
    done.put(lat)
    conn.close()


def sampler(progress, t_start, stop, timeline, interval):
    while True:
        ins, srch, dele = progress.snapshot()
        timeline.append({"t": time.perf_counter() - t_start, "inserted": ins, "searches": srch,
                         "deleted": dele})
        if stop.wait(interval):
            ins, srch, dele = progress.snapshot()
            timeline.append({"t": time.perf_counter() - t_start, "inserted": ins,
                             "searches": srch, "deleted": dele})
            return


def recall(conn, args, table, base, lo, hi, queries, enc, k=10):
    """recall@k of the index against the exact top-k of the rows lo..hi-1 (the rows present)."""
    data = np.asarray(base[lo:hi], dtype=np.float32)
    norms = (data * data).sum(1)
    hits = 0
    with conn.cursor() as cur:
        cur.execute("SET enable_seqscan = off")
        for s in search_settings(args):
            cur.execute(s)
        for q, e in zip(queries, enc):
            d = norms - 2 * data @ q
            truth = set((np.argpartition(d, k)[:k] + lo).tolist())
            cur.execute(f"SELECT id FROM {table} ORDER BY embedding <-> %s LIMIT {k}", (e,))
            hits += len(truth & {r[0] for r in cur.fetchall()})
    return hits / (k * len(queries))


def pct(lat, p):
    if not lat:
        return None
    return lat[min(len(lat) - 1, int(len(lat) * p))] * 1e3


def wait_for_older_snapshots(cur, limit_s=5.0):
    """Waits until no other session's snapshot predates this point (a search that started
    before the DELETE committed), so that the VACUUM after it can remove the deleted rows.
    Without it the VACUUM right after the DELETE sometimes removed nothing (a search was in
    flight) and the final VACUUM did its work (results/lios.md, 'vacuum roles swapped')."""
    cur.execute("SELECT txid_current() % 4294967296")
    after = cur.fetchone()[0]
    deadline = time.perf_counter() + limit_s
    while time.perf_counter() < deadline:
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
                    "AND backend_xmin IS NOT NULL AND backend_xmin::text::bigint < %s", (after,))
        if cur.fetchone()[0] == 0:
            return
        time.sleep(0.005)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data")
    p.add_argument("--host", default="/tmp/navis-pgbench")
    p.add_argument("--port", type=int, default=54340)
    p.add_argument("--user", default="postgres")
    p.add_argument("--dbname", default="postgres")
    p.add_argument("--system", choices=("navis", "pgvector"), default="navis")
    p.add_argument("--coltype", choices=("real", "vector"),
                   help="navis: real[] (default) or vector(dim); pgvector: always vector(dim)")
    p.add_argument("--base", type=int, default=50000)
    p.add_argument("--insert", type=int, default=10000)
    p.add_argument("--batch", type=int, default=1000)
    p.add_argument("--writers", type=int, default=2)
    p.add_argument("--searchers", type=int, default=1)
    p.add_argument("--queries", type=int, default=100)
    p.add_argument("--max-degree", type=int)
    p.add_argument("--build-list", type=int)
    p.add_argument("--pq-bytes", type=int)
    p.add_argument("--alpha", type=float)
    p.add_argument("--hnsw-m", type=int, default=16)
    p.add_argument("--hnsw-ef-construction", type=int, default=64)
    p.add_argument("--ef-search", type=int, help="pgvector: hnsw.ef_search (server default: 40)")
    p.add_argument("--search-list", type=int, help="navis: navis.search_list (server default)")
    p.add_argument("--build-threads", type=int, default=2)
    p.add_argument("--opclass")
    p.add_argument("--window", action="store_true",
                   help="sliding window: each batch also deletes the oldest BATCH rows, then VACUUM")
    p.add_argument("--recall-every", type=int, default=1,
                   help="measure recall after every N-th batch (0: only at the end)")
    p.add_argument("--sample-interval", type=float, default=0.5)
    p.add_argument("--reuse", action="store_true",
                   help="keep the table and index an earlier run with --insert 0 left (BASE rows): "
                        "for regime b, build outside the memory limit, restart the server inside it")
    p.add_argument("--set", action="append", metavar="NAME=VALUE",
                   help="a setting for every session, e.g. navis.lios=on")
    p.add_argument("--baseline-seconds", type=float, default=0.0,
                   help="run the searchers alone this long first (the no-update baseline)")
    p.add_argument("--json")
    args = resolve_system_args(p.parse_args())
    navis = args.system == "navis"

    base = read_fbin(f"{args.data}/base.fbin")
    if args.base + args.insert > base.shape[0]:
        p.error(f"--base + --insert = {args.base + args.insert} > {base.shape[0]} rows in base.fbin")
    queries = np.asarray(read_fbin(f"{args.data}/query.fbin")[:args.queries], dtype=np.float32)
    enc = encode_params(queries, args.coltype)
    table, index = ("ins_bench", "ins_bench_idx") if navis else ("ins_hnsw", "ins_hnsw_idx")
    conn = connect(args)
    setup_system(conn, args)
    memory = server_memory(conn)
    if args.reuse:
        rows = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        if rows != args.base:
            sys.exit(f"--reuse: {table} has {rows} rows, not --base {args.base}")
        built = {"sql": f"(reused {index})", "build_s": 0.0, "reused": True}
    else:
        load(conn, table, base[:args.base], coltype=args.coltype)
        if args.window:
            conn.execute(f"CREATE INDEX {table}_id ON {table} (id)")
        built = build_index(conn, table, index, args)
    with conn.cursor() as cur:
        for s in search_settings(args):
            cur.execute(s)
        cur.execute("SELECT current_setting('navis.search_list', true),"
                    " current_setting('hnsw.ef_search', true)")
        search_list, ef_search = cur.fetchone()
    setting = f"navis.search_list {search_list}" if navis else f"hnsw.ef_search {ef_search}"
    print(f"{args.system}: built {built['sql']} over {args.base} rows in {built['build_s']:.1f} s; "
          f"{setting}; regime {memory['regime']}" + ("; sliding window" if args.window else ""))
    print()
    baseline = None
    if args.baseline_seconds > 0:
        stop, procs, queue = start_searchers(args, table, enc, Progress())
        time.sleep(args.baseline_seconds)
        done = stop_searchers(stop, procs, queue)
        baseline = latency_summary([x for d in done for x in d])
        baseline["qps"] = baseline["n"] / args.baseline_seconds
        print(f"no-update baseline ({args.baseline_seconds:.0f} s, {args.searchers} searchers): "
              f"{baseline['qps']:.0f} q/s, mean {baseline['mean_ms']:.2f} ms, "
              f"P50 {baseline['p50_ms']:.2f} ms, P99 {baseline['p99_ms']:.2f} ms")
        print()
    head = "| batch | rows | rows/s | search q/s | search P50 ms | search P99 ms "
    sep = "|---|---|---|---|---|---"
    if navis:
        head += "| pages read / insert | pages written / insert | in-place pages / insert " \
                "| vectors loaded / insert "
        sep += "|---|---|---|---"
    if args.window:
        head += "| delete s | VACUUM s "
        sep += "|---|---"
    head += "| recall@10 |"
    sep += "|---|"
    print(head)
    print(sep)

    lios_before = lios_stats(conn) if navis else {}

    batches = []
    all_latencies = []
    progress = Progress()
    timeline = []
    t_start = time.perf_counter()
    stop_sampler = threading.Event()
    sampler_t = threading.Thread(target=sampler, args=(progress, t_start, stop_sampler, timeline,
                                                       args.sample_interval))
    sampler_t.start()
    next_id = args.base
    oldest = 0
    try:
        for b in range(args.insert // args.batch):
            ids = np.arange(next_id, next_id + args.batch)
            before = counters(conn, index) if navis else None
            c_before = cache_counters(conn) if navis else {}
            stop, procs, queue = start_searchers(args, table, enc, progress)
            ticks_before = progress.value("writer_cpu_ticks")
            t0 = time.perf_counter()
            run_writers(args, table, base, ids, progress)
            ticks = progress.value("writer_cpu_ticks") - ticks_before
            t_ins = time.perf_counter()
            secs = t_ins - t0
            delete_s = vacuum_s = None
            if args.window:
                with conn.cursor() as cur:
                    cur.execute(f"DELETE FROM {table} WHERE id >= %s AND id < %s",
                                (oldest, oldest + args.batch))
                    t_del = time.perf_counter()
                    wait_for_older_snapshots(cur)
                    t_vac = time.perf_counter()
                    cur.execute(f"VACUUM {table}")
                    vacuum_s = time.perf_counter() - t_vac
                    delete_s = t_del - t_ins
                oldest += args.batch
                progress.add("deleted", args.batch)
            wall = time.perf_counter() - t0
            done = stop_searchers(stop, procs, queue)
            lat = sorted(x for d in done for x in d)
            all_latencies.extend(lat)
            row = {"batch": b + 1, "rows": args.batch, "rows_per_s": args.batch / secs,
                   "insert_s": secs, "batch_s": wall, "t_start": t0 - t_start,
                   "t_end": time.perf_counter() - t_start,
                   "searches": len(lat), "search_qps": len(lat) / wall,
                   "search_p50_ms": pct(lat, 0.5), "search_p99_ms": pct(lat, 0.99),
                   "rows_present": next_id + args.batch - oldest,
                   "writer_cpu_ms_per_insert":
                       1000 * ticks / os.sysconf("SC_CLK_TCK") / args.batch if ticks else None}
            if args.window:
                row.update(delete_s=delete_s, vacuum_s=vacuum_s, deleted=args.batch)
            if navis:
                after = counters(conn, index)
                d = {c: after[c] - before[c] for c in COUNTERS}
                n = max(d["inserts"], 1)
                row.update(pages_read=d["insert_pages_read"] / n,
                           pages_written=d["edge_pages_written"] / n,
                           pages_in_place=d["insert_pages_in_place"] / n,
                           vectors_loaded=d["insert_vectors_loaded"] / n,
                           lists_written=d["edge_lists_written"] / n)
                # NAVIS-Cache misses (edge pages read from the page cache or the device; the
                # key names say "device", which they are only out of memory), per insert and
                # per search query of this batch
                c_after = cache_counters(conn)
                dc = {k: c_after.get(k, 0) - c_before.get(k, 0) for k in c_after}
                row.update(edge_device_reads_per_insert=dc.get("insert_misses", 0) / n,
                           edge_device_reads_per_query=dc.get("search_misses", 0) / max(len(lat), 1),
                           cache_search_hit_rate=hit_rate(dc, "search"),
                           cache_insert_hit_rate=hit_rate(dc, "insert"))
            next_id += args.batch
            if args.recall_every and (b + 1) % args.recall_every == 0:
                row["recall"] = recall(conn, args, table, base, oldest, next_id, queries, enc)
            batches.append(row)
            line = (f"| {row['batch']} | {row['rows']} | {row['rows_per_s']:.0f} | "
                    f"{row['search_qps']:.0f} | {row['search_p50_ms'] or 0:.2f} | "
                    f"{row['search_p99_ms'] or 0:.2f} ")
            if navis:
                line += (f"| {row['pages_read']:.1f} | {row['pages_written']:.2f} | "
                         f"{row['pages_in_place']:.2f} | {row['vectors_loaded']:.1f} ")
            if args.window:
                line += f"| {delete_s:.2f} | {vacuum_s:.2f} "
            line += f"| {row['recall']:.4f} |" if "recall" in row else "| - |"
            print(line, flush=True)
    finally:
        stop_sampler.set()
        sampler_t.join()

    verify = edge_pages = None
    with conn.cursor() as cur:
        t0 = time.perf_counter()
        cur.execute(f"VACUUM {table}")
        final_vacuum_s = time.perf_counter() - t0
        if navis:
            cur.execute("SELECT clean, vertices, unreachable, problems FROM navis_verify(%s::regclass)",
                        (index,))
            verify = cur.fetchone()
            cur.execute("SELECT edge_pages FROM navis_index_stats(%s::regclass)", (index,))
            edge_pages = cur.fetchone()[0]
        cur.execute("SELECT pg_relation_size(%s::regclass), pg_table_size(%s::regclass)",
                    (index, table))
        index_main_bytes, table_bytes = cur.fetchone()
    r = recall(conn, args, table, base, oldest, next_id, queries, enc)
    present = next_id - oldest

    def mean(key):
        vals = [b[key] for b in batches if b.get(key) is not None]
        return sum(vals) / len(vals) if vals else None

    averages = {k: mean(k) for k in ("rows_per_s", "search_qps", "search_p50_ms", "search_p99_ms",
                                     "recall", "pages_read", "pages_written", "lists_written",
                                     "writer_cpu_ms_per_insert",
                                     "edge_device_reads_per_insert", "edge_device_reads_per_query",
                                     "cache_search_hit_rate", "cache_insert_hit_rate")}
    during = latency_summary(all_latencies)
    lios_after = lios_stats(conn) if navis else {}
    lios = {k: lios_after[k] - lios_before.get(k, 0) for k in lios_after}
    for k in ("queue_length", "queue_capacity"):
        if k in lios_after:
            lios[k] = lios_after[k]
    print()
    if during["n"]:
        print(f"searches during the inserts: mean {during['mean_ms']:.2f} ms, "
              f"P50 {during['p50_ms']:.2f} ms, P99 {during['p99_ms']:.2f} ms"
              + (f" (baseline mean {baseline['mean_ms']:.2f} ms: "
                 f"{during['mean_ms'] / baseline['mean_ms']:.3f}x)" if baseline else ""))
    if lios:
        print("navis_lios_stats over the run (VACUUM included): "
              + ", ".join(f"{k} {v:.0f}" for k, v in lios.items()))
    print(f"averages over {len(batches)} batches: {averages['rows_per_s'] or 0:.0f} rows/s, "
          f"{averages['search_qps'] or 0:.0f} search q/s, P50 {averages['search_p50_ms'] or 0:.2f} ms, "
          f"P99 {averages['search_p99_ms'] or 0:.2f} ms"
          + (f", recall@10 {averages['recall']:.4f}" if averages["recall"] is not None else ""))
    if navis:
        print(f"lists written per insert {averages['lists_written'] or 0:.1f}; final VACUUM "
              f"{final_vacuum_s:.1f} s; navis_verify after VACUUM {verify}; recall@10 over {len(queries)} queries against exact top-10 of the "
              f"{present} rows: {r:.4f}")
    else:
        print(f"final VACUUM {final_vacuum_s:.1f} s; index {index_main_bytes / 2**20:.1f} MiB; "
              f"recall@10 over {len(queries)} queries against exact top-10 of the {present} rows: "
              f"{r:.4f}")
    if args.json:
        settings = {k: v for k, v in vars(args).items() if k not in ("json",)}
        with open(args.json, "w") as f:
            json.dump({"system": args.system, "dataset": args.data, "settings": settings,
                       "search_setting": setting, "memory": memory, "build": built,
                       "batches": batches, "averages": averages, "timeline": timeline,
                       "verify": list(verify) if verify else None, "recall": r,
                       "rows_present": present, "final_vacuum_s": final_vacuum_s,
                       "index_main_bytes": index_main_bytes, "table_bytes": table_bytes,
                       "edge_pages": edge_pages, "baseline": baseline,
                       "search_during_inserts": during, "lios": lios}, f, indent=1, default=str)


if __name__ == "__main__":
    main()
