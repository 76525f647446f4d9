-- The Aker result cache (navis.result_cache, RFC 0003) on a real server: equality,
-- approximate and alias hits, a threshold that shrinks after an approximate hit, answers
-- identical to no cache, a fall-through past the cached rows, sharing across backends, a
-- deleted row never returned (before and after VACUUM), an inserted row entering an entry,
-- eviction, and the postmaster settings. The test cluster runs with
-- navis.result_cache_size = 16MB (pg_test/run_sql_tests.sh).
CREATE EXTENSION navis;
SHOW navis.result_cache;
SHOW navis.result_cache_size;
SHOW navis.result_cache_indexes;
SHOW navis.result_cache_reserve;
-- postmaster settings: a session cannot change them
SET navis.result_cache_size = '1MB';
SET navis.result_cache_indexes = 2;
SET navis.result_cache_reserve = 64;
CREATE TABLE r (id int PRIMARY KEY, v real[]);
CREATE FUNCTION vec(i int) RETURNS real[] LANGUAGE sql IMMUTABLE AS
  $$ SELECT array_agg(sin(i * (0.1 + k * 0.37) + k)::real ORDER BY k) FROM generate_series(0, 15) k $$;
-- a vector moved by d along axis k (Euclidean distance d from a)
CREATE FUNCTION shift(a real[], d float8, k int) RETURNS real[] LANGUAGE sql IMMUTABLE AS
  $$ SELECT array_agg(CASE WHEN i = k THEN (x + d)::real ELSE x END ORDER BY i)
     FROM unnest(a) WITH ORDINALITY u(x, i) $$;
INSERT INTO r SELECT i, vec(i) FROM generate_series(1, 3000) i;
CREATE INDEX r_v ON r USING navis (v) WITH (max_degree = 16, build_list = 32);
SET enable_seqscan = off;
CREATE FUNCTION rc(n text) RETURNS float8 LANGUAGE sql AS
  $$ SELECT coalesce((SELECT value FROM navis_result_cache_stats
                      WHERE index = 'r_v'::regclass AND name = n), 0) $$;
CREATE FUNCTION knn(q real[], k int) RETURNS int[] LANGUAGE sql AS
  $$ SELECT array_agg(id) FROM (SELECT id FROM r ORDER BY v <-> q LIMIT k) s $$;
-- with the cache off (the default) no index holds any cache
CREATE TABLE off_answers AS SELECT g, knn(vec(g), 10) AS ids FROM generate_series(5001, 5020) g;
SELECT count(*) AS partitions_held FROM navis_result_cache_stats;
-- on: the first round misses and admits, the second is answered from the cache, identically
SET navis.result_cache = on;
SELECT count(*) FILTER (WHERE knn(vec(g), 10) = ids) AS same_as_off FROM off_answers;
SELECT rc('misses') AS misses, rc('entries_admitted') AS admitted, rc('entries') AS entries;
SELECT count(*) FILTER (WHERE knn(vec(g), 10) = ids) AS same_as_off FROM off_answers;
SELECT rc('hits_equality') AS equality_hits, rc('misses') AS misses;
-- an equality hit reads no index page (the buffer hits are the 10 heap rows)
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT id FROM r ORDER BY v <-> vec(5001) LIMIT 10;
-- approximate hits: q is cached with threshold minD/4 (minD: distance to its nearest row)
CREATE TABLE q AS SELECT vec(7001) AS v,
  (SELECT v <-> vec(7001) FROM r ORDER BY v <-> vec(7001) LIMIT 1) / 4 AS tau0;
SELECT knn((SELECT v FROM q), 10) IS NOT NULL AS cached;
-- half the threshold away: an approximate hit, re-ranked for the new query (recall@10
-- against the same query searched with the cache off)
SET navis.result_cache = off;
CREATE TABLE near_truth AS SELECT knn(shift(q.v, q.tau0 / 2, 1), 10) AS ids FROM q;
SET navis.result_cache = on;
SELECT (SELECT count(*) FROM unnest(knn(shift(q.v, q.tau0 / 2, 1), 10)) i
         WHERE i = ANY(t.ids)) / 10.0 AS recall_at_10,
       rc('hits_approximate') AS approximate_hits FROM q, near_truth t;
-- ... which shrank the threshold to a quarter: as far away on another axis now misses
SELECT rc('misses') AS misses_before FROM q \gset
SELECT knn(shift(q.v, q.tau0 / 2, 2), 10) IS NOT NULL AS answered, rc('misses') - :misses_before AS new_misses FROM q;
-- the approximate query again: answered through its alias
SELECT knn(shift(q.v, q.tau0 / 2, 1), 10) IS NOT NULL AS answered,
       rc('hits_alias') AS alias_hits, rc('aliases') AS aliases, rc('aliases_linked') AS linked FROM q;
-- the entry holds k + reserve = 20 rows: asking for 30 falls through to a search that
-- goes on past them, in order, without repeating one
CREATE TABLE thirty AS SELECT id, v <-> vec(5002) AS d, row_number() OVER () AS n
  FROM (SELECT id, v FROM r ORDER BY v <-> vec(5002) LIMIT 30) s;
SELECT count(*) AS rows, count(DISTINCT id) AS distinct_rows,
       bool_and(d >= coalesce(prev, 0)) AS ordered, rc('fall_throughs') AS fall_throughs
  FROM (SELECT id, d, lag(d) OVER (ORDER BY n) AS prev FROM thirty) s;
-- another backend shares the cache
\c
SET enable_seqscan = off;
SET navis.result_cache = on;
SELECT rc('hits_equality') AS hits_before \gset
SELECT knn(vec(5003), 10) = (SELECT ids FROM off_answers WHERE g = 5003) AS same,
       rc('hits_equality') - :hits_before AS new_equality_hits;
-- a deleted row is never returned: not before VACUUM (PostgreSQL's visibility check), not
-- after (VACUUM removed it from the cache and the reserve filled in)
SELECT (knn(vec(5004), 1))[1] AS nearest \gset
DELETE FROM r WHERE id = :nearest;
SELECT :nearest = ANY(knn(vec(5004), 10)) AS deleted_returned, cardinality(knn(vec(5004), 10)) AS rows,
       rc('rows_removed_by_vacuum') AS removed;
VACUUM r;
SELECT :nearest = ANY(knn(vec(5004), 10)) AS deleted_returned, cardinality(knn(vec(5004), 10)) AS rows,
       rc('rows_removed_by_vacuum') AS removed, rc('hits_equality') > :hits_before + 1 AS from_cache;
-- an inserted row closer than any cached one enters the entry (fast path)
INSERT INTO r VALUES (100000, shift(vec(5005), 0.0001, 3));
SELECT (knn(vec(5005), 10))[1] AS nearest_now, rc('refresh_fast') >= 1 AS fast_refresh,
       rc('insert_log_appends') AS logged;
-- eviction: 1000-dimensional rows make a partition (16MB / 4) hold about 600 rows
CREATE TABLE h (id int PRIMARY KEY, v real[]);
CREATE FUNCTION rnd(seed int) RETURNS real[] LANGUAGE sql IMMUTABLE AS
  $$ SELECT array_agg((hashint4(seed * 1000 + k) % 1000) / 1000.0::real ORDER BY k)
     FROM generate_series(1, 1000) k $$;
INSERT INTO h SELECT i, rnd(i) FROM generate_series(1, 2000) i;
CREATE INDEX h_v ON h USING navis (v) WITH (max_degree = 16, build_list = 32);
SELECT count(*) FROM generate_series(1, 150) g, LATERAL (SELECT id FROM h ORDER BY v <-> rnd(-g) LIMIT 10) s;
CREATE FUNCTION hc(n text) RETURNS float8 LANGUAGE sql AS
  $$ SELECT coalesce((SELECT value FROM navis_result_cache_stats
                      WHERE index = 'h_v'::regclass AND name = n), 0) $$;
SELECT hc('evictions') > 0 AS evicted, hc('entries') < 150 AS fewer_entries,
       hc('objects') <= hc('object_capacity') AS within_pool;
-- the newest query is still cached, the oldest is not
SELECT hc('hits_equality') AS before \gset
SELECT count(*) FROM (SELECT id FROM h ORDER BY v <-> rnd(-150) LIMIT 10) s;
SELECT hc('hits_equality') - :before AS newest_hit;
SELECT count(*) FROM (SELECT id FROM h ORDER BY v <-> rnd(-1) LIMIT 10) s;
SELECT hc('hits_equality') - :before AS still_one_hit;
-- DROP INDEX frees the index's partition; reset empties the cache
SELECT count(DISTINCT partition) AS partitions_held FROM navis_result_cache_stats;
DROP INDEX h_v;
SELECT count(DISTINCT partition) AS partitions_held FROM navis_result_cache_stats;
-- anyone may read the statistics; emptying the cache costs every session its hits, so only
-- superusers may (as pg_stat_reset())
CREATE ROLE rc_reader;
SET ROLE rc_reader;
SELECT count(*) > 0 AS stats_readable FROM navis_result_cache_stats;
SELECT navis_result_cache_reset();
RESET ROLE;
SELECT navis_result_cache_reset();
SELECT count(*) AS partitions_held FROM navis_result_cache_stats;
