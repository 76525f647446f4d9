#!/usr/bin/env bash
# Single-core build time of navis against pgvector HNSW on the same rows (issue 3's build
# target: 100K MiniLM, navis R = 64, L = 100 against HNSW m = 16, ef_construction = 64).
#
#   benchmarks/engine/build_vs_pgvector.sh DATASET [ROUNDS]     e.g. ... minilm-100k 3
#
# Each round builds, one after the other (the machine is shared and noisy, so the rounds
# interleave the systems and each round's ratio is what to read):
#   engine:   navis-bench build --threads 1 (the PostgreSQL-free crate, from base.fbin)
#   navis:    CREATE INDEX ... USING navis (max_parallel_maintenance_workers = 0)
#   pgvector: CREATE INDEX ... USING hnsw  (max_parallel_maintenance_workers = 0)
# on one scratch cluster (port 54345, shared_buffers 1GB, maintenance_work_mem 4GB) holding
# the rows once in a vector(dim) table. Needs navis installed (cargo pgrx install --release)
# and pgvector built from source; without pgvector only navis is timed. Prints a markdown
# table; raw JSON in benchmarks/data/build-vs-pgvector/DATASET/.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DATA=${DATA:-$ROOT/benchmarks/data}
PY=${PY:-$DATA/venv/bin/python}
NAME=${1:?usage: build_vs_pgvector.sh DATASET [ROUNDS]}
ROUNDS=${2:-2}
D=$DATA/$NAME
R=${R:-64} L=${L:-100} HNSW_M=${HNSW_M:-16} HNSW_EFC=${HNSW_EFC:-64}
[ -s "$D/gt100.bin" ] || bash "$ROOT/benchmarks/datasets/prepare.sh" "$NAME"
"$PY" -c 'import psycopg' 2>/dev/null || "$DATA/venv/bin/pip" install -q --no-deps -r "$ROOT/benchmarks/pg/requirements.txt"
cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml" -p navis-engine --bin navis-bench
B=$ROOT/target/release/navis-bench
OUT=$DATA/build-vs-pgvector/$NAME
CDIR=/tmp/navis-build-cmp PORT=54345
mkdir -p "$OUT"
# shellcheck source=../../scripts/lib/cluster.sh
source "$ROOT/scripts/lib/cluster.sh"
have_pgvector=0
[ -f /usr/share/postgresql/15/extension/vector.control ] && have_pgvector=1
coltype=real; [ $have_pgvector = 1 ] && coltype=vector
cluster_start "$CDIR" "$PORT" "shared_preload_libraries = 'navis'" "shared_buffers = 1GB" \
    "maintenance_work_mem = 4GB" "max_wal_size = 4GB"
trap 'cluster_stop "$CDIR"' EXIT
common=("$D" --host "$CDIR" --port "$PORT" --coltype "$coltype" --build-threads 1
        --queries 100 --warmup 10 --lists 40 --ef-search 40)

build_in_pg() {  # SYSTEM ROUND: each system loads its own table in round 1
  local sys=$1 round=$2; shift 2
  local flags=(--system "$sys")
  [ "$round" = 1 ] || flags+=(--skip-load)
  if [ "$sys" = navis ]; then flags+=(--max-degree "$R" --build-list "$L")
  else flags+=(--hnsw-m "$HNSW_M" --hnsw-ef-construction "$HNSW_EFC"); fi
  "$PY" "$ROOT/benchmarks/pg/bench.py" "${common[@]}" "${flags[@]}" "$@" \
      --json "$OUT/$sys-$round.json" >/dev/null
  "$PY" -c 'import json,sys; print("%.1f" % json.load(open(sys.argv[1]))["build"]["build_s"])' "$OUT/$sys-$round.json"
}

echo "$NAME: engine and navis R=$R L=$L; pgvector m=$HNSW_M ef_construction=$HNSW_EFC; 1 core each; $(nproc) CPUs"
echo
echo "| round | engine s | navis (PostgreSQL) s | pgvector s | navis / pgvector | load before |"
echo "|---|---|---|---|---|---|"
for ((r = 1; r <= ROUNDS; r++)); do
  load=$(cut -d' ' -f1 /proc/loadavg)
  rm -rf "$OUT/engine-idx"
  /usr/bin/time -f "%e %M" -o "$OUT/engine-$r.time" "$B" build --base "$D/base.fbin" --out "$OUT/engine-idx" \
      --max-degree "$R" --build-list "$L" --threads 1 >"$OUT/engine-$r.md" 2>/dev/null
  engine=$(cut -d' ' -f1 "$OUT/engine-$r.time")
  navis=$(build_in_pg navis "$r")
  pgv=-; ratio=-
  if [ $have_pgvector = 1 ]; then
    pgv=$(build_in_pg pgvector "$r")
    ratio=$(awk -v a="$navis" -v b="$pgv" 'BEGIN { printf "%.2f", a / b }')
  fi
  echo "| $r | $engine | $navis | $pgv | $ratio | $load |"
done
rm -rf "$OUT/engine-idx"
