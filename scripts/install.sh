#!/usr/bin/env bash
# Installs keysmith like a system tool, under PREFIX (default /usr/local as root, else ~/.local):
#   PREFIX/bin/keysmith                                  the stripped release binary (lean: no SwiftNIO, TLS or Foundation)
#   PREFIX/libexec/keysmith/keysmith-net                 the same command with PostgreSQL and providers, which
#                                                        keysmith runs for the commands that need them
#   PREFIX/bin/git-credential-keysmith                   a link to keysmith (git's credential helper)
#   PREFIX/share/man/man1/keysmith*.1                    a man page per command
#   PREFIX/share/bash-completion/completions/keysmith    bash completion
#   PREFIX/share/zsh/site-functions/_keysmith            zsh completion
#   PREFIX/share/fish/vendor_completions.d/keysmith.fish fish completion
#   PREFIX/share/keysmith/install-manifest               what was installed (for --uninstall)
#
#   scripts/install.sh [PREFIX]                builds (as scripts/run.sh does) and installs
#   scripts/install.sh --uninstall [PREFIX]    removes what the manifest lists, and the manifest
#   KEYSMITH=path/to/keysmith scripts/install.sh PREFIX   installs that binary and the keysmith-net beside it, no build
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
uninstall=false
if [ "${1:-}" = "--uninstall" ]; then uninstall=true; shift; fi
if [ $# -gt 1 ]; then echo "usage: scripts/install.sh [--uninstall] [PREFIX]" >&2; exit 64; fi
if [ $# -eq 1 ]; then prefix=$1; elif [ "$(id -u)" -eq 0 ]; then prefix=/usr/local; else prefix=$HOME/.local; fi
case "$prefix" in /*) ;; *) prefix=$(pwd)/$prefix ;; esac
manifest="$prefix/share/keysmith/install-manifest"

if $uninstall; then
    [ -f "$manifest" ] || { echo "keysmith: nothing to uninstall: $manifest is missing" >&2; exit 2; }
    while IFS= read -r path; do
        case "$path" in "$prefix"/*) rm -f -- "$path" ;; *) echo "keysmith: skipping $path (outside $prefix)" >&2 ;; esac
    done < "$manifest"
    rm -f -- "$manifest"
    rmdir -- "$prefix/share/keysmith" "$prefix/libexec/keysmith" 2>/dev/null || true
    echo "keysmith: uninstalled from $prefix"
    exit 0
fi

if [ -z "${KEYSMITH:-}" ]; then
    "$root/scripts/bootstrap.sh"
    (cd "$root" && swift build -c release --static-swift-stdlib --product keysmith >&2 \
        && swift build -c release --static-swift-stdlib --product keysmith-net >&2)
    KEYSMITH="$root/.build/release/keysmith"
fi
[ -x "$KEYSMITH" ] || { echo "keysmith: no binary at $KEYSMITH" >&2; exit 1; }
NET="$(dirname "$KEYSMITH")/keysmith-net"
[ -x "$NET" ] || { echo "keysmith: no keysmith-net beside $KEYSMITH" >&2; exit 1; }
version=$("$KEYSMITH" --version)
staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT

mkdir -p "$prefix/bin" "$prefix/libexec/keysmith" "$prefix/share/man/man1" "$prefix/share/bash-completion/completions" \
    "$prefix/share/zsh/site-functions" "$prefix/share/fish/vendor_completions.d" "$prefix/share/keysmith"
installed=()
# The binary, stripped of its symbols (a copy: the build's own binary keeps them for debugging),
# put in place by a rename so a running keysmith is never overwritten in place.
strip -o "$staging/keysmith" "$KEYSMITH" 2>/dev/null || cp "$KEYSMITH" "$staging/keysmith"
install -m 0755 "$staging/keysmith" "$prefix/bin/.keysmith.new"
mv -f "$prefix/bin/.keysmith.new" "$prefix/bin/keysmith"
installed+=("$prefix/bin/keysmith")
strip -o "$staging/keysmith-net" "$NET" 2>/dev/null || cp "$NET" "$staging/keysmith-net"
install -m 0755 "$staging/keysmith-net" "$prefix/libexec/keysmith/.keysmith-net.new"
mv -f "$prefix/libexec/keysmith/.keysmith-net.new" "$prefix/libexec/keysmith/keysmith-net"
installed+=("$prefix/libexec/keysmith/keysmith-net")
ln -sfn keysmith "$prefix/bin/git-credential-keysmith"
installed+=("$prefix/bin/git-credential-keysmith")
# A man page per command, from the command's own argument definitions.
"$prefix/bin/keysmith" --experimental-dump-help | python3 "$root/scripts/manpages.py" "$staging/man" "$version" >/dev/null
for page in "$staging"/man/*.1; do
    install -m 0644 "$page" "$prefix/share/man/man1/"
    installed+=("$prefix/share/man/man1/$(basename "$page")")
done
"$prefix/bin/keysmith" --generate-completion-script bash > "$staging/bash"
"$prefix/bin/keysmith" --generate-completion-script zsh > "$staging/zsh"
"$prefix/bin/keysmith" --generate-completion-script fish > "$staging/fish"
install -m 0644 "$staging/bash" "$prefix/share/bash-completion/completions/keysmith"
install -m 0644 "$staging/zsh" "$prefix/share/zsh/site-functions/_keysmith"
install -m 0644 "$staging/fish" "$prefix/share/fish/vendor_completions.d/keysmith.fish"
installed+=("$prefix/share/bash-completion/completions/keysmith" "$prefix/share/zsh/site-functions/_keysmith"
            "$prefix/share/fish/vendor_completions.d/keysmith.fish")
printf '%s\n' "${installed[@]}" > "$manifest"
size=$(stat -c %s "$prefix/bin/keysmith")
netsize=$(stat -c %s "$prefix/libexec/keysmith/keysmith-net")
echo "keysmith $version installed in $prefix (keysmith $((size / 1024 / 1024)) MiB, keysmith-net $((netsize / 1024 / 1024)) MiB, ${#installed[@]} files; scripts/install.sh --uninstall $prefix removes them)"
case ":$PATH:" in *":$prefix/bin:"*) ;; *) echo "keysmith: $prefix/bin is not on PATH" >&2 ;; esac
