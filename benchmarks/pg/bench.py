#!/usr/bin/env python3
"""navis inside PostgreSQL: load a dataset, CREATE INDEX ... USING navis, measure recall@k and QPS.

    bench.py DATA_DIR [--host /tmp/navis-pgbench --port 54340] [--max-degree R] [--build-list L]
             [--pq-bytes N] [--alpha A] [--lists 20,40,80] [--queries 1000] [--warmup 200] [--prime N]
             [--build-threads 2] [--opclass navis_l2_ops] [--json OUT.json]
             [--system navis|pgvector] [--coltype real|vector] [--hnsw-m 16]
             [--hnsw-ef-construction 64] [--ef-search 40,80,160] [--clients 1]

DATA_DIR holds base.fbin, query.fbin and gt100.bin (benchmarks/README.md). The driver:

1. creates table <name>(id int, embedding real[]) and fills it with binary COPY (id = row number,
   so ids are the ground truth's ids), then VACUUM ANALYZE;
2. times one CREATE INDEX ... USING navis (embedding <opclass>) WITH (options given; the index
   defaults otherwise) with max_parallel_maintenance_workers = build-threads - 1 (the build uses
   that + 1 threads), one run;
3. reports the index size: pg_relation_size(index) (the whole index is in its relation);
4. for each search list L, on a fresh connection (so each L calibrates its own CASR window, as
   navis-bench does): SET navis.search_list = L and navis.casr_warmup = WARMUP, runs WARMUP
   warm-up queries, then QUERIES timed queries one after another (single client) through a
   prepared `SELECT id FROM t ORDER BY embedding <-> $1 LIMIT k`, the vector sent as a binary
   real[]; recall@k is against the first k ids of gt100.bin.

--system pgvector runs the same steps against pgvector's HNSW instead (issue 7): the column is
vector(dim) (pgvector has no real[] opclass), the index `USING hnsw (embedding vector_l2_ops) WITH
(m = M, ef_construction = EFC)` (pgvector's defaults 16 / 64), and the sweep is over hnsw.ef_search
(--ef-search); the navis counters columns are left out. --coltype vector makes navis index the same
vector(dim) column (navis_vector_l2_ops), so both systems can run on identical tables. --clients N
runs each point with N connections at once (each runs the QUERIES queries, starting at a different
offset; QPS is all queries over the wall time, recall over all of them; navis counters are per scan
over all clients).

Prints markdown tables; --json writes the numbers too (plots.py draws them). Needs psycopg 3
(benchmarks/pg/requirements.txt).
"""

import argparse
import json
import os
import struct
import sys
import threading
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


def vector_dtype(dim):
    """One pgvector `vector` value in its binary format (vector_recv): int16 dim, int16 unused,
    dim float4, big-endian."""
    return np.dtype([("dim", ">u2"), ("unused", ">u2"), ("val", ">f4", (dim,))])


def encode_vectors(rows):
    """rows: (n, dim) float32 -> structured array, one binary pgvector value per row."""
    n, dim = rows.shape
    out = np.empty(n, dtype=vector_dtype(dim))
    out["dim"], out["unused"] = dim, 0
    out["val"] = rows
    return out


class VectorValue(bytes):
    """A query vector already encoded as a binary pgvector `vector`."""


def register_vector(conn):
    """Sends VectorValue as pgvector's type when the extension exists in the database."""
    oid = conn.execute("SELECT to_regtype('vector')::oid").fetchone()[0]
    if oid:
        dumper = type("VectorDumper", (Dumper,), {"format": Format.BINARY, "oid": int(oid),
                                                   "dump": lambda self, obj: obj})
        conn.adapters.register_dumper(VectorValue, dumper)
    return bool(oid)


def encode_params(rows, coltype="real"):
    """rows: (n, dim) -> list of query parameters for a real[] or vector column."""
    rows = np.asarray(rows, np.float32)
    if coltype == "vector":
        return [VectorValue(r.tobytes()) for r in encode_vectors(rows)]
    return [Float4Array(r.tobytes()) for r in encode_arrays(rows)]


def connect(args):
    conn = psycopg.connect(host=args.host, port=args.port, user=args.user, dbname=args.dbname,
                           autocommit=True)
    conn.adapters.register_dumper(Float4Array, Float4ArrayDumper)
    if getattr(args, "system", "navis") == "pgvector" or getattr(args, "coltype", "real") == "vector":
        register_vector(conn)
    return conn


def setup_system(conn, args):
    """CREATE EXTENSION for --system, after which VectorValue parameters work on conn."""
    with conn.cursor() as cur:
        if args.system == "pgvector" or args.coltype == "vector":
            cur.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
            if cur.fetchone() is None:
                sys.exit("pgvector is not installed in this server (no extension 'vector'); "
                         "run with --system navis --coltype real")
            cur.execute("CREATE EXTENSION IF NOT EXISTS vector")
        if args.system == "navis":
            cur.execute("CREATE EXTENSION IF NOT EXISTS navis")
            if args.coltype == "vector":
                cur.execute("SELECT count(*) FROM pg_opclass WHERE opcname = 'navis_vector_l2_ops'")
                if cur.fetchone()[0] == 0:
                    cur.execute("SELECT navis_enable_pgvector()")
    register_vector(conn)


def resolve_system_args(args):
    """Defaults that depend on --system: the column type and the operator class."""
    if args.system == "pgvector":
        if args.coltype == "real":
            sys.exit("pgvector indexes only vector columns: drop --coltype real")
        args.coltype = "vector"
        if args.opclass in (None, "navis_l2_ops"):
            args.opclass = "vector_l2_ops"
    else:
        args.coltype = args.coltype or "real"
        if args.opclass is None:
            args.opclass = "navis_vector_l2_ops" if args.coltype == "vector" else "navis_l2_ops"
    return args


def load(conn, table, base, chunk=5000, coltype="real"):
    n, dim = base.shape
    vdtype = vector_dtype(dim) if coltype == "vector" else array_dtype(dim)
    encode = encode_vectors if coltype == "vector" else encode_arrays
    row_dtype = np.dtype([("nfields", ">i2"), ("idlen", ">i4"), ("id", ">i4"), ("alen", ">i4"),
                          ("arr", vdtype)])
    alen = vdtype.itemsize
    sqltype = f"vector({dim})" if coltype == "vector" else "real[]"
    with conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {table}")
        cur.execute(f"CREATE TABLE {table} (id int, embedding {sqltype})")
        t0 = time.perf_counter()
        with cur.copy(f"COPY {table} (id, embedding) FROM STDIN (FORMAT binary)") as cp:
            cp.write(b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0))
            for start in range(0, n, chunk):
                part = np.asarray(base[start:start + chunk], dtype=np.float32)
                rows = np.empty(len(part), dtype=row_dtype)
                rows["nfields"], rows["idlen"], rows["alen"] = 2, 4, alen
                rows["id"] = np.arange(start, start + len(part))
                rows["arr"] = encode(part)
                cp.write(rows.tobytes())
            cp.write(struct.pack(">h", -1))
        copy_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        cur.execute(f"VACUUM ANALYZE {table}")
        vacuum_s = time.perf_counter() - t0
        cur.execute("SELECT pg_table_size(%s::regclass)", (table,))
        table_bytes = cur.fetchone()[0]
    return copy_s, vacuum_s, table_bytes


def backend_peak_rss(conn):
    """Peak resident memory (VmHWM, bytes) of this connection's backend since it started, read
    from /proc (the driver runs on the server's machine); None where that is not readable.
    Parallel build workers are separate processes and are not included."""
    pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def build_hnsw(conn, table, index, args):
    m = getattr(args, "hnsw_m", None) or 16
    efc = getattr(args, "hnsw_ef_construction", None) or 64
    opclass = args.opclass if args.opclass.startswith("vector_") else "vector_l2_ops"
    sql = (f"CREATE INDEX {index} ON {table} USING hnsw (embedding {opclass})"
           f" WITH (m = {m}, ef_construction = {efc})")
    with conn.cursor() as cur:
        cur.execute(f"DROP INDEX IF EXISTS {index}")
        cur.execute(f"SET max_parallel_maintenance_workers = {args.build_threads - 1}")
        cur.execute("CHECKPOINT")
        t0 = time.perf_counter()
        cur.execute(sql)
        build_s = time.perf_counter() - t0
        peak = backend_peak_rss(conn)
        cur.execute("SELECT pg_relation_size(%s::regclass), extversion FROM pg_extension"
                    " WHERE extname = 'vector'", (index,))
        main_bytes, version = cur.fetchone()
    return {"sql": sql, "system": "pgvector", "build_s": build_s, "main_bytes": main_bytes,
            "backend_peak_rss": peak,
            "index_bytes": main_bytes, "m": m, "ef_construction": efc,
            "pgvector_version": version}


def build_index(conn, table, index, args):
    if getattr(args, "system", "navis") == "pgvector":
        return build_hnsw(conn, table, index, args)
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
        peak = backend_peak_rss(conn)
        cur.execute("SELECT pg_relation_size(%s::regclass)", (index,))
        main_bytes = cur.fetchone()[0]
        cur.execute("SELECT edge_pages, max_degree, build_list, alpha, pq_bytes, entrance_vertices,"
                    " pg_relation_filepath(%s::regclass), current_setting('data_directory')"
                    " FROM navis_index_stats(%s::regclass)", (index, index))
        pages, r, l, alpha, pq, ent, rel_path, datadir = cur.fetchone()
    return {"sql": sql, "system": "navis", "build_s": build_s, "main_bytes": main_bytes,
            "backend_peak_rss": peak,
            "index_bytes": main_bytes, "edge_pages": pages, "max_degree": r, "build_list": l, "alpha": alpha, "pq_bytes": pq,
            "entrance_vertices": ent,
            "relation_file": os.path.join(datadir, rel_path)}


COUNTERS = ("scans, hops, edge_pages_read, rerank_vector_loads, bytes_read, casr_window, "
            "page_cache_bytes")


def search_settings(args, param):
    """The SET statements for one sweep point of --system."""
    if args.system == "pgvector":
        return [f"SET hnsw.ef_search = {param}"]
    return [f"SET navis.search_list = {param}", f"SET navis.casr_warmup = {args.warmup}"]


def knn_sql(table, k):
    """The query every search here times: the k nearest rows, through the index."""
    return f"SELECT id FROM {table} ORDER BY embedding <-> %s LIMIT {k}"


def search_client(args, table, index, enc, lst, offset, out, barrier):
    """One connection: warm-up, then the timed queries starting at offset; appends
    (found ids per query, latencies, start, end, navis counters before, after) to out. navis's
    scan counters (navis_index_stats) belong to the backend, so each client reads its own."""
    k = args.k
    conn = connect(args)
    with conn.cursor() as cur:
        for s in search_settings(args, lst):
            cur.execute(s)
        sql = knn_sql(table, k)
        if offset == 0:
            cur.execute("EXPLAIN (COSTS OFF) " + sql, (enc[0],))
            plan = "\n".join(r[0] for r in cur.fetchall())
            if f"Index Scan using {index}" not in plan:
                out.append(RuntimeError(f"the query does not use {index}:\n{plan}"))
                barrier.abort()
                return
        nq = len(enc)
        for i in range(args.warmup):  # also prepares the statement and calibrates CASR
            cur.execute(sql, (enc[(offset + i) % nq],), prepare=True)
            cur.fetchall()
        n = min(args.queries, nq)
        # With --fresh-points each client's slice holds its warm-up and then its timed queries.
        first = offset + (args.warmup if args.fresh_points else 0)
        found, lat = [], []
        before = after = None
        if args.system == "navis":
            cur.execute(f"SELECT {COUNTERS} FROM navis_index_stats(%s::regclass)", (index,))
            before = cur.fetchone()
        barrier.wait()
        t_all = time.perf_counter()
        for i in range(n):
            q = (first + i) % nq
            t0 = time.perf_counter()
            cur.execute(sql, (enc[q],), prepare=True)
            found.append((q, [r[0] for r in cur.fetchall()]))
            lat.append(time.perf_counter() - t0)
        t_end = time.perf_counter()
        if args.system == "navis":
            cur.execute(f"SELECT {COUNTERS} FROM navis_index_stats(%s::regclass)", (index,))
            after = cur.fetchone()
        out.append((found, lat, t_all, t_end, before, after))
    conn.close()


def prime(args, table, queries, lst):
    """Untimed queries at the first sweep point, one client: a server that has been answering
    queries for a while, not one just restarted with its caches dropped (regime b restarts the
    server inside the memory limit). Both systems get the same queries."""
    conn = connect(args)
    with conn.cursor() as cur:
        for s in search_settings(args, lst):
            cur.execute(s)
        sql = knn_sql(table, args.k)
        for e in encode_params(queries, args.coltype):
            cur.execute(sql, (e,), prepare=True)
            cur.fetchall()
    conn.close()


def search(args, table, index, queries, gt, lst, clients=1):
    k = args.k
    navis = args.system == "navis"
    enc = encode_params(queries, args.coltype)
    out = []
    # every client finishes its warm-up before any starts its timed queries
    barrier = threading.Barrier(clients)
    threads = [threading.Thread(target=search_client,
                                args=(args, table, index, enc, lst, c * len(enc) // clients, out,
                                      barrier))
               for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for o in out:
        if isinstance(o, Exception):
            sys.exit(str(o))
    if len(out) != clients:
        sys.exit("a search client failed")
    found = [f for o in out for f in o[0]]
    lat = sorted(x for o in out for x in o[1])
    elapsed = max(o[3] for o in out) - min(o[2] for o in out)
    n = len(found)
    hits = sum(len(set(f[:k]) & set(gt[q, :k].tolist())) for q, f in found)
    row = {"list": lst, "param": lst, "clients": clients, "recall": hits / (n * k),
           "qps": n / elapsed, "queries": n,
           "p50_us": lat[n // 2] * 1e6, "p99_us": lat[min(n - 1, int(n * 0.99))] * 1e6}
    if args.system == "pgvector":
        row["ef_search"] = row.pop("list")
    if navis:
        d = [sum(o[5][j] - o[4][j] for o in out) for j in (0, 1, 2, 3, 4, 6)]
        after = out[0][5]
        scans = max(d[0], 1)
        row.update(hops_q=d[1] / scans, edge_pages_q=d[2] / scans, vector_loads_q=d[3] / scans,
                   bytes_q=d[4] / scans, page_cache_bytes_q=d[5] / scans,
                   casr_window=after[5], scans=d[0])
        # navis's own count of bytes its scans read from the device (read minus what the page
        # cache served), per second, against the fio ceiling (QD 64) of this machine
        row["reads_4k_per_s"] = (row["bytes_q"] - row["page_cache_bytes_q"]) / 4096 * row["qps"]
        ceiling = device_ceiling()
        if ceiling:
            row["ceiling_iops"] = ceiling
            row["ceiling_fraction"] = row["reads_4k_per_s"] / ceiling
    return row


def device_ceiling():
    """IOPS at queue depth 64 from benchmarks/results/device.json (benchmarks/device/fio_ceiling.sh),
    or None."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "results", "device.json")
    try:
        with open(path) as f:
            rows = json.load(f)["results"]
        return max(r["iops"] for r in rows if r["qd"] == max(x["qd"] for x in rows))
    except (OSError, ValueError, KeyError):
        return None


def server_memory(conn):
    """The memory regime of the server: shared_buffers and, when the postmaster runs in a cgroup v1
    memory group with a limit (benchmarks/pg/memlimit.sh), that group and its limit. Reads the
    postmaster's pid from its data directory, so it needs the server on this machine."""
    info = {}
    with conn.cursor() as cur:
        cur.execute("SELECT current_setting('shared_buffers'), current_setting('effective_cache_size'),"
                    " current_setting('maintenance_work_mem'), current_setting('data_directory'),"
                    " current_setting('navis.cache_size', true)")
        (info["shared_buffers"], info["effective_cache_size"], info["maintenance_work_mem"], datadir,
         info["navis_cache_size"]) = cur.fetchone()
    try:
        with open(os.path.join(datadir, "postmaster.pid")) as f:
            pid = int(f.readline())
        with open(f"/proc/{pid}/cgroup") as f:
            group = next((line.split(":", 2)[2].strip() for line in f
                          if line.split(":", 2)[1] == "memory"), None)
        info["postmaster_pid"], info["memory_cgroup"] = pid, group
        if group:
            with open(f"/sys/fs/cgroup/memory{group}/memory.limit_in_bytes") as f:
                limit = int(f.read())
            info["memory_limit_bytes"] = limit if limit < 2**62 else None
    except (OSError, ValueError, StopIteration):
        pass
    lim = info.get("memory_limit_bytes")
    info["regime"] = (f"b: server in memory cgroup {info['memory_cgroup']} limited to "
                      f"{lim / 2**20:.0f} MiB, shared_buffers {info['shared_buffers']}" if lim else
                      f"a: no memory limit, shared_buffers {info['shared_buffers']}")
    return info


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", help="dataset directory with base.fbin, query.fbin, gt100.bin")
    p.add_argument("--host", default=os.environ.get("PGHOST", "/tmp/navis-pgbench"))
    p.add_argument("--port", type=int, default=int(os.environ.get("PGPORT", "54340")))
    p.add_argument("--user", default="postgres")
    p.add_argument("--dbname", default="postgres")
    p.add_argument("--table", help="table name (default: from the directory name)")
    p.add_argument("--system", choices=("navis", "pgvector"), default="navis")
    p.add_argument("--coltype", choices=("real", "vector"),
                   help="column type: real[] (navis default) or pgvector's vector(dim)")
    p.add_argument("--max-degree", type=int)
    p.add_argument("--build-list", type=int)
    p.add_argument("--pq-bytes", type=int)
    p.add_argument("--alpha", type=float)
    p.add_argument("--opclass", help="navis_l2_ops (real[]), navis_vector_l2_ops (vector), "
                   "vector_l2_ops (pgvector)")
    p.add_argument("--hnsw-m", type=int, default=16, help="pgvector: m")
    p.add_argument("--hnsw-ef-construction", type=int, default=64, help="pgvector: ef_construction")
    p.add_argument("--build-threads", type=int, default=2)
    p.add_argument("--lists", default="20,40,80", help="navis: navis.search_list values")
    p.add_argument("--ef-search", default="40,80,160", help="pgvector: hnsw.ef_search values")
    p.add_argument("--clients", default="1", help="concurrent client counts, e.g. 1,2,4")
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--fresh-points", action="store_true",
                   help="give every sweep point its own warm-up and timed queries (needs "
                        "clients x (warmup + queries) per point in query.fbin)")
    p.add_argument("--prime", type=int, default=0,
                   help="before the sweep, run up to N untimed queries taken from past the timed "
                        "ones (query.fbin rows --queries onwards), at the first sweep point")
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--skip-load", action="store_true", help="reuse the table")
    p.add_argument("--skip-build", action="store_true", help="reuse the index")
    p.add_argument("--json", help="write the numbers here too")
    args = resolve_system_args(p.parse_args())
    navis = args.system == "navis"

    name = os.path.basename(os.path.normpath(args.data))
    table = args.table or ("bench_" if navis and args.coltype == "real" else
                           "hnsw_" if not navis else "benchv_") + \
        "".join(c if c.isalnum() else "_" for c in name)
    index = table + "_idx"
    base = read_fbin(os.path.join(args.data, "base.fbin"))
    queries = read_fbin(os.path.join(args.data, "query.fbin"))
    gt = read_gt(os.path.join(args.data, "gt100.bin"))
    points = [(int(c), int(x)) for c in args.clients.split(",")
              for x in (args.lists if navis else args.ef_search).split(",")]
    if args.fresh_points:
        # Each point warms up and times its own queries, so no point re-reads pages an earlier
        # point read moments before (a cache below the guest serves those faster).
        sizes = [c * (args.warmup + args.queries) for c, _ in points]
        if sum(sizes) > len(queries):
            sys.exit(f"--fresh-points needs {sum(sizes)} queries for {len(points)} points, "
                     f"query.fbin has {len(queries)}")
        starts = np.cumsum([0] + sizes)
        slices = [(starts[i], starts[i + 1]) for i in range(len(points))]
        used = int(starts[-1])
    else:
        used = args.queries
        slices = [(0, max(args.queries, min(args.warmup, len(queries))))] * len(points)
    # Priming queries come from past the timed ones, so priming never warms the pages of the
    # exact queries that are then timed.
    priming = queries[used:][: args.prime]

    result = {"dataset": name, "rows": base.shape[0], "dim": base.shape[1], "system": args.system,
              "coltype": args.coltype, "opclass": args.opclass}
    conn = connect(args)
    setup_system(conn, args)
    with conn.cursor() as cur:
        kernels = "navis_distance_kernels()" if navis else \
            "(SELECT 'pgvector ' || extversion FROM pg_extension WHERE extname = 'vector')"
        cur.execute(f"SELECT version(), {kernels}, current_setting('shared_buffers'),"
                    " current_setting('maintenance_work_mem')")
        result["server"] = dict(zip(("version", "kernels", "shared_buffers", "maintenance_work_mem"),
                                    cur.fetchone()))
    result["memory"] = server_memory(conn)
    print(f"{name}: {args.system}, regime {result['memory']['regime']}", file=sys.stderr)
    if not args.skip_load:
        copy_s, vacuum_s, table_bytes = load(conn, table, base, coltype=args.coltype)
        result.update(copy_s=copy_s, vacuum_s=vacuum_s, table_bytes=table_bytes)
        print(f"{name}: COPY {base.shape[0]} rows {copy_s:.1f} s, VACUUM ANALYZE {vacuum_s:.1f} s,"
              f" table {table_bytes / 2**20:.0f} MiB", file=sys.stderr)
    if not args.skip_build:
        b = build_index(conn, table, index, args)
        result["build"] = b
        peak = b.get("backend_peak_rss")
        print(f"{name}: {b['sql']}: {b['build_s']:.1f} s"
              + (f", backend peak RSS {peak / 2**20:.0f} MiB" if peak else ""), file=sys.stderr)
    conn.close()

    rows = []
    pname = "L" if navis else "ef_search"
    if len(priming):
        prime(args, table, priming, points[0][1])
        print(f"{name}: primed with {len(priming)} queries outside the timed set", file=sys.stderr)
        result["primed_queries"] = len(priming)
    for (clients, lst), (a, b) in zip(points, slices):
        r = search(args, table, index, queries[a:b], gt[a:b], lst, clients)
        rows.append(r)
        print(f"{name}: {pname}={lst} clients={clients} recall@{args.k} {r['recall']:.4f}"
              f" QPS {r['qps']:.0f}", file=sys.stderr)
    result["search"] = rows

    b = result.get("build")
    if navis:
        print(f"\n### {name} in PostgreSQL ({base.shape[0]} x {base.shape[1]}, {args.opclass})\n")
    else:
        print(f"\n### {name} in PostgreSQL, pgvector HNSW ({base.shape[0]} x {base.shape[1]},"
              f" {args.opclass})\n")
    if b and navis:
        print("| CREATE INDEX (one run) | R / L / alpha / pq_bytes | threads | index size |"
              " edge pages |")
        print("|---|---|---|---|---|")
        print(f"| {b['build_s']:.1f} s | {b['max_degree']} / {b['build_list']} / {b['alpha']} /"
              f" {b['pq_bytes']} | {args.build_threads} | {b['index_bytes'] / 2**20:.1f} MiB |"
              f" {b['edge_pages']} |\n")
    elif b:
        print("| CREATE INDEX (one run) | m / ef_construction | threads | index size |")
        print("|---|---|---|---|")
        print(f"| {b['build_s']:.1f} s | {b['m']} / {b['ef_construction']} | {args.build_threads} |"
              f" {b['main_bytes'] / 2**20:.1f} MiB |\n")
    for clients in dict.fromkeys(r["clients"] for r in rows):
        if clients != 1:
            print(f"\n{clients} clients at once (QPS: all their queries over the wall time)\n")
        part = [r for r in rows if r["clients"] == clients]
        if navis:
            print(f"| L | recall@{args.k} | QPS | p50 µs | p99 µs | hops/q | edge pages/q |"
                  " vector loads/q | CASR w |")
            print("|---|---|---|---|---|---|---|---|---|")
            for r in part:
                print(f"| {r['list']} | {r['recall']:.4f} | {r['qps']:.0f} | {r['p50_us']:.0f} |"
                      f" {r['p99_us']:.0f} | {r['hops_q']:.1f} | {r['edge_pages_q']:.1f} |"
                      f" {r['vector_loads_q']:.1f} | {r['casr_window']} |")
        else:
            print(f"| ef_search | recall@{args.k} | QPS | p50 µs | p99 µs |")
            print("|---|---|---|---|---|")
            for r in part:
                print(f"| {r['ef_search']} | {r['recall']:.4f} | {r['qps']:.0f} | {r['p50_us']:.0f} |"
                      f" {r['p99_us']:.0f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
