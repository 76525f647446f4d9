-- pgbench script: insert one row into pgb_items, its vector taken by random id from the staging
-- table pgb_stage_insert (ids 1..:nrows; rows after the base set, so they are new to the index).
-- The same staging row can be inserted more than once during a long run; pgb_items has no key.
\set id random(1, :nrows)
INSERT INTO pgb_items (id, embedding)
    SELECT :base + s.id - 1, s.embedding FROM pgb_stage_insert s WHERE s.id = :id;
