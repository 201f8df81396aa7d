"""`git-credential-keysmith get` beside `git-credential-libsecret get`: whole process, the
credential description on standard input as git writes it, interleaved, medians (the machine is
shared: compare them in one run).

    python3 Benchmarks/git/helpers.py RUNS LABEL=PATH[,VARIABLE:VALUE…]…

Each helper must already hold the password `bench-pw` of https://alice@git.example.com
(scripts/bench-git-credential.sh stores it through each helper's own `store`). Ratios are to the
last helper given."""
import os
import statistics
import subprocess
import sys
import time

runs = int(sys.argv[1])
helpers = []
for argument in sys.argv[2:]:
    label, _, rest = argument.partition("=")
    path, *pairs = rest.split(",")
    environment = dict(os.environ)
    for pair in pairs:
        key, _, value = pair.partition(":")
        environment[key] = value
    helpers.append((label, path, environment))
request = b"protocol=https\nhost=git.example.com\nusername=alice\n\n"
timings = {label: [] for label, _, _ in helpers}
for _ in range(runs):
    for label, path, environment in helpers:
        start = time.perf_counter()
        result = subprocess.run([path, "get"], input=request, capture_output=True, env=environment)
        timings[label].append(time.perf_counter() - start)
        if result.returncode != 0 or b"password=bench-pw" not in result.stdout:
            sys.exit("%s get failed: %s" % (label, result.stderr.decode()))
base = statistics.median(timings[helpers[-1][0]])
for label, _, _ in helpers:
    median = statistics.median(timings[label])
    print("%-40s get: median %6.2f ms, %.2fx %s" % (label, median * 1e3, median / base, helpers[-1][0]))
print("(%d runs each, interleaved, whole process)" % runs)
