#!/usr/bin/env bash
# The example under load, against a private PostgreSQL server: 64 clients for SECONDS (20), a
# revocation of client-0's reports:read by a `keysmith` process halfway. Run from the repository:
#   scripts/with-postgres.sh Examples/ReportService/load.sh
# (builds the service and keysmith-net in release first).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
: "${KEYSMITH_TEST_DATABASE_URL:?run under scripts/with-postgres.sh}"
(cd "$here" && swift build -c release >/dev/null)
(cd "$root" && swift build -c release --product keysmith-net >/dev/null)
work=$(mktemp -d)
server=
trap 'if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi; rm -rf "$work"' EXIT
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/master.key"
export KEYSMITH_DATABASE_URL=$KEYSMITH_TEST_DATABASE_URL KEYSMITH_KEYFILE=$work/master.key KEYSMITH_NAMESPACE=report-$$
"$here/.build/release/ReportService" setup --clients 64 --out "$work/clients.json"
port=$((20000 + $$ % 20000))
"$here/.build/release/ReportService" serve --port "$port" --connections "${CONNECTIONS:-16}" &
server=$!
ready=
for _ in $(seq 300); do
    kill -0 "$server" 2>/dev/null || { echo "load: the service ended before it answered" >&2; exit 1; }
    python3 -c 'import sys, urllib.request; sys.exit(urllib.request.urlopen(sys.argv[1], timeout=5).read() != b"current\n")' \
        "http://127.0.0.1:$port/health" 2>/dev/null && { ready=1; break; }
    sleep 0.1
done
[ -n "$ready" ] || { echo "load: the service was not current 30 s after it started" >&2; exit 1; }
python3 "$here/load.py" --port "$port" --clients "$work/clients.json" --seconds "${SECONDS_RUN:-20}" -- \
    "$root/.build/release/keysmith-net" token revoke --backend postgres --service reports --account client-0 --reason load-test reports:read
