#!/usr/bin/env bash
# README's test command: installs what is missing, checks that public API breaks are named in
# CHANGELOG.md, builds, builds the API reference, and runs every test, the Secret
# Service tests against a private gnome-keyring-daemon and the PostgreSQL store's against a
# private PostgreSQL server; then builds the example service (Examples/ReportService) and runs it
# end to end.
#
# A watchdog bounds the test run (KEYSMITH_TEST_TIMEOUT seconds, 40 minutes unless set; the
# suite takes about 7, the example's first build and run about 8 more): a run that hangs prints every process of this run with its kernel wait
# channel and, with gdb, the backtrace of every thread of the test runner and of its children,
# then fails, instead of silently using up CI's time.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/bootstrap.sh
# Public API breaks since the last release must be named in CHANGELOG.md (builds the release's
# API digests once, into .build/api-baseline).
scripts/check-api.sh
# The build, with zero warnings from the project's own code (dependencies' warnings are theirs).
# A clean clone (CI) compiles every file, so every warning shows; an incremental build shows
# those of the files it compiled.
build_log=$(mktemp)
set +e
swift build --build-tests 2>&1 | tee "$build_log"
built=${PIPESTATUS[0]}
set -e
[ "$built" -eq 0 ] || exit "$built"
# (A warning inside a macro's expansion, such as #expect's, prints as "macro expansion …: warning:"
# with the file in a note below it.)
if grep -E "^($PWD/(Sources|Tests)/[^:]+:[0-9]+:[0-9]+|macro expansion [^:]*:[0-9]+:[0-9]+): warning:" "$build_log" | sort -u | grep . >&2; then
    echo "keysmith: the build printed the warnings above from the project's own code; fix them" >&2
    rm -f "$build_log"
    exit 1
fi
rm -f "$build_log"
# The API reference of every module, with no broken symbol link.
scripts/docs.sh

limit=${KEYSMITH_TEST_TIMEOUT:-2400}
watchdog() {
    sleep "$limit" </dev/null >/dev/null 2>&1
    echo "keysmith: the tests have not finished after $limit s; what is still running:" >&3
    ps -o pid,ppid,stat,etimes,wchan:32,args --forest -s "$(ps -o sid= $$ | tr -d ' ')" >&3 || true
    local runner
    runner=$(pgrep -f '^\S*KeysmithPackageTests\.xctest' | head -1 || true)
    [ -n "$runner" ] || return 0
    for pid in "$runner" $(pgrep -P "$runner" || true); do
        [ -d /proc/"$pid" ] || continue
        echo "keysmith: process $pid: $(tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null)" >&3
        for task in /proc/"$pid"/task/*; do
            echo "  thread ${task##*/} $(cat "$task/comm" 2>/dev/null): waiting in $(cat "$task/wchan" 2>/dev/null)" >&3
        done
        command -v gdb >/dev/null && timeout 120 gdb -p "$pid" -batch -ex "thread apply all bt 30" </dev/null 2>&1 \
            | grep -E '^(Thread|#)' >&3 || true
    done
    kill -KILL "$runner" 2>/dev/null || true
}
# Its messages go to fd 3 (standard error); bash's own "Terminated" when it is stopped, nowhere.
watchdog 3>&2 2>/dev/null &
watchdog_pid=$!
disown "$watchdog_pid"
trap 'pkill -P "$watchdog_pid" 2>/dev/null; kill "$watchdog_pid" 2>/dev/null || true' EXIT

# Every real part is started above: a suite that cannot find its part fails, never skips silently.
export KEYSMITH_REQUIRE_ALL_PARTS=1
scripts/with-postgres.sh scripts/with-secret-service.sh scripts/with-oauth-server.sh swift test --skip-build "$@"
# The example service (Examples/ReportService, a package of its own with Hummingbird) end to end:
# built, served, asked as a client would, and following a revocation made by keysmith-net. Run
# whenever the whole suite runs (not when tests are picked with arguments).
if [ $# -eq 0 ]; then
    # Bounded as the suite is (the watchdog above stops only the test runner).
    timeout --kill-after=30 "$limit" scripts/with-postgres.sh Examples/ReportService/smoke.sh "$PWD/.build/debug/keysmith-net"
fi
