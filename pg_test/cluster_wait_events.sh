# Cluster test of navis's wait events (issue 16 part 1), sourced by run_cluster_tests.sh.

# While one session runs unbounded scans (exhaustive rounds read every vector page), another
# samples pg_stat_activity: the scanning backend is seen waiting on IO / DataFileRead, as a
# backend reading any relation's data file is. The index is evicted from the page cache first
# (as after a reboot): reads the page cache serves do not wait (RFC 0006).
test_wait_events_show_navis_reads() {
  sql -c "CREATE TABLE we (id int PRIMARY KEY, v real[])"
  load_fmnist we 1 10000
  sql -c "CREATE INDEX we_v ON we USING navis (v) WITH (max_degree = 32, build_list = 64)"
  sql -c "CHECKPOINT" -c "SELECT navis_test_drop_page_cache('we_v'::regclass)" >/dev/null
  ( val "SET enable_seqscan = off; SET navis.max_scan_tuples = 1000000;
         SELECT count(*) FROM generate_series(1, 6) g, LATERAL (SELECT id FROM we
           ORDER BY v <-> (SELECT v FROM fm_src WHERE id = g * 7) OFFSET 0) s /* navis_wait_probe */" >/dev/null ) &
  local scanner=$!
  local seen; seen=$(val "DO \$\$ DECLARE n int := 0; k int := 0; BEGIN
      FOR i IN 1..3000 LOOP
        PERFORM pg_stat_clear_snapshot();
        EXIT WHEN NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE query LIKE '%navis_wait_probe%' AND pid <> pg_backend_pid()) AND i > 50;
        k := k + 1;
        n := n + (SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'IO' AND wait_event = 'DataFileRead'
                  AND query LIKE '%navis_wait_probe%' AND pid <> pg_backend_pid())::int;
        PERFORM pg_sleep(0.002);
      END LOOP;
      RAISE NOTICE 'waits % of % samples', n, k; END \$\$" 2>&1 | sed -n 's/.*waits \([0-9]* of [0-9]*\) samples.*/\1/p')
  wait "$scanner" || { fail wait_events_show_navis_reads "the scanning session failed"; return; }
  sql -c "DROP TABLE we"
  local n=${seen%% *}
  [ -n "$n" ] && [ "$n" -ge 1 ] || { fail wait_events_show_navis_reads "the scanning backend was never seen in DataFileRead ($seen samples)"; return; }
  echo "ok       wait_events_show_navis_reads (IO/DataFileRead in $seen samples of pg_stat_activity during unbounded scans)"
}

# Reads come from the page cache while it holds the index (just built); once the kernel dropped
# it, the first visit of each page goes to the device, and since the index fits in memory that
# read goes through the page cache (RFC 0006 addendum), so the next backend's same scans are
# served from there again; pg_prewarm leaves it there too. Each probe is a new backend running
# 100 ordered scans; it reports the share of its bytes read that the page cache served. (An
# index that does not fit keeps its misses off the page cache: engine/src/page_cache.rs tests.)
test_page_cache_serves_reads_until_evicted() {
  sql -c "CREATE TABLE pc (id int PRIMARY KEY, v real[])"
  load_fmnist pc 1 3000
  sql -c "CREATE INDEX pc_v ON pc USING navis (v)" >/dev/null
  share() {
    val "SET enable_seqscan = off;
         SELECT count(*) FROM fm_q q, LATERAL (SELECT id FROM pc ORDER BY v <-> q.v LIMIT 10) n;
         SELECT round(page_cache_bytes::numeric / greatest(bytes_read, 1), 2) FROM navis_index_stats('pc_v')" | tail -1
  }
  local fresh evicted refilled again
  fresh=$(share)
  sql -c "CHECKPOINT" -c "SELECT navis_test_drop_page_cache('pc_v'::regclass)" >/dev/null
  evicted=$(share)
  refilled=$(share)
  sql -c "CREATE EXTENSION IF NOT EXISTS pg_prewarm" -c "SELECT pg_prewarm('pc_v', 'read')" >/dev/null
  again=$(share)
  sql -c "DROP TABLE pc" -c "DROP EXTENSION pg_prewarm" >/dev/null
  awk -v a="$fresh" -v b="$evicted" -v r="$refilled" -v c="$again" \
      'BEGIN { exit !(a >= 0.9 && b <= 0.9 && r >= 0.9 && c >= 0.9) }' ||
    { fail page_cache_serves_reads_until_evicted "page-cache share of bytes read: fresh '$fresh', evicted '$evicted', next backend '$refilled', prewarmed '$again'"; return; }
  echo "ok       page_cache_serves_reads_until_evicted (share of bytes read from the page cache: $fresh just built, $evicted evicted, $refilled in the next backend, $again after pg_prewarm)"
}

# pg_stat_statements (preloaded next to navis for this test) sees navis's page reads and
# NAVIS-Cache hits in the buffer counters of an ordered scan's statement: far more blocks than
# the metapage read per scan that PostgreSQL counts by itself.
test_pg_stat_statements_counts_navis_reads() {
  sql -c "ALTER SYSTEM SET shared_preload_libraries = navis, pg_stat_statements" >/dev/null
  restart_with
  sql -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" -c "CREATE TABLE ss (id int PRIMARY KEY, v real[])" >/dev/null
  load_fmnist ss 1 3000
  sql -c "CREATE INDEX ss_v ON ss USING navis (v)" -c "SELECT pg_stat_statements_reset()" >/dev/null
  val "SET enable_seqscan = off; SELECT count(*) FROM fm_q q, LATERAL (SELECT id FROM ss ORDER BY v <-> q.v LIMIT 10) n /* navis_pgss_probe */" >/dev/null
  local row; row=$(val "SELECT calls, shared_blks_hit + shared_blks_read FROM pg_stat_statements WHERE query LIKE '%navis_pgss_probe%' AND query NOT LIKE '%pg_stat_statements%'")
  sql -c "DROP TABLE ss" -c "DROP EXTENSION pg_stat_statements" -c "ALTER SYSTEM RESET shared_preload_libraries" >/dev/null
  restart_with
  local blocks=${row##*|}
  # 100 scans of LIMIT 10: without navis's own blocks about 2,500 (the metapage per scan,
  # about 2 heap blocks per row returned, the query table); 8,467 when this was written
  [ -n "$blocks" ] && [ "$blocks" -gt 5000 ] ||
    { fail pg_stat_statements_counts_navis_reads "calls|blocks: '$row'"; return; }
  echo "ok       pg_stat_statements_counts_navis_reads (100 ordered scans: $blocks shared blocks hit or read in pg_stat_statements)"
}
