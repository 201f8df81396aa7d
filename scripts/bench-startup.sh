#!/usr/bin/env bash
# Start-up of `keysmith secret get` beside `secret-tool lookup`, whole process, same run, inside a
# private Secret Service session (Benchmarks/startup/startup.py). Builds keysmith as scripts/run.sh
# does (release, static Swift standard library). Not part of the test command.
#   scripts/bench-startup.sh          (STARTUP_RUNS=100 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
swift build -c release --static-swift-stdlib --product keysmith >&2
scripts/with-secret-service.sh python3 Benchmarks/startup/startup.py .build/release/keysmith
