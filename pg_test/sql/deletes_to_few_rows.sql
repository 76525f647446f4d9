-- Deletes down to a handful of rows (issue 14 part 5): after DELETE of all but a few rows
-- and VACUUM, every remaining row is still reachable in the graph (navis_verify) and returned
-- by an index scan; the shrunken index takes inserts again. The hard case is one row left:
-- every vertex near it and every entry point is deleted.
CREATE EXTENSION navis;
CREATE TABLE t (id int PRIMARY KEY, v real[]);
CREATE FUNCTION vec(i int) RETURNS real[] LANGUAGE sql IMMUTABLE AS
  $$ SELECT array_agg(sin(i * (0.1 + k * 0.37) + k)::real ORDER BY k) FROM generate_series(0, 15) k $$;
INSERT INTO t SELECT i, vec(i) FROM generate_series(1, 2000) i;
CREATE INDEX t_v ON t USING navis (v) WITH (max_degree = 16, build_list = 32);
SET enable_seqscan = off;
-- three rows left
DELETE FROM t WHERE id NOT IN (17, 1000, 1999);
VACUUM t;
SELECT clean, unreachable, dangling_edges, problems FROM navis_verify('t_v');
SELECT array_agg(id ORDER BY id) AS all_rows FROM (SELECT id FROM t ORDER BY v <-> vec(500) LIMIT 10) s;
SELECT id FROM t ORDER BY v <-> vec(1000) LIMIT 1;
-- one row left
DELETE FROM t WHERE id <> 1000;
VACUUM t;
SELECT clean, unreachable, dangling_edges, problems FROM navis_verify('t_v');
SELECT id FROM t ORDER BY v <-> vec(3) LIMIT 5;
EXPLAIN (COSTS OFF) SELECT id FROM t ORDER BY v <-> (SELECT vec(3)) LIMIT 5;
-- inserts into the shrunken index are found, and it stays sound
INSERT INTO t SELECT i, vec(i) FROM generate_series(3001, 3020) i;
SELECT count(*) AS found_itself FROM generate_series(3001, 3020) g
  WHERE (SELECT id FROM t ORDER BY v <-> vec(g) LIMIT 1) = g;
VACUUM t;
SELECT clean, unreachable, dangling_edges, problems FROM navis_verify('t_v');
SELECT count(*) AS rows_returned FROM (SELECT id FROM t ORDER BY v <-> vec(3) LIMIT 100) s;
-- everything deleted: the scan returns nothing, and the empty index still takes rows
DELETE FROM t;
VACUUM t;
SELECT count(*) AS rows_returned FROM (SELECT id FROM t ORDER BY v <-> vec(3) LIMIT 100) s;
INSERT INTO t VALUES (4000, vec(4000));
SELECT id FROM t ORDER BY v <-> vec(4000) LIMIT 3;
SELECT clean, unreachable, problems FROM navis_verify('t_v');
