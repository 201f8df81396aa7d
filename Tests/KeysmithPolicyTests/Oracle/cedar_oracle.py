#!/usr/bin/env python3
"""Random policies, entities and requests, decided by Cedar itself (cedarpy from PyPI).

Usage: cedar_oracle.py SEED SCENARIOS REQUESTS_PER_SCENARIO [typed]
Prints one JSON document per scenario (JSON lines):
  {"policies": text, "entities": [...], "requests": [{"principal", "action", "resource", "context",
   "decision": "allow"|"deny", "reasons": [policy ids], "errors": [policy ids]}]}
Keysmith's policy tests decide the same requests and compare (Tests/KeysmithPolicyTests/OracleTests.swift).
The generator is deliberately sloppy: some expressions are ill-typed, some attributes are missing and
some entities absent, so that errors are exercised as well as decisions.
"""
import json
import random
import re
import sys

import cedarpy

# Two users whose ids are the same text in different bytes (é precomposed, and e with a
# combining accent): Cedar tells them apart, and so must Keysmith.
USERS = ["alice", "bob", "carol", "dave", "\u00e9mile", "e\u0301mile"]
GROUPS = ["staff", "admins", "ops"]
PHOTOS = ["p1", "p2", "p3"]
ALBUMS = ["trip", "work"]
ACTIONS = ["view", "edit", "delete", "share"]
SCOPES = ["photos:read", "photos:write", "albums:admin"]
STRINGS = ["", "a", "alice", "beach", "b*ch", "x\\y", "photo-1", "Émile", "E\u0301mile"]


# The vocabulary's schema in Keysmith's schema language. Cedar's copy adds context.token, which
# Keysmith declares by itself (it is reserved for the principal's token).
SCHEMA = """
entity Group in [Group];
entity User in [Group] { level: Long, name: String, active: Bool, tags: Set<String>, manager: User, groups: Set<Group> };
entity Album { public: Bool };
entity Photo in [Album] { owner: User, size: Long, title: String, public: Bool, labels: Set<String>, expires: datetime };
type Ctx = { n: Long, s: String, flag: Bool, addr: ipaddr, now: datetime, score: decimal };
action write;
action view, share appliesTo { principal: [User, Group], resource: [Photo, Album], context: Ctx };
action edit, delete in [write] appliesTo { principal: [User], resource: [Photo], context: Ctx };
"""
# Keysmith's context.token.since is a record of any scope names; Cedar's copy declares this
# vocabulary's scopes, each optional.
CEDAR_SCHEMA = SCHEMA.replace("type Ctx = {", "type Ctx = { token?: { granted: Set<String>, declined: Set<String>, expired: Set<String>, revoked: Set<String>, since: {"
                              + ", ".join(f'"{scope}"?: datetime' for scope in SCOPES) + "} },")
SINCE_TIMES = ["2026-11-22T09:30:00Z", "2026-11-21", "2026-11-22T09:59:59.999Z", "2020-02-29T12:00:00Z"]


def q(text):
    return json.dumps(text, ensure_ascii=False)


class Gen:
    def __init__(self, rng, typed=False):
        self.r = rng
        self.typed = typed  # entities and requests that the schema accepts

    def pick(self, items):
        return self.r.choice(items)

    def uid(self, kind=None):
        kind = kind or self.pick(["User", "Group", "Photo", "Album"])
        ids = {"User": USERS, "Group": GROUPS, "Photo": PHOTOS, "Album": ALBUMS, "Action": ACTIONS}[kind]
        return kind, self.pick(ids + ["ghost"] if kind != "Action" else ids)

    def ref(self, kind=None):
        t, i = self.uid(kind)
        return f"{t}::{q(i)}"

    def long_literal(self):
        return str(self.pick([0, 1, 2, 7, 42, -3, 9223372036854775807, -9223372036854775807, 1000]))

    def long(self, d):
        choices = ["lit", "lit", "principal.level", "resource.size", "context.n"]
        if d > 0:
            choices += ["arith", "arith", "neg", "dur"]
        c = self.pick(choices)
        if c == "lit":
            return self.long_literal()
        if c == "arith":
            return f"({self.long(d - 1)} {self.pick(['+', '-', '*'])} {self.long(d - 1)})"
        if c == "neg":
            return f"-({self.long(d - 1)})"
        if c == "dur":
            return f"duration({q(self.pick(['1h', '90s', '-2d', '1d2h3m4s5ms']))}).{self.pick(['toSeconds', 'toMinutes', 'toHours', 'toMilliseconds', 'toDays'])}()"
        return c

    def string(self, d):
        # Besides JSON-style escapes (q), Cedar's own: \x hex escapes and \u{…}.
        return self.pick([q(self.pick(STRINGS)), "principal.name", "resource.title", "context.s",
                          '"\\x61lice"', '"b\\u{65}ach"'])

    def comma(self, items):
        """Items joined by commas, sometimes with a trailing comma (Cedar accepts one after a
        non-empty list: sets, records, arguments, action lists, the head)."""
        return ", ".join(items) + ("," if items and self.r.random() < 0.25 else "")

    def entity(self, d):
        return self.pick(["principal", "resource", "action", self.ref(), self.ref("User"), "resource.owner", "principal.manager"])

    def set(self, d):
        c = self.pick(["lit", "tags", "labels", "granted", "groups", "entities", "mixed"])
        if c == "mixed":
            # Entities and one stray value anywhere: `e in` such a set is an error in Cedar
            # wherever the match is.
            items = [self.entity(max(d - 1, 0)) for _ in range(self.r.randint(1, 2))]
            items.insert(self.r.randint(0, len(items)), self.pick([self.long, self.string])(0))
            return "[" + self.comma(items) + "]"
        if c == "lit":
            n = self.r.randint(0, 3)
            maker = self.pick([self.string, self.long, self.entity])
            return "[" + self.comma([maker(max(d - 1, 0)) for _ in range(n)]) + "]"
        if c == "entities":
            return "[" + self.comma([self.ref() for _ in range(self.r.randint(0, 2))]) + "]"
        return {"tags": "principal.tags", "labels": "resource.labels", "granted": "context.token.granted",
                "groups": "principal.groups"}[c]

    def any(self, d):
        return self.pick([self.long, self.string, self.entity, self.set, self.bool])(max(d - 1, 0))

    def bool(self, d):
        if d <= 0:
            return self.pick(["true", "false", "context.flag", "principal.active", "resource.public"])
        c = self.pick(["cmp", "eq", "in", "has", "like", "contains", "containsAll", "and", "or", "not", "if", "is",
                       "ip", "datetime", "decimal", "since", "sloppy", "isEmpty", "leaf"])
        if c == "cmp":
            return f"{self.long(d - 1)} {self.pick(['<', '<=', '>', '>='])} {self.long(d - 1)}"
        if c == "eq":
            return f"{self.any(d - 1)} {self.pick(['==', '!='])} {self.any(d - 1)}"
        if c == "in":
            if self.r.random() < 0.25:
                # A set that holds the entity itself (a match) and a value that is not an
                # entity, before or after it: an error in Cedar either way.
                left = self.entity(d - 1)
                items = [left, self.pick(["1", '"x"', "true"])]
                self.r.shuffle(items)
                return f"{left} in [{', '.join(items)}]"
            return f"{self.entity(d - 1)} in {self.pick([self.entity(d - 1), self.set(d - 1)])}"
        if c == "has":
            # A path (`has a.b`) tests each step; a step into a value that is not a record or
            # an entity (level.x) is an error, as an attribute read would be.
            return f"{self.pick(['principal', 'resource', 'context', 'resource.owner', 'context.token'])} has {self.pick(['level', 'name', 'owner', 'granted', 'flag', 'missing', 'tags', 'size', 'owner.name', 'manager.level', 'owner.manager.active', 'token.since', 'missing.x', 'level.x', 'since.x'])}"
        if c == "like":
            # \* is a literal star; a star written \u{2a} or \x2a is a wildcard.
            pattern = self.pick(['"*"', '"a*"', '"*e*"', '"b\\*ch"', '"x\\\\y"', '"alice"', '""', '"É*"', '"b\\u{2a}h"', '"\\x61\\x2a"'])
            return f"{self.string(d - 1)} like {pattern}"
        if c == "contains":
            return f"{self.set(d - 1)}.contains({self.comma([self.pick([self.string, self.entity, self.long])(d - 1)])})"
        if c == "containsAll":
            return f"{self.set(d - 1)}.{self.pick(['containsAll', 'containsAny'])}({self.set(d - 1)})"
        if c == "isEmpty":
            return f"{self.set(d - 1)}.isEmpty()"
        if c == "and":
            return f"({self.bool(d - 1)} && {self.bool(d - 1)})"
        if c == "or":
            return f"({self.bool(d - 1)} || {self.bool(d - 1)})"
        if c == "not":
            return f"!{self.bool(d - 1)}"
        if c == "if":
            return f"(if {self.bool(d - 1)} then {self.bool(d - 1)} else {self.bool(d - 1)})"
        if c == "is":
            tail = f" in {self.entity(d - 1)}" if self.r.random() < 0.3 else ""
            return f"{self.entity(d - 1)} is {self.pick(['User', 'Group', 'Photo', 'Album'])}{tail}"
        if c == "ip":
            test = self.pick(['isInRange(ip("10.0.0.0/8"))', 'isInRange(ip("192.168.1.0/24"))', 'isLoopback()', 'isIpv4()',
                              'isIpv6()', 'isMulticast()', 'isInRange(ip("::/0"))', 'isInRange(ip("+10.0.0.0/8"))'])
            return f"context.addr.{test}"
        if c == "datetime":
            other = self.pick(['resource.expires', 'datetime("2026-01-01")', 'resource.expires.offset(duration("1d"))',
                               'context.now.toDate()'])
            return f"context.now {self.pick(['<', '>=', '=='])} {other}"
        if c == "decimal":
            return f"context.score.{self.pick(['lessThan', 'greaterThanOrEqual'])}(decimal({q(self.pick(['0.5', '1.2345', '-2.0']))}))"
        if c == "since":
            scope = q(self.pick(SCOPES))
            read = f"context.token.since[{scope}]"
            test = self.pick([f"{read} < context.now", f"{read} >= datetime(\"2026-11-22\")",
                              f"context.now.durationSince({read}) < duration(\"1h\")", f"{read} == {read}.toDate()"])
            guard = self.pick(["full", "full", "full", "has-only", "none"])
            if guard == "full":
                return f"(context has token && context.token.since has {scope} && {test})"
            if guard == "has-only":
                return f"(context has token && context.token.since has {scope})"
            return test
        if c == "sloppy":
            return self.any(d - 1)
        return self.bool(0)

    def head_entity(self, var, kinds):
        c = self.pick(["any", "any", "eq", "in", "is", "isin"])
        if c == "eq":
            return f"{var} == {self.ref(self.pick(kinds))}"
        if c == "in":
            return f"{var} in {self.ref(self.pick(kinds + ['Group', 'Album']))}"
        if c == "is":
            return f"{var} is {self.pick(kinds)}"
        if c == "isin":
            return f"{var} is {self.pick(kinds)} in {self.ref(self.pick(['Group', 'Album', 'User', 'Photo']))}"
        return var

    def head_action(self):
        c = self.pick(["any", "eq", "in", "inlist"])
        if c == "eq":
            return f"action == {self.ref('Action')}"
        if c == "in":
            group = self.pick(['Action::"write"', self.ref('Action')])
            return f"action in {group}"
        if c == "inlist":
            return "action in [" + self.comma([self.ref("Action") for _ in range(self.r.randint(0, 2))]) + "]"
        return "action"

    def policy(self):
        effect = self.pick(["permit", "permit", "forbid"])
        text = f"{effect} ({self.comma([self.head_entity('principal', ['User', 'Group']), self.head_action(), self.head_entity('resource', ['Photo', 'Album'])])})"
        for _ in range(self.r.choice([0, 1, 1, 2])):
            text += f"\n{self.pick(['when', 'unless'])} {{ {self.bool(self.r.randint(0, 3))} }}"
        return text + ";"

    def value(self, kind):
        r = self.r
        if kind == "long":
            return r.choice([0, 1, 5, 42, -7, 9223372036854775807])
        if kind == "string":
            return r.choice(STRINGS)
        if kind == "bool":
            return r.random() < 0.5
        if kind == "user":
            return {"__entity": {"type": "User", "id": r.choice(USERS + ["ghost"])}}
        return None

    def entities(self):
        out = []
        r = self.r

        def maybe(attrs, key, value):
            if self.typed or r.random() < 0.85:
                attrs[key] = value

        for user in USERS:
            attrs = {}
            maybe(attrs, "level", self.value("long"))
            maybe(attrs, "name", user if r.random() < 0.7 else self.value("string"))
            maybe(attrs, "active", self.value("bool"))
            maybe(attrs, "tags", r.sample(STRINGS, r.randint(0, 3)))
            maybe(attrs, "manager", self.value("user"))
            # Untyped populations also name a group no entity stands for ("ghost"), as a member
            # of a set and as a parent: `in` and `contains` must still agree with Cedar.
            ghost = [] if self.typed or r.random() < 0.8 else ["ghost"]
            maybe(attrs, "groups", [{"__entity": {"type": "Group", "id": g}} for g in r.sample(GROUPS, r.randint(0, 2)) + ghost])
            ghost = [] if self.typed or r.random() < 0.8 else ["ghost"]
            parents = [{"type": "Group", "id": g} for g in r.sample(GROUPS, r.randint(0, 2)) + ghost]
            out.append({"uid": {"type": "User", "id": user}, "attrs": attrs, "parents": parents})
        for group in GROUPS:
            parents = [{"type": "Group", "id": g} for g in r.sample(GROUPS, r.randint(0, 1)) if g != group]
            out.append({"uid": {"type": "Group", "id": group}, "attrs": {}, "parents": parents})
        if self.typed:  # no cycles among groups: each group's parent comes later in the list
            for index, group in enumerate(GROUPS):
                out[len(USERS) + index]["parents"] = [{"type": "Group", "id": g} for g in GROUPS[index + 1:] if r.random() < 0.4]
        for album in ALBUMS:
            out.append({"uid": {"type": "Album", "id": album}, "attrs": {"public": r.random() < 0.5}, "parents": []})
        for photo in PHOTOS:
            attrs = {}
            maybe(attrs, "owner", self.value("user"))
            maybe(attrs, "size", self.value("long"))
            maybe(attrs, "title", self.value("string"))
            maybe(attrs, "public", self.value("bool"))
            maybe(attrs, "labels", r.sample(STRINGS, r.randint(0, 3)))
            if self.typed:
                attrs["title"] = attrs["title"] if isinstance(attrs["title"], str) else "t"
            maybe(attrs, "expires", {"__extn": {"fn": "datetime", "arg": r.choice(["2025-06-01", "2026-11-22T10:00:00Z", "2027-01-01T00:00:00.500+0100"])}})
            parents = [{"type": "Album", "id": a} for a in r.sample(ALBUMS, r.randint(0, 1))]
            out.append({"uid": {"type": "Photo", "id": photo}, "attrs": attrs, "parents": parents})
        out.append({"uid": {"type": "Action", "id": "write"}, "attrs": {}, "parents": []})
        for action in ACTIONS:
            parents = [{"type": "Action", "id": "write"}] if action in ("edit", "delete") else []
            out.append({"uid": {"type": "Action", "id": action}, "attrs": {}, "parents": parents})
        return out

    def since(self):
        return {scope: {"__extn": {"fn": "datetime", "arg": self.r.choice(SINCE_TIMES)}}
                for scope in self.r.sample(SCOPES, self.r.randint(0, 3))}

    def request(self):
        r = self.r
        context = {}
        if r.random() < 0.9:
            context["n"] = self.value("long")
        if r.random() < 0.9:
            context["s"] = self.value("string")
        if r.random() < 0.9:
            context["flag"] = self.value("bool")
        if r.random() < 0.9:
            context["addr"] = {"__extn": {"fn": "ip", "arg": r.choice(["10.1.2.3", "192.168.1.77", "127.0.0.1", "::1", "224.0.0.9", "8.8.8.8"])}}
        if r.random() < 0.9:
            context["now"] = {"__extn": {"fn": "datetime", "arg": r.choice(["2026-11-22T10:00:00Z", "2025-01-01", "2026-11-22T09:00:00.500Z"])}}
        if r.random() < 0.9:
            context["score"] = {"__extn": {"fn": "decimal", "arg": r.choice(["0.4999", "1.2345", "-3.5", "0.5"])}}
        if r.random() < 0.8:
            context["token"] = {"granted": r.sample(SCOPES, r.randint(0, 3)), "since": self.since()}
        action = r.choice(ACTIONS)
        if self.typed:
            context = {"n": self.value("long"), "s": self.value("string"), "flag": self.value("bool"),
                       "addr": {"__extn": {"fn": "ip", "arg": r.choice(["10.1.2.3", "::1", "8.8.8.8"])}},
                       "now": {"__extn": {"fn": "datetime", "arg": r.choice(["2026-11-22T10:00:00Z", "2025-01-01"])}},
                       "score": {"__extn": {"fn": "decimal", "arg": r.choice(["0.4999", "1.2345", "-3.5"])}},
                       **({"token": {"granted": r.sample(SCOPES, r.randint(0, 3)), "declined": [], "expired": [],
                                     "revoked": r.sample(SCOPES, r.randint(0, 1)), "since": self.since()}} if r.random() < 0.8 else {})}
            pt = "User" if action in ("edit", "delete") else r.choice(["User", "Group"])
            rt = "Photo" if action in ("edit", "delete") else r.choice(["Photo", "Album"])
            pi = r.choice(USERS if pt == "User" else GROUPS)
            ri = r.choice(PHOTOS if rt == "Photo" else ALBUMS)
            return {"principal": {"type": pt, "id": pi}, "action": {"type": "Action", "id": action},
                    "resource": {"type": rt, "id": ri}, "context": context}
        pt, pi = self.uid(r.choice(["User", "User", "Group"]))
        rt, ri = self.uid(r.choice(["Photo", "Photo", "Album"]))
        return {"principal": {"type": pt, "id": pi}, "action": {"type": "Action", "id": action},
                "resource": {"type": rt, "id": ri}, "context": context}


def policy_id(error):
    match = re.search(r"policy `([^`]+)`", str(error))
    if not match:
        raise SystemExit(f"cedar_oracle: an error without a policy id: {error}")
    return match.group(1)


def main():
    seed, scenarios, per = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    typed = len(sys.argv) > 4 and sys.argv[4] == "typed"
    rng = random.Random(seed)
    gen = Gen(rng, typed)
    for _ in range(scenarios):
        texts = [gen.policy() for _ in range(rng.randint(1, 5))]
        policies = "\n\n".join(texts)
        entities = gen.entities()
        requests = [gen.request() for _ in range(per)]
        try:
            results = cedarpy.is_authorized_batch(requests, policies, entities)
        except ValueError as error:  # Cedar refuses the policy text: Keysmith must refuse it too
            print(json.dumps({"refused": policies, "why": str(error)[:300]}, ensure_ascii=False), flush=True)
            continue
        entity_errors = [str(e) for r in results for e in r.diagnostics.errors if "failed to parse entities" in str(e)]
        if entity_errors:  # Cedar refuses the entities (a cycle of parents): Keysmith must refuse them too
            print(json.dumps({"refusedEntities": entities, "why": entity_errors[0][-200:]}, ensure_ascii=False), flush=True)
            continue
        parse_errors = [str(e) for r in results for e in r.diagnostics.errors if "parse error" in str(e)]
        if parse_errors:  # Cedar refuses the policy text: Keysmith must refuse it too
            print(json.dumps({"refused": policies, "why": parse_errors[0][:300]}, ensure_ascii=False), flush=True)
            continue
        out = []
        for request, result in zip(requests, results):
            item = dict(request)
            item["decision"] = "allow" if result.allowed else "deny"
            item["reasons"] = sorted(result.diagnostics.reasons)
            item["errors"] = sorted({policy_id(e) for e in result.diagnostics.errors})
            out.append(item)
        document = {"policies": policies, "entities": entities, "requests": out,
                    "json": json.loads(cedarpy.policies_to_json_str(policies))}
        if typed:
            validation = cedarpy.validate_policies(policies, CEDAR_SCHEMA)
            document["schema"] = SCHEMA
            document["cedarValid"] = bool(validation.validation_passed)
            document["cedarErrors"] = [str(e)[:300] for e in validation.errors]
            document["each"] = []
            for text in texts:
                try:
                    alone = cedarpy.validate_policies(text, CEDAR_SCHEMA)
                    document["each"].append({"text": text, "valid": bool(alone.validation_passed),
                                             "errors": [str(e)[:300] for e in alone.errors]})
                except ValueError:
                    pass
        print(json.dumps(document, ensure_ascii=False), flush=True)


if __name__ == "__main__":
    main()
