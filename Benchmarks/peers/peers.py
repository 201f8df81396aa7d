#!/usr/bin/env python3
"""The peers, measured on this machine in one run beside Keysmith (scripts/bench-peers.sh runs
this inside a private Secret Service session). Prints one JSON object with every figure; every
value read back is checked, and a wrong one is counted and reported."""
import json, os, random, shutil, subprocess, sys, tempfile, time

ITEMS = int(os.environ.get("PEERS_ITEMS", "1000"))
SS_ITEMS = int(os.environ.get("PEERS_SS_ITEMS", "300"))
SAMPLE = int(os.environ.get("PEERS_SAMPLE", "200"))
results = {"items": ITEMS, "secret_service_items": SS_ITEMS, "sample": SAMPLE}


def per_second(count, seconds):
    return round(count / seconds, 1)


def timed(body, count):
    start = time.perf_counter()
    wrong = 0
    for index in range(count):
        if body(index) is False:
            wrong += 1
    return per_second(count, time.perf_counter() - start), wrong


def cryptfile():
    from keyrings.cryptfile.cryptfile import CryptFileKeyring
    directory = tempfile.mkdtemp()
    try:
        ring = CryptFileKeyring()
        ring.file_path = os.path.join(directory, "fast.cfg")
        ring.keyring_key = "bench"
        # The KDF turned down, as the issue's reference did, or filling takes hours.
        ring.time_cost, ring.memory_cost, ring.parallelism = 1, 8, 1
        start = time.perf_counter()
        for index in range(ITEMS):
            ring.set_password("bench", f"user{index}", f"secret-{index}")
        fill = time.perf_counter() - start
        reads, wrong = timed(lambda i: ring.get_password("bench", f"user{(i * 7919) % ITEMS}") == f"secret-{(i * 7919) % ITEMS}", SAMPLE)
        writes, _ = timed(lambda i: ring.set_password("bench", f"user{i}", f"secret-{i}"), min(SAMPLE, 50))
        # With its default KDF: a few items, a few reads.
        slow = CryptFileKeyring()
        slow.file_path = os.path.join(directory, "default.cfg")
        slow.keyring_key = "bench"
        for index in range(3):
            slow.set_password("bench", f"user{index}", f"secret-{index}")
        default_reads, default_wrong = timed(lambda i: slow.get_password("bench", f"user{i % 3}") == f"secret-{i % 3}", 3)
        import keyrings.cryptfile
        results["cryptfile"] = {
            "version": keyrings.cryptfile.__version__ if hasattr(keyrings.cryptfile, "__version__") else "?",
            "fill_seconds": round(fill, 1), "reads_per_s_kdf_down": reads, "writes_per_s_kdf_down": writes,
            "reads_per_s_default_kdf": default_reads, "wrong": wrong + default_wrong}
    finally:
        shutil.rmtree(directory)


def secret_service_python():
    import keyring
    from keyring.backends import SecretService
    ring = SecretService.Keyring()
    start = time.perf_counter()
    for index in range(SS_ITEMS):
        ring.set_password("bench-peers", f"user{index}", f"secret-{index}")
    fill = time.perf_counter() - start
    reads, wrong = timed(lambda i: ring.get_password("bench-peers", f"user{(i * 7919) % SS_ITEMS}") == f"secret-{(i * 7919) % SS_ITEMS}", SAMPLE)
    writes, _ = timed(lambda i: ring.set_password("bench-peers", f"user{i}", f"secret-{i}"), min(SAMPLE, 100))
    results["keyring_secret_service"] = {"version": keyring.__version__ if hasattr(keyring, "__version__") else "?",
                                         "fill_seconds": round(fill, 1), "reads_per_s": reads, "writes_per_s": writes, "wrong": wrong}
    # secret-tool on the same items (python keyring stores service and username attributes).
    def lookup(i):
        index = (i * 7919) % SS_ITEMS
        out = subprocess.run(["secret-tool", "lookup", "service", "bench-peers", "username", f"user{index}"],
                             capture_output=True, text=True).stdout
        return out == f"secret-{index}"
    tool_reads, tool_wrong = timed(lookup, SAMPLE)
    def store(i):
        subprocess.run(["secret-tool", "store", "--label=bench", "service", "bench-peers", "username", f"user{i}"],
                       input=f"secret-{i}", text=True, check=True)
    tool_writes, _ = timed(store, min(SAMPLE, 100))
    results["secret_tool"] = {"reads_per_s": tool_reads, "writes_per_s": tool_writes, "wrong": tool_wrong}
    for index in range(SS_ITEMS):
        try:
            ring.delete_password("bench-peers", f"user{index}")
        except Exception:
            pass


def pass_store():
    if not shutil.which("pass") or not shutil.which("gpg"):
        results["pass"] = {"skipped": "pass or gpg missing"}
        return
    home = tempfile.mkdtemp()
    env = dict(os.environ, GNUPGHOME=os.path.join(home, "gnupg"), PASSWORD_STORE_DIR=os.path.join(home, "store"))
    os.makedirs(env["GNUPGHOME"], mode=0o700)
    try:
        subprocess.run(["gpg", "--batch", "--passphrase", "", "--quick-gen-key", "Bench <bench@example.com>", "default", "default", "never"],
                       env=env, check=True, capture_output=True)
        subprocess.run(["pass", "init", "bench@example.com"], env=env, check=True, capture_output=True)
        start = time.perf_counter()
        for index in range(ITEMS):
            subprocess.run(["pass", "insert", "-m", "-f", f"bench/user{index}"], input=f"secret-{index}\n", text=True,
                           env=env, check=True, capture_output=True)
        fill = time.perf_counter() - start
        def show(i):
            index = (i * 7919) % ITEMS
            return subprocess.run(["pass", "show", f"bench/user{index}"], env=env, capture_output=True, text=True).stdout == f"secret-{index}\n"
        reads, wrong = timed(show, SAMPLE)
        def insert(i):
            subprocess.run(["pass", "insert", "-m", "-f", f"bench/user{i}"], input=f"secret-{i}\n", text=True, env=env, check=True, capture_output=True)
        writes, _ = timed(insert, min(SAMPLE, 100))
        version = subprocess.run(["pass", "version"], capture_output=True, text=True).stdout
        results["pass"] = {"version": next((l.strip() for l in version.splitlines() if "v1" in l), "?"),
                           "fill_seconds": round(fill, 1), "reads_per_s": reads, "writes_per_s": writes, "wrong": wrong}
    finally:
        subprocess.run(["gpgconf", "--kill", "all"], env=env, capture_output=True)
        shutil.rmtree(home, ignore_errors=True)


from news_groups_cedar import CEDAR_POLICIES  # noqa: E402 (shared with decide.py)


def cedar():
    import cedarpy
    def user(uid, anonymous, super_admin, member_of, admin_of, scopes):
        return {"uid": {"type": "User", "id": uid}, "parents": [], "attrs": {
            "anonymous": anonymous, "super_admin": super_admin, "scopes": scopes,
            "member_of": [{"__entity": {"type": "Group", "id": g}} for g in member_of],
            "admin_of": [{"__entity": {"type": "Group", "id": g}} for g in admin_of]}}
    def group(gid, public):
        return {"uid": {"type": "Group", "id": gid}, "parents": [], "attrs": {"public": public}}
    # Check the encoding on the shared exhaustive cases first.
    cases_file = os.path.join(os.path.dirname(__file__), "..", "..", "Tests", "KeysmithPolicyTests", "Cases", "exhaustive.expected.jsonl")
    wrong = 0
    cases = [json.loads(line) for line in open(cases_file)]
    for case in cases[:390]:
        p, g = case["principal"], case["group"]
        entities = [user(p["id"], p["anonymous"], p["super_admin"], p["member_of"], p["admin_of"], p["scopes"]), group(g["id"], g["public"])]
        entities += [group(x, False) for x in set(p["member_of"] + p["admin_of"]) if x != g["id"]]
        request = {"principal": f'User::"{p["id"]}"', "action": f'Action::"{case["action"]}"', "resource": f'Group::"{g["id"]}"', "context": {}}
        decision = cedarpy.is_authorized(request, CEDAR_POLICIES, entities).decision
        if (decision == cedarpy.Decision.Allow) != (case["expected"] == "allow"):
            wrong += 1
    # Then a population like PolicyBenchmarks': 1,000 groups, 1,000 users, random requests in batches.
    rng = random.Random(7)
    groups = [group(f"g{i}", rng.random() < 0.5) for i in range(1000)]
    scopes_all = ["groups:read", "posts:write", "posts:delete"]
    users = [user(f"u{i}", i % 10 == 0, i % 97 == 0, [f"g{rng.randrange(1000)}" for _ in range(3)], [f"g{rng.randrange(1000)}"],
                  [s for s in scopes_all if rng.random() < 0.8]) for i in range(1000)]
    entities = groups + users
    requests = [{"principal": f'User::"u{rng.randrange(1000)}"', "action": f'Action::"{rng.choice(["browse", "post", "delete"])}"',
                 "resource": f'Group::"g{rng.randrange(1000)}"', "context": {}} for _ in range(2000)]
    start = time.perf_counter()
    cedarpy.is_authorized_batch(requests, CEDAR_POLICIES, entities)
    seconds = time.perf_counter() - start
    results["cedarpy"] = {"decisions_per_s": per_second(len(requests), seconds), "wrong_on_exhaustive_cases": wrong,
                          "version": getattr(cedarpy, "__version__", "?")}


CASBIN_MODEL = """
[request_definition]
r = sub, obj, act

[policy_definition]
p = rule, act, eft

[policy_effect]
e = some(where (p.eft == allow)) && !some(where (p.eft == deny))

[matchers]
m = r.act == p.act && ( \
 (p.rule == "browse-public" && r.obj.public) || \
 (p.rule == "member-browse-post" && (r.obj.id in r.sub.member_of || r.obj.id in r.sub.admin_of)) || \
 (p.rule == "admin-delete" && r.obj.id in r.sub.admin_of) || \
 (p.rule == "super-admin" && r.sub.super_admin) || \
 (p.rule == "scope-browse" && !r.sub.anonymous && !("groups:read" in r.sub.scopes)) || \
 (p.rule == "scope-post" && !r.sub.anonymous && !("posts:write" in r.sub.scopes)) || \
 (p.rule == "scope-delete" && !r.sub.anonymous && !("posts:delete" in r.sub.scopes)) )
"""
CASBIN_POLICY = """p, browse-public, browse, allow
p, member-browse-post, browse, allow
p, member-browse-post, post, allow
p, admin-delete, delete, allow
p, super-admin, browse, allow
p, super-admin, post, allow
p, super-admin, delete, allow
p, scope-browse, browse, deny
p, scope-post, post, deny
p, scope-delete, delete, deny
"""


def casbin_job():
    import casbin
    directory = tempfile.mkdtemp()
    try:
        open(os.path.join(directory, "model.conf"), "w").write(CASBIN_MODEL)
        open(os.path.join(directory, "policy.csv"), "w").write(CASBIN_POLICY)
        enforcer = casbin.Enforcer(os.path.join(directory, "model.conf"), os.path.join(directory, "policy.csv"))
    finally:
        shutil.rmtree(directory)
    class Attributes:
        def __init__(self, **values): self.__dict__.update(values)
    cases_file = os.path.join(os.path.dirname(__file__), "..", "..", "Tests", "KeysmithPolicyTests", "Cases", "exhaustive.expected.jsonl")
    wrong = 0
    for case in (json.loads(line) for line in open(cases_file)):
        p, g = case["principal"], case["group"]
        subject = Attributes(anonymous=p["anonymous"], super_admin=p["super_admin"], member_of=p["member_of"], admin_of=p["admin_of"], scopes=p["scopes"])
        if enforcer.enforce(subject, Attributes(id=g["id"], public=g["public"]), case["action"]) != (case["expected"] == "allow"):
            wrong += 1
    rng = random.Random(7)
    groups = [Attributes(id=f"g{i}", public=rng.random() < 0.5) for i in range(1000)]
    scopes_all = ["groups:read", "posts:write", "posts:delete"]
    users = [Attributes(anonymous=i % 10 == 0, super_admin=i % 97 == 0, member_of=[f"g{rng.randrange(1000)}" for _ in range(3)],
                        admin_of=[f"g{rng.randrange(1000)}"], scopes=[s for s in scopes_all if rng.random() < 0.8]) for i in range(1000)]
    requests = [(users[rng.randrange(1000)], groups[rng.randrange(1000)], rng.choice(["browse", "post", "delete"])) for _ in range(2000)]
    start = time.perf_counter()
    for subject, group_, action in requests:
        enforcer.enforce(subject, group_, action)
    results["casbin"] = {"decisions_per_s": per_second(len(requests), time.perf_counter() - start), "wrong_on_exhaustive_cases": wrong}


for name, job in [("cryptfile", cryptfile), ("secret_service", secret_service_python), ("pass", pass_store), ("cedar", cedar),
                  ("casbin", casbin_job)]:
    try:
        print(f"peers: {name}…", file=sys.stderr)
        job()
    except Exception as error:  # a peer that cannot run is reported, not fatal
        results[name + "_error"] = repr(error)
print(json.dumps(results, indent=1))
