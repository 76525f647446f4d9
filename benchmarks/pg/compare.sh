#!/usr/bin/env bash
# navis against pgvector HNSW inside PostgreSQL, side by side, in one memory regime (issue 7):
#
#   benchmarks/pg/compare.sh DATASET [a|b]      e.g. compare.sh minilm-200k b
#
# Runs, on one cluster and the same rows for both systems:
#   1. search only: bench.py sweeps (navis.search_list LISTS, hnsw.ef_search EFS) with 1 and 2
#      clients, after PRIME untimed queries from outside the timed set (once per system, so the
#      first point is not measured on caches a restart just emptied) and WARMUP queries per point;
#   2. inserts with concurrent searches: inserts.py, BASE rows built, INSERT rows inserted in
#      batches of BATCH by WRITERS sessions while SEARCHERS sessions search, recall after each
#      batch;
# then plots.py and a summary with the ratio navis/pgvector for each metric (summary.md).
#
# Regime a: everything cached (shared_buffers 1GB, no limit). Regime b: the server in a cgroup v1
# memory group limited to LIMIT_MB (default 384) with shared_buffers 64MB, well below table plus
# index; indexes are built before the limit (a build needs maintenance_work_mem), then the
# server is restarted inside the group with the page cache dropped. navis's edge and vector
# pages are read with O_DIRECT in both regimes, so only NAVIS-Cache (navis.cache_size, CACHE_MB,
# default 64) holds its edge pages in memory.
#
# Environment: BASE (dataset rows minus INSERT), INSERT (10% of the rows, at most 20000), BATCH,
# WRITERS (2), SEARCHERS (2), LISTS (20,40,80,160), EFS (20,40,80,160), QUERIES (1000), WARMUP
# (200), PRIME (1000, capped by the queries past QUERIES: 0 when query.fbin has no more),
# FRESH_POINTS=1 (every sweep point warms up on and times its own queries; needs clients x
# (WARMUP + QUERIES) queries per point: Fashion-MNIST's 10,000 at the defaults, MiniLM's 1,000
# with e.g. QUERIES=100 WARMUP=25), LIMIT_MB, CACHE_MB, HNSW_M (16), HNSW_EFC (64),
# NAVIS_BUILD_LIST (the index's build_list, its default when unset), SKIP_INSERTS=1 (builds and searches
# only, for the largest sets), MWM (maintenance_work_mem for both builds, 2GB; 1M x 384 needs 4GB),
# WINDOW=1 (sliding window: each insert batch also deletes the oldest BATCH rows and runs VACUUM;
# OUT and the plot names get a "-window" suffix), PERF=1 (a system-wide `perf record`
# over each system's search and insert phases; the server processes' samples by symbol in
# OUT/perf-{search,inserts}-SYSTEM.txt; PERF_OPTS replaces perf record's default "-F 499", e.g.
# "-F 999 --call-graph dwarf" for call graphs),
# FIO (1 in regime b, 0 in a: fio's random-read ceiling measured by benchmarks/device/fio_ceiling.sh
# at the start of this run, into OUT/device.json, against which the summary puts the device reads;
# 0 uses the committed benchmarks/results/device.json),
# SYSTEMS (navis,pgvector when pgvector is installed; e.g. SYSTEMS=navis for one side only, with
# PGOPTIONS="-c ..." for the sessions' settings),
# CLIENTS (1,2: the search sweeps' client counts; the targets are at 1 and 2, e.g. 1,2,4 adds the
# device share with more clients than cores),
# OUT (benchmarks/data/compare/DATASET-REGIME). The plots are also copied to
# benchmarks/results/compare/DATASET-<plot>-REGIME.png for the committed reports.
# pgvector must be installed in /usr/lib/postgresql/15 (built from source, never committed);
# without it navis runs alone and the summary says so.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DATA=${DATA:-$ROOT/benchmarks/data}
PY=${PY:-$DATA/venv/bin/python}
NAME=${1:?dataset name, e.g. minilm-200k}
REGIME=${2:-a}
D=$DATA/$NAME
# data preparation (cached) and the drivers' Python packages, so one command reproduces a report
[ -s "$D/gt100.bin" ] || bash "$ROOT/benchmarks/datasets/prepare.sh" "$NAME"
"$PY" -c 'import psycopg, matplotlib' 2>/dev/null ||
  "$DATA/venv/bin/pip" install -q --no-deps -r "$HERE/requirements.txt"
WINDOW=${WINDOW:-0}
suffix=""; [ "$WINDOW" = 1 ] && suffix=-window
OUT=${OUT:-$DATA/compare/$NAME-$REGIME$suffix}
CDIR=/tmp/navis-compare PORT=54342
ROWS=$("$PY" -c 'import sys,struct; print(struct.unpack("<I", open(sys.argv[1],"rb").read(4))[0])' "$D/base.fbin")
INSERT=${INSERT:-$(( ROWS / 10 < 20000 ? ROWS / 10 : 20000 ))}
BASE=${BASE:-$(( ROWS - INSERT ))}
BATCH=${BATCH:-$(( INSERT / 4 ))}
WRITERS=${WRITERS:-2} SEARCHERS=${SEARCHERS:-2}
CLIENTS=${CLIENTS:-1,2}
LISTS=${LISTS:-20,40,80,160} EFS=${EFS:-20,40,80,160}
QUERIES=${QUERIES:-1000} WARMUP=${WARMUP:-200} PRIME=${PRIME:-1000}
LIMIT_MB=${LIMIT_MB:-384} CACHE_MB=${CACHE_MB:-64}
HNSW_M=${HNSW_M:-16} HNSW_EFC=${HNSW_EFC:-64} MWM=${MWM:-2GB} PERF=${PERF:-0} NAVIS_BUILD_LIST=${NAVIS_BUILD_LIST:-}
mkdir -p "$OUT"
# Numbers only mean something for the release build; the test suite installs a debug one.
installed=$(/usr/lib/postgresql/15/bin/pg_config --pkglibdir)/navis.so
if ! cmp -s "$installed" "$ROOT/target/release/libnavis.so"; then
  echo "compare.sh: $installed is not this checkout's release build (the test suite installs a" \
       "debug build); run: cargo pgrx install --release --pg-config /usr/lib/postgresql/15/bin/pg_config" >&2
  exit 1
fi

# The device ceiling the summary compares reads with: measured now, before any cluster runs, so
# that it describes the disk as this run finds it (a shared virtual disk varies by the hour).
FIO=${FIO:-$([ "$REGIME" = b ] && echo 1 || echo 0)}
DEVICE_JSON=$ROOT/benchmarks/results/device.json
if [ "$FIO" = 1 ]; then
  OUT="$OUT" bash "$ROOT/benchmarks/device/fio_ceiling.sh" >/dev/null && DEVICE_JSON=$OUT/device.json
fi
# shellcheck source=../../scripts/lib/cluster.sh
source "$ROOT/scripts/lib/cluster.sh"
# shellcheck source=memlimit.sh
source "$HERE/memlimit.sh"

have_pgvector=0
[ -f /usr/share/postgresql/15/extension/vector.control ] && have_pgvector=1
systems=(navis); [ $have_pgvector = 1 ] && systems+=(pgvector)
if [ -n "${SYSTEMS:-}" ]; then   # e.g. SYSTEMS=navis: one system's side of a comparison
  read -ra systems <<<"${SYSTEMS//,/ }"
  for s in "${systems[@]}"; do
    case $s in
      navis) ;;
      pgvector) [ $have_pgvector = 1 ] || { echo "compare.sh: SYSTEMS names pgvector, which is not installed" >&2; exit 1; } ;;
      *) echo "compare.sh: SYSTEMS: unknown system '$s' (navis, pgvector)" >&2; exit 1 ;;
    esac
  done
  # an earlier run's files of a system left out would enter this run's summary
  for s in navis pgvector; do
    [[ " ${systems[*]} " == *" $s "* ]] || rm -f "$OUT"/*-"$s".*
  done
fi

shared_buffers=1GB; [ "$REGIME" = b ] && shared_buffers=64MB
cluster_start "$CDIR" "$PORT" "shared_preload_libraries = 'navis'" "shared_buffers = $shared_buffers" \
    "maintenance_work_mem = $MWM" "max_wal_size = 4GB" "navis.cache_size = '${CACHE_MB}MB'"
trap 'cluster_stop "$CDIR"; memlimit_remove compare >/dev/null 2>&1 || true' EXIT
common=(--host "$CDIR" --port "$PORT")
sysargs() {  # SYSTEM -> the driver flags that pick it
  # navis indexes the same vector(dim) column as pgvector when pgvector is there
  local navis_opts=""
  [ -z "$NAVIS_BUILD_LIST" ] || navis_opts=" --build-list $NAVIS_BUILD_LIST"
  if [ "$1" = navis ] && [ $have_pgvector = 1 ]; then echo "--system navis --coltype vector$navis_opts"
  elif [ "$1" = navis ]; then echo "--system navis$navis_opts"; else
    echo "--system pgvector --hnsw-m $HNSW_M --hnsw-ef-construction $HNSW_EFC"; fi
}

perf_start() {  # PHASE SYSTEM: a system-wide profile of one phase when PERF=1
  perf_pid=""
  [ "$PERF" = 1 ] || return 0
  # shellcheck disable=SC2086  # PERF_OPTS is a list of options
  perf record -a ${PERF_OPTS:--F 499} -o "$OUT/perf-$1-$2.data" >/dev/null 2>&1 &
  perf_pid=$!
}
perf_stop() {  # PHASE SYSTEM: the server processes' samples by symbol, as shares of their own
  [ -n "$perf_pid" ] || return 0
  kill -INT "$perf_pid"; wait "$perf_pid" || true
  perf report -i "$OUT/perf-$1-$2.data" --stdio --no-children --comm postgres \
      --percentage relative --sort dso,symbol 2>/dev/null | grep '%' | sed -E 's/ +- +- *$//' |
      head -40 >"$OUT/perf-$1-$2.txt" || true
}

# Regime b: build outside the limit, then restart inside it with a cold page cache.
enter_regime() {
  [ "$REGIME" = b ] || return 0
  cluster_stop "$CDIR"
  drop_caches
  memlimit_remove compare >/dev/null 2>&1 || true
  memlimit_create compare "${LIMIT_MB}M"
  memlimit_run compare runuser -u postgres -- env -u RUST_BACKTRACE "$PGBIN/pg_ctl" -D "$CDIR/data" \
      -l "$CDIR/server.log" -w start >/dev/null
}
leave_regime() {
  [ "$REGIME" = b ] || return 0
  memlimit_report compare >"$OUT/memlimit-$1.txt" || true
  cluster_stop "$CDIR"
  memlimit_remove compare >/dev/null 2>&1 || true
  runuser -u postgres -- env -u RUST_BACKTRACE "$PGBIN/pg_ctl" -D "$CDIR/data" -l "$CDIR/server.log" -w start >/dev/null
}

echo "== $NAME, regime $REGIME: $BASE + $INSERT rows, systems: ${systems[*]}  $(uptime)"
# 1. search only
for s in "${systems[@]}"; do
  # shellcheck disable=SC2046
  "$PY" "$HERE/bench.py" "$D" "${common[@]}" $(sysargs "$s") --lists 20 --ef-search 20 \
      --queries 10 --warmup 1 --json "$OUT/build-$s.json" >/dev/null          # load and build
done
enter_regime
for s in "${systems[@]}"; do
  perf_start search "$s"
  # shellcheck disable=SC2046
  "$PY" "$HERE/bench.py" "$D" "${common[@]}" $(sysargs "$s") --skip-load --skip-build \
      --lists "$LISTS" --ef-search "$EFS" --clients "$CLIENTS" --queries "$QUERIES" --warmup "$WARMUP" \
      --prime "$PRIME" $([ "${FRESH_POINTS:-0}" = 1 ] && echo --fresh-points) \
      --json "$OUT/search-$s.json" >"$OUT/search-$s.md"
  echo "   search $s done  $(uptime)"
  perf_stop search "$s"
done
leave_regime search

publish_plots() {  # copy OUT's PNGs to benchmarks/results/compare/ under dataset and regime names
  local f base
  mkdir -p "$ROOT/benchmarks/results/compare"
  for f in "$OUT"/*.png; do
    [ -e "$f" ] || continue
    base=$(basename "$f" .png)
    cp "$f" "$ROOT/benchmarks/results/compare/$base-$REGIME$suffix.png"
  done
}

if [ "${SKIP_INSERTS:-0}" = 1 ]; then
  (cd "$OUT" && "$PY" "$HERE/plots.py" --prefix "$NAME" search-*.json >/dev/null 2>&1) || echo "plots failed"
  publish_plots
  "$PY" "$HERE/summary.py" "$OUT" "$REGIME" "$DEVICE_JSON" | tee "$OUT/summary.md"
  exit 0
fi

# 2. inserts with concurrent searches, each system's searches at its cheapest sweep point with
# recall@10 >= 0.95 in step 1 (the largest point when none reaches it)
point() {  # SYSTEM -> that point's parameter
  "$PY" - "$OUT/search-$1.json" <<'PYEOF'
import json, sys
rows = [r for r in json.load(open(sys.argv[1]))["search"] if r["clients"] == 1]
ok = [r for r in rows if r["recall"] >= 0.95]
print(min(ok, key=lambda r: r["param"])["param"] if ok else max(r["param"] for r in rows))
PYEOF
}
navis_list=$(point navis)
window_flag=(); [ "$WINDOW" = 1 ] && window_flag=(--window)
pgv_ef=""; [[ " ${systems[*]} " == *" pgvector "* ]] && pgv_ef=$(point pgvector)
for s in "${systems[@]}"; do
  # shellcheck disable=SC2046
  "$PY" "$HERE/inserts.py" "$D" "${common[@]}" $(sysargs "$s") --base "$BASE" --insert 0 \
      --recall-every 0 >/dev/null                # load and build
done
enter_regime
for s in "${systems[@]}"; do
  # shellcheck disable=SC2046
  at=(--search-list "$navis_list"); [ "$s" = pgvector ] && at=(--ef-search "$pgv_ef")
  perf_start inserts "$s"
  "$PY" "$HERE/inserts.py" "$D" "${common[@]}" $(sysargs "$s") "${at[@]}" --reuse --base "$BASE" \
      --insert "$INSERT" --batch "$BATCH" --writers "$WRITERS" --searchers "$SEARCHERS" \
      "${window_flag[@]}" --json "$OUT/inserts-$s.json" >"$OUT/inserts-$s.md"
  echo "   inserts $s done  $(uptime)"
  perf_stop inserts "$s"
done
leave_regime inserts
"$PY" -c 'import json; print(json.dumps({"navis_cache":
    [r for r in __import__("sys").stdin.read().split("\n") if r]}))' \
    < <(cluster_psql "$CDIR" "$PORT" -At -c "SELECT name || '=' || value FROM navis_cache_stats") \
    >"$OUT/cache-stats.json" || true

# 3. plots and the side-by-side summary
(cd "$OUT" && "$PY" "$HERE/plots.py" --prefix "$NAME" search-*.json inserts-*.json >/dev/null 2>&1) || echo "plots failed"
publish_plots
"$PY" "$HERE/summary.py" "$OUT" "$REGIME" "$DEVICE_JSON" | tee "$OUT/summary.md"
