#!/usr/bin/env bash
# Makes the test authorization server runnable, then runs the command given:
#   scripts/with-oauth-server.sh swift test
# The server is django-oauth-toolkit 3.4.x from PyPI (with oauthlib<4: its device flow fails on
# 4.0.1), in a virtual environment under ${XDG_CACHE_HOME:-~/.cache}/keysmith. The tests start
# servers of their own from scripts/oauth_server/serve.py (each on 127.0.0.1, at a port the
# kernel picks, stopped by its PID); this script exports where the Python and the server are:
#   KEYSMITH_TEST_OAUTH_PYTHON   the virtual environment's python
#   KEYSMITH_TEST_OAUTH_SERVER   scripts/oauth_server/serve.py
# With no command, it starts one server in the foreground and prints its URL and clients.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/keysmith"
venv="$cache/oauth-venv"
requirements=("django-oauth-toolkit>=3.4,<3.5" "oauthlib<4" "django>=5.1,<5.3")

if ! "$venv/bin/python" -c 'import oauth2_provider, django' 2>/dev/null; then
    command -v python3 >/dev/null || { echo "keysmith: python3 is needed for the test authorization server (scripts/bootstrap.sh installs it)" >&2; exit 1; }
    mkdir -p "$cache"
    echo "keysmith: installing the test authorization server (django-oauth-toolkit) into $venv" >&2
    rm -rf "$venv"
    python3 -m venv "$venv" >&2 || { echo "keysmith: python3 -m venv failed: install python3-venv (scripts/bootstrap.sh does)" >&2; exit 1; }
    "$venv/bin/pip" install --quiet "${requirements[@]}" >&2 \
        || { echo "keysmith: could not install ${requirements[*]} from PyPI" >&2; exit 1; }
fi
export KEYSMITH_TEST_OAUTH_PYTHON="$venv/bin/python"
export KEYSMITH_TEST_OAUTH_SERVER="$root/scripts/oauth_server/serve.py"

if [ $# -eq 0 ]; then
    state=$(mktemp -d)
    trap 'rm -rf "$state"' EXIT
    KEYSMITH_OAUTH_STATE="$state" "$KEYSMITH_TEST_OAUTH_PYTHON" "$KEYSMITH_TEST_OAUTH_SERVER" &
    pid=$!
    for _ in $(seq 1 100); do [ -f "$state/server.json" ] && break; sleep 0.1; done
    cat "$state/server.json"; echo
    wait "$pid"
    exit
fi
exec "$@"
