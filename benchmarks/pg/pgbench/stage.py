#!/usr/bin/env python3
"""Staging tables and the index for pgbench.sh (benchmarks/pg/pgbench/):

    stage.py DATA_DIR --base N --nrows M [--nqueries Q] [--system navis|pgvector] [bench.py's
             build options] [--host --port]

pgb_items        the first N rows of base.fbin (ids 0..N-1), indexed (navis or hnsw)
pgb_stage_insert the next M rows (ids 1..M), what insert.sql inserts
pgb_stage_query  the first Q rows of query.fbin (ids 1..Q), what search.sql searches for
Tables are loaded with bench.py's binary COPY; the column is real[] for navis (vector(dim) with
--coltype vector) and vector(dim) for pgvector. Prints the CREATE INDEX and its time.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from bench import (build_index, connect, load, read_fbin, resolve_system_args,  # noqa: E402
                   setup_system)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data")
    p.add_argument("--host", default="/tmp/navis-pgbench")
    p.add_argument("--port", type=int, default=54340)
    p.add_argument("--user", default="postgres")
    p.add_argument("--dbname", default="postgres")
    p.add_argument("--system", choices=("navis", "pgvector"), default="navis")
    p.add_argument("--coltype", choices=("real", "vector"))
    p.add_argument("--opclass")
    p.add_argument("--base", type=int, required=True)
    p.add_argument("--nrows", type=int, required=True)
    p.add_argument("--nqueries", type=int, default=1000)
    p.add_argument("--max-degree", type=int)
    p.add_argument("--build-list", type=int)
    p.add_argument("--pq-bytes", type=int)
    p.add_argument("--alpha", type=float)
    p.add_argument("--hnsw-m", type=int, default=16)
    p.add_argument("--hnsw-ef-construction", type=int, default=64)
    p.add_argument("--build-threads", type=int, default=2)
    args = resolve_system_args(p.parse_args())
    base = read_fbin(os.path.join(args.data, "base.fbin"))
    queries = read_fbin(os.path.join(args.data, "query.fbin"))
    if args.base + args.nrows > base.shape[0]:
        p.error(f"--base + --nrows > {base.shape[0]} rows in base.fbin")
    nq = min(args.nqueries, queries.shape[0])
    conn = connect(args)
    setup_system(conn, args)
    load(conn, "pgb_items", base[:args.base], coltype=args.coltype)
    for table, rows in (("pgb_stage_insert", base[args.base:args.base + args.nrows]),
                        ("pgb_stage_query", queries[:nq])):
        load(conn, table, rows, coltype=args.coltype)
        conn.execute(f"UPDATE {table} SET id = id + 1")
        conn.execute(f"ALTER TABLE {table} ADD PRIMARY KEY (id)")
        conn.execute(f"VACUUM ANALYZE {table}")
    b = build_index(conn, "pgb_items", "pgb_items_idx", args)
    conn.execute("ANALYZE pgb_items")
    print(f"{b['sql']}: {b['build_s']:.1f} s, {b['index_bytes'] / 2**20:.1f} MiB; "
          f"staged {args.nrows} insert rows and {nq} queries")


if __name__ == "__main__":
    main()
