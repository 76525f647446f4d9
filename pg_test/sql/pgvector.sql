-- navis-test: requires-extension vector
-- pgvector's vector type on navis. Runs only where pgvector is installed (CI has none: the
-- runner then prints "skipped"). pgvector first, then navis: CREATE EXTENSION navis adds the
-- operator classes for vector itself.
CREATE EXTENSION vector;
CREATE EXTENSION navis;
SELECT c.opcname, c.opcdefault, c.opcintype::regtype AS type, o.oprname,
       o.oprleft::regtype AS left, o.oprright::regtype AS right, ao.amoppurpose
FROM pg_opclass c
JOIN pg_amop ao ON ao.amopfamily = c.opcfamily
JOIN pg_operator o ON o.oid = ao.amopopr
WHERE c.opcmethod = (SELECT oid FROM pg_am WHERE amname = 'navis')
ORDER BY c.opcname;
-- they belong to neither extension (see src/pgvector.rs)
SELECT count(*) AS extension_members FROM pg_depend
WHERE deptype = 'e' AND classid IN ('pg_opclass'::regclass, 'pg_opfamily'::regclass)
  AND pg_describe_object(classid, objid, 0) LIKE '%navis_vector_%_ops%';
-- already enabled: nothing to do
SELECT navis_enable_pgvector();
-- a small pgvector table, unchanged, indexed with navis for each distance
CREATE TABLE items (id int PRIMARY KEY, embedding vector(3));
INSERT INTO items
SELECT i, ARRAY[sin(i), cos(i * 0.7), (i % 17) / 17.0 - 0.5]::vector
FROM generate_series(1, 400) i;
INSERT INTO items VALUES (401, NULL);
CREATE INDEX items_l2 ON items USING navis (embedding);
CREATE INDEX items_ip ON items USING navis (embedding navis_vector_ip_ops);
CREATE INDEX items_cos ON items USING navis (embedding navis_vector_cosine_ops);
SELECT indexrelid::regclass AS index, opc.opcname
FROM pg_index i JOIN pg_opclass opc ON opc.oid = i.indclass[0]
WHERE indrelid = 'items'::regclass AND opc.opcmethod = (SELECT oid FROM pg_am WHERE amname = 'navis')
ORDER BY 1;
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM items ORDER BY embedding <-> '[0.5, 0.5, 0.0]' LIMIT 10;
EXPLAIN (COSTS OFF) SELECT id FROM items ORDER BY embedding <#> '[0.5, 0.5, 0.0]' LIMIT 10;
EXPLAIN (COSTS OFF) SELECT id FROM items ORDER BY embedding <=> '[0.5, 0.5, 0.0]' LIMIT 10;
-- a query parameter of type vector, as applications send it
PREPARE nearest(vector) AS SELECT id FROM items ORDER BY embedding <-> $1 LIMIT 5;
EXPLAIN (COSTS OFF) EXECUTE nearest('[0.5, 0.5, 0.0]');
EXECUTE nearest('[0.5, 0.5, 0.0]');
-- the index returns the exact top 10, in order, for each operator: top10 ranks a table's rows
-- by one operator through the index (exact = false) or with index scans off
CREATE FUNCTION top10(tbl regclass, op text, query text, exact bool)
RETURNS TABLE (rank bigint, id int, dist float8) LANGUAGE plpgsql AS $$
BEGIN
  PERFORM set_config('enable_indexscan', CASE WHEN exact THEN 'off' ELSE 'on' END, true);
  PERFORM set_config('enable_seqscan', CASE WHEN exact THEN 'on' ELSE 'off' END, true);
  RETURN QUERY EXECUTE format(
    'SELECT row_number() OVER (), id, d FROM (SELECT id, embedding %s %L AS d FROM %s
       ORDER BY embedding %s %L LIMIT 10) s', op, query, tbl, op, query);
END $$;
CREATE FUNCTION index_vs_exact(tbl regclass, ops text[], query text)
RETURNS TABLE (op text, rows bigint, same_id_at_rank bigint, same_distances bool) LANGUAGE sql AS $$
  SELECT o, count(*), count(*) FILTER (WHERE e.id = i.id), bool_and(abs(e.dist - i.dist) < 1e-6)
  FROM unnest(ops) o, LATERAL top10(tbl, o, query, false) i
  JOIN LATERAL top10(tbl, o, query, true) e USING (rank)
  GROUP BY o ORDER BY o $$;
SELECT * FROM index_vs_exact('items', '{<->,<#>,<=>}', '[0.5, 0.5, 0.0]');
SET enable_seqscan = off;
-- the query must have the column's dimensions; the NULL row (401) is never returned
SELECT id FROM items ORDER BY embedding <-> '[1, 2]' LIMIT 1;
SELECT count(*) AS rows, count(*) FILTER (WHERE id = 401) AS null_rows
FROM (SELECT id FROM items ORDER BY embedding <-> '[0.5, 0.5, 0.0]' LIMIT 50) s;
-- 784 dimensions: values this large are stored out of line (TOAST) and read through it
SELECT setseed(0.25);
CREATE TABLE wide (id int, embedding vector(784));
INSERT INTO wide
SELECT i, (SELECT array_agg(((i % 7) + random()) * (j % 5))::real[] FROM generate_series(1, 784) j)::vector
FROM generate_series(1, 200) i;
SELECT pg_relation_size(reltoastrelid) > 0 AS toasted FROM pg_class WHERE relname = 'wide';
-- (workaround, remove when build.rs polls QueryCancelPending/ProcDiePending: PostgreSQL's
-- idle-stats timer sets InterruptPending without any cancel, and a build that runs when it
-- fires reports "cancelled"; a pause lets the pending stats flush so the timer is off)
SELECT pg_sleep(1.1);
CREATE INDEX wide_l2 ON wide USING navis (embedding);
EXPLAIN (COSTS OFF) SELECT id FROM wide ORDER BY embedding <-> (SELECT embedding FROM wide WHERE id = 3) LIMIT 10;
CREATE TEMP TABLE wq AS SELECT id, embedding FROM wide WHERE id IN (3, 50, 111, 150, 199);
CREATE TEMP TABLE wgot AS SELECT wq.id AS qid, n.id
  FROM wq CROSS JOIN LATERAL (SELECT w.id FROM wide w ORDER BY w.embedding <-> wq.embedding LIMIT 10) n;
SET enable_seqscan = on;
SET enable_indexscan = off;
CREATE TEMP TABLE wexact AS SELECT wq.id AS qid, n.id
  FROM wq CROSS JOIN LATERAL (SELECT w.id FROM wide w ORDER BY w.embedding <-> wq.embedding LIMIT 10) n;
RESET enable_indexscan;
SELECT (SELECT count(*) FROM wgot) AS returned,
       (SELECT count(*) FROM wgot JOIN wexact USING (qid, id)) / 50.0 >= 0.9 AS recall_at_10_ok;
-- halfvec (pgvector 0.7 and later): the same rows in half precision, indexed unchanged; the
-- elements are widened to float4 exactly, so the index's distances are pgvector's
CREATE TABLE hitems AS SELECT id, embedding::halfvec(3) AS embedding FROM items;
CREATE INDEX hitems_l2 ON hitems USING navis (embedding);
CREATE INDEX hitems_ip ON hitems USING navis (embedding navis_halfvec_ip_ops);
CREATE INDEX hitems_cos ON hitems USING navis (embedding navis_halfvec_cosine_ops);
EXPLAIN (COSTS OFF) SELECT id FROM hitems ORDER BY embedding <-> '[0.5, 0.5, 0.0]' LIMIT 10;
SELECT * FROM index_vs_exact('hitems', '{<->,<#>,<=>}', '[0.5, 0.5, 0.0]');
-- L1 (<+>, pgvector 0.7 and later) on vector and halfvec: the exact top 10
CREATE INDEX items_l1 ON items USING navis (embedding navis_vector_l1_ops);
CREATE INDEX hitems_l1 ON hitems USING navis (embedding navis_halfvec_l1_ops);
SELECT * FROM index_vs_exact('items', '{<+>}', '[0.5, 0.5, 0.0]');
SELECT * FROM index_vs_exact('hitems', '{<+>}', '[0.5, 0.5, 0.0]');
EXPLAIN (COSTS OFF) SELECT id FROM hitems ORDER BY embedding <+> '[0.5, 0.5, 0.0]' LIMIT 10;
-- inserts, and an index over an empty halfvec table that grows by them
INSERT INTO hitems VALUES (1000, '[0.5, 0.5, 0.0]');
SELECT id FROM hitems ORDER BY embedding <-> '[0.5, 0.5, 0.0]' LIMIT 1;
CREATE TABLE hgrow (id int, embedding halfvec(4));
CREATE INDEX ON hgrow USING navis (embedding);
INSERT INTO hgrow SELECT i, ARRAY[i, i % 7, i % 3, 1]::halfvec FROM generate_series(1, 300) i;
SELECT count(*) FILTER (WHERE (SELECT h.id FROM hgrow h ORDER BY h.embedding <-> g.embedding LIMIT 1) = g.id)
  AS found_itself FROM hgrow g;
SELECT id FROM hgrow ORDER BY embedding <-> '[1, 2]' LIMIT 1;
-- the other order, with pgvector in its own schema: install navis, then pgvector, then enable
CREATE DATABASE t_pgvector_later;
\c t_pgvector_later
CREATE EXTENSION navis;
SELECT navis_enable_pgvector();
CREATE SCHEMA extensions;
CREATE EXTENSION vector SCHEMA extensions;
SET search_path = public, extensions;
CREATE TABLE docs (id int, embedding vector(3));
INSERT INTO docs SELECT i, ARRAY[i, i % 10, 1]::vector FROM generate_series(1, 50) i;
CREATE INDEX ON docs USING navis (embedding);
SELECT navis_enable_pgvector();
SELECT navis_enable_pgvector();
SELECT opcname, opcdefault, opcnamespace::regnamespace, opcintype::regtype
FROM pg_opclass WHERE opcname LIKE 'navis_vector%' ORDER BY 1;
CREATE INDEX docs_cos ON docs USING navis (embedding navis_vector_cosine_ops);
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM docs ORDER BY embedding <=> '[10, 0, 1]' LIMIT 3;
SELECT id FROM docs ORDER BY embedding <=> '[10, 0, 1]', id LIMIT 3;
-- dropping pgvector needs CASCADE and takes the operator classes and navis indexes on vector
-- columns with it, nothing else of navis
DROP EXTENSION vector;
DROP EXTENSION vector CASCADE;
SELECT extname FROM pg_extension WHERE extname IN ('navis', 'vector');
SELECT count(*) FROM pg_opclass WHERE opcname LIKE 'navis_vector%';
CREATE EXTENSION vector SCHEMA extensions;
SELECT navis_enable_pgvector();
-- DROP EXTENSION navis takes them along (their families depend on the access method
-- automatically); CREATE EXTENSION navis brings them back
DROP EXTENSION navis;
SELECT count(*) FROM pg_opclass WHERE opcname LIKE 'navis_vector%';
CREATE EXTENSION navis;
SELECT opcname, opcdefault FROM pg_opclass WHERE opcname LIKE 'navis_vector%' ORDER BY 1;
\c t_pgvector
DROP DATABASE t_pgvector_later;
