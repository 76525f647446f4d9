# Throwaway PostgreSQL 15 clusters for the demo and the SQL tests, run as the unprivileged
# OS user `postgres` (PostgreSQL refuses to run as root). Source this file, then:
#   cluster_start DIR PORT [postgresql.conf lines...]   (socket in DIR, no TCP)
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
  runuser -u postgres -- "$PGBIN/initdb" -D "$dir/data" --locale=C.UTF-8 -A trust -U postgres >/dev/null
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
