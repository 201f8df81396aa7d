import Foundation
@testable import KeysmithPolicy
import KeysmithTokenPolicy
import KeysmithTokens
import Testing

/// The news-groups cases decided by the policy language (docs/examples/news-groups/policies.cedar).
@Suite("Policy language: news groups")
struct PolicyLanguageNewsGroupsTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    static func policies() throws -> Policies {
        let url = root.appendingPathComponent("docs/examples/news-groups/policies.cedar")
        return try Policies(text: try String(contentsOf: url, encoding: .utf8), file: "policies.cedar")
    }

    static func decide(_ item: NewsGroups.Case, _ policies: Policies) throws -> AuthorizationDecision {
        struct GroupAttributes: Encodable { var `public`: Bool }
        struct PrincipalAttributes: Encodable { var member_of: [EntityUID]; var admin_of: [EntityUID]; var super_admin: Bool }
        let group = try Entity(uid: EntityUID(type: "Group", id: item.group.id), attributes: GroupAttributes(public: item.group.public))
        let who = item.principal
        let groups = { (ids: [String]) in ids.map { EntityUID(type: "Group", id: $0) } }
        let principal = try Entity(uid: EntityUID(type: who.anonymous ? "Anonymous" : "User", id: who.id),
                                   attributes: PrincipalAttributes(member_of: groups(who.member_of), admin_of: groups(who.admin_of),
                                                                   super_admin: who.super_admin))
        let entities = try EntityStore([group, principal])
        let token: TokenView? = who.anonymous ? nil : TokenView(granted: Set(try who.scopes.map { try Scope($0) }))
        let request = AuthorizationRequest(principal: principal.uid, action: EntityUID(type: "Action", id: item.action),
                                           resource: group.uid, token: token)
        return policies.isAuthorized(request, entities: entities)
    }

    @Test("every shared case gets the expected decision and the reference's reasons, from the file and from the Swift builders",
          arguments: ["exhaustive.expected.jsonl", "g4_u1000_k2000_s7.expected.jsonl"], [false, true])
    func sharedCases(file: String, built: Bool) throws {
        let policies = built ? try NewsGroups.built() : try Self.policies()
        let cases = try NewsGroups.cases(file)
        #expect(cases.count > 300)
        for item in cases {
            let decision = try Self.decide(item, policies)
            #expect(decision.outcome == item.expected, "\(item.principal.id) \(item.action) \(item.group.id)")
            #expect(Set(decision.determining.map(\.id)) == Set(item.cedar_reasons), "\(item.principal.id) \(item.action)")
            #expect(decision.failures.isEmpty)
        }
    }

    @Test("the news-groups policies validate against their schema, and so does every case's data")
    func validates() throws {
        let url = Self.root.appendingPathComponent("docs/examples/news-groups/schema.cedarschema")
        let schema = try Schema(text: try String(contentsOf: url, encoding: .utf8), file: "schema.cedarschema")
        try schema.validate(try Self.policies())
        let cases = try NewsGroups.cases("exhaustive.expected.jsonl")
        #expect(cases.count > 0)
        for item in cases {
            let uid = EntityUID(type: item.principal.anonymous ? "Anonymous" : "User", id: item.principal.id)
            try schema.validate(AuthorizationRequest(principal: uid, action: EntityUID(type: "Action", id: item.action),
                                                     resource: EntityUID(type: "Group", id: item.group.id)))
        }
        // The request check is not a pass-through: the same principal with the resource and
        // action of another type, or an undeclared action, is refused.
        let first = try #require(cases.first)
        let uid = EntityUID(type: first.principal.anonymous ? "Anonymous" : "User", id: first.principal.id)
        #expect(throws: PolicyDiagnostics.self) {
            try schema.validate(AuthorizationRequest(principal: uid, action: EntityUID(type: "Action", id: first.action),
                                                     resource: EntityUID(type: "Post", id: first.group.id)))
        }
        #expect(throws: PolicyDiagnostics.self) {
            try schema.validate(AuthorizationRequest(principal: uid, action: EntityUID(type: "Action", id: "vote"),
                                                     resource: EntityUID(type: "Group", id: first.group.id)))
        }
    }

    @Test("builders: requiring is for permits and unlessGranted for forbids; a bad condition names the Swift line")
    func builders() throws {
        #expect(throws: PolicyDiagnostics.self) { try Policies { Role("a").shouldBeAbleTo("x").unlessGranted("s") } }
        #expect(throws: PolicyDiagnostics.self) { try Policies { Role("a").shouldNotBeAbleTo("x").requiring("s") } }
        let line = #line + 1
        let error = #expect(throws: PolicyDiagnostics.self) { try Policies { Role("a").shouldBeAbleTo("x").when("principal.a = 1") } }
        #expect(error?.problems.first?.location.file == "\(#fileID):\(line)")
        let built = try Policies { Role("editor").shouldBeAbleTo("publish").on("Post").requiring("posts:write").named("editors") }
        #expect(built.text == """
            @id("editors")
            permit (principal in Role::"editor", action == Action::"publish", resource is Post)
            when { context has token && context.token.granted.containsAll(["posts:write"]) };

            """)
    }

    @Test("a denial by a scope forbid names the scope and its state")
    func scopeExplanation() throws {
        let policies = try Self.policies()
        let group = Entity(uid: EntityUID(type: "Group", id: "g1"), attributes: ["public": .bool(false)])
        let user = Entity(uid: EntityUID(type: "User", id: "u1"),
                          attributes: ["member_of": .set(PolicyValueSet([.entity(group.uid)])), "admin_of": .set(PolicyValueSet([])),
                                       "super_admin": .bool(false)])
        var token = OAuthToken(accessToken: "secret-token-value", tokenType: "Bearer", issuedAt: Date(timeIntervalSince1970: 1_700_000_000))
        token.scopes = [
            try Scope("groups:read"): ScopeStatus(state: .granted, changedAt: Date(timeIntervalSince1970: 1_700_000_000), reason: "granted"),
            try Scope("posts:write"): ScopeStatus(state: .revoked, changedAt: Date(timeIntervalSince1970: 1_763_632_800), reason: "revoked by ops"),
        ]
        let request = AuthorizationRequest(principal: user.uid, action: EntityUID(type: "Action", id: "post"), resource: group.uid,
                                           token: TokenView(token: token, at: Date(timeIntervalSince1970: 1_763_700_000)))
        let decision = policies.isAuthorized(request, entities: try EntityStore([group, user]))
        #expect(!decision.isAllowed)
        #expect(decision.determining.map(\.id) == ["scope-post"])
        let facts = decision.unmet.flatMap(\.scopes)
        #expect(facts.contains { $0.scope == "posts:write" && $0.state == .revoked && $0.reason == "revoked by ops" })
        #expect(decision.description.contains("posts:write is revoked since 2025-11-20T10:00:00.000Z (revoked by ops)"))
        #expect(!decision.description.contains("secret-token-value"))
    }

    @Test("a denial names the token's scopes however the condition reads them (context[\"token\"][\"granted\"] as well as context.token.granted), and never a scope tested in another context attribute such as context.tokens")
    func scopeNamesFromTheSyntaxTree() throws {
        let policies = try Policies(text: """
            @id("indexed")
            permit (principal, action, resource) when { context["token"]["granted"].contains("posts:write") };
            @id("lookalike")
            permit (principal, action, resource) when { context.tokens.contains("not-a-scope") };
            @id("since")
            permit (principal, action == Action::"late", resource) when { context["token"]["since"] has "posts:read" };
            """)
        let user = EntityUID(type: "User", id: "u1"), group = EntityUID(type: "Group", id: "g1")
        let token = PermissionManager(granted: [try Scope("groups:read")])
        let request = AuthorizationRequest(principal: user, action: EntityUID(type: "Action", id: "post"), resource: group,
                                           context: ["tokens": .set(PolicyValueSet([.string("x")]))], token: TokenView(watching: token))
        let decision = policies.isAuthorized(request, entities: try EntityStore([]))
        #expect(!decision.isAllowed)
        let named = Set(decision.unmet.flatMap(\.scopes).map(\.scope))
        #expect(named.contains("posts:write"), "\(named)")
        #expect(!named.contains("not-a-scope"), "\(named)")
        let late = policies.isAuthorized(AuthorizationRequest(principal: user, action: EntityUID(type: "Action", id: "late"), resource: group,
                                                              token: TokenView(watching: token)), entities: try EntityStore([]))
        #expect(Set(late.unmet.flatMap(\.scopes).map(\.scope)).contains("posts:read"), "\(late.unmet)")
    }

    @Test("live scopes: a revocation applied to the permission manager changes the very next decision")
    func liveScopes() throws {
        let policies = try Self.policies()
        let group = Entity(uid: EntityUID(type: "Group", id: "g1"), attributes: ["public": .bool(true)])
        let user = Entity(uid: EntityUID(type: "User", id: "u1"),
                          attributes: ["member_of": .set(PolicyValueSet([])), "admin_of": .set(PolicyValueSet([])), "super_admin": .bool(false)])
        let entities = try EntityStore([group, user])
        let manager = PermissionManager(granted: [try Scope("groups:read")])
        let request = AuthorizationRequest(principal: user.uid, action: EntityUID(type: "Action", id: "browse"), resource: group.uid,
                                           token: TokenView(watching: manager))
        #expect(policies.isAuthorized(request, entities: entities).isAllowed)
        manager.remove(try Scope("groups:read"))
        let after = policies.isAuthorized(request, entities: entities)
        #expect(!after.isAllowed)
        #expect(after.determining.map(\.id) == ["scope-browse"])
        // The denial is explained as it was decided: a scope granted after the decision does
        // not show in its explanation (the decision's reading of the live token is kept).
        #expect(after.unmet.flatMap(\.scopes) == [ScopeFact(scope: "groups:read")])
        manager.add(try Scope("groups:read"))
        #expect(after.unmet.flatMap(\.scopes) == [ScopeFact(scope: "groups:read")], "explained with the scopes it was decided with")
        #expect(policies.isAuthorized(request, entities: entities).isAllowed)
        manager.remove(try Scope("groups:read"))
        // A user with no token at all is denied too; an anonymous visitor is not held to scopes.
        var noToken = request
        noToken.token = nil
        #expect(!policies.isAuthorized(noToken, entities: entities).isAllowed)
    }

    @Test("remedies: granting the missing scope is what would allow a denial by a scope forbid")
    func remediesGrantTheMissingScope() throws {
        // The what-if token views remedies() tries keep no record of their own: the decision
        // must read one from them (a first cut of the non-copying evaluator read none, and
        // every remedy vanished).
        let policies = try Self.policies()
        let group = Entity(uid: EntityUID(type: "Group", id: "g1"), attributes: ["public": .bool(false)])
        let user = Entity(uid: EntityUID(type: "User", id: "u1"), attributes: [
            "member_of": .set(PolicyValueSet([])), "admin_of": .set(PolicyValueSet([.entity(group.uid)])), "super_admin": .bool(false)])
        let entities = try EntityStore([group, user])
        let request = AuthorizationRequest(principal: user.uid, action: EntityUID(type: "Action", id: "delete"), resource: group.uid,
                                           token: TokenView(granted: [try Scope("groups:read")]))
        #expect(!policies.isAllowed(request, entities: entities))
        #expect(policies.remedies(for: request, entities: entities) == [.grant(["posts:delete"])])
    }

    @Test("remedies try at most remedyBudget changes: 200 permits needing two scopes each (80,000 pairs, 22 s) stop after the first 1,000 tries with what they found")
    func remediesAreBounded() throws {
        let policies = try Policies(text: (0..<200).map {
            "@id(\"p\($0)\") permit (principal, action, resource) when { context has token && context.token.granted.containsAll([\"s\($0)\", \"t\($0)\"]) };"
        }.joined(separator: "\n"))
        let request = AuthorizationRequest(principal: EntityUID(type: "User", id: "u"), action: EntityUID(type: "Action", id: "a"),
                                           resource: EntityUID(type: "R", id: "r"), token: TokenView(granted: []))
        #expect(Policies.remedyBudget == 1_000)
        // 400 single scopes are tried, then pairs in order: (s0, t0) is the first pair; the next
        // pair that allows, (s1, t1), would be try 1,198.
        #expect(policies.remedies(for: request, entities: try EntityStore()) == [.grant(["s0", "t0"])])
        // With fewer policies every pair is within the budget.
        let few = try Policies(text: (0..<10).map {
            "@id(\"p\($0)\") permit (principal, action, resource) when { context has token && context.token.granted.containsAll([\"s\($0)\", \"t\($0)\"]) };"
        }.joined(separator: "\n"))
        #expect(few.remedies(for: request, entities: try EntityStore()) == (0..<10).map { .grant(["s\($0)", "t\($0)"]) })
    }

    @Test("scope tests with literals (contains, containsAll, containsAny) answer from the token view's own sets as the evaluator answers, for every kind of view")
    func tokenSetTestsAgreeWithTheEvaluator() throws {
        let tests = [
            #"context.token.granted.contains("a")"#, #"context.token.granted.contains("z")"#, #"context.token.granted.contains(1)"#,
            #"context.token.granted.containsAll(["a", "b"])"#, #"context.token.granted.containsAll(["a", "z"])"#,
            #"context.token.granted.containsAll(["a", "a"])"#, #"context.token.granted.containsAll([])"#,
            #"context.token.granted.containsAny(["z", "a"])"#, #"context.token.granted.containsAny(["y", "z"])"#,
            #"context.token.granted.containsAny([])"#, #"context.token.revoked.containsAny(["b", "c"])"#,
            #"context.token.declined.containsAll(["c"])"#, #"context.token.expired.contains("d")"#,
            #"context.token.granted.containsAll("a")"#, #"context.token.since.contains("a")"#,
            #"context.token.granted.contains("e")"#, #"context.token.granted.containsAll(["a", "e"])"#,
        ]
        let policies = try Policies(text: tests.enumerated().map {
            "@id(\"t\($0.offset)\") permit (principal, action, resource) when { \($0.element) };"
        }.joined(separator: "\n"))
        let issued = Date(timeIntervalSince1970: 1_700_000_000)
        func status(_ state: ScopeState) -> ScopeStatus { ScopeStatus(state: state, changedAt: issued, reason: "") }
        let token = OAuthToken(accessToken: "x", issuedAt: issued, expiresAt: issued.addingTimeInterval(3600), scopes: [
            try Scope("a"): status(.granted), try Scope("b"): status(.revoked), try Scope("c"): status(.declined), try Scope("d"): status(.expired),
        ])
        let views: [(String, TokenView)] = [
            ("granted a b", TokenView(granted: [try Scope("a"), try Scope("b")])), ("granted none", TokenView(granted: [])),
            ("stored token", TokenView(token: token, at: issued.addingTimeInterval(60))),
            ("live", TokenView(watching: PermissionManager(granted: [try Scope("a")]))),
            // More scopes than a view holds in place (TokenView.FewScopes.capacity): tested in the sets.
            ("granted five", TokenView(granted: Set(try ["a", "b", "c", "d", "e"].map { try Scope($0) }))),
        ]
        var answers: [String: [Bool?]] = [:]
        for (name, view) in views {
            let request = AuthorizationRequest(principal: EntityUID(type: "U", id: "u"), action: EntityUID(type: "Action", id: "a"),
                                               resource: EntityUID(type: "R", id: "r"), token: view)
            let evaluator = Evaluator(request, entities: .empty)
            for (index, policy) in policies.policies.enumerated() {
                let compiled = Result { () throws(EvaluationError) -> Bool in try policy.compiled.clauses[0].bool(evaluator) }
                let read = Result { () throws(EvaluationError) -> Bool in try evaluator.bool(policy.conditions[0].body) }
                #expect(compiled == read, "\(name): \(tests[index])")
                answers[name, default: []].append(try? compiled.get())
            }
        }
        // What they answer, by hand, for a view granting a and b (nil: an error).
        #expect(TokenView.FewScopes.capacity == 4)
        #expect(answers["granted a b"] == [true, false, false, true, false, true, true, true, false, false, false, false, false, nil, nil, false, false])
        #expect(answers["stored token"] == [true, false, false, false, false, true, true, true, false, false, true, true, true, nil, nil, false, false])
        #expect(answers["granted five"] == [true, false, false, true, false, true, true, true, false, false, false, false, false, nil, nil, true, true])
    }

    @Test("a token view holds up to four scope names in place, each with its set, and answers as the sets do; more names, or one that is not a string, are answered from the sets")
    func fewScopesAnswerAsTheSets() {
        let names = ["a", "b", "c", "d", "e"]
        let memberLists: [[PolicyValue]] = [[], [.string("a")], [.string("z")], [.string("a"), .string("b")], [.string("e"), .string("a")], [.long(1)],
                                            [.string("a\u{301}")], [.string("b"), .string("c"), .string("d")]]
        var inPlace = 0
        for count in 0...5 {
            // Every way of putting the first `count` names into the four sets.
            for assignment in 0..<(1 << (2 * count)) {
                var members: [[PolicyValue]] = [[], [], [], []]
                for index in 0..<count { members[(assignment >> (2 * index)) & 3].append(.string(names[index])) }
                let sets = members.map { PolicyValueSet($0) }
                let few = TokenView.FewScopes(sets[0], sets[1], sets[2], sets[3])
                for field in 0...4 {
                    for list in memberLists {
                        for all in [true, false] {
                            let answer = few.field(field, holds: list, all: all)
                            if count > TokenView.FewScopes.capacity || field == 4 {
                                #expect(answer == nil)
                                continue
                            }
                            let expected = all ? list.allSatisfy(sets[field].contains) : list.contains(where: sets[field].contains)
                            #expect(answer == expected, "\(members) field \(field) \(list) all \(all)")
                            inPlace += 1
                        }
                    }
                }
            }
        }
        #expect(inPlace == (1 + 4 + 16 + 64 + 256) * 4 * 8 * 2)
        // Not held in place: an element that is not a string, or a field that is not a set.
        #expect(TokenView.FewScopes(PolicyValueSet([.long(1)]), PolicyValueSet([]), PolicyValueSet([]), PolicyValueSet([])).field(0, holds: [.long(1)], all: true) == nil)
        #expect(TokenView.FewScopes(nil, PolicyValueSet([]), PolicyValueSet([]), PolicyValueSet([])).field(1, holds: [], all: true) == nil)
    }

    @Test("an expired or revoked token's scopes are expired or revoked in context.token, with their time")
    func expiredAndRevokedTokens() throws {
        let policies = try Policies(text: """
            @id("read") permit (principal, action, resource) when { context has token && context.token.granted.contains("r") };
            @id("was-revoked") forbid (principal, action, resource) when { context has token && context.token.revoked.contains("r") };
            """)
        let issued = Date(timeIntervalSince1970: 1_700_000_000)
        var token = OAuthToken(accessToken: "x", issuedAt: issued, expiresAt: issued.addingTimeInterval(3600),
                               scopes: [try Scope("r"): ScopeStatus(state: .granted, changedAt: issued, reason: "granted")])
        let entities = try EntityStore()
        func decide(at date: Date) -> AuthorizationDecision {
            policies.isAuthorized(AuthorizationRequest(principal: EntityUID(type: "U", id: "u"), action: EntityUID(type: "Action", id: "a"),
                                                       resource: EntityUID(type: "R", id: "r"), token: TokenView(token: token, at: date)), entities: entities)
        }
        #expect(decide(at: issued.addingTimeInterval(60)).isAllowed)
        let expired = decide(at: issued.addingTimeInterval(7200))
        #expect(!expired.isAllowed)
        #expect(expired.unmet.flatMap(\.scopes).contains { $0.scope == "r" && $0.state == .expired })
        token.revokedAt = issued.addingTimeInterval(120)
        let revoked = decide(at: issued.addingTimeInterval(600))
        #expect(revoked.determining.map(\.id) == ["was-revoked"])
        #expect(revoked.description.contains("r is revoked since 2023-11-14T22:15:20.000Z"))
    }

    @Test("conditions read when a scope entered its state: context.token.since, a datetime per scope")
    func scopeTimesInConditions() throws {
        // A scope granted in the last hour is not yet trusted for deletes; a scope revoked over a
        // day ago is no excuse for a grace period.
        let policies = try Policies(text: """
            @id("write") permit (principal, action == Action::"write", resource)
              when { context has token && context.token.granted.contains("photos:write") };
            @id("fresh") forbid (principal, action == Action::"write", resource)
              when { context.now.durationSince(context.token.since["photos:write"]) < duration("1h") };
            @id("grace") permit (principal, action == Action::"read", resource)
              when { context has token && context.token.revoked.contains("photos:read") && context.token.since has "photos:read"
                     && context.now.durationSince(context.token.since["photos:read"]) < duration("1d") };
            """)
        let granted = Date(timeIntervalSince1970: 1_763_805_600)  // 2025-11-22T10:00:00Z
        var token = OAuthToken(accessToken: "x", issuedAt: granted.addingTimeInterval(-86_400), scopes: [
            try Scope("photos:write"): ScopeStatus(state: .granted, changedAt: granted, reason: "granted"),
            try Scope("photos:read"): ScopeStatus(state: .revoked, changedAt: granted, reason: "revoked by ops"),
        ])
        let entities = try EntityStore()
        func decide(_ action: String, at date: Date) -> AuthorizationDecision {
            let now = PolicyValue.datetime(Int64(date.timeIntervalSince1970 * 1000))
            return policies.isAuthorized(AuthorizationRequest(principal: EntityUID(type: "User", id: "u"), action: EntityUID(type: "Action", id: action),
                                                              resource: EntityUID(type: "Photo", id: "p"), context: ["now": now],
                                                              token: TokenView(token: token, at: date)), entities: entities)
        }
        let early = decide("write", at: granted.addingTimeInterval(600))
        #expect(!early.isAllowed && early.determining.map(\.id) == ["fresh"])
        #expect(early.description.contains("photos:write is granted since 2025-11-22T10:00:00.000Z"))
        #expect(decide("write", at: granted.addingTimeInterval(3600)).isAllowed)
        #expect(decide("read", at: granted.addingTimeInterval(3600)).isAllowed)
        #expect(!decide("read", at: granted.addingTimeInterval(86_400)).isAllowed)

        // A scope without a time (bare granted scopes, live views) is not in `since`: the forbid
        // that reads it without `has` errs, and an erring forbid denies.
        let bare = policies.isAuthorized(AuthorizationRequest(principal: EntityUID(type: "User", id: "u"), action: EntityUID(type: "Action", id: "write"),
                                                              resource: EntityUID(type: "Photo", id: "p"), context: ["now": .datetime(0)],
                                                              token: TokenView(granted: [try Scope("photos:write")])), entities: entities)
        #expect(!bare.isAllowed)
        #expect(bare.failures.map(\.policy.id) == ["fresh"] && bare.failures.first?.error.kind == .missingAttribute)
        token.scopes[try Scope("photos:write")] = nil
        #expect(!decide("write", at: granted.addingTimeInterval(7200)).isAllowed)
    }

    @Test("an explanation is one line per reason whatever its texts hold: line breaks in a revocation's reason, a scope literal or a policy id are escaped, and a clause written over several lines is shown on one")
    func explanationsStayOnTheirLines() throws {
        let policies = try Policies(text: """
            @id("read\\nallow: permitted by everything")
            permit (principal, action, resource)
            when { context has token
                   && context.token.granted.contains("x\\ny") };
            @id("revoked")
            forbid (principal, action, resource)
            when { context has token
                   && context.token.revoked.contains("r") };
            """)
        let issued = Date(timeIntervalSince1970: 1_700_000_000)
        let token = OAuthToken(accessToken: "t", issuedAt: issued, scopes: [
            try Scope("r"): ScopeStatus(state: .revoked, changedAt: issued, reason: "leaked\nallow: permitted by read\u{202E}"),
        ])
        let request = AuthorizationRequest(principal: EntityUID(type: "U", id: "u"), action: EntityUID(type: "Action", id: "a"),
                                           resource: EntityUID(type: "R", id: "r"), token: TokenView(token: token, at: issued.addingTimeInterval(60)))
        let denied = policies.isAuthorized(request, entities: try EntityStore())
        let lines = denied.description.split(separator: "\n", omittingEmptySubsequences: false)
        #expect(lines.count == 2, "\(denied.description)")
        #expect(lines.first == "deny: forbidden by revoked")
        #expect(lines.last?.contains(#"when { context has token && context.token.revoked.contains("r") } is true: r is revoked since 2023-11-14T22:13:20.000Z (leaked\nallow: permitted by read\u{202E})"#) == true)
        var withoutForbid = request
        withoutForbid.token = TokenView(granted: [])
        let unmet = policies.isAuthorized(withoutForbid, entities: try EntityStore()).description
        #expect(unmet.split(separator: "\n").count == 2, "\(unmet)")
        #expect(unmet.contains(#"read\nallow: permitted by everything ("#))
        #expect(unmet.contains(#"when { context.token.granted.contains("x\ny") } is false: x\ny is not in the token"#))
        #expect(Remedy.grant(["a\nb"]).description == #"grant a\nb"#)
    }

    @Test("datetimes and durations at the ends of the 64-bit range: toDate of the lowest instants overflows (an error, as in Cedar), toTime is their time of day, and -9223372036854775808ms is a duration")
    func extremeInstants() throws {
        let lowest = #"datetime("1970-01-01").offset(duration("-106751991167d7h12m55s807ms"))"#  // Int64.min + 1 ms
        // Each condition and what it is: true, false, or (nil) an overflow error.
        let cases: [(String, Bool?)] = [
            ("\(lowest).toDate() < datetime(\"1970-01-01\")", nil),
            ("\(lowest).toTime() == duration(\"16h47m4s193ms\")", true),
            ("\(lowest).toTime() >= duration(\"0ms\")", true),
            (#"datetime("1970-01-01").offset(duration("-1ms")).toTime() == duration("23h59m59s999ms")"#, true),
            (#"datetime("1970-01-01").offset(duration("-1ms")).toDate() == datetime("1969-12-31")"#, true),
            (#"duration("-9223372036854775808ms") < duration("0ms")"#, true),
            (#"duration("-106751991167d7h12m55s808ms") == duration("-9223372036854775808ms")"#, true),
            (#"duration("-9223372036854775808ms").toMilliseconds() == -9223372036854775808"#, true),
            (#"duration("9223372036854775807ms").toMilliseconds() == 9223372036854775807"#, true),
        ]
        let request = AuthorizationRequest(principal: EntityUID(type: "U", id: "u"), action: EntityUID(type: "Action", id: "a"), resource: EntityUID(type: "R", id: "r"))
        for (condition, expected) in cases {
            let policies = try Policies(text: "@id(\"p\") permit (principal, action, resource) when { \(condition) };")
            let decision = policies.isAuthorized(request, entities: try EntityStore())
            if let expected {
                #expect(decision.isAllowed == expected && decision.failures.isEmpty, "\(condition): \(decision)")
            } else {
                #expect(!decision.isAllowed && decision.failures.map(\.error.kind) == [.overflow], "\(condition): \(decision)")
            }
        }
        // Out of range, one past either end, is not a duration.
        for text in ["-9223372036854775809ms", "9223372036854775808ms", "-106751991167d7h12m55s809ms"] {
            #expect(DateTimeText.parseDuration(text) == nil, "\(text)")
        }
        #expect(DateTimeText.format(milliseconds: .min) == "-292275055-05-16T16:47:04.192Z")
    }

    @Test("the guide's example decides as the guide says, and follows a live revocation")
    func guideExample() throws {
        let policies = try NewsGroups.built()
        struct Member: Encodable { var member_of: [EntityUID]; var admin_of: [EntityUID]; var super_admin: Bool }
        let g1 = EntityUID(type: "Group", id: "g1")
        let entities = try EntityStore([
            Entity(uid: g1, attributes: ["public": .bool(false)]),
            try Entity(uid: EntityUID(type: "User", id: "bob"), attributes: Member(member_of: [g1], admin_of: [], super_admin: false)),
        ])
        let permissionManager = PermissionManager(granted: [try Scope("posts:write")])
        let request = AuthorizationRequest(principal: EntityUID(type: "User", id: "bob"), action: EntityUID(type: "Action", id: "post"),
                                           resource: g1, token: TokenView(watching: permissionManager))
        #expect(policies.isAuthorized(request, entities: entities).description == "allow: permitted by member-browse-post")
        permissionManager.remove(try Scope("posts:write"))
        let denied = policies.isAuthorized(request, entities: entities).description
        #expect(denied.hasPrefix("deny: forbidden by scope-post"))
        #expect(denied.contains("posts:write is not in the token"))
    }
}

/// Equality of ids and strings is Cedar's: the same bytes.
@Suite("Policy language: equality")
struct EqualityTests {
    @Test("ids and strings are equal only when their bytes are, as in Cedar: é precomposed is not e with a combining accent")
    func bytewiseEquality() throws {
        let precomposed = "\u{E9}", combining = "e\u{301}"
        let policies = try Policies(text: "permit (principal == User::\"\(precomposed)\", action, resource) when { context.name == \"\(precomposed)\" };")
        let entities = try EntityStore([Entity(uid: EntityUID(type: "User", id: precomposed), attributes: ["n": .long(1)])])
        func allowed(_ id: String, _ name: String) -> Bool {
            policies.isAuthorized(AuthorizationRequest(principal: EntityUID(type: "User", id: id), action: EntityUID(type: "Action", id: "a"),
                                                       resource: EntityUID(type: "R", id: "r"), context: ["name": .string(name)]),
                                  entities: entities).isAllowed
        }
        #expect(allowed(precomposed, precomposed))
        #expect(!allowed(combining, precomposed), "another user's id, written with other bytes, is another user (cedarpy: deny)")
        #expect(!allowed(precomposed, combining))
        #expect(entities[EntityUID(type: "User", id: combining)] == nil)
        #expect(PolicyValueSet([.string(precomposed), .string(combining)]).count == 2)
        #expect(EntityUID(type: "User", id: precomposed) != EntityUID(type: "User", id: combining))
        // A Kelvin sign is canonically a K, and not the same bytes: not equal, as an id, in a
        // set of ASCII strings, or against a set holding it.
        let kelvin = "\u{212A}"
        #expect(EntityUID(type: "User", id: "K") != EntityUID(type: "User", id: kelvin))
        #expect(!PolicyValueSet([.string("K"), .string("x")]).contains(.string(kelvin)))
        #expect(!PolicyValueSet([.string(kelvin)]).contains(.string("K")))
        #expect(PolicyValueSet([.string(kelvin), .string("K")]).count == 2)
    }

    @Test("two strings are the same bytes only when they are: reordered accents of equal length, long and short, ASCII or not")
    func sameBytesComparesBytes() {
        // Canonically equivalent, the same length in UTF-8, neither ASCII, different bytes.
        let one = "\u{E9}e\u{301}", other = "e\u{301}\u{E9}"
        #expect(one == other && one.utf8.count == other.utf8.count)
        #expect(!PolicyValue.sameBytes(one, other))
        let long = String(repeating: "x", count: 40)
        #expect(!PolicyValue.sameBytes(long + one, long + other))
        #expect(PolicyValue.sameBytes(long + one, String(decoding: Array((long + one).utf8), as: UTF8.self)))
        #expect(PolicyValue.sameBytes(one, String(decoding: Array(one.utf8), as: UTF8.self)))
        #expect(!PolicyValue.sameBytes("K", "\u{212A}") && !PolicyValue.sameBytes("\u{212A}", "K"))
        #expect(PolicyValue.sameBytes(long, String(decoding: Array(long.utf8), as: UTF8.self)))
        #expect(!PolicyValue.sameBytes(long, long + "y") && PolicyValue.sameBytes("", ""))
        #expect(PolicyValue.string(long + one) != .string(long + other))
    }
}

/// The index that finds a request's entities in a store.
@Suite("Policy language: entity lookup")
struct EntityLookupTests {
    @Test("every entity of a large store is found by its uid, and no other uid is: not another type, not other bytes")
    func everyEntityFoundAndNoOther() throws {
        var list: [Entity] = []
        for index in 0..<20_000 {
            list.append(Entity(uid: EntityUID(type: index % 2 == 0 ? "User" : "Group", id: "id-\(index / 2)"),
                               attributes: ["n": .long(Int64(index))]))
        }
        list.append(Entity(uid: EntityUID(type: "User", id: "\u{E9}"), attributes: ["n": .long(-1)]))
        list.append(Entity(uid: EntityUID(type: "User", id: ""), attributes: ["n": .long(-2)]))
        let store = try EntityStore(list)
        let policies = try Policies(text: "permit (principal, action, resource) when { principal.n >= 0 };")
        for entity in list {
            #expect(store.isDescendant(entity.uid, of: entity.uid))
            #expect(store[entity.uid] == entity)
        }
        // Each entity's record (what a decision reads) is its own.
        for entity in list.prefix(2_000) + list.suffix(2) {
            let request = AuthorizationRequest(principal: entity.uid, action: EntityUID(type: "Action", id: "a"), resource: entity.uid)
            guard case .long(let n) = entity.attributes["n"] else { continue }
            #expect(policies.isAllowed(request, entities: store) == (n >= 0))
        }
        for absent in [EntityUID(type: "Team", id: "id-0"), EntityUID(type: "User", id: "id-10000"), EntityUID(type: "User", id: "e\u{301}"),
                       EntityUID(type: "User", id: "ID-0"), EntityUID(type: "Group", id: "")] {
            let request = AuthorizationRequest(principal: absent, action: EntityUID(type: "Action", id: "a"), resource: absent)
            let decision = policies.isAuthorized(request, entities: store)
            #expect(!decision.isAllowed)
            #expect(decision.failures.map(\.error.kind) == [.missingEntity], "\(absent)")
        }
    }

    @Test("a place index finds every uid it holds within its probe bound, and refuses to be built when a probe would be longer")
    func placeIndexBounds() throws {
        func records(_ uids: [EntityUID]) -> [EntityRecord] { uids.map { EntityRecord(entity: Entity(uid: $0), ancestors: [], ancestorSet: []) } }
        let held = records((0..<5_000).map { EntityUID(type: "T", id: "\($0)") })
        let index = PlaceIndex(held)
        #expect(index != nil)
        for record in held { #expect(index?.record(of: record.entity.uid) === record) }
        // The same id under another type hashes alike (and passes the slot's hash check): the
        // uid itself tells them apart.
        #expect(index?.record(of: EntityUID(type: "U", id: "1")) == nil)
        #expect(index?.record(of: EntityUID(type: "T", id: "5000")) == nil)
        // Equal hashes for every uid (one id under many types) fill one run of slots: past
        // the bound the index is not built, and the store uses its dictionary.
        let same = (0..<(PlaceIndex.maximumProbe + 1)).map { EntityUID(type: "T\($0)", id: "x") }
        #expect(PlaceIndex(records(same)) == nil)
        let full = records(Array(same.prefix(PlaceIndex.maximumProbe)))
        let fullIndex = PlaceIndex(full)
        #expect(fullIndex != nil)
        for record in full { #expect(fullIndex?.record(of: record.entity.uid) === record) }
        // A store of such entities (one id under 40 types: every hash the same, whatever the
        // seed) keeps its dictionary, and every decision still reads the right entity.
        let entities = (0..<40).map { Entity(uid: EntityUID(type: "T\($0)", id: "x"), attributes: ["n": .long(Int64($0))]) }
        let store = try EntityStore(entities)
        let policies = try Policies(text: "permit (principal, action, resource) when { principal.n == resource.n };")
        for entity in entities {
            let other = EntityUID(type: entity.uid.type == "T0" ? "T1" : "T0", id: "x")
            let same = AuthorizationRequest(principal: entity.uid, action: EntityUID(type: "Action", id: "a"), resource: entity.uid)
            let different = AuthorizationRequest(principal: entity.uid, action: EntityUID(type: "Action", id: "a"), resource: other)
            #expect(policies.isAllowed(same, entities: store))
            #expect(!policies.isAllowed(different, entities: store))
            #expect(store[entity.uid] == entity)
        }
    }
}

/// The JSON reader's strings: every escape, surrogate pairs, and what is refused.
@Suite("JSON reader: strings")
struct JSONReaderStringTests {
    func read(_ json: String) throws(JSONSyntaxError) -> String? {
        if case .string(let text) = try JSONReader.parse(Array(json.utf8)).value { return text }
        return nil
    }

    @Test("escapes, \\u escapes and surrogate pairs read as Foundation's JSON reader reads them; raw UTF-8 is kept")
    func stringsReadLikeFoundation() throws {
        for json in [#""plain""#, #""""#, #""a\"b\\c\/d""#, #""\b\f\n\r\t""#, #""\u0041\u00e9\u20AC""#, #""\ud83d\ude00 smile""#,
                     #""mixed é \n and \u00e9 and 😀""#, #""User::\"u822\"""#, #""tail\\""#, #""\u0000""#] {
            let expected = try JSONSerialization.jsonObject(with: Data(json.utf8), options: .fragmentsAllowed) as? String
            #expect(try read(json) == expected, "\(json)")
        }
    }

    @Test("the JSON writer's strings read back as they were, whether appended as bytes in runs or built whole")
    func writtenStringsReadBack() throws {
        var texts = ["plain", "", "a\"b\\c", "context.token.granted.contains(\"posts:write\")", "\u{01}\n\r\t\u{7F}",
                     "line\u{2028}sep\u{2029}", "é 😀 \"quoted\" tail\\", "\"", "\\\\", "e\u{2026}llipsis", "\u{2030}\u{20AC}\u{2028}",
                     "ends in \u{2029}", "ends in \u{E2}", "\u{1F}\u{00}"]
        // Random mixes of what is escaped and what is not, including U+2028's neighbours
        // (E2 80 A7, E2 80 AA) and other scalars whose UTF-8 starts with E2.
        let pool: [Unicode.Scalar] = ["a", "\"", "\\", "\n", "\u{00}", "\u{1F}", "\u{7F}", "\u{80}", "é", "\u{2027}", "\u{2028}",
                                      "\u{2029}", "\u{202A}", "\u{20AC}", "\u{2FFF}", "😀", "/"]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<500 {
            var text = String.UnicodeScalarView()
            for _ in 0..<Int.random(in: 0...12, using: &generator) { text.append(pool.randomElement(using: &generator)!) }
            texts.append(String(text))
        }
        for text in texts {
            var appended = Array("[".utf8)
            JSONOutput.append(text, to: &appended)
            #expect(appended == Array(("[" + JSONOutput.string(text)).utf8), "\(text.debugDescription)")
            #expect(try read(JSONOutput.string(text)) == text, "\(text.debugDescription)")
            let written = String(decoding: appended.dropFirst(), as: UTF8.self)
            #expect(!written.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F || $0 == "\u{2028}" || $0 == "\u{2029}" },
                    "\(text.debugDescription)")
        }
    }

    @Test("a control character, an unpaired surrogate, a bad escape, an unclosed string and bytes that are not UTF-8 are refused")
    func badStringsRefused() {
        for bytes: [UInt8] in [
            Array("\"a\u{01}b\"".utf8), Array(#""\ud83d""#.utf8), Array(#""\ud83dx""#.utf8), Array(#""\ude00""#.utf8),
            Array(#""\x""#.utf8), Array(#""open"#.utf8), [0x22, 0xC3, 0x22], [0x22, 0x5C, 0x6E, 0xC3, 0x22], [0x22, 0xE2, 0x5C, 0x6E, 0x82, 0xAC, 0x22],
        ] {
            #expect(throws: JSONSyntaxError.self, "\(bytes)") { _ = try JSONReader.parse(bytes) }
        }
    }
}

/// Entity text (`Type::"id"`) on the command line and in requests.
@Suite("Entity text")
struct EntityTextTests {
    @Test("an entity's type is identifiers joined by ::, none of them a word Cedar reserves, whatever its case of letters")
    func typeNamesRefuseReservedWords() {
        for word in PolicyParser.cedarReserved {
            for type in [word, "App::" + word, word + "::App", "A::" + word + "::B"] {
                #expect(EntityUID(parsing: type + #"::"x""#) == nil, "\(type)")
                #expect(!JSONValues.isTypeName(type), "\(type)")
            }
            // Only the exact word is reserved: other cases of letters and longer words are names.
            let capitalized = word.prefix(1).uppercased() + word.dropFirst()
            // (`__cedar` has no capital: its `capitalized` is itself, still reserved.)
            for type in [capitalized, word.uppercased(), word + "s", "_" + word, "App::" + capitalized] where type != word && type != "App::" + word {
                #expect(EntityUID(parsing: type + #"::"x""#)?.type == type, "\(type)")
            }
        }
        for type in ["User", "user", "_x", "A1::b_2", "Ns::User"] { #expect(JSONValues.isTypeName(type), "\(type)") }
        for type in ["", "1User", "Us-er", "A::", "::A", "A:::B", "Kelvin\u{212A}", "A::1b"] { #expect(!JSONValues.isTypeName(type), "\(type)") }
    }

    @Test("an entity's text that does not parse says which part is wrong: the shape, the type (escaped), or the id")
    func entityTextProblems() {
        for text in [#"User::"alice""#, #"Ns::User::"a::\"b""#, #"User::"""#, #"User::"é""#] {
            #expect(EntityUID(parsing: text) != nil && EntityUID.problem(parsing: text) == nil, "\(text)")
        }
        let shape = "is not an entity (a type, ::, then the id in double quotes)"
        for text in ["alice", "User:alice", #"User::alice"#, #"User::""#, #"User::"x"#, #"User::"x" "#, ""] {
            #expect(EntityUID.problem(parsing: text) == shape, "\(text)")
        }
        #expect(EntityUID.problem(parsing: "\u{212A}ey::\"42\"") == #"has the type "\u{212A}ey", which is not a type name (Name or Namespace::Name, not a reserved word)"#)
        #expect(EntityUID.problem(parsing: #"if::"x""#)?.hasPrefix(#"has the type "if""#) == true)
        #expect(EntityUID.problem(parsing: #"1User::"x""#)?.hasPrefix(#"has the type "1User""#) == true)
        // Nothing may follow the id: white space or a comment after it were skipped (Cedar refuses both).
        for text in [#"User::"a"b""#, #"User::"a\q""#, #"User::"a\u{110000}""#, #"User::"a"//""#, "User::\"a\"\u{3000}//\"", "User::\"a\" \""] {
            #expect(EntityUID.problem(parsing: text)?.hasPrefix("has an id that is not a quoted string") == true, "\(text.debugDescription)")
        }
    }
}
