#!/usr/bin/env bash
# The Aker result cache on the paper's workload shape (issue 17), one dataset, one memory regime:
#
#   benchmarks/pg/aker.sh DATASET [a|b]      e.g. aker.sh fashion-mnist a
#
# Runs aker.py (see its docstring: simZipf groups of 50 similar queries, Zipf 0.30/0.60/0.99,
# 20,000 requests, no cache / a fixed global threshold / Aker, then the refresh stress test)
# against a throwaway cluster. The result cache gets one partition (navis.result_cache_indexes
# = 1) sized for POOL neighbour objects (default: as many as REQUESTS; objects take 60% of a
# partition). The paper's pools were 1-5% of 10M rows for 100K requests, i.e. 1-5 objects per
# request; a percentage of these small tables would give a few hundred entries for 20,000
# requests, so the pool follows the request stream instead, at the paper's 1% ratio.
# Regime a: everything cached (shared_buffers 1GB). Regime b: the server in a cgroup memory
# group limited to LIMIT_MB (default 384, as compare.sh) with shared_buffers 64MB; the index
# is built before the limit, then the server restarts inside it with a cold page cache.
# Environment: REQUESTS, ZIPF, CONFIGS, LIST (navis.search_list, default 40), NGROUPS, RESERVE
# (navis.result_cache_reserve, default 10; the paper's search experiments used 0), REFRESH
# (1: run the refresh stress test, default), LIMIT_MB, CACHE_MB (NAVIS-Cache, 64), POOL,
# OUT (benchmarks/data/aker/DATASET-REGIME). Needs the release build installed, as compare.sh.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DATA=${DATA:-$ROOT/benchmarks/data}
PY=${PY:-$DATA/venv/bin/python}
NAME=${1:?dataset name, e.g. fashion-mnist}
REGIME=${2:-a}
D=$DATA/$NAME
[ -s "$D/gt100.bin" ] || bash "$ROOT/benchmarks/datasets/prepare.sh" "$NAME"
"$PY" -c 'import psycopg' 2>/dev/null || "$DATA/venv/bin/pip" install -q --no-deps -r "$HERE/requirements.txt"
OUT=${OUT:-$DATA/aker/$NAME-$REGIME}
CDIR=/tmp/navis-aker PORT=54343
LIMIT_MB=${LIMIT_MB:-384} CACHE_MB=${CACHE_MB:-64}
REQUESTS=${REQUESTS:-20000} ZIPF=${ZIPF:-0.30,0.60,0.99} CONFIGS=${CONFIGS:-none,fixed,aker}
LIST=${LIST:-40} NGROUPS=${NGROUPS:-1000} REFRESH=${REFRESH:-1} RESERVE=${RESERVE:-10}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)   # aker.py runs from benchmarks/pg
installed=$(/usr/lib/postgresql/15/bin/pg_config --pkglibdir)/navis.so
if ! cmp -s "$installed" "$ROOT/target/release/libnavis.so"; then
  echo "aker.sh: $installed is not this checkout's release build; run:" \
       "cargo pgrx install --release --pg-config /usr/lib/postgresql/15/bin/pg_config" >&2
  exit 1
fi
read -r ROWS DIM < <("$PY" -c 'import sys,struct; print(*struct.unpack("<II", open(sys.argv[1],"rb").read(8)))' "$D/base.fbin")
POOL=${POOL:-$REQUESTS}
# objects of (dim + 10) words each are 60% of the partition
RC_MB=$(( (POOL * 4 * (DIM + 10) * 10 / 6 + (1 << 20) - 1) / (1 << 20) + 1 ))
# shellcheck source=../../scripts/lib/cluster.sh
source "$ROOT/scripts/lib/cluster.sh"
# shellcheck source=memlimit.sh
source "$HERE/memlimit.sh"
shared_buffers=1GB; [ "$REGIME" = b ] && shared_buffers=64MB
cluster_start "$CDIR" "$PORT" "shared_preload_libraries = 'navis'" "shared_buffers = $shared_buffers" \
    "maintenance_work_mem = 2GB" "max_wal_size = 4GB" "navis.cache_size = '${CACHE_MB}MB'" \
    "navis.result_cache_size = '${RC_MB}MB'" "navis.result_cache_indexes = 1"
trap 'cluster_stop "$CDIR"; memlimit_remove aker >/dev/null 2>&1 || true' EXIT
refresh=(); [ "$REFRESH" = 1 ] && refresh=(--refresh)
args=("$D" --host "$CDIR" --port "$PORT" --requests "$REQUESTS" --zipf "$ZIPF" --configs "$CONFIGS"
      --search-list "$LIST" --groups "$NGROUPS" --reserve "$RESERVE" "${refresh[@]}")
echo "== $NAME, regime $REGIME: result cache ${RC_MB}MB (a pool of $POOL objects, $ROWS rows), $(uptime)"
(cd "$HERE" && "$PY" aker.py "${args[@]}" --load-only)
if [ "$REGIME" = b ]; then
  cluster_stop "$CDIR"
  drop_caches
  memlimit_remove aker >/dev/null 2>&1 || true
  memlimit_create aker "${LIMIT_MB}M"
  memlimit_run aker runuser -u postgres -- env -u RUST_BACKTRACE "$PGBIN/pg_ctl" -D "$CDIR/data" \
      -l "$CDIR/server.log" -w start >/dev/null
fi
(cd "$HERE" && "$PY" aker.py "${args[@]}" --skip-load --json "$OUT/aker.json") | tee "$OUT/aker.md"
[ "$REGIME" = b ] && memlimit_report aker >"$OUT/memlimit.txt" || true
