#!/usr/bin/env bash
# README's main-job command: installs what is missing, builds the `keysmith` command and runs it.
# With no arguments it runs the walkthrough on a throwaway vault; any arguments go to keysmith.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/bootstrap.sh
swift build -c release --static-swift-stdlib --product keysmith >&2
swift build -c release --static-swift-stdlib --product keysmith-net >&2
if [ $# -eq 0 ]; then
    exec .build/release/keysmith walkthrough
fi
exec .build/release/keysmith "$@"
