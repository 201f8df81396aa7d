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
keyring_pid=
cleanup() {
    if [ -n "$keyring_pid" ]; then kill "$keyring_pid" 2>/dev/null || true; fi
    rm -rf "$keyring_home"
}
trap cleanup EXIT
export XDG_DATA_HOME="$keyring_home/data" XDG_CONFIG_HOME="$keyring_home/config" XDG_RUNTIME_DIR="$keyring_home/run"
mkdir -p "$XDG_DATA_HOME" "$XDG_CONFIG_HOME" "$XDG_RUNTIME_DIR"
chmod 700 "$XDG_RUNTIME_DIR"
original_home=$HOME
export HOME="$keyring_home"

# The daemon reads the unlock password on stdin; it stays in the foreground so we know its pid.
printf 'keysmith-test' | gnome-keyring-daemon --foreground --unlock --components=secrets >"$keyring_home/daemon.log" 2>&1 &
keyring_pid=$!
# Wait (up to 10 s) until it owns org.freedesktop.secrets on the bus.
for _ in $(seq 1 100); do
    if dbus-send --session --print-reply --dest=org.freedesktop.DBus /org/freedesktop/DBus \
        org.freedesktop.DBus.NameHasOwner string:org.freedesktop.secrets 2>/dev/null | grep -q 'boolean true'; then
        break
    fi
    sleep 0.1
done
export KEYSMITH_TEST_SECRET_SERVICE=1

# The Swift toolchain and its caches stay where they were.
export HOME="$original_home"
"$@"
