#!/usr/bin/env bash
# SQL regression suite: runs each pg_test/sql/NAME.sql with psql (echoing statements) in a
# fresh database of a throwaway cluster and compares the output with
# pg_test/expected/NAME.out. A first line `-- navis-test: no-preload` runs the file on a
# cluster WITHOUT shared_preload_libraries = 'navis'. A first line
# `-- navis-test: requires-extension NAME` skips the file (saying so) when the extension NAME
# is not installed in this PostgreSQL (e.g. pgvector, which CI machines do not have).
#   bash pg_test/run_sql_tests.sh            # run all, fail on any difference
#   UPDATE_EXPECTED=1 bash pg_test/run_sql_tests.sh   # rewrite expected files (review the diff!)
# Installs the debug build of navis into the system PostgreSQL 15 first. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/cluster.sh
export PATH="${HOME:-/root}/.cargo/bin:$PATH"

cargo pgrx install --pg-config "$PGBIN/pg_config" >/dev/null
# The previous release's install script, which upgrade.sql starts from (pgrx installs only the
# current version's script and the upgrade scripts).
cp sql/navis--0.1.0.sql "$("$PGBIN/pg_config" --sharedir)/extension/"

BASE=/tmp/navis-sqltest
PORT=54330
results=$BASE-results
rm -rf "$results"; mkdir -p "$results"
failed=0

run_group() {  # $1 = preload|no-preload, rest = sql files
  local mode=$1; shift
  [ $# -gt 0 ] || return 0
  local dir=$BASE-$mode
  if [ "$mode" = preload ]; then
    cluster_start "$dir" "$PORT" "shared_preload_libraries = 'navis'" "navis.result_cache_size = '16MB'"
  else
    cluster_start "$dir" "$PORT"
  fi
  for f in "$@"; do
    local name; name=$(basename "$f" .sql)
    cluster_psql "$dir" "$PORT" -c "CREATE DATABASE \"t_$name\""
    psql -X -a -q -h "$dir" -p "$PORT" -U postgres -d "t_$name" -v VERBOSITY=default \
      -f - <"$f" >"$results/$name.out" 2>&1 || true
    if [ "${UPDATE_EXPECTED:-0}" = 1 ]; then
      cp "$results/$name.out" "pg_test/expected/$name.out"
      echo "updated  $name"
    elif diff -u "pg_test/expected/$name.out" "$results/$name.out" >"$results/$name.diff"; then
      echo "ok       $name"
    else
      echo "FAILED   $name (diff below, full output in $results/$name.out)"
      cat "$results/$name.diff"
      failed=1
    fi
  done
  cluster_stop "$dir"
}

preload=(); no_preload=(); skipped=0
EXTDIR=${NAVIS_TEST_EXTENSION_DIR:-$("$PGBIN/pg_config" --sharedir)/extension}  # override to test skipping
for f in pg_test/sql/*.sql; do
  ext=$(head -n 1 "$f" | sed -n 's/^-- navis-test: requires-extension \([A-Za-z0-9_]*\).*/\1/p')
  if [ -n "$ext" ] && [ ! -f "$EXTDIR/$ext.control" ]; then
    echo "skipped  $(basename "$f" .sql) (extension \"$ext\" is not installed)"
    skipped=$((skipped + 1))
    continue
  fi
  if head -n 1 "$f" | grep -q 'navis-test: no-preload'; then no_preload+=("$f"); else preload+=("$f"); fi
done
run_group preload "${preload[@]}"
run_group no-preload "${no_preload[@]}"
if [ "$failed" != 0 ]; then
  echo "SQL regression tests FAILED"
  exit 1
fi
echo "SQL regression tests passed: $(( ${#preload[@]} + ${#no_preload[@]} )) files, $skipped skipped"
