# Cluster test of hot-standby scans under a live insert stream (RFC 0001 §3, issue 19 part 3),
# sourced by run_cluster_tests.sh.

# One session on the standby runs, again and again while the primary inserts rows one by
# one, a single statement (one snapshot) that counts the rows an unbounded navis scan returns
# (relaxed order: strict order skips a vertex found after a farther one, such as one the
# build left unreachable) and the rows of the table: they must always be equal, so no scan ever answers from a
# runtime copy older than the WAL its snapshot sees. The standby's copy must have been brought
# forward page by page (standby_resyncs > 0) rather than only made again after each change.
test_standby_scans_while_the_primary_inserts() {
  local sdir=/tmp/navis-clustertest-standby2 sport=54334
  standby_start "$DIR" "$PORT" "$sdir" "$sport" "shared_preload_libraries = 'navis'"
  sql -c "CREATE TABLE live (id int PRIMARY KEY, v real[])"
  load_fmnist live 1 1500
  sql -c "CREATE INDEX live_v ON live USING navis (v) WITH (max_degree = 32, build_list = 64)"
  standby_catch_up "$DIR" "$PORT" "$sdir" "$sport" ||
    { fail standby_scans_while_the_primary_inserts "standby did not catch up"; cluster_stop "$sdir"; return; }
  touch "$DIR/live-inserting"
  ( for id in $(seq 1501 2300); do
      sql -c "INSERT INTO live SELECT id, v FROM fm_src WHERE id = $id"
      [ $((id % 100)) = 0 ] && sql -c "DELETE FROM live WHERE id = $((id - 1400))"
    done; rm -f "$DIR/live-inserting" ) >"$DIR/live-ins.log" 2>&1 &
  local inserter=$!
  local out
  out=$(cluster_psql "$sdir" "$sport" -v ON_ERROR_STOP=1 -At -c "SET enable_seqscan = off" -c "SET navis.max_scan_tuples = 1000000" \
    -c "SET navis.iterative_scan = relaxed_order" -c "
    DO \$\$ DECLARE q real[]; scanned bigint; rows bigint; first bigint; last bigint;
                   bad int := 0; runs int := 0;
    BEGIN
      SELECT v INTO q FROM fm_src WHERE id = 9001;
      FOR i IN 1..400 LOOP
        SELECT (SELECT count(*) FROM (SELECT id FROM live ORDER BY v <-> q) s), (SELECT count(*) FROM live)
          INTO scanned, rows;
        IF scanned <> rows THEN bad := bad + 1; RAISE NOTICE 'scan % rows, table %, missing %, max %', scanned, rows, (SELECT array_agg(id) FROM (SELECT id FROM live EXCEPT SELECT id FROM (SELECT id FROM live ORDER BY v <-> q) s) m), (SELECT max(id) FROM live); END IF;
        IF i = 1 THEN first := rows; END IF;
        last := rows; runs := i;
        PERFORM pg_sleep(0.01);
      END LOOP;
      RAISE NOTICE 'runs % bad % first % last %', runs, bad, first, last;
    END \$\$" -c "SELECT string_agg(counter || '=' || value, ' ' ORDER BY counter) FROM navis_index_counters('live_v')
      WHERE counter LIKE 'standby%'" 2>&1)
  wait "$inserter" || { fail standby_scans_while_the_primary_inserts "the inserting session failed: $(tail -2 "$DIR/live-ins.log")"; cluster_stop "$sdir"; return; }
  local summary; summary=$(grep -o 'runs [0-9]* bad [0-9]* first [0-9]* last [0-9]*' <<<"$out")
  read -r _ runs _ bad _ first _ last <<<"$summary"
  local counters; counters=$(tail -1 <<<"$out")
  local resyncs; resyncs=$(grep -o 'standby_resyncs=[0-9]*' <<<"$counters" | cut -d= -f2)
  if [ -z "$summary" ] || [ "$bad" != 0 ] || [ "$last" -le "$first" ] || [ "${resyncs:-0}" -eq 0 ]; then
    fail standby_scans_while_the_primary_inserts "summary '$summary', counters '$counters', output: $(grep -m3 NOTICE <<<"$out")"
    cluster_stop "$sdir"; return
  fi
  # and once caught up, the standby's index holds exactly the primary's rows
  standby_catch_up "$DIR" "$PORT" "$sdir" "$sport"
  local q="SET enable_seqscan = off; SET navis.max_scan_tuples = 1000000;
      SELECT count(*), sum(id) FROM (SELECT id FROM live ORDER BY v <-> (SELECT v FROM fm_src WHERE id = 9002)) s"
  local p s; p=$(val "$q" | tail -1); s=$(cluster_psql "$sdir" "$sport" -At -c "$q" | tail -1)
  cluster_stop "$sdir"
  [ "$p" = "$s" ] || { fail standby_scans_while_the_primary_inserts "after catch-up: primary '$p', standby '$s'"; return; }
  echo "ok       standby_scans_while_the_primary_inserts ($runs scans on the standby during 800 single-row inserts and 8 deletes: every scan returned every row of its snapshot ($first..$last rows); $counters; caught up: $s)"
}
