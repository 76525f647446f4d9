#!/usr/bin/env bash
# What the insert that crosses a rebuild threshold of a growing index costs (RFC 0002): the
# Fashion-MNIST rows inserted into an index created over an empty table, and the wall time of
# single-row INSERTs just before and at the thresholds of 2,048 and 16,384 rows (each a psql
# call, so about 20 ms of it is client start-up). One run on a shared machine.
#
#   bash benchmarks/pg/rebuild_time.sh [MAINTENANCE_WORK_MEM]   (default 256MB: 16,384 rows of
#   784 dimensions need more than 64MB, and at 64MB that rebuild does not happen)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/scripts/lib/cluster.sh"
MEM=${1:-256MB}
D=/tmp/navis-rebuildtime PORT=54355
cluster_start "$D" "$PORT" "shared_preload_libraries = 'navis'" "maintenance_work_mem = '$MEM'"
trap 'cluster_stop "$D"' EXIT
p() { cluster_psql "$D" "$PORT" -v ON_ERROR_STOP=1 -At "$@"; }
p -c "CREATE EXTENSION navis"
# Train image ids start at 0: ids 0..n-1 are the first n rows.
python3 "$ROOT/scripts/fashion_mnist_copy.py" train 16384 |
  p -c "CREATE TABLE src (id int PRIMARY KEY, label int, v real[]); COPY src FROM STDIN"
p -c "CREATE TABLE g (id int PRIMARY KEY, v real[])" -c "CREATE INDEX g_v ON g USING navis (v)"
row() {  # insert train image $1 (the ($1 + 1)-th row) and print its time and the build size
  local a b built
  a=$(date +%s.%N)
  p -c "INSERT INTO g SELECT id, v FROM src WHERE id = $1" >/dev/null
  b=$(date +%s.%N)
  built=$(p -c "SELECT built_rows FROM navis_index_stats('g_v')")
  awk -v a="$a" -v b="$b" -v n=$(($1 + 1)) -v k="$built" \
    'BEGIN { printf "| %d | %.2f | %d |\n", n, b - a, k }'
}
echo "maintenance_work_mem $MEM"
echo
echo "| row inserted | INSERT (s) | built_rows after |"
echo "|---|---|---|"
p -c "INSERT INTO g SELECT id, v FROM src WHERE id < 2046" >/dev/null
row 2046; row 2047
p -c "INSERT INTO g SELECT id, v FROM src WHERE id BETWEEN 2048 AND 16381" >/dev/null
row 16382; row 16383
