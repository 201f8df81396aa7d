import Foundation
import Keysmith
import KeysmithPolicy
import KeysmithTokenPolicy
import KeysmithTokens
import Testing

/// The decision point a Swift program uses as `keysmith policy check` and `policy decide` do.
@Suite("PolicyDecider: checks each request against the schema, decides it, says what would allow a denial, writes the JSON")
struct PolicyDeciderTests {
    static let schema = """
        entity User; entity Doc;
        action edit appliesTo { principal: User, resource: Doc, context: { reason: String } };
        """
    static let policies = """
        @id("editors") permit (principal, action == Action::"edit", resource) when { context.token.granted.contains("docs:write") };
        """

    static func request(_ principal: String = "User", scopes: Set<Scope>?, context: [String: PolicyValue] = ["reason": .string("fix")]) -> AuthorizationRequest {
        var request = AuthorizationRequest(principal: EntityUID(type: principal, id: "alice"), action: EntityUID(type: "Action", id: "edit"),
                                           resource: EntityUID(type: "Doc", id: "d1"))
        request.context = context
        request.token = scopes.map { TokenView(granted: $0) }
        return request
    }

    @Test("a request the schema refuses is never decided; one it accepts is decided with the principal's token, which the schema does not describe")
    func validatesThenDecides() throws {
        let decider = PolicyDecider(policies: try Policies(text: Self.policies, file: "p.cedar"), schema: try Schema(text: Self.schema, file: "s"),
                                    entities: try EntityStore())
        let wrongType = #expect(throws: PolicyDiagnostics.self) { try decider.decide(Self.request("Robot", scopes: [try Scope("docs:write")])) }
        #expect(wrongType?.problems.first?.message.contains("Robot") == true)
        let missingContext = #expect(throws: PolicyDiagnostics.self) {
            try decider.decide(Self.request(scopes: [try Scope("docs:write")], context: [:]), location: SourceLocation(file: "stdin", line: 7, column: 1))
        }
        #expect(missingContext?.problems.first?.location.line == 7)
        #expect(try decider.decide(Self.request(scopes: [try Scope("docs:write")])).decision.isAllowed)
        #expect(try !decider.decide(Self.request(scopes: [try Scope("docs:read")])).decision.isAllowed)
        // Without a schema nothing is checked.
        let bare = PolicyDecider(policies: decider.policies, entities: decider.entities)
        #expect(try bare.decide(Self.request("Robot", scopes: [try Scope("docs:write")])).decision.isAllowed)
    }

    @Test("explaining a denial says what would allow it; an allow has no remedies; not explaining leaves wouldAllow out of the JSON")
    func explanationsAndJSON() throws {
        let decider = PolicyDecider(policies: try Policies(text: Self.policies, file: "p.cedar"), entities: try EntityStore())
        let denied = try decider.decide(Self.request(scopes: [try Scope("docs:read")]), explaining: true)
        #expect(denied.remedies == [.grant(["docs:write"])])
        let document = try #require(try JSONSerialization.jsonObject(with: Data(denied.json.utf8)) as? [String: Any])
        #expect(document["decision"] as? String == "deny")
        #expect((document["wouldAllow"] as? [[String: [String]]]) == [["grant": ["docs:write"]]])
        let unmet = try #require((document["unmet"] as? [[String: Any]])?.first)
        #expect(unmet["policy"] as? String == "editors" && unmet["file"] as? String == "p.cedar")
        let allowed = try decider.decide(Self.request(scopes: [try Scope("docs:write")]), explaining: true)
        #expect(allowed.remedies == [])
        #expect(allowed.json.hasPrefix(#"{"decision":"allow","determining":[{"id":"editors","effect":"permit","file":"p.cedar","line":1,"column":"#))
        #expect(allowed.json.hasSuffix(#""errors":[],"unmet":[],"wouldAllow":[]}"#))
        let quiet = try decider.decide(Self.request(scopes: [try Scope("docs:read")]))
        #expect(quiet.remedies == nil && !quiet.json.contains("wouldAllow"))
        var buffer = Array("x".utf8)
        quiet.appendJSON(to: &buffer)
        #expect(buffer == Array(("x" + quiet.json).utf8))
    }

    @Test("a line reader that remembers scope lists answers every line as reading it alone does: the same decisions, the same problems, after a list it has seen and after it forgets")
    func lineReaderRemembersWithoutChangingAnswers() throws {
        let decider = PolicyDecider(policies: try Policies(text: Self.policies, file: "p.cedar"), schema: try Schema(text: Self.schema, file: "s"),
                                    entities: try EntityStore())
        let head = #""principal":"User::\"alice\"","action":"Action::\"edit\"","resource":"Doc::\"d1\"","context":{"reason":"fix"}"#
        var lines = [
            "{\(head),\"scopes\":[\"docs:write\"]}",
            "{\(head),\"scopes\":[\"docs:read\"]}",
            "{\(head),\"scopes\":[\"docs:write\"]}",                 // a list seen before
            "{\(head)}",                                               // no token
            "{\(head),\"scopes\":[\"docs write\"]}",                  // not a scope name
            "{\(head),\"scopes\":[\"docs:write\",7]}",               // not a string
            "{\(head),\"scopes\":\"docs:write\"}",                    // not an array
            "{\"principal\":\"User\",\"action\":\"Action::\\\"edit\\\"\",\"resource\":\"Doc::\\\"d1\\\"\",\"scopes\":[\"docs:write\",\"bad scope\"]}",
            "{\(head),\"scopes\":[\"docs:read\",\"docs:write\"]}",
            "{\(head),\"scopes\":[]}",
        ]
        // Enough new lists that the reader empties its memory on the way, then the first again.
        lines += (0..<300).map { "{\(head),\"scopes\":[\"s\($0)\"]}" }
        lines += ["{\(head),\"scopes\":[\"docs:write\"]}", "{\(head),\"scopes\":[\"docs write\"]}", lines[7]]
        // Entities by their text too: another principal, then the first again, then one in
        // Cedar's object form.
        lines += [head.replacingOccurrences(of: "alice", with: "bob"), head, head.replacingOccurrences(of: #""User::\"alice\"""#, with: #"{"type":"User","id":"alice"}"#)]
            .map { "{\($0),\"scopes\":[\"docs:write\"]}" }
        // Names remembered byte for byte: a Kelvin sign is K to a Swift string, never to Cedar
        // (a scope name must be ASCII; a type name too), so each of these is refused as reading
        // it alone refuses it, not given what was remembered for the K.
        lines += ["{\(head),\"scopes\":[\"K\"]}", "{\(head),\"scopes\":[\"\u{212A}\"]}",
                  "{\(head.replacingOccurrences(of: #""User::\"alice\"""#, with: #""Key::\"1\"""#))}",
                  "{\(head.replacingOccurrences(of: #""User::\"alice\"""#, with: "\"\u{212A}ey::\\\"1\\\"\""))}"]
        func answer(_ read: () throws(PolicyDiagnostics) -> AuthorizationRequest) -> String {
            do {
                return try decider.decide(try read()).json
            } catch {
                return "problems: " + error.problems.map(\.description).joined(separator: " | ")
            }
        }
        var reader = DecideLineReader()
        var allowed = 0, refused = 0
        for (index, line) in lines.enumerated() {
            let bytes = Array(line.utf8)
            let alone = answer { () throws(PolicyDiagnostics) in try AuthorizationRequest.decideLine(bytes, line: index + 1) }
            let remembered = answer { () throws(PolicyDiagnostics) in try reader.request(bytes, line: index + 1) }
            #expect(remembered == alone, "line \(index + 1): \(line)")
            if alone.contains("\"decision\":\"allow\"") { allowed += 1 }
            if alone.hasPrefix("problems:") { refused += 1 }
        }
        // The lines exercise both answers and the refusals (a reader that answered nothing would
        // agree with itself).
        #expect(allowed == 7)
        #expect(refused == 9)
    }
}
