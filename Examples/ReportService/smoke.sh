#!/usr/bin/env bash
# The example service end to end, for the test command (scripts/test.sh): built, set up with two
# callers on a private PostgreSQL server, and asked as a client would: a right key is served, a
# wrong or missing one refused (401), and a scope revoked by a `keysmith-net` process is denied
# (403) while the caller's other scope still works. Run from the repository:
#   scripts/with-postgres.sh Examples/ReportService/smoke.sh [KEYSMITH_NET]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
: "${KEYSMITH_TEST_DATABASE_URL:?run under scripts/with-postgres.sh}"
net=${1:-$root/.build/debug/keysmith-net}
[ -x "$net" ] || { echo "smoke: no keysmith-net at $net (swift build first)" >&2; exit 1; }
(cd "$here" && swift build)
service=$here/.build/debug/ReportService
work=$(mktemp -d)
server=
trap 'if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi; rm -rf "$work"' EXIT
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/master.key"
export KEYSMITH_DATABASE_URL=$KEYSMITH_TEST_DATABASE_URL KEYSMITH_KEYFILE=$work/master.key KEYSMITH_NAMESPACE=smoke-$$
"$service" setup --clients 2 --out "$work/clients.json" >/dev/null
key() { python3 -c 'import json,sys; print(next(c["key"] for c in json.load(open(sys.argv[1])) if c["client"] == sys.argv[2]))' "$work/clients.json" "$1"; }
key0=$(key client-0) key1=$(key client-1)
port=$((20000 + $$ % 20000))
"$service" serve --port "$port" --connections 2 >/dev/null &
server=$!
# One request: METHOD URL [CLIENT KEY]; prints the status, then the body. The key goes through
# the environment, never on a command line.
request() {
    SMOKE_KEY=${4:-} python3 - "${@:1:3}" <<'PY'
import os, sys, urllib.request, urllib.error
method, url = sys.argv[1], sys.argv[2]
headers = {"X-Client": sys.argv[3], "Authorization": "Bearer " + os.environ["SMOKE_KEY"]} if len(sys.argv) > 3 else {}
try:
    with urllib.request.urlopen(urllib.request.Request(url, method=method, headers=headers, data=b"" if method == "PUT" else None), timeout=10) as answer:
        print(answer.status); print(answer.read().decode(), end="")
except urllib.error.HTTPError as error:
    print(error.code)
except OSError:
    print(0)
PY
}
status() { request "$@" | sed -n 1p; }
fail() { echo "smoke: $*" >&2; exit 1; }
ready=
for _ in $(seq 300); do
    kill -0 "$server" 2>/dev/null || fail "the service ended before it answered (port $port taken?)"
    [ "$(request GET "http://127.0.0.1:$port/health" | tail -1)" = current ] && { ready=1; break; }
    sleep 0.1
done
[ -n "$ready" ] || fail "the service was not current 30 s after it started"
url=http://127.0.0.1:$port/reports/42
[ "$(request GET "$url" client-0 "$key0")" = "200
report 42 for client-0" ] || fail "a right key was not served"
[ "$(status GET "$url" client-0 "$key1")" = 401 ] || fail "another caller's key was accepted"
[ "$(status GET "$url" client-9 "$key0")" = 401 ] || fail "an unknown caller was accepted"
[ "$(status GET "$url")" = 401 ] || fail "a request without a key was accepted"
[ "$(status GET "$url" "" "$key0")" = 401 ] || fail "an empty caller name was not refused as unknown"
[ "$(status PUT "$url" client-1 "$key1")" = 200 ] || fail "a write with reports:write was refused"
"$net" token revoke --backend postgres --service reports --account client-1 --reason smoke reports:write >/dev/null
denied=
deadline=$((SECONDS + 10))
while [ "$SECONDS" -lt "$deadline" ]; do
    [ "$(status PUT "$url" client-1 "$key1")" = 403 ] && { denied=1; break; }
    sleep 0.05
done
[ -n "$denied" ] || fail "a revoked scope was still allowed 10 s after the revocation"
[ "$(status GET "$url" client-1 "$key1")" = 200 ] || fail "the caller's other scope stopped working"
[ "$(status PUT "$url" client-0 "$key0")" = 200 ] || fail "another caller lost its scope"
# The denial was the revocation, not a moment of staleness: current now, and still denied.
[ "$(request GET "http://127.0.0.1:$port/health" | tail -1)" = current ] || fail "the service is not current"
[ "$(status PUT "$url" client-1 "$key1")" = 403 ] || fail "the revoked scope is allowed again"
echo "smoke: the example service served, refused and followed a revocation as it should"
