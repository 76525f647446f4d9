-- Ordered scans that go on until the index runs out of rows (issue 14 part 3): every row
-- once, in exact distance order, whatever the filter; navis.max_scan_tuples still caps.
CREATE EXTENSION navis;
-- 20,000 rows on a curve in 8 dimensions, then twenty copies of one point, far from the
-- queries. (Copies near a query are part 4's case: a prune among equals leaves most of them
-- without an edge leading to them, the first pass misses them, and strict order must then
-- skip them.)
CREATE TABLE t (i int PRIMARY KEY, v real[]);
INSERT INTO t SELECT i, ARRAY[sin(i), cos(i * 1.3), sin(i * 0.7), cos(i * 2.1),
                              sin(i * 3.7), cos(i * 0.3), sin(i * 1.9), cos(i * 4.3)]::real[]
  FROM generate_series(1, 20000) i;
INSERT INTO t SELECT i, '{0.25,0.5,-0.25,0.75,0,-0.5,0.5,0.25}' FROM generate_series(20001, 20020) i;
CREATE TABLE q (id int PRIMARY KEY, v real[]);
INSERT INTO q VALUES (1, '{0.5,-0.3,0.5,-0.3,0.5,-0.3,0.5,-0.3}'),
                     (2, '{-0.9,0.1,0.8,-0.2,0.3,0.9,-0.6,0}');
SET max_parallel_maintenance_workers = 0;
CREATE INDEX t_v ON t USING navis (v);
SET enable_seqscan = off;
SET enable_sort = off;
SET navis.max_scan_tuples = 1000000;
-- count, distinct rows and order of a whole scan in the index's order
CREATE FUNCTION scan_check(query int, filter int DEFAULT 1, lim bigint DEFAULT NULL)
RETURNS TABLE (n bigint, distinct_rows bigint, ordered bool) LANGUAGE sql AS $$
  SELECT count(*), count(DISTINCT i), coalesce(bool_and(d >= prev), true) FROM (
    SELECT i, d, lag(d, 1, '-Infinity') OVER (ORDER BY rn) AS prev FROM (
      SELECT i, d, row_number() OVER () AS rn FROM (
        SELECT i, v <-> (SELECT v FROM q WHERE id = query) AS d FROM t
        WHERE i % filter = 0
        ORDER BY v <-> (SELECT v FROM q WHERE id = query) LIMIT lim) s) s2) s3
$$;
EXPLAIN (COSTS OFF) SELECT i FROM t ORDER BY v <-> (SELECT v FROM q WHERE id = 1);
-- An unbounded scan returns every row once, in non-decreasing distance (it used to stop
-- near 10,000 rows, the largest list a resumed pass could grow to).
SELECT count(*) FROM t;
SELECT * FROM scan_check(1);
-- A filter that keeps one row in 1,000 still gets its 11 rows, far past the first pass.
SELECT * FROM scan_check(1, 1000, 11);
SELECT * FROM scan_check(2, 1000, 11);
-- ... and they are the exact 11 nearest of the rows it keeps (a sort computes those).
SELECT (SELECT array_agg(i) FROM (SELECT i FROM t WHERE i % 1000 = 0
          ORDER BY v <-> (SELECT v FROM q WHERE id = 1) LIMIT 11) a)
     = (SELECT array_agg(i) FROM (SELECT i FROM t WHERE i % 1000 = 0
          ORDER BY (v <-> (SELECT v FROM q WHERE id = 1)) + 0, i LIMIT 11) b) AS exact;
-- A scan state of at most 64 kB (work_mem) reads in exhaustive rounds of 2048 rows.
SET work_mem = '64kB';
SELECT * FROM scan_check(1);
RESET work_mem;
-- Deleted rows: before VACUUM the heap drops them, after it the index does.
DELETE FROM t WHERE i % 7 = 0;
SELECT * FROM scan_check(1);
VACUUM t;
SELECT * FROM scan_check(1);
-- navis.max_scan_tuples still bounds what one scan returns, filter or not.
SET navis.max_scan_tuples = 5000;
SELECT * FROM scan_check(1);
SELECT * FROM scan_check(1, 1000, 11);
SET navis.max_scan_tuples = 20000;
SELECT * FROM scan_check(1, 1000, 11);
RESET navis.max_scan_tuples;
-- Twenty identical vectors alone: all come back without LIMIT, at any search list
-- (a prune among equals leaves some copies without an edge leading to them).
CREATE TABLE dup (id int, v real[]);
INSERT INTO dup SELECT g, '{1,2,3}' FROM generate_series(1, 20) g;
CREATE INDEX dup_v ON dup USING navis (v);
SELECT count(*), count(DISTINCT id) FROM (SELECT id FROM dup ORDER BY v <-> '{1,2,3.5}') s;
SET navis.search_list = 1;
SELECT count(*), count(DISTINCT id) FROM (SELECT id FROM dup ORDER BY v <-> '{1,2,3.5}') s;
SELECT count(*), count(DISTINCT id) FROM (SELECT id FROM dup ORDER BY v <-> '{1,2,3}') s;
RESET navis.search_list;
-- navis.iterative_scan, pgvector's hnsw.iterative_scan on navis's cursor (issue 16 part 3)
SET navis.max_scan_tuples = 1000000;
SHOW navis.iterative_scan;
-- off: the first pass only, at most navis.search_list rows
SET navis.iterative_scan = off;
SET navis.search_list = 40;
SELECT * FROM scan_check(1);
SELECT * FROM scan_check(1, 1000, 11);
RESET navis.search_list;
-- relaxed_order: a row found after a farther one comes back late instead of being skipped,
-- so an unbounded scan returns every row once (strict_order may skip a few)
SET navis.iterative_scan = relaxed_order;
SELECT n = (SELECT count(*) FROM t) AS every_row, n = distinct_rows AS each_once
  FROM scan_check(1);
SELECT n = (SELECT count(*) FROM t) AS every_row, n = distinct_rows AS each_once
  FROM scan_check(2);
SELECT n, distinct_rows FROM scan_check(2, 1000, 11);
SET navis.iterative_scan = strict_order;
SELECT n <= (SELECT count(*) FROM t) AS at_most_every_row, ordered FROM scan_check(2);
SET navis.iterative_scan = unordered;
RESET navis.iterative_scan;
