-- pgbench script: one k-NN search, the query vector taken by random id from pgb_stage_query
-- (ids 1..:nqueries, the dataset's query.fbin). The scalar subquery is evaluated once, before
-- the scan (an InitPlan), so the ORDER BY is served by the navis or hnsw index.
\set q random(1, :nqueries)
SELECT i.id FROM pgb_items i
    ORDER BY i.embedding <-> (SELECT s.embedding FROM pgb_stage_query s WHERE s.id = :q)
    LIMIT 10;
