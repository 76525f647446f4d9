-- navis 0.1.0 -> 0.2.0 (ALTER EXTENSION navis UPDATE).
--
-- On-disk format: unchanged for 0.1.0 indexes. 0.2.0 reads metapage offset 44 (reserved and
-- zero in 0.1.0) as the first block of the current build, zero meaning 1, so every 0.1.0 index
-- works as it is, without REINDEX (RFC 0002; engine/src/pages/meta.rs). Metric code 4 (L1) is
-- new; 0.1.0 never wrote it.
--
-- SQL: navis_index_stats gains the columns built_rows and retired_bytes (a new result type, so
-- the function is dropped and created again); L1 distance: l1_distance, the <+> operator on
-- real[] and the navis_l1_ops operator class; navis_enable_pgvector also creates the operator
-- classes for pgvector's halfvec and for <+>. New in the module without SQL: the setting
-- navis.iterative_scan.
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
	"retired_bytes" bigint  /* i64 */
)
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'navis_index_stats_wrapper';

CREATE  FUNCTION "l1_distance"(
	"a" real[], /* Array < '_, f32 > */
	"b" real[] /* Array < '_, f32 > */
) RETURNS double precision /* f64 */
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'l1_distance_wrapper';

CREATE OPERATOR <+> (
    LEFTARG = real[], RIGHTARG = real[], FUNCTION = l1_distance, COMMUTATOR = '<+>'
);
COMMENT ON OPERATOR <+>(real[], real[]) IS 'navis: L1 (taxicab) distance';
CREATE OPERATOR CLASS navis_l1_ops FOR TYPE real[] USING navis AS
    OPERATOR 1 <+> (real[], real[]) FOR ORDER BY float_ops;

CREATE OR REPLACE FUNCTION navis_enable_pgvector() RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $navis$
DECLARE
    vector_nsp name;
    navis_nsp name;
    navis_am oid;
    created integer := 0;
    c record;
BEGIN
    SELECT n.nspname INTO vector_nsp
    FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
    WHERE e.extname = 'vector';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgvector is not installed in this database'
            USING ERRCODE = 'undefined_object',
                  HINT = 'Run CREATE EXTENSION vector first, then SELECT navis_enable_pgvector().';
    END IF;
    SELECT n.nspname INTO navis_nsp
    FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
    WHERE e.extname = 'navis';
    SELECT oid INTO navis_am FROM pg_am WHERE amname = 'navis';
    FOR c IN SELECT * FROM (VALUES (1, 'vector', 'navis_vector_l2_ops', '<->'),
                                   (2, 'vector', 'navis_vector_ip_ops', '<#>'),
                                   (3, 'vector', 'navis_vector_cosine_ops', '<=>'),
                                   (4, 'halfvec', 'navis_halfvec_l2_ops', '<->'),
                                   (5, 'halfvec', 'navis_halfvec_ip_ops', '<#>'),
                                   (6, 'halfvec', 'navis_halfvec_cosine_ops', '<=>'),
                                   (7, 'vector', 'navis_vector_l1_ops', '<+>'),
                                   (8, 'halfvec', 'navis_halfvec_l1_ops', '<+>')) AS v(ord, typ, name, op)
             ORDER BY ord
    LOOP
        CONTINUE WHEN EXISTS (SELECT 1 FROM pg_opclass
                              WHERE opcname = c.name AND opcmethod = navis_am);
        -- halfvec and <+> came with pgvector 0.7
        CONTINUE WHEN to_regtype(format('%I.%I', vector_nsp, c.typ)) IS NULL;
        CONTINUE WHEN to_regoperator(format('%I.%s(%I.%I,%I.%I)', vector_nsp, c.op,
                                            vector_nsp, c.typ, vector_nsp, c.typ)) IS NULL;
        EXECUTE format(
            'CREATE OPERATOR CLASS %I.%I %s FOR TYPE %I.%I USING navis AS '
            'OPERATOR 1 %I.%s (%I.%I, %I.%I) FOR ORDER BY pg_catalog.float_ops',
            navis_nsp, c.name,
            -- L2 is the default unless some other navis opclass for the type already is
            CASE WHEN c.op = '<->' AND NOT EXISTS (
                     SELECT 1 FROM pg_opclass
                     WHERE opcmethod = navis_am AND opcdefault
                       AND opcintype = format('%I.%I', vector_nsp, c.typ)::regtype)
                 THEN 'DEFAULT' ELSE '' END,
            vector_nsp, c.typ, vector_nsp, c.op, vector_nsp, c.typ, vector_nsp, c.typ);
        -- Not members of either extension: a member of navis depending on pgvector would make
        -- DROP EXTENSION vector CASCADE drop all of navis. Inside CREATE EXTENSION navis the new
        -- objects became members automatically, so release them.
        IF EXISTS (SELECT 1 FROM pg_depend d JOIN pg_opclass oc ON oc.oid = d.objid
                   WHERE d.classid = 'pg_opclass'::regclass AND d.deptype = 'e'
                     AND oc.opcname = c.name AND oc.opcmethod = navis_am) THEN
            EXECUTE format('ALTER EXTENSION navis DROP OPERATOR CLASS %I.%I USING navis',
                           navis_nsp, c.name);
            EXECUTE format('ALTER EXTENSION navis DROP OPERATOR FAMILY %I.%I USING navis',
                           navis_nsp, c.name);
        END IF;
        created := created + 1;
    END LOOP;
    RETURN created;
END
$navis$;
COMMENT ON FUNCTION navis_enable_pgvector() IS
    'navis: create the navis operator classes for pgvector''s vector and halfvec types (run after CREATE EXTENSION vector, and again after updating it; returns how many were created, 0 when all exist)';

-- pgvector already installed: create its new operator classes now.
DO $navis$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'vector') THEN
        PERFORM navis_enable_pgvector();
    END IF;
END
$navis$;
