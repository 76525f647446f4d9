-- The navis access method, its operator classes, index options and settings.
CREATE EXTENSION navis;
SELECT amname, amtype FROM pg_am WHERE amname = 'navis';
SELECT c.opcname, c.opcdefault, o.oprname, ao.amoppurpose
FROM pg_opclass c
JOIN pg_amop ao ON ao.amopfamily = c.opcfamily
JOIN pg_operator o ON o.oid = ao.amopopr
WHERE c.opcmethod = (SELECT oid FROM pg_am WHERE amname = 'navis')
ORDER BY c.opcname;
SELECT preloaded, layout_version, vertex_lock_stripes FROM navis_shared_memory();
CREATE TABLE items (id int, embedding real[]);
-- an index over an empty table works (scans to nothing) and takes rows at once
CREATE INDEX items_empty ON items USING navis (embedding);
SELECT id FROM items ORDER BY embedding <-> '{1,2,3}' LIMIT 5;
INSERT INTO items VALUES (1, '{1,2,3}');
SET enable_seqscan = off;
SELECT id FROM items ORDER BY embedding <-> '{1,2,3}' LIMIT 5;
RESET enable_seqscan;
DELETE FROM items;
DROP INDEX items_empty;
INSERT INTO items SELECT i, ARRAY[i, i + 1, i + 2]::real[] FROM generate_series(1, 100) i;
INSERT INTO items VALUES (101, NULL);
-- a table with one row
CREATE TABLE one (embedding real[]);
INSERT INTO one VALUES ('{1,2}');
CREATE INDEX one_idx ON one USING navis (embedding);
SET enable_seqscan = off;
SELECT embedding, embedding <-> '{0,0}' AS distance FROM one ORDER BY embedding <-> '{0,0}' LIMIT 3;
RESET enable_seqscan;
-- NULL vectors are skipped; reltuples counts the indexed rows
CREATE INDEX items_l2 ON items USING navis (embedding);
CREATE INDEX items_ip ON items USING navis (embedding navis_ip_ops);
SELECT relname, reltuples FROM pg_class WHERE relname IN ('items_l2', 'items_ip') ORDER BY 1;
DROP INDEX items_l2, items_ip;
INSERT INTO items VALUES (102, '{0,0,0}');
-- a cosine index leaves zero vectors out
CREATE INDEX items_cos ON items USING navis (embedding navis_cosine_ops);
SELECT reltuples FROM pg_class WHERE relname = 'items_cos';
DROP INDEX items_cos;
-- L1 (<+>): the index's top 10 are the exact top 10
CREATE INDEX items_l1 ON items USING navis (embedding navis_l1_ops);
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM items ORDER BY embedding <+> '{10,11,12}' LIMIT 10;
SELECT array_agg(id) AS l1_top10 FROM (SELECT id FROM items ORDER BY embedding <+> '{10,11,12}' LIMIT 10) s;
RESET enable_seqscan;
SET enable_indexscan = off;
SELECT array_agg(id) AS l1_exact_top10 FROM (SELECT id FROM items ORDER BY embedding <+> '{10,11,12}', id LIMIT 10) s;
RESET enable_indexscan;
DROP INDEX items_l1;
-- index options: ranges are checked by PostgreSQL, combinations by navis
CREATE INDEX ON items USING navis (embedding) WITH (max_degree = 4);
CREATE INDEX ON items USING navis (embedding) WITH (max_degree = 1000);
CREATE INDEX ON items USING navis (embedding) WITH (alpha = 0.5);
CREATE INDEX ON items USING navis (embedding) WITH (entrance_ratio = 0.9);
CREATE INDEX ON items USING navis (embedding) WITH (no_such_option = 1);
CREATE INDEX ON items USING navis (embedding) WITH (max_degree = 64, build_list = 32);
CREATE INDEX ON items USING navis (embedding) WITH (pq_bytes = 4);
CREATE INDEX items_opts ON items USING navis (embedding) WITH (max_degree = 64, build_list = 100, alpha = 1.3, pq_bytes = 3, entrance_ratio = 0.02, entrance_degree = 16);
SELECT max_degree, build_list, alpha, pq_bytes, entrance_ratio, entrance_degree FROM navis_index_stats('items_opts');
DROP INDEX items_opts;
-- without WITH (...) the index gets the registered defaults (the NAVIS paper's, with L = R: RFC 0007)
CREATE INDEX items_defaults ON items USING navis (embedding);
SELECT max_degree, build_list, alpha, entrance_ratio, entrance_degree FROM navis_index_stats('items_defaults');
DROP INDEX items_defaults;
-- rows that cannot be indexed are named by their TID
INSERT INTO items VALUES (103, '{1,2,3,4}');
CREATE INDEX ON items USING navis (embedding);
DELETE FROM items WHERE id = 103;
INSERT INTO items VALUES (104, '{1,NaN,3}');
CREATE INDEX ON items USING navis (embedding);
DELETE FROM items WHERE id = 104;
INSERT INTO items VALUES (105, '{1,NULL,3}');
CREATE INDEX ON items USING navis (embedding);
DELETE FROM items WHERE id = 105;
-- columns of other types have no navis operator class
CREATE INDEX ON items USING navis (id);
-- the planner picks a navis index for ORDER BY <op> ... LIMIT, not for plain filters
CREATE INDEX items_l2 ON items USING navis (embedding);
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM items ORDER BY embedding <-> '{1,2,3}' LIMIT 5;
EXPLAIN (COSTS OFF) SELECT id FROM items WHERE embedding = '{1,2,3}';
EXPLAIN (COSTS OFF) SELECT id FROM items ORDER BY embedding <=> '{1,2,3}' LIMIT 5;
SELECT id FROM items ORDER BY embedding <-> '{1,2,3}' LIMIT 5;
RESET enable_seqscan;
-- settings: paper defaults, range checks, reserved prefix
SELECT name, setting, min_val, max_val FROM pg_settings WHERE name LIKE 'navis.%' ORDER BY name;
SET navis.search_list = 0;
SET navis.beam_width = 65;
SET navis.casr_percentile_insert = 101;
SET navis.serch_list = 10;
SET navis.search_list = 80;
SHOW navis.search_list;
-- build_list left out follows a larger max_degree (RFC 0007); a given one must be at least 10
CREATE INDEX items_wide ON items USING navis (embedding) WITH (max_degree = 128);
SELECT max_degree, build_list FROM navis_index_stats('items_wide');
DROP INDEX items_wide;
CREATE INDEX ON items USING navis (embedding) WITH (max_degree = 8, build_list = 5);
-- those checks need no rows: they run when the options are given, on an empty table and in ALTER INDEX
CREATE TABLE empty_items (embedding real[]);
CREATE INDEX ON empty_items USING navis (embedding) WITH (build_list = 5);
CREATE INDEX empty_v ON empty_items USING navis (embedding);
ALTER INDEX empty_v SET (max_degree = 128, build_list = 100);
DROP TABLE empty_items;
