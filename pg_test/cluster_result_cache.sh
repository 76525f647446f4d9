# Cluster tests of the Aker result cache (issue 17, RFC 0003 §6), sourced by
# run_cluster_tests.sh. The test cluster runs with navis.result_cache_size = 16MB.

# A TID reused after VACUUM is never answered from the cache, on the primary or on a hot
# standby. The table fits one heap page, so the row inserted after VACUUM takes the line
# pointer of the deleted row: a cache that still held the deleted row's TID with its vector
# would return the new, far-away row at the deleted row's rank. On the primary VACUUM removes
# the row from the cache; on the standby (where VACUUM never runs) the replayed change makes
# every entry of the older redo generation a miss.
test_result_cache_tid_reuse_on_primary_and_standby() {
  local sdir=/tmp/navis-clustertest-standby3 sport=54335
  sql -c "CREATE TABLE tr (id int PRIMARY KEY, v real[]) WITH (fillfactor = 100)"
  sql -c "INSERT INTO tr SELECT i, (SELECT array_agg(sin(i * (0.1 + k * 0.37) + k)::real ORDER BY k)
            FROM generate_series(0, 15) k) FROM generate_series(1, 50) i"
  sql -c "CREATE INDEX tr_v ON tr USING navis (v)"
  standby_start "$DIR" "$PORT" "$sdir" "$sport" "shared_preload_libraries = 'navis'"
  standby_catch_up "$DIR" "$PORT" "$sdir" "$sport" ||
    { fail result_cache_tid_reuse "standby did not catch up"; cluster_stop "$sdir"; return; }
  local q="(SELECT array_agg(sin(900 * (0.1 + k * 0.37) + k)::real ORDER BY k) FROM generate_series(0, 15) k)"
  local knn="SELECT string_agg(id::text, ',') FROM (SELECT id FROM tr ORDER BY v <-> $q LIMIT 10) s"
  local on="SET enable_seqscan = off; SET navis.result_cache = on;"
  local hits="SELECT coalesce(sum(value), 0) FROM navis_result_cache_stats WHERE index = 'tr_v'::regclass AND name LIKE 'hits_%'"
  local before; before=$(val "SET enable_seqscan = off; $knn" | tail -1)
  # cached on both servers, and answered from the cache the second time
  val "$on $knn" >/dev/null; val "$on $knn" >/dev/null
  cluster_psql "$sdir" "$sport" -At -c "$on $knn" >/dev/null
  cluster_psql "$sdir" "$sport" -At -c "$on $knn" >/dev/null
  local p_hits s_hits
  p_hits=$(val "$hits"); s_hits=$(cluster_psql "$sdir" "$sport" -At -c "$hits")
  [ "$p_hits" = 1 ] && [ "$s_hits" = 1 ] ||
    { fail result_cache_tid_reuse "hits before the change: primary $p_hits, standby $s_hits"; cluster_stop "$sdir"; return; }
  local nearest=${before%%,*}
  local ctid; ctid=$(val "SELECT ctid FROM tr WHERE id = $nearest")
  sql -c "DELETE FROM tr WHERE id = $nearest" -c "VACUUM tr"
  sql -c "INSERT INTO tr VALUES (1000, array_fill(100::real, ARRAY[16]))"
  local reused; reused=$(val "SELECT ctid FROM tr WHERE id = 1000")
  [ "$reused" = "$ctid" ] ||
    { fail result_cache_tid_reuse "the new row did not reuse $ctid (got $reused): the test shows nothing"; cluster_stop "$sdir"; return; }
  standby_catch_up "$DIR" "$PORT" "$sdir" "$sport" ||
    { fail result_cache_tid_reuse "standby did not catch up"; cluster_stop "$sdir"; return; }
  local truth p_after s_after
  truth=$(val "SET enable_seqscan = off; $knn" | tail -1)
  p_after=$(val "$on $knn" | tail -1)
  s_after=$(cluster_psql "$sdir" "$sport" -At -c "$on $knn" | tail -1)
  local stale; stale=$(cluster_psql "$sdir" "$sport" -At -c "SELECT value FROM navis_result_cache_stats
      WHERE index = 'tr_v'::regclass AND name = 'stale_generation_misses'")
  local removed; removed=$(val "SELECT value FROM navis_result_cache_stats
      WHERE index = 'tr_v'::regclass AND name = 'rows_removed_by_vacuum'")
  cluster_stop "$sdir"
  case ",$p_after,$s_after," in *,1000,*)
    fail result_cache_tid_reuse "the row that reused the deleted row's TID was answered: primary '$p_after', standby '$s_after'"; return;;
  esac
  [ "$p_after" = "$truth" ] && [ "$s_after" = "$truth" ] && [ "${stale:-0}" -ge 1 ] && [ "${removed:-0}" -ge 1 ] ||
    { fail result_cache_tid_reuse "truth '$truth', primary '$p_after', standby '$s_after', standby stale-generation misses '$stale', rows removed by VACUUM '$removed'"; return; }
  echo "ok       result_cache_tid_reuse_on_primary_and_standby (TID $ctid reused after DELETE + VACUUM; the primary's VACUUM removed $removed cached row(s); the standby missed on the older generation ($stale); both answer exactly)"
}

# Three sessions search 10 repeated queries with the cache on while a fourth inserts,
# deletes and VACUUMs: every answer has 10 rows in non-decreasing true distance (a stale or
# reused TID would break the order), the cache answers a share of them, VACUUM removes cached
# rows, and the index stays clean.
test_result_cache_under_concurrent_changes() {
  sql -c "CREATE TABLE rcc (id int PRIMARY KEY, v real[])"
  load_fmnist rcc 1 3000
  sql -c "CREATE INDEX rcc_v ON rcc USING navis (v)"
  touch "$DIR/rcc-changing"
  ( set -e
    for lo in $(seq 3001 100 3900); do
      sql -c "INSERT INTO rcc SELECT id, v FROM fm_src WHERE id BETWEEN $lo AND $((lo + 99))"
      sql -c "DELETE FROM rcc WHERE id IN (SELECT id FROM rcc ORDER BY v <-> (SELECT v FROM fm_q WHERE id = $(( (lo / 100) % 10 ))) LIMIT 3)"
      sql -c "VACUUM rcc"
      sleep 0.3
    done ) >"$DIR/rcc-changes.log" 2>&1 &
  local changer=$!
  local searchers=() s
  for s in 1 2 3; do
    ( set -e; n=$s
      while [ -f "$DIR/rcc-changing" ]; do
        got=$(sql -c "SET enable_seqscan = off; SET navis.result_cache = on;
          SELECT count(*) || ' ' || coalesce(bool_and(d >= prev), true) FROM (
            SELECT d, lag(d) OVER (ORDER BY n) AS prev FROM (
              SELECT r.v <-> q.v AS d, row_number() OVER () AS n
              FROM (SELECT v FROM fm_q WHERE id = $((n % 10))) q,
                   LATERAL (SELECT v FROM rcc ORDER BY v <-> q.v LIMIT 10) r) s) t" | tail -1)
        [ "$got" = "10 true" ] || { echo "query $((n % 10)): $got"; exit 1; }
        n=$((n + 1))
      done ) >"$DIR/rcc-search-$s.log" 2>&1 &
    searchers+=($!)
  done
  wait "$changer" || { rm -f "$DIR/rcc-changing"; fail result_cache_concurrent "the changing session failed: $(grep -m1 ERROR "$DIR/rcc-changes.log")"; return; }
  rm -f "$DIR/rcc-changing"
  for s in "${searchers[@]}"; do
    wait "$s" || { fail result_cache_concurrent "a searching session failed: $(cat "$DIR"/rcc-search-*.log | tail -1)"; return; }
  done
  local stats; stats=$(val "SELECT string_agg(name || '=' || value, ' ' ORDER BY name) FROM navis_result_cache_stats
      WHERE index = 'rcc_v'::regclass AND name IN ('hits_equality', 'hits_approximate', 'hits_alias', 'misses',
        'rows_removed_by_vacuum', 'refresh_fast', 'insert_log_appends', 'invalidated_by_delete', 'entries')")
  local hits; hits=$(val "SELECT sum(value) FROM navis_result_cache_stats WHERE index = 'rcc_v'::regclass AND name LIKE 'hits_%'")
  local removed; removed=$(val "SELECT value FROM navis_result_cache_stats WHERE index = 'rcc_v'::regclass AND name = 'rows_removed_by_vacuum'")
  local verify; verify=$(val "SELECT clean FROM navis_verify('rcc_v')")
  [ "${hits%.*}" -gt 0 ] && [ "${removed%.*}" -gt 0 ] && [ "$verify" = t ] ||
    { fail result_cache_concurrent "$stats; navis_verify clean: $verify"; return; }
  echo "ok       result_cache_under_concurrent_changes (3 searching sessions, 900 inserts, 30 deletes of cached queries' nearest rows and 9 VACUUMs: every answer 10 rows in true distance order; $stats)"
}
