#!/usr/bin/env bash
# Tests that need a whole cluster rather than one session: several client connections at
# once, and a crash (immediate shutdown) followed by restart. Each test is a shell function
# named test_*; they share one throwaway cluster started with navis preloaded.
#   bash pg_test/run_cluster_tests.sh          # assumes navis is installed (scripts/test.sh does it)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/cluster.sh

DIR=/tmp/navis-clustertest
PORT=54331
failures=0

sql() { cluster_psql "$DIR" "$PORT" -v ON_ERROR_STOP=1 -At "$@"; }

fail() { echo "FAILED   $1: $2"; failures=$((failures + 1)); }

# Several sessions compute distances at the same time; every session must see exactly the
# results a single session computes (the kernels and validation keep no shared state).
test_concurrent_sessions() {
  sql -c "CREATE TABLE pts AS SELECT i, ARRAY[sin(i), cos(i), i % 7]::real[] AS v FROM generate_series(1, 20000) i"
  local query="SELECT string_agg(i::text, ',' ORDER BY d, i) FROM (SELECT i, v <-> '{0.5,0.5,3}' AS d FROM pts ORDER BY d, i LIMIT 25) s"
  local expected; expected=$(sql -c "$query")
  local pids=() n
  for n in 1 2 3 4 5 6; do
    ( for _ in 1 2 3; do sql -c "$query"; done >"$DIR/session-$n.out" ) &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || { fail concurrent_sessions "a session failed"; return; }; done
  for n in 1 2 3 4 5 6; do
    while read -r line; do
      [ "$line" = "$expected" ] || { fail concurrent_sessions "session $n saw '$line'"; return; }
    done <"$DIR/session-$n.out"
    [ "$(wc -l <"$DIR/session-$n.out")" = 3 ] || { fail concurrent_sessions "session $n ran $(wc -l <"$DIR/session-$n.out") queries"; return; }
  done
  echo "ok       concurrent_sessions (6 sessions x 3 queries, identical results)"
}

# A crash (immediate shutdown, as after a backend crash) and restart: the postmaster
# re-creates navis's shared memory and lock tranche, and data survives.
test_crash_restart() {
  sql -c "CREATE TABLE keep AS SELECT 1 AS x"
  runuser -u postgres -- "$PGBIN/pg_ctl" -D "$DIR/data" -m immediate -w stop >/dev/null
  runuser -u postgres -- env -u RUST_BACKTRACE "$PGBIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w start >/dev/null
  local row; row=$(sql -c "SELECT preloaded, vertex_lock_stripes FROM navis_shared_memory()")
  [ "$row" = "t|1024" ] || { fail crash_restart "shared memory after restart: '$row'"; return; }
  local d; d=$(sql -c "SELECT '{1,2}'::real[] <-> '{4,6}'::real[]")
  [ "$d" = 5 ] || { fail crash_restart "distance after restart: '$d'"; return; }
  [ "$(sql -c 'SELECT x FROM keep')" = 1 ] || { fail crash_restart "table lost"; return; }
  grep -q "database system was not properly shut down" "$DIR/server.log" ||
    { fail crash_restart "server did not run crash recovery"; return; }
  echo "ok       crash_restart (immediate stop, recovery, shared memory re-created)"
}

cluster_start "$DIR" "$PORT" "shared_preload_libraries = 'navis'"
trap 'cluster_stop "$DIR"' EXIT
sql -c "CREATE EXTENSION navis"
for t in $(declare -F | awk '{print $3}' | grep '^test_'); do
  "$t"
done
if [ "$failures" != 0 ]; then
  echo "cluster tests FAILED: $failures"
  exit 1
fi
echo "cluster tests passed"
