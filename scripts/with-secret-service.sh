#!/usr/bin/env bash
# Runs a command with a private, unlocked Secret Service: a new D-Bus session bus, a HOME in a
# temporary directory and gnome-keyring-daemon unlocked with a test password. Nothing touches
# the user's real keyring.
#   scripts/with-secret-service.sh swift test
set -euo pipefail

if [ -z "${KEYSMITH_INSIDE_DBUS_SESSION:-}" ]; then
    export KEYSMITH_INSIDE_DBUS_SESSION=1
    exec dbus-run-session -- "$0" "$@"
fi

keyring_home=$(mktemp -d "${TMPDIR:-/tmp}/keysmith-keyring.XXXXXX")
trap 'kill "${keyring_pid:-0}" 2>/dev/null || true; rm -rf "$keyring_home"' EXIT
export XDG_DATA_HOME="$keyring_home/data" XDG_CONFIG_HOME="$keyring_home/config" XDG_RUNTIME_DIR="$keyring_home/run"
mkdir -p "$XDG_DATA_HOME" "$XDG_CONFIG_HOME" "$XDG_RUNTIME_DIR"
chmod 700 "$XDG_RUNTIME_DIR"
original_home=$HOME
export HOME="$keyring_home"

# The daemon reads the unlock password on stdin and prints its environment.
eval "$(printf 'keysmith-test' | gnome-keyring-daemon --unlock --components=secrets --daemonize 2>/dev/null)"
keyring_pid=${GNOME_KEYRING_PID:-}
export KEYSMITH_TEST_SECRET_SERVICE=1

# The Swift toolchain and its caches stay where they were.
export HOME="$original_home"
"$@"
