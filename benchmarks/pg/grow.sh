#!/usr/bin/env bash
# An index grown from empty by inserts against a fresh build of the same rows (issue 14 part 1,
# RFC 0002): the same Fashion-MNIST rows inserted in batches into an index created over an
# empty table, and indexed by CREATE INDEX; recall@10 of 100 test images against exact search
# at several search lists, relation size, the rows the last build saw and the retired bytes.
# Counts and ratios only: nothing here is timed.
#
#   bash benchmarks/pg/grow.sh [ROWS] [MAINTENANCE_WORK_MEM]   (defaults 60000, 64MB)
#   DATA=benchmarks/data/minilm-30k bash benchmarks/pg/grow.sh 30000 64MB
#     (an .fbin set instead: the first ROWS rows of base.fbin, the first 100 of query.fbin)
#
# Install the release build first (cargo pgrx install --release). Output: a markdown table.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/scripts/lib/cluster.sh"
ROWS=${1:-60000}
MEM=${2:-64MB}
BATCH=500
LISTS=(10 20 50 100)
D=/tmp/navis-grow PORT=54353
cluster_start "$D" "$PORT" "shared_preload_libraries = 'navis'" "shared_buffers = '1GB'" \
  "max_wal_size = '8GB'" "maintenance_work_mem = '$MEM'"
trap 'cluster_stop "$D"' EXIT
p() { cluster_psql "$D" "$PORT" -v ON_ERROR_STOP=1 -At "$@"; }
p -c "CREATE EXTENSION navis"
source "$ROOT/benchmarks/pg/fmnist.sh"
if [ -n "${DATA:-}" ]; then
  python3 "$ROOT/scripts/fbin_copy.py" "$DATA/base.fbin" "$ROWS" |
    p -c "CREATE TABLE src (id int PRIMARY KEY, v real[]); COPY src FROM STDIN"
  python3 "$ROOT/scripts/fbin_copy.py" "$DATA/query.fbin" 100 |
    p -c "CREATE TABLE q (id int, v real[]); COPY q FROM STDIN"
  p -c "VACUUM ANALYZE src" -c "SET enable_indexscan = off" \
    -c "CREATE TABLE exact AS SELECT q.id AS qid, n.id FROM q CROSS JOIN LATERAL (SELECT id FROM src ORDER BY src.v <-> q.v LIMIT 10) n"
  NAME=$(basename "$DATA")
else
  fmnist_tables src "$ROWS"
  NAME=Fashion-MNIST
fi

p -c "CREATE TABLE grown (id int PRIMARY KEY, v real[])" -c "CREATE INDEX grown_v ON grown USING navis (v)"
for ((lo = 1; lo <= ROWS; lo += BATCH)); do
  p -c "INSERT INTO grown SELECT id, v FROM src WHERE id BETWEEN $lo AND $((lo + BATCH - 1))"
done
p -c "CREATE TABLE fresh AS SELECT id, v FROM src" -c "CREATE INDEX fresh_v ON fresh USING navis (v)"

echo "$ROWS $NAME rows, maintenance_work_mem $MEM, inserted in batches of $BATCH into an empty index vs CREATE INDEX"
echo
header="| index | built_rows | relation MiB | retired MiB |"
sep="|---|---|---|---|"
for l in "${LISTS[@]}"; do header+=" recall@10 L=$l |"; sep+="---|"; done
echo "$header"; echo "$sep"
for t in grown fresh; do
  row=$(p -c "SELECT built_rows, round(pg_relation_size('${t}_v') / 1048576.0, 1), round(retired_bytes / 1048576.0, 1)
      FROM navis_index_stats('${t}_v')" | tr '|' ' ')
  read -r built size retired <<<"$row"
  line="| $t | $built | $size | $retired |"
  for l in "${LISTS[@]}"; do line+=" $(fmnist_recall "$t" "navis.search_list = $l") |"; done
  echo "$line"
done
