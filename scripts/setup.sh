#!/usr/bin/env bash
# Installs everything navis needs to build, test and demo, on Debian 12 as root.
# Idempotent and fast when already done: each step checks before it acts.
#   - PostgreSQL 15 server + headers, libclang/clang (bindgen), sudo (pgrx runs the test
#     server as the unprivileged user `postgres` through `sudo -u`), Fashion-MNIST (demo);
#   - cargo-pgrx at exactly the version pinned in Cargo.toml (~15 min the first time);
#   - `cargo pgrx init` against Debian's pg_config (never downloads PostgreSQL).
set -euo pipefail
PGRX_VERSION=0.18.1   # must equal the pgrx / pgrx-tests versions pinned in Cargo.toml
PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
export HOME="${HOME:-/root}"
export PATH="$HOME/.cargo/bin:$PATH"

if [ "$(id -u)" != 0 ]; then
  echo "setup.sh: run as root (it installs Debian packages and into PostgreSQL's directories)" >&2
  exit 1
fi

packages="postgresql-15 postgresql-server-dev-15 libclang-dev clang pkg-config sudo dataset-fashion-mnist"
missing=""
for p in $packages; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "setup.sh: installing$missing"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing </dev/null
fi

if [ "$(cargo pgrx --version 2>/dev/null || true)" != "cargo-pgrx $PGRX_VERSION" ]; then
  echo "setup.sh: installing cargo-pgrx $PGRX_VERSION (about 15 minutes on 2 cores)"
  cargo install cargo-pgrx --version "=$PGRX_VERSION" --locked
fi

# Only when missing: pgrx-pg-sys's build script reruns whenever this file changes, so
# rewriting it every time would force a bindgen + pgrx rebuild.
if ! grep -qsx "pg15 = \"$PG_CONFIG\"" "${PGRX_HOME:-$HOME/.pgrx}/config.toml"; then
  cargo pgrx init --pg15 "$PG_CONFIG"
fi
