# Cluster test of hot-standby scans under a live insert stream (RFC 0001 §3, issue 19 part 3),
# sourced by run_cluster_tests.sh.

# One session on the standby runs, again and again while the primary inserts rows one by
# one, a single statement (one snapshot) that counts the rows an unbounded navis scan returns
# (relaxed order: strict order skips a vertex found after a farther one, such as one the
# build left unreachable) and the rows of the table: they must always be equal, so no scan ever answers from a
# runtime copy older than the WAL its snapshot sees. The standby's copy must have been brought
# forward page by page (standby_resyncs at least a quarter of the scans: one copy brought
# forward, not a copy made again after each change).
# Once the inserts are replayed, the same session's top-10 of 50 queries equal the primary's:
# its copy and the edge pages it wrote through to NAVIS-Cache hold the primary's graph.
test_standby_scans_while_the_primary_inserts() {
  local sdir=/tmp/navis-clustertest-standby2 sport=54334
  # hot_standby_feedback: the session's DO block holds one snapshot for its whole run, which
  # the primary's pruning of the deleted rows would otherwise cancel ("conflict with recovery")
  standby_start "$DIR" "$PORT" "$sdir" "$sport" "shared_preload_libraries = 'navis'" "hot_standby_feedback = on"
  sql -c "CREATE TABLE live (id int PRIMARY KEY, v real[])" -c "CREATE TABLE live_done (x int)"
  load_fmnist live 1 1500
  sql -c "CREATE INDEX live_v ON live USING navis (v) WITH (max_degree = 32, build_list = 64)"
  standby_catch_up "$DIR" "$PORT" "$sdir" "$sport" ||
    { fail standby_scans_while_the_primary_inserts "standby did not catch up"; cluster_stop "$sdir"; return; }
  ( for id in $(seq 1501 2300); do
      sql -c "INSERT INTO live SELECT id, v FROM fm_src WHERE id = $id"
      [ $((id % 100)) = 0 ] && sql -c "DELETE FROM live WHERE id = $((id - 1400))"
    done; sql -c "INSERT INTO live_done VALUES (1)" ) >"$DIR/live-ins.log" 2>&1 &
  local inserter=$!
  # top-10 of 50 queries (CASR off, as on the primary): the graph the session's copy and its
  # cached edge pages were brought forward to must be the primary's exactly
  local top10="SELECT string_agg(n.id::text, ',' ORDER BY q.id, n.rn) FROM (SELECT id, v FROM fm_src WHERE id BETWEEN 9001 AND 9050) q
      CROSS JOIN LATERAL (SELECT id, row_number() OVER () AS rn FROM (SELECT id FROM live ORDER BY v <-> q.v LIMIT 10) s) n"
  local out
  out=$(cluster_psql "$sdir" "$sport" -v ON_ERROR_STOP=1 -At -c "SET enable_seqscan = off" -c "SET navis.max_scan_tuples = 1000000" \
    -c "SET navis.iterative_scan = relaxed_order" -c "
    DO \$\$ DECLARE q real[]; scanned bigint; rows bigint; first bigint; last bigint;
                   bad int := 0; runs int := 0;
    BEGIN
      SELECT v INTO q FROM fm_src WHERE id = 9001;
      FOR i IN 1..5000 LOOP
        EXIT WHEN EXISTS (SELECT 1 FROM live_done);
        SELECT (SELECT count(*) FROM (SELECT id FROM live ORDER BY v <-> q) s), (SELECT count(*) FROM live)
          INTO scanned, rows;
        IF scanned <> rows THEN bad := bad + 1; RAISE NOTICE 'scan % rows, table %, missing %, max %', scanned, rows, (SELECT array_agg(id) FROM (SELECT id FROM live EXCEPT SELECT id FROM (SELECT id FROM live ORDER BY v <-> q) s) m), (SELECT max(id) FROM live); END IF;
        IF i = 1 THEN first := rows; END IF;
        last := rows; runs := i;
        PERFORM pg_sleep(0.01);
      END LOOP;
      RAISE NOTICE 'runs % bad % first % last %', runs, bad, first, last;
    END \$\$" -c "SET navis.casr = off; SET navis.beam_width = 4" -c "$top10" -c "SELECT string_agg(counter || '=' || value, ' ' ORDER BY counter)
      FROM navis_index_counters('live_v') WHERE counter LIKE 'standby%'" 2>&1 || true)
  wait "$inserter" || { fail standby_scans_while_the_primary_inserts "the inserting session failed: $(tail -2 "$DIR/live-ins.log")"; cluster_stop "$sdir"; return; }
  local summary; summary=$(grep -o 'runs [0-9]* bad [0-9]* first [0-9]* last [0-9]*' <<<"$out" || true)
  read -r _ runs _ bad _ first _ last <<<"$summary"
  local counters; counters=$(tail -1 <<<"$out")
  local standby_top10; standby_top10=$(tail -2 <<<"$out" | head -1)
  local primary_top10; primary_top10=$(val "SET navis.casr = off; SET navis.beam_width = 4; SET enable_seqscan = off; $top10" | tail -1)
  local resyncs; resyncs=$(grep -o 'standby_resyncs=[0-9]*' <<<"$counters" | cut -d= -f2 || true)
  if [ -z "$summary" ] || [ "$bad" != 0 ] || [ "$last" -le "$first" ] || [ "${resyncs:-0}" -lt $((${runs:-0} / 4)) ] ||
     [ "$standby_top10" != "$primary_top10" ]; then
    fail standby_scans_while_the_primary_inserts "summary '$summary', counters '$counters', top-10 equal: $([ "$standby_top10" = "$primary_top10" ] && echo yes || echo "no: '${standby_top10:0:80}' vs '${primary_top10:0:80}'"), output: $(grep -m3 -E 'NOTICE|ERROR' <<<"$out")"
    cluster_stop "$sdir"; return
  fi
  # and once caught up, the standby's index holds exactly the primary's rows
  standby_catch_up "$DIR" "$PORT" "$sdir" "$sport"
  local q="SET enable_seqscan = off; SET navis.max_scan_tuples = 1000000;
      SELECT count(*), sum(id) FROM (SELECT id FROM live ORDER BY v <-> (SELECT v FROM fm_src WHERE id = 9002)) s"
  local p s; p=$(val "$q" | tail -1); s=$(cluster_psql "$sdir" "$sport" -At -c "$q" | tail -1)
  # a new connection takes the copy the session brought forward, with its counters
  local inherited; inherited=$(cluster_psql "$sdir" "$sport" -At -c "SELECT value FROM navis_index_counters('live_v') WHERE counter = 'standby_resyncs'")
  cluster_stop "$sdir"
  [ "$p" = "$s" ] || { fail standby_scans_while_the_primary_inserts "after catch-up: primary '$p', standby '$s'"; return; }
  [ "${inherited:-0}" -ge "$resyncs" ] || { fail standby_scans_while_the_primary_inserts "a new connection's copy has standby_resyncs '$inherited', the session's had $resyncs: it made its own"; return; }
  echo "ok       standby_scans_while_the_primary_inserts ($runs scans on the standby during 800 single-row inserts and 8 deletes: every scan returned every row of its snapshot ($first..$last rows); $counters; top-10 of 50 queries then equal to the primary's; caught up: $s; a new connection reuses the copy)"
}

# Failover: a hot standby whose backends brought their copy forward (and wrote edge pages
# through to NAVIS-Cache) while the primary inserted is promoted, then takes inserts and a
# DELETE + VACUUM itself. Every row is still returned by an unbounded scan, navis_verify
# finds no problem, and recall@10 of 50 queries against exact search holds.
test_promoted_standby_takes_writes() {
  local sdir=/tmp/navis-clustertest-standby3 sport=54335
  standby_start "$DIR" "$PORT" "$sdir" "$sport" "shared_preload_libraries = 'navis'"
  sql -c "CREATE TABLE fo (id int PRIMARY KEY, v real[])"
  load_fmnist fo 1 1500
  sql -c "CREATE INDEX fo_v ON fo USING navis (v) WITH (max_degree = 32, build_list = 64)"
  standby_catch_up "$DIR" "$PORT" "$sdir" "$sport"
  local s; s() { cluster_psql "$sdir" "$sport" -v ON_ERROR_STOP=1 -At "$@"; }
  local probe="SET enable_seqscan = off; SELECT count(*) FROM (SELECT id FROM fo ORDER BY v <-> (SELECT v FROM fm_src WHERE id = 9003) LIMIT 10) x"
  # one standby session keeps scanning while the primary inserts, so its copy is brought
  # forward and its NAVIS-Cache frames written through
  ( for id in $(seq 1501 1800); do sql -c "INSERT INTO fo SELECT id, v FROM fm_src WHERE id = $id"; done ) >/dev/null 2>&1 &
  local ins=$!
  s -c "DO \$\$ BEGIN FOR i IN 1..300 LOOP PERFORM count(*) FROM (SELECT id FROM fo ORDER BY v <-> (SELECT v FROM fm_src WHERE id = 9000 + i % 50) LIMIT 10) x; PERFORM pg_sleep(0.01); END LOOP; END \$\$" >/dev/null
  wait "$ins"
  # the primary goes on changing the index after the standby's last scan, then stops
  sql -c "INSERT INTO fo SELECT id, v FROM fm_src WHERE id BETWEEN 1801 AND 1900"
  standby_catch_up "$DIR" "$PORT" "$sdir" "$sport"
  cluster_stop "$DIR"
  runuser -u postgres -- "$PGBIN/pg_ctl" -D "$sdir/data" -w promote >/dev/null
  local out
  out=$(s -c "INSERT INTO fo SELECT id, v FROM fm_src WHERE id BETWEEN 1901 AND 2300" \
          -c "DELETE FROM fo WHERE id % 7 = 0" -c "VACUUM fo" \
          -c "SELECT clean::text || ' ' || problems || ' ' || unreachable FROM navis_verify('fo_v')" \
          -c "SET enable_seqscan = off" -c "SET navis.iterative_scan = relaxed_order" -c "SET navis.max_scan_tuples = 1000000" \
          -c "SELECT (SELECT count(*) FROM (SELECT id FROM fo ORDER BY v <-> (SELECT v FROM fm_src WHERE id = 9004)) x) || ' of ' || (SELECT count(*) FROM fo)" \
          -c "SET navis.iterative_scan = strict_order" \
          -c "SELECT round(count(*)::numeric / 500, 3) FROM (SELECT id, v FROM fm_src WHERE id BETWEEN 9001 AND 9050) q,
                LATERAL (SELECT id FROM fo ORDER BY v <-> q.v LIMIT 10) a
              WHERE a.id IN (SELECT id FROM (SELECT id, v FROM fo) e ORDER BY e.v <-> q.v LIMIT 10)" 2>&1 || true)
  cluster_stop "$sdir"
  # the shared test cluster was stopped for the failover: start it again for later tests
  runuser -u postgres -- env -u RUST_BACKTRACE "$PGBIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w start >/dev/null
  local verify rows recall
  verify=$(sed -n 1p <<<"$out"); rows=$(sed -n 2p <<<"$out"); recall=$(sed -n 3p <<<"$out")
  local total; total=$(awk '{print $3}' <<<"$rows")
  if [ "$(awk '{print $1, $2}' <<<"$verify")" != "true 0" ] || [ -z "$total" ] ||
     [ "$(awk '{print $1}' <<<"$rows")" != "$total" ] || [ "$total" -lt 1900 ] ||
     ! awk -v r="$recall" 'BEGIN { exit !(r >= 0.9) }'; then
    fail promoted_standby_takes_writes "after promotion: verify '$verify', unbounded scan '$rows', recall '$recall'; output: ${out:0:300}"
    return
  fi
  echo "ok       promoted_standby_takes_writes (standby scanned during 300 inserts, 100 more replayed, promoted; then 400 inserts, DELETE of a seventh, VACUUM: navis_verify clean/problems/unreachable '$verify', unbounded scan $rows rows, recall@10 $recall)"
}
