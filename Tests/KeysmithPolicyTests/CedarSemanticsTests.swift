import Foundation
@testable import KeysmithPolicy
import Testing

/// Cases where Keysmith decided, or read a document, differently from Cedar (found by a
/// differential run against cedarpy in session 16); each expected answer is Cedar's.
@Suite("Policy language: Cedar's semantics")
struct CedarSemanticsTests {
    static let principal = EntityUID(type: "User", id: "a")

    static func decide(_ policy: String, context: [String: PolicyValue] = [:], entities: EntityStore = .empty) throws -> AuthorizationDecision {
        let policies = try Policies(text: policy)
        return policies.isAuthorized(AuthorizationRequest(principal: principal, action: EntityUID(type: "Action", id: "view"),
                                                          resource: EntityUID(type: "Doc", id: "d"), context: context), entities: entities)
    }

    @Test("`e in set` is an error when the set holds anything but entities, wherever the match is: Cedar checks every element first",
          arguments: [
              #"principal in [principal, 1]"#,
              #"principal in [User::"a", "x"]"#,
              #"principal in [Group::"g", 1]"#,
              #"principal is User in [principal, 1]"#,
              #"User::"zz" in [User::"zz", 1]"#,
              #"action in [action, "x"]"#,
              #"principal in context.mixed"#,
              #"principal in [1, principal]"#,
          ])
    func inMixedSetIsAnError(_ condition: String) throws {
        let entities = try EntityStore([Entity(uid: Self.principal, parents: [EntityUID(type: "Group", id: "g")])])
        let context: [String: PolicyValue] = ["mixed": .set(PolicyValueSet([.entity(Self.principal), .long(1)]))]
        let permit = try Self.decide(#"@id("p") permit (principal, action, resource) when { \#(condition) };"#, context: context, entities: entities)
        #expect(!permit.isAllowed)
        #expect(permit.failures.map(\.policy.id) == ["p"])
        #expect(permit.failures.first?.error.kind == .typeMismatch)
        // A forbid that cannot be evaluated denies, and is named as failing (not as applying).
        let forbid = try Self.decide(#"@id("f") forbid (principal, action, resource) when { \#(condition) }; @id("p") permit (principal, action, resource);"#,
                                     context: context, entities: entities)
        #expect(!forbid.isAllowed && forbid.failures.map(\.policy.id) == ["f"] && forbid.determining.isEmpty)
        // The same sets without the stray element decide as before.
        let clean = condition.replacingOccurrences(of: ", 1]", with: "]").replacingOccurrences(of: #", "x"]"#, with: "]")
            .replacingOccurrences(of: "[1, principal]", with: "[principal]").replacingOccurrences(of: "context.mixed", with: "[principal]")
        #expect(try Self.decide(#"@id("p") permit (principal, action, resource) when { \#(clean) };"#, entities: entities).isAllowed, "\(clean)")
    }

    @Test("an IPv4 octet is ASCII digits only: a sign before or inside one is not an address (ip(\"+10.1.2.3\") was 10.1.2.3)",
          arguments: ["+10.1.2.3", "10.1.2.+3", "-0.1.2.3", "10.+01.2.3", "+00.1.2.3", "+0.1.2.3/24", "+1.1.1.1", "10.1.2.3/+8", "10.1.2.3/-0",
                      "1_0.1.2.3", "\u{FF11}.1.2.3", "10.1.2.3 ", " 10.1.2.3"])
    func ipOctetsAreDigits(_ text: String) throws {
        #expect(IPAddress(text) == nil)
        let decision = try Self.decide(#"@id("p") permit (principal, action, resource) when { ip("\#(text)").isInRange(ip("0.0.0.0/0")) };"#)
        #expect(!decision.isAllowed && decision.failures.first?.error.kind == .invalidExtensionValue)
        // As a value in request JSON, it is refused where it is read.
        #expect(throws: PolicyDiagnostics.self) {
            try AuthorizationRequest(json: Array(#"{"principal": "User::\"a\"", "action": "Action::\"view\"", "resource": "Doc::\"d\"", "context": {"src": {"__extn": {"fn": "ip", "arg": "\#(text)"}}}}"#.utf8))
        }
        for valid in ["10.1.2.3", "0.0.0.0/0", "255.255.255.255/32", "0.0.0.0"] { #expect(IPAddress(valid) != nil, "\(valid)") }
    }

    @Test("a type name in JSON and in entity text follows the policy text's rules: only the words Cedar reserves are refused (`when`, `principal`, `permit` are names; `if`, `__cedar` are not)")
    func typeNamesInJSONAsInText() throws {
        for word in ["principal", "action", "resource", "context", "permit", "forbid", "when", "unless"] {
            for type in [word, "A::" + word, word + "::B"] {
                let uid = try #require(EntityUID(parsing: type + #"::"a""#), "\(type)")
                #expect(uid.type == type)
                #expect(JSONValues.isTypeName(type), "\(type)")
                // The text form of a policy naming it writes JSON that reads back.
                let policies = try Policies(text: #"permit (principal == \#(type)::"a", action, resource);"#)
                let reread = try Policies(json: Array(policies.json.utf8))
                #expect(try Policies(text: reread.formatted).json == reread.json)
                let request = AuthorizationRequest(principal: uid, action: EntityUID(type: "Action", id: "view"), resource: EntityUID(type: "Doc", id: "d"))
                #expect(reread.isAllowed(request, entities: .empty))
                #expect(try AuthorizationRequest(json: Array(#"{"principal": {"type": "\#(type)", "id": "a"}, "action": "Action::\"view\"", "resource": "Doc::\"d\""}"#.utf8)).principal == uid)
            }
        }
        for type in ["if", "true", "in", "__cedar", "A::__cedar", "__cedar::A", "Ns::if"] {
            #expect(EntityUID(parsing: type + #"::"a""#) == nil, "\(type)")
            #expect(!JSONValues.isTypeName(type), "\(type)")
            #expect(throws: PolicyDiagnostics.self) { try EntityStore(json: Array(#"[{"uid": {"type": "\#(type)", "id": "a"}, "attrs": {}, "parents": []}]"#.utf8)) }
        }
        // Only the exact word: `__cedarX` and `If` are names, as in Cedar.
        for type in ["__cedarX", "If", "x__cedar"] { #expect(EntityUID(parsing: type + #"::"a""#)?.type == type, "\(type)") }
    }

    static func jsonPolicy(_ body: String) -> [UInt8] {
        Array(#"{"staticPolicies": {"p": {"effect": "permit", "principal": {"op": "All"}, "action": {"op": "All"}, "resource": {"op": "All"}, "conditions": [{"kind": "when", "body": \#(body)}], "annotations": {}}}, "templates": {}, "templateLinks": []}"#.utf8)
    }

    @Test("an extension value in the JSON form's Value is the constructor's call, as in Cedar: a bad argument is that policy's evaluation error, not a refused file",
          arguments: [
              (#"{"isIpv4": [{"Value": {"__extn": {"fn": "ip", "arg": "bogus"}}}]}"#, #"ip("bogus").isIpv4()"#),
              (#"{"==": {"left": {"Value": [1, {"__extn": {"fn": "ip", "arg": "bogus"}}]}, "right": {"Value": []}}}"#, #"[1, ip("bogus")] == []"#),
              (#"{"==": {"left": {"Value": {"a": {"b": {"__extn": {"fn": "decimal", "arg": "1.23456"}}}}}, "right": {"Value": {}}}}"#, #"{a: {b: decimal("1.23456")}} == {}"#),
          ])
    func badExtensionValueInJSON(_ body: String, _ text: String) throws {
        let policies = try Policies(json: Self.jsonPolicy(body))
        let request = AuthorizationRequest(principal: Self.principal, action: EntityUID(type: "Action", id: "view"), resource: EntityUID(type: "Doc", id: "d"))
        let decision = policies.isAuthorized(request, entities: .empty)
        #expect(!decision.isAllowed && decision.failures.map(\.policy.id) == ["p"])
        #expect(decision.failures.first?.error.kind == .invalidExtensionValue)
        #expect(policies.formatted.contains(text), "\(policies.formatted)")
        // It prints as that call and reads back the same, in both forms.
        #expect(try Policies(text: policies.formatted).formatted == policies.formatted)
        #expect(try Policies(json: Array(policies.json.utf8)).json == policies.json)
    }

    @Test("an extension value may be written with args, the list of its arguments, as Cedar writes it: one string is a value; in a policy's Value, other lists are the call, an evaluation error")
    func extensionArgsForm() throws {
        let good = try Policies(json: Self.jsonPolicy(#"{"isIpv4": [{"Value": {"__extn": {"fn": "ip", "args": ["10.0.0.1"]}}}]}"#))
        let request = AuthorizationRequest(principal: Self.principal, action: EntityUID(type: "Action", id: "view"), resource: EntityUID(type: "Doc", id: "d"))
        #expect(good.isAllowed(request, entities: .empty))
        #expect(good.formatted.contains(#"ip("10.0.0.1").isIpv4()"#))
        let context = try AuthorizationRequest(json: Array(#"{"principal": "User::\"a\"", "action": "Action::\"view\"", "resource": "Doc::\"d\"", "context": {"src": {"__extn": {"fn": "ip", "args": ["10.0.0.1"]}}}}"#.utf8)).context
        #expect(context["src"] == .ip(IPAddress("10.0.0.1")!))
        // In a policy, Cedar reads these as the calls `ip()`, `ip("10.0.0.1", "x")`, `ip(1)`: each an evaluation error.
        for (bad, kind) in [(#"{"fn": "ip", "args": []}"#, EvaluationError.Kind.unknownFunction), (#"{"fn": "ip", "args": ["10.0.0.1", "x"]}"#, .unknownFunction),
                            (#"{"fn": "ip", "args": [1]}"#, .typeMismatch)] {
            let policies = try Policies(json: Self.jsonPolicy(#"{"isIpv4": [{"Value": {"__extn": \#(bad)}}]}"#))
            let decision = policies.isAuthorized(request, entities: .empty)
            #expect(!decision.isAllowed && decision.failures.first?.error.kind == kind, "\(bad)")
            #expect(try Policies(text: policies.formatted).formatted == policies.formatted)
        }
        // In values (entities, requests) they are refused, as Cedar refuses them; so are both forms at once, another
        // field, or a function that is not an extension's, anywhere.
        for bad in [#"{"fn": "ip", "args": []}"#, #"{"fn": "ip", "args": ["10.0.0.1", "x"]}"#, #"{"fn": "ip", "args": [1]}"#,
                    #"{"fn": "ip", "arg": "10.0.0.1", "args": ["10.0.0.1"]}"#, #"{"fn": "ip", "arg": "10.0.0.1", "x": 1}"#, #"{"fn": "nope", "arg": "x"}"#] {
            #expect(throws: PolicyDiagnostics.self, "\(bad)") { try EntityStore(json: Array(#"[{"uid": "User::\"a\"", "attrs": {"x": {"__extn": \#(bad)}}, "parents": []}]"#.utf8)) }
        }
        for bad in [#"{"fn": "ip", "arg": "10.0.0.1", "args": ["10.0.0.1"]}"#, #"{"fn": "ip", "arg": "10.0.0.1", "x": 1}"#, #"{"fn": "nope", "arg": "x"}"#] {
            #expect(throws: PolicyDiagnostics.self, "\(bad)") { try Policies(json: Self.jsonPolicy(#"{"isIpv4": [{"Value": {"__extn": \#(bad)}}]}"#)) }
        }
    }
}
