#!/usr/bin/env bash
# CREATE INDEX under a small maintenance_work_mem against the in-memory build (issue 14 part 2):
# the same Fashion-MNIST rows indexed at each setting, build time (one run each, so only their
# ratio means anything on a shared machine), the building backend's peak RSS (VmHWM, read by the
# backend itself right after the build), and recall@10 of 100 test images against exact search,
# with what the NOTICE says of a memory-bounded build (its partitions, RFC 0005).
#
#   bash benchmarks/pg/build_memory.sh [ROWS] [SETTINGS...]   (defaults 60000, 64MB 1GB)
#
# Install the release build first (cargo pgrx install --release). Output: a markdown table.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/scripts/lib/cluster.sh"
ROWS=${1:-60000}
shift || true
SETTINGS=(64MB 1GB)
[ $# -eq 0 ] || SETTINGS=("$@")
D=/tmp/navis-buildmem PORT=54352
cluster_start "$D" "$PORT" "shared_preload_libraries = 'navis'" "shared_buffers = '1GB'" "max_wal_size = '8GB'"
trap 'cluster_stop "$D"' EXIT
p() { cluster_psql "$D" "$PORT" -v ON_ERROR_STOP=1 -At "$@"; }
p -c "CREATE EXTENSION navis"
source "$ROOT/benchmarks/pg/fmnist.sh"
fmnist_tables f "$ROWS"
echo "| maintenance_work_mem | CREATE INDEX (s) | backend peak RSS (MiB) | build | recall@10 |"
echo "|---|---|---|---|---|"
for m in "${SETTINGS[@]}"; do
  t0=$(date +%s.%N)
  out=$(p -c "SET maintenance_work_mem = '$m'" -c "SET max_parallel_maintenance_workers = 1" \
    -c "CREATE INDEX f_v ON f USING navis (v)" \
    -c "SELECT (regexp_match(pg_read_file('/proc/self/status'), 'VmHWM:\s+(\d+)'))[1]" 2>&1)
  t1=$(date +%s.%N)
  rss_kb=$(echo "$out" | grep -E '^[0-9]+$' | tail -1)
  parts=$(echo "$out" | grep -o 'about [0-9]* overlapping partitions of at most [0-9]* rows' || true)
  recall=$(fmnist_recall f)
  built=${parts:+memory-bounded, $parts}
  built=${built:-in memory}
  awk -v m="$m" -v t0="$t0" -v t1="$t1" -v r="$rss_kb" -v b="$built" -v rc="$recall" \
    'BEGIN { printf "| %s | %.1f | %.0f | %s | %s |\n", m, t1 - t0, r / 1024, b, rc }'
  p -c "DROP INDEX f_v"
done
echo
echo "$ROWS Fashion-MNIST rows, 2 build threads, $(nproc) cores; $(date -u +%F)."
