#!/usr/bin/env bash
# navis's inserts and searches inside a memory group, on one built index reused across runs
# (RFC 0011: how the 384 MiB thrash at 1M rows was found and the A/B of MADV_RANDOM measured).
#
#   benchmarks/pg/working_set.sh build DATASET     build BASE rows once (regime a), keep a copy
#   benchmarks/pg/working_set.sh run DATASET       restore the copy, start inside LIMIT_MB,
#                                                  run inserts.py --reuse, sample memory
#   benchmarks/pg/working_set.sh open DATASET      restore the copy, start (no limit), print the
#                                                  anonymous memory of three backends after two
#                                                  scans each (the first makes the runtime copy)
#
# Environment: BASE (rows built; default the dataset's rows minus 4,000), LIMIT_MB (384; 0 = no
# group), INSERT (2000), BATCH (500), LIST (navis.search_list, 80), BASELINE (seconds of
# searches alone first, 0), MWM (4GB), SNAP (where the built cluster is kept,
# benchmarks/data/working-set/DATASET-snapshot), OUT (benchmarks/data/working-set/DATASET-TAG),
# TAG (run). Every 10 s OUT/samples.txt gets the group's memory.stat and each backend's
# /proc/PID/smaps_rollup (Rss, Anonymous, Private_Dirty); OUT/first-open.txt times the first scan,
# which makes the runtime copy, before the searchers start. The installed navis.so is used as is.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=../../scripts/lib/cluster.sh
source "$ROOT/scripts/lib/cluster.sh"
# shellcheck source=memlimit.sh
source "$HERE/memlimit.sh"
MODE=${1:?build, run or open} NAME=${2:?dataset, e.g. synthetic-1m}
DATA=$ROOT/benchmarks/data D=$DATA/$NAME PY=${PY:-$DATA/venv/bin/python}
CDIR=/tmp/navis-working-set PORT=54350
SNAP=${SNAP:-$DATA/working-set/$NAME-snapshot}
ROWS=$("$PY" -c 'import sys,struct; print(struct.unpack("<I", open(sys.argv[1],"rb").read(4))[0])' "$D/base.fbin")
BASE=${BASE:-$((ROWS - 4000))}
common=(--host "$CDIR" --port "$PORT" --system navis --base "$BASE")

if [ "$MODE" = build ]; then
  cluster_start "$CDIR" "$PORT" "shared_preload_libraries = 'navis'" "shared_buffers = 64MB" \
      "maintenance_work_mem = ${MWM:-4GB}" "max_wal_size = 4GB" "navis.cache_size = '64MB'"
  "$PY" "$HERE/inserts.py" "$D" "${common[@]}" --insert 0 --recall-every 0
  cluster_stop "$CDIR"
  rm -rf "$SNAP"; mkdir -p "$(dirname "$SNAP")"; cp -a "$CDIR" "$SNAP"
  exit 0
fi

if [ "$MODE" = open ]; then
  [ -d "$SNAP" ] || { echo "no built cluster in $SNAP: run '$0 build $NAME' first" >&2; exit 1; }
  cluster_stop "$CDIR"; rm -rf "$CDIR"; cp -a "$SNAP" "$CDIR"
  printf "unix_socket_directories = '%s'\nport = %s\n" "$CDIR" "$PORT" >>"$CDIR/data/postgresql.conf"
  runuser -u postgres -- env -u RUST_BACKTRACE "$PGBIN/pg_ctl" -D "$CDIR/data" -l "$CDIR/server.log" -w start >/dev/null
  "$PY" - "$CDIR" "$PORT" <<'PYEOF'
import sys, psycopg
host, port = sys.argv[1], int(sys.argv[2])
def anonymous_mb(pid):
    with open(f"/proc/{pid}/smaps_rollup") as f:
        return next(int(l.split()[1]) // 1024 for l in f if l.startswith("Anonymous:"))
conns = []  # kept open: a backend's memory is what it keeps between queries
for i in range(3):
    c = psycopg.connect(host=host, port=port, dbname="postgres", user="postgres", autocommit=True)
    pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]
    for offset in (0, 5):
        c.execute("SELECT id FROM ins_bench ORDER BY embedding <-> (SELECT embedding FROM ins_bench"
                  f" OFFSET {offset} LIMIT 1) LIMIT 10").fetchall()
    print(f"backend {i + 1} (pid {pid}): {anonymous_mb(pid)} MB anonymous after two scans")
    conns.append(c)
PYEOF
  rc=$?; cluster_stop "$CDIR"; exit $rc
fi

LIMIT_MB=${LIMIT_MB:-384} OUT=${OUT:-$DATA/working-set/$NAME-${TAG:-run}}
[ -d "$SNAP" ] || { echo "no built cluster in $SNAP: run '$0 build $NAME' first" >&2; exit 1; }
cluster_stop "$CDIR"; rm -rf "$CDIR"; cp -a "$SNAP" "$CDIR"
# (a copy made elsewhere keeps its own socket directory and port otherwise)
printf "unix_socket_directories = '%s'\nport = %s\n" "$CDIR" "$PORT" >>"$CDIR/data/postgresql.conf"
sync; echo 3 >/proc/sys/vm/drop_caches
memlimit_remove ws >/dev/null 2>&1 || true
start=(runuser -u postgres -- env -u RUST_BACKTRACE "$PGBIN/pg_ctl" -D "$CDIR/data" -l "$CDIR/server.log" -w start)
if [ "$LIMIT_MB" != 0 ]; then memlimit_create ws "${LIMIT_MB}M"; memlimit_run ws "${start[@]}" >/dev/null
else "${start[@]}" >/dev/null; fi
mkdir -p "$OUT"; : >"$OUT/samples.txt"
( while true; do
    { date +%s
      [ "$LIMIT_MB" = 0 ] || grep -E "^(cache|rss|shmem|mapped_file|pgmajfault) " "$(memlimit_dir ws)/memory.stat"
      for p in $(pgrep -u postgres postgres); do
        echo "pid $p $(tr '\0' ' ' <"/proc/$p/cmdline" | cut -c1-60)" \
             "$(grep -E '^(Rss|Anonymous|Private_Dirty)' "/proc/$p/smaps_rollup" 2>/dev/null | awk '{printf "%s%s ", $1, $2}')"
      done
      echo; } >>"$OUT/samples.txt"
    sleep 10; done ) &
sampler=$!
# The first scan makes the runtime copy (RFC 0001 §3): timed on its own, so that the
# searchers' baseline measures searches only; its backend's memory is in the first sample.
t0=$EPOCHREALTIME
if cluster_psql "$CDIR" "$PORT" -qAt -c "SELECT count(*) FROM (SELECT id FROM ins_bench ORDER BY embedding <-> (SELECT embedding FROM ins_bench LIMIT 1) LIMIT 10) s" >/dev/null 2>"$OUT/first-open.err"; then
  echo "first open (runtime copy made): $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s" >"$OUT/first-open.txt"
else
  echo "first open failed: $(tail -1 "$OUT/first-open.err")" >"$OUT/first-open.txt"
fi
cat "$OUT/first-open.txt"
"$PY" "$HERE/inserts.py" "$D" "${common[@]}" --search-list "${LIST:-80}" --reuse \
    --insert "${INSERT:-2000}" --batch "${BATCH:-500}" --writers 2 --searchers 2 --recall-every 0 \
    --baseline-seconds "${BASELINE:-0}" --json "$OUT/inserts.json" >"$OUT/inserts.md" 2>&1
echo "inserts.py rc=$?" >>"$OUT/inserts.md"
kill "$sampler"
[ "$LIMIT_MB" = 0 ] || memlimit_report ws >"$OUT/memlimit.txt" 2>&1
cluster_stop "$CDIR"; memlimit_remove ws >/dev/null 2>&1 || true
cat "$OUT/inserts.md"; [ -f "$OUT/memlimit.txt" ] && cat "$OUT/memlimit.txt"; true
