#!/usr/bin/env bash
# Builds the API reference of every library module with DocC (the toolchain's `docc`), from the
# modules `swift build` made, into .build/docs/<Module>/ (a DocC archive per module; open its
# index.html, or `docc preview`). Each module's landing article is Sources/<Module>/<Module>.docc.
# Fails, naming it, on any warning but missing parameter documentation: a broken or ambiguous
# symbol link, a link to nothing. scripts/test.sh runs it after the build.
set -euo pipefail
cd "$(dirname "$0")/.."

modules=(Keysmith KeysmithCredentials KeysmithVault KeysmithSecretService KeysmithStores KeysmithTokens KeysmithPolicy KeysmithTokenPolicy KeysmithPostgres KeysmithProvider)
bin=$(swift build --show-bin-path)
[ -d "$bin/Modules" ] || { echo "keysmith: build first (swift build): $bin/Modules is missing" >&2; exit 1; }
triple=$(basename "$(dirname "$bin")")
# The C modules the Swift ones import: the package's own and its dependencies'.
clang_args=()
while IFS= read -r map; do clang_args+=(-Xcc "-fmodule-map-file=$PWD/$map"); done < <(
    { find "${bin#$PWD/}" -maxdepth 2 -name module.modulemap; find .build/checkouts -path '*include*' -name module.modulemap;
      echo Sources/COpenSSL/module.modulemap; echo Sources/CLibSecret/module.modulemap; } 2>/dev/null)
for flag in $(pkg-config --cflags-only-I libsecret-1 libcrypto); do clang_args+=(-Xcc "$flag"); done

failed=0
for module in "${modules[@]}"; do
    graphs=.build/symbol-graphs/$module
    rm -rf "$graphs" ".build/docs/$module"
    mkdir -p "$graphs" .build/docs
    swift-symbolgraph-extract -module-name "$module" -I "$bin/Modules" "${clang_args[@]}" -target "$triple" \
        -output-dir "$graphs" -minimum-access-level public
    log=$(docc convert "Sources/$module/$module.docc" --additional-symbol-graph-dir "$graphs" \
        --fallback-display-name "$module" --fallback-bundle-identifier "org.keysmith.$module" \
        --output-path ".build/docs/$module" 2>&1) || { echo "$log" >&2; failed=1; continue; }
    problems=$(printf '%s\n' "$log" | grep -E '^(warning|error):' | grep -vE "is missing documentation" || true)
    if [ -n "$problems" ]; then
        echo "keysmith: the documentation of $module has problems:" >&2
        printf '%s\n' "$log" | grep -E -A3 '^(warning|error):' | grep -vE "is missing documentation" >&2
        failed=1
    else
        echo "keysmith: documentation of $module in .build/docs/$module"
    fi
done
exit "$failed"
