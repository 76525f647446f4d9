#!/usr/bin/env bash
# Build one benchmark dataset into $DATA/<name>/{base.fbin,query.fbin,gt100.bin} (DATA defaults to
# benchmarks/data). Idempotent: every step skips outputs that exist, so an interrupted run resumes.
#
#   prepare.sh fashion-mnist   60,000 base / 10,000 queries, 784-d, L2 (ann-benchmarks split)
#   prepare.sh glove-50        390,000 / 10,000, 50-d, L2 on unit vectors (= cosine)
#   prepare.sh minilm-100k     100,000 / 1,000, 384-d, all-MiniLM-L6-v2 text embeddings, unit vectors
#   prepare.sh synthetic-1m    1,000,000 / 1,000, 384-d, clustered synthetic, unit vectors
#   (also minilm-<N>k and synthetic-<N>m for other sizes; several names may be given)
#
# Heavy steps run under `nice -n 10` (NICE= to disable). Ground truth: k=100, squared L2.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
export DATA=${DATA:-$(cd "$HERE/.." && pwd)/data}
PY=$DATA/venv/bin/python
NICE=${NICE-nice -n 10}
K=100
MINILM_NQ=1000        # held-out query passages (the first rows of the shuffled corpus)
PART=10000            # MiniLM embedding is done and kept in parts of this many passages
log() { echo "[$(date +%T)] $*" >&2; }
have() { for f in "$@"; do [ -s "$f" ] || return 1; done; }

groundtruth() {  # DIR
    have "$1/gt$K.bin" || { log "ground truth $1"; $NICE "$PY" "$HERE/groundtruth.py" \
        "$1/base.fbin" "$1/query.fbin" "$1/gt$K.bin" --k $K --metric l2; }
}

minilm() {  # OUT N_BASE
    local out=$1 n=$2 parts=$DATA/sources/minilm-parts corpus=$DATA/sources/corpus.tsv
    if ! have "$out/base.fbin" "$out/query.fbin"; then
        if ! have "$corpus"; then
            bash "$HERE/fetch.sh" text
            log "building corpus"
            DEB=$DATA/sources/deb/root APTL=$DATA/sources/aptlists NPM=$DATA/sources/npm \
                $NICE "$PY" "$HERE/corpus.py" "$corpus"
        fi
        local total=$((n + MINILM_NQ)) avail i files=()
        avail=$(wc -l < "$corpus")
        [ "$total" -le "$avail" ] || { echo "corpus has only $avail passages" >&2; exit 1; }
        mkdir -p "$parts"
        for ((i = 0; i * PART < total; i++)); do
            local f; f=$(printf "%s/part-%04d.fbin" "$parts" $i)
            # the last part holds only the rows needed; a larger set later re-embeds it whole
            local rows=$((total - i * PART < PART ? total - i * PART : PART))
            if ! have "$f" || [ "$(od -An -tu4 -N4 "$f" | tr -d ' ')" -lt $rows ]; then
                log "embedding passages $((i * PART))..$((i * PART + rows - 1))"
                $NICE "$PY" "$HERE/embed.py" "$corpus" "$f" --skip $((i * PART)) --limit $rows
            fi
            files+=("$f")
        done
        "$PY" "$HERE/fbin.py" cat --rows $total "$out/all.fbin" "${files[@]}"
        "$PY" "$HERE/fbin.py" split "$out/all.fbin" $MINILM_NQ "$out/query.fbin" "$out/base.fbin"
        rm -f "$out/all.fbin" "$out/all.fbin.txt"
    fi
}

prepare() {
    local name=$1 out=$DATA/$1
    mkdir -p "$out"
    case "$name" in
    fashion-mnist)
        have "$out/base.fbin" "$out/query.fbin" ||
            "$PY" "$HERE/fmnist.py" "$out" --src "$(bash "$HERE/fetch.sh" fmnist)" ;;
    glove-50)
        have "$out/base.fbin" "$out/query.fbin" || "$PY" "$HERE/glove.py" "$out" ;;
    minilm-*k)
        local n=${name#minilm-}; minilm "$out" $((${n%k} * 1000)) ;;
    synthetic-*m)
        local n=${name#synthetic-}; n=${n%m}
        have "$out/base.fbin" "$out/query.fbin" || $NICE "$PY" "$HERE/synthetic.py" "$out" \
            --n $((n * 1000000)) --dim 384 --nq 1000 --normalize ;;
    *)
        sed -n '2,11p' "$0"; exit 2 ;;
    esac
    groundtruth "$out"
    "$PY" "$HERE/fbin.py" info "$out/base.fbin" "$out/query.fbin" "$out/gt$K.bin"
}

[ $# -gt 0 ] || { sed -n '2,11p' "$0"; exit 2; }
bash "$HERE/fetch.sh" venv
for name in "$@"; do
    t0=$(date +%s); prepare "$name"; log "$name ready in $(($(date +%s) - t0)) s"
done
