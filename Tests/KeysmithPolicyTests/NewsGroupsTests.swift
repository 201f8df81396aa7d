import Foundation
import Keysmith
import KeysmithPolicy
import KeysmithTokens
import Testing

@Suite("news-groups scenario")
struct NewsGroupsTests {
    @Test("every expected case gets its decision and its reasons, from the Swift rules and from the policy file",
          arguments: ["exhaustive.expected.jsonl", "g4_u1000_k2000_s7.expected.jsonl"])
    func allCases(file: String) throws {
        let cases = try NewsGroups.cases(file)
        #expect(cases.count >= 390)
        let swiftEngine = try NewsGroups.engine()
        let fileEngine = try NewsGroups.fileEngine()
        var mismatches = 0
        for (index, testCase) in cases.enumerated() {
            let request = testCase.request
            for (engine, which) in [(swiftEngine, "swift"), (fileEngine, "file")] {
                let decision = engine.decide(request)
                let decided = decision.isAllowed ? "allow" : "deny"
                if decided != testCase.expected || decision.policies.sorted() != testCase.cedar_reasons.sorted() {
                    mismatches += 1
                    if mismatches <= 10 {
                        Issue.record("\(file) case \(index + 1) (\(which)): expected \(testCase.expected) \(testCase.cedar_reasons), got \(decision.explanation)")
                    }
                }
                // The prepared fast path gives the same answer.
                let prepared = engine.prepare(request.principal)
                let fast = engine.decide(prepared, request.action, request.resource)
                #expect(fast.isAllowed == decision.isAllowed && fast.policies == decision.policies)
            }
        }
        #expect(mismatches == 0)
    }

    @Test("the Swift rules and the policy file are the same policies")
    func sameRules() throws {
        let swift = try NewsGroups.engine().allPolicies.map { "\($0.name) \($0.effect) \($0.roles) \($0.actions) \($0.scopes)" }
        let file = try NewsGroups.fileEngine().allPolicies.map { "\($0.name) \($0.effect) \($0.roles) \($0.actions) \($0.scopes)" }
        #expect(swift == file)
    }
}

@Suite("policy engine")
struct PolicyEngineTests {
    let read = Action("read"), write = Action("write"), purge = Action("purge")
    let viewer = Role("viewer"), editor = Role("editor"), owner = Role("owner")
    let doc = Resource(type: "doc", id: "d1")

    func engine(_ policies: [Policy]) throws -> PolicyEngine {
        try PolicyEngine(
            roles: [RoleDefinition(viewer), RoleDefinition(editor, inherits: [viewer]), RoleDefinition(owner, inherits: [editor])],
            actions: [read, write, purge], policies: policies)
    }

    func someone(_ roles: Set<Role> = [], on: [String: Set<Role>] = [:], scopes: Set<Scope> = []) -> Principal {
        Principal(id: "p", roles: roles, resourceRoles: on, scopes: .fixed(scopes))
    }

    @Test("default deny: nothing applies, nothing is allowed, and the decision says so")
    func defaultDeny() throws {
        let engine = try engine([viewer.shouldBeAbleTo(read).named("viewers-read")])
        let decision = engine.decide(Request(principal: someone(), action: read, resource: doc))
        #expect(!decision.isAllowed)
        #expect(decision.basis == .noPolicyApplied)
        #expect(decision.policies.isEmpty)
        #expect(decision.explanation == "deny: no policy applies (default deny)")
    }

    @Test("an unconditioned policy still checks its action (Koosa allowed every action of the role)")
    func unconditionedChecksAction() throws {
        let engine = try engine([viewer.shouldBeAbleTo(read).named("viewers-read")])
        #expect(someone([viewer]).can(read, on: doc, under: engine))
        #expect(!someone([viewer]).can(write, on: doc, under: engine))
        #expect(!someone([viewer]).can(purge, on: doc, under: engine))
    }

    @Test("roles inherit: an owner can do what editors and viewers can, not the other way round")
    func hierarchy() throws {
        let engine = try engine([
            viewer.shouldBeAbleTo(read).named("r"), editor.shouldBeAbleTo(write).named("w"), owner.shouldBeAbleTo(purge).named("p"),
        ])
        #expect(someone([owner]).can(read, on: doc, under: engine))
        #expect(someone([owner]).can(write, on: doc, under: engine))
        #expect(someone([owner]).can(purge, on: doc, under: engine))
        #expect(someone([editor]).can(read, on: doc, under: engine))
        #expect(!someone([editor]).can(purge, on: doc, under: engine))
        #expect(!someone([viewer]).can(write, on: doc, under: engine))
        #expect(engine.decide(Request(principal: someone([owner]), action: read, resource: doc)).policies == ["r"])
    }

    @Test("a role held on one resource applies on that resource only: editor of d1, viewer of d2")
    func resourceScopedRoles() throws {
        let engine = try engine([viewer.shouldBeAbleTo(read).named("r"), editor.shouldBeAbleTo(write).named("w")])
        let principal = someone(on: ["d1": [editor], "d2": [viewer]])
        let d2 = Resource(type: "doc", id: "d2"), d3 = Resource(type: "doc", id: "d3")
        #expect(principal.can(write, on: doc, under: engine))
        #expect(principal.can(read, on: doc, under: engine))
        #expect(principal.can(read, on: d2, under: engine))
        #expect(!principal.can(write, on: d2, under: engine))
        #expect(!principal.can(read, on: d3, under: engine))
    }

    @Test("a forbid beats every permit, and the decision names the forbid")
    func forbidWins() throws {
        let engine = try engine([
            owner.shouldBeAbleTo(purge).named("owners-purge"),
            Role.authenticated.shouldNotBeAbleTo(purge).when(.resourceAttribute("locked", equals: .bool(true))).named("locked"),
        ])
        let locked = Resource(type: "doc", id: "d1", attributes: ["locked": .bool(true)])
        let decision = engine.decide(Request(principal: someone([owner]), action: purge, resource: locked))
        #expect(!decision.isAllowed)
        #expect(decision.basis == .forbidden)
        #expect(decision.policies == ["locked"])
        #expect(someone([owner]).can(purge, on: doc, under: engine))
    }

    @Test("a condition that throws denies, and the decision reports the error")
    func throwingCondition() throws {
        struct ClockUnavailable: Error, CustomStringConvertible { var description: String { "the clock is unavailable" } }
        let engine = try engine([
            viewer.shouldBeAbleTo(read).named("plain"),
            editor.shouldBeAbleTo(read).when { _ in throw ClockUnavailable() }.named("office-hours"),
        ])
        let decision = engine.decide(Request(principal: someone([editor]), action: read, resource: doc))
        #expect(!decision.isAllowed)
        #expect(decision.basis == .conditionFailed)
        #expect(decision.errors.first?.policy == "office-hours")
        #expect(decision.explanation.contains("the clock is unavailable"))
        // Those the failing policy does not concern are unaffected.
        #expect(someone([viewer]).can(read, on: doc, under: engine))
    }

    @Test("scopes are a condition: a permit requiring a scope, and a revocation that changes the very next decision")
    func scopes() async throws {
        let edit = try Scope("docs:write")
        let engine = try engine([editor.shouldBeAbleTo(write).requiring([edit]).named("scoped-write")])
        #expect(someone([editor], scopes: [edit]).can(write, on: doc, under: engine))
        #expect(!someone([editor]).can(write, on: doc, under: engine))

        // Live scopes from a token keeper's revocation, through the permission manager.
        let keeper = TokenKeeper(store: MemoryStore())
        let token = try keeper.importResponse(
            Data(#"{"access_token":"a","token_type":"Bearer","scope":"docs:write"}"#.utf8), service: "docs", account: "p",
            requested: [])
        let permissions = PermissionManager(token: token, at: keeper.now)
        let live = Principal(id: "p", roles: [editor], scopes: .live(permissions))
        let prepared = engine.prepare(live)
        #expect(engine.decide(prepared, write, doc).isAllowed)
        let revoked = try keeper.revoke([edit], service: "docs", account: "p", reason: "test")
        permissions.update(from: revoked, at: keeper.now)
        #expect(!engine.decide(prepared, write, doc).isAllowed)
        // And from a token read at an instant.
        #expect(!Principal(id: "p", roles: [editor], token: revoked, at: keeper.now).can(write, on: doc, under: engine))
    }

    @Test("building an engine reports every problem: unknown roles and actions, duplicates, cycles")
    func validation() {
        let ghost = Role("ghost"), fly = Action("fly")
        let error = #expect(throws: PolicyValidationError.self) {
            try PolicyEngine(
                roles: [RoleDefinition(viewer, inherits: [owner]), RoleDefinition(owner, inherits: [viewer]), RoleDefinition(editor, inherits: [ghost])],
                actions: [read],
                policies: [ghost.shouldBeAbleTo(read).named("a"), viewer.shouldBeAbleTo(fly).named("a")])
        }
        let messages = error?.problems.map(\.message) ?? []
        #expect(messages.contains { $0.contains("unknown role \"ghost\"") })
        #expect(messages.contains { $0.contains("unknown action \"fly\"") })
        #expect(messages.contains { $0.contains("used twice") })
        #expect(messages.contains { $0.contains("cycle") })
    }

    @Test("many tasks deciding at once get the same answers as one")
    func concurrentChecks() async throws {
        let engine = try NewsGroups.engine()
        let cases = try NewsGroups.cases("exhaustive.expected.jsonl")
        let expected = cases.map { $0.expected == "allow" }
        let results = try await withThrowingTaskGroup(of: [Bool].self) { group in
            for _ in 0..<8 {
                group.addTask { cases.map { engine.decide($0.request).isAllowed } }
            }
            var all: [[Bool]] = []
            for try await result in group { all.append(result) }
            return all
        }
        #expect(results.count == 8)
        #expect(results.allSatisfy { $0 == expected })
    }
}

@Suite("policy files")
struct PolicyFileTests {
    @Test("every problem is reported with its line")
    func validationWithLines() throws {
        let text = """
            {
              "roles": ["member", {"name": "admin", "inherits": ["moderator"]}],
              "actions": ["browse"],
              "attributes": {"resource": {"public": "bool"}},
              "policies": [
                {"name": "a", "effect": "permit", "roles": ["member"], "actions": ["browse"]},
                {"name": "b", "effect": "allow", "roles": ["member"], "actions": ["browse"]},
                {"name": "c", "effect": "permit", "roles": ["guest"], "actions": ["fly"],
                 "when": [{"resource": "public", "equals": "yes"}, {"resource": "color", "equals": "red"}],
                 "scopes": ["bad scope"], "colour": 1}
              ]
            }
            """
        let error = #expect(throws: PolicyValidationError.self) { try PolicyFile.engine(from: Array(text.utf8)) }
        let problems = error?.problems.map(\.description) ?? []
        let expectations: [(Int, String)] = [
            (2, "undeclared role \"moderator\""), (7, "\"effect\""), (8, "undeclared role \"guest\""),
            (8, "undeclared action \"fly\""), (9, "compares the bool attribute \"public\" with string"),
            (9, "undeclared resource attribute \"color\""), (10, "invalid scope"), (10, "unknown field \"colour\""),
        ]
        for (line, fragment) in expectations {
            #expect(problems.contains { $0.hasPrefix("line \(line):") && $0.contains(fragment) }, "line \(line): \(fragment) in \(problems)")
        }
    }

    @Test("malformed JSON names its line")
    func syntax() {
        let error = #expect(throws: PolicyValidationError.self) {
            try PolicyFile.engine(from: Array("{\n  \"roles\": [\n    \"a\",\n  ]\n}".utf8))
        }
        #expect(error?.problems.first?.line == 4)
    }

    @Test("a test file runs its cases and reports each failure")
    func testRunner() throws {
        let engine = try NewsGroups.fileEngine()
        let text = """
            {"policy": "news-groups.json", "cases": [
              {"name": "anonymous browses a public group", "expected": "allow", "reasons": ["browse-public"],
               "request": {"principal": {"anonymous": true}, "action": "browse", "resource": {"type": "group", "id": "g1", "attributes": {"public": true}}}},
              {"name": "wrong on purpose", "expected": "allow",
               "request": {"principal": {"id": "u", "scopes": ["posts:write"], "resourceRoles": {"g1": ["member"]}}, "action": "post", "resource": {"type": "group", "id": "g2", "attributes": {"public": false}}}}
            ]}
            """
        let file = try PolicyTestFile(bytes: Array(text.utf8))
        #expect(file.policyPath == "news-groups.json")
        let outcomes = file.run(engine)
        #expect(outcomes.map(\.passed) == [true, false])
        #expect(outcomes[1].failure?.contains("expected allow") == true)
        let bad = #expect(throws: (any Error).self) { try PolicyTestFile(bytes: Array(#"{"cases": [{"expected": "maybe"}]}"#.utf8)) }
        #expect("\(bad!)".contains("line 1"))
    }
}
