#!/usr/bin/env bash
# `git-credential-keysmith get` (on the file vault and on the Secret Service) beside git's own
# `git-credential-libsecret get` (built from the git package's contrib source), whole process,
# medians of GIT_RUNS (100) interleaved runs, inside a private Secret Service session
# (Benchmarks/git/helpers.py). Builds keysmith as scripts/run.sh does. Not part of the test command.
#   scripts/bench-git-credential.sh
#   KEYSMITH=.build/release/keysmith scripts/bench-git-credential.sh   (an existing binary, no build)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${KEYSMITH:-}" ]; then
    scripts/bootstrap.sh
    swift build -c release --static-swift-stdlib --product keysmith >&2
    # keysmith runs keysmith-net, built beside it, for providers and git.
    swift build -c release --static-swift-stdlib --product keysmith-net >&2
    KEYSMITH=.build/release/keysmith
fi
KEYSMITH=$(cd "$(dirname "$KEYSMITH")" && pwd)/$(basename "$KEYSMITH")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source=/usr/share/doc/git/contrib/credential/libsecret/git-credential-libsecret.c
[ -f "$source" ] || { echo "keysmith: $source is missing (Debian's git package ships it)" >&2; exit 1; }
gcc -O2 -o "$work/git-credential-libsecret" "$source" $(pkg-config --cflags --libs libsecret-1 glib-2.0) >&2
ln -s "$KEYSMITH" "$work/git-credential-keysmith"
export KEYSMITH_VAULT="$work/vault" KEYSMITH_ANCHOR_DIR="$work/anchors"
"$KEYSMITH" init --keyfile "$work/key" >/dev/null
export KEYSMITH_KEYFILE="$work/key"
scripts/with-secret-service.sh bash -c '
    set -e
    cd "$0"
    credential="protocol=https\nhost=git.example.com\nusername=alice\npassword=bench-pw\n\n"
    printf "$credential" | ./git-credential-libsecret store >/dev/null  # it echoes the credential
    printf "$credential" | ./git-credential-keysmith store
    printf "$credential" | KEYSMITH_BACKEND=secret-service ./git-credential-keysmith store
    python3 "$1" "${GIT_RUNS:-100}" "keysmith (file vault)=$0/git-credential-keysmith" \
        "keysmith (Secret Service)=$0/git-credential-keysmith,KEYSMITH_BACKEND:secret-service" "git-credential-libsecret=$0/git-credential-libsecret"
' "$work" "$PWD/Benchmarks/git/helpers.py"
