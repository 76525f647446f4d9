#!/usr/bin/env bash
# WAL written by navis and by pgvector HNSW for the same rows, and how long a hot standby takes
# to replay it (RFC 0001; issue 13's benchmarks). Deterministic counters first: WAL bytes of
# CREATE INDEX and per inserted row, split by resource manager with pg_walinspect (navis's own
# records are rmgr "navis"; pgvector logs its build as full-page images, rmgr "XLOG", and its
# inserts as GenericXLog records, rmgr "Generic"); then replay
# time of the inserts' WAL on a streaming standby whose replay was paused during them, as a
# ratio between the two systems measured in the same run.
#
#   bash benchmarks/pg/wal.sh [BUILD_ROWS] [INSERT_ROWS]     (defaults 10000 and 5000)
#
# Fashion-MNIST rows from the Debian package (scripts/fashion_mnist_copy.py): BUILD_ROWS train
# images are indexed, the next INSERT_ROWS are inserted 10 rows per statement by one session.
# Both systems at their defaults (navis R = 96, L = 96; pgvector m = 16, ef_construction = 64).
# pgvector is used when its extension is installed in /usr/lib/postgresql/15; without it navis
# runs alone. Install the release build first (cargo pgrx install --release); output goes to
# stdout as a markdown table.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/scripts/lib/cluster.sh"
BUILD_ROWS=${1:-10000}
INSERT_ROWS=${2:-5000}
P=/tmp/navis-walbench S=/tmp/navis-walbench-standby PPORT=54350 SPORT=54351

systems=(navis)
[ -f /usr/share/postgresql/15/extension/vector.control ] && systems+=(pgvector)

cluster_start "$P" "$PPORT" "shared_preload_libraries = 'navis'" "max_wal_size = '4GB'" \
  "checkpoint_timeout = '1h'" "shared_buffers = '1GB'" "maintenance_work_mem = '1GB'"
trap 'cluster_stop "$S"; cluster_stop "$P"' EXIT
p() { cluster_psql "$P" "$PPORT" -v ON_ERROR_STOP=1 -At "$@"; }
s() { cluster_psql "$S" "$SPORT" -v ON_ERROR_STOP=1 -At "$@"; }

p -c "CREATE EXTENSION navis" -c "CREATE EXTENSION pg_walinspect"
[ ${#systems[@]} = 2 ] && p -c "CREATE EXTENSION vector"
python3 "$ROOT/scripts/fashion_mnist_copy.py" train $((BUILD_ROWS + INSERT_ROWS)) |
  p -c "CREATE TABLE src (id int PRIMARY KEY, label int, v real[]); COPY src FROM STDIN"
# A slot keeps the WAL the standby has not received (the checkpoints below would recycle it).
p -c "SELECT pg_create_physical_replication_slot('walbench', true)" >/dev/null
standby_start "$P" "$PPORT" "$S" "$SPORT" "shared_preload_libraries = 'navis'" "shared_buffers = '1GB'" \
  "primary_slot_name = 'walbench'"

# WAL between two LSNs: total bytes, and the bytes of one resource manager.
wal_bytes() { p -c "SELECT pg_wal_lsn_diff('$2', '$1')::bigint"; }
rmgr_bytes() {
  p -c "SELECT coalesce(sum(combined_size), 0) FROM pg_get_wal_stats('$1', '$2')
        WHERE \"resource_manager/record_type\" IN ($3)"
}

echo "| system | CREATE INDEX WAL (MB) | of it index records (MB) | index size (MB) | WAL per inserted row (KB) | of it index records (KB) | standby replay of the inserts (s) |"
echo "|---|---|---|---|---|---|---|"
for sys in "${systems[@]}"; do
  case $sys in
    navis) col="v real[]"; cast="real[]"; using="USING navis (v)"; rmgr="'navis'"; build_rmgr="'navis'" ;;
    pgvector) col="v vector(784)"; cast="vector(784)"; using="USING hnsw (v vector_l2_ops)"; rmgr="'Generic'"; build_rmgr="'XLOG', 'Generic'" ;;
  esac
  p -c "CREATE TABLE t_$sys (id int PRIMARY KEY, $col)" \
    -c "INSERT INTO t_$sys SELECT id, v::$cast FROM src WHERE id <= $BUILD_ROWS" \
    -c "CHECKPOINT"
  a=$(p -c "SELECT pg_current_wal_insert_lsn()")
  p -c "SET max_parallel_maintenance_workers = 1" -c "CREATE INDEX i_$sys ON t_$sys $using" >/dev/null
  b=$(p -c "SELECT pg_current_wal_insert_lsn()")
  build_total=$(wal_bytes "$a" "$b"); build_index=$(rmgr_bytes "$a" "$b" "$build_rmgr")
  size=$(p -c "SELECT pg_relation_size('i_$sys')")
  # inserts while the standby's replay is paused, then time the replay alone
  standby_catch_up "$P" "$PPORT" "$S" "$SPORT" 600
  s -c "SELECT pg_wal_replay_pause()" >/dev/null
  p -c "CHECKPOINT"
  until [ "$(s -c "SELECT pg_get_wal_replay_pause_state()")" = paused ]; do sleep 0.1; done
  a=$(p -c "SELECT pg_current_wal_insert_lsn()")
  for ((lo = BUILD_ROWS + 1; lo <= BUILD_ROWS + INSERT_ROWS; lo += 10)); do
    echo "INSERT INTO t_$sys SELECT id, v::$cast FROM src WHERE id BETWEEN $lo AND $((lo + 9));"
  done | p >/dev/null
  b=$(p -c "SELECT pg_current_wal_insert_lsn()")
  ins_total=$(wal_bytes "$a" "$b"); ins_index=$(rmgr_bytes "$a" "$b" "$rmgr")
  # the standby has received all of it (replay is paused, reception is not)
  until [ "$(s -c "SELECT pg_last_wal_receive_lsn() >= '$b'::pg_lsn")" = t ]; do sleep 0.1; done
  t0=$(date +%s.%N)
  s -c "SELECT pg_wal_replay_resume()" >/dev/null
  until [ "$(s -c "SELECT pg_last_wal_replay_lsn() >= '$b'::pg_lsn")" = t ]; do sleep 0.05; done
  t1=$(date +%s.%N)
  awk -v sys="$sys" -v bt="$build_total" -v bi="$build_index" -v sz="$size" -v it="$ins_total" \
      -v ii="$ins_index" -v n="$INSERT_ROWS" -v t0="$t0" -v t1="$t1" 'BEGIN {
    printf "| %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", sys, bt / 2^20, bi / 2^20, sz / 2^20,
      it / n / 1024, ii / n / 1024, t1 - t0 }'
done
echo
echo "$BUILD_ROWS Fashion-MNIST rows indexed, $INSERT_ROWS inserted 10 per statement by one session; $(nproc) cores; $(date -u +%F)."
