#!/usr/bin/env bash
# README's test command: installs what is missing, builds, and runs every test, the Secret
# Service tests against a private gnome-keyring-daemon and the PostgreSQL store's against a
# private PostgreSQL server.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/bootstrap.sh
swift build --build-tests
scripts/with-postgres.sh scripts/with-secret-service.sh swift test --skip-build "$@"
