-- Side directories follow the index through every lifecycle event: no orphans, never
-- another build's files. Paths depend on OIDs, so only names relative to the index are shown.
CREATE EXTENSION navis;
CREATE FUNCTION has_side(regclass) RETURNS bool LANGUAGE sql AS
  $$ SELECT EXISTS (SELECT 1 FROM navis_side_directories() WHERE path = pg_relation_filepath($1) || '.navis') $$;
CREATE VIEW side AS SELECT count(*) AS dirs, count(*) FILTER (WHERE temporary) AS temporary,
  count(*) FILTER (WHERE orphan) AS orphans FROM navis_side_directories();
CREATE TABLE t (id int PRIMARY KEY, v real[]);
INSERT INTO t SELECT i, ARRAY[sin(i), cos(i), sin(2 * i), cos(3 * i)]::real[] FROM generate_series(1, 300) i;
SELECT * FROM side;
CREATE INDEX t_idx ON t USING navis (v);
SELECT has_side('t_idx'), * FROM side;
SELECT pg_relation_size('t_idx') AS metapage_bytes;
SET enable_seqscan = off;
SELECT id FROM t ORDER BY v <-> '{1,0,0,1}' LIMIT 3;
-- REINDEX: new relfilenode, the old directory goes at commit
SELECT pg_relation_filepath('t_idx') AS before \gset
REINDEX INDEX t_idx;
SELECT has_side('t_idx'), pg_relation_filepath('t_idx') <> :'before' AS new_relfilenode, * FROM side;
SELECT id FROM t ORDER BY v <-> '{1,0,0,1}' LIMIT 3;
-- VACUUM FULL and CLUSTER rebuild the index
VACUUM FULL t;
SELECT has_side('t_idx'), * FROM side;
CLUSTER t USING t_pkey;
SELECT has_side('t_idx'), * FROM side;
SELECT id FROM t ORDER BY v <-> '{1,0,0,1}' LIMIT 3;
-- a rolled-back CREATE INDEX, DROP INDEX and REINDEX leave things as they were
BEGIN;
CREATE INDEX t_idx2 ON t USING navis (v navis_cosine_ops);
SELECT has_side('t_idx2'), * FROM side;
ROLLBACK;
SELECT * FROM side;
BEGIN;
DROP INDEX t_idx;
ROLLBACK;
SELECT has_side('t_idx'), * FROM side;
BEGIN;
REINDEX INDEX t_idx;
ROLLBACK;
SELECT has_side('t_idx'), * FROM side;
SELECT id FROM t ORDER BY v <-> '{1,0,0,1}' LIMIT 3;
BEGIN;
SAVEPOINT s;
CREATE INDEX t_idx3 ON t USING navis (v navis_ip_ops);
ROLLBACK TO SAVEPOINT s;
CREATE INDEX t_idx4 ON t USING navis (v navis_ip_ops);
COMMIT;
SELECT has_side('t_idx4'), * FROM side;
DROP INDEX t_idx4;
SELECT * FROM side;
-- inserts, DELETE and VACUUM keep the index in step with the table (inserts.sql has more)
INSERT INTO t VALUES (1000, '{1,2,3,4}');
DELETE FROM t WHERE id > 290;
VACUUM t;
SELECT count(*) FROM (SELECT id FROM t ORDER BY v <-> '{1,0,0,1}' LIMIT 400) s;
-- TRUNCATE gives an empty index (new relfilenode); an empty index scans to nothing
TRUNCATE t;
SELECT has_side('t_idx'), * FROM side;
SELECT id FROM t ORDER BY v <-> '{1,0,0,1}' LIMIT 3;
SELECT vertices, dimensions FROM navis_index_stats('t_idx');
-- SET TABLESPACE would copy only the main fork: refused; REINDEX ... TABLESPACE moves it
\! install -d -o postgres -g postgres /tmp/navis-sqltest-ts && rm -rf /tmp/navis-sqltest-ts/*
CREATE TABLESPACE navis_ts LOCATION '/tmp/navis-sqltest-ts';
ALTER INDEX t_idx SET TABLESPACE navis_ts;
ALTER INDEX ALL IN TABLESPACE pg_default SET TABLESPACE navis_ts;
REINDEX (TABLESPACE navis_ts) INDEX t_idx;
SELECT has_side('t_idx'), pg_relation_filepath('t_idx') LIKE 'pg_tblspc/%' AS in_navis_ts, * FROM side;
-- DROP INDEX and DROP TABLE remove the directory at commit
DROP INDEX t_idx;
SELECT * FROM side;
INSERT INTO t SELECT i, ARRAY[i, 1, 2, 3]::real[] FROM generate_series(1, 50) i;
CREATE INDEX t_idx ON t USING navis (v);
SELECT * FROM side;
DROP TABLE t;
SELECT * FROM side;
DROP TABLESPACE navis_ts;
-- a missing side directory is reported, and REINDEX repairs it
CREATE TABLE m (id int, v real[]);
INSERT INTO m SELECT i, ARRAY[i, i % 7, i % 3]::real[] FROM generate_series(1, 100) i;
CREATE INDEX m_idx ON m USING navis (v);
SELECT current_setting('data_directory') || '/' || pg_relation_filepath('m_idx') || '.navis' AS side_path \gset
\setenv SIDE_PATH :side_path
\! rm -rf "$SIDE_PATH"
\c
SET enable_seqscan = off;
\set VERBOSITY terse
SELECT id FROM m ORDER BY v <-> '{1,2,3}' LIMIT 1;
\set VERBOSITY default
REINDEX INDEX m_idx;
SELECT id FROM m ORDER BY v <-> '{1,2,3}' LIMIT 1;
-- a cancelled build (statement_timeout) leaves no directory, temporary or final
CREATE TABLE c (v real[]);
INSERT INTO c SELECT ARRAY[random(), random(), random(), random()]::real[] FROM generate_series(1, 100000) i;
SET statement_timeout = '1s';
CREATE INDEX c_idx ON c USING navis (v) WITH (max_degree = 64, build_list = 200);
RESET statement_timeout;
SELECT * FROM side;
-- unlogged tables are refused
CREATE UNLOGGED TABLE u (v real[]);
CREATE INDEX ON u USING navis (v);
SELECT * FROM side;
-- DROP DATABASE removes its side directories with it
CREATE DATABASE navis_dropme;
\c navis_dropme
CREATE EXTENSION navis;
CREATE TABLE d (v real[]);
INSERT INTO d SELECT ARRAY[i, 2, 3]::real[] FROM generate_series(1, 50) i;
CREATE INDEX ON d USING navis (v);
SELECT count(*) AS dirs FROM navis_side_directories();
SELECT oid AS dropme_oid FROM pg_database WHERE datname = 'navis_dropme' \gset
\c t_index_lifecycle
DROP DATABASE navis_dropme;
SELECT count(*) AS database_dirs_left FROM pg_ls_dir('base') WHERE pg_ls_dir = :'dropme_oid';
-- navis_cleanup() finds nothing to remove after all of this
SELECT navis_cleanup();
