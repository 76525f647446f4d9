#!/usr/bin/env bash
# NAVIS-Cache against plain LRU and no cache (issue 6), one command:
#
#   benchmarks/pg/cache.sh [DATASET]          default: minilm-200k
#
# 1. builds the navis index over the first BASE rows once, in a template cluster;
# 2. for each policy in POLICIES, copies that cluster (so every policy starts from the same
#    index), starts it with navis.cache_size = a quarter of the edge file (CACHE_MB overrides)
#    and navis.cache_policy = the policy, and runs cache.py: warm-up searches, INSERT rows in
#    batches of BATCH by WRITERS sessions while SEARCHERS sessions search, then searches alone;
# 3. writes OUT/cache-<policy>.json and the markdown table OUT/cache.md.
#
# Environment: BASE (180000), INSERT (20000), BATCH (5000), WRITERS (2), SEARCHERS (2),
# POLICIES ("navis lru off"), CACHE_MB, SEARCH_PROMOTE_HITS, FROZEN_EVICTION, OUT
# (benchmarks/data/cache-results). Needs the extension installed (release build:
# cargo pgrx install --release --pg-config /usr/lib/postgresql/15/bin/pg_config) and the
# dataset (benchmarks/datasets/prepare.sh minilm-200k). Run as root. Edge pages are read
# with O_DIRECT, so the OS page cache does not serve edge pages: a cache miss is a device read
# whatever the machine's free memory.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DATA=${DATA:-$ROOT/benchmarks/data}
OUT=${OUT:-$DATA/cache-results}
PY=${PY:-$DATA/venv/bin/python}
NAME=${1:-minilm-200k}
BASE=${BASE:-180000} INSERT=${INSERT:-20000} BATCH=${BATCH:-5000}
WRITERS=${WRITERS:-2} SEARCHERS=${SEARCHERS:-2}
POLICIES=${POLICIES:-navis lru off}
TEMPLATE=/tmp/navis-cachebench/template RUN=/tmp/navis-cachebench/run PORT=54341
mkdir -p "$OUT"
# shellcheck source=../../scripts/lib/cluster.sh
source "$ROOT/scripts/lib/cluster.sh"
common=("shared_preload_libraries = 'navis'" "shared_buffers = 256MB" "maintenance_work_mem = 2GB"
        "max_wal_size = 4GB" "checkpoint_timeout = 30min")

if [ ! -f "$OUT/prepare-$NAME-$BASE.json" ] || [ ! -d "$TEMPLATE/data" ]; then
  echo "== building the template index over $BASE rows of $NAME"
  cluster_start "$TEMPLATE" "$PORT" "${common[@]}"
  "$PY" "$HERE/cache.py" prepare "$DATA/$NAME" --host "$TEMPLATE" --port "$PORT" --base "$BASE" \
      | tee "$OUT/prepare-$NAME-$BASE.json"
  cluster_stop "$TEMPLATE"
fi
pages=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["edge_pages"])' "$OUT/prepare-$NAME-$BASE.json")
CACHE_MB=${CACHE_MB:-$(( (pages * 4096 / 4 + (1 << 20) - 1) >> 20 ))}
echo "== edge file: $pages pages ($(( pages * 4096 >> 20 )) MB); cache: $CACHE_MB MB"

for policy in $POLICIES; do
  cluster_stop "$RUN"
  rm -rf "$RUN"
  install -d -o postgres -g postgres "$RUN"
  cp -a "$TEMPLATE/data" "$RUN/data"
  sed -i "s#^unix_socket_directories = .*#unix_socket_directories = '$RUN'#" "$RUN/data/postgresql.conf"
  {
    echo "navis.cache_size = '${CACHE_MB}MB'"
    echo "navis.cache_policy = '$policy'"
    [ -n "${SEARCH_PROMOTE_HITS:-}" ] && echo "navis.cache_search_promote_hits = $SEARCH_PROMOTE_HITS"
    [ -n "${FROZEN_EVICTION:-}" ] && echo "navis.cache_frozen_eviction = '$FROZEN_EVICTION'"
    true
  } >>"$RUN/data/postgresql.conf"
  runuser -u postgres -- env -u RUST_BACKTRACE "$PGBIN/pg_ctl" -D "$RUN/data" -l "$RUN/server.log" -w start >/dev/null
  echo "== policy $policy  $(uptime)"
  "$PY" "$HERE/cache.py" run "$DATA/$NAME" --host "$RUN" --port "$PORT" --base "$BASE" \
      --insert "$INSERT" --batch "$BATCH" --writers "$WRITERS" --searchers "$SEARCHERS" \
      --json "$OUT/cache-$policy.json"
  cluster_stop "$RUN"
done

"$PY" - "$OUT" $POLICIES <<'EOF' | tee "$OUT/cache.md"
import json, sys
out, policies = sys.argv[1], sys.argv[2:]
runs = {p: json.load(open(f"{out}/cache-{p}.json")) for p in policies}
r0 = next(iter(runs.values()))
print(f"{r0['base']} base rows + {r0['insert']} inserted in batches of {r0['batch']} by "
      f"{r0['writers']} writers while {r0['searchers']} sessions search (search list "
      f"{r0['search_list']}); edge file {r0['edge_pages_at_start']} pages at the start; "
      f"cache {r0['cache_size']}.\n")
print("| policy | search hit rate | insert hit rate | NAVIS-Cache misses / query | / insert "
      "| rows/s | q/s during inserts | P50 / P99 ms | search-only hit rate | reads / query "
      "| search-only q/s | promoted | frozen evictions | recall@10 |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for p, r in runs.items():
    b = r["batches"]
    s = lambda k: sum(x["cache"][k] for x in b)
    rows, secs, q = sum(x["rows"] for x in b), sum(x["secs"] for x in b), sum(x["queries"] for x in b)
    sl, il = s("search_lookups"), s("insert_lookups")
    so = r["search_only"]
    print(f"| {p} | {(sl - s('search_misses')) / max(sl, 1):.3f} | {(il - s('insert_misses')) / max(il, 1):.3f} "
          f"| {s('search_misses') / max(q, 1):.1f} | {s('insert_misses') / rows:.1f} | {rows / secs:.1f} "
          f"| {q / secs:.1f} | {sum(x['p50_ms'] for x in b) / len(b):.1f} / {max(x['p99_ms'] for x in b):.1f} "
          f"| {so['cache']['search_hit_rate']:.3f} | {so['cache']['search_misses'] / max(so['queries'], 1):.1f} "
          f"| {so['qps']:.1f} | {s('promoted')} | {s('frozen_evictions')} | {r['recall_at_10']:.3f} |")
print("\nPer batch (search hit rate / insert hit rate):\n")
for p, r in runs.items():
    print(f"- {p}: " + ", ".join(f"{x['cache']['search_hit_rate']:.3f}/{x['cache']['insert_hit_rate']:.3f}"
                                  for x in r["batches"]))
EOF
