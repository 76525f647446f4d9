# Cluster tests of empty and growing indexes (RFC 0002), sourced by run_cluster_tests.sh.

# Four sessions insert into a navis index created over an empty table (some transactions roll
# back), through the rebuilds at 1, 16, 256 and 2048 rows, while a hot standby replays.
# Afterwards: every committed row is in the index and found by a k = 1 scan for its own
# vector, no rolled-back row is returned, recall@10 holds against exact search, navis_verify
# is clean, and the standby answers 50 queries exactly as the primary.
test_grow_from_empty_concurrently() {
  local sdir=/tmp/navis-clustertest-growing sport=54337
  sql -c "CREATE TABLE ge (id int PRIMARY KEY, v real[])"
  load_fmnist ge 1 0
  sql -c "CREATE INDEX ge_v ON ge USING navis (v) WITH (max_degree = 32, build_list = 64)"
  standby_start "$DIR" "$PORT" "$sdir" "$sport" "shared_preload_libraries = 'navis'"
  local k pids=()
  for k in 0 1 2 3; do
    ( for lo in $(seq $((1 + k * 5)) 20 3000); do
        sql -c "INSERT INTO ge SELECT id, v FROM fm_src WHERE id BETWEEN $lo AND $((lo + 4))" || exit 1
        if [ $(((lo / 20) % 7)) = 0 ]; then
          sql -c "BEGIN; INSERT INTO ge SELECT id + 100000, v FROM fm_src WHERE id BETWEEN $lo AND $((lo + 2)); ROLLBACK" || exit 1
        fi
      done ) >"$DIR/grow-$k.log" 2>&1 &
    pids+=($!)
  done
  local p
  for p in "${pids[@]}"; do
    wait "$p" || { fail grow_from_empty_concurrently "an inserting session failed: $(grep -h -A1 ERROR "$DIR"/grow-*.log | head -4)"; cluster_stop "$sdir"; return; }
  done
  local rows; rows=$(val "SELECT count(*) FROM ge")
  [ "$rows" = 3000 ] || { fail grow_from_empty_concurrently "$rows rows committed"; cluster_stop "$sdir"; return; }
  local stats; stats=$(val "SELECT vertices >= 3000 AND built_rows >= 2048, built_rows, retired_bytes FROM navis_index_stats('ge_v')")
  [[ "$stats" =~ ^t\| ]] || { fail grow_from_empty_concurrently "navis_index_stats: $stats"; cluster_stop "$sdir"; return; }
  local missing; missing=$(val "SET enable_seqscan = off; SELECT count(*) FROM fm_src s
      WHERE s.id <= 3000 AND s.id % 5 = 0
        AND (SELECT id FROM ge ORDER BY v <-> s.v LIMIT 1) IS DISTINCT FROM s.id" | tail -1)
  # (at most 2 of 600 may be near-duplicates a k = 1 scan resolves to another row)
  [ "$missing" -le 2 ] || { fail grow_from_empty_concurrently "$missing of 600 rows not found by a k=1 self-scan"; cluster_stop "$sdir"; return; }
  local ghosts; ghosts=$(val "SET enable_seqscan = off; SELECT count(*) FROM fm_q q,
      LATERAL (SELECT id FROM ge ORDER BY v <-> q.v LIMIT 20) n WHERE n.id > 100000" | tail -1)
  [ "$ghosts" = 0 ] || { fail grow_from_empty_concurrently "scans returned $ghosts rolled-back rows"; cluster_stop "$sdir"; return; }
  local recall; recall=$(recall_of ge)
  [ "$(val "SELECT $recall >= 0.95")" = t ] || { fail grow_from_empty_concurrently "recall@10 $recall"; cluster_stop "$sdir"; return; }
  sql -c "VACUUM ge"
  local verify; verify=$(val "SELECT clean, problems, unreachable FROM navis_verify('ge_v')")
  [ "$verify" = "t|0|0" ] || { fail grow_from_empty_concurrently "navis_verify: $verify"; cluster_stop "$sdir"; return; }
  standby_catch_up "$DIR" "$PORT" "$sdir" "$sport" ||
    { fail grow_from_empty_concurrently "standby did not catch up"; cluster_stop "$sdir"; return; }
  local q="SET navis.casr = off; SET navis.beam_width = 4; SET enable_seqscan = off;
      SELECT string_agg(n.id::text, ',' ORDER BY q.id, n.rn) FROM (SELECT id, v FROM fm_q LIMIT 50) q
      CROSS JOIN LATERAL (SELECT id, row_number() OVER () AS rn FROM (SELECT id FROM ge ORDER BY v <-> q.v LIMIT 10) s) n"
  local primary standby
  primary=$(val "$q" | tail -1)
  standby=$(cluster_psql "$sdir" "$sport" -At -c "$q" 2>&1 | tail -1)
  cluster_stop "$sdir"
  [ -n "$primary" ] && [ "$primary" = "$standby" ] ||
    { fail grow_from_empty_concurrently "primary '${primary:0:80}...', standby '${standby:0:200}'"; return; }
  sql -c "DROP TABLE ge"
  echo "ok       grow_from_empty_concurrently (4 sessions from an empty index to 3000 Fashion-MNIST rows, with rollbacks; built_rows|retired_bytes $(echo "$stats" | cut -d'|' -f2-); $missing of 600 self-scans missed; recall@10 $recall; verify clean; the standby's top-10 of 50 queries equal the primary's)"
}

# An unlogged table's index after a crash: PostgreSQL resets the main fork from the init fork
# (an empty index); the index takes rows again and finds them.
test_unlogged_index_after_crash() {
  sql -c "CREATE UNLOGGED TABLE ul (id int PRIMARY KEY, v real[])" \
      -c "CREATE INDEX ul_v ON ul USING navis (v)" \
      -c "INSERT INTO ul SELECT i, ARRAY[sin(i), cos(i), i % 5]::real[] FROM generate_series(1, 500) i"
  runuser -u postgres -- "$PGBIN/pg_ctl" -D "$DIR/data" -m immediate -w stop >/dev/null
  runuser -u postgres -- env -u RUST_BACKTRACE "$PGBIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w start >/dev/null
  local after; after=$(val "SELECT count(*), (SELECT vertices FROM navis_index_stats('ul_v')) FROM ul")
  [ "$after" = "0|0" ] || { fail unlogged_index_after_crash "after the crash: rows|vertices $after"; return; }
  sql -c "INSERT INTO ul SELECT i, ARRAY[sin(i), cos(i), i % 5]::real[] FROM generate_series(1, 40) i"
  local found; found=$(val "SET enable_seqscan = off; SELECT count(*) FROM generate_series(1, 40) g
      WHERE (SELECT id FROM ul ORDER BY v <-> ARRAY[sin(g), cos(g), g % 5]::real[] LIMIT 1) = g" | tail -1)
  sql -c "DROP TABLE ul"
  [ "$found" = 40 ] || { fail unlogged_index_after_crash "$found of 40 rows found after the reset"; return; }
  echo "ok       unlogged_index_after_crash (reset to an empty index by the crash, then 40 rows inserted and each found by a k=1 scan)"
}

# kill -9 of the whole server while 4 sessions grow an index from empty (its rebuilds at 256
# and 2048 rows run during the inserts), three times: after each restart every acknowledged
# row is in the table and every 4th is found by a k = 1 scan for its own vector, and after a
# VACUUM navis_verify is clean.
test_kill9_while_growing() {
  sql -c "CREATE TABLE kg (id int PRIMARY KEY, v real[])"
  load_fmnist kg 1 0
  sql -c "CREATE INDEX kg_v ON kg USING navis (v) WITH (max_degree = 32, build_list = 64)"
  rm -f "$DIR"/kg-acked-*.log
  local cycle k pids pause
  for cycle in 0 1 2; do
    pause=$((2 + 3 * cycle))
    pids=()
    for k in 0 1 2 3; do
      ( for lo in $(seq $((1 + cycle * 1200 + k * 5)) 20 $(((cycle + 1) * 1200))); do
          sql -c "INSERT INTO kg SELECT id, v FROM fm_src WHERE id BETWEEN $lo AND $((lo + 4))" >/dev/null || exit 0
          echo "$lo" >>"$DIR/kg-acked-$cycle-$k.log"
        done ) >/dev/null 2>&1 &
      pids+=($!)
    done
    sleep "$pause"
    kill_server
    for p in "${pids[@]}"; do wait "$p" || true; done
    runuser -u postgres -- env -u RUST_BACKTRACE "$PGBIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w start >/dev/null
    local ids; ids=$(cat "$DIR"/kg-acked-*.log 2>/dev/null | sed 's/.*/(&)/' | paste -sd, -)
    [ -n "$ids" ] || { fail kill9_while_growing "cycle $cycle: nothing acknowledged"; return; }
    local lost; lost=$(val "SELECT count(*) FROM (VALUES $ids) a(lo), generate_series(a.lo, a.lo + 4) i
        WHERE NOT EXISTS (SELECT 1 FROM kg WHERE id = i)")
    [ "$lost" = 0 ] || { fail kill9_while_growing "cycle $cycle: $lost acknowledged rows are not in the table"; return; }
    local missing; missing=$(val "SET enable_seqscan = off; SELECT count(*) FROM kg s
        WHERE s.id % 4 = 0 AND (SELECT id FROM kg ORDER BY v <-> s.v LIMIT 1) <> s.id" | tail -1)
    [ "$missing" -le 2 ] || { fail kill9_while_growing "cycle $cycle: $missing rows not found by a k=1 self-scan"; return; }
  done
  local rows stats; rows=$(val "SELECT count(*) FROM kg"); stats=$(val "SELECT built_rows FROM navis_index_stats('kg_v')")
  sql -c "VACUUM kg"
  local verify; verify=$(val "SELECT clean, problems, unreachable FROM navis_verify('kg_v')")
  sql -c "DROP TABLE kg"
  [ "$verify" = "t|0|0" ] || { fail kill9_while_growing "navis_verify after 3 kills + VACUUM: $verify"; return; }
  echo "ok       kill9_while_growing (3 kills of the server while 4 sessions grew an index from empty; $rows rows committed, all in the index and found by self-scans; last build $stats rows; verify clean after VACUUM)"
}
