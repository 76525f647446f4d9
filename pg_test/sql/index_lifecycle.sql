-- A navis index is one relation: every lifecycle event PostgreSQL runs on relations (REINDEX,
-- VACUUM FULL, CLUSTER, TRUNCATE, DROP, rollback, SET TABLESPACE, CREATE DATABASE ... TEMPLATE)
-- carries it whole, and its size is what pg_relation_size says. Runtime copies (in
-- base/pgsql_tmp) follow: none is left for a relfilenode that no longer exists once another
-- copy is made. Paths depend on OIDs, so only facts relative to the index are shown.
CREATE EXTENSION navis;
CREATE FUNCTION copies_of(regclass) RETURNS bigint LANGUAGE sql AS
  $$ SELECT count(*) FROM pg_ls_dir('base/pgsql_tmp/pgsql_tmp_navis', true, false) d
     WHERE split_part(d, '_', 3) = pg_relation_filenode($1)::text $$;
CREATE FUNCTION copies_of_node(oid) RETURNS bigint LANGUAGE sql AS
  $$ SELECT count(*) FROM pg_ls_dir('base/pgsql_tmp/pgsql_tmp_navis', true, false) d
     WHERE split_part(d, '_', 3) = $1::text $$;
CREATE TABLE t (id int PRIMARY KEY, v real[]);
INSERT INTO t SELECT i, ARRAY[sin(i), cos(i), sin(2 * i), cos(3 * i)]::real[] FROM generate_series(1, 300) i;
CREATE INDEX t_idx ON t USING navis (v);
-- the whole index is in the relation: more than a metapage, a whole number of blocks
SELECT pg_relation_size('t_idx') > 8192 AS holds_the_index,
       pg_relation_size('t_idx') % 8192 = 0 AS whole_blocks,
       pg_relation_size('t_idx') = relation_bytes AS stats_agree
FROM navis_index_stats('t_idx');
SET enable_seqscan = off;
SELECT id FROM t ORDER BY v <-> '{1,0,0,1}' LIMIT 3;
SELECT copies_of('t_idx') AS copies;
-- REINDEX: new relfilenode, same answers
SELECT pg_relation_filenode('t_idx') AS before \gset
REINDEX INDEX t_idx;
SELECT pg_relation_filenode('t_idx') <> :before AS new_relfilenode;
SELECT id FROM t ORDER BY v <-> '{1,0,0,1}' LIMIT 3;
-- the copy of the old relfilenode goes when the next copy is made
SELECT copies_of_node(:before) AS old_copies, copies_of('t_idx') AS copies;
-- VACUUM FULL and CLUSTER rebuild the index
VACUUM FULL t;
SELECT id FROM t ORDER BY v <-> '{1,0,0,1}' LIMIT 3;
CLUSTER t USING t_pkey;
SELECT id FROM t ORDER BY v <-> '{1,0,0,1}' LIMIT 3;
-- a rolled-back CREATE INDEX, DROP INDEX and REINDEX leave things as they were
BEGIN;
CREATE INDEX t_idx2 ON t USING navis (v navis_cosine_ops);
ROLLBACK;
SELECT count(*) AS t_idx2 FROM pg_class WHERE relname = 't_idx2';
BEGIN;
DROP INDEX t_idx;
ROLLBACK;
SELECT id FROM t ORDER BY v <-> '{1,0,0,1}' LIMIT 3;
BEGIN;
REINDEX INDEX t_idx;
ROLLBACK;
SELECT id FROM t ORDER BY v <-> '{1,0,0,1}' LIMIT 3;
BEGIN;
SAVEPOINT s;
CREATE INDEX t_idx3 ON t USING navis (v navis_ip_ops);
ROLLBACK TO SAVEPOINT s;
CREATE INDEX t_idx4 ON t USING navis (v navis_ip_ops);
COMMIT;
SELECT id FROM t ORDER BY v <#> '{1,0,0,1}' LIMIT 3;
DROP INDEX t_idx4;
-- inserts, DELETE and VACUUM keep the index in step with the table (inserts.sql has more);
-- inserts grow the relation, as pg_relation_size shows
SELECT pg_relation_size('t_idx') AS before_inserts \gset
INSERT INTO t SELECT i, ARRAY[cos(i), sin(i), cos(2 * i), sin(3 * i)]::real[] FROM generate_series(1001, 3000) i;
SELECT pg_relation_size('t_idx') > :before_inserts AS grew;
DELETE FROM t WHERE id > 290;
VACUUM t;
SELECT count(*) FROM (SELECT id FROM t ORDER BY v <-> '{1,0,0,1}' LIMIT 400) s;
SELECT clean, vertices, unreachable FROM navis_verify('t_idx');
-- ALTER INDEX ... SET TABLESPACE copies the relation, so the index moves with it
\! install -d -o postgres -g postgres /tmp/navis-sqltest-ts && rm -rf /tmp/navis-sqltest-ts/*
CREATE TABLESPACE navis_ts LOCATION '/tmp/navis-sqltest-ts';
SELECT array_agg(id ORDER BY v <-> '{1,0,0,1}') AS before_move FROM (SELECT id, v FROM t ORDER BY v <-> '{1,0,0,1}' LIMIT 5) s \gset
ALTER INDEX t_idx SET TABLESPACE navis_ts;
SELECT pg_relation_filepath('t_idx') LIKE 'pg_tblspc/%' AS in_navis_ts;
SELECT array_agg(id ORDER BY v <-> '{1,0,0,1}') = :'before_move' AS same_rows
FROM (SELECT id, v FROM t ORDER BY v <-> '{1,0,0,1}' LIMIT 5) s;
INSERT INTO t VALUES (5000, '{1,0,0,1}');
SELECT id FROM t ORDER BY v <-> '{1,0,0,1}' LIMIT 1;
ALTER INDEX ALL IN TABLESPACE navis_ts SET TABLESPACE pg_default;
SELECT pg_relation_filepath('t_idx') LIKE 'base/%' AS back_in_default;
SELECT id FROM t ORDER BY v <-> '{1,0,0,1}' LIMIT 1;
REINDEX (TABLESPACE navis_ts) INDEX t_idx;
SELECT pg_relation_filepath('t_idx') LIKE 'pg_tblspc/%' AS in_navis_ts;
SELECT id FROM t ORDER BY v <-> '{1,0,0,1}' LIMIT 1;
-- TRUNCATE gives an empty index (new relfilenode); an empty index scans to nothing
TRUNCATE t;
SELECT id FROM t ORDER BY v <-> '{1,0,0,1}' LIMIT 3;
SELECT vertices, dimensions FROM navis_index_stats('t_idx');
DROP TABLE t;
DROP TABLESPACE navis_ts;
-- CREATE DATABASE ... TEMPLATE copies the index with its table, with either strategy. The
-- wal_log strategy copies pages through shared_buffers, so right after it the copy's pages may
-- exist only in dirty buffers: the first scan must see them (no checkpoint has run yet), and
-- a checkpoint after inserts into the copy must not write older bytes over theirs.
CREATE TABLE m (id int, v real[]);
INSERT INTO m SELECT i, ARRAY[i, i % 7, i % 3]::real[] FROM generate_series(1, 500) i;
CREATE INDEX m_idx ON m USING navis (v);
INSERT INTO m SELECT i, ARRAY[i, i % 5, i % 2]::real[] FROM generate_series(501, 700) i;
SELECT array_agg(id) AS template_rows FROM (SELECT id FROM m ORDER BY v <-> '{100,2,3}' LIMIT 5) s \gset
SELECT current_database() AS here \gset
\c postgres
CREATE DATABASE navis_copy_wal TEMPLATE :"here" STRATEGY wal_log;
\c navis_copy_wal
SET enable_seqscan = off;
SELECT array_agg(id) = :'template_rows' AS same_rows FROM (SELECT id FROM m ORDER BY v <-> '{100,2,3}' LIMIT 5) s;
INSERT INTO m SELECT i, ARRAY[100 + (i - 9000) / 50.0, 2 + (i % 7) / 10.0, 3 + (i % 11) / 10.0]::real[] FROM generate_series(9001, 9300) i;
CHECKPOINT;
\c navis_copy_wal
SET enable_seqscan = off;
SELECT count(*) AS near_rows FROM (SELECT id FROM m ORDER BY v <-> '{100,2,3}' LIMIT 400) s WHERE id > 9000;
SELECT problems, unreachable <= 3 AS few_unreachable, vertices FROM navis_verify('m_idx');
\c postgres
CREATE DATABASE navis_copy_file TEMPLATE :"here" STRATEGY file_copy;
\c navis_copy_file
SET enable_seqscan = off;
SELECT array_agg(id) = :'template_rows' AS same_rows FROM (SELECT id FROM m ORDER BY v <-> '{100,2,3}' LIMIT 5) s;
SELECT problems, unreachable <= 3 AS few_unreachable, vertices FROM navis_verify('m_idx');
\c postgres
DROP DATABASE navis_copy_wal;
DROP DATABASE navis_copy_file;
\c :here
SET enable_seqscan = off;
-- a cancelled build (statement_timeout) leaves no index behind
CREATE TABLE c (v real[]);
INSERT INTO c SELECT ARRAY[random(), random(), random(), random()]::real[] FROM generate_series(1, 100000) i;
SET statement_timeout = '1s';
CREATE INDEX c_idx ON c USING navis (v) WITH (max_degree = 64, build_list = 200);
RESET statement_timeout;
SELECT count(*) AS c_idx FROM pg_class WHERE relname = 'c_idx';
-- unlogged tables: the index gets an init fork (an empty index) and takes rows
CREATE UNLOGGED TABLE u (v real[]);
CREATE INDEX u_v ON u USING navis (v);
INSERT INTO u VALUES ('{1,2,3}'), ('{3,2,1}');
SELECT pg_relation_size('u_v', 'init') > 0 AS init_fork, vertices FROM navis_index_stats('u_v');
