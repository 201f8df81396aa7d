#!/usr/bin/env bash
# Runs a command beside a private PostgreSQL server: `initdb` into a temporary directory,
# `pg_ctl start` listening only on a Unix socket in that directory, stopped by its PID at the
# end. The command sees KEYSMITH_TEST_DATABASE_URL. Nothing touches a system cluster.
#   scripts/with-postgres.sh swift test
set -euo pipefail

bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
    echo "keysmith: PostgreSQL's server programs are missing; run scripts/bootstrap.sh (Debian package postgresql)" >&2
    exit 1
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/keysmith-postgres.XXXXXX")
chmod 755 "$dir"
# initdb and the server refuse to run as root: run them as the postgres user when we are root.
as_owner=()
if [ "$(id -u)" -eq 0 ]; then
    chown postgres: "$dir"
    as_owner=(runuser -u postgres --)
fi
pid=
cleanup() {
    if [ -n "$pid" ]; then
        kill -INT "$pid" 2>/dev/null || true
        for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -rf "$dir"
}
trap cleanup EXIT

"${as_owner[@]}" "$bin/initdb" -D "$dir/data" -U keysmith --auth=trust -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; exit 1; }
"${as_owner[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 \
    -o "-c listen_addresses='' -c unix_socket_directories='$dir' -c max_connections=200 -c fsync=on" start >/dev/null \
    || { cat "$dir/server.log" >&2; exit 1; }
pid=$(head -1 "$dir/data/postmaster.pid")
"$bin/createdb" -h "$dir" -U keysmith keysmith
export KEYSMITH_TEST_DATABASE_URL="postgresql://keysmith@/keysmith?host=$dir"
export KEYSMITH_TEST_POSTGRES_BIN="$bin" KEYSMITH_TEST_POSTGRES_DATA="$dir/data"
"$@"
