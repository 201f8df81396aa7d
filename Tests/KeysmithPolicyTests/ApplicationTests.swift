import Foundation
import KeysmithTokens
@testable import KeysmithPolicy
import Testing

/// The four applications of docs/examples/ (news groups, a todo-list app, a photo-sharing app, a
/// repository host), each a policy file and a schema, decided by Keysmith and by Cedar (cedarpy)
/// over a generated population and thousands of requests (Oracle/applications.py). Each
/// request's token is a `TokenView` for Keysmith and the same `context.token` record for Cedar.
///
/// `KEYSMITH_APPLICATION_REQUESTS` (default 3,000 per application) runs more.
@Suite("Policy language: four applications against Cedar")
struct ApplicationTests {
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Oracle/applications.py").path
    static let examples = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("docs/examples")

    /// Each application's population and requests, decided by Cedar.
    static func generated(seed: Int, requests: Int) throws -> [Located] {
        try OracleTests.jsonLines(python: script, [String(seed), String(requests)])
    }

    static let count = ProcessInfo.processInfo.environment["KEYSMITH_APPLICATION_REQUESTS"].flatMap(Int.init) ?? 3000
    /// The generator's output, made once for the four test cases.
    static let all = Result { try generated(seed: 20261124, requests: count) }

    /// `{"posts:write": ["revoked", seconds], …}` as the token view Keysmith decides with.
    static func token(_ value: Located?) throws -> TokenView? {
        guard let value, case .object(let members) = value.value else { return nil }
        var snapshot: [String: ScopeStatus?] = [:]
        for (scope, entry) in members {
            guard case .array(let pair) = entry.value, pair.count == 2, case .string(let state) = pair[0].value,
                  let scopeState = ScopeState(rawValue: state), case .integer(let seconds) = pair[1].value
            else { throw OracleTests.OracleFailure(message: "a malformed token in applications.py's output") }
            snapshot[scope] = ScopeStatus(state: scopeState, changedAt: Date(timeIntervalSince1970: Double(seconds)), reason: "")
        }
        return TokenView(source: .fixedSnapshot(snapshot)).cached()
    }

    @Test("every request of four applications is decided as Cedar decides it, with the same deciding policies",
          arguments: ["news-groups", "todo", "photo-sharing", "repositories"])
    func agreesWithCedar(application: String) throws {
        let folder = Self.examples.appendingPathComponent(application)
        let policies = try Policies(text: String(contentsOf: folder.appendingPathComponent("policies.cedar"), encoding: .utf8),
                                    file: "\(application)/policies.cedar")
        let schema = try Schema(text: String(contentsOf: folder.appendingPathComponent("schema.cedarschema"), encoding: .utf8),
                                file: "\(application)/schema.cedarschema")
        // Keysmith's validator accepts the policies, as Cedar's does.
        try schema.validate(policies)
        let generated = try #require(try Self.all.get().first {
            if case .string(application)? = $0["application"]?.value { true } else { false }
        })
        let cedarValid = if case .bool(true)? = generated["cedarValid"]?.value { true } else { false }
        #expect(cedarValid, "Cedar's validator refuses \(application): \(generated["cedarErrors"].map { JSONOut.encode($0.value) } ?? "")")
        var entities = try EntityStore(json: Array(JSONOut.encode(try #require(generated["entities"]).value).utf8), file: application)
        try schema.validate(entities)
        try entities.add(schema.actionEntities.filter { entities[$0.uid] == nil })
        guard case .array(let requests)? = generated["requests"]?.value else { throw OracleTests.OracleFailure(message: "no requests") }
        #expect(requests.count == Self.count)

        // Cedar names policies policy0, policy1, … in file order; Keysmith by their @id.
        let ids = policies.ids
        func keysmithID(_ cedar: String) -> String {
            guard cedar.hasPrefix("policy"), let index = Int(cedar.dropFirst(6)), ids.indices.contains(index) else { return cedar }
            return ids[index]
        }
        var allowed = 0, disagreements: [String] = []
        var determining: [String: Int] = [:]
        for item in requests {
            var request = try AuthorizationRequest.parseReportingAll(item, file: application, allowing: ["token", "decision", "reasons", "errors"])
            try schema.validate(request)
            request.token = try Self.token(item["token"])
            let decision = policies.isAuthorized(request, entities: entities)
            let expected = if case .string("allow")? = item["decision"]?.value { true } else { false }
            let reasons = Set(OracleTests.strings(item["reasons"]).map(keysmithID))
            let errors = Set(OracleTests.strings(item["errors"]).map(keysmithID))
            #expect(policies.isAllowed(request, entities: entities) == decision.isAllowed)
            if decision.isAllowed { allowed += 1 }
            for id in decision.determining.map(\.id) { determining[id, default: 0] += 1 }
            if decision.isAllowed != expected || Set(decision.determining.map(\.id)) != reasons || Set(decision.failures.map(\.policy.id)) != errors {
                disagreements.append("\(JSONOut.encode(item.value))\n  Keysmith: \(decision)")
            }
        }
        print("\(application): \(requests.count) requests, \(allowed) allowed, all decided as Cedar decides them: \(disagreements.isEmpty)")
        for disagreement in disagreements.prefix(5) { print(disagreement) }
        #expect(disagreements.isEmpty, "\(disagreements.count) of \(requests.count) \(application) requests are decided differently from Cedar")
        // The requests exercise the application: both answers are common, and every policy
        // decides some request.
        #expect(allowed * 20 > requests.count && (requests.count - allowed) * 20 > requests.count)
        #expect(Set(ids).subtracting(determining.keys).isEmpty, "policies that decide no request: \(Set(ids).subtracting(determining.keys).sorted())")
    }
}
