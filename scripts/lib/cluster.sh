# Throwaway PostgreSQL 15 clusters for the demo and the SQL tests, run as the unprivileged
# OS user `postgres` (PostgreSQL refuses to run as root). Source this file, then:
#   cluster_start DIR PORT [postgresql.conf lines...]   (socket in DIR, no TCP;
#                                                        NAVIS_INITDB_OPTS adds initdb options)
#   cluster_psql DIR PORT [psql args...]
#   cluster_stop DIR
PGBIN=/usr/lib/postgresql/15/bin

cluster_stop() {
  local dir=$1
  if [ -f "$dir/data/postmaster.pid" ]; then
    runuser -u postgres -- "$PGBIN/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
  fi
}

cluster_start() {
  local dir=$1 port=$2
  shift 2
  cluster_stop "$dir"
  rm -rf "$dir"
  install -d -o postgres -g postgres "$dir"
  # shellcheck disable=SC2086 # NAVIS_INITDB_OPTS is a list of options
  runuser -u postgres -- "$PGBIN/initdb" -D "$dir/data" --locale=C.UTF-8 -A trust -U postgres \
    ${NAVIS_INITDB_OPTS:-} >/dev/null
  {
    echo "port = $port"
    echo "listen_addresses = ''"
    echo "unix_socket_directories = '$dir'"
    for line in "$@"; do echo "$line"; done
  } >>"$dir/data/postgresql.conf"
  # RUST_BACKTRACE in the caller's environment would make pgrx append Rust backtraces to
  # the DETAIL of every PostgreSQL error that crosses navis, so the server runs without it.
  if ! runuser -u postgres -- env -u RUST_BACKTRACE -u RUST_LIB_BACKTRACE \
      "$PGBIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w start >/dev/null; then
    echo "PostgreSQL failed to start; its log:" >&2
    cat "$dir/server.log" >&2
    return 1
  fi
}

cluster_psql() {
  local dir=$1 port=$2
  shift 2
  psql -X -q -h "$dir" -p "$port" -U postgres -d postgres "$@"
}

# A streaming hot standby of the cluster in PRIMARY_DIR (socket there, port PRIMARY_PORT), made
# from a base backup: standby_start PRIMARY_DIR PRIMARY_PORT DIR PORT [postgresql.conf lines...]
standby_start() {
  local pdir=$1 pport=$2 dir=$3 port=$4
  shift 4
  cluster_stop "$dir"
  rm -rf "$dir"
  install -d -o postgres -g postgres "$dir"
  runuser -u postgres -- "$PGBIN/pg_basebackup" -h "$pdir" -p "$pport" -U postgres -D "$dir/data" \
    -R -X stream -c fast >/dev/null
  {
    echo "port = $port"
    echo "unix_socket_directories = '$dir'"
    for line in "$@"; do echo "$line"; done
  } >>"$dir/data/postgresql.conf"
  if ! runuser -u postgres -- env -u RUST_BACKTRACE -u RUST_LIB_BACKTRACE \
      "$PGBIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w start >/dev/null; then
    echo "standby failed to start; its log:" >&2
    cat "$dir/server.log" >&2
    return 1
  fi
}

# Waits (up to $3 seconds, default 60) until the standby in DIR2 has replayed everything the
# primary in DIR1 had written when called: standby_catch_up PDIR PPORT SDIR SPORT [seconds]
standby_catch_up() {
  local pdir=$1 pport=$2 sdir=$3 sport=$4 limit=${5:-60}
  local target; target=$(cluster_psql "$pdir" "$pport" -At -c "SELECT pg_current_wal_lsn()")
  local i
  for ((i = 0; i < limit * 10; i++)); do
    if [ "$(cluster_psql "$sdir" "$sport" -At -c "SELECT pg_last_wal_replay_lsn() >= '$target'::pg_lsn" 2>/dev/null)" = t ]; then
      return 0
    fi
    sleep 0.1
  done
  echo "standby in $sdir did not replay up to $target within ${limit}s" >&2
  return 1
}
