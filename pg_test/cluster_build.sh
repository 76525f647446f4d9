# Cluster tests of the memory-bounded build (issue 14 part 2, RFC 0005), sourced by
# run_cluster_tests.sh: what another session sees of it, and what a cancel or a crash in the
# middle of it leaves behind.

# $2 rows of 64 dimensions in table $1: 50 clusters, uniform noise around each centre.
build_rows() {
  sql -c "SELECT setseed(0.25)" -c "CREATE TABLE $1 AS SELECT i AS id,
            (SELECT array_agg(sin((i % 50) * j) + random() * 0.5 + i * 0)::real[] FROM generate_series(1, 64) j) AS v
          FROM generate_series(1, $2) i" >/dev/null
}

# navis's build files in the temporary-file directory (spool and list files).
build_files() { val "SELECT count(*) FROM pg_ls_tmpdir() WHERE name LIKE 'pgsql_tmp_navis_build%'"; }

# Polls pg_stat_progress_create_index until the CREATE INDEX running in another session ends;
# prints each distinct (phase, tuples_total, whether tuples_done <= tuples_total) seen (the
# scan counts rows against no total).
watch_progress() {
  # One session samples every 2 ms, clearing its statistics snapshot each time, until the
  # build it saw ends (or none starts within 60 s); each distinct row is raised once as a
  # NOTICE. (A new psql per sample every 20 ms once missed the short partitioning phase.)
  sql -c "DO \$\$
    DECLARE r record; seen text[] := '{}'; started boolean := false; t0 timestamptz := clock_timestamp();
    BEGIN
      LOOP
        PERFORM pg_stat_clear_snapshot();
        FOR r IN SELECT phase || '|' || tuples_total || '|' ||
                        (tuples_done <= tuples_total OR phase LIKE '%scanning table') AS s
                   FROM pg_stat_progress_create_index LOOP
          started := true;
          IF NOT r.s = ANY (seen) THEN
            seen := seen || r.s;
            RAISE NOTICE 'progress %', r.s;
          END IF;
        END LOOP;
        EXIT WHEN started AND NOT FOUND;
        EXIT WHEN NOT started AND clock_timestamp() - t0 > interval '60 seconds';
        PERFORM pg_sleep(0.002);
      END LOOP;
    END \$\$" 2>&1 | sed -n 's/^NOTICE:  progress //p' | sort -u
}

# A build of 40,000 rows at 4MB of maintenance_work_mem runs memory-bounded: another session
# sees its phases in pg_stat_progress_create_index (partitioning, the graph build
# over each row's partitions), never more tuples done than the total; the
# NOTICE names the partitions; the index then answers exactly as a seqscan for rows it holds,
# and its spool files are gone.
test_memory_bounded_build_progress() {
  build_rows mb_rows 40000
  cluster_psql "$DIR" "$PORT" -v ON_ERROR_STOP=1 -At -c "SET maintenance_work_mem = '4MB'" \
    -c "CREATE INDEX mb_v ON mb_rows USING navis (v)" >"$DIR/mb_build.out" 2>&1 &
  local pid=$!
  local seen; seen=$(watch_progress)
  wait "$pid" || { fail memory_bounded_build_progress "CREATE INDEX failed: $(cat "$DIR/mb_build.out")"; return; }
  grep -q 'about [0-9]* overlapping partitions of at most' "$DIR/mb_build.out" ||
    { fail memory_bounded_build_progress "no NOTICE naming the partitions: $(cat "$DIR/mb_build.out")"; return; }
  local phase
  # (The table scan and the writing are too short here to be seen for sure.)
  for phase in "partitioning rows (memory-bounded build)" "building graph"; do
    echo "$seen" | grep -qF "building index: $phase|" ||
      { fail memory_bounded_build_progress "phase '$phase' never seen; saw: $(echo "$seen" | tr '\n' ';')"; return; }
  done
  echo "$seen" | grep -q '|f$' &&
    { fail memory_bounded_build_progress "tuples_done above tuples_total: $(echo "$seen" | tr '\n' ';')"; return; }
  # The graph phase counts every row in each of its partitions (one or two), the partitioning
  # phase each row twice (two passes).
  local graph_total; graph_total=$(echo "$seen" | sed -n 's/^building index: building graph|\([0-9]*\)|.*/\1/p' | head -1)
  [ "${graph_total:-0}" -gt 40000 ] && [ "$graph_total" -le 80000 ] ||
    { fail memory_bounded_build_progress "the graph phase counts '$graph_total' rows, not 40,000-80,000: $(echo "$seen" | tr '\n' ';')"; return; }
  echo "$seen" | grep -q "^building index: partitioning rows (memory-bounded build)|80000|" ||
    { fail memory_bounded_build_progress "the partitioning phase does not count 2 x 40,000 rows: $(echo "$seen" | tr '\n' ';')"; return; }
  local found; found=$(val "SET enable_seqscan = off; SELECT count(*) FROM (SELECT id FROM mb_rows WHERE id % 97 = 0) r
    WHERE r.id = (SELECT id FROM mb_rows ORDER BY v <-> (SELECT v FROM mb_rows WHERE id = r.id) LIMIT 1)" | tail -1)
  [ "$found" = 412 ] || { fail memory_bounded_build_progress "$found of 412 rows found themselves"; return; }
  [ "$(build_files)" = 0 ] || { fail memory_bounded_build_progress "build files left in pgsql_tmp"; return; }
  sql -c "DROP TABLE mb_rows"
  echo "ok       memory_bounded_build_progress (phases seen: $(echo "$seen" | cut -d'|' -f1 | sed 's/building index: //' | sort -u | paste -sd, -); $graph_total rows in partitions; 412 of 412 rows find themselves; no build files left)"
}

# A memory-bounded build cancelled while it builds partitions leaves no index and no files;
# one whose server crashes in the middle leaves files that the restart removes.
test_memory_bounded_build_cancel_and_crash() {
  build_rows mbc_rows 60000
  local attempt pid state
  cluster_psql "$DIR" "$PORT" -At -c "SET maintenance_work_mem = '4MB'" -c "SET application_name = 'mbc'" \
    -c "CREATE INDEX mbc_v ON mbc_rows USING navis (v)" >"$DIR/mbc_build.out" 2>&1 &
  pid=$!
  for attempt in $(seq 1 500); do
    state=$(val "SELECT phase FROM pg_stat_progress_create_index p JOIN pg_stat_activity a USING (pid)
                 WHERE a.application_name = 'mbc'")
    [ "$state" = "building index: building graph" ] && break
    sleep 0.02
  done
  [ "$state" = "building index: building graph" ] || { fail memory_bounded_build_cancel_and_crash "never saw the graph phase (last: '$state')"; wait "$pid"; return; }
  local files_during; files_during=$(build_files)
  val "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'mbc'" >/dev/null
  wait "$pid" && { fail memory_bounded_build_cancel_and_crash "the cancelled build succeeded"; return; }
  grep -q 'canceling statement due to user request' "$DIR/mbc_build.out" ||
    { fail memory_bounded_build_cancel_and_crash "not a cancel: $(cat "$DIR/mbc_build.out")"; return; }
  [ "$files_during" -ge 2 ] || { fail memory_bounded_build_cancel_and_crash "$files_during build files while building (spool and lists expected)"; return; }
  [ "$(build_files)" = 0 ] || { fail memory_bounded_build_cancel_and_crash "build files left after the cancel"; return; }
  [ "$(val "SELECT count(*) FROM pg_class WHERE relname = 'mbc_v'")" = 0 ] ||
    { fail memory_bounded_build_cancel_and_crash "the cancelled index exists"; return; }

  cluster_psql "$DIR" "$PORT" -At -c "SET maintenance_work_mem = '4MB'" -c "SET application_name = 'mbc'" \
    -c "CREATE INDEX mbc_v ON mbc_rows USING navis (v)" >/dev/null 2>&1 &
  pid=$!
  for attempt in $(seq 1 500); do
    [ "$(build_files)" -ge 2 ] && break
    sleep 0.02
  done
  local before; before=$(build_files)
  runuser -u postgres -- "$PGBIN/pg_ctl" -D "$DIR/data" -m immediate -w stop >/dev/null
  wait "$pid" || true
  runuser -u postgres -- env -u RUST_BACKTRACE "$PGBIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w start >/dev/null
  [ "$before" -ge 2 ] || { fail memory_bounded_build_cancel_and_crash "no build files seen before the crash"; return; }
  [ "$(build_files)" = 0 ] || { fail memory_bounded_build_cancel_and_crash "build files left after the restart"; return; }
  [ "$(val "SELECT count(*) FROM pg_class WHERE relname = 'mbc_v'")" = 0 ] ||
    { fail memory_bounded_build_cancel_and_crash "the crashed build's index exists"; return; }
  sql -c "DROP TABLE mbc_rows"
  echo "ok       memory_bounded_build_cancel_and_crash (cancel in the graph phase: no index, the $files_during build files removed; crash: $before files, removed by the restart)"
}
