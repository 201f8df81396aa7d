#!/usr/bin/env python3
"""Four applications' populations and requests, decided by Cedar itself (cedarpy from PyPI).

Usage: applications.py SEED REQUESTS_PER_APPLICATION [APPLICATION ...] [--no-oracle]

For each application of docs/examples/ (news-groups, todo, photo-sharing, repositories) this
builds a deterministic population in Cedar's JSON entity form and random requests over it, each
with a token (or none) whose scopes are granted, declined, expired or revoked since some time,
and decides them with Cedar against the application's own policies.cedar and schema (Cedar checks
the entities and every request against the schema, as Keysmith must). Prints one JSON document
per application:

  {"application": name, "cedarValid": bool, "cedarErrors": [...], "entities": [...],
   "requests": [{"principal", "action", "resource", "context", "token": {scope: [state, seconds]} | null,
                 "decision": "allow"|"deny", "reasons": [policy ids], "errors": [policy ids]}]}

The request's "context" leaves the token out: Keysmith is given it as a token (a TokenView); Cedar
is given it as context.token = {granted, declined, expired, revoked: sets of names, since: {name:
datetime}}, the record Keysmith's policies read. With --no-oracle, nothing is decided (the
benchmarks use the population only).

Tests/KeysmithPolicyTests/ApplicationTests.swift decides the same requests and compares.
"""
import json
import os
import random
import re
import sys
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.normpath(os.path.join(HERE, "..", "..", "..", "docs", "examples"))
NOW = 1795860000  # 2026-11-28T08:00:00Z, whole seconds (Keysmith's times are milliseconds)
STATES = ["granted", "declined", "expired", "revoked"]


def iso(seconds):
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def ref(kind, ident):
    return {"__entity": {"type": kind, "id": ident}}


def uid(kind, ident):
    return {"type": kind, "id": ident}


def dt(seconds):
    return {"__extn": {"fn": "datetime", "arg": iso(seconds)}}


def ip(text):
    return {"__extn": {"fn": "ip", "arg": text}}


def entity(kind, ident, attrs=None, parents=()):
    return {"uid": uid(kind, ident), "attrs": attrs or {}, "parents": [uid(*p) for p in parents]}


class Application:
    """A population and a request generator; subclasses fill them in."""
    name = ""
    scopes = []

    def __init__(self, rng):
        self.r = rng
        self.entities = []
        self.build()

    def pick(self, items):
        return self.r.choice(items)

    def some(self, items, most):
        return self.r.sample(items, self.r.randint(0, min(most, len(items))))

    def token(self):
        """None (no token), or each of the application's scopes in a state since some time."""
        if self.r.random() < 0.08:
            return None
        token = {}
        for scope in self.scopes:
            roll = self.r.random()
            if roll < 0.15:
                continue
            state = "granted" if roll < 0.8 else self.pick(STATES[1:])
            token[scope] = [state, NOW - self.r.randint(0, 3 * 3600)]
        return token

    def cedar_schema(self, text):
        """The schema for Cedar: context.token declared (Keysmith declares it by itself)."""
        since = ", ".join(f'"{scope}"?: datetime' for scope in self.scopes)
        token = ("token?: { granted: Set<String>, declined: Set<String>, expired: Set<String>, "
                 f"revoked: Set<String>, since: {{{since}}} }}")
        if "type Context = {" in text:
            return text.replace("type Context = {", "type Context = { " + token + ",")
        return re.sub(r"resource: \[([^\]]*)\] \}", r"resource: [\1], context: { " + token.replace("\\", "\\\\") + " } }", text)


class NewsGroups(Application):
    name = "news-groups"
    scopes = ["groups:read", "posts:write", "posts:delete"]

    def build(self):
        self.groups = [f"g{i}" for i in range(30)]
        for group in self.groups:
            self.entities.append(entity("Group", group, {"public": self.r.random() < 0.4}))
        self.users = []
        for i in range(40):
            kind = "Anonymous" if i % 8 == 0 else "User"
            self.users.append((kind, f"u{i}"))
            self.entities.append(entity(kind, f"u{i}", {
                "member_of": [ref("Group", g) for g in self.some(self.groups, 4)],
                "admin_of": [ref("Group", g) for g in self.some(self.groups, 2)],
                "super_admin": i % 13 == 0}))

    def request(self):
        return self.pick(self.users), ("Action", self.pick(["browse", "post", "delete"])), ("Group", self.pick(self.groups)), {}

    def token(self):
        return None if self.request_principal[0] == "Anonymous" else super().token()


class Todo(Application):
    name = "todo"
    scopes = ["todo:read", "todo:write", "todo:share"]

    def build(self):
        orgs = ["acme", "globex"]
        for org in orgs:
            self.entities.append(entity("Org", org))
        self.teams = []
        for i in range(10):
            # Teams nest: a team's parent is an earlier team or an org.
            parent = ("Team", self.pick(self.teams)) if self.teams and self.r.random() < 0.6 else ("Org", self.pick(orgs))
            self.teams.append(f"t{i}")
            self.entities.append(entity("Team", f"t{i}", parents=[parent]))
        self.users = [f"u{i}" for i in range(30)]
        for i, user in enumerate(self.users):
            attrs = {"name": f"User {i}"}
            if i % 7 == 3:
                attrs["suspended"] = True
            elif self.r.random() < 0.5:
                attrs["suspended"] = False
            parents = [("Team", t) for t in self.some(self.teams, 2)] + [("Org", o) for o in self.some(orgs, 1)]
            self.entities.append(entity("User", user, attrs, parents))
        self.lists = [f"l{i}" for i in range(20)]
        self.list_owner, self.list_people = {}, {}
        for name in self.lists:
            owner = self.pick(self.users)
            readers, editors = self.some(self.users, 4), self.some(self.users, 3)
            self.list_owner[name] = owner
            self.list_people[name] = [owner] + readers + editors
            self.entities.append(entity("List", name, {
                "owner": ref("User", owner),
                "readers": [ref("User", u) for u in readers],
                "editors": [ref("User", u) for u in editors],
                "readerTeams": [ref("Team", t) for t in self.some(self.teams, 2)],
                "editorTeams": [ref("Team", t) for t in self.some(self.teams, 2)],
                "archived": self.r.random() < 0.15}))
        self.tasks = []
        for i in range(60):
            name, parent = f"task{i}", self.pick(self.lists)
            self.tasks.append((name, parent))
            attrs = {"list": ref("List", parent), "creator": ref("User", self.pick(self.list_people[parent])),
                     "priority": self.r.randint(0, 4), "labels": self.some(["home", "work", "locked", "later"], 2)}
            if self.r.random() < 0.6:
                attrs["assignee"] = ref("User", self.pick(self.users))
            if self.r.random() < 0.6:
                attrs["due"] = dt(NOW + self.r.randint(-20, 5) * 86400)
            self.entities.append(entity("Task", name, attrs, [("List", parent)]))

    def request(self):
        if self.r.random() < 0.5:
            resource = ("List", self.pick(self.lists))
            action = self.pick(["read", "edit", "complete", "delete", "share"])
            people = self.list_people[resource[1]]
        else:
            task, parent = self.pick(self.tasks)
            resource = ("Task", task)
            action = self.pick(["read", "edit", "complete", "delete"])
            people = self.list_people[parent]
        principal = self.pick(people) if self.r.random() < 0.6 else self.pick(self.users)
        return ("User", principal), ("Action", action), resource, {
            "now": dt(NOW + self.r.randint(-3600, 3600)), "mfa": self.r.random() < 0.5}


class PhotoSharing(Application):
    name = "photo-sharing"
    scopes = ["photos:read", "photos:write"]

    def build(self):
        accounts = ["family", "studio", "club"]
        for account in accounts:
            self.entities.append(entity("Account", account))
        self.users = [f"u{i}" for i in range(30)]
        for i, user in enumerate(self.users):
            self.entities.append(entity("User", user, {
                "age": self.r.randint(12, 70), "verified": self.r.random() < 0.7,
                "adminOf": [ref("Account", a) for a in self.some(accounts, 1)] if i % 5 == 0 else [],
                "blocked": [ref("User", u) for u in self.some(self.users, 2)]},
                [("Account", self.pick(accounts))]))
        self.albums, self.album_people = [], {}
        for i in range(15):
            # Albums nest: an album's parent is an earlier album or an account.
            parent = ("Album", self.pick(self.albums)) if self.albums and self.r.random() < 0.5 else ("Account", self.pick(accounts))
            name, owner, viewers = f"a{i}", self.pick(self.users), self.some(self.users, 5)
            self.albums.append(name)
            self.album_people[name] = [owner] + viewers
            self.entities.append(entity("Album", name, {
                "owner": ref("User", owner), "public": self.r.random() < 0.5, "viewers": [ref("User", u) for u in viewers]},
                [parent]))
        self.photos = []
        for i in range(60):
            name, album = f"p{i}", self.pick(self.albums)
            self.photos.append((name, album))
            attrs = {"owner": ref("User", self.pick(self.album_people[album])), "album": ref("Album", album),
                     "public": self.r.random() < 0.5, "adult": self.r.random() < 0.2,
                     "tags": self.some(["beach", "locked", "family", "night"], 2), "takenAt": dt(NOW - self.r.randint(0, 900) * 86400)}
            if self.r.random() < 0.4:
                attrs["shareExpires"] = dt(NOW + self.r.randint(-48, 48) * 3600)
            if self.r.random() < 0.5:
                location = {"country": self.pick(["DE", "FR", "US"])}
                if self.r.random() < 0.5:
                    location["city"] = self.pick(["Berlin", "Paris", "Boston"])
                attrs["location"] = location
            self.entities.append(entity("Photo", name, attrs, [("Album", album)]))

    def request(self):
        if self.r.random() < 0.7:
            photo, album = self.pick(self.photos)
            resource, people = ("Photo", photo), self.album_people[album]
        else:
            album = self.pick(self.albums)
            resource, people = ("Album", album), self.album_people[album]
        principal = self.pick(people) if self.r.random() < 0.5 else self.pick(self.users)
        context = {"now": dt(NOW + self.r.randint(-3600, 3600)),
                   "ip": ip(self.pick(["10.1.2.3", "10.200.0.9", "192.0.2.7", "2001:db8::1"]))}
        if self.r.random() < 0.4:
            context["link"] = self.pick(["https://photos.example/s/abc", "https://photos.example/x/abc", "http://photos.example/s/abc"])
        action = self.pick(["view", "comment", "download", "edit", "tag", "delete"])
        return ("User", principal), ("Action", action), resource, context


class Repositories(Application):
    name = "repositories"
    scopes = ["repo", "delete_repo", "read:org"]

    def build(self):
        orgs = ["acme", "initech", "umbrella"]
        self.org_owners = {}
        self.users = [f"u{i}" for i in range(40)]
        for org in orgs:
            owners = self.some(self.users, 2)
            self.org_owners[org] = owners
            attrs = {"owners": [ref("User", u) for u in owners]}
            if self.r.random() < 0.5:
                attrs["allowedRange"] = ip(self.pick(["10.0.0.0/8", "10.0.0.0/8", "192.0.2.0/24"]))
            self.entities.append(entity("Org", org, attrs))
        self.entities.append(entity("Role", "security"))
        self.entities.append(entity("Role", "release"))
        self.teams, self.team_org = [], {}
        for i in range(12):
            org = self.pick(orgs)
            same = [t for t in self.teams if self.team_org[t] == org]
            parent = ("Team", self.pick(same)) if same and self.r.random() < 0.6 else ("Org", org)
            self.teams.append(f"t{i}")
            self.team_org[f"t{i}"] = org
            self.entities.append(entity("Team", f"t{i}", parents=[parent]))
        for i, user in enumerate(self.users):
            parents = [("Team", t) for t in self.some(self.teams, 3)] + [("Role", r) for r in self.some(["security", "release"], 2)]
            self.entities.append(entity("User", user, {"suspended": self.r.random() < 0.05, "siteAdmin": i % 11 == 0}, parents))
        self.repos, self.repo_people = [], {}
        for i in range(25):
            org, name = self.pick(orgs), f"r{i}"
            outside_w, outside_r = self.some(self.users, 2), self.some(self.users, 2)
            self.repos.append(name)
            self.repo_people[name] = self.org_owners[org] + outside_w + outside_r
            self.entities.append(entity("Repository", name, {
                "org": ref("Org", org), "visibility": self.pick(["public", "private", "internal"]),
                "archived": self.r.random() < 0.15,
                "maintainers": [ref("Team", t) for t in self.some(self.teams, 2)],
                "writers": [ref("Team", t) for t in self.some(self.teams, 2)],
                "readers": [ref("Team", t) for t in self.some(self.teams, 2)],
                "outsideWriters": [ref("User", u) for u in outside_w], "outsideReaders": [ref("User", u) for u in outside_r],
                "topics": self.some(["crypto", "web", "payments", "docs"], 2)}, [("Org", org)]))
        self.issues = []
        for i in range(40):
            repo = self.pick(self.repos)
            self.issues.append(f"i{i}")
            self.entities.append(entity("Issue", f"i{i}", {
                "repo": ref("Repository", repo), "reporter": ref("User", self.pick(self.users)), "locked": self.r.random() < 0.2},
                [("Repository", repo)]))

    def request(self):
        if self.r.random() < 0.75:
            repo = self.pick(self.repos)
            resource, people = ("Repository", repo), self.repo_people[repo]
            action = self.pick(["pull", "comment", "push", "triage", "settings", "protectBranch", "release", "deleteRepository"])
        else:
            resource, people = ("Issue", self.pick(self.issues)), self.users
            action = self.pick(["pull", "comment", "push", "triage", "editIssue"])
        principal = self.pick(people) if people and self.r.random() < 0.4 else self.pick(self.users)
        context = {"ip": ip(self.pick(["10.9.8.7", "10.0.0.1", "192.0.2.44", "198.51.100.1"])),
                   "now": dt(NOW + self.r.randint(-3600, 3600)), "mfa": self.r.random() < 0.6}
        return ("User", principal), ("Action", action), resource, context


APPLICATIONS = {cls.name: cls for cls in [NewsGroups, Todo, PhotoSharing, Repositories]}


def cedar_token(token):
    out = {state: [] for state in STATES}
    out["since"] = {}
    for scope, (state, seconds) in sorted(token.items()):
        out[state].append(scope)
        out["since"][scope] = dt(seconds)
    return out


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    oracle = "--no-oracle" not in sys.argv
    seed, count = int(args[0]), int(args[1])
    names = args[2:] or list(APPLICATIONS)
    if oracle:
        import cedarpy
        from cedar_oracle import policy_id  # beside this file
    for name in names:
        rng = random.Random(f"{seed}/{name}")
        app = APPLICATIONS[name](rng)
        folder = os.path.join(EXAMPLES, name)
        policies = open(os.path.join(folder, "policies.cedar"), encoding="utf-8").read()
        schema = app.cedar_schema(open(os.path.join(folder, "schema.cedarschema"), encoding="utf-8").read())
        requests = []
        for _ in range(count):
            principal, action, resource, context = app.request()
            app.request_principal = principal
            requests.append({"principal": uid(*principal), "action": uid(*action), "resource": uid(*resource),
                             "context": context, "token": app.token()})
        document = {"application": name, "entities": app.entities, "requests": requests}
        if oracle:
            validation = cedarpy.validate_policies(policies, schema)
            document["cedarValid"] = bool(validation.validation_passed)
            document["cedarErrors"] = [str(e)[:300] for e in validation.errors]
            cedar_requests = []
            for item in requests:
                context = dict(item["context"])
                if item["token"] is not None:
                    context["token"] = cedar_token(item["token"])
                cedar_requests.append({"principal": item["principal"], "action": item["action"],
                                       "resource": item["resource"], "context": context})
            results = cedarpy.is_authorized_batch(cedar_requests, policies, app.entities, schema)
            for item, result in zip(requests, results):
                problems = [str(e) for e in result.diagnostics.errors if "while evaluating policy" not in str(e)]
                if problems:  # Cedar refused the request or the entities: the generator is wrong
                    raise SystemExit(f"applications.py: Cedar refused a {name} request: {problems[0][:400]}")
                item["decision"] = "allow" if result.allowed else "deny"
                item["reasons"] = sorted(result.diagnostics.reasons)
                item["errors"] = sorted({policy_id(e) for e in result.diagnostics.errors})
        print(json.dumps(document, ensure_ascii=False), flush=True)


if __name__ == "__main__":
    main()
