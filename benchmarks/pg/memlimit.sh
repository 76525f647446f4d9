#!/usr/bin/env bash
# Memory regime (b) for the issue-7 benchmarks: a PostgreSQL server inside a cgroup v1 memory
# group, so that table, index and page cache together cannot exceed a limit. Run as root.
#
#   memlimit.sh create NAME LIMIT          make group navis-bench-NAME with memory.limit_in_bytes LIMIT
#                                          (bytes, or with a K/M/G suffix); idempotent, resets max_usage
#   memlimit.sh limit NAME LIMIT           change the limit of an existing group
#   memlimit.sh attach NAME PID            move PID (e.g. the postmaster) into the group; processes it
#                                          forks later (backends, workers) are born in the group
#   memlimit.sh attach-cluster NAME PGDATA the postmaster of PGDATA (first line of postmaster.pid)
#   memlimit.sh run NAME CMD [ARGS...]     run CMD inside the group from its first instruction (e.g.
#                                          pg_ctl start, so shared memory is charged to the group too)
#   memlimit.sh report NAME [--json]       limit, usage, max usage, failcnt, and from memory.stat the
#                                          cache, rss, shmem, mapped_file (bytes), processes in the group
#   memlimit.sh remove NAME                move any processes left back to where attach found them
#                                          (else to the parent group) and remove the group
#   memlimit.sh drop_caches                sync; echo 3 > /proc/sys/vm/drop_caches (whole machine)
#
# Or `source memlimit.sh` and call memlimit_create, memlimit_attach, memlimit_attach_cluster,
# memlimit_run, memlimit_report, memlimit_remove, drop_caches.
#
# Charges: the group is created with memory.move_charge_at_immigrate = 3, so the anonymous and
# file pages (shared memory included) that a process has mapped move with it when it is attached.
# Pages charged before (page cache read by other processes) stay where they were: drop_caches before
# a cold run. When the group is at its limit the kernel reclaims page cache from the group first;
# if anonymous memory plus shared memory alone exceed it, the group's OOM killer fires, so keep the
# limit above shared_buffers + work memory of all backends.
#
# Environment: CGROUP_MEMORY (the v1 memory hierarchy, /sys/fs/cgroup/memory), MEMLIMIT_STATE
# (where attach records a process's previous group, /tmp/navis-bench-cgroups).
CGROUP_MEMORY=${CGROUP_MEMORY:-/sys/fs/cgroup/memory}
MEMLIMIT_STATE=${MEMLIMIT_STATE:-/tmp/navis-bench-cgroups}

memlimit_dir() { echo "$CGROUP_MEMORY/navis-bench-$1"; }

memlimit_bytes() {  # 512M, 2G, 1048576 -> bytes
  numfmt --from=iec "${1^^}" 2>/dev/null || { echo "bad size: $1" >&2; return 1; }
}

memlimit_create() {
  local name=$1 limit bytes dir
  [ -n "$name" ] && [ -n "${2:-}" ] || { echo "usage: memlimit_create NAME LIMIT" >&2; return 2; }
  bytes=$(memlimit_bytes "$2") || return 1
  [ -w "$CGROUP_MEMORY/cgroup.procs" ] || {
    echo "no writable cgroup v1 memory hierarchy at $CGROUP_MEMORY (root needed)" >&2; return 1; }
  dir=$(memlimit_dir "$name")
  mkdir -p "$dir"
  echo 3 >"$dir/memory.move_charge_at_immigrate" 2>/dev/null || true
  echo "$bytes" >"$dir/memory.limit_in_bytes" || return 1
  echo 0 >"$dir/memory.max_usage_in_bytes" 2>/dev/null || true   # resets the peak
  echo 0 >"$dir/memory.failcnt" 2>/dev/null || true
  limit=$(cat "$dir/memory.limit_in_bytes")
  echo "cgroup $dir: memory.limit_in_bytes = $limit ($((limit / 1048576)) MiB)" >&2
}

memlimit_limit() {
  local dir bytes
  dir=$(memlimit_dir "$1"); bytes=$(memlimit_bytes "$2") || return 1
  [ -d "$dir" ] || { echo "no group $dir" >&2; return 1; }
  echo "$bytes" >"$dir/memory.limit_in_bytes"
}

memlimit_attach() {
  local name=$1 pid=$2 dir prev
  dir=$(memlimit_dir "$name")
  [ -d "$dir" ] || { echo "no group $dir (memlimit_create first)" >&2; return 1; }
  [ -d "/proc/$pid" ] || { echo "no process $pid" >&2; return 1; }
  prev=$(awk -F: '$2 == "memory" {print $3}' "/proc/$pid/cgroup")
  mkdir -p "$MEMLIMIT_STATE"
  if [ "$prev" != "/navis-bench-$name" ]; then echo "$pid $prev" >>"$MEMLIMIT_STATE/$name"; fi
  echo "$pid" >"$dir/cgroup.procs"
  echo "process $pid ($(cat "/proc/$pid/comm")) moved from memory:$prev to $dir" >&2
}

memlimit_attach_cluster() {
  local pgdata=$2 pid
  pid=$(head -1 "$pgdata/postmaster.pid" 2>/dev/null) || { echo "no $pgdata/postmaster.pid" >&2; return 1; }
  memlimit_attach "$1" "$pid"
}

memlimit_run() {
  local name=$1 dir
  shift
  dir=$(memlimit_dir "$name")
  [ -d "$dir" ] || { echo "no group $dir (memlimit_create first)" >&2; return 1; }
  # a subshell moves itself into the group, then becomes CMD
  ( echo "$BASHPID" >"$dir/cgroup.procs" && exec "$@" )
}

memlimit_stat() {  # memlimit_stat NAME KEY -> value from memory.stat
  awk -v k="$2" '$1 == k {print $2}' "$(memlimit_dir "$1")/memory.stat"
}

memlimit_report() {
  local name=$1 dir f
  dir=$(memlimit_dir "$name")
  [ -d "$dir" ] || { echo "no group $dir" >&2; return 1; }
  local limit usage max fail procs
  limit=$(cat "$dir/memory.limit_in_bytes"); usage=$(cat "$dir/memory.usage_in_bytes")
  max=$(cat "$dir/memory.max_usage_in_bytes"); fail=$(cat "$dir/memory.failcnt")
  procs=$(wc -l <"$dir/cgroup.procs")
  local cache rss shmem mapped
  cache=$(memlimit_stat "$name" cache); rss=$(memlimit_stat "$name" rss)
  shmem=$(memlimit_stat "$name" shmem); mapped=$(memlimit_stat "$name" mapped_file)
  if [ "${2:-}" = --json ]; then
    printf '{"group": "%s", "limit_bytes": %s, "usage_bytes": %s, "max_usage_bytes": %s, "failcnt": %s, "cache_bytes": %s, "rss_bytes": %s, "shmem_bytes": %s, "mapped_file_bytes": %s, "processes": %s}\n' \
      "$dir" "$limit" "$usage" "$max" "$fail" "${cache:-0}" "${rss:-0}" "${shmem:-0}" "${mapped:-0}" "$procs"
  else
    f() { echo "$(($1 / 1048576)) MiB"; }
    echo "$dir: limit $(f "$limit"), usage $(f "$usage"), max usage $(f "$max"), failcnt $fail;" \
      "cache $(f "${cache:-0}") (shmem $(f "${shmem:-0}")), rss $(f "${rss:-0}"), mapped_file $(f "${mapped:-0}"); $procs processes"
  fi
}

memlimit_remove() {
  local name=$1 dir pid prev target
  dir=$(memlimit_dir "$name")
  [ -d "$dir" ] || { rm -f "$MEMLIMIT_STATE/$name"; return 0; }
  while read -r pid; do
    [ -n "$pid" ] || continue
    prev=$(awk -v p="$pid" '$1 == p {print $2}' "$MEMLIMIT_STATE/$name" 2>/dev/null | tail -1)
    target=$CGROUP_MEMORY${prev:-}
    [ -n "$prev" ] && [ -d "$target" ] || target=$(dirname "$dir")
    echo "$pid" >"$target/cgroup.procs" 2>/dev/null || true
  done <"$dir/cgroup.procs"
  rmdir "$dir" && rm -f "$MEMLIMIT_STATE/$name"
}

drop_caches() {
  sync
  echo 3 >/proc/sys/vm/drop_caches
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  cmd=${1:-}
  shift || true
  case "$cmd" in
    create) memlimit_create "$@" ;;
    limit) memlimit_limit "$@" ;;
    attach) memlimit_attach "$@" ;;
    attach-cluster) memlimit_attach_cluster "$@" ;;
    run) memlimit_run "$@" ;;
    report) memlimit_report "$@" ;;
    remove) memlimit_remove "$@" ;;
    drop_caches|drop-caches) drop_caches ;;
    *) sed -n '2,20p' "$0" >&2; exit 2 ;;
  esac
fi
