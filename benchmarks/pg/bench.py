#!/usr/bin/env python3
"""navis inside PostgreSQL: load a dataset, CREATE INDEX ... USING navis, measure recall@k and QPS.

    bench.py DATA_DIR [--host /tmp/navis-pgbench --port 54340] [--max-degree R] [--build-list L]
             [--pq-bytes N] [--alpha A] [--lists 20,40,80] [--queries 1000] [--warmup 200]
             [--build-threads 2] [--opclass navis_l2_ops] [--json OUT.json]

DATA_DIR holds base.fbin, query.fbin and gt100.bin (benchmarks/README.md). The driver:

1. creates table <name>(id int, embedding real[]) and fills it with binary COPY (id = row number,
   so ids are the ground truth's ids), then VACUUM ANALYZE;
2. times one CREATE INDEX ... USING navis (embedding <opclass>) WITH (options given; the index
   defaults otherwise) with max_parallel_maintenance_workers = build-threads - 1 (the build uses
   that + 1 threads), one run;
3. reports the index size: pg_relation_size(index) (metapage) + navis_index_stats().side_file_bytes;
4. for each search list L, on a fresh connection (so each L calibrates its own CASR window, as
   navis-bench does): SET navis.search_list = L and navis.casr_warmup = WARMUP, runs WARMUP
   warm-up queries, then QUERIES timed queries one after another (single client) through a
   prepared `SELECT id FROM t ORDER BY embedding <-> $1 LIMIT k`, the vector sent as a binary
   real[]; recall@k is against the first k ids of gt100.bin.

Prints markdown tables; --json writes the numbers too. Needs psycopg 3 (benchmarks/pg/requirements.txt).
"""

import argparse
import json
import os
import struct
import sys
import time

import numpy as np
import psycopg
from psycopg.adapt import Dumper
from psycopg.pq import Format

FLOAT4_OID = 700
FLOAT4_ARRAY_OID = 1021


def read_fbin(path):
    n, dim = np.fromfile(path, dtype="<u4", count=2)
    data = np.memmap(path, dtype="<f4", mode="r", offset=8, shape=(int(n), int(dim)))
    return data


def read_gt(path):
    nq, k = (int(x) for x in np.fromfile(path, dtype="<u4", count=2))
    ids = np.fromfile(path, dtype="<u4", count=nq * k, offset=8).reshape(nq, k)
    return ids


def array_dtype(dim):
    """One real[] value in PostgreSQL's binary array format (array_recv), big-endian."""
    return np.dtype([
        ("ndim", ">i4"), ("hasnull", ">i4"), ("elemtype", ">u4"), ("dim", ">i4"), ("lbound", ">i4"),
        ("elems", [("len", ">i4"), ("val", ">f4")], (dim,)),
    ])


def encode_arrays(rows):
    """rows: (n, dim) float32 -> structured array, one binary real[] per row."""
    n, dim = rows.shape
    out = np.empty(n, dtype=array_dtype(dim))
    out["ndim"], out["hasnull"], out["elemtype"], out["dim"], out["lbound"] = 1, 0, FLOAT4_OID, dim, 1
    out["elems"]["len"] = 4
    out["elems"]["val"] = rows
    return out


class Float4Array(bytes):
    """A query vector already encoded as a binary real[]."""


class Float4ArrayDumper(Dumper):
    format = Format.BINARY
    oid = FLOAT4_ARRAY_OID

    def dump(self, obj):
        return obj


def connect(args):
    conn = psycopg.connect(host=args.host, port=args.port, user=args.user, dbname=args.dbname,
                           autocommit=True)
    conn.adapters.register_dumper(Float4Array, Float4ArrayDumper)
    return conn


def load(conn, table, base, chunk=5000):
    n, dim = base.shape
    row_dtype = np.dtype([("nfields", ">i2"), ("idlen", ">i4"), ("id", ">i4"), ("alen", ">i4"),
                          ("arr", array_dtype(dim))])
    alen = array_dtype(dim).itemsize
    with conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {table}")
        cur.execute(f"CREATE TABLE {table} (id int, embedding real[])")
        t0 = time.perf_counter()
        with cur.copy(f"COPY {table} (id, embedding) FROM STDIN (FORMAT binary)") as cp:
            cp.write(b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0))
            for start in range(0, n, chunk):
                part = np.asarray(base[start:start + chunk], dtype=np.float32)
                rows = np.empty(len(part), dtype=row_dtype)
                rows["nfields"], rows["idlen"], rows["alen"] = 2, 4, alen
                rows["id"] = np.arange(start, start + len(part))
                rows["arr"] = encode_arrays(part)
                cp.write(rows.tobytes())
            cp.write(struct.pack(">h", -1))
        copy_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        cur.execute(f"VACUUM ANALYZE {table}")
        vacuum_s = time.perf_counter() - t0
        cur.execute("SELECT pg_table_size(%s::regclass)", (table,))
        table_bytes = cur.fetchone()[0]
    return copy_s, vacuum_s, table_bytes


def build_index(conn, table, index, args):
    opts = {k: v for k, v in (("max_degree", args.max_degree), ("build_list", args.build_list),
                              ("pq_bytes", args.pq_bytes), ("alpha", args.alpha)) if v is not None}
    with_clause = f" WITH ({', '.join(f'{k} = {v}' for k, v in opts.items())})" if opts else ""
    sql = f"CREATE INDEX {index} ON {table} USING navis (embedding {args.opclass}){with_clause}"
    with conn.cursor() as cur:
        cur.execute(f"DROP INDEX IF EXISTS {index}")
        cur.execute(f"SET max_parallel_maintenance_workers = {args.build_threads - 1}")
        cur.execute("CHECKPOINT")
        t0 = time.perf_counter()
        cur.execute(sql)
        build_s = time.perf_counter() - t0
        cur.execute("SELECT pg_relation_size(%s::regclass)", (index,))
        main_bytes = cur.fetchone()[0]
        cur.execute("SELECT side_file_bytes, edge_pages, max_degree, build_list, alpha, pq_bytes,"
                    " entrance_vertices, side_directory, current_setting('data_directory')"
                    " FROM navis_index_stats(%s::regclass)", (index,))
        side, pages, r, l, alpha, pq, ent, side_dir, datadir = cur.fetchone()
    return {"sql": sql, "build_s": build_s, "main_bytes": main_bytes, "side_bytes": side,
            "edge_pages": pages, "max_degree": r, "build_list": l, "alpha": alpha, "pq_bytes": pq,
            "entrance_vertices": ent,
            "side_directory": os.path.join(datadir, side_dir)}


COUNTERS = "scans, hops, edge_pages_read, rerank_vector_loads, bytes_read, casr_window"


def search(args, table, index, queries, gt, lst):
    k = args.k
    conn = connect(args)
    with conn.cursor() as cur:
        cur.execute(f"SET navis.search_list = {lst}")
        cur.execute(f"SET navis.casr_warmup = {args.warmup}")
        sql = f"SELECT id FROM {table} ORDER BY embedding <-> %s LIMIT {k}"
        enc = [Float4Array(r.tobytes()) for r in encode_arrays(np.asarray(queries, np.float32))]
        cur.execute("EXPLAIN (COSTS OFF) " + sql, (enc[0],))
        plan = "\n".join(r[0] for r in cur.fetchall())
        if f"Index Scan using {index}" not in plan:
            sys.exit(f"the query does not use {index}:\n{plan}")
        nq = len(enc)
        for i in range(args.warmup):  # also prepares the statement and calibrates CASR
            cur.execute(sql, (enc[i % nq],), prepare=True)
            cur.fetchall()
        cur.execute(f"SELECT {COUNTERS} FROM navis_index_stats(%s::regclass)", (index,))
        before = cur.fetchone()
        n = min(args.queries, nq)
        found, lat = [], []
        t_all = time.perf_counter()
        for i in range(n):
            t0 = time.perf_counter()
            cur.execute(sql, (enc[i],), prepare=True)
            found.append([r[0] for r in cur.fetchall()])
            lat.append(time.perf_counter() - t0)
        elapsed = time.perf_counter() - t_all
        cur.execute(f"SELECT {COUNTERS} FROM navis_index_stats(%s::regclass)", (index,))
        after = cur.fetchone()
    conn.close()
    hits = sum(len(set(f[:k]) & set(gt[i, :k].tolist())) for i, f in enumerate(found))
    lat.sort()
    d = [a - b for a, b in zip(after[:5], before[:5])]
    scans = max(d[0], 1)
    return {"list": lst, "recall": hits / (n * k), "qps": n / elapsed, "queries": n,
            "p50_us": lat[n // 2] * 1e6, "p99_us": lat[min(n - 1, int(n * 0.99))] * 1e6,
            "hops_q": d[1] / scans, "edge_pages_q": d[2] / scans, "vector_loads_q": d[3] / scans,
            "bytes_q": d[4] / scans, "casr_window": after[5], "scans": d[0]}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", help="dataset directory with base.fbin, query.fbin, gt100.bin")
    p.add_argument("--host", default=os.environ.get("PGHOST", "/tmp/navis-pgbench"))
    p.add_argument("--port", type=int, default=int(os.environ.get("PGPORT", "54340")))
    p.add_argument("--user", default="postgres")
    p.add_argument("--dbname", default="postgres")
    p.add_argument("--table", help="table name (default: from the directory name)")
    p.add_argument("--max-degree", type=int)
    p.add_argument("--build-list", type=int)
    p.add_argument("--pq-bytes", type=int)
    p.add_argument("--alpha", type=float)
    p.add_argument("--opclass", default="navis_l2_ops")
    p.add_argument("--build-threads", type=int, default=2)
    p.add_argument("--lists", default="20,40,80")
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--skip-load", action="store_true", help="reuse the table")
    p.add_argument("--skip-build", action="store_true", help="reuse the index")
    p.add_argument("--json", help="write the numbers here too")
    args = p.parse_args()

    name = os.path.basename(os.path.normpath(args.data))
    table = args.table or "bench_" + "".join(c if c.isalnum() else "_" for c in name)
    index = table + "_idx"
    base = read_fbin(os.path.join(args.data, "base.fbin"))
    queries = read_fbin(os.path.join(args.data, "query.fbin"))
    gt = read_gt(os.path.join(args.data, "gt100.bin"))
    queries = queries[: max(args.queries, min(args.warmup, len(queries)))]

    result = {"dataset": name, "rows": base.shape[0], "dim": base.shape[1]}
    conn = connect(args)
    with conn.cursor() as cur:
        cur.execute("CREATE EXTENSION IF NOT EXISTS navis")
        cur.execute("SELECT version(), navis_distance_kernels(), current_setting('shared_buffers'),"
                    " current_setting('maintenance_work_mem')")
        result["server"] = dict(zip(("version", "kernels", "shared_buffers", "maintenance_work_mem"),
                                    cur.fetchone()))
    if not args.skip_load:
        copy_s, vacuum_s, table_bytes = load(conn, table, base)
        result.update(copy_s=copy_s, vacuum_s=vacuum_s, table_bytes=table_bytes)
        print(f"{name}: COPY {base.shape[0]} rows {copy_s:.1f} s, VACUUM ANALYZE {vacuum_s:.1f} s,"
              f" table {table_bytes / 2**20:.0f} MiB", file=sys.stderr)
    if not args.skip_build:
        b = build_index(conn, table, index, args)
        result["build"] = b
        print(f"{name}: {b['sql']}: {b['build_s']:.1f} s", file=sys.stderr)
    conn.close()

    rows = []
    for lst in (int(x) for x in args.lists.split(",")):
        r = search(args, table, index, queries, gt, lst)
        rows.append(r)
        print(f"{name}: L={lst} recall@{args.k} {r['recall']:.4f} QPS {r['qps']:.0f}", file=sys.stderr)
    result["search"] = rows

    b = result.get("build")
    print(f"\n### {name} in PostgreSQL ({base.shape[0]} x {base.shape[1]}, {args.opclass})\n")
    if b:
        print("| CREATE INDEX (one run) | R / L / alpha / pq_bytes | threads | metapage (main fork) |"
              " side files | total on disk | edge pages |")
        print("|---|---|---|---|---|---|---|")
        print(f"| {b['build_s']:.1f} s | {b['max_degree']} / {b['build_list']} / {b['alpha']} /"
              f" {b['pq_bytes']} | {args.build_threads} | {b['main_bytes'] / 1024:.0f} KiB |"
              f" {b['side_bytes'] / 2**20:.1f} MiB | {(b['main_bytes'] + b['side_bytes']) / 2**20:.1f} MiB |"
              f" {b['edge_pages']} |\n")
    print(f"| L | recall@{args.k} | QPS | p50 µs | p99 µs | hops/q | edge pages/q | vector loads/q |"
          " CASR w |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['list']} | {r['recall']:.4f} | {r['qps']:.0f} | {r['p50_us']:.0f} | {r['p99_us']:.0f} |"
              f" {r['hops_q']:.1f} | {r['edge_pages_q']:.1f} | {r['vector_loads_q']:.1f} |"
              f" {r['casr_window']} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
