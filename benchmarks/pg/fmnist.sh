# Fashion-MNIST tables and recall for the SQL benchmarks (sourced; needs ROOT and a function
# p that runs psql against the benchmark cluster).

# fmnist_tables TABLE ROWS: train images 1..ROWS into TABLE (id, label, v), the 100 test images
# into q, and their exact top-10 among TABLE's rows into exact (qid, id).
fmnist_tables() {
  python3 "$ROOT/scripts/fashion_mnist_copy.py" train "$2" |
    p -c "CREATE TABLE $1 (id int PRIMARY KEY, label int, v real[]); COPY $1 FROM STDIN"
  python3 "$ROOT/scripts/fashion_mnist_copy.py" test 100 |
    p -c "CREATE TABLE q (id int, label int, v real[]); COPY q FROM STDIN"
  p -c "VACUUM ANALYZE $1" -c "SET enable_indexscan = off" \
    -c "CREATE TABLE exact AS SELECT q.id AS qid, n.id FROM q CROSS JOIN LATERAL (SELECT id FROM $1 ORDER BY $1.v <-> q.v LIMIT 10) n"
}

# fmnist_recall TABLE [SETTING...]: recall@10 of TABLE's navis index over the test images against
# exact, with the given settings (e.g. "navis.search_list = 20").
fmnist_recall() {
  local table=$1 setting sets=()
  shift
  for setting in "$@"; do sets+=(-c "SET $setting"); done
  p -c "SET enable_seqscan = off" "${sets[@]}" -c "SELECT round(count(*) FILTER (WHERE EXISTS
      (SELECT 1 FROM exact e WHERE e.qid = a.qid AND e.id = a.id)) / 1000.0, 4)
      FROM (SELECT q.id AS qid, n.id FROM q CROSS JOIN LATERAL
            (SELECT id FROM $table ORDER BY $table.v <-> q.v LIMIT 10) n) a" | tail -1
}
