#!/usr/bin/env bash
# Insert-path CASR against reranking everything (NAVIS paper §4 / README "windowed CASR";
# issue 3's CASR target). Builds an engine index on the first rows of a prepared dataset,
# copies it, and inserts the remaining rows into each copy with position seeking's CASR
#   auto: window calibrated as P90 of the first 1,000 inserts' minimal safe windows (default)
#   off:  every explored candidate's vector loaded and reranked
# then searches both with CASR off (so only the inserts differ) and prints the tables.
#
#   benchmarks/engine/insert_casr.sh DATASET [BUILD_ROWS]
#
# DATASET is a directory name under benchmarks/data (prepare it with
# benchmarks/datasets/prepare.sh); BUILD_ROWS defaults to 90% of its base rows. Output goes
# to benchmarks/data/insert-casr/DATASET/ (indexes) and stdout (markdown). Counters are
# deterministic (single-threaded inserts in row order); rows/s is wall clock on this machine.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DATASET=${1:?usage: insert_casr.sh DATASET [BUILD_ROWS]}
D=$ROOT/benchmarks/data/$DATASET
[ -s "$D/base.fbin" ] || { echo "no $D/base.fbin: run benchmarks/datasets/prepare.sh $DATASET" >&2; exit 1; }
ROWS=$(od -An -tu4 -N4 "$D/base.fbin" | tr -d ' ')
BUILD_ROWS=${2:-$((ROWS * 9 / 10))}
OUT=$ROOT/benchmarks/data/insert-casr/$DATASET
R=${R:-64}; L=${L:-100}; THREADS=${THREADS:-1}  # THREADS: build threads only

cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml" -p navis-engine --bin navis-bench
B=$ROOT/target/release/navis-bench

mkdir -p "$OUT"
if [ ! -s "$OUT/built-$BUILD_ROWS/manifest" ]; then
    rm -rf "$OUT/built-$BUILD_ROWS"
    echo "## build: first $BUILD_ROWS of $ROWS rows (R=$R, L=$L, $THREADS thread(s))"
    "$B" build --base "$D/base.fbin" --out "$OUT/built-$BUILD_ROWS" --limit "$BUILD_ROWS" \
        --max-degree "$R" --build-list "$L" --threads "$THREADS" | grep -E "total|overlap"
fi
for casr in auto off; do
    rm -rf "$OUT/$casr"
    cp -r "$OUT/built-$BUILD_ROWS" "$OUT/$casr"
    echo
    echo "## inserts with CASR $casr"
    "$B" insert --index "$OUT/$casr" --base "$D/base.fbin" --from "$BUILD_ROWS" --to "$ROWS" \
        --casr "$casr" --queries "$D/query.fbin" --gt "$D/gt100.bin" --lists 20,40,80
done
