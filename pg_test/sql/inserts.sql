-- Inserts, deletes and VACUUM through SQL, in one session: rows inserted after CREATE INDEX
-- are found, bad rows get clear errors, aborted and deleted rows never come back, VACUUM
-- consolidates and freed space is reused, navis_verify checks the structure throughout.
-- (Many sessions at once: pg_test/run_cluster_tests.sh.)
CREATE EXTENSION navis;
CREATE TABLE t (id int PRIMARY KEY, v real[]);
-- 16-dimensional points on a curve that never comes back to itself
CREATE FUNCTION vec(i int) RETURNS real[] LANGUAGE sql IMMUTABLE AS
  $$ SELECT array_agg(sin(i * (0.1 + k * 0.37) + k)::real ORDER BY k) FROM generate_series(0, 15) k $$;
INSERT INTO t SELECT i, vec(i) FROM generate_series(1, 2000) i;
CREATE INDEX t_v ON t USING navis (v) WITH (max_degree = 16, build_list = 32);
-- rows inserted after the build: each is found as its own nearest neighbour
INSERT INTO t SELECT i, vec(i) FROM generate_series(2001, 3000) i;
SET enable_seqscan = off;
SELECT count(*) AS found_itself FROM generate_series(2001, 3000) g
  WHERE (SELECT id FROM t ORDER BY v <-> vec(g) LIMIT 1) = g;
SELECT vertices, deleted FROM navis_index_stats('t_v');
-- every insert wrote its lists out of place: one fresh page per slots_per_page (here 60)
-- modified lists, so one page per insert at max_degree 16
SELECT value AS edge_pages_written
  FROM navis_index_counters('t_v') WHERE counter = 'edge_pages_written';
-- back-edge pruning can leave a few vertices without a path from the entry points; the next
-- VACUUM links them again
SELECT problems, dangling_edges, unreachable <= 30 AS few_unreachable FROM navis_verify('t_v');
VACUUM t;
SELECT clean, vertices, dangling_edges, unreachable, problems, details FROM navis_verify('t_v');
SELECT counter, value FROM navis_index_counters('t_v')
  WHERE counter IN ('inserts', 'vectors_written', 'vertex_ids');
-- NULLs are not indexed (the row is stored); bad vectors are refused with the reason
INSERT INTO t VALUES (5000, NULL);
INSERT INTO t VALUES (5001, '{1,2,3}');
INSERT INTO t VALUES (5002, array_fill(1, ARRAY[15]) || 'NaN'::real);
INSERT INTO t VALUES (5003, array_fill(1, ARRAY[15]) || '-Infinity'::real);
INSERT INTO t VALUES (5004, '{{1,2},{3,4}}');
INSERT INTO t VALUES (5005, array_fill(1, ARRAY[15]) || NULL::real);
INSERT INTO t VALUES (5006, '{}');
SELECT count(*) FROM t WHERE id BETWEEN 5000 AND 5006;
-- large but finite values are accepted (an outlier far outside the data the quantizer was
-- trained on: approximate search may rank it anywhere, exact distances stay right)
INSERT INTO t VALUES (5007, array_fill(1e18::real, ARRAY[16]));
SELECT count(*) FROM t WHERE id = 5007;
-- rows of an aborted transaction never appear; a savepoint rolled back likewise
BEGIN;
INSERT INTO t VALUES (6000, array_fill(9::real, ARRAY[16]));
ROLLBACK;
BEGIN;
INSERT INTO t VALUES (6001, array_fill(7::real, ARRAY[16]));
SAVEPOINT s;
INSERT INTO t VALUES (6002, array_fill(7::real, ARRAY[15]) || 7.001::real);
ROLLBACK TO s;
COMMIT;
SELECT id FROM t ORDER BY v <-> array_fill(9::real, ARRAY[16]) LIMIT 1;
SELECT id FROM t ORDER BY v <-> array_fill(7::real, ARRAY[16]) LIMIT 2;
-- UPDATE gives the row a new entry; the old vector no longer finds it
UPDATE t SET v = array_fill(8::real, ARRAY[16]) WHERE id = 1;
SELECT id, v <-> array_fill(8::real, ARRAY[16]) AS d FROM t ORDER BY v <-> array_fill(8::real, ARRAY[16]) LIMIT 1;
SELECT id FROM t ORDER BY v <-> vec(1) LIMIT 1;
-- DELETE: deleted rows are gone at once (the heap says so) and VACUUM flags them in the
-- index; a quarter of the graph is over the 10% threshold, so VACUUM also consolidates
DELETE FROM t WHERE id % 4 = 0;
SELECT count(*) AS deleted_rows_returned
  FROM (SELECT id FROM t ORDER BY v <-> vec(8) LIMIT 200) s WHERE id % 4 = 0;
VACUUM t;
SELECT vertices AS live, deleted < 20 AS only_entry_points_kept
  FROM navis_index_stats('t_v');
SELECT clean, dangling_edges, unreachable, problems, details FROM navis_verify('t_v');
SELECT counter, value > 0 AS happened FROM navis_index_counters('t_v')
  WHERE counter IN ('consolidations', 'vertices_freed', 'lists_repaired') ORDER BY counter;
SELECT count(*) >= 0.99 * 2249 AS nearly_all_found_themselves FROM generate_series(1, 3000) g
  WHERE g % 4 <> 0 AND g <> 1 AND (SELECT id FROM t ORDER BY v <-> vec(g) LIMIT 1) = g;
-- new rows reuse the freed vertex ids and vector slots: the files do not grow
SELECT value AS ids_before FROM navis_index_counters('t_v') WHERE counter = 'vertex_ids' \gset
INSERT INTO t SELECT i, vec(i) FROM generate_series(10001, 10500) i;
SELECT value = :ids_before AS no_new_ids FROM navis_index_counters('t_v') WHERE counter = 'vertex_ids';
SELECT value >= 500 AS reused FROM navis_index_counters('t_v') WHERE counter = 'vertices_reused';
VACUUM t;
SELECT clean, problems, unreachable FROM navis_verify('t_v');
-- below the threshold VACUUM only flags; consolidate_threshold is a reloption
ALTER INDEX t_v SET (consolidate_threshold = 0.5);
DELETE FROM t WHERE id BETWEEN 10001 AND 10100;
VACUUM t;
SELECT vertices, deleted FROM navis_index_stats('t_v');
SELECT value AS consolidations FROM navis_index_counters('t_v') WHERE counter = 'consolidations';
ALTER INDEX t_v SET (consolidate_threshold = 2);
-- cosine indexes leave zero vectors out, on insert as in the build
CREATE TABLE c (id int, v real[]);
INSERT INTO c SELECT i, vec(i) FROM generate_series(1, 300) i;
CREATE INDEX c_v ON c USING navis (v navis_cosine_ops);
INSERT INTO c VALUES (301, array_fill(0::real, ARRAY[16])), (302, vec(302));
SELECT vertices FROM navis_index_stats('c_v');
-- an index built over an empty table takes rows at once (growing.sql has more)
CREATE TABLE e (v real[]);
CREATE INDEX e_v ON e USING navis (v);
INSERT INTO e VALUES ('{1,2,3}');
SELECT vertices, built_rows FROM navis_index_stats('e_v');
INSERT INTO e VALUES (NULL);
-- navis_verify and navis_index_counters want a navis index
SELECT * FROM navis_verify('t_pkey');
