-- navis 0.5.0 -> 0.6.0
--
-- On disk: unchanged (layout version 2).
--
-- SQL: the read-ahead's statistics (navis_read_ahead_stats() and the view of that name). New
-- in the module: scans start the reads of the heap and TOAST pages of the rows they return
-- next (off with effective_io_concurrency = 0).
\echo Use "ALTER EXTENSION navis UPDATE" to load this file. \quit

CREATE  FUNCTION "navis_read_ahead_stats"() RETURNS TABLE (
	"name" TEXT,  /* String */
	"value" bigint  /* i64 */
)
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'navis_read_ahead_stats_wrapper';

CREATE VIEW navis_read_ahead_stats AS SELECT s.name, s.value FROM navis_read_ahead_stats() s;
COMMENT ON VIEW navis_read_ahead_stats IS
    'This session''s read-ahead of the heap and TOAST pages of the rows navis scans return next (*_not_buffered: pages not in shared buffers, whose reads were started)';
GRANT SELECT ON navis_read_ahead_stats TO PUBLIC;
