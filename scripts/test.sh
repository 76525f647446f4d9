#!/usr/bin/env bash
# The whole test suite: engine unit and integration tests (plain cargo test), the pgrx
# tests inside a real PostgreSQL 15 server, and the SQL regression suite with exact
# expected output. Servers run as the OS user `postgres`. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="${HOME:-/root}/.cargo/bin:$PATH"

echo "== engine tests (cargo test -p navis-engine)"
cargo test -p navis-engine --release

echo "== PostgreSQL tests (cargo pgrx test, server runs as postgres)"
PGDATA_BASE=/tmp/navis-pgrx-test
install -d -o postgres -g postgres "$PGDATA_BASE"
cargo pgrx test pg15 --runas postgres --pgdata "$PGDATA_BASE"

echo "== SQL regression tests (pg_test/sql vs pg_test/expected)"
bash pg_test/run_sql_tests.sh

echo "== cluster tests: several sessions at once, crash and restart (pg_test/run_cluster_tests.sh)"
bash pg_test/run_cluster_tests.sh
