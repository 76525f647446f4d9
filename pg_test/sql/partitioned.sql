-- Declarative partitioning (issue 19 part 1): a navis index created on a partitioned table is
-- one index per partition; ORDER BY ... LIMIT over the parent merges the partitions' ordered
-- index scans (Merge Append) into the global top-k, WHERE clauses on the partition key prune
-- partitions, and partitions attached or detached later keep working.
CREATE EXTENSION navis;
CREATE FUNCTION vec(i int) RETURNS real[] LANGUAGE sql IMMUTABLE AS
  $$ SELECT array_agg(sin(i * (0.1 + k * 0.37) + k)::real ORDER BY k) FROM generate_series(0, 7) k $$;
CREATE TABLE p (id int, cat int, v real[]) PARTITION BY LIST (cat);
CREATE TABLE p0 PARTITION OF p FOR VALUES IN (0);
CREATE TABLE p1 PARTITION OF p FOR VALUES IN (1);
CREATE TABLE p2 PARTITION OF p FOR VALUES IN (2);
CREATE TABLE p3 PARTITION OF p FOR VALUES IN (3);
INSERT INTO p SELECT i, i % 4, vec(i) FROM generate_series(1, 4000) i;
CREATE INDEX p_v ON p USING navis (v);
SELECT count(*) AS partition_indexes FROM pg_inherits WHERE inhparent = 'p_v'::regclass;
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM p ORDER BY v <-> vec(7777) LIMIT 10;
-- the merged top-10 is the exact top-10 of the union, for 20 queries
CREATE FUNCTION index_top(q int) RETURNS int[] LANGUAGE sql AS
  $$ SELECT array_agg(id) FROM (SELECT id FROM p ORDER BY v <-> vec(q) LIMIT 10) s $$;
CREATE FUNCTION exact_top(q int) RETURNS int[] LANGUAGE sql AS
  $$ SELECT array_agg(id) FROM (SELECT id FROM p ORDER BY (v <-> vec(q)) + 0, id LIMIT 10) s $$;
SELECT count(*) FILTER (WHERE index_top(q) = exact_top(q)) AS exact_of_20 FROM generate_series(9001, 9020) q;
-- a WHERE clause on the partition key scans only the matching partition
EXPLAIN (COSTS OFF) SELECT id FROM p WHERE cat = 2 ORDER BY v <-> vec(7777) LIMIT 10;
SELECT bool_and(id % 4 = 2) AS only_cat_2, count(*) FROM
  (SELECT id FROM p WHERE cat = 2 ORDER BY v <-> vec(7777) LIMIT 10) s;
-- inserts route to their partition's index
INSERT INTO p VALUES (5000, 1, vec(9999));
SELECT id FROM p ORDER BY v <-> vec(9999) LIMIT 1;
-- a partition attached later gets a navis index of its own (created by ATTACH) and joins the merge
CREATE TABLE p4 (id int, cat int, v real[]);
INSERT INTO p4 SELECT i, 4, vec(i) FROM generate_series(6001, 7000) i;
ALTER TABLE p ATTACH PARTITION p4 FOR VALUES IN (4);
SELECT count(*) AS partition_indexes FROM pg_inherits WHERE inhparent = 'p_v'::regclass;
SELECT id FROM p ORDER BY v <-> vec(6500) LIMIT 1;
SELECT count(*) FILTER (WHERE index_top(q) = exact_top(q)) AS exact_of_20_after_attach FROM generate_series(9001, 9020) q;
-- a detached partition keeps its index as a standalone one; the parent no longer returns its rows
ALTER TABLE p DETACH PARTITION p4;
SELECT count(*) AS from_detached FROM (SELECT id FROM p ORDER BY v <-> vec(6500) LIMIT 20) s WHERE id > 6000;
SELECT id FROM p4 ORDER BY v <-> vec(6500) LIMIT 1;
SELECT problems, unreachable <= 3 AS few_unreachable FROM navis_verify('p4_v_idx');
