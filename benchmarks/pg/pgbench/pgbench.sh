#!/usr/bin/env bash
# pgbench drivers for the insert and search mixes (issue 7), navis or pgvector HNSW.
#
#   benchmarks/pg/pgbench/pgbench.sh DATA_DIR        (cluster already running, as root)
#
# 1. stage.py loads the first BASE rows of DATA_DIR/base.fbin into pgb_items and builds the index
#    (SYSTEM=navis: USING navis; SYSTEM=pgvector: USING hnsw (embedding vector_l2_ops) WITH (m,
#    ef_construction)), the next NROWS rows into pgb_stage_insert and NQ queries into
#    pgb_stage_query (skipped with SKIP_STAGE=1, to rerun the mix on the same tables; note that
#    each run's inserts stay in pgb_items);
# 2. checks with EXPLAIN that search.sql's query is an index scan;
# 3. runs  pgbench -n -f insert.sql@W_INSERT -f search.sql@W_SEARCH -c C -j C -T S -M prepared -r -P 10
#    (a weight of 0 leaves that script out, e.g. W_INSERT=0 for search only) with the search
#    setting passed as PGOPTIONS (navis.search_list = SEARCH_LIST, hnsw.ef_search = EF_SEARCH),
#    and prints pgbench's report: TPS overall and per script, latency average and per statement.
#    pgbench cannot measure recall: bench.py and inserts.py do that on the same data.
#
# Environment: HOST (/tmp/navis-pgbench), PORT (54340), SYSTEM (navis), BASE (10000), NROWS
# (10000), NQ (1000), CLIENTS (2), SECONDS (30), W_INSERT (1), W_SEARCH (4), SEARCH_LIST,
# EF_SEARCH (unset: the server's default), M (16), EFC (64), COLTYPE (real|vector, navis only),
# BUILD_OPTS (extra stage.py options, e.g. "--max-degree 64"), PY (benchmarks/data/venv/bin/python),
# QUERY_MODE (pgbench -M: prepared), OUT (a file to append the report to), NICE (pgbench runs
# under nice -n $NICE if set).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
DATA_DIR=${1:?usage: pgbench.sh DATA_DIR}
HOST=${HOST:-/tmp/navis-pgbench} PORT=${PORT:-54340} SYSTEM=${SYSTEM:-navis}
BASE=${BASE:-10000} NROWS=${NROWS:-10000} NQ=${NQ:-1000}
CLIENTS=${CLIENTS:-2} SECONDS_=${SECONDS:-30} W_INSERT=${W_INSERT:-1} W_SEARCH=${W_SEARCH:-4}
PY=${PY:-$ROOT/benchmarks/data/venv/bin/python}
PGBENCH=/usr/lib/postgresql/15/bin/pgbench
psql_() { psql -X -q -At -h "$HOST" -p "$PORT" -U postgres -d postgres "$@"; }

if [ "${SKIP_STAGE:-}" != 1 ]; then
    stage_opts=(--host "$HOST" --port "$PORT" --system "$SYSTEM" --base "$BASE" --nrows "$NROWS"
                --nqueries "$NQ" --hnsw-m "${M:-16}" --hnsw-ef-construction "${EFC:-64}")
    [ -n "${COLTYPE:-}" ] && stage_opts+=(--coltype "$COLTYPE")
    # shellcheck disable=SC2206
    [ -n "${BUILD_OPTS:-}" ] && stage_opts+=($BUILD_OPTS)
    "$PY" "$HERE/stage.py" "$DATA_DIR" "${stage_opts[@]}"
fi
nrows=$(psql_ -c "SELECT count(*) FROM pgb_stage_insert")
nq=$(psql_ -c "SELECT count(*) FROM pgb_stage_query")

opts=""
if [ "$SYSTEM" = pgvector ]; then
    [ -n "${EF_SEARCH:-}" ] && opts="-c hnsw.ef_search=$EF_SEARCH"
    setting="hnsw.ef_search"
else
    [ -n "${SEARCH_LIST:-}" ] && opts="-c navis.search_list=$SEARCH_LIST"
    setting="navis.search_list"
fi
plan=$(PGOPTIONS=$opts psql_ -c "EXPLAIN (COSTS OFF) SELECT i.id FROM pgb_items i ORDER BY
    i.embedding <-> (SELECT s.embedding FROM pgb_stage_query s WHERE s.id = 1) LIMIT 10")
if ! grep -q "Index Scan using pgb_items_idx" <<<"$plan"; then
    echo "search.sql would not use pgb_items_idx:" >&2; echo "$plan" >&2; exit 1
fi

scripts=()
[ "$W_INSERT" -gt 0 ] && scripts+=(-f "$HERE/insert.sql@$W_INSERT")
[ "$W_SEARCH" -gt 0 ] && scripts+=(-f "$HERE/search.sql@$W_SEARCH")
rows_before=$(psql_ -c "SELECT count(*) FROM pgb_items")
value=$(PGOPTIONS=$opts psql_ -c "SHOW $setting" 2>/dev/null || echo "?")
cmd=(env PGOPTIONS="$opts" "$PGBENCH" -n "${scripts[@]}" -c "$CLIENTS" -j "$CLIENTS" -T "$SECONDS_"
     -M "${QUERY_MODE:-prepared}" -r -P 10 -D nrows="$nrows" -D nqueries="$nq" -D base="$BASE" -h "$HOST" -p "$PORT" -U postgres
     postgres)
nice_cmd=()
[ -n "${NICE:-}" ] && nice_cmd=(nice -n "$NICE")
{
    echo "## pgbench: $SYSTEM, $(basename "$DATA_DIR"), $rows_before rows indexed, $setting = $value,"\
         "$CLIENTS clients, ${SECONDS_} s, insert:search weights $W_INSERT:$W_SEARCH ($(date -u +%FT%TZ))"
    echo
    echo "regime: $(REGIME_HOST=$HOST REGIME_PORT=$PORT "$PY" -c '
import os, sys
sys.path.insert(0, sys.argv[1])
import psycopg
from bench import server_memory
c = psycopg.connect(host=os.environ["REGIME_HOST"], port=int(os.environ["REGIME_PORT"]),
                    user="postgres", dbname="postgres", autocommit=True)
print(server_memory(c)["regime"])' "$ROOT/benchmarks/pg")"
    echo
    echo '```'
    echo "${cmd[*]}"
    "${nice_cmd[@]}" "${cmd[@]}" 2>&1
    echo '```'
    echo
    echo "rows in pgb_items: $rows_before before, $(psql_ -c "SELECT count(*) FROM pgb_items") after"
} | if [ -n "${OUT:-}" ]; then tee -a "$OUT"; else cat; fi
