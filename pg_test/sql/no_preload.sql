-- navis-test: no-preload
-- Without shared_preload_libraries the operators still work, and features that need shared
-- memory say exactly what to add to postgresql.conf.
CREATE EXTENSION navis;
SELECT '{1,2}'::real[] <-> '{4,6}'::real[] AS l2;
SELECT preloaded FROM navis_shared_memory();
CREATE TABLE items (embedding real[]);
INSERT INTO items VALUES ('{1,2}');
CREATE INDEX ON items USING navis (embedding);
