import Foundation
@testable import KeysmithPolicy
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
        let group = Entity(uid: EntityUID(type: "Group", id: item.group.id), attributes: ["public": .bool(item.group.public)])
        let who = item.principal
        let groups = { (ids: [String]) in PolicyValue.set(PolicyValueSet(ids.map { .entity(EntityUID(type: "Group", id: $0)) })) }
        let principal = Entity(uid: EntityUID(type: who.anonymous ? "Anonymous" : "User", id: who.id),
                               attributes: ["member_of": groups(who.member_of), "admin_of": groups(who.admin_of),
                                            "super_admin": .bool(who.super_admin)])
        let entities = try EntityStore([group, principal])
        let token: TokenView? = who.anonymous ? nil : .granted(Set(try who.scopes.map { try Scope($0) }))
        let request = AuthorizationRequest(principal: principal.uid, action: EntityUID(type: "Action", id: item.action),
                                           resource: group.uid, token: token)
        return policies.isAuthorized(request, entities: entities)
    }

    @Test("every shared case gets the expected decision and the reference's reasons", arguments: [
        "exhaustive.expected.jsonl", "g4_u1000_k2000_s7.expected.jsonl",
    ])
    func sharedCases(file: String) throws {
        let policies = try Self.policies()
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
        for item in try NewsGroups.cases("exhaustive.expected.jsonl") {
            let uid = EntityUID(type: item.principal.anonymous ? "Anonymous" : "User", id: item.principal.id)
            try schema.validate(AuthorizationRequest(principal: uid, action: EntityUID(type: "Action", id: item.action),
                                                     resource: EntityUID(type: "Group", id: item.group.id)))
        }
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
                                           token: .token(token, at: Date(timeIntervalSince1970: 1_763_700_000)))
        let decision = policies.isAuthorized(request, entities: try EntityStore([group, user]))
        #expect(!decision.isAllowed)
        #expect(decision.determining.map(\.id) == ["scope-post"])
        let facts = decision.unmet.flatMap(\.scopes)
        #expect(facts.contains { $0.scope == "posts:write" && $0.state == .revoked && $0.reason == "revoked by ops" })
        #expect(decision.description.contains("posts:write is revoked since 2025-11-20T10:00:00.000Z (revoked by ops)"))
        #expect(!decision.description.contains("secret-token-value"))
    }
}
