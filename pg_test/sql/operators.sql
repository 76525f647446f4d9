-- The four distance operators and their function forms on real[], with pgvector's meaning.
CREATE EXTENSION navis;
SELECT '{1,2,3}'::real[] <-> '{4,6,8}'::real[] AS l2,
       sqrt(50) AS expected_l2;
SELECT '{1,2,3}'::real[] <#> '{4,6,8}'::real[] AS negative_ip,
       inner_product('{1,2,3}', '{4,6,8}') AS ip;
SELECT round(('{1,2,3}'::real[] <=> '{4,6,8}'::real[])::numeric, 9) AS cosine,
       round((1 - 40 / sqrt(14 * 116))::numeric, 9) AS expected_cosine;
-- function forms equal the operators
SELECT l2_distance('{1,2}', '{4,6}') = ('{1,2}'::real[] <-> '{4,6}'::real[]) AS l2_same,
       negative_inner_product('{1,2}', '{4,6}') = ('{1,2}'::real[] <#> '{4,6}'::real[]) AS ip_same,
       cosine_distance('{1,2}', '{4,6}') = ('{1,2}'::real[] <=> '{4,6}'::real[]) AS cos_same;
-- symmetric, zero on identical vectors, cosine ends of the range
SELECT '{1,2,3}'::real[] <-> '{1,2,3}'::real[] AS same_l2,
       '{1,2,3}'::real[] <=> '{2,4,6}'::real[] AS parallel_cosine,
       '{1,2,3}'::real[] <=> '{-1,-2,-3}'::real[] AS opposite_cosine,
       ('{1,5}'::real[] <-> '{7,3}'::real[]) = ('{7,3}'::real[] <-> '{1,5}'::real[]) AS symmetric;
-- cosine distance with a zero vector is NaN, as in pgvector
SELECT '{0,0}'::real[] <=> '{1,2}'::real[] AS zero_cosine,
       '{0,0}'::real[] <=> '{0,0}'::real[] AS both_zero_cosine;
-- L1 (taxicab) distance, pgvector's <+>: |1-4| + |2-6| + |3-8| = 12; and on 9 dimensions
-- (one lane pass of eight and one left over)
SELECT '{1,2,3}'::real[] <+> '{4,6,8}'::real[] AS l1,
       l1_distance('{1,2,3}', '{4,6,8}') = ('{1,2,3}'::real[] <+> '{4,6,8}'::real[]) AS l1_same,
       '{1,2,3,4,5,6,7,8,9}'::real[] <+> '{-1,-2,-3,-4,-5,-6,-7,-8,-9}'::real[] AS l1_9d;
SELECT '{1,2}'::real[] <+> '{1,2,3}'::real[];
-- NULL operands give NULL (the functions are STRICT)
SELECT NULL::real[] <-> '{1}'::real[] AS null_l2, '{1}'::real[] <#> NULL AS null_ip;
-- huge finite values: the sum overflows single precision to Infinity, as in pgvector
SELECT '{3e38}'::real[] <-> '{-3e38}'::real[] AS overflow_l2;
-- the largest supported dimension works
SELECT array_fill(1::real, ARRAY[16000]) <-> array_fill(0::real, ARRAY[16000]) AS l2_16000;
SELECT navis_vector_dims('{1,2,3}');
SELECT navis_distance_kernels() IN ('avx2+fma', 'scalar') AS kernels_known;
-- ORDER BY distance works in any query, without an index
CREATE TABLE items (id int, embedding real[]);
INSERT INTO items VALUES (1, '{0,0}'), (2, '{3,4}'), (3, '{1,1}'), (4, '{-2,0}'), (5, NULL);
SELECT id, embedding <-> '{0,0}' AS dist FROM items ORDER BY embedding <-> '{0,0}' LIMIT 3;
SELECT id FROM items WHERE embedding IS NOT NULL ORDER BY embedding <#> '{1,1}', id;
SELECT id FROM items WHERE embedding IS NOT NULL AND id <> 1 ORDER BY embedding <=> '{1,1}', id;
