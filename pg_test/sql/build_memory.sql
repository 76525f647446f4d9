-- Builds under any maintenance_work_mem (issue 14, part 2): when the rows do not fit, navis
-- spools them to a temporary file, builds overlapping partitions one at a time and merges
-- them (RFC 0005), says so in a NOTICE, and the index answers like one built in memory.
-- Below the floor (partitions of 1,000 rows) the build fails with the amount to set.
CREATE EXTENSION navis;
SELECT setseed(0.5);
-- 10,000 random 3-d vectors at 4MB (the issue's case; an in-memory build needs about 9 MB)
CREATE TABLE lo (id int PRIMARY KEY, v real[]);
INSERT INTO lo SELECT i, ARRAY[random(), random(), random()]::real[] FROM generate_series(1, 10000) i;
SET maintenance_work_mem = '4MB';
SET client_min_messages = notice;
\set VERBOSITY terse
CREATE INDEX lo_v ON lo USING navis (v);
\set VERBOSITY default
RESET maintenance_work_mem;
SELECT vertices, deleted FROM navis_index_stats('lo_v');
SELECT problems, unreachable <= 3 AS few_unreachable FROM navis_verify('lo_v');
-- recall@10 of 50 queries against an exact scan
CREATE TEMP TABLE q AS SELECT i AS qid, ARRAY[random(), random(), random()]::real[] AS v FROM generate_series(1, 50) i;
SET enable_indexscan = off;
CREATE TEMP TABLE exact AS SELECT q.qid, n.id FROM q CROSS JOIN LATERAL (SELECT id FROM lo ORDER BY lo.v <-> q.v LIMIT 10) n;
RESET enable_indexscan;
SET enable_seqscan = off;
CREATE TEMP TABLE approx AS SELECT q.qid, n.id FROM q CROSS JOIN LATERAL (SELECT id FROM lo ORDER BY lo.v <-> q.v LIMIT 10) n;
SELECT count(*) FILTER (WHERE EXISTS (SELECT 1 FROM exact e WHERE e.qid = a.qid AND e.id = a.id)) / 500.0 >= 0.99 AS recall_at_least_099
FROM approx a;
RESET enable_seqscan;
-- 64-d rows at 2MB: partitions of about half the rows
CREATE TABLE mid (id int PRIMARY KEY, v real[]);
INSERT INTO mid SELECT i, (SELECT array_agg(sin(i * j) + (i % 13) / 5.0)::real[] FROM generate_series(1, 64) j) FROM generate_series(1, 3000) i;
SET maintenance_work_mem = '2MB';
\set VERBOSITY terse
CREATE INDEX mid_v ON mid USING navis (v);
\set VERBOSITY default
RESET maintenance_work_mem;
SELECT vertices FROM navis_index_stats('mid_v');
-- the spool and list files are gone
SELECT count(*) AS spool_files_left FROM pg_ls_tmpdir() WHERE name LIKE 'pgsql_tmp_navis_build%';
SELECT problems, unreachable <= 3 AS few_unreachable FROM navis_verify('mid_v');
SET enable_seqscan = off;
-- every row finds itself
SELECT count(*) AS not_found FROM mid m
WHERE NOT EXISTS (SELECT 1 FROM (SELECT id FROM mid ORDER BY v <-> m.v LIMIT 1) n WHERE n.id = m.id);
RESET enable_seqscan;
-- below the floor: 1,536-d rows at 1MB
CREATE TABLE wide (id int, v real[]);
INSERT INTO wide SELECT i, array_fill(i::real, ARRAY[1536]) FROM generate_series(1, 300) i;
SET maintenance_work_mem = '1MB';
CREATE INDEX wide_v ON wide USING navis (v);
RESET maintenance_work_mem;
-- the setting the hint names is enough
SET maintenance_work_mem = '5MB';
\set VERBOSITY terse
CREATE INDEX wide_v ON wide USING navis (v);
\set VERBOSITY default
RESET maintenance_work_mem;
SELECT vertices FROM navis_index_stats('wide_v');
SET enable_seqscan = off;
SELECT array_agg(id ORDER BY v <-> array_fill(7.2::real, ARRAY[1536])) FROM (SELECT id, v FROM wide ORDER BY v <-> array_fill(7.2::real, ARRAY[1536]) LIMIT 3) s;
RESET enable_seqscan;
