#!/usr/bin/env bash
# `keysmith token get --fresh` on a token that needs no refresh, beside `token get`: whole
# process, medians, same run (Benchmarks/fresh/fresh.py), against the test authorization
# server. Builds keysmith as scripts/run.sh does. Not part of the test command.
#   scripts/bench-fresh.sh            (FRESH_RUNS=100 by default)
#   KEYSMITH=.build/debug/keysmith scripts/bench-fresh.sh   (an existing binary, no build)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${KEYSMITH:-}" ]; then
    scripts/bootstrap.sh
    swift build -c release --static-swift-stdlib --product keysmith >&2
    # keysmith runs keysmith-net, built beside it, for providers and git.
    swift build -c release --static-swift-stdlib --product keysmith-net >&2
    KEYSMITH=.build/release/keysmith
fi
work=$(mktemp -d)
trap 'kill "$(cat "$work/server.pid" 2>/dev/null)" 2>/dev/null || true; rm -rf "$work"' EXIT
export KEYSMITH_VAULT="$work/vault" KEYSMITH_ANCHOR_DIR="$work/anchors"
"$KEYSMITH" init --keyfile "$work/key" >/dev/null
export KEYSMITH_KEYFILE="$work/key"
scripts/with-oauth-server.sh sh -c '
    mkdir -p "$0/oauth"
    KEYSMITH_OAUTH_STATE="$0/oauth" "$KEYSMITH_TEST_OAUTH_PYTHON" "$KEYSMITH_TEST_OAUTH_SERVER" >/dev/null 2>&1 &
    echo $! > "$0/server.pid"
    for _ in $(seq 1 200); do [ -f "$0/oauth/server.json" ] && break; sleep 0.05; done
' "$work"
read -r url secret < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["url"], d["client_secret"])' "$work/oauth/server.json")
printf '%s\n' "$secret" > "$work/secret"
"$KEYSMITH" provider add bench --issuer "$url" --client-id ks-password --client-secret-fd 3 3<"$work/secret" >/dev/null
python3 - "$url" "$secret" <<'PY' | "$KEYSMITH" token import --service bench --account alice --requested "read write" >/dev/null
import base64, sys, urllib.parse, urllib.request
url, secret = sys.argv[1], sys.argv[2]
data = urllib.parse.urlencode({"grant_type": "password", "username": "alice", "password": "pw-alice", "scope": "read write"}).encode()
request = urllib.request.Request(url + "/token/", data=data, headers={"Authorization": "Basic " + base64.b64encode(("ks-password:" + secret).encode()).decode()})
print(urllib.request.urlopen(request).read().decode())
PY
python3 Benchmarks/fresh/fresh.py "$KEYSMITH" "${FRESH_RUNS:-100}"
