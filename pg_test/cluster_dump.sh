# Cluster test of pg_dump and pg_restore (issue 16 part 4), sourced by run_cluster_tests.sh.

# A database with navis indexes over real[] (and pgvector's vector and halfvec where pgvector
# is installed) is dumped and restored into a new database: the restored indexes return the
# exact top-10 of each query (what a sequential scan returns), verify clean and take inserts.
test_dump_and_restore() {
  local src=navis_dump_src dst=navis_dump_dst file="$DIR/navis.dump"
  local have_vector; have_vector=$(val "SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'")
  sql -c "DROP DATABASE IF EXISTS $src" -c "DROP DATABASE IF EXISTS $dst" -c "CREATE DATABASE $src"
  local s=(cluster_psql "$DIR" "$PORT" -v ON_ERROR_STOP=1 -At -d "$src")
  local tables=(r)
  if [ "$have_vector" = 1 ]; then
    "${s[@]}" -c "CREATE EXTENSION vector" >/dev/null
    tables+=(v h)
  fi
  "${s[@]}" -c "CREATE EXTENSION navis" \
    -c "CREATE TABLE r (id int PRIMARY KEY, e real[])" \
    -c "INSERT INTO r SELECT i, ARRAY[sin(i), cos(i * 0.7), sin(i * 0.3), (i % 11) / 11.0]::real[] FROM generate_series(1, 3000) i" \
    -c "CREATE INDEX r_e ON r USING navis (e)" >/dev/null
  if [ "$have_vector" = 1 ]; then
    "${s[@]}" -c "CREATE TABLE v AS SELECT id, e::vector(4) AS e FROM r" -c "ALTER TABLE v ADD PRIMARY KEY (id)" \
      -c "CREATE INDEX v_e ON v USING navis (e navis_vector_cosine_ops)" \
      -c "CREATE TABLE h AS SELECT id, e::halfvec(4) AS e FROM r" -c "ALTER TABLE h ADD PRIMARY KEY (id)" \
      -c "CREATE INDEX h_e ON h USING navis (e)" >/dev/null
  fi
  runuser -u postgres -- "$PGBIN/pg_dump" -h "$DIR" -p "$PORT" -Fc -f "$file" "$src" ||
    { fail dump_and_restore "pg_dump failed"; return; }
  sql -c "CREATE DATABASE $dst"
  # Where pgvector was installed before navis, CREATE EXTENSION navis makes the pgvector
  # operator classes and the dump's own CREATE OPERATOR CLASS then finds them (README); any
  # other restore error fails the test.
  local errors; errors=$(runuser -u postgres -- "$PGBIN/pg_restore" -h "$DIR" -p "$PORT" -d "$dst" "$file" 2>&1 |
    grep -E "ERROR" | grep -v -E 'operator (class|family) "navis_(vector|halfvec)_[a-z0-9]+_ops" for access method "navis" already exists' || true)
  [ -z "$errors" ] || { fail dump_and_restore "pg_restore: $errors"; return; }
  local d=(cluster_psql "$DIR" "$PORT" -v ON_ERROR_STOP=1 -At -d "$dst")
  local t op wrong=0 checked=0
  for t in "${tables[@]}"; do
    op='<->'; [ "$t" = v ] && op='<=>'
    local plan; plan=$("${d[@]}" -c "SET enable_seqscan = off" -c "EXPLAIN (COSTS OFF) SELECT id FROM $t ORDER BY e $op (SELECT e FROM $t WHERE id = 1) LIMIT 10" | grep -c "Index Scan using ${t}_e")
    [ "$plan" = 1 ] || { fail dump_and_restore "restored $t does not use its navis index"; return; }
    local bad; bad=$("${d[@]}" -c "SET enable_seqscan = off" -c "SELECT count(*) FROM generate_series(1, 3000, 150) q
        WHERE (SELECT array_agg(id) FROM (SELECT id FROM $t ORDER BY e $op (SELECT e FROM $t WHERE id = q) LIMIT 10) a)
           <> (SELECT array_agg(id) FROM (SELECT id FROM $t ORDER BY (e $op (SELECT e FROM $t WHERE id = q)) + 0, id LIMIT 10) b)" | tail -1)
    wrong=$((wrong + bad)); checked=$((checked + 20))
    local verify; verify=$("${d[@]}" -c "INSERT INTO $t SELECT 100000, e FROM $t WHERE id = 7" -c "SELECT clean FROM navis_verify('${t}_e')" | tail -1)
    [ "$verify" = t ] || { fail dump_and_restore "navis_verify of restored ${t}_e: $verify"; return; }
  done
  sql -c "DROP DATABASE $src" -c "DROP DATABASE $dst"
  # (ties at the 10th place may order differently; allow one query in twenty)
  [ "$wrong" -le $((checked / 20)) ] || { fail dump_and_restore "$wrong of $checked restored top-10s differ from the exact ones"; return; }
  echo "ok       dump_and_restore (pg_dump -Fc / pg_restore of navis indexes over ${tables[*]}: each used by the planner, $((checked - wrong)) of $checked top-10s exact, verify clean after an insert)"
}
