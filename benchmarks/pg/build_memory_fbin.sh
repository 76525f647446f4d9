#!/usr/bin/env bash
# The memory-bounded build on an .fbin dataset against the in-memory build of the same rows
# (issue 14 part 2 asks for the 1M set at the default 64MB): for each maintenance_work_mem,
# bench.py loads the table once, times one CREATE INDEX (2 threads), reports the building
# backend's peak RSS and recall@10 / QPS of single-client searches. One run each: only the
# ratio of the build times means anything on a shared machine.
#
#   bash benchmarks/pg/build_memory_fbin.sh DATA_DIR [SETTINGS...]   (defaults 4GB 64MB)
#   e.g. bash benchmarks/datasets/prepare.sh synthetic-1m
#        bash benchmarks/pg/build_memory_fbin.sh benchmarks/data/synthetic-1m
#
# Install the release build first. Environment: QUERIES (500), LISTS (40,80), OUT (where the
# JSON and logs go: benchmarks/data/pg-results). Output: each run's summary lines.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DATA_DIR=$1
shift
SETTINGS=(4GB 64MB)
[ $# -eq 0 ] || SETTINGS=("$@")
PY=${PY:-$ROOT/benchmarks/data/venv/bin/python}
OUT=${OUT:-$ROOT/benchmarks/data/pg-results}
mkdir -p "$OUT"
CDIR=/tmp/navis-buildmem-fbin PORT=54353
source "$ROOT/scripts/lib/cluster.sh"
cluster_start "$CDIR" "$PORT" "shared_preload_libraries = 'navis'" "shared_buffers = 1GB" \
  "max_wal_size = 16GB"
trap 'cluster_stop "$CDIR"' EXIT
name=$(basename "$DATA_DIR")
skip=()
for m in "${SETTINGS[@]}"; do
  log=$OUT/buildmem-$name-$m.log
  PGOPTIONS="-c maintenance_work_mem=$m" "$PY" "$HERE/bench.py" "$DATA_DIR" --host "$CDIR" \
    --port "$PORT" --build-threads 2 --queries "${QUERIES:-500}" --warmup 100 \
    --lists "${LISTS:-40,80}" "${skip[@]}" --json "$OUT/buildmem-$name-$m.json" \
    >"$OUT/buildmem-$name-$m.md" 2>"$log"
  skip=(--skip-load)
  echo "maintenance_work_mem $m:"
  grep -E 'CREATE INDEX|recall@' "$log" | sed 's/^/  /'
done
