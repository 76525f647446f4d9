#!/usr/bin/env bash
# Read replicas under an insert stream (issue 19 part 3): a primary and one streaming hot
# standby over the same Fashion-MNIST rows. One client inserts into the primary at a fixed
# rate (pgbench -R) while search clients run ORDER BY v <-> q LIMIT 10; queries per second on
# the primary alone against the primary plus the standby, measured in the same run, and the
# standby's recall@10 after it caught up. A single run on a shared machine: read the ratios,
# not the absolute QPS. Both servers share this machine's cores, so the standby adds no CPU
# here; what the comparison shows is what a standby's scans cost beside the primary's.
#
#   bash benchmarks/pg/replicas.sh [ROWS] [SECONDS] [INSERTS_PER_SECOND]   (60000 20 50)
#
# Install the release build first (cargo pgrx install --release). Output: a markdown table.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/scripts/lib/cluster.sh"
ROWS=${1:-60000}
SECONDS_EACH=${2:-20}
RATE=${3:-50}
BUILT=$((ROWS * 5 / 6))
D=/tmp/navis-replicas PORT=54355
S=/tmp/navis-replicas-standby SPORT=54356
settings=("shared_preload_libraries = 'navis'" "shared_buffers = '1GB'" "max_wal_size = '8GB'"
  "maintenance_work_mem = '1GB'")
cluster_start "$D" "$PORT" "${settings[@]}"
trap 'cluster_stop "$S"; cluster_stop "$D"' EXIT
p() { cluster_psql "$D" "$PORT" -v ON_ERROR_STOP=1 -At "$@"; }
p -c "CREATE EXTENSION navis"
source "$ROOT/benchmarks/pg/fmnist.sh"
fmnist_tables src "$ROWS"
p -c "CREATE TABLE t (id int, v real[])" -c "INSERT INTO t SELECT id, v FROM src WHERE id <= $BUILT" \
  -c "CREATE INDEX t_v ON t USING navis (v)" -c "VACUUM ANALYZE t" -c "CHECKPOINT"
standby_start "$D" "$PORT" "$S" "$SPORT" "${settings[@]}" "hot_standby_feedback = on"
standby_catch_up "$D" "$PORT" "$S" "$SPORT"

cat >"$D/search.sql" <<'EOF'
\set qid random(1, 100)
SELECT id FROM t ORDER BY v <-> (SELECT v FROM q WHERE id = :qid) LIMIT 10;
EOF
# The rows beyond the build in turn (from the start again once all are in).
p -c "CREATE SEQUENCE next_row"
cat >"$D/insert.sql" <<EOF
INSERT INTO t SELECT id, v FROM src WHERE id = $((BUILT + 1)) + (SELECT nextval('next_row') - 1) % $((ROWS - BUILT));
EOF
chown postgres "$D"/*.sql

# bench HOST PORT CLIENTS SCRIPT [EXTRA...]: pgbench's tps.
bench() {
  local host=$1 port=$2 clients=$3 script=$4
  shift 4
  runuser -u postgres -- "$PGBIN/pgbench" -h "$host" -p "$port" -n -c "$clients" -j "$clients" \
    -T "$SECONDS_EACH" -f "$script" "$@" postgres 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p'
}

# run LABEL PRIMARY_CLIENTS STANDBY_CLIENTS INSERTS(0|1): one table row.
run() {
  local label=$1 pc=$2 sc=$3 inserting=$4 ins_pid="" pq="" sq="" ins=""
  if [ "$inserting" = 1 ]; then
    bench "$D" "$PORT" 1 "$D/insert.sql" -R "$RATE" >"$D/inserts.tps" &
    ins_pid=$!
  fi
  [ "$pc" = 0 ] || bench "$D" "$PORT" "$pc" "$D/search.sql" >"$D/primary.tps" &
  local ppid=$!
  [ "$sc" = 0 ] || bench "$S" "$SPORT" "$sc" "$D/search.sql" >"$D/standby.tps" &
  local spid=$!
  wait "$ppid" "$spid"
  [ -z "$ins_pid" ] || { wait "$ins_pid"; ins=$(cat "$D/inserts.tps"); }
  [ "$pc" = 0 ] || pq=$(cat "$D/primary.tps")
  [ "$sc" = 0 ] || sq=$(cat "$D/standby.tps")
  rm -f "$D"/*.tps
  local total; total=$(awk -v a="${pq:-0}" -v b="${sq:-0}" 'BEGIN { printf "%.1f", a + b }')
  echo "$label|${pq:--}|${sq:--}|$total|${ins:--}"
}

rows=()
rows+=("$(run "primary alone, no inserts" 2 0 0)")
rows+=("$(run "primary alone" 2 0 1)")
rows+=("$(run "primary + standby" 1 1 1)")
rows+=("$(run "standby alone (inserts on the primary)" 0 2 1)")
rows+=("$(run "standby alone, no inserts" 0 2 0)")
standby_catch_up "$D" "$PORT" "$S" "$SPORT"
# exact top-10 over the rows t has now, replayed to the standby too
p -c "DROP TABLE exact" -c "SET enable_indexscan = off" \
  -c "CREATE TABLE exact AS SELECT q.id AS qid, n.id FROM q CROSS JOIN LATERAL (SELECT id FROM t ORDER BY t.v <-> q.v LIMIT 10) n"
standby_catch_up "$D" "$PORT" "$S" "$SPORT"
sp() { cluster_psql "$S" "$SPORT" -v ON_ERROR_STOP=1 -At "$@"; }
recall_p=$(fmnist_recall t)
recall_s=$(p() { sp "$@"; }; fmnist_recall t)

echo "$BUILT Fashion-MNIST rows built, inserts of rows $((BUILT + 1))..$ROWS at $RATE/s on the primary (1 client);"
echo "$(p -c "SELECT count(*) FROM t") rows at the end;"
echo "search clients run ORDER BY v <-> q LIMIT 10; ${SECONDS_EACH} s each; recall@10 after the runs:"
echo "primary $recall_p, standby $recall_s."
echo
echo "| searches on | primary QPS | standby QPS | total QPS | inserts/s |"
echo "|---|---|---|---|---|"
for r in "${rows[@]}"; do
  IFS='|' read -r label pq sq total ins <<<"$r"
  echo "| $label | $pq | $sq | $total | $ins |"
done
