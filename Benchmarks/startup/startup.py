"""Start-up of the keysmith command, whole process, beside secret-tool in the same run.

Run inside a Secret Service session (scripts/bench-startup.sh does that): stores one item in a
throwaway vault (keyfile, no KDF) and the same item in the Secret Service, then alternates
`keysmith secret get` and `secret-tool lookup` (and `keysmith --version`, and /bin/true for the
floor of starting any process from Python), each checked for the right value, and prints the
medians and the ratio. The machine is shared: read the ratio, and run it more than once.
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

keysmith = sys.argv[1] if len(sys.argv) > 1 else ".build/release/keysmith"
runs = int(os.environ.get("STARTUP_RUNS", "100"))
scratch = tempfile.mkdtemp(prefix="keysmith-startup-")
env = dict(os.environ, KEYSMITH_VAULT=scratch + "/vault", KEYSMITH_KEYFILE=scratch + "/keyfile",
           KEYSMITH_ANCHOR_DIR=scratch + "/anchors")
with open(scratch + "/keyfile", "w") as keyfile:
    keyfile.write(os.urandom(32).hex() + "\n")
os.chmod(scratch + "/keyfile", 0o600)
subprocess.run([keysmith, "init"], env=env, check=True, stdout=subprocess.DEVNULL)
subprocess.run([keysmith, "secret", "set", "--service", "startup", "--account", "a"], env=env, input=b"value",
               check=True, stdout=subprocess.DEVNULL)
subprocess.run(["secret-tool", "store", "--label", "startup", "service", "startup", "account", "a"], input=b"value",
               check=True)


def timed(command, environment=None, expect=b"value"):
    start = time.perf_counter()
    result = subprocess.run(command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    elapsed = time.perf_counter() - start
    if expect is not None and result.stdout.strip() != expect:
        sys.exit(f"{command[0]} printed {result.stdout!r}, not {expect!r}")
    return elapsed * 1000


commands = {
    "keysmith secret get": ([keysmith, "secret", "get", "--service", "startup", "--account", "a"], env, b"value"),
    "secret-tool lookup": (["secret-tool", "lookup", "service", "startup", "account", "a"], None, b"value"),
    "keysmith --version": ([keysmith, "--version"], env, None),
    "/bin/true": (["/bin/true"], None, None),
}
samples = {name: [] for name in commands}
for command in commands.values():  # warm the page cache once
    timed(*command)
for _ in range(runs):
    for name, command in commands.items():
        samples[name].append(timed(*command))
medians = {name: statistics.median(values) for name, values in samples.items()}
print(f"start-up, whole process, {runs} alternating runs each, medians:")
for name, median in medians.items():
    print(f"  {name:24} {median:6.2f} ms")
ratio = medians["keysmith secret get"] / medians["secret-tool lookup"]
print(f"  keysmith secret get / secret-tool lookup: {ratio:.2f}x (target <= 0.7x, issue 38)")
subprocess.run(["rm", "-rf", scratch])
