# Cluster test of pg_upgrade, sourced by run_cluster_tests.sh. This build supports
# PostgreSQL 15 only, so it upgrades 15 to 15, as PostgreSQL's own pg_upgrade test does by
# default: the new cluster gets the old relation files (hard links here, what large clusters
# use) under the catalog pg_upgrade restores, and a navis index must read them as they are.

UDIR=/tmp/navis-clustertest-upgrade
UOLD_PORT=54351
UNEW_PORT=54352

# The top-10 ids of 20 queries (CASR off, so the answer is deterministic) on table $3 of the
# server in $1/$2.
upgrade_answers() {
  cluster_psql "$1" "$2" -At -v ON_ERROR_STOP=1 -c "SET navis.casr = off; SET navis.beam_width = 4; SET enable_seqscan = off;
    SELECT string_agg(n.id::text, ',' ORDER BY q.i, n.rn) FROM
      (SELECT i, (SELECT array_agg(cos(i * (0.017 + k * 0.0053) + k)::real ORDER BY k)
                  FROM generate_series(0, $4 - 1) k) AS v FROM generate_series(1, 20) i) q
      CROSS JOIN LATERAL (SELECT id, row_number() OVER () AS rn FROM
                          (SELECT id FROM $3 ORDER BY v <-> q.v LIMIT 10) s) n" 2>&1 | tail -1
}

upgrade_verify() {
  cluster_psql "$1" "$2" -At -c "SELECT string_agg(i || ':' || vertices || '|' || deleted || '|' || problems || '|' || unreachable
      || '|' || dangling_edges, ',' ORDER BY i) FROM (
        SELECT 'ug' i, (navis_verify('ug_v')).* UNION ALL SELECT 'u3', (navis_verify('u3_v')).*
        UNION ALL SELECT 'u0', (navis_verify('u0_v')).*) v" 2>&1
}

# An index built, grown by inserts, consolidated by VACUUM after deletes; one over 3-d
# duplicates; one over an empty table. After pg_upgrade --link the new cluster answers every
# query as the old one did, navis_verify reports the same graph, inserts (the empty table's
# first rows too) are found, and VACUUM and REINDEX work.
test_pg_upgrade() {
  local old=$UDIR/old new=$UDIR/new
  cluster_stop "$old"; cluster_stop "$new"; rm -rf "$UDIR"; install -d -o postgres -g postgres "$UDIR"
  cluster_start "$old" "$UOLD_PORT" "shared_preload_libraries = 'navis'" || { fail pg_upgrade "old cluster did not start"; return; }
  local o=(cluster_psql "$old" "$UOLD_PORT" -v ON_ERROR_STOP=1 -At)
  "${o[@]}" -c "CREATE EXTENSION navis" \
    -c "CREATE TABLE ug (id int, v real[])" -c "CREATE TABLE u3 (id int, v real[])" -c "CREATE TABLE u0 (id int, v real[])" \
    -c "INSERT INTO ug SELECT i, (SELECT array_agg(sin(i * (0.013 + k * 0.0071) + k * 0.9)::real ORDER BY k)
          FROM generate_series(0, 31) k) FROM generate_series(1, 3000) i" \
    -c "INSERT INTO u3 SELECT i, ARRAY[(i % 7)::real, ((i / 7) % 5)::real, 1] FROM generate_series(1, 500) i" \
    -c "CREATE INDEX ug_v ON ug USING navis (v)" -c "CREATE INDEX u3_v ON u3 USING navis (v)" \
    -c "CREATE INDEX u0_v ON u0 USING navis (v)" \
    -c "INSERT INTO ug SELECT i, (SELECT array_agg(sin(i * (0.013 + k * 0.0071) + k * 0.9)::real ORDER BY k)
          FROM generate_series(0, 31) k) FROM generate_series(3001, 3600) i" \
    -c "DELETE FROM ug WHERE id % 5 = 0" -c "VACUUM ug" >/dev/null ||
    { fail pg_upgrade "setting up the old cluster failed"; cluster_stop "$old"; return; }
  local before_ug before_u3 before_verify
  before_ug=$(upgrade_answers "$old" "$UOLD_PORT" ug 32)
  before_u3=$(upgrade_answers "$old" "$UOLD_PORT" u3 3)
  before_verify=$(upgrade_verify "$old" "$UOLD_PORT")
  cluster_stop "$old"
  install -d -o postgres -g postgres "$new"
  runuser -u postgres -- "$PGBIN/initdb" -D "$new/data" --locale=C.UTF-8 -A trust -U postgres >/dev/null
  {
    echo "port = $UNEW_PORT"
    echo "listen_addresses = ''"
    echo "unix_socket_directories = '$new'"
    echo "shared_preload_libraries = 'navis'"
  } >>"$new/data/postgresql.conf"
  (cd "$UDIR" && runuser -u postgres -- env -u RUST_BACKTRACE "$PGBIN/pg_upgrade" --link -U postgres \
    -b "$PGBIN" -B "$PGBIN" -d "$old/data" -D "$new/data" -p "$UOLD_PORT" -P "$UNEW_PORT" \
    --socketdir "$UDIR" >"$UDIR/pg_upgrade.out" 2>&1) ||
    { fail pg_upgrade "pg_upgrade failed: $(tail -15 "$UDIR/pg_upgrade.out")"; return; }
  runuser -u postgres -- env -u RUST_BACKTRACE "$PGBIN/pg_ctl" -D "$new/data" -l "$new/server.log" -w start >/dev/null ||
    { fail pg_upgrade "the upgraded cluster did not start: $(tail -5 "$new/server.log")"; return; }
  local n=(cluster_psql "$new" "$UNEW_PORT" -v ON_ERROR_STOP=1 -At)
  local after_ug after_u3 after_verify
  after_ug=$(upgrade_answers "$new" "$UNEW_PORT" ug 32)
  after_u3=$(upgrade_answers "$new" "$UNEW_PORT" u3 3)
  after_verify=$(upgrade_verify "$new" "$UNEW_PORT")
  [ -n "$before_ug" ] && [ "$after_ug" = "$before_ug" ] && [ -n "$before_u3" ] && [ "$after_u3" = "$before_u3" ] ||
    { fail pg_upgrade "answers changed: ug '${before_ug:0:60}' -> '${after_ug:0:160}', u3 '${before_u3:0:60}' -> '${after_u3:0:160}'"; cluster_stop "$new"; return; }
  [[ "$before_verify" =~ ^u0:0\|0\|0\|0\|0,u3:500\|0\|0\|0\|0,ug:[0-9]+\|[0-9]+\|0\|0\|0$ ]] && [ "$after_verify" = "$before_verify" ] ||
    { fail pg_upgrade "navis_verify before '$before_verify', after '$after_verify'"; cluster_stop "$new"; return; }
  # The upgraded indexes take writes: the empty table's first rows and new rows of ug are
  # found by their own vectors; VACUUM and REINDEX work on the upgraded files.
  "${n[@]}" -c "INSERT INTO u0 SELECT i, ARRAY[i, i * 0.5, 1]::real[] FROM generate_series(1, 50) i" \
    -c "INSERT INTO ug SELECT i, (SELECT array_agg(sin(i * (0.013 + k * 0.0071) + k * 0.9)::real ORDER BY k)
          FROM generate_series(0, 31) k) FROM generate_series(3601, 3800) i" >/dev/null
  local self="SET enable_seqscan = off; SELECT count(*) FROM %s o WHERE o.id <> (SELECT id FROM %s ORDER BY v <-> o.v LIMIT 1)"
  local missing_u0 missing_ug
  # shellcheck disable=SC2059 # the query is the format
  missing_u0=$("${n[@]}" -c "$(printf "$self" u0 u0)" | tail -1)
  # shellcheck disable=SC2059
  missing_ug=$("${n[@]}" -c "$(printf "$self AND o.id > 3600" ug ug)" | tail -1)
  "${n[@]}" -c "DELETE FROM ug WHERE id % 7 = 0" -c "VACUUM ug" -c "REINDEX INDEX u3_v" >/dev/null ||
    { fail pg_upgrade "VACUUM or REINDEX on the upgraded cluster failed"; cluster_stop "$new"; return; }
  local final; final=$(upgrade_verify "$new" "$UNEW_PORT")
  cluster_stop "$new"
  [ "$missing_u0" = 0 ] && [ "$missing_ug" = 0 ] ||
    { fail pg_upgrade "rows inserted after the upgrade not found by their own vector: u0 $missing_u0 of 50, ug $missing_ug of 200"; return; }
  [[ "$final" =~ ^u0:50\|0\|0\|0\|0,u3:500\|0\|0\|0\|0,ug:[0-9]+\|[0-9]+\|0\|0\|0$ ]] ||
    { fail pg_upgrade "navis_verify after inserts, VACUUM and REINDEX on the upgraded cluster: $final"; return; }
  echo "ok       pg_upgrade (15 to 15, --link: top-10 of 20 queries on a grown and VACUUMed index and on 3-d duplicates as before; navis_verify $after_verify as before; 50 rows into the formerly empty index and 200 into the grown one all found; VACUUM and REINDEX after: $final)"
}
