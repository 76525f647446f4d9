-- The result cache on the table shapes every navis feature must handle: an empty table, one
-- row, 3-d vectors, duplicate vectors (a cached query whose nearest row is at distance 0
-- gets threshold 0: only an equal query hits), and a table shrunk to a few rows. Each answer
-- is asked for twice with the cache on (a miss that admits, then a hit) and must equal the
-- answer with the cache off. The cluster runs with navis.result_cache_size = 16MB.
CREATE EXTENSION navis;
SET enable_seqscan = off;
CREATE TABLE s (id int PRIMARY KEY, v real[]);
CREATE INDEX s_v ON s USING navis (v);
CREATE FUNCTION rc(n text) RETURNS float8 LANGUAGE sql AS
  $$ SELECT coalesce((SELECT value FROM navis_result_cache_stats
                      WHERE index = 's_v'::regclass AND name = n), 0) $$;
-- the ids and the distances of the k nearest rows, in answer order
CREATE FUNCTION knn(q real[], k int) RETURNS text LANGUAGE sql AS
  $$ SELECT coalesce(string_agg(id || ':' || round(d::numeric, 4), ' ' ORDER BY n), '')
     FROM (SELECT id, v <-> q AS d, row_number() OVER () AS n
           FROM (SELECT id, v FROM s ORDER BY v <-> q LIMIT k) x) y $$;
-- the distances only (duplicate vectors tie, and tied rows may come in any order)
CREATE FUNCTION dists(q real[], k int) RETURNS text LANGUAGE sql AS
  $$ SELECT coalesce(string_agg(round(d::numeric, 4)::text, ' ' ORDER BY n), '')
     FROM (SELECT v <-> q AS d, row_number() OVER () AS n
           FROM (SELECT v FROM s ORDER BY v <-> q LIMIT k) x) y $$;
CREATE FUNCTION same_twice(q real[], k int) RETURNS text LANGUAGE plpgsql AS $$
DECLARE off_answer text; first text; second text;
BEGIN
  SET LOCAL navis.result_cache = off;
  off_answer := knn(q, k);
  SET LOCAL navis.result_cache = on;
  first := knn(q, k);
  second := knn(q, k);
  RETURN CASE WHEN first = off_answer AND second = off_answer THEN 'same: ' || off_answer
              ELSE format('DIFFERENT off=%s first=%s second=%s', off_answer, first, second) END;
END $$;
-- empty: nothing to cache, nothing returned
SELECT same_twice('{1,2,3}', 10);
SELECT rc('entries') AS entries;
-- one row: an entry holding fewer rows than asked for answers it once, never twice
INSERT INTO s VALUES (1, '{1,2,3}');
SELECT same_twice('{1,2,3.5}', 10);
SELECT same_twice('{1,2,3.5}', 10);
SELECT rc('entries') AS entries, rc('hits_equality') >= 1 AS hit;
-- 3-d vectors: 2,000 rows on a grid-like spiral, answers equal with and without the cache
INSERT INTO s SELECT i, ARRAY[sin(i * 0.7), cos(i * 1.3), (i % 50) / 10.0]::real[]
  FROM generate_series(2, 2000) i;
SELECT count(*) FILTER (WHERE same_twice(ARRAY[sin(g), cos(g), (g % 7) / 2.0]::real[], 10) LIKE 'same:%')
       AS same_as_off
  FROM generate_series(1, 40) g;
SELECT rc('hits_equality') >= 40 AS hits;
-- growing from one row rebuilt the index (a new build): its old partition was freed, so
-- the index holds one partition, not one per build
SELECT count(DISTINCT partition) AS partitions FROM navis_result_cache_stats
  WHERE index = 's_v'::regclass;
-- duplicates: 300 rows at one point. A query there caches distance-0 rows with threshold 0
-- (only an equal query hits); one nearby misses and gets its own answer
INSERT INTO s SELECT i, '{5,5,5}' FROM generate_series(3001, 3300) i;
SET navis.result_cache = off;
SELECT dists('{5,5,5}', 20) AS off_answer \gset
SELECT dists('{5,5,5.01}', 5) AS off_near \gset
SET navis.result_cache = on;
SELECT dists('{5,5,5}', 20) = :'off_answer' AS first, dists('{5,5,5}', 20) = :'off_answer' AS second;
SELECT rc('threshold_min') AS threshold_min, rc('misses') AS misses_before \gset
SELECT dists('{5,5,5.01}', 5) = :'off_near' AS near_answer, rc('misses') - :misses_before AS new_misses,
       :threshold_min AS min_threshold;
-- a table shrunk to a few rows: deleted rows never come back from an entry, before VACUUM
-- (PostgreSQL's visibility check) or after (VACUUM removed them from the cache)
SELECT same_twice('{0.5,0.5,0.5}', 10) LIKE 'same:%' AS cached;
DELETE FROM s WHERE id > 3;
SELECT same_twice('{0.5,0.5,0.5}', 10);
VACUUM s;
SELECT same_twice('{0.5,0.5,0.5}', 10);
SELECT rc('rows_removed_by_vacuum') > 0 AS removed_by_vacuum;
