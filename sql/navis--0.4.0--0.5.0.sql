-- navis 0.4.0 -> 0.5.0
--
-- On disk: unchanged (layout version 2).
--
-- SQL: LIOS's statistics (navis_lios_stats() and the view of that name). New in the module:
-- deferred back-edges run in searches' read stalls (navis.lios, navis.lios_latency_budget,
-- navis.lios_queue_size).
\echo Use "ALTER EXTENSION navis UPDATE" to load this file. \quit

CREATE  FUNCTION "navis_lios_stats"() RETURNS TABLE (
	"name" TEXT,  /* String */
	"value" double precision  /* f64 */
)
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'navis_lios_stats_wrapper';

CREATE VIEW navis_lios_stats AS SELECT s.name, s.value FROM navis_lios_stats() s;
COMMENT ON VIEW navis_lios_stats IS
    'LIOS: deferred back-edge tasks queued and run (by searches, inserters, VACUUM), stalls used, budget overruns; backend_* rows are this session''s pacing';
GRANT SELECT ON navis_lios_stats TO PUBLIC;
