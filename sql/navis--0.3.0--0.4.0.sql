-- navis 0.3.0 -> 0.4.0
--
-- On disk: unchanged (layout version 2).
--
-- SQL: the Aker result cache's statistics (navis_result_cache_stats() and the view of that
-- name) and navis_result_cache_reset(), superusers only. New in the module: the result cache
-- itself (navis.result_cache and the navis.result_cache_* settings).
\echo Use "ALTER EXTENSION navis UPDATE" to load this file. \quit

CREATE  FUNCTION "navis_result_cache_reset"() RETURNS bool /* bool */
STRICT VOLATILE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'navis_result_cache_reset_wrapper';

CREATE  FUNCTION "navis_result_cache_stats"() RETURNS TABLE (
	"index_oid" oid,  /* pg_sys :: Oid */
	"database_oid" oid,  /* pg_sys :: Oid */
	"partition" INT,  /* i32 */
	"name" TEXT,  /* String */
	"value" double precision  /* f64 */
)
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'navis_result_cache_stats_wrapper';

CREATE VIEW navis_result_cache_stats AS
    SELECT s.index_oid::regclass AS index, s.partition, s.name, s.value
    FROM navis_result_cache_stats() s
    WHERE s.database_oid = (SELECT oid FROM pg_database WHERE datname = current_database());
COMMENT ON VIEW navis_result_cache_stats IS
    'Aker result cache: per index of this database, entries, memory, thresholds, hits by kind, misses, fall-throughs, refreshes, evictions';
GRANT SELECT ON navis_result_cache_stats TO PUBLIC;
REVOKE EXECUTE ON FUNCTION navis_result_cache_reset() FROM PUBLIC;
