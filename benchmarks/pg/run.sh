#!/usr/bin/env bash
# navis inside PostgreSQL against the engine alone (navis-bench), on the same data and parameters.
#
#   benchmarks/pg/run.sh [DATASET...]        default: fashion-mnist minilm-100k
#
# Needs: the extension installed in /usr/lib/postgresql/15 (release build:
#   cargo pgrx install --release --pg-config /usr/lib/postgresql/15/bin/pg_config),
# the datasets under benchmarks/data/ (benchmarks/README.md), psycopg in the dataset venv
# (benchmarks/data/venv/bin/pip install --no-deps -r benchmarks/pg/requirements.txt). Run as root.
#
# Environment: R, L, PQ (build options; unset = the index defaults 96 / 128 / from the dimension),
# QUERIES (1000), WARMUP (200), LISTS (20,40,80), THREADS (build threads, 2), OUT (where logs,
# JSON and the engine's index go: benchmarks/data/pg-results), KEEP_CLUSTER=1 leaves the cluster
# running. The cluster is /tmp/navis-pgbench on port 54340, started here and stopped at the end.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DATA=${DATA:-$ROOT/benchmarks/data}
OUT=${OUT:-$DATA/pg-results}
QUERIES=${QUERIES:-1000} WARMUP=${WARMUP:-200} LISTS=${LISTS:-20,40,80} THREADS=${THREADS:-2}
PY=${PY:-$DATA/venv/bin/python}
CDIR=/tmp/navis-pgbench PORT=54340
[ $# -gt 0 ] || set -- fashion-mnist minilm-100k
mkdir -p "$OUT"

build_opts=() engine_opts=()
[ -n "${R:-}" ] && build_opts+=(--max-degree "$R") && engine_opts+=(--max-degree "$R")
[ -n "${L:-}" ] && build_opts+=(--build-list "$L") && engine_opts+=(--build-list "$L")
[ -n "${PQ:-}" ] && build_opts+=(--pq-bytes "$PQ") && engine_opts+=(--pq-bytes "$PQ")

(cd "$ROOT" && cargo build --release -q -p navis-engine --bin navis-bench)
BENCH=$ROOT/target/release/navis-bench

# shellcheck source=../../scripts/lib/cluster.sh
source "$ROOT/scripts/lib/cluster.sh"
cluster_start "$CDIR" "$PORT" "shared_preload_libraries = 'navis'" "shared_buffers = 1GB" \
    "maintenance_work_mem = 2GB"
[ "${KEEP_CLUSTER:-}" = 1 ] || trap 'cluster_stop "$CDIR"' EXIT

for name in "$@"; do
    d=$DATA/$name
    echo "== $name  $(uptime)" | tee -a "$OUT/machine.log"
    # engine alone: same R/L/pq, same threads for the build, one client for the search,
    # index files on the same file system as the cluster
    idx=/tmp/navis-pgbench-engine/$name
    rm -rf "$idx"; mkdir -p "$(dirname "$idx")"
    "$BENCH" build --base "$d/base.fbin" --out "$idx" --metric l2 --threads "$THREADS" \
        "${engine_opts[@]}" >"$OUT/$name.engine-build.md" 2>"$OUT/$name.engine-build.log"
    "$BENCH" search --index "$idx" --queries "$d/query.fbin" --gt "$d/gt100.bin" --k 10 \
        --lists "$LISTS" --warmup "$WARMUP" --limit-queries "$QUERIES" --threads 1 \
        >"$OUT/$name.engine-search.md"
    echo "   engine done  $(uptime)" | tee -a "$OUT/machine.log"
    # PostgreSQL
    "$PY" "$HERE/bench.py" "$d" --host "$CDIR" --port "$PORT" --build-threads "$THREADS" \
        --lists "$LISTS" --queries "$QUERIES" --warmup "$WARMUP" "${build_opts[@]}" \
        --json "$OUT/$name.pg.json" >"$OUT/$name.pg.md"
    echo "   postgres done  $(uptime)" | tee -a "$OUT/machine.log"
    # engine alone again, on the very files CREATE INDEX wrote (same graph as the SQL runs)
    rel=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["build"]["relation_file"])' \
        "$OUT/$name.pg.json")
    "$BENCH" search --layout relation --index "$rel" --queries "$d/query.fbin" --gt "$d/gt100.bin" --k 10 \
        --lists "$LISTS" --warmup "$WARMUP" --limit-queries "$QUERIES" --threads 1 \
        >"$OUT/$name.engine-on-pg-index.md"
    echo "   engine on the PostgreSQL index done  $(uptime)" | tee -a "$OUT/machine.log"
    rm -rf "$idx"
    cat "$OUT/$name.engine-build.md" "$OUT/$name.engine-search.md" "$OUT/$name.pg.md" \
        "$OUT/$name.engine-on-pg-index.md"
done
