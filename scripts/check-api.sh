#!/usr/bin/env bash
# Public API breaks must be deliberate. Compares every library module with the last release (the
# commit named in .api-baseline) using `swift package diagnose-api-breaking-changes`, and fails
# unless CHANGELOG.md's [Unreleased] section names each break (the declaration, as
# `Type.member(label:)` or its last component in backticks). scripts/test.sh runs it.
#
# The baseline's API digests are built once into .build/api-baseline (about 7 minutes on 2 cores
# from a clean clone; reused after). To cut a release: see README.md, "Releases"; then write the
# release commit into .api-baseline.
set -euo pipefail
cd "$(dirname "$0")/.."

baseline=$(tr -d '[:space:]' < .api-baseline)
if ! git cat-file -e "$baseline^{commit}" 2>/dev/null; then
    echo "keysmith: the API baseline $baseline (.api-baseline) is not in this clone's history: clone without --depth, or fetch it" >&2
    exit 1
fi
set +e
output=$(swift package diagnose-api-breaking-changes "$baseline" --baseline-dir .build/api-baseline 2>&1)
status=$?
set -e
breaks=$(printf '%s\n' "$output" | grep -E 'API breakage: ' | sed -E 's/.*API breakage: //' | sort -u || true)
if [ "$status" -ne 0 ] && [ -z "$breaks" ]; then
    printf '%s\n' "$output" | grep -vE '^\[[0-9]+/[0-9]+\]' | tail -40 >&2
    echo "keysmith: the API comparison with $baseline did not run (exit $status)" >&2
    exit 1
fi
unreleased=$(awk '/^## \[Unreleased\]/ { inside = 1; next } /^## \[/ { inside = 0 } inside' CHANGELOG.md)
undeclared=0
while IFS= read -r breakage; do
    [ -n "$breakage" ] || continue
    # "func Keysmith.create(_:forAccount:inService:in:) has been removed" -> the declaration's name.
    name=$(printf '%s\n' "$breakage" | sed -E 's/^[a-z ]*(func|var|let|struct|class|enum|protocol|case|constructor|subscript|typealias|associatedtype|accessor|import|extension|operator) +//; s/ has .*$//; s/ is now .*$//; s/ .*$//')
    short=${name##*.}
    short=${short%%(*}
    if printf '%s\n' "$unreleased" | grep -qF -- "$name" || printf '%s\n' "$unreleased" | grep -qF -- "\`$short"; then
        echo "keysmith: API break, named in CHANGELOG.md: $breakage"
    else
        echo "keysmith: API break not named in CHANGELOG.md's [Unreleased] section: $breakage" >&2
        undeclared=1
    fi
done <<< "$breaks"
if [ "$undeclared" -ne 0 ]; then
    echo "keysmith: name each break above in CHANGELOG.md (Unreleased: Changed or Removed, with the old call and the new one), or undo it" >&2
    exit 1
fi
[ -n "$breaks" ] || echo "keysmith: no public API break since $baseline"
