# A mixed load with LIOS on everywhere, sourced by run_cluster_tests.sh (uses the helpers of
# cluster_lios.sh): two writers insert, delete and update (each its own rows), two searchers
# run ordered scans that run queued tasks in their stalls, a maintenance session VACUUMs
# (handing repairs out as tasks) and REINDEXes once (retiring the queued tasks and any group
# a searcher holds), the background worker runs, and a hot standby replays it all. Every
# statement must succeed, every scan must return its 10 rows, and afterwards the index must be
# clean, find what an exact scan finds, and answer on the standby as on the primary.

LSDIR=/tmp/navis-clustertest-lios-stress-standby
LSPORT=54343
LOAD_SECONDS=30

# The 32-d vector of key $1 (SQL expression), as lios_rows makes them.
lios_vec() {
  echo "(SELECT array_agg(sin(($1) * (0.013 + k * 0.0071) + k * 0.9)::real ORDER BY k) FROM generate_series(0, 31) k)"
}

# Writer $1 (0 or 1) of table ls: each round inserts 20 rows, deletes 8 and moves 4 of its
# own (id % 2 = $1), one transaction per round, until the deadline.
lios_stress_writer() {
  lsql -c "SET navis.lios = on" -c "DO \$\$ DECLARE deadline timestamptz := clock_timestamp() + interval '$LOAD_SECONDS seconds';
      BEGIN WHILE clock_timestamp() < deadline LOOP
        INSERT INTO ls SELECT i, $(lios_vec i) FROM (SELECT nextval('ls_ids') * 2 + $1 AS i FROM generate_series(1, 20)) n;
        DELETE FROM ls WHERE id IN (SELECT id FROM ls WHERE id % 2 = $1 ORDER BY random() LIMIT 8);
        UPDATE ls SET v = $(lios_vec 'id + 7919') WHERE id IN (SELECT id FROM ls WHERE id % 2 = $1 ORDER BY random() LIMIT 4);
        COMMIT;
      END LOOP; END \$\$"
}

# A searcher: ordered scans of random existing rows' neighbourhoods until the deadline; a scan
# that returns fewer than 10 rows is an error.
lios_stress_searcher() {
  lsql -c "SET navis.lios = on" -c "SET enable_seqscan = off" -c "SET jit = off" \
    -c "DO \$\$ DECLARE deadline timestamptz := clock_timestamp() + interval '$LOAD_SECONDS seconds';
      q real[]; n int; scans int := 0;
      BEGIN WHILE clock_timestamp() < deadline LOOP
        q := $(lios_vec '(random() * 20000)::int');
        SELECT count(*) INTO n FROM (SELECT id FROM ls ORDER BY v <-> q LIMIT 10) s;
        IF n <> 10 THEN RAISE EXCEPTION 'scan % returned % rows', scans, n; END IF;
        scans := scans + 1;
      END LOOP; RAISE NOTICE 'scans: %', scans; END \$\$"
}

# VACUUM every 5 s, a REINDEX once in the middle.
lios_stress_maintenance() {
  local t
  for ((t = 5; t < LOAD_SECONDS; t += 5)); do
    sleep 5
    lsql -c "SET navis.lios = on" -c "VACUUM ls" || return 1
    if [ "$t" = 15 ]; then lsql -c "REINDEX INDEX ls_v" || return 1; fi
  done
}

lios_stress_spsql() { cluster_psql "$LSDIR" "$LSPORT" -v ON_ERROR_STOP=1 -At "$@"; }

# The top-10 ids of 30 queries, as "query:id" lines sorted; $1 = psql function, $2 = settings.
lios_stress_answers() {
  "$1" -c "$2" -c "SELECT string_agg(i || ':' || id, ',' ORDER BY i, id) FROM (
      SELECT q.i, t.id FROM (SELECT i, $(lios_vec 'i * 613') AS v FROM generate_series(1, 30) i) q
      CROSS JOIN LATERAL (SELECT id FROM ls ORDER BY v <-> q.v LIMIT 10) t) s" | tail -1 | tr ',' '\n' | sort
}

test_lios_mixed_load_with_standby() {
  lios_cluster_start || { fail lios_stress "cluster did not start"; return; }
  lsql -c "CREATE EXTENSION navis"
  lsql -c "CREATE TABLE ls (id bigint, v real[])" -c "CREATE SEQUENCE ls_ids START 1500"
  lsql -c "INSERT INTO ls SELECT i, $(lios_vec i) FROM generate_series(1, 3000) i"
  # (every VACUUM consolidates, handing its repairs out as tasks)
  lsql -c "CREATE INDEX ls_v ON ls USING navis (v) WITH (consolidate_threshold = 0.01)"
  NAVIS_PAGE_CACHE=0 standby_start "$LDIR" "$LPORT" "$LSDIR" "$LSPORT" "shared_preload_libraries = 'navis'" \
    "navis.cache_size = 0" "navis.lios_queue_size = 4096" ||
    { fail lios_stress "standby did not start"; cluster_stop "$LDIR"; return; }
  local logs="$LDIR/stress" pids=() names=(writer0 writer1 searcher0 searcher1 maintenance) i
  mkdir -p "$logs"
  lios_stress_writer 0 >"$logs/writer0" 2>&1 & pids+=($!)
  lios_stress_writer 1 >"$logs/writer1" 2>&1 & pids+=($!)
  lios_stress_searcher >"$logs/searcher0" 2>&1 & pids+=($!)
  lios_stress_searcher >"$logs/searcher1" 2>&1 & pids+=($!)
  lios_stress_maintenance >"$logs/maintenance" 2>&1 & pids+=($!)
  local failed=""
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || failed="$failed ${names[$i]}: $(grep -m1 -E 'ERROR|FATAL|exception' "$logs/${names[$i]}")"
  done
  local stats; stats=$(lval "SELECT string_agg(name || '=' || value::bigint, ' ' ORDER BY name) FROM navis_lios_stats
      WHERE name IN ('tasks_queued', 'repairs_queued', 'tasks_run_by_searches', 'tasks_run_by_inserters',
                     'tasks_run_by_vacuum', 'tasks_run_by_worker', 'tasks_dropped', 'tasks_failed')")
  [ -z "$failed" ] ||
    { fail lios_stress "sessions failed:$failed ($stats)"; cluster_stop "$LSDIR"; cluster_stop "$LDIR"; return; }
  local scans; scans=$(grep -ho 'scans: [0-9]*' "$logs/searcher0" "$logs/searcher1" | awk '{s += $2} END {print s + 0}')
  # The load is over: VACUUM runs what is queued (and frees what its repairs kept).
  lsql -c "SET navis.lios = on" -c "VACUUM ls" -c "VACUUM ls"
  # Every task queued is accounted for: run, dropped, failed, still queued or held by a
  # backend (none now: the sessions have ended).
  local balance; balance=$(lval "SELECT sum(value) FILTER (WHERE name IN ('tasks_queued', 'repairs_queued'))
      - sum(value) FILTER (WHERE name IN ('tasks_run_by_searches', 'tasks_run_by_vacuum', 'tasks_run_by_worker',
          'tasks_dropped', 'tasks_failed', 'queue_length', 'tasks_held_by_backends')),
      sum(value) FILTER (WHERE name = 'tasks_held_by_backends') FROM navis_lios_stats")
  [ "$balance" = "0|0" ] ||
    { fail lios_stress "tasks unaccounted for | held after the load: $balance ($stats)"; cluster_stop "$LSDIR"; cluster_stop "$LDIR"; return; }
  local rows; rows=$(lval "SELECT count(*) FROM ls")
  local verify; verify=$(lval "SELECT problems || '|' || dangling_edges || '|' || unreachable || '|' || (vertices - deleted) FROM navis_verify('ls_v')")
  [ "$verify" = "0|0|0|$rows" ] ||
    { fail lios_stress "navis_verify after the load and VACUUM: $verify (problems|dangling|unreachable|live), $rows rows ($stats)"; cluster_stop "$LSDIR"; cluster_stop "$LDIR"; return; }
  local exact found matched
  exact=$(lios_stress_answers lsql "SET enable_indexscan = off; SET enable_bitmapscan = off")
  found=$(lios_stress_answers lsql "SET enable_seqscan = off; SET navis.search_list = 40; SET navis.beam_width = 4")
  matched=$(comm -12 <(echo "$exact") <(echo "$found") | wc -l)
  [ "$matched" -ge 285 ] ||
    { fail lios_stress "recall@10 after the load: $matched/300 against an exact scan"; cluster_stop "$LSDIR"; cluster_stop "$LDIR"; return; }
  standby_catch_up "$LDIR" "$LPORT" "$LSDIR" "$LSPORT" ||
    { fail lios_stress "standby did not catch up"; cluster_stop "$LSDIR"; cluster_stop "$LDIR"; return; }
  local on_standby; on_standby=$(lios_stress_answers lios_stress_spsql "SET enable_seqscan = off; SET navis.search_list = 40; SET navis.beam_width = 4")
  local s_verify; s_verify=$(lios_stress_spsql -c "SELECT problems || '|' || dangling_edges || '|' || unreachable || '|' || (vertices - deleted) FROM navis_verify('ls_v')")
  local s_ran; s_ran=$(lios_stress_spsql -c "SELECT value::bigint FROM navis_lios_stats WHERE name = 'tasks_run_by_searches'")
  cluster_stop "$LSDIR"
  cluster_stop "$LDIR"
  [ "$on_standby" = "$found" ] && [ "$s_verify" = "$verify" ] && [ "$s_ran" = 0 ] ||
    { fail lios_stress "standby: answers $( [ "$on_standby" = "$found" ] && echo equal || echo differ), navis_verify $s_verify (primary $verify), ran $s_ran tasks"; return; }
  if grep -E "PANIC|TRAP|terminated by signal|was terminated" "$LDIR/server.log" "$LSDIR/server.log"; then
    fail lios_stress "a server process crashed (logs above)"; return
  fi
  echo "ok       lios_mixed_load_with_standby (${LOAD_SECONDS} s: 2 writers, 2 searchers ($scans scans, each 10 rows), VACUUM every 5 s, a REINDEX; $stats; every task accounted for; after VACUUM $rows rows, navis_verify clean, recall@10 $matched/300; the standby equal, ran no task)"
}
