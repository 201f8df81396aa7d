#!/usr/bin/env bash
# README's main-job command: installs what is missing, builds the `keysmith` command and runs it.
# With no arguments it runs the walkthrough on a throwaway vault, which needs only the lean
# `keysmith` (so only that is built first: `keysmith-net`, with SwiftNIO, BoringSSL and the HTTP
# client, takes about twice as long to build). Any arguments go to keysmith; then `keysmith-net`
# is built too, since a PostgreSQL or provider command is handed to it.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/bootstrap.sh
swift build -c release --static-swift-stdlib --product keysmith >&2
if [ $# -eq 0 ]; then
    exec .build/release/keysmith walkthrough
fi
swift build -c release --static-swift-stdlib --product keysmith-net >&2
exec .build/release/keysmith "$@"
