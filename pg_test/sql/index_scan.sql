-- Ordered index scans on real data: 10,000 Fashion-MNIST images (784 dimensions) and 100
-- test images as queries. Recall@10 is measured against an exact sequential scan.
CREATE EXTENSION navis;
CREATE TABLE f (id int PRIMARY KEY, label int NOT NULL, embedding real[]);
CREATE TABLE q (id int PRIMARY KEY, label int NOT NULL, embedding real[]);
\copy f FROM PROGRAM 'python3 scripts/fashion_mnist_copy.py train 10000'
\copy q FROM PROGRAM 'python3 scripts/fashion_mnist_copy.py test 100'
INSERT INTO q VALUES (1000, 0, NULL);
ANALYZE f;
CREATE INDEX f_l2 ON f USING navis (embedding);
SELECT vertices, deleted, dimensions, metric, edge_pages > 0 AS has_edge_pages,
       relation_bytes > 10000 * 784 * 4 AS holds_the_vectors, max_degree, build_list, alpha,
       pq_bytes, entrance_ratio, entrance_degree, entrance_vertices, casr_window
FROM navis_index_stats('f_l2');
-- the planner uses the index for ORDER BY ... LIMIT, not for plain filters
EXPLAIN (COSTS OFF) SELECT id FROM f ORDER BY embedding <-> (SELECT embedding FROM q WHERE id = 0) LIMIT 10;
EXPLAIN (COSTS OFF) SELECT id FROM f WHERE label = 3;
EXPLAIN (COSTS OFF) SELECT q.id, n.id FROM q CROSS JOIN LATERAL
  (SELECT id FROM f ORDER BY f.embedding <-> q.embedding LIMIT 10) n;
CREATE FUNCTION knn(op text, k int, exact bool) RETURNS TABLE (qid int, id int) LANGUAGE plpgsql AS $$
BEGIN
  PERFORM set_config('enable_indexscan', CASE WHEN exact THEN 'off' ELSE 'on' END, true);
  PERFORM set_config('enable_seqscan', CASE WHEN exact THEN 'on' ELSE 'off' END, true);
  RETURN QUERY EXECUTE format('SELECT q.id, n.id FROM q CROSS JOIN LATERAL
    (SELECT f.id FROM f ORDER BY f.embedding %s q.embedding LIMIT %s) n WHERE q.id < 100', op, k);
END $$;
CREATE FUNCTION recall(op text, k int) RETURNS numeric LANGUAGE sql AS $$
  SELECT round(count(*)::numeric / (100 * k), 3)
  FROM knn(op, k, true) e JOIN knn(op, k, false) a USING (qid, id) $$;
-- recall@10 at the default navis.search_list (40); the issue asks for >= 0.95
SHOW navis.search_list;
SELECT recall('<->', 10) >= 0.95 AS l2_recall_ok;
SELECT vertices, casr_warmup_samples > 0 AS calibrating, scans >= 100 AS scanned FROM navis_index_stats('f_l2');
CREATE INDEX f_cos ON f USING navis (embedding navis_cosine_ops);
SELECT recall('<=>', 10) >= 0.95 AS cosine_recall_ok;
CREATE INDEX f_ip ON f USING navis (embedding navis_ip_ops);
SELECT recall('<#>', 10) >= 0.80 AS ip_recall_ok;
SET enable_seqscan = off;
-- results come back in exact distance order, with the operator's own values
SELECT bool_and(d >= prev) AS ordered, count(*) AS n FROM (
  SELECT d, lag(d, 1, '-Infinity') OVER (ORDER BY rn) AS prev FROM (
    SELECT embedding <-> (SELECT embedding FROM q WHERE id = 2) AS d, row_number() OVER () AS rn
    FROM (SELECT embedding FROM f ORDER BY embedding <-> (SELECT embedding FROM q WHERE id = 2) LIMIT 300) s) t) u;
-- LIMIT far above the search list: the scan continues past the first pass
SET navis.search_list = 20;
SELECT count(*), count(DISTINCT id) FROM
  (SELECT id FROM f ORDER BY embedding <-> (SELECT embedding FROM q WHERE id = 1) LIMIT 500) s;
-- a WHERE clause that removes ~97% of rows still gets its 10 rows
SELECT count(*), bool_and(label = 3) FROM (SELECT id, label FROM f WHERE label = 3 AND id % 3 = 0
  ORDER BY embedding <-> (SELECT embedding FROM q WHERE id = 1) LIMIT 10) s;
-- navis.max_scan_tuples bounds what one scan returns
SET navis.max_scan_tuples = 50;
SELECT count(*) FROM (SELECT id FROM f ORDER BY embedding <-> (SELECT embedding FROM q WHERE id = 1) LIMIT 500) s;
RESET navis.max_scan_tuples;
RESET navis.search_list;
-- NULL query vectors return no rows, as in pgvector
SELECT count(*) FROM (SELECT id FROM f ORDER BY embedding <-> (SELECT embedding FROM q WHERE id = 1000) LIMIT 5) s;
-- bad query vectors
SELECT id FROM f ORDER BY embedding <-> '{1,2,3}' LIMIT 5;
SELECT id FROM f ORDER BY embedding <-> (array_fill(0, ARRAY[783]) || '{NaN}'::real[]) LIMIT 5;
-- stats add up after these scans
SELECT scans > 100 AS counted_scans, hops > 0 AS counted_hops, rerank_vector_loads > 0 AS counted_loads
FROM navis_index_stats('f_l2');
SELECT navis_index_stats('f'::regclass);
-- CASR calibration is pooled by all backends of the server: warm-up searches in one session
-- calibrate the index for every later session, which then reranks with the window at once
CREATE TABLE c AS SELECT id, embedding FROM f WHERE id < 2000;
CREATE INDEX c_l2 ON c USING navis (embedding);
SET navis.casr_warmup = 20;
SET enable_seqscan = off;
SELECT casr_window IS NULL AS uncalibrated, casr_warmup_samples FROM navis_index_stats('c_l2');
SELECT count(*) FROM q CROSS JOIN LATERAL
  (SELECT c.id FROM c ORDER BY c.embedding <-> q.embedding LIMIT 10) n WHERE q.id < 20;
SELECT casr_window BETWEEN 1 AND 40 AS calibrated, casr_warmup_samples FROM navis_index_stats('c_l2');
\c
SET navis.casr_warmup = 20;
SET enable_seqscan = off;
-- a new backend: calibrated before its first search, and its searches add no samples
SELECT casr_window BETWEEN 1 AND 40 AS calibrated, casr_warmup_samples, scans FROM navis_index_stats('c_l2');
SELECT count(*) FROM q CROSS JOIN LATERAL
  (SELECT c.id FROM c ORDER BY c.embedding <-> q.embedding LIMIT 10) n WHERE q.id < 10;
SELECT casr_warmup_samples, scans FROM navis_index_stats('c_l2');
-- a longer warm-up setting is not calibrated yet, and its searches add to the same sample
SET navis.casr_warmup = 25;
SELECT casr_window IS NULL AS uncalibrated FROM navis_index_stats('c_l2');
SELECT count(*) FROM q CROSS JOIN LATERAL
  (SELECT c.id FROM c ORDER BY c.embedding <-> q.embedding LIMIT 10) n WHERE q.id < 5;
SELECT casr_window BETWEEN 1 AND 40 AS calibrated, casr_warmup_samples FROM navis_index_stats('c_l2');
-- the window grows with the search list: another list does not use it, it calibrates apart
SET navis.search_list = 80;
SELECT casr_window IS NULL AS uncalibrated, casr_warmup_samples FROM navis_index_stats('c_l2');
SELECT count(*) FROM q CROSS JOIN LATERAL
  (SELECT c.id FROM c ORDER BY c.embedding <-> q.embedding LIMIT 10) n WHERE q.id < 3;
SELECT casr_window IS NULL AS uncalibrated, casr_warmup_samples FROM navis_index_stats('c_l2');
RESET navis.search_list;
SELECT casr_warmup_samples FROM navis_index_stats('c_l2');
-- navis.direct_io = off reads the index's pages through the page cache: the same rows
RESET navis.casr_warmup;
CREATE TABLE direct_rows AS SELECT * FROM knn('<->', 10, false);
SET navis.direct_io = off;
SELECT count(*) AS rows, count(*) FILTER (WHERE d.id IS NULL) AS different
FROM knn('<->', 10, false) b LEFT JOIN direct_rows d USING (qid, id);
RESET navis.direct_io;
-- pg_stat_user_indexes counts navis scans (idx_scan, one per ordered scan) and the tuples they
-- returned (idx_tup_read), as for every index
SET enable_seqscan = off;
SELECT pg_stat_force_next_flush();
SELECT idx_scan AS scans_before, idx_tup_read AS tuples_before FROM pg_stat_user_indexes WHERE indexrelname = 'c_l2' \gset
SELECT count(*) FROM (SELECT id FROM c ORDER BY embedding <-> (SELECT embedding FROM f WHERE id = 1) LIMIT 5) s;
SELECT count(*) FROM (SELECT id FROM c ORDER BY embedding <-> (SELECT embedding FROM f WHERE id = 2) LIMIT 5) s;
SELECT count(*) FROM (SELECT id FROM c ORDER BY embedding <-> (SELECT embedding FROM f WHERE id = 3) LIMIT 5) s;
SELECT pg_stat_force_next_flush();
SELECT idx_scan - :scans_before AS new_scans, idx_tup_read - :tuples_before AS new_tuples
FROM pg_stat_user_indexes WHERE indexrelname = 'c_l2';
RESET enable_seqscan;
-- navis's own page reads and NAVIS-Cache hits show in EXPLAIN (ANALYZE, BUFFERS) of the index
-- scan and in pg_statio_user_indexes (before: only the metapage's buffer, 1 or 2 per scan)
CREATE FUNCTION scan_blocks(q int) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE plan json; node jsonb; query text;
BEGIN
  SET LOCAL enable_seqscan = off;
  -- a literal query vector: a subquery's reads would count on the index scan node too
  SELECT embedding::text INTO query FROM f WHERE id = q;
  EXECUTE format('EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT id FROM c
                  ORDER BY embedding <-> %L::real[] LIMIT 5', query) INTO plan;
  node := jsonb_path_query_first(plan::jsonb, '$.** ? (@."Index Name" == "c_l2")');
  RETURN (node->>'Shared Hit Blocks')::bigint + (node->>'Shared Read Blocks')::bigint;
END $$;
SELECT scan_blocks(4) > 8 AS explain_shows_index_pages;
SELECT pg_stat_force_next_flush();
SELECT idx_blks_read + idx_blks_hit AS blocks_before FROM pg_statio_user_indexes WHERE indexrelname = 'c_l2' \gset
SELECT scan_blocks(5) AS explained_blocks \gset
SELECT pg_stat_force_next_flush();
-- (the index scan node's buffers also hold the heap pages of the rows it returned)
SELECT idx_blks_read + idx_blks_hit - :blocks_before > 8
   AND idx_blks_read + idx_blks_hit - :blocks_before <= :explained_blocks AS statio_counts_them
FROM pg_statio_user_indexes WHERE indexrelname = 'c_l2';
-- reads under O_DIRECT are tried from the kernel's page cache first (engine page_cache.rs): the
-- index was just written through smgr, so its pages are cached and its scans' reads are served
-- from there, counted in page_cache_bytes as a part of bytes_read
SET enable_seqscan = off;
SELECT bytes_read AS bytes_before, page_cache_bytes AS cached_before FROM navis_index_stats('c_l2') \gset
SELECT count(*) FROM (SELECT id FROM c ORDER BY embedding <-> (SELECT embedding FROM f WHERE id = 6) LIMIT 10) s;
SELECT page_cache_bytes - :cached_before > 0 AS served_from_page_cache,
       page_cache_bytes - :cached_before <= bytes_read - :bytes_before AS part_of_bytes_read
FROM navis_index_stats('c_l2');
RESET enable_seqscan;
-- pg_prewarm reads every block of a navis index (how a DBA brings an index that fits in memory
-- back into the page cache after a reboot: README, RFC 0006)
CREATE EXTENSION pg_prewarm;
SELECT pg_prewarm('c_l2', 'read') = pg_relation_size('c_l2') / 8192 AS prewarmed_every_block;
DROP EXTENSION pg_prewarm;
