-- Every bad input gets an ERROR that names the problem; nothing crashes, nothing is silent.
CREATE EXTENSION navis;
-- different dimensions
SELECT '{1,2}'::real[] <-> '{1,2,3}'::real[];
SELECT '{1,2}'::real[] <#> '{1}'::real[];
SELECT cosine_distance('{1}', '{1,2}');
-- NULL elements
SELECT '{1,NULL}'::real[] <-> '{1,2}'::real[];
SELECT '{1,2}'::real[] <=> '{NULL,2}'::real[];
-- NaN and infinity
SELECT '{1,NaN}'::real[] <-> '{1,2}'::real[];
SELECT '{1,2}'::real[] <#> '{Infinity,2}'::real[];
SELECT '{-Infinity,2}'::real[] <=> '{1,2}'::real[];
-- multi-dimensional arrays
SELECT '{{1,2},{3,4}}'::real[] <-> '{1,2,3,4}'::real[];
-- empty arrays
SELECT '{}'::real[] <-> '{}'::real[];
SELECT navis_vector_dims('{}');
-- beyond the dimension limit (16,000)
SELECT array_fill(1::real, ARRAY[16001]) <-> array_fill(1::real, ARRAY[16001]);
-- wrong types: no operator for text[], and integer arrays are cast to real[] implicitly
SELECT '{a,b}'::text[] <-> '{c,d}'::text[];
SELECT '{1,2}'::int[] <-> '{4,6}'::int[] AS int_arrays_cast;
SELECT 'not an array' <-> '{1,2}'::real[];
