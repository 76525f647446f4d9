# Cluster test of the read-ahead of scan rows (src/read_ahead.rs), sourced by
# run_cluster_tests.sh. The SQL suite (pg_test/sql/read_ahead.sql) covers what it reads
# ahead and when; this one needs a restart (and a hot standby): shared buffers are empty
# afterwards, so the heap and TOAST pages of the rows returned are not there and their reads
# are started.
test_read_ahead_starts_reads_missing_from_shared_buffers() {
  sql -c "CREATE TABLE rah (id int PRIMARY KEY, v real[])" \
      -c "ALTER TABLE rah ALTER COLUMN v SET STORAGE EXTERNAL" >/dev/null
  # 600 uncompressed dimensions (2.4 KB): every value out of line (Fashion-MNIST rows copied
  # from fm_src would stay compressed inline)
  sql -c "INSERT INTO rah SELECT i, array_agg(sin(i * 0.37 + j * 0.011)::real ORDER BY j)
          FROM generate_series(1, 3000) i, generate_series(1, 600) j GROUP BY i" >/dev/null
  sql -c "CREATE INDEX rah_v ON rah USING navis (v)" >/dev/null
  local answers="SET enable_seqscan = off;
       SELECT string_agg(r, ';' ORDER BY qid) FROM (SELECT q.id AS qid,
         (SELECT string_agg(id::text, ',' ORDER BY d, id) FROM (SELECT id, v <-> q.v AS d FROM rah
            ORDER BY v <-> q.v LIMIT 10) s) AS r FROM rah q WHERE q.id % 100 = 1) t;"
  local off on stats standby sstats
  off=$(val "SET effective_io_concurrency = 0; $answers" | tail -1)
  restart_with
  local with_stats="$answers SELECT string_agg(name || '=' || value, ' ' ORDER BY name) FROM navis_read_ahead_stats;"
  on=$(val "$with_stats")
  stats=$(echo "$on" | tail -1); on=$(echo "$on" | sed -n '1p')
  # a hot standby (started from a base backup, so its shared buffers are empty) reads ahead
  # the same way: visibility and TOAST lookups during recovery
  local sdir=/tmp/navis-clustertest-standby-ra sport=54338
  standby_start "$DIR" "$PORT" "$sdir" "$sport" "shared_preload_libraries = 'navis'"
  standby=$(cluster_psql "$sdir" "$sport" -v ON_ERROR_STOP=1 -At -c "$with_stats" 2>&1)
  cluster_stop "$sdir"
  sstats=$(echo "$standby" | tail -1); standby=$(echo "$standby" | sed -n '1p')
  sql -c "DROP TABLE rah" >/dev/null
  [ -n "$off" ] && [ "$on" = "$off" ] && [ "$standby" = "$off" ] ||
    { fail read_ahead_starts_reads_missing_from_shared_buffers "answers differ: off '${off:0:80}', on '${on:0:80}', standby '${standby:0:80}'"; return; }
  local stat n where line
  for where in primary standby; do
    line=$stats; [ $where = standby ] && line=$sstats
    for stat in rows heap_blocks_not_buffered toast_values toast_blocks_not_buffered; do
      n=$(echo "$line" | tr ' ' '\n' | sed -n "s/^$stat=//p")
      [ -n "$n" ] && [ "$n" -gt 0 ] ||
        { fail read_ahead_starts_reads_missing_from_shared_buffers "$stat is '$n' on the $where: $line"; return; }
    done
  done
  echo "ok       read_ahead_starts_reads_missing_from_shared_buffers (30 scans after a restart and on a hot standby, the same answers as with effective_io_concurrency = 0; primary: $stats; standby: $sstats)"
}
