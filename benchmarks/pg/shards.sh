#!/usr/bin/env bash
# postgres_fdw shards (issue 19 part 2): a coordinator cluster holds a hash-partitioned parent
# whose partitions are foreign tables in N shard clusters on this machine, each with its own
# navis index; `extensions 'navis'` on every foreign server lets postgres_fdw push the
# distance operator and ORDER BY to the shards, and the coordinator merges (Merge Append). The
# same rows in one table on one server are the baseline. Reports recall@10 of 100
# Fashion-MNIST test images against exact search and queries per second of
# ORDER BY v <-> q LIMIT 10 over the parent, one client, for each shard count, with the
# foreign servers' default fetch_size (100) and with fetch_size 10 (= LIMIT). A single run on
# a shared 2-core machine: read the ratios, not the absolute QPS. Sets the topology up and
# tears it down (every cluster is stopped on exit).
#
#   bash benchmarks/pg/shards.sh [ROWS] [SECONDS] [SHARD COUNTS...]   (60000 20 1 2 3)
#
# Install the release build first (cargo pgrx install --release). Output: a markdown table.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/scripts/lib/cluster.sh"
ROWS=${1:-60000}
SECONDS_EACH=${2:-20}
shift 2 || true
COUNTS=(1 2 3)
[ $# -eq 0 ] || COUNTS=("$@")
MAX_SHARDS=$(printf '%s\n' "${COUNTS[@]}" | sort -n | tail -1)
C=/tmp/navis-shards-c CPORT=54360
settings=("shared_preload_libraries = 'navis'" "shared_buffers = '512MB'" "max_wal_size = '8GB'"
  "maintenance_work_mem = '1GB'")
shard_dir() { echo "/tmp/navis-shards-$1"; }
shard_port() { echo $((54360 + $1)); }
stop_all() {
  cluster_stop "$C"
  for ((s = 1; s <= MAX_SHARDS; s++)); do cluster_stop "$(shard_dir "$s")"; done
}
trap stop_all EXIT
cluster_start "$C" "$CPORT" "${settings[@]}"
for ((s = 1; s <= MAX_SHARDS; s++)); do
  cluster_start "$(shard_dir "$s")" "$(shard_port "$s")" "${settings[@]}"
  cluster_psql "$(shard_dir "$s")" "$(shard_port "$s")" -v ON_ERROR_STOP=1 -q -c "CREATE EXTENSION navis"
done
p() { cluster_psql "$C" "$CPORT" -v ON_ERROR_STOP=1 -At "$@"; }
p -c "CREATE EXTENSION navis" -c "CREATE EXTENSION postgres_fdw"
source "$ROOT/benchmarks/pg/fmnist.sh"
fmnist_tables src "$ROWS"
for ((s = 1; s <= MAX_SHARDS; s++)); do
  p -c "CREATE SERVER shard$s FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '$(shard_dir "$s")',
          port '$(shard_port "$s")', dbname 'postgres', extensions 'navis', async_capable 'true',
          batch_size '200')" \
    -c "CREATE USER MAPPING FOR postgres SERVER shard$s OPTIONS (user 'postgres')"
done
cat >"$C/query.sql" <<'EOF'
\set qid random(1, 100)
SELECT id FROM t ORDER BY v <-> (SELECT v FROM q WHERE id = :qid) LIMIT 10;
EOF
chown postgres "$C/query.sql"
qps() {
  runuser -u postgres -- "$PGBIN/pgbench" -h "$C" -p "$CPORT" -n -c 1 -T "$SECONDS_EACH" \
    -f "$C/query.sql" postgres 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p'
}

echo "$ROWS Fashion-MNIST rows; ORDER BY v <-> q LIMIT 10 over the parent, 1 client, ${SECONDS_EACH} s each"
echo
echo "| layout | fetch_size | recall@10 | QPS | QPS vs one server | ms per query | navis scans on shard 1 |"
echo "|---|---|---|---|---|---|---|"
p -c "CREATE TABLE t (id int, v real[])" -c "INSERT INTO t SELECT id, v FROM src" \
  -c "CREATE INDEX ON t USING navis (v)" -c "VACUUM ANALYZE t"
base=$(qps)
echo "| one server, one index | - | $(fmnist_recall t) | $base | 1.00 | $(awk -v q="$base" 'BEGIN { printf "%.2f", 1000 / q }') | - |"
p -c "DROP TABLE t"
for n in "${COUNTS[@]}"; do
  p -c "CREATE TABLE t (id int, v real[]) PARTITION BY HASH (id)"
  for ((s = 1; s <= n; s++)); do
    sp() { cluster_psql "$(shard_dir "$s")" "$(shard_port "$s")" -v ON_ERROR_STOP=1 -q "$@"; }
    sp -c "DROP TABLE IF EXISTS t" -c "CREATE TABLE t (id int, v real[])"
    p -c "CREATE FOREIGN TABLE t_$s PARTITION OF t FOR VALUES WITH (MODULUS $n, REMAINDER $((s - 1)))
            SERVER shard$s OPTIONS (table_name 't')"
  done
  p -c "INSERT INTO t SELECT id, v FROM src"
  for ((s = 1; s <= n; s++)); do
    cluster_psql "$(shard_dir "$s")" "$(shard_port "$s")" -v ON_ERROR_STOP=1 -q \
      -c "SET max_parallel_maintenance_workers = 1" -c "CREATE INDEX ON t USING navis (v)" -c "VACUUM ANALYZE t"
  done
  p -c "ANALYZE t"
  for fetch in 100 10; do
    for ((s = 1; s <= n; s++)); do
      p -c "ALTER SERVER shard$s OPTIONS (ADD fetch_size '$fetch')" 2>/dev/null ||
        p -c "ALTER SERVER shard$s OPTIONS (SET fetch_size '$fetch')"
    done
    scans() {
      cluster_psql "$(shard_dir 1)" "$(shard_port 1)" -At -c "SELECT pg_stat_force_next_flush()" \
        -c "SELECT coalesce(sum(idx_scan), 0) FROM pg_stat_user_indexes WHERE relname = 't'" | tail -1
    }
    before=$(scans)
    recall=$(fmnist_recall t)
    got=$(qps)
    sleep 1
    used=$(($(scans) - before))
    echo "| $n shard$([ "$n" = 1 ] || echo s) (postgres_fdw) | $fetch | $recall | $got | $(awk -v a="$got" -v b="$base" 'BEGIN { printf "%.2f", a / b }') | $(awk -v q="$got" 'BEGIN { printf "%.2f", 1000 / q }') | $used |"
  done
  p -c "DROP TABLE t"
done
echo
echo "Plan over 2 shards (EXPLAIN VERBOSE):"
echo
echo '```'
p -c "CREATE TABLE t (id int, v real[]) PARTITION BY HASH (id)" \
  -c "CREATE FOREIGN TABLE t_1 PARTITION OF t FOR VALUES WITH (MODULUS 2, REMAINDER 0) SERVER shard1 OPTIONS (table_name 't')" \
  -c "CREATE FOREIGN TABLE t_2 PARTITION OF t FOR VALUES WITH (MODULUS 2, REMAINDER 1) SERVER shard2 OPTIONS (table_name 't')" \
  -c "EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM t ORDER BY v <-> (SELECT v FROM q WHERE id = 1) LIMIT 10" 2>/dev/null |
  sed 's/{[^}]*}/{...}/g'
echo '```'
