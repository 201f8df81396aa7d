#!/usr/bin/env bash
# Builds a libFuzzer target (Fuzz/) with the fuzzer and AddressSanitizer, and runs it for a given
# number of seconds over a copy of its seed corpus. Crashing inputs land in Fuzz/Regressions/,
# where the test suite replays them forever after.
#   scripts/fuzz.sh FuzzVaultFormat|FuzzTokenResponse|FuzzPolicyLanguage [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: scripts/fuzz.sh FuzzVaultFormat|FuzzTokenResponse|FuzzPolicyLanguage [SECONDS]}
seconds=${2:-600}
name=${target#Fuzz}

scripts/bootstrap.sh
(cd Fuzz && swift build -c debug --product "$target" -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library >&2)

work=$(mktemp -d "${TMPDIR:-/tmp}/keysmith-fuzz-$name.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp -r "Fuzz/Corpus/$name/." "$work/"
mkdir -p "Fuzz/Regressions/$name"
"Fuzz/.build/debug/$target" "$work" -max_total_time="$seconds" -artifact_prefix="Fuzz/Regressions/$name/" \
    -print_final_stats=1 -rss_limit_mb=4096 2>&1 | tee "$work.log" | grep -E "^#[0-9]+ *(INITED|DONE)|stat::|ERROR|SUMMARY" || true
status=${PIPESTATUS[0]}
echo "fuzz $target: $(grep -E 'stat::number_of_executed_units' "$work.log" | awk '{print $2}') executions in $seconds s, exit $status" >&2
rm -f "$work.log"
exit "$status"
