-- navis 0.2.0 -> 0.3.0
--
-- On disk: unchanged (layout version 2).
--
-- SQL: navis_index_stats gains the column page_cache_bytes, the part of bytes_read that the
-- kernel's page cache served without a device read (a new result type, so the function is
-- dropped and created again). New in the module without SQL: reads under O_DIRECT try the page
-- cache first.
\echo Use "ALTER EXTENSION navis UPDATE" to load this file. \quit

DROP FUNCTION navis_index_stats(regclass);
CREATE  FUNCTION "navis_index_stats"(
	"index" regclass /* PgRelation */
) RETURNS TABLE (
	"vertices" bigint,  /* i64 */
	"deleted" bigint,  /* i64 */
	"dimensions" INT,  /* i32 */
	"metric" TEXT,  /* String */
	"edge_pages" bigint,  /* i64 */
	"relation_bytes" bigint,  /* i64 */
	"runtime_bytes" bigint,  /* i64 */
	"runtime_directory" TEXT,  /* String */
	"build_id" TEXT,  /* String */
	"max_degree" INT,  /* i32 */
	"build_list" INT,  /* i32 */
	"alpha" double precision,  /* f64 */
	"pq_bytes" INT,  /* i32 */
	"entrance_ratio" double precision,  /* f64 */
	"entrance_degree" INT,  /* i32 */
	"entrance_vertices" bigint,  /* i64 */
	"casr_window" INT,  /* Option < i32 > */
	"casr_warmup_samples" bigint,  /* i64 */
	"scans" bigint,  /* i64 */
	"hops" bigint,  /* i64 */
	"edge_pages_read" bigint,  /* i64 */
	"edge_page_cache_hits" bigint,  /* i64 */
	"cached_frozen_pages" bigint,  /* i64 */
	"cached_window_pages" bigint,  /* i64 */
	"rerank_vector_loads" bigint,  /* i64 */
	"bytes_read" bigint,  /* i64 */
	"resumes" bigint,  /* i64 */
	"built_rows" bigint,  /* i64 */
	"retired_bytes" bigint,  /* i64 */
	"page_cache_bytes" bigint  /* i64 */
)
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'navis_index_stats_wrapper';
