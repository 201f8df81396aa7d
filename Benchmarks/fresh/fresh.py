"""`keysmith token get --fresh` on a token that needs no refresh, beside `keysmith token get`:
whole process, interleaved, medians (the machine is shared: compare the two, same run).

    python3 Benchmarks/fresh/fresh.py KEYSMITH RUNS

Needs a vault (KEYSMITH_VAULT, KEYSMITH_KEYFILE) holding provider "bench" and a token for
account "alice" that lives an hour: scripts/bench-fresh.sh sets that up."""
import statistics
import subprocess
import sys
import time

keysmith, runs = sys.argv[1], int(sys.argv[2])
base = [keysmith, "token", "get", "--service", "bench", "--account", "alice", "--no-newline"]
timings = {"get": [], "get --fresh": []}
for _ in range(runs):
    for name, arguments in (("get", base), ("get --fresh", base + ["--fresh"])):
        start = time.perf_counter()
        result = subprocess.run(arguments, capture_output=True)
        timings[name].append(time.perf_counter() - start)
        if result.returncode != 0:
            sys.exit("%s failed: %s" % (name, result.stderr.decode()))
plain, fresh = statistics.median(timings["get"]), statistics.median(timings["get --fresh"])
print("token get: median %.2f ms; token get --fresh (no refresh needed): median %.2f ms; difference %.2f ms (%d runs each, interleaved)"
      % (plain * 1e3, fresh * 1e3, (fresh - plain) * 1e3, runs))
