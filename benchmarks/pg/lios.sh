#!/usr/bin/env bash
# LIOS on and off (issue 18): inserts with concurrent searches, one dataset, one memory regime.
#
#   benchmarks/pg/lios.sh DATASET [a|b]      e.g. lios.sh fashion-mnist b
#
# For each configuration in CONFIGS (default "off 0.02 0.05 0.10": LIOS off, then on with
# navis.lios_latency_budget = θ), on a fresh cluster: load BASE rows and build the index
# (inserts.py --insert 0), then, in regime b, restart the server in a cgroup memory group of
# LIMIT_MB (default 200: at compare.sh's 384 the 50,000-row index and its table fit as navis
# reads them, so the searches meet almost no I/O stall; lios.md) with a cold page cache; then
# inserts.py: SEARCHERS sessions search alone for BASELINE seconds (the no-update baseline),
# then WRITERS sessions insert INSERT rows in batches of BATCH while the searchers go on;
# recall@10 after each batch and after the final VACUUM; navis_lios_stats over the run.
# Regime a: shared_buffers 1GB, no limit. The navis.lios setting is set in every session of
# the run (writers, searchers, and the one that runs VACUUM).
# WINDOW=1 is the delete-plus-VACUUM variant (inserts.py --window): after each batch's inserts,
# with the searchers still running, the BATCH oldest rows are deleted and the table VACUUMed
# (with BATCH >= 10% of the rows, the VACUUM consolidates: with LIOS on it hands its list
# repairs out as tasks); results go to DATASET-REGIME-window.
# Environment: BASE (50000), INSERT (5000), BATCH (INSERT), WRITERS (2), SEARCHERS (1),
# BASELINE (20), CONFIGS, LIST (navis.search_list, default 40), LIMIT_MB, CACHE_MB (NAVIS-Cache,
# 64), WORKER (navis.lios_worker, default on; with off the result files are named
# lios-CONFIG-noworker), OUT (benchmarks/data/lios/DATASET-REGIME). Needs the release build
# installed.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DATA=${DATA:-$ROOT/benchmarks/data}
PY=${PY:-$DATA/venv/bin/python}
NAME=${1:?dataset name, e.g. fashion-mnist}
REGIME=${2:-b}
D=$DATA/$NAME
[ -s "$D/gt100.bin" ] || bash "$ROOT/benchmarks/datasets/prepare.sh" "$NAME"
"$PY" -c 'import psycopg' 2>/dev/null || "$DATA/venv/bin/pip" install -q --no-deps -r "$HERE/requirements.txt"
WINDOW=${WINDOW:-}
OUT=${OUT:-$DATA/lios/$NAME-$REGIME${WINDOW:+-window}}
CDIR=/tmp/navis-lios PORT=54344
LIMIT_MB=${LIMIT_MB:-200} CACHE_MB=${CACHE_MB:-64}
BASE=${BASE:-50000} INSERT=${INSERT:-5000} BATCH=${BATCH:-$INSERT} WRITERS=${WRITERS:-2}
SEARCHERS=${SEARCHERS:-1} BASELINE=${BASELINE:-20} LIST=${LIST:-40}
CONFIGS=${CONFIGS:-off 0.02 0.05 0.10}
WORKER=${WORKER:-on}
suffix=; [ "$WORKER" = on ] || suffix=-noworker
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
installed=$(/usr/lib/postgresql/15/bin/pg_config --pkglibdir)/navis.so
if ! cmp -s "$installed" "$ROOT/target/release/libnavis.so"; then
  echo "lios.sh: $installed is not this checkout's release build; run:" \
       "cargo pgrx install --release --pg-config /usr/lib/postgresql/15/bin/pg_config" >&2
  exit 1
fi
# shellcheck source=../../scripts/lib/cluster.sh
source "$ROOT/scripts/lib/cluster.sh"
# shellcheck source=memlimit.sh
source "$HERE/memlimit.sh"
shared_buffers=1GB; [ "$REGIME" = b ] && shared_buffers=64MB
trap 'cluster_stop "$CDIR"; memlimit_remove lios >/dev/null 2>&1 || true' EXIT
common=("$D" --host "$CDIR" --port "$PORT" --base "$BASE" --search-list "$LIST")
echo "== $NAME, regime $REGIME: $BASE rows built, $INSERT inserted by $WRITERS writers while $SEARCHERS search; configs: $CONFIGS; $(uptime)"
for config in $CONFIGS; do
  memlimit_remove lios >/dev/null 2>&1 || true
  cluster_start "$CDIR" "$PORT" "shared_preload_libraries = 'navis'" "shared_buffers = $shared_buffers" \
      "maintenance_work_mem = 2GB" "max_wal_size = 4GB" "navis.cache_size = '${CACHE_MB}MB'" \
      "navis.lios_worker = $WORKER"
  (cd "$HERE" && "$PY" inserts.py "${common[@]}" --insert 0 >/dev/null)
  if [ "$REGIME" = b ]; then
    cluster_stop "$CDIR"
    drop_caches
    memlimit_create lios "${LIMIT_MB}M"
    memlimit_run lios runuser -u postgres -- env -u RUST_BACKTRACE "$PGBIN/pg_ctl" -D "$CDIR/data" \
        -l "$CDIR/server.log" -w start >/dev/null
  fi
  settings=(--set "navis.lios=off")
  [ "$config" = off ] || settings=(--set "navis.lios=on" --set "navis.lios_latency_budget=$config")
  echo "-- LIOS $config  $(uptime)"
  [ -n "$WINDOW" ] && settings+=(--window)
  (cd "$HERE" && "$PY" inserts.py "${common[@]}" --reuse --insert "$INSERT" --batch "$BATCH" \
      --writers "$WRITERS" --searchers "$SEARCHERS" --baseline-seconds "$BASELINE" "${settings[@]}" \
      --json "$OUT/lios-$config$suffix.json") | tee "$OUT/lios-$config$suffix.md"
  [ "$REGIME" = b ] && memlimit_report lios >"$OUT/memlimit-$config$suffix.txt" || true
  cluster_stop "$CDIR"
done
