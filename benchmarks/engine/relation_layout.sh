#!/usr/bin/env bash
# The relation layout of RFC 0001 (one file of 8 KiB pages) against the side files (4 KiB edge
# pages), with navis-bench on the same dataset and the same build parameters (the defaults).
#
#   benchmarks/engine/relation_layout.sh DATASET W
#
# DATASET is a directory name under benchmarks/data (benchmarks/datasets/prepare.sh DATASET).
# W is the fixed CASR window both layouts search with (RelationIndex has no calibration); the
# side files' calibrated windows are printed by `navis-bench search --index DIR ... --casr auto`
# (column "CASR w"), and results/engine.md used the one at L = 40.
#
# 1. ROUNDS rounds (default 2) of two builds, side files then relation, timed with
#    /usr/bin/time; the first round's indexes are searched. An index that exists is kept
#    (BUILD=0 skips the builds altogether).
# 2. Searches at LISTS (default 20,40,80), 1 thread, --casr W, --io-detail: with reads through
#    the page cache (NAVIS_DIRECT=0) and with O_DIRECT, twice each, the two layouts alternating.
# 3. One run each, through the page cache, with --colocated and with --casr off.
#
# Outputs (markdown, one file per run) and a log with times and load averages go to
# OUT (default /tmp/navis-relation-layout/DATASET). Needs about twice the dataset's size free.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DS=${1:?usage: relation_layout.sh DATASET W}
W=${2:?usage: relation_layout.sh DATASET W}
D=${DATA:-$ROOT/benchmarks/data}/$DS
OUT=${OUT:-/tmp/navis-relation-layout/$DS}
LISTS=${LISTS:-20,40,80}
ROUNDS=${ROUNDS:-2}
mkdir -p "$OUT"
cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml" -p navis-engine --bin navis-bench
B=$ROOT/target/release/navis-bench
log() { echo "$* $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/log.txt"; }

if [ "${BUILD:-1}" = 1 ]; then
    for round in $(seq 1 "$ROUNDS"); do
        for layout in side relation; do
            idx=$OUT/$layout.$round
            [ -e "$idx" ] && continue
            log "build $layout round $round start"
            /usr/bin/time -v "$B" build --base "$D/base.fbin" --out "$idx" --layout "$layout" \
                >"$OUT/build-$layout.$round.md" 2>"$OUT/build-$layout.$round.log"
            log "build $layout round $round end"
            { grep -E '\*\*total\*\*|^\| file ' "$OUT/build-$layout.$round.md"
              grep -E 'User time|Elapsed' "$OUT/build-$layout.$round.log"
              du -sb "$idx"; } | tee -a "$OUT/log.txt"
        done
    done
fi

q=(--queries "$D/query.fbin" --gt "$D/gt100.bin" --lists "$LISTS" --threads 1 --io-detail)
run() {  # TAG NAVIS_DIRECT ARGS...
    local tag=$1 direct=$2; shift 2
    log "$tag start"
    NAVIS_DIRECT=$direct "$B" search "$@" "${q[@]}" >"$OUT/$tag.md"
    log "$tag end"
}
side=(--index "$OUT/side.1")
rel=(--layout relation --index "$OUT/relation.1")
for mode in buffered direct; do
    direct=$([ $mode = direct ] && echo 1 || echo 0)
    for r in 1 2; do
        run "search-side-$mode-casr$W.$r" "$direct" "${side[@]}" --casr "$W"
        run "search-relation-$mode-casr$W.$r" "$direct" "${rel[@]}" --casr "$W"
    done
done
run "search-side-buffered-casr$W-colocated" 0 "${side[@]}" --casr "$W" --colocated
run "search-relation-buffered-casr$W-colocated" 0 "${rel[@]}" --casr "$W" --colocated
run search-side-buffered-casroff 0 "${side[@]}" --casr off
run search-relation-buffered-casroff 0 "${rel[@]}" --casr off
for f in "$OUT"/search-*.md; do echo "## $(basename "$f")"; grep -E '^\| [0-9]' "$f"; done
