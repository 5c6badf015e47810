#!/usr/bin/env bash
# Start a private PostgreSQL server on loopback for the test suite and print its URL.
# Usage: eval "$(bash scripts/test-postgres.sh)"  -> exports STATEFLOW_TEST_POSTGRES
# The test suite runs it by itself when STATEFLOW_TEST_POSTGRES is not set.
set -euo pipefail
port="${PGPORT_TEST:-55432}"
root="${PGROOT_TEST:-/tmp/stateflow-pg}"
bindir=""
for d in /usr/lib/postgresql/*/bin; do [ -x "$d/initdb" ] && bindir="$d"; done
if [ -z "$bindir" ]; then
  echo "postgres.sh: no PostgreSQL server binaries found (install Debian's postgresql)" >&2
  exit 1
fi
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
if ! as_pg "$bindir/pg_ctl" -D "$root/data" status >/dev/null 2>&1; then
  rm -rf "$root"; mkdir -p "$root"
  [ "$(id -u)" = 0 ] && chown postgres "$root"
  as_pg "$bindir/initdb" -D "$root/data" -U postgres -A trust --no-sync -E UTF8 >"$root/initdb.log" 2>&1 \
    || { cat "$root/initdb.log" >&2; exit 1; }
  as_pg "$bindir/pg_ctl" -D "$root/data" -l "$root/server.log" -w \
    -o "-h 127.0.0.1 -p $port -k $root -c fsync=on -c max_connections=200" start >/dev/null \
    || { cat "$root/server.log" >&2; exit 1; }
fi
echo "export STATEFLOW_TEST_POSTGRES=postgresql://postgres@127.0.0.1:$port/postgres"
