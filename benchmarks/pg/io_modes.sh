#!/usr/bin/env bash
# navis in memory (regime a) with its edge and vector pages read with O_DIRECT (the default) or through
# the page cache (NAVIS_DIRECT=0 in the server's environment): how much of navis's in-memory
# search and insert cost is device round trips. Also the A/B harness for a change of the
# installed build (run once per build with a different TAG on the same cluster).
#
#   FRESH=1 MODE=direct   TAG=direct   benchmarks/pg/io_modes.sh fashion-mnist
#           MODE=buffered TAG=buffered benchmarks/pg/io_modes.sh fashion-mnist
#
# FRESH=1 starts the cluster (/tmp/navis-iomodes, port 54344, shared_buffers 1GB) and loads and
# builds the search table; later runs restart the same cluster in MODE. Each run: a search sweep
# (navis.search_list 20, 40, 80; 1 and 2 clients; 200 warm-up + 1,000 queries per client), then
# 10% of the rows (at most 3,000) inserted in 2 batches by 2 sessions while 2 search at L = 20,
# on a freshly built table; `perf record` of each phase. Output: benchmarks/data/compare/io-modes/
# {search,inserts,perf-search,perf-inserts}-TAG.{md,json,txt}.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DATA=${DATA:-$ROOT/benchmarks/data}
PY=${PY:-$DATA/venv/bin/python}
NAME=${1:?dataset name, e.g. fashion-mnist}
MODE=${MODE:-direct} TAG=${TAG:-$MODE}
D=$DATA/$NAME OUT=${OUT:-$DATA/compare/io-modes}
C=/tmp/navis-iomodes P=54344
mkdir -p "$OUT"
[ -s "$D/gt100.bin" ] || bash "$ROOT/benchmarks/datasets/prepare.sh" "$NAME"
# shellcheck source=../../scripts/lib/cluster.sh
source "$ROOT/scripts/lib/cluster.sh"
common=(--host "$C" --port "$P")
ROWS=$("$PY" -c 'import sys,struct; print(struct.unpack("<I", open(sys.argv[1],"rb").read(4))[0])' "$D/base.fbin")
INSERT=$(( ROWS / 10 < 3000 ? ROWS / 10 : 3000 ))
if [ "${FRESH:-0}" = 1 ]; then
  cluster_start "$C" "$P" "shared_preload_libraries = 'navis'" "shared_buffers = 1GB" \
      "maintenance_work_mem = 2GB" "max_wal_size = 4GB"
  "$PY" "$HERE/bench.py" "$D" "${common[@]}" --lists 20 --queries 10 --warmup 1 >/dev/null
fi
cluster_stop "$C"
envs=(-u RUST_BACKTRACE); [ "$MODE" = buffered ] && envs+=(NAVIS_DIRECT=0)
runuser -u postgres -- env "${envs[@]}" "$PGBIN/pg_ctl" -D "$C/data" -l "$C/server.log" -w start >/dev/null

profile() {  # PHASE: stop the running perf and keep the server processes' hottest symbols
  kill -INT "$pp"; wait "$pp" || true
  perf report -i "$OUT/perf-$1-$TAG.data" --stdio --no-children --comm postgres \
      --percentage relative --sort dso,symbol 2>/dev/null | grep '%' | sed -E 's/ +- +- *$//' |
      head -30 >"$OUT/perf-$1-$TAG.txt" || true
}
perf record -a -F 499 -o "$OUT/perf-search-$TAG.data" >/dev/null 2>&1 & pp=$!
"$PY" "$HERE/bench.py" "$D" "${common[@]}" --skip-load --skip-build --lists 20,40,80 --clients 1,2 \
    --queries 1000 --warmup 200 --json "$OUT/search-$TAG.json" >"$OUT/search-$TAG.md"
profile search
perf record -a -F 499 -o "$OUT/perf-inserts-$TAG.data" >/dev/null 2>&1 & pp=$!
"$PY" "$HERE/inserts.py" "$D" "${common[@]}" --base $((ROWS - INSERT)) --insert "$INSERT" \
    --batch $((INSERT / 2)) --writers 2 --searchers 2 --search-list 20 --recall-every 0 \
    --json "$OUT/inserts-$TAG.json" >"$OUT/inserts-$TAG.md"
profile inserts
echo "== $NAME, $TAG ($MODE)"
grep -A6 '^| L ' "$OUT/search-$TAG.md" | head -6
grep averages "$OUT/inserts-$TAG.md"
