# Cluster tests of LIOS (issue 18, RFC 0004), sourced by run_cluster_tests.sh. They run on a
# cluster of their own that reads as an index larger than memory does: no NAVIS-Cache and no
# page-cache probe (NAVIS_PAGE_CACHE=0), so that every search hop waits on O_DIRECT reads and
# has a stall to fill; and a small queue (4,096 tasks, so that inserts fill it). All but
# test_lios_background_worker run without the background worker (navis.lios_worker = off),
# which would otherwise drain the queue they inspect.

LDIR=/tmp/navis-clustertest-lios
LPORT=54341

# The tests' cluster: no NAVIS-Cache, no page-cache probe, a 4,096-task queue; more
# postgresql.conf lines as arguments.
lios_cluster_start() {
  NAVIS_PAGE_CACHE=0 cluster_start "$LDIR" "$LPORT" "shared_preload_libraries = 'navis'" "navis.cache_size = 0" \
    "navis.lios_queue_size = 4096" "$@"
}

lsql() { cluster_psql "$LDIR" "$LPORT" -v ON_ERROR_STOP=1 -At "$@"; }
lval() { lsql -c "$1"; }
lstat() { lval "SELECT value::bigint FROM navis_lios_stats WHERE name = '$1'"; }

# 32-d rows id in [from, to] of table $1, a smooth function of id (rows have near twins), in
# a session with navis.lios = ${4:-off}.
lios_rows() {
  lsql -c "SET navis.lios = ${4:-off}" -c "INSERT INTO $1 SELECT i, (SELECT array_agg(sin(i * (0.013 + k * 0.0071) + k * 0.9)::real ORDER BY k)
      FROM generate_series(0, 31) k) FROM generate_series($2, $3) i"
}

# recall@10 of the index over 40 queries against the exact answer (sequential scan).
lios_recall() {
  local exact found
  exact=$(lval "SET enable_indexscan = off; SET enable_bitmapscan = off;
    SELECT string_agg(i || ':' || id, ',' ORDER BY i, id) FROM (
      SELECT q.i, t.id FROM (SELECT i, (SELECT array_agg(cos(i * (0.017 + k * 0.0053) + k)::real ORDER BY k)
                          FROM generate_series(0, 31) k) AS v FROM generate_series(1, 40) i) q
      CROSS JOIN LATERAL (SELECT id FROM $1 ORDER BY v <-> q.v LIMIT 10) t) s" | tail -1)
  found=$(lval "SET enable_seqscan = off; SET navis.search_list = 10;
    SELECT string_agg(i || ':' || id, ',' ORDER BY i, id) FROM (
      SELECT q.i, t.id FROM (SELECT i, (SELECT array_agg(cos(i * (0.017 + k * 0.0053) + k)::real ORDER BY k)
                          FROM generate_series(0, 31) k) AS v FROM generate_series(1, 40) i) q
      CROSS JOIN LATERAL (SELECT id FROM $1 ORDER BY v <-> q.v LIMIT 10) t) s" | tail -1)
  comm -12 <(tr ',' '\n' <<<"$exact" | sort) <(tr ',' '\n' <<<"$found" | sort) | wc -l
}

# 600 ordered searches in one session with navis.lios on (one backend's pacing: its tuner
# records a baseline first, then gives stalls their budget). Returns once the session's
# backend has exited: it puts the task group it had under way back in the queue as it exits.
lios_searches() {
  lsql -c "SET navis.lios = on; SET enable_seqscan = off;
    DO \$\$ DECLARE q real[]; BEGIN
      FOR i IN 1..600 LOOP
        SELECT array_agg(sin(i * 7.3 * (0.013 + k * 0.0071) + k * 0.9)::real ORDER BY k) INTO q
          FROM generate_series(0, 31) k;
        PERFORM id FROM $1 ORDER BY v <-> q LIMIT 10;
      END LOOP; END \$\$;" >/dev/null
  lios_wait_alone
}

# Waits (up to 10 s) until no other client backend is connected.
lios_wait_alone() {
  local i
  for ((i = 0; i < 100; i++)); do
    [ "$(lval "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()")" = 0 ] && return
    sleep 0.1
  done
}

# Inserts with navis.lios on leave back-edges queued, searches run them in their read
# stalls, VACUUM runs the rest; the graph ends clean, with the recall of inline inserts.
test_lios_deferred_back_edges_searches_and_vacuum() {
  lios_cluster_start "navis.lios_worker = off" || { fail lios "cluster did not start"; return; }
  lsql -c "CREATE EXTENSION navis"
  lsql -c "CREATE TABLE li (id int, v real[])" -c "CREATE TABLE lo (id int, v real[])"
  lios_rows li 1 3000; lios_rows lo 1 3000
  lsql -c "CREATE INDEX li_v ON li USING navis (v)" -c "CREATE INDEX lo_v ON lo USING navis (v)"
  # 500 rows each: inline into lo, deferred into li (in 5 statements, so the queue never fills)
  local n
  for n in 0 1 2 3 4; do
    lios_rows li $((3001 + n * 100)) $((3100 + n * 100)) on
  done
  lios_rows lo 3001 3500
  local queued length; queued=$(lstat tasks_queued); length=$(lstat queue_length)
  [ "$queued" -gt 1000 ] && [ "$length" = "$queued" ] ||
    { fail lios "after 500 deferring inserts: queued $queued, queue length $length"; cluster_stop "$LDIR"; return; }
  [ "$(lstat tasks_run_by_inserters)" = 0 ] ||
    { fail lios "inserters ran tasks with room in the queue"; cluster_stop "$LDIR"; return; }
  # Every new row is found by its own vector before any task ran.
  local missing; missing=$(lval "SET enable_seqscan = off; SELECT count(*) FROM li o WHERE o.id > 3000
      AND o.id <> (SELECT id FROM li ORDER BY v <-> o.v LIMIT 1)" | tail -1)
  [ "$missing" = 0 ] || { fail lios "$missing new rows not found before their tasks ran"; cluster_stop "$LDIR"; return; }
  lios_searches li
  local by_search; by_search=$(lstat tasks_run_by_searches)
  # (how many depends on the stall budgets this machine's device gives: tasks run a step at
  # a time, and a debug build has run all of them here; asserted only that searches run some)
  [ "$by_search" -gt 0 ] && [ "$(lstat search_stalls)" -gt 1000 ] ||
    { fail lios "600 searches ran no task ($(lval "SELECT string_agg(name || '=' || value, ' ') FROM navis_lios_stats"))"; cluster_stop "$LDIR"; return; }
  lsql -c "VACUUM li" -c "VACUUM lo"
  local after by_vacuum; after=$(lstat queue_length); by_vacuum=$(lstat tasks_run_by_vacuum)
  local ran=$((by_search + by_vacuum + $(lstat tasks_dropped)))
  [ "$after" = 0 ] && [ "$ran" = "$queued" ] ||
    { fail lios "after VACUUM: queue $after, run by searches $by_search + VACUUM $by_vacuum (+ dropped) = $ran of $queued"; cluster_stop "$LDIR"; return; }
  local verify_li verify_lo
  verify_li=$(lval "SELECT problems, unreachable, dangling_edges FROM navis_verify('li_v')")
  verify_lo=$(lval "SELECT problems, unreachable, dangling_edges FROM navis_verify('lo_v')")
  [ "$verify_li" = "0|0|0" ] || { fail lios "navis_verify after VACUUM: $verify_li"; cluster_stop "$LDIR"; return; }
  local r_li r_lo; r_li=$(lios_recall li); r_lo=$(lios_recall lo)
  # 400 true neighbours; half a point is 2 of them.
  [ "$r_li" -ge $((r_lo - 2)) ] ||
    { fail lios "recall: $r_li/400 deferred vs $r_lo/400 inline"; cluster_stop "$LDIR"; return; }
  echo "ok       lios_deferred_back_edges_searches_and_vacuum (queued $queued; run by 600 searches $by_search, by VACUUM $by_vacuum; verify $verify_li vs inline $verify_lo; recall@10 $r_li/400 vs $r_lo/400 inline)"
}

# A full queue makes inserters run their back-edges; a crash loses what was queued, the
# restarted server starts with an empty queue and a consistent index, and VACUUM reconnects.
# A hot standby's searches never run tasks.
test_lios_full_queue_crash_and_standby() {
  local sdir=/tmp/navis-clustertest-lios-standby sport=54342
  [ -f "$LDIR/data/postmaster.pid" ] || lios_cluster_start "navis.lios_worker = off"
  lsql -c "CREATE EXTENSION IF NOT EXISTS navis"
  lsql -c "DROP TABLE IF EXISTS lf" -c "CREATE TABLE lf (id int, v real[])"
  lios_rows lf 1 2000
  lsql -c "CREATE INDEX lf_v ON lf USING navis (v)"
  local inserters_before; inserters_before=$(lstat tasks_run_by_inserters)
  lios_rows lf 2001 3500 on
  local length by_inserters
  length=$(lstat queue_length); by_inserters=$(( $(lstat tasks_run_by_inserters) - inserters_before ))
  [ "$length" -ge 4000 ] && [ "$by_inserters" -gt 0 ] ||
    { fail lios_full "queue $length of 4096, run by inserters $by_inserters"; cluster_stop "$LDIR"; return; }
  runuser -u postgres -- "$PGBIN/pg_ctl" -D "$LDIR/data" -m immediate -w stop >/dev/null
  runuser -u postgres -- env -u RUST_BACKTRACE NAVIS_PAGE_CACHE=0 "$PGBIN/pg_ctl" -D "$LDIR/data" -l "$LDIR/server.log" -w start >/dev/null
  local after_crash; after_crash=$(lstat queue_length)
  local verify; verify=$(lval "SELECT problems, dangling_edges FROM navis_verify('lf_v')")
  local rows; rows=$(lval "SELECT vertices - deleted FROM navis_verify('lf_v')")
  [ "$after_crash" = 0 ] && [ "$verify" = "0|0" ] && [ "$rows" = 3500 ] ||
    { fail lios_full "after the crash: queue $after_crash, verify $verify, rows $rows"; cluster_stop "$LDIR"; return; }
  # The same rows inserted inline, for comparison.
  lsql -c "DROP TABLE IF EXISTS lg" -c "CREATE TABLE lg (id int, v real[])"
  lios_rows lg 1 2000
  lsql -c "CREATE INDEX lg_v ON lg USING navis (v)"
  lios_rows lg 2001 3500
  local own="SET enable_seqscan = off; SET navis.search_list = 10; SELECT count(*) FROM lf o
      WHERE o.id <> (SELECT id FROM lf ORDER BY v <-> o.v LIMIT 1)"
  local lost; lost=$(lval "$own" | tail -1)
  # navis.lios on in the VACUUM's session (or postgresql.conf, for autovacuum): it restores
  # the back-edges the crash lost.
  lsql -c "SET navis.lios = on" -c "VACUUM lf" -c "VACUUM lg"
  local clean; clean=$(lval "SELECT clean FROM navis_verify('lf_v')")
  local missing; missing=$(lval "$own" | tail -1)
  local inline; inline=$(lval "${own//lf/lg}" | tail -1)
  [ "$clean" = t ] && [ "$missing" -le $((inline + 3)) ] ||
    { fail lios_full "after VACUUM: clean $clean; rows not found by their own vector (search list 10): $missing, inline $inline, before VACUUM $lost"; cluster_stop "$LDIR"; return; }
  # A standby: queue tasks on the primary, then search on the standby with navis.lios on.
  lios_rows lf 3501 3600 on
  NAVIS_PAGE_CACHE=0 standby_start "$LDIR" "$LPORT" "$sdir" "$sport" "shared_preload_libraries = 'navis'" "navis.cache_size = 0" \
    "navis.lios_queue_size = 4096"
  standby_catch_up "$LDIR" "$LPORT" "$sdir" "$sport" ||
    { fail lios_full "standby did not catch up"; cluster_stop "$sdir"; cluster_stop "$LDIR"; return; }
  cluster_psql "$sdir" "$sport" -At -v ON_ERROR_STOP=1 -c "SET navis.lios = on; SET enable_seqscan = off;
    DO \$\$ DECLARE q real[]; BEGIN FOR i IN 1..300 LOOP
      SELECT v INTO q FROM lf WHERE id = i; PERFORM id FROM lf ORDER BY v <-> q LIMIT 10; END LOOP; END \$\$;" >/dev/null
  local s_stats; s_stats=$(cluster_psql "$sdir" "$sport" -At -c "SELECT string_agg(value::bigint::text, ',' ORDER BY name)
      FROM navis_lios_stats WHERE name IN ('queue_length', 'tasks_run_by_searches', 'search_stalls_used')")
  cluster_stop "$sdir"
  [ "$s_stats" = "0,0,0" ] || { fail lios_full "standby ran tasks: $s_stats"; cluster_stop "$LDIR"; return; }
  cluster_stop "$LDIR"
  echo "ok       lios_full_queue_crash_and_standby (queue full at $length: inserters ran $by_inserters; after a crash the queue is empty, navis_verify $verify, 3,500 rows; rows not found by their own vector: $lost after the crash, $missing after VACUUM (inline $inline), clean; standby ran no task)"
}

# Waits up to $1 seconds for the queue to be empty; prints its length.
lios_wait_empty() {
  local i length
  for ((i = 0; i < $1 * 5; i++)); do
    length=$(lstat queue_length)
    [ "$length" = 0 ] && break
    sleep 0.2
  done
  echo "$length"
}

lios_workers_running() {
  lval "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'navis lios worker'"
}

# The background worker: started by the first deferring insert, it runs the queue's tasks once
# no search has run for a while, never while searches run, exits when turned off; the tasks
# of an index rebuilt by REINDEX are dropped (their vertex ids mean nothing any more).
test_lios_background_worker() {
  lios_cluster_start || { fail lios_worker "cluster did not start"; return; }
  lsql -c "CREATE EXTENSION navis"
  lsql -c "CREATE TABLE lw (id int, v real[])" -c "CREATE TABLE lx (id int, v real[])"
  lios_rows lw 1 2000; lios_rows lx 1 2000
  lsql -c "CREATE INDEX lw_v ON lw USING navis (v)" -c "CREATE INDEX lx_v ON lx USING navis (v)"
  # 1. No search runs: the worker drains what 300 inserts queued.
  lios_rows lw 2001 2300 on
  local queued length; queued=$(lstat tasks_queued)
  length=$(lios_wait_empty 60)
  local by_worker; by_worker=$(lstat tasks_run_by_worker)
  [ "$queued" -gt 300 ] && [ "$length" = 0 ] && [ "$by_worker" = "$queued" ] && [ "$(lstat worker_starts)" = 1 ] ||
    { fail lios_worker "without searches: queued $queued, left $length, run by the worker $by_worker ($(lval "SELECT string_agg(name || '=' || value, ' ') FROM navis_lios_stats"))"; cluster_stop "$LDIR"; return; }
  [ "$(lios_workers_running)" = 1 ] ||
    { fail lios_worker "no 'navis lios worker' in pg_stat_activity"; cluster_stop "$LDIR"; return; }
  # (a vertex an insert's pruning left without in-edges is unreachable until VACUUM
  # reconnects it, inline or deferred: that count is reported, not asserted)
  local verify; verify=$(lval "SELECT problems, dangling_edges FROM navis_verify('lw_v')")
  local unreachable_lw; unreachable_lw=$(lval "SELECT unreachable FROM navis_verify('lw_v')")
  local missing; missing=$(lval "SET enable_seqscan = off; SELECT count(*) FROM lw o WHERE o.id > 2000
      AND o.id <> (SELECT id FROM lw ORDER BY v <-> o.v LIMIT 1)" | tail -1)
  [ "$verify" = "0|0" ] && [ "$missing" = 0 ] ||
    { fail lios_worker "after the worker: navis_verify $verify, $missing new rows not found by their own vector"; cluster_stop "$LDIR"; return; }
  # 2. While another session searches (navis.lios off there: it runs no task itself), the
  # worker leaves the queue alone; once the searches stop, it drains it.
  local search_log="$LDIR/searches.out"
  # (jit off: the plan's disabled-seqscan cost would JIT-compile every search, 0.1 s
  # between index scans in which the worker rightly sees no search running)
  lsql -c "SET enable_seqscan = off; SET jit = off; DO \$\$ DECLARE q real[]; BEGIN
      WHILE clock_timestamp() < now() + interval '20 seconds' LOOP
        SELECT v INTO q FROM lx WHERE id = 1 + (random() * 1999)::int;
        PERFORM id FROM lx ORDER BY v <-> q LIMIT 10;
      END LOOP; END \$\$;" >"$search_log" 2>&1 &
  local searcher=$!
  sleep 1
  local before; before=$(lstat tasks_run_by_worker)
  lios_rows lx 2001 2200 on
  sleep 0.5
  local during; during=$(( $(lstat tasks_run_by_worker) - before )); length=$(lstat queue_length)
  kill -0 "$searcher" 2>/dev/null ||
    { fail lios_worker "the 20-second search loop ended before the inserts did: $(cat "$search_log")"; cluster_stop "$LDIR"; return; }
  [ "$during" = 0 ] && [ "$length" -gt 0 ] ||
    { fail lios_worker "while a session searched, the worker ran $during tasks (queue $length)"; wait "$searcher"; cluster_stop "$LDIR"; return; }
  wait "$searcher" || { fail lios_worker "searches failed: $(cat "$search_log")"; cluster_stop "$LDIR"; return; }
  local left; left=$(lios_wait_empty 60)
  [ "$left" = 0 ] && [ "$(lstat tasks_run_by_worker)" -ge $((before + length)) ] ||
    { fail lios_worker "after the searches stopped: queue $left"; cluster_stop "$LDIR"; return; }
  verify=$(lval "SELECT problems, dangling_edges FROM navis_verify('lx_v')")
  local unreachable_lx; unreachable_lx=$(lval "SELECT unreachable FROM navis_verify('lx_v')")
  [ "$verify" = "0|0" ] || { fail lios_worker "navis_verify lx_v: $verify"; cluster_stop "$LDIR"; return; }
  # 3. Turned off: the worker exits; tasks stay queued. REINDEX drops them (they name the
  # old build's vertices); turned on again, the worker started by the next insert runs the
  # new ones.
  lsql -c "ALTER SYSTEM SET navis.lios_worker = off" -c "SELECT pg_reload_conf()" >/dev/null
  local i
  for ((i = 0; i < 50; i++)); do [ "$(lios_workers_running)" = 0 ] && break; sleep 0.2; done
  [ "$(lios_workers_running)" = 0 ] || { fail lios_worker "the worker did not exit when turned off"; cluster_stop "$LDIR"; return; }
  lios_rows lw 2301 2400 on
  local stale; stale=$(lstat queue_length)
  local dropped_before; dropped_before=$(lstat tasks_dropped)
  lsql -c "REINDEX INDEX lw_v"
  lsql -c "ALTER SYSTEM SET navis.lios_worker = on" -c "SELECT pg_reload_conf()" >/dev/null
  sleep 0.5
  lios_rows lw 2401 2410 on
  left=$(lios_wait_empty 60)
  local dropped=$(( $(lstat tasks_dropped) - dropped_before ))
  [ "$stale" -gt 0 ] && [ "$left" = 0 ] && [ "$dropped" -ge "$stale" ] && [ "$(lstat worker_starts)" = 2 ] ||
    { fail lios_worker "after REINDEX: $stale stale tasks, $dropped dropped, queue $left, $(lstat worker_starts) worker starts"; cluster_stop "$LDIR"; return; }
  lsql -c "VACUUM lw" -c "VACUUM lx"
  verify=$(lval "SELECT string_agg(problems || '|' || unreachable || '|' || dangling_edges, ',')
      FROM (SELECT (navis_verify('lw_v')).* UNION ALL SELECT (navis_verify('lx_v')).*) v")
  [ "$verify" = "0|0|0,0|0|0" ] || { fail lios_worker "navis_verify after REINDEX and VACUUM: $verify"; cluster_stop "$LDIR"; return; }
  cluster_stop "$LDIR"
  grep -q "navis lios worker" "$LDIR/server.log" && grep -E "navis lios worker.*(ERROR|exited with exit code [1-9])" "$LDIR/server.log" &&
    { fail lios_worker "the worker failed (server.log above)"; return; }
  echo "ok       lios_background_worker (without searches it ran all $queued tasks; while a session searched it ran 0 of $length, then drained them; unreachable before VACUUM: $unreachable_lw and $unreachable_lx; REINDEX: $stale stale tasks dropped; navis_verify clean after VACUUM)"
}

# VACUUM with navis.lios on hands its list repairs out as tasks: it returns with every deleted
# vertex kept (nothing points at a freed one), searches run the repairs in their stalls, and
# the next VACUUM runs what is left and frees them; the index ends as an inline VACUUM leaves
# its twin.
test_lios_vacuum_hands_out_repairs() {
  lios_cluster_start "navis.lios_worker = off" || { fail lios_repairs "cluster did not start"; return; }
  lsql -c "CREATE EXTENSION navis"
  lsql -c "CREATE TABLE lr (id int, v real[])" -c "CREATE TABLE lq (id int, v real[])"
  lios_rows lr 1 3000; lios_rows lq 1 3000
  lsql -c "CREATE INDEX lr_v ON lr USING navis (v)" -c "CREATE INDEX lq_v ON lq USING navis (v)"
  lsql -c "DELETE FROM lr WHERE id % 4 = 1" -c "DELETE FROM lq WHERE id % 4 = 1"
  lsql -c "VACUUM lq"
  lsql -c "SET navis.lios = on" -c "VACUUM lr"
  local queued length; queued=$(lstat repairs_queued); length=$(lstat queue_length)
  local held; held=$(lval "SELECT deleted FROM navis_verify('lr_v')")
  local twin_deleted; twin_deleted=$(lval "SELECT deleted FROM navis_verify('lq_v')")
  [ "$queued" -gt 500 ] && [ "$length" = "$queued" ] && [ "$held" -ge 700 ] ||
    { fail lios_repairs "after VACUUM with LIOS: $queued repairs queued, queue $length, $held deleted vertices kept (inline twin: $twin_deleted)"; cluster_stop "$LDIR"; return; }
  local verify; verify=$(lval "SELECT problems, dangling_edges FROM navis_verify('lr_v')")
  [ "$verify" = "0|0" ] || { fail lios_repairs "navis_verify with repairs queued: $verify"; cluster_stop "$LDIR"; return; }
  local searched_before; searched_before=$(lstat tasks_run_by_searches)
  lios_searches lr
  local by_search=$(( $(lstat tasks_run_by_searches) - searched_before ))
  [ "$by_search" -gt 0 ] || { fail lios_repairs "600 searches ran no repair"; cluster_stop "$LDIR"; return; }
  lsql -c "SET navis.lios = on" -c "VACUUM lr"
  local after; after=$(lval "SELECT deleted, problems, unreachable, dangling_edges FROM navis_verify('lr_v')")
  local twin; twin=$(lval "SELECT deleted, problems, unreachable, dangling_edges FROM navis_verify('lq_v')")
  [ "$(lstat queue_length)" = 0 ] && [ "$after" = "$twin" ] ||
    { fail lios_repairs "after the second VACUUM: queue $(lstat queue_length); deleted|problems|unreachable|dangling $after, inline twin $twin"; cluster_stop "$LDIR"; return; }
  local r_lr r_lq; r_lr=$(lios_recall lr); r_lq=$(lios_recall lq)
  [ "$r_lr" -ge $((r_lq - 2)) ] ||
    { fail lios_repairs "recall: $r_lr/400 with handed-out repairs vs $r_lq/400 inline"; cluster_stop "$LDIR"; return; }
  cluster_stop "$LDIR"
  echo "ok       lios_vacuum_hands_out_repairs ($queued repairs queued, $held deleted vertices kept; searches ran $by_search; the next VACUUM freed them: $after as the inline twin; recall@10 $r_lr/400 vs $r_lq/400)"
}

# 3-d rows with many duplicates: 35 distinct points, $2..$3 ids into table $1.
lios_dup_rows() {
  lsql -c "INSERT INTO $1 SELECT i, ARRAY[(i % 7)::real, ((i / 7) % 5)::real, 1] FROM generate_series($2, $3) i"
}

# The distances of the top-10 of 30 queries, by index scan (on the server in $1/$2) or, with
# $3 = exact, by sequential scan: equal when the index returns as many rows as it should and
# the nearest ones (which of several duplicates it returns does not matter).
lios_dup_answers() {
  local plan="SET enable_seqscan = off; SET navis.casr = off; SET navis.beam_width = 4;"
  [ "${4:-}" = exact ] && plan="SET enable_indexscan = off; SET enable_bitmapscan = off;"
  cluster_psql "$1" "$2" -At -v ON_ERROR_STOP=1 -c "$plan
    SELECT string_agg(d, ';' ORDER BY q) FROM (
      SELECT q, string_agg(round((v <-> p)::numeric, 3)::text, ',' ORDER BY v <-> p) d
      FROM (SELECT q, ARRAY[(q % 7) + 0.3, ((q / 7) % 5) - 0.2, 1.1]::real[] AS p FROM generate_series(1, 30) q) qs
      CROSS JOIN LATERAL (SELECT v FROM $3 ORDER BY v <-> qs.p LIMIT 10) t GROUP BY q) s" 2>&1 | tail -1
}

# Repairs handed out by VACUUM on the shapes that break graphs (3-d duplicates, a table shrunk
# to three rows), replayed by a hot standby, then lost in a crash: every scan returns the rows
# an exact scan returns, on the primary and on the standby, before and after the crash; the
# restarted server's VACUUM finds the lists the lost repairs would have fixed and leaves the
# index as an inline VACUUM leaves its twin.
test_lios_repairs_duplicates_crash_and_standby() {
  local sdir=/tmp/navis-clustertest-lios-standby sport=54342
  lios_cluster_start "navis.lios_worker = off" || { fail lios_shapes "cluster did not start"; return; }
  lsql -c "CREATE EXTENSION navis"
  # ldi and l3i: twins VACUUMed inline, for what the index should end as
  local t
  for t in ld ldi l3 l3i; do lsql -c "CREATE TABLE $t (id int, v real[])"; done
  lios_dup_rows ld 1 2000; lios_dup_rows ldi 1 2000; lios_dup_rows l3 1 1000; lios_dup_rows l3i 1 1000
  for t in ld ldi l3 l3i; do lsql -c "CREATE INDEX ${t}_v ON $t USING navis (v)"; done
  NAVIS_PAGE_CACHE=0 standby_start "$LDIR" "$LPORT" "$sdir" "$sport" "shared_preload_libraries = 'navis'" \
    "navis.cache_size = 0" "navis.lios_queue_size = 4096" ||
    { fail lios_shapes "standby did not start"; cluster_stop "$LDIR"; return; }
  lsql -c "DELETE FROM ld WHERE id % 3 = 0" -c "DELETE FROM l3 WHERE id > 3" \
    -c "DELETE FROM ldi WHERE id % 3 = 0" -c "DELETE FROM l3i WHERE id > 3" -c "VACUUM ldi" -c "VACUUM l3i"
  lsql -c "SET navis.lios = on" -c "VACUUM ld" -c "VACUUM l3"
  local queued held3; queued=$(lstat queue_length)
  held3=$(lval "SELECT deleted FROM navis_verify('l3_v')")
  [ "$queued" -gt 100 ] && [ "$held3" -gt 0 ] ||
    { fail lios_shapes "VACUUM with LIOS queued $queued repairs, kept $held3 deleted vertices of l3"; cluster_stop "$sdir"; cluster_stop "$LDIR"; return; }
  lsql -c "SET navis.lios = on; SET enable_seqscan = off;
    DO \$\$ BEGIN FOR i IN 1..150 LOOP
      PERFORM id FROM ld ORDER BY v <-> ARRAY[(i % 11) * 0.6, (i % 13) * 0.4, 1]::real[] LIMIT 10;
    END LOOP; END \$\$;" >/dev/null
  lios_wait_alone
  local by_search; by_search=$(lstat tasks_run_by_searches)
  local exact_ld exact_l3
  exact_ld=$(lios_dup_answers "$LDIR" "$LPORT" ld exact); exact_l3=$(lios_dup_answers "$LDIR" "$LPORT" l3 exact)
  standby_catch_up "$LDIR" "$LPORT" "$sdir" "$sport" ||
    { fail lios_shapes "standby did not catch up"; cluster_stop "$sdir"; cluster_stop "$LDIR"; return; }
  local stage server got want table lost
  for stage in queued after-crash after-vacuum; do
    if [ $stage = after-crash ]; then
      # The repairs still queued are lost with the server.
      lost=$(lstat queue_length)
      runuser -u postgres -- "$PGBIN/pg_ctl" -D "$LDIR/data" -m immediate -w stop >/dev/null
      runuser -u postgres -- env -u RUST_BACKTRACE NAVIS_PAGE_CACHE=0 "$PGBIN/pg_ctl" -D "$LDIR/data" -l "$LDIR/server.log" -w start >/dev/null
      [ "$(lstat queue_length)" = 0 ] || { fail lios_shapes "queue not empty after the crash"; cluster_stop "$sdir"; cluster_stop "$LDIR"; return; }
    elif [ $stage = after-vacuum ]; then
      # (navis.lios off, its default: the VACUUM repairs inline the lists whose repairs the
      # crash lost and frees the vertices they held)
      lsql -c "VACUUM ld" -c "VACUUM l3"
    fi
    for table in ld l3; do
      local verify; verify=$(lval "SELECT problems, dangling_edges FROM navis_verify('${table}_v')")
      [ "$verify" = "0|0" ] || { fail lios_shapes "$stage: navis_verify ${table}_v $verify"; cluster_stop "$sdir"; cluster_stop "$LDIR"; return; }
      want=$exact_ld; [ $table = l3 ] && want=$exact_l3
      for server in primary standby; do
        if [ $server = primary ]; then
          got=$(lios_dup_answers "$LDIR" "$LPORT" $table)
        else
          standby_catch_up "$LDIR" "$LPORT" "$sdir" "$sport" ||
            { fail lios_shapes "$stage: standby did not catch up"; cluster_stop "$sdir"; cluster_stop "$LDIR"; return; }
          got=$(lios_dup_answers "$sdir" "$sport" $table)
        fi
        [ -n "$want" ] && [ "$got" = "$want" ] ||
          { fail lios_shapes "$stage, $server, $table: top-10 distances '${got:0:160}', exact '${want:0:160}'"; cluster_stop "$sdir"; cluster_stop "$LDIR"; return; }
      done
    done
  done
  # (deleted entrance-graph vertices and the medoid stay as entry points, so `deleted` is
  # what the inline twin keeps, not 0)
  local of="SELECT string_agg(clean || '|' || deleted || '|' || unreachable, ',' ORDER BY i)
      FROM (SELECT 1 i, (navis_verify('ld_v')).* UNION ALL SELECT 2, (navis_verify('l3_v')).*) v"
  local final standby_final twins
  final=$(lval "$of"); twins=$(lval "${of//_v\'/i_v\'}")
  standby_final=$(cluster_psql "$sdir" "$sport" -At -c "$of")
  cluster_stop "$sdir"
  cluster_stop "$LDIR"
  [[ "$final" =~ ^true\|[0-9]+\|0,true\|[0-9]+\|0$ ]] && [ "$final" = "$twins" ] && [ "$standby_final" = "$final" ] ||
    { fail lios_shapes "after the VACUUM that followed the crash: clean|deleted|unreachable $final, standby $standby_final, inline twins $twins"; return; }
  echo "ok       lios_repairs_duplicates_crash_and_standby (3-d rows, 35 distinct points: $queued repairs queued, $held3 of l3's 997 deleted vertices kept, searches ran $by_search; top-10 distances of 30 queries equal to an exact scan on primary and standby with repairs queued, after a crash lost $lost of them, and after VACUUM; l3 shrunk to 3 rows returns all 3; ends $final on both, as the inline twins)"
}

# A session's search holds a back-edge group unfinished between scans. Another session
# REINDEXes the index: its queued tasks are dropped, and so is the held group, when the
# session next scans another index, instead of going back to the queue under the old tag
# (where nothing would ever run or drop them without the worker). No worker runs here.
test_lios_held_group_after_reindex() {
  lios_cluster_start "navis.lios_worker = off" || { fail lios_held "cluster did not start"; return; }
  lsql -c "CREATE EXTENSION navis"
  lsql -c "CREATE TABLE lh (id int, v real[])" -c "CREATE TABLE lk (id int, v real[])"
  lios_rows lh 1 3000; lios_rows lk 1 2000
  lsql -c "CREATE INDEX lh_v ON lh USING navis (v)" -c "CREATE INDEX lk_v ON lk USING navis (v)"
  lios_rows lh 3001 3500 on
  local queued; queued=$(lstat queue_length)
  # tasks out of the queue that no counter accounts for: held by a backend
  local held_sql="SELECT $queued - sum(value) FILTER (WHERE name IN ('queue_length', 'tasks_run_by_searches',
      'tasks_failed', 'tasks_dropped'))::bigint FROM navis_lios_stats"
  # One session: searches of lh until it holds a group under way; from another session,
  # REINDEX; then this session searches lk.
  local out
  out=$(lsql -c "SET navis.lios = on" -c "SET enable_seqscan = off" -c "DO \$\$ DECLARE q real[]; held bigint;
      BEGIN FOR i IN 1..600 LOOP
        SELECT array_agg(sin(i * 7.3 * (0.013 + k * 0.0071) + k * 0.9)::real ORDER BY k) INTO q
          FROM generate_series(0, 31) k;
        PERFORM id FROM lh ORDER BY v <-> q LIMIT 10;
        $held_sql INTO held;
        EXIT WHEN held > 0;
      END LOOP; END \$\$" \
    -c "$held_sql" -c "SELECT value::bigint FROM navis_lios_stats WHERE name = 'tasks_held_by_backends'" \
    -c "SELECT value::bigint FROM navis_lios_stats WHERE name = 'queue_length'" \
    -c "\\! psql -X -q -h $LDIR -p $LPORT -U postgres -d postgres -c 'REINDEX INDEX lh_v'" \
    -c "SELECT value::bigint FROM navis_lios_stats WHERE name = 'queue_length'" \
    -c "DO \$\$ DECLARE q real[]; BEGIN
      FOR i IN 1..20 LOOP
        SELECT v INTO q FROM lk WHERE id = i * 37;
        PERFORM id FROM lk ORDER BY v <-> q LIMIT 10;
      END LOOP; END \$\$" \
    -c "$held_sql" -c "SELECT value::bigint FROM navis_lios_stats WHERE name = 'tasks_held_by_backends'" \
    -c "SELECT value::bigint FROM navis_lios_stats WHERE name = 'queue_length'" |
    grep -E '^-?[0-9]+$' | tr '\n' ' ')
  local held gauge left reindexed held_after gauge_after left_after
  read -r held gauge left reindexed held_after gauge_after left_after <<<"$out"
  [ "$held" -gt 0 ] && [ "$left" -gt 0 ] && [ "$gauge" = "$held" ] ||
    { fail lios_held "no group held with tasks left: $queued queued; held $held (tasks_held_by_backends $gauge), queue $left"; cluster_stop "$LDIR"; return; }
  # REINDEX dropped the queued tasks; the lk scan dropped the held group (the old code put it
  # back: held 0, queue $held)
  [ "$reindexed" = 0 ] && [ "$held_after" = 0 ] && [ "$gauge_after" = 0 ] && [ "$left_after" = 0 ] ||
    { fail lios_held "after REINDEX: queue $reindexed; after the lk scan: held $held_after (tasks_held_by_backends $gauge_after), queue $left_after ($held were held)"; cluster_stop "$LDIR"; return; }
  local verify; verify=$(lval "SELECT problems || '|' || dangling_edges FROM navis_verify('lh_v')")
  [ "$verify" = "0|0" ] || { fail lios_held "navis_verify lh_v after REINDEX: $verify"; cluster_stop "$LDIR"; return; }
  # VACUUM FULL and TRUNCATE build anew too: the queued tasks go with the old build.
  lios_rows lh 3501 3800 on
  local before_full; before_full=$(lstat queue_length)
  lsql -c "VACUUM FULL lh"
  local after_full; after_full=$(lstat queue_length)
  lios_rows lh 3801 4000 on
  local before_truncate; before_truncate=$(lstat queue_length)
  lsql -c "TRUNCATE lh"
  local after_truncate; after_truncate=$(lstat queue_length)
  lios_rows lh 1 300 on
  local own="SET enable_seqscan = off; SELECT count(*) FROM lh o WHERE o.id = (SELECT id FROM lh ORDER BY v <-> o.v LIMIT 1)"
  local found; found=$(lval "$own" | tail -1)
  lsql -c "SET navis.lios = on" -c "VACUUM lh"
  local found_after; found_after=$(lval "$own" | tail -1)
  [ "$before_full" -gt 0 ] && [ "$after_full" = 0 ] && [ "$before_truncate" -gt 0 ] && [ "$after_truncate" = 0 ] && [ "$found_after" = 300 ] ||
    { fail lios_held "VACUUM FULL: queue $before_full -> $after_full; TRUNCATE: $before_truncate -> $after_truncate; 300 rows after it, $found found by their own vector, $found_after after VACUUM"; cluster_stop "$LDIR"; return; }
  cluster_stop "$LDIR"
  echo "ok       lios_held_group_after_reindex ($queued queued; a search held $held (tasks_held_by_backends said so) with $left queued; REINDEX dropped those, the next scan the held $held: queue and held 0, no worker; VACUUM FULL dropped $before_full queued, TRUNCATE $before_truncate; of 300 rows inserted after it $found found by their own vector with tasks queued, $found_after after VACUUM)"
}
