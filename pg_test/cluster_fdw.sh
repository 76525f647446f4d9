# Cluster test of postgres_fdw shards (issue 19 part 2), sourced by run_cluster_tests.sh.

# Two shard databases (reached through postgres_fdw over the server's socket, as separate
# clusters would be) each hold a navis-indexed table; the coordinator's parent is
# hash-partitioned over them as foreign tables. With `extensions 'navis'` the distance
# operator and ORDER BY are shipped to the shards (EXPLAIN VERBOSE shows the remote SQL, and
# a LIMIT on one foreign table is shipped too) and the shards answer with their navis
# indexes; the coordinator's Merge Append of the two ordered streams is the exact top-10 of
# the union for 20 queries (4-d vectors: each shard's scan is exact). Without the option
# nothing is shipped and the coordinator sorts.
test_fdw_shards_merge_the_global_top_k() {
  local s
  sql -c "CREATE EXTENSION IF NOT EXISTS postgres_fdw"
  for s in 1 2; do
    sql -c "DROP DATABASE IF EXISTS fdw_shard$s" -c "CREATE DATABASE fdw_shard$s"
    cluster_psql "$DIR" "$PORT" -d "fdw_shard$s" -v ON_ERROR_STOP=1 -q -c "CREATE EXTENSION navis" \
      -c "CREATE TABLE items (id int, v real[])" -c "CREATE INDEX items_v ON items USING navis (v)"
    sql -c "CREATE SERVER fdw_shard$s FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '$DIR',
              port '$PORT', dbname 'fdw_shard$s', extensions 'navis', async_capable 'true', fetch_size '10')" \
        -c "CREATE USER MAPPING FOR postgres SERVER fdw_shard$s OPTIONS (user 'postgres')"
  done
  sql -c "CREATE TABLE fdw_items (id int, v real[]) PARTITION BY HASH (id)" \
      -c "CREATE FOREIGN TABLE fdw_items_1 PARTITION OF fdw_items FOR VALUES WITH (MODULUS 2, REMAINDER 0)
            SERVER fdw_shard1 OPTIONS (table_name 'items')" \
      -c "CREATE FOREIGN TABLE fdw_items_2 PARTITION OF fdw_items FOR VALUES WITH (MODULUS 2, REMAINDER 1)
            SERVER fdw_shard2 OPTIONS (table_name 'items')" \
      -c "CREATE TABLE fdw_local AS SELECT i AS id, ARRAY[sin(i), cos(i * 1.3), sin(i * 0.7), cos(i * 2.1)]::real[] AS v
            FROM generate_series(1, 3000) i" \
      -c "INSERT INTO fdw_items SELECT id, v FROM fdw_local" -c "ANALYZE fdw_items"
  local counts; counts=$(for s in 1 2; do cluster_psql "$DIR" "$PORT" -d "fdw_shard$s" -At -c "SELECT count(*) FROM items"; done | paste -sd+)
  local plan; plan=$(val "EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM fdw_items ORDER BY v <-> '{0.1,0.2,0.3,0.4}' LIMIT 10")
  local one; one=$(val "EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM fdw_items_1 ORDER BY v <-> '{0.1,0.2,0.3,0.4}' LIMIT 10")
  local remote_sorted; remote_sorted=$(grep -c 'Remote SQL: .*ORDER BY (v OPERATOR(public.<->)' <<<"$plan" || true)
  if ! grep -q 'Merge Append' <<<"$plan" || [ "$remote_sorted" != 2 ] ||
     ! grep -q 'Remote SQL: .*ORDER BY (v OPERATOR(public.<->).*LIMIT 10' <<<"$one"; then
    fail fdw_shards_merge_the_global_top_k "plans: $plan / $one"; return
  fi
  # the top-10 ids of 20 queries, tie-broken by id after the distance (both sides)
  local q="SELECT string_agg(r.id::text, ',' ORDER BY g, r.d, r.id) FROM generate_series(1, 20) g,
      LATERAL (SELECT id, v <-> ARRAY[cos(g), sin(g * 0.9), cos(g * 0.4), sin(g * 1.7)]::real[] AS d FROM TABLE
               ORDER BY v <-> ARRAY[cos(g), sin(g * 0.9), cos(g * 0.4), sin(g * 1.7)]::real[] LIMIT 10) r"
  local merged exact
  merged=$(val "${q/TABLE/fdw_items}")
  exact=$(val "SET enable_indexscan = off; ${q/TABLE/fdw_local}" | tail -1)
  local used; used=$(cluster_psql "$DIR" "$PORT" -d fdw_shard1 -At -c "SELECT pg_stat_force_next_flush()" \
      -c "SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = 'items_v'" | tail -1)
  sql -c "ALTER SERVER fdw_shard1 OPTIONS (DROP extensions)"
  local unshipped; unshipped=$(val "EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM fdw_items_1 ORDER BY v <-> '{0.1,0.2,0.3,0.4}' LIMIT 10")
  sql -c "DROP TABLE fdw_items" -c "DROP SERVER fdw_shard1 CASCADE" -c "DROP SERVER fdw_shard2 CASCADE"
  # both shards took rows, 3000 in all
  [ "$(( $counts ))" = 3000 ] && ! grep -qE '(^|\+)0(\+|$)' <<<"$counts" ||
    { fail fdw_shards_merge_the_global_top_k "rows per shard: $counts"; return; }
  [ -n "$merged" ] && [ "$merged" = "$exact" ] ||
    { fail fdw_shards_merge_the_global_top_k "merged top-10 '${merged:0:80}...' differs from the exact '${exact:0:80}...'"; return; }
  [ "${used:-0}" -gt 0 ] || { fail fdw_shards_merge_the_global_top_k "shard 1's navis index was not scanned (idx_scan '$used')"; return; }
  if grep -q 'Remote SQL: .*ORDER BY' <<<"$unshipped"; then
    fail fdw_shards_merge_the_global_top_k "without extensions 'navis' the ORDER BY was still shipped: $unshipped"; return
  fi
  echo "ok       fdw_shards_merge_the_global_top_k (3000 rows over 2 foreign partitions ($counts); Merge Append of remote 'ORDER BY (v OPERATOR(public.<->) ...)' scans, LIMIT shipped to a single foreign table; 20 merged top-10 equal the exact top-10 of the union; shard 1's navis index scanned $used times; without extensions 'navis' nothing is shipped)"
}
