#!/usr/bin/env bash
# A/B of one search setting out of memory on the cluster compare.sh left behind (RFC 0010
# addendum; RFC 0012):
#
#   benchmarks/pg/beam_ab.sh DATASET       e.g. after compare.sh synthetic-1m b
#   SETTING=navis.rerank_read_ahead VALUES="0 -1 0 -1" benchmarks/pg/beam_ab.sh synthetic-1m
#
# SETTING is navis.beam_width unless given. For each value in VALUES (WIDTHS, default
# "16 4 16 4"): restart the server inside a LIMIT_MB memory
# group (384) with the page cache dropped, then bench.py at navis.search_list LIST (80) with
# the setting fixed, CLIENTS (1), WARMUP (20) + QUERIES (200) queries. Every width starts
# cold, on the same queries, so runs alternate rather than warm each other up.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
NAME=${1:?dataset, e.g. synthetic-1m}
CDIR=/tmp/navis-compare PORT=54342
PY=${PY:-$ROOT/benchmarks/data/venv/bin/python}
# shellcheck source=../../scripts/lib/cluster.sh
source "$ROOT/scripts/lib/cluster.sh"
# shellcheck source=memlimit.sh
source "$HERE/memlimit.sh"
[ -d "$CDIR/data" ] || { echo "no cluster in $CDIR: run compare.sh $NAME b first" >&2; exit 1; }
SETTING=${SETTING:-navis.beam_width}
for w in ${VALUES:-${WIDTHS:-16 4 16 4}}; do
  cluster_stop "$CDIR"; drop_caches
  memlimit_remove compare >/dev/null 2>&1 || true
  memlimit_create compare "${LIMIT_MB:-384}M" >/dev/null
  memlimit_run compare runuser -u postgres -- env -u RUST_BACKTRACE "$PGBIN/pg_ctl" -D "$CDIR/data" \
      -l "$CDIR/server.log" -w start >/dev/null
  echo "== cold start, $SETTING $w"
  PGOPTIONS="-c $SETTING=$w" "$PY" "$HERE/bench.py" "$ROOT/benchmarks/data/$NAME" \
      --host "$CDIR" --port "$PORT" --system navis --coltype vector --skip-load --skip-build \
      --lists "${LIST:-80}" --clients "${CLIENTS:-1}" --queries "${QUERIES:-200}" \
      --warmup "${WARMUP:-20}" | grep -E '^\| [0-9]'
done
cluster_stop "$CDIR"; memlimit_remove compare >/dev/null 2>&1 || true
