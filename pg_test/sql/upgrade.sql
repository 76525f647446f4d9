-- Versions and upgrades (issue 16 part 4): a database on navis 0.1.0 (the install script of the
-- release, sql/navis--0.1.0.sql) keeps working with the current module, ALTER EXTENSION navis
-- UPDATE (0.1.0 -> 0.2.0 -> 0.3.0 -> 0.4.0 -> 0.5.0 -> 0.6.0) brings its catalog to exactly what CREATE EXTENSION navis
-- gives, and its indexes need no REINDEX (the current module reads the 0.1.0 on-disk layout).
CREATE EXTENSION navis VERSION '0.1.0';
SELECT extversion FROM pg_extension WHERE extname = 'navis';
CREATE TABLE t (id int PRIMARY KEY, v real[]);
INSERT INTO t SELECT i, ARRAY[sin(i), cos(i), sin(i * 0.3)]::real[] FROM generate_series(1, 2000) i;
CREATE INDEX t_v ON t USING navis (v);
SET enable_seqscan = off;
SELECT id FROM t ORDER BY v <-> '{0.1,0.2,0.3}' LIMIT 3;
-- before the update, the 0.1.0 declaration of a function whose result grew still works
SELECT vertices, resumes FROM navis_index_stats('t_v');
ALTER EXTENSION navis UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'navis';
SELECT vertices, built_rows, retired_bytes, page_cache_bytes >= 0 AS has_page_cache_bytes FROM navis_index_stats('t_v');
SELECT id FROM t ORDER BY v <-> '{0.1,0.2,0.3}' LIMIT 3;
INSERT INTO t VALUES (5000, '{0.1,0.2,0.3}');
SELECT id FROM t ORDER BY v <-> '{0.1,0.2,0.3}' LIMIT 1;
SELECT problems, unreachable <= 3 AS few_unreachable FROM navis_verify('t_v');
-- every member object of the updated extension, with its definition, against a fresh install
-- (one query, kept in a psql variable and run in both databases)
\set navis_catalog 'SELECT md5(string_agg(o, E''\n'' ORDER BY o)) FROM ( SELECT pg_describe_object(d.classid, d.objid, d.objsubid) || '' '' || coalesce(CASE WHEN d.classid = ''pg_proc''::regclass THEN pg_get_functiondef(d.objid) END, '''') || '' '' || coalesce(obj_description(d.objid, d.classid::regclass::name), '''') AS o FROM pg_depend d WHERE d.refclassid = ''pg_extension''::regclass AND d.deptype = ''e'' AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = ''navis'')) s'
SELECT count(*) AS members FROM pg_depend
WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
  AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'navis');
SELECT (:navis_catalog) AS updated \gset
CREATE DATABASE t_upgrade_fresh;
\c t_upgrade_fresh
CREATE EXTENSION navis;
SELECT (:navis_catalog) = :'updated' AS same_as_fresh_install;
\c t_upgrade
DROP DATABASE t_upgrade_fresh;
