"""`keysmith policy decide`, whole process, beside cedarpy's batch authorizer, in one run.

The news-groups population of PolicyBenchmarks (1,000 groups, 1,000 users, a tenth anonymous):
N random requests (100,000 by default) as JSON lines into one `keysmith policy decide` (the
example policies, schema and these entities), and the same requests to one
`cedarpy.is_authorized_batch` call (the same rules written for Cedar, scopes as principal
attributes as in peers.py). Every decision is compared; prints both rates and the ratio.
    python3 Benchmarks/peers/decide.py [KEYSMITH] [N]
"""
import json
import os
import random
import subprocess
import sys
import tempfile
import time

import cedarpy

keysmith = sys.argv[1] if len(sys.argv) > 1 else ".build/release/keysmith"
count = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
example = os.path.join(root, "docs", "examples", "news-groups")

from news_groups_cedar import CEDAR_POLICIES  # noqa: E402 (shared with peers.py)

rng = random.Random(7)
scopes_all = ["groups:read", "posts:write", "posts:delete"]
groups = [(f"g{i}", rng.random() < 0.5) for i in range(1000)]
users = []
for i in range(1000):
    anonymous = i % 10 == 0
    member_of = [f"g{rng.randrange(1000)}" for _ in range(3)]
    admin_of = [f"g{rng.randrange(1000)}"]
    scopes = [s for s in scopes_all if rng.random() < 0.8]
    # An anonymous visitor belongs to nothing and is no admin (the shared cases' rule).
    users.append({"id": f"u{i}", "anonymous": anonymous, "super_admin": i % 97 == 0 and not anonymous,
                  "member_of": [] if anonymous else member_of, "admin_of": [] if anonymous else admin_of, "scopes": scopes})
requests = [(rng.randrange(1000), rng.choice(["browse", "post", "delete"]), rng.randrange(1000)) for _ in range(count)]


def ref(kind, ident):
    return {"__entity": {"type": kind, "id": ident}}


# Keysmith: the example's vocabulary (User with a token, Anonymous without).
k_entities = [{"uid": {"type": "Group", "id": g}, "attrs": {"public": public}} for g, public in groups]
for u in users:
    k_entities.append({"uid": {"type": "Anonymous" if u["anonymous"] else "User", "id": u["id"]}, "attrs": {
        "member_of": [ref("Group", g) for g in u["member_of"]], "admin_of": [ref("Group", g) for g in u["admin_of"]],
        "super_admin": u["super_admin"]}})
lines = []
for user, action, group in requests:
    u = users[user]
    request = {"principal": f'{"Anonymous" if u["anonymous"] else "User"}::"{u["id"]}"', "action": f'Action::"{action}"',
               "resource": f'Group::"g{group}"'}
    if not u["anonymous"]:
        request["scopes"] = u["scopes"]
    lines.append(json.dumps(request))
scratch = tempfile.mkdtemp(prefix="keysmith-decide-")
entities_path = os.path.join(scratch, "entities.json")
with open(entities_path, "w") as f:
    json.dump(k_entities, f)
stdin = ("\n".join(lines) + "\n").encode()

# Cedar: every principal a User with its scopes and an anonymous flag.
c_entities = [{"uid": {"type": "Group", "id": g}, "parents": [], "attrs": {"public": public}} for g, public in groups]
c_entities += [{"uid": {"type": "User", "id": u["id"]}, "parents": [], "attrs": {
    "anonymous": u["anonymous"], "super_admin": u["super_admin"], "scopes": u["scopes"],
    "member_of": [ref("Group", g) for g in u["member_of"]], "admin_of": [ref("Group", g) for g in u["admin_of"]]}} for u in users]
c_requests = [{"principal": f'User::"{users[user]["id"]}"', "action": f'Action::"{action}"', "resource": f'Group::"g{group}"',
               "context": {}} for user, action, group in requests]

rounds = int(os.environ.get("DECIDE_ROUNDS", "3"))
k_times, c_times = [], []
for _ in range(rounds):
    start = time.perf_counter()
    result = subprocess.run([keysmith, "policy", "decide", "--policies", os.path.join(example, "policies.cedar"),
                             "--schema", os.path.join(example, "schema.cedarschema"), "--entities", entities_path],
                            input=stdin, capture_output=True)
    k_times.append(time.perf_counter() - start)
    if result.returncode != 0:
        sys.exit(f"keysmith policy decide exited {result.returncode}: {result.stderr[:500]!r}")
    k_allowed = [json.loads(line)["decision"] == "allow" for line in result.stdout.splitlines()]
    start = time.perf_counter()
    c_results = cedarpy.is_authorized_batch(c_requests, CEDAR_POLICIES, c_entities)
    c_times.append(time.perf_counter() - start)
    c_allowed = [r.decision == cedarpy.Decision.Allow for r in c_results]
if len(k_allowed) != count:
    sys.exit(f"keysmith answered {len(k_allowed)} of {count} requests")
disagree = sum(1 for a, b in zip(k_allowed, c_allowed) if a != b)
k_best, c_best = min(k_times), min(c_times)
print(f"{count} news-groups requests, {rounds} rounds, fastest of each (whole process for keysmith, one batch call for cedarpy):")
print(f"  keysmith policy decide   {k_best:6.2f} s  {count / k_best:10,.0f} decisions/s  (all: {', '.join(f'{t:.2f}' for t in k_times)})")
print(f"  cedarpy batch            {c_best:6.2f} s  {count / c_best:10,.0f} decisions/s  (all: {', '.join(f'{t:.2f}' for t in c_times)})")
print(f"  keysmith / cedarpy: {c_best / k_best:.1f}x the rate (target >= 6x, issue 38); decisions that differ: {disagree}; allowed {sum(k_allowed)}")
subprocess.run(["rm", "-rf", scratch])
