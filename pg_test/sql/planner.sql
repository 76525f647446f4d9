-- The planner's choices with a navis index (issue 14 part 6): the index serves ORDER BY ...
-- LIMIT on small and large tables, under filters that keep most rows and under distance
-- bounds; a very selective filter goes to another index or a sequential scan; a partial
-- index whose predicate matches the filter is chosen; the cost grows with the table.
CREATE EXTENSION navis;
SET max_parallel_workers_per_gather = 0;
CREATE FUNCTION vec(i int) RETURNS real[] LANGUAGE sql IMMUTABLE AS
  $$ SELECT ARRAY[sin(i * 0.1), cos(i * 0.37), sin(i * 0.73 + 1), cos(i * 1.3)]::real[] $$;
CREATE TABLE t (id int PRIMARY KEY, c int, r int, u int, v real[]);
INSERT INTO t SELECT i, i % 50, i % 2000, i % 20000, vec(i) FROM generate_series(1, 20000) i;
CREATE INDEX t_v ON t USING navis (v);
CREATE INDEX t_r ON t (r);
ANALYZE t;
-- building a partial index leaves the table's row count alone (it counts every heap row,
-- not the indexed ones)
CREATE INDEX t_v_c7 ON t USING navis (v) WHERE c = 7;
SELECT reltuples FROM pg_class WHERE relname = 't';
EXPLAIN (COSTS OFF) SELECT id FROM t ORDER BY v <-> '{0.5,0.5,0.5,0.5}' LIMIT 10;
-- a filter that keeps most rows
EXPLAIN (COSTS OFF) SELECT id FROM t WHERE c <> 3 ORDER BY v <-> '{0.5,0.5,0.5,0.5}' LIMIT 10;
-- a distance bound
EXPLAIN (COSTS OFF) SELECT id FROM t WHERE v <-> '{0.5,0.5,0.5,0.5}' < 0.5
  ORDER BY v <-> '{0.5,0.5,0.5,0.5}' LIMIT 10;
-- the partial index matches the filter
EXPLAIN (COSTS OFF) SELECT id FROM t WHERE c = 7 ORDER BY v <-> '{0.5,0.5,0.5,0.5}' LIMIT 10;
-- a very selective filter with its own index: that index, then a sort
EXPLAIN (COSTS OFF) SELECT id FROM t WHERE r = 7 ORDER BY v <-> '{0.5,0.5,0.5,0.5}' LIMIT 10;
-- a very selective filter without one: a sequential scan, then a sort
EXPLAIN (COSTS OFF) SELECT id FROM t WHERE u = 7 ORDER BY v <-> '{0.5,0.5,0.5,0.5}' LIMIT 10;
-- and they all return the same rows as exact search
SELECT (SELECT array_agg(id) FROM (SELECT id FROM t WHERE c = 7 ORDER BY v <-> '{0.5,0.5,0.5,0.5}' LIMIT 10) s)
     = (SELECT array_agg(id) FROM (SELECT id FROM t WHERE c = 7 ORDER BY v <-> '{0.5,0.5,0.5,0.5}', id LIMIT 10) e)
  AS partial_index_exact;
-- a small table still uses the index
CREATE TABLE small (id int, v real[]);
INSERT INTO small SELECT i, vec(i) FROM generate_series(1, 500) i;
CREATE INDEX ON small USING navis (v);
ANALYZE small;
EXPLAIN (COSTS OFF) SELECT id FROM small ORDER BY v <-> '{0.5,0.5,0.5,0.5}' LIMIT 5;
-- the cost of reading every row grows with the table
CREATE FUNCTION index_total_cost(q text) RETURNS float8 LANGUAGE plpgsql AS $$
DECLARE plan json;
BEGIN
  SET LOCAL enable_seqscan = off;
  EXECUTE 'EXPLAIN (FORMAT JSON) ' || q INTO plan;
  RETURN (plan -> 0 -> 'Plan' ->> 'Total Cost')::float8;
END $$;
SELECT index_total_cost('SELECT id FROM t ORDER BY v <-> ''{0.5,0.5,0.5,0.5}''')
     > 10 * index_total_cost('SELECT id FROM small ORDER BY v <-> ''{0.5,0.5,0.5,0.5}''')
  AS grows_with_the_table;
