#!/usr/bin/env bash
# The navis demo: sets up the machine, builds and installs navis, starts a throwaway
# PostgreSQL 15 cluster as the OS user `postgres` (port 54329, socket /tmp/navis-demo) with
# shared_preload_libraries = 'navis', loads Fashion-MNIST (60,000 images, 784 dimensions)
# and runs distance queries on it. Run as root. The cluster is stopped at the end.
#   DEMO_PROFILE=debug  reuse the test build instead of the optimised release build
#   DEMO_KEEP=1         leave the cluster running (psql -h /tmp/navis-demo -p 54329 -U postgres)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="${HOME:-/root}/.cargo/bin:$PATH"
source scripts/lib/cluster.sh
DEMO=/tmp/navis-demo
PORT=54329

if [ "${DEMO_PROFILE:-release}" = release ]; then profile=--release; else profile=; fi
echo "== building and installing navis (${DEMO_PROFILE:-release})"
cargo pgrx install $profile --pg-config "$PGBIN/pg_config" >/dev/null

echo "== starting a PostgreSQL 15 cluster in $DEMO (port $PORT)"
cluster_start "$DEMO" "$PORT" "shared_preload_libraries = 'navis'" "shared_buffers = 256MB"
[ "${DEMO_KEEP:-0}" = 1 ] || trap 'cluster_stop "$DEMO"' EXIT

echo "== loading Fashion-MNIST"
cluster_psql "$DEMO" "$PORT" -v ON_ERROR_STOP=1 <<'SQL'
CREATE EXTENSION navis;
CREATE TABLE fashion (id int PRIMARY KEY, label int NOT NULL, embedding real[] NOT NULL);
CREATE TABLE fashion_queries (id int PRIMARY KEY, label int NOT NULL, embedding real[] NOT NULL);
CREATE TABLE labels (label int PRIMARY KEY, name text);
INSERT INTO labels VALUES (0, 'T-shirt/top'), (1, 'Trouser'), (2, 'Pullover'), (3, 'Dress'),
  (4, 'Coat'), (5, 'Sandal'), (6, 'Shirt'), (7, 'Sneaker'), (8, 'Bag'), (9, 'Ankle boot');
SQL
python3 scripts/fashion_mnist_copy.py train | cluster_psql "$DEMO" "$PORT" -v ON_ERROR_STOP=1 \
  -c "COPY fashion (id, label, embedding) FROM STDIN"
python3 scripts/fashion_mnist_copy.py test 1000 | cluster_psql "$DEMO" "$PORT" -v ON_ERROR_STOP=1 \
  -c "COPY fashion_queries (id, label, embedding) FROM STDIN"

echo "== queries"
cluster_psql "$DEMO" "$PORT" -v ON_ERROR_STOP=1 -a <<'SQL'
VACUUM ANALYZE fashion;
SELECT count(*) AS images,
       (SELECT navis_vector_dims(embedding) FROM fashion LIMIT 1) AS dimensions,
       navis_distance_kernels() AS kernels
FROM fashion;
-- the ten training images nearest to test image 0, by each distance
SELECT l.name AS query_label FROM fashion_queries q JOIN labels l USING (label) WHERE q.id = 0;
SELECT f.id, l.name, round((f.embedding <-> q.embedding)::numeric, 1) AS l2
FROM fashion f JOIN labels l USING (label), fashion_queries q
WHERE q.id = 0 ORDER BY f.embedding <-> q.embedding LIMIT 10;
SELECT f.id, l.name, round((f.embedding <=> q.embedding)::numeric, 4) AS cosine
FROM fashion f JOIN labels l USING (label), fashion_queries q
WHERE q.id = 0 ORDER BY f.embedding <=> q.embedding LIMIT 5;
SELECT f.id, l.name, f.embedding <#> q.embedding AS negative_inner_product
FROM fashion f JOIN labels l USING (label), fashion_queries q
WHERE q.id = 0 ORDER BY f.embedding <#> q.embedding LIMIT 5;
-- exact nearest-neighbour classification of 20 test images (one sequential scan of 60,000 rows per query)
\timing on
SELECT round(avg((nn.label = q.label)::int), 2) AS one_nn_accuracy, count(*) AS queries
FROM fashion_queries q
CROSS JOIN LATERAL (SELECT label FROM fashion f ORDER BY f.embedding <-> q.embedding LIMIT 1) nn
WHERE q.id < 20;
\timing off
SQL

echo "== navis index: build, EXPLAIN, recall@10 against exact search and queries/s"
cluster_psql "$DEMO" "$PORT" -v ON_ERROR_STOP=1 -a <<'SQL'
SET maintenance_work_mem = '1GB';  -- the build holds the 60,000 x 784 vectors plus the graph
\timing on
CREATE INDEX fashion_navis ON fashion USING navis (embedding);
\timing off
SELECT pg_size_pretty(pg_relation_size('fashion_navis')) AS index_size,
       vertices, edge_pages, pq_bytes, entrance_vertices
FROM navis_index_stats('fashion_navis');
EXPLAIN (COSTS OFF) SELECT id FROM fashion ORDER BY embedding <-> (SELECT embedding FROM fashion_queries WHERE id = 0) LIMIT 10;
-- exact top-10 of 100 test images (sequential scans), then the index at three search lists
SET enable_indexscan = off;
CREATE TEMP TABLE exact AS SELECT q.id AS qid, n.id FROM fashion_queries q CROSS JOIN LATERAL
  (SELECT f.id FROM fashion f ORDER BY f.embedding <-> q.embedding LIMIT 10) n WHERE q.id < 100;
RESET enable_indexscan;
SET enable_seqscan = off;
CREATE FUNCTION demo_sweep(list int) RETURNS TABLE (search_list int, recall_at_10 numeric, queries_per_s numeric)
LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz; secs float8;
BEGIN
  PERFORM set_config('navis.search_list', list::text, true);
  CREATE TEMP TABLE IF NOT EXISTS approx (qid int, id int);
  TRUNCATE approx;
  t0 := clock_timestamp();
  INSERT INTO approx SELECT q.id, n.id FROM fashion_queries q CROSS JOIN LATERAL
    (SELECT f.id FROM fashion f ORDER BY f.embedding <-> q.embedding LIMIT 10) n WHERE q.id < 100;
  secs := extract(epoch FROM clock_timestamp() - t0);
  RETURN QUERY SELECT list, round(count(*)::numeric / 1000, 3), round((100 / secs)::numeric, 0)
    FROM exact JOIN approx USING (qid, id);
END $$;
SELECT * FROM demo_sweep(20) UNION ALL SELECT * FROM demo_sweep(40) UNION ALL SELECT * FROM demo_sweep(80);
-- the ten nearest training images to test image 0 through the index
SELECT f.id, l.name, round((f.embedding <-> q.embedding)::numeric, 1) AS l2
FROM fashion f JOIN labels l USING (label), fashion_queries q
WHERE q.id = 0 ORDER BY f.embedding <-> q.embedding LIMIT 10;
SQL

echo "== inserts, deletes and VACUUM with the index in place"
cluster_psql "$DEMO" "$PORT" -v ON_ERROR_STOP=1 -a <<'SQL'
-- the 1,000 test images join the indexed table; the index takes each row as it is inserted
\timing on
INSERT INTO fashion SELECT id + 100000, label, embedding FROM fashion_queries;
\timing off
SET enable_seqscan = off;
-- each inserted image is found through the index as its own nearest neighbour
SELECT count(*) AS found_itself, 1000 AS inserted FROM fashion_queries q
WHERE (SELECT f.id FROM fashion f ORDER BY f.embedding <-> q.embedding LIMIT 1) = q.id + 100000;
-- edge pages an insert wrote, against the pages an in-place update of the same lists would rewrite
SELECT round(w.value::numeric / i.value, 2) AS edge_pages_written_per_insert,
       round(p.value::numeric / i.value, 2) AS in_place_pages_per_insert
FROM navis_index_counters('fashion_navis') i, navis_index_counters('fashion_navis') w,
     navis_index_counters('fashion_navis') p
WHERE i.counter = 'inserts' AND w.counter = 'edge_pages_written' AND p.counter = 'insert_pages_in_place';
-- delete an eighth of the training images: they disappear at once; VACUUM flags them in the
-- index and, above the 10% consolidate_threshold, repairs the graph and frees their space
DELETE FROM fashion WHERE id % 8 = 0 AND id < 100000;
\timing on
VACUUM fashion;
\timing off
SELECT vertices, deleted, entrance_vertices FROM navis_index_stats('fashion_navis');
SELECT clean, vertices, unreachable, problems FROM navis_verify('fashion_navis');
SELECT counter, value FROM navis_index_counters('fashion_navis')
WHERE counter IN ('consolidations', 'vertices_freed', 'lists_repaired') ORDER BY counter;
SQL
echo "== demo finished"
