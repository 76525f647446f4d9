#!/usr/bin/env bash
# One navis index over a table against the same rows hash-partitioned into P partitions, each
# with its own navis index (issue 19 part 1): recall@10 of 100 Fashion-MNIST test images
# against exact search, and queries per second of ORDER BY v <-> q LIMIT 10 over the parent
# (a Merge Append of P index scans), one client, measured in the same run. A single run on a
# shared machine: read the ratios, not the absolute QPS.
#
#   bash benchmarks/pg/partitions.sh [ROWS] [SECONDS] [PARTITION COUNTS...]   (60000 20 1 4 16)
#
# Install the release build first (cargo pgrx install --release). Output: a markdown table.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/scripts/lib/cluster.sh"
ROWS=${1:-60000}
SECONDS_EACH=${2:-20}
shift 2 || true
COUNTS=(1 4 16)
[ $# -eq 0 ] || COUNTS=("$@")
D=/tmp/navis-partitions PORT=54354
cluster_start "$D" "$PORT" "shared_preload_libraries = 'navis'" "shared_buffers = '1GB'" \
  "max_wal_size = '8GB'" "maintenance_work_mem = '1GB'"
trap 'cluster_stop "$D"' EXIT
p() { cluster_psql "$D" "$PORT" -v ON_ERROR_STOP=1 -At "$@"; }
p -c "CREATE EXTENSION navis"
source "$ROOT/benchmarks/pg/fmnist.sh"
fmnist_tables src "$ROWS"
cat >"$D/query.sql" <<'EOF'
\set qid random(1, 100)
SELECT id FROM t ORDER BY v <-> (SELECT v FROM q WHERE id = :qid) LIMIT 10;
EOF
chown postgres "$D/query.sql"

echo "$ROWS Fashion-MNIST rows; ORDER BY v <-> q LIMIT 10, 1 client, ${SECONDS_EACH} s each"
echo
echo "| layout | recall@10 | QPS | QPS vs one index |"
echo "|---|---|---|---|"
base=""
for n in "${COUNTS[@]}"; do
  p -c "DROP TABLE IF EXISTS t"
  if [ "$n" = 1 ]; then
    p -c "CREATE TABLE t (id int, v real[])"
    layout="one table, one index"
  else
    p -c "CREATE TABLE t (id int, v real[]) PARTITION BY HASH (id)"
    for ((r = 0; r < n; r++)); do
      p -c "CREATE TABLE t_$r PARTITION OF t FOR VALUES WITH (MODULUS $n, REMAINDER $r)"
    done
    layout="$n hash partitions"
  fi
  p -c "INSERT INTO t SELECT id, v FROM src" -c "SET max_parallel_maintenance_workers = 1" \
    -c "CREATE INDEX ON t USING navis (v)" -c "VACUUM ANALYZE t"
  recall=$(fmnist_recall t)
  qps=$(runuser -u postgres -- "$PGBIN/pgbench" -h "$D" -p "$PORT" -n -c 1 -T "$SECONDS_EACH" \
    -f "$D/query.sql" postgres 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
  [ -n "$base" ] || base=$qps
  ratio=$(awk -v a="$qps" -v b="$base" 'BEGIN { printf "%.2f", a / b }')
  echo "| $layout | $recall | $qps | $ratio |"
done
