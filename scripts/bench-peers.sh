#!/usr/bin/env bash
# Runs the peers (python keyring with keyrings.cryptfile, python keyring over the Secret Service,
# secret-tool, pass, cedarpy, casbin) beside Keysmith's own benchmarks, in one run on this machine, inside
# a private Secret Service session; prints a table with ratios and draws docs/benchmarks-peers.png.
# Not part of the test command: it takes several minutes.
#   scripts/bench-peers.sh            (PEERS_ITEMS=1000 PEERS_SS_ITEMS=300 PEERS_SAMPLE=200 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
if ! command -v pass >/dev/null || ! command -v gpg >/dev/null; then
    if [ "$(id -u)" -eq 0 ]; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pass gnupg >&2
    else
        echo "keysmith: the peer benchmarks need pass and gnupg: sudo apt-get install -y pass gnupg" >&2
        exit 1
    fi
fi
venv=${KEYSMITH_PEERS_VENV:-${TMPDIR:-/tmp}/keysmith-peers-venv}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q keyring keyrings.cryptfile cedarpy casbin matplotlib >&2
(cd Benchmarks && swift build -c release >&2)

out=$(mktemp -d "${TMPDIR:-/tmp}/keysmith-peers.XXXXXX")
trap 'rm -rf "$out"' EXIT
export PEERS_ITEMS=${PEERS_ITEMS:-1000} PEERS_SS_ITEMS=${PEERS_SS_ITEMS:-300} PEERS_SAMPLE=${PEERS_SAMPLE:-200}
scripts/with-secret-service.sh bash -c "
    '$venv/bin/python' Benchmarks/peers/peers.py > '$out/peers.json'
    Benchmarks/.build/release/SecretServiceBenchmarks --items \$PEERS_SS_ITEMS --sample \$PEERS_SAMPLE > '$out/secret-service.txt'
" 2> >(grep -v AccessDenied >&2)
Benchmarks/.build/release/VaultBenchmarks --items "$PEERS_ITEMS" > "$out/vault.txt"
Benchmarks/.build/release/PolicyBenchmarks > "$out/policy.txt"
echo "machine: $(nproc) cores, $(uname -sr), $(swift --version 2>&1 | head -1), $("$venv/bin/python" --version)"
"$venv/bin/pip" list 2>/dev/null | grep -iE "^(keyring|keyrings.cryptfile|cedarpy|casbin) " || true
"$venv/bin/python" Benchmarks/peers/report.py "$out/peers.json" "$out/vault.txt" "$out/secret-service.txt" "$out/policy.txt" docs/benchmarks-peers.png
echo; echo "raw figures:"; cat "$out/peers.json"
