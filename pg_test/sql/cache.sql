-- NAVIS-Cache (the shared edge-page cache) as one session sees it: its settings, the
-- navis_cache_stats view, and an index's reads going through it. Several sessions sharing
-- it, inserts writing through it, and results identical with the cache off and with LRU are
-- tested in pg_test/run_cluster_tests.sh (test_cache_shared_across_backends).
CREATE EXTENSION navis;
-- the defaults: 64 MB, the NAVIS policy, earliest-promoted frozen eviction
SHOW navis.cache_size;
SELECT name, value FROM navis_cache_stats
  WHERE name IN ('enabled', 'policy', 'frozen_eviction', 'search_promote_hits', 'frames',
                 'frozen_capacity')
  ORDER BY name;
-- postmaster settings: a session cannot change them
SET navis.cache_size = '1MB';
SET navis.cache_policy = 'lru';
-- a value that is not a policy is refused with the list of policies
ALTER SYSTEM SET navis.cache_policy = 'clock';
CREATE TABLE c (id int PRIMARY KEY, v real[]);
CREATE FUNCTION vec(i int) RETURNS real[] LANGUAGE sql IMMUTABLE AS
  $$ SELECT array_agg(sin(i * (0.1 + k * 0.37) + k)::real ORDER BY k) FROM generate_series(0, 15) k $$;
INSERT INTO c SELECT i, vec(i) FROM generate_series(1, 3000) i;
CREATE INDEX c_v ON c USING navis (v) WITH (max_degree = 16, build_list = 32);
SET enable_seqscan = off;
-- the same 20 searches twice: the second round reads every page from the cache (with the
-- beam fixed: the default narrows it once searches find their pages in memory, below; and
-- without co-located expansion, which stops at the same moment, below)
SET navis.beam_width = 4;
SET navis.expand_colocated = off;
SELECT count(*) FROM generate_series(1, 20) g, LATERAL (SELECT id FROM c ORDER BY v <-> vec(g * 97) LIMIT 10) s;
CREATE TABLE first_round AS
  SELECT edge_pages_read AS pages, edge_page_cache_hits AS hits FROM navis_index_stats('c_v');
SELECT count(*) FROM generate_series(1, 20) g, LATERAL (SELECT id FROM c ORDER BY v <-> vec(g * 97) LIMIT 10) s;
SELECT s.edge_pages_read = 2 * f.pages AS same_pages,
       s.edge_page_cache_hits - f.hits = f.pages AS second_round_all_hits,
       s.cached_frozen_pages + s.cached_window_pages > 0 AS resident
  FROM navis_index_stats('c_v') s, first_round f;
SELECT (SELECT value::bigint FROM navis_cache_stats WHERE name = 'admitted') > 0 AS admitted,
       (SELECT value::bigint FROM navis_cache_stats WHERE name = 'search_hits_window')
     + (SELECT value::bigint FROM navis_cache_stats WHERE name = 'search_hits_frozen') > 0 AS search_hits,
       (SELECT value::float8 FROM navis_cache_stats WHERE name = 'search_hit_rate') > 0 AS hit_rate;
-- navis.beam_width = 0 (the default): these 40 searches found every page in memory (NAVIS-Cache
-- or the page cache), so the next ones read one edge page per hop; fixed at 4, they read more
RESET navis.beam_width;
CREATE TABLE before_narrow AS SELECT hops, edge_pages_read AS pages FROM navis_index_stats('c_v');
SELECT count(*) FROM generate_series(1, 20) g, LATERAL (SELECT id FROM c ORDER BY v <-> vec(g * 97) LIMIT 10) s;
CREATE TABLE before_fixed AS SELECT hops, edge_pages_read AS pages FROM navis_index_stats('c_v');
SET navis.beam_width = 4;
SELECT count(*) FROM generate_series(1, 20) g, LATERAL (SELECT id FROM c ORDER BY v <-> vec(g * 97) LIMIT 10) s;
RESET navis.beam_width;
SELECT f.hops - n.hops = f.pages - n.pages AS narrow_one_page_per_hop,
       s.pages_per_hop > 1.5 AS fixed_four_pages_per_hop
  FROM before_narrow n, before_fixed f,
       LATERAL (SELECT (x.edge_pages_read - f.pages)::float8 / (x.hops - f.hops) AS pages_per_hop
                FROM navis_index_stats('c_v') x) s;
-- navis.expand_colocated (on by default): while a backend's searches read their edge pages
-- from the device they also expand the candidates whose lists lie on a page already read. A
-- new backend starts out assuming the device, so its first searches do, and read fewer pages.
\c
SET enable_seqscan = off;
SET navis.beam_width = 4;
SET navis.expand_colocated = off;
SELECT count(*) FROM generate_series(1, 5) g, LATERAL (SELECT id FROM c ORDER BY v <-> vec(g * 97) LIMIT 10) s;
CREATE TABLE colocated_off AS SELECT edge_pages_read AS pages FROM navis_index_stats('c_v');
\c
SET enable_seqscan = off;
SET navis.beam_width = 4;
SELECT count(*) FROM generate_series(1, 5) g, LATERAL (SELECT id FROM c ORDER BY v <-> vec(g * 97) LIMIT 10) s;
SELECT s.edge_pages_read < o.pages AS colocated_reads_fewer_pages
  FROM navis_index_stats('c_v') s, colocated_off o;
-- the view and the function agree, and the function works without the view
SELECT count(*) = (SELECT count(*) FROM navis_cache_stats()) AS same_rows FROM navis_cache_stats;
-- dropping an index frees its frames at commit
CREATE TABLE before_drop AS
  SELECT (SELECT sum(value::bigint) FROM navis_cache_stats
           WHERE name IN ('frozen_frames', 'window_frames')) AS cached,
         (SELECT cached_frozen_pages + cached_window_pages FROM navis_index_stats('c_v')) AS mine;
SELECT mine > 0 AS had_pages FROM before_drop;
DROP TABLE c;
SELECT (SELECT sum(value::bigint) FROM navis_cache_stats
         WHERE name IN ('frozen_frames', 'window_frames')) = cached - mine AS purged
  FROM before_drop;
