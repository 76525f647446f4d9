#!/usr/bin/env python3
"""navis inserts inside PostgreSQL, with searches running at the same time, measured by the
index's own counters (navis_index_counters) and against exact results.

    inserts.py DATA_DIR [--host /tmp/navis-pgbench --port 54340] [--base 50000] [--insert 10000]
               [--batch 1000] [--writers 2] [--searchers 1] [--max-degree R] [--build-list L]
               [--queries 100] [--json OUT.json]

1. loads the first BASE rows of base.fbin (ids = row numbers) and builds the navis index;
2. inserts the next INSERT rows in batches of BATCH rows, each batch split over WRITERS
   connections (one INSERT ... per 100 rows), while SEARCHERS connections run
   `ORDER BY embedding <-> q LIMIT 10` queries in a loop;
3. per batch reports rows/s, the search queries/s during the batch, and per insert the edge pages
   read (position seeking and re-reads), edge pages written, the pages an in-place update of the
   same lists would rewrite, vectors loaded by CASR; then VACUUM, navis_verify, and recall@10 over
   QUERIES queries against exact top-10 of the rows present (numpy brute force).

Wall times on shared machines are noisy; the per-insert counters are deterministic.
"""

import argparse
import json
import threading
import time

import numpy as np

from bench import Float4Array, connect, encode_arrays, load, read_fbin, build_index

COUNTERS = ("inserts", "insert_pages_read", "edge_pages_written", "insert_pages_in_place",
            "insert_vectors_loaded", "edge_lists_written")


def counters(conn, index):
    with conn.cursor() as cur:
        cur.execute("SELECT counter, value FROM navis_index_counters(%s::regclass)", (index,))
        return dict(cur.fetchall())


def one_array(v):
    return Float4Array(encode_arrays(np.asarray(v, dtype=np.float32)[None, :]).tobytes())


def insert_rows(args, table, base, ids):
    conn = connect(args)
    with conn.cursor() as cur:
        for start in range(0, len(ids), 100):
            part = ids[start:start + 100]
            cur.execute("BEGIN")
            for i in part:
                cur.execute(f"INSERT INTO {table} (id, embedding) VALUES (%s, %s)",
                            (int(i), one_array(base[i])))
            cur.execute("COMMIT")
    conn.close()


def search_loop(args, table, queries, stop, done):
    conn = connect(args)
    n = 0
    with conn.cursor() as cur:
        cur.execute("SET enable_seqscan = off")
        while not stop.is_set():
            cur.execute(f"SELECT id FROM {table} ORDER BY embedding <-> %s LIMIT 10",
                        (one_array(queries[n % len(queries)]),))
            cur.fetchall()
            n += 1
    done.append(n)
    conn.close()


def recall(conn, table, base, present, queries, k=10):
    data = np.asarray(base[:present], dtype=np.float32)
    norms = (data * data).sum(1)
    hits = 0
    with conn.cursor() as cur:
        cur.execute("SET enable_seqscan = off")
        for q in queries:
            d = norms - 2 * data @ q
            truth = set(np.argpartition(d, k)[:k].tolist())
            cur.execute(f"SELECT id FROM {table} ORDER BY embedding <-> %s LIMIT {k}",
                        (one_array(q),))
            hits += len(truth & {r[0] for r in cur.fetchall()})
    return hits / (k * len(queries))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("data")
    p.add_argument("--host", default="/tmp/navis-pgbench")
    p.add_argument("--port", type=int, default=54340)
    p.add_argument("--user", default="postgres")
    p.add_argument("--dbname", default="postgres")
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
    p.add_argument("--build-threads", type=int, default=2)
    p.add_argument("--opclass", default="navis_l2_ops")
    p.add_argument("--json")
    args = p.parse_args()

    base = read_fbin(f"{args.data}/base.fbin")
    queries = np.asarray(read_fbin(f"{args.data}/query.fbin")[:args.queries], dtype=np.float32)
    table, index = "ins_bench", "ins_bench_idx"
    conn = connect(args)
    conn.execute("CREATE EXTENSION IF NOT EXISTS navis")
    load(conn, table, base[:args.base])
    built = build_index(conn, table, index, args)
    print(f"built {built['sql']} over {args.base} rows in {built['build_s']:.1f} s")
    print()
    print("| batch | rows | rows/s | search q/s | pages read / insert | pages written / insert "
          "| in-place pages / insert | vectors loaded / insert |")
    print("|---|---|---|---|---|---|---|---|")
    batches = []
    next_id = args.base
    for b in range(args.insert // args.batch):
        ids = np.arange(next_id, next_id + args.batch)
        before = counters(conn, index)
        stop, done = threading.Event(), []
        searchers = [threading.Thread(target=search_loop, args=(args, table, queries, stop, done))
                     for _ in range(args.searchers)]
        for t in searchers:
            t.start()
        t0 = time.perf_counter()
        writers = [threading.Thread(target=insert_rows, args=(args, table, base, part))
                   for part in np.array_split(ids, args.writers)]
        for t in writers:
            t.start()
        for t in writers:
            t.join()
        secs = time.perf_counter() - t0
        stop.set()
        for t in searchers:
            t.join()
        after = counters(conn, index)
        d = {c: after[c] - before[c] for c in COUNTERS}
        n = max(d["inserts"], 1)
        row = {"batch": b + 1, "rows": args.batch, "rows_per_s": args.batch / secs,
               "search_qps": sum(done) / secs, "pages_read": d["insert_pages_read"] / n,
               "pages_written": d["edge_pages_written"] / n,
               "pages_in_place": d["insert_pages_in_place"] / n,
               "vectors_loaded": d["insert_vectors_loaded"] / n,
               "lists_written": d["edge_lists_written"] / n}
        batches.append(row)
        print(f"| {row['batch']} | {row['rows']} | {row['rows_per_s']:.0f} | {row['search_qps']:.0f} "
              f"| {row['pages_read']:.1f} | {row['pages_written']:.2f} | {row['pages_in_place']:.2f} "
              f"| {row['vectors_loaded']:.1f} |")
        next_id += args.batch
    with conn.cursor() as cur:
        cur.execute(f"VACUUM {table}")
        cur.execute("SELECT clean, vertices, unreachable, problems FROM navis_verify(%s::regclass)",
                    (index,))
        verify = cur.fetchone()
        cur.execute("SELECT edge_pages FROM navis_index_stats(%s::regclass)", (index,))
        edge_pages = cur.fetchone()[0]
    r = recall(conn, table, base, next_id, queries)
    lists = np.mean([b["lists_written"] for b in batches])
    print()
    print(f"lists written per insert {lists:.1f}; navis_verify after VACUUM {verify}; "
          f"recall@10 over {len(queries)} queries against exact top-10 of the {next_id} rows: {r:.4f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"build": built, "batches": batches, "verify": list(verify), "recall": r,
                       "edge_pages": edge_pages}, f, indent=1, default=str)


if __name__ == "__main__":
    main()
