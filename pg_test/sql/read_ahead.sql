-- Read-ahead of the rows a scan returns next (src/read_ahead.rs): their heap pages and, for a
-- TOASTed vector column, their TOAST pages. It never changes what a scan returns; the
-- counters in navis_read_ahead_stats (this session's) say what it did. Pages that were not in
-- shared buffers are tested after a restart (pg_test/cluster_read_ahead.sh).
CREATE EXTENSION navis;
CREATE TABLE ra (id int PRIMARY KEY, note text, v real[]) WITH (fillfactor = 50);
-- 600 dimensions (2.4 KB) stored out of line without compression: every value is in TOAST
ALTER TABLE ra ALTER COLUMN v SET STORAGE EXTERNAL;
INSERT INTO ra SELECT i, 'row ' || i, array_agg(sin(i * 0.37 + j * 0.011)::real ORDER BY j)
FROM generate_series(1, 400) i, generate_series(1, 600) j GROUP BY i;
CREATE INDEX ra_v ON ra USING navis (v);
SET enable_seqscan = off;
CREATE FUNCTION ra_stat(stat text) RETURNS bigint LANGUAGE sql AS
  $$ SELECT value FROM navis_read_ahead_stats WHERE name = stat $$;
CREATE FUNCTION ra_knn(q int, k int) RETURNS int[] LANGUAGE sql AS
  $$ SELECT array_agg(id) FROM (SELECT id FROM ra ORDER BY v <-> (SELECT v FROM ra WHERE id = q) LIMIT k) s $$;
SELECT count(*) AS stats_rows FROM navis_read_ahead_stats;
-- the same rows with read-ahead off (effective_io_concurrency = 0, as for PostgreSQL's own
-- prefetching) and on, in the same order
SET effective_io_concurrency = 0;
CREATE TEMP TABLE off_answers AS SELECT q, ra_knn(q, 10) AS ids FROM generate_series(1, 400, 20) q;
SELECT ra_stat('rows') AS rows_while_off;
SET effective_io_concurrency = 1;
SELECT count(*) AS queries, count(*) FILTER (WHERE ra_knn(q, 10) = ids) AS same_answers FROM off_answers;
-- 20 scans of LIMIT 10: the first pass queues 10 rows and all of them are read ahead; the
-- TOAST step looked the values up at least on the first scan (it backs off while it finds
-- every TOAST page in shared buffers, as here)
SELECT ra_stat('rows') AS rows_read_ahead, ra_stat('heap_blocks') BETWEEN 20 AND 200 AS heap_blocks_counted,
       ra_stat('toast_values') >= 10 AS toast_values_looked_up,
       ra_stat('toast_blocks') >= ra_stat('toast_values') AS a_block_per_value_at_least,
       ra_stat('toast_steps_skipped') > 0 AS backed_off_while_buffered,
       ra_stat('toast_values') + 10 * ra_stat('toast_steps_skipped') = 200 AS every_scan_looked_up_or_skipped;
-- a LIMIT past the first pass: the resumed pass's rows are read ahead too, at most 32 ahead
SELECT ra_stat('rows') AS before_long \gset
SELECT count(*) FROM (SELECT id FROM ra ORDER BY v <-> (SELECT v FROM ra WHERE id = 7) LIMIT 100) s;
SELECT ra_stat('rows') - :before_long BETWEEN 100 AND 140 AS long_scan_read_ahead;
-- every row HOT-updated (fillfactor 50 leaves room): the index's TIDs lead to dead versions
-- whose HOT chains the read-ahead follows as the executor does; a new backend (no backoff
-- yet) finds every value it read ahead
UPDATE ra SET note = 'updated';
SELECT pg_stat_force_next_flush();
SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'ra';
\c
SET enable_seqscan = off;
SELECT cardinality(ra_knn(14, 10)) AS rows_returned;
SELECT ra_stat('rows') AS rows_read_ahead, ra_stat('toast_values') AS toast_values_found;
-- rows deleted, not vacuumed yet: the answers are the same as with read-ahead off and never
-- hold a deleted row
DELETE FROM ra WHERE id % 10 = 3;
SET effective_io_concurrency = 0;
CREATE TEMP TABLE off_after AS SELECT q, ra_knn(q, 10) AS ids FROM generate_series(2, 400, 20) q;
SET effective_io_concurrency = 1;
SELECT count(*) FILTER (WHERE ra_knn(q, 10) = ids) AS same_after_delete, count(*) FROM off_after;
SELECT count(*) FILTER (WHERE id % 10 = 3) AS deleted_rows_returned
FROM off_after, unnest(ids) id;
-- SERIALIZABLE: heap pages only (visiting rows the executor may not fetch would take predicate
-- locks on them)
SELECT ra_stat('toast_values') + ra_stat('toast_steps_skipped') AS toast_before, ra_stat('rows') AS rows_before \gset
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT cardinality(ra_knn(5, 10)) AS serializable_rows;
COMMIT;
SELECT ra_stat('toast_values') + ra_stat('toast_steps_skipped') = :toast_before AS no_toast_step_when_serializable,
       ra_stat('rows') >= :rows_before + 10 AS heap_rows_read_ahead;
-- a result-cache hit's rows are read ahead too
SET navis.result_cache = on;
SELECT cardinality(ra_knn(25, 10)) AS miss_rows;
SELECT ra_stat('rows') AS rows_before \gset
SELECT cardinality(ra_knn(25, 10)) AS hit_rows;
SELECT ra_stat('rows') - :rows_before >= 10 AS hit_rows_read_ahead,
       (SELECT value FROM navis_result_cache_stats WHERE name = 'hits_equality') >= 1 AS answered_from_the_cache;
RESET navis.result_cache;
-- small vectors are never out of line: the TOAST step finds nothing and backs off
CREATE TABLE small (id int PRIMARY KEY, v real[]);
INSERT INTO small SELECT i, ARRAY[sin(i), cos(i), i % 7]::real[] FROM generate_series(1, 500) i;
CREATE INDEX small_v ON small USING navis (v);
SELECT ra_stat('toast_values') AS toast_before, ra_stat('toast_steps_skipped') AS skipped_before \gset
SELECT count(*) FROM generate_series(1, 30) g, LATERAL (SELECT id FROM small ORDER BY v <-> ARRAY[sin(g), cos(g), 1]::real[] LIMIT 5) s;
SELECT ra_stat('toast_values') = :toast_before AS no_toast_values,
       ra_stat('toast_steps_skipped') - :skipped_before >= 20 AS mostly_skipped;
-- an expression index has no heap column to look up: heap pages only
CREATE INDEX ra_expr ON ra USING navis ((v[1:600]));
DROP INDEX ra_v;
SELECT ra_stat('toast_values') + ra_stat('toast_steps_skipped') AS toast_before, ra_stat('rows') AS rows_before \gset
SELECT count(*) FROM (SELECT id FROM ra ORDER BY v[1:600] <-> (SELECT v FROM ra WHERE id = 9) LIMIT 10) s;
SELECT ra_stat('toast_values') + ra_stat('toast_steps_skipped') = :toast_before AS no_toast_step_for_expressions,
       ra_stat('rows') - :rows_before >= 10 AS heap_rows_read_ahead;
DROP TABLE ra, small;
