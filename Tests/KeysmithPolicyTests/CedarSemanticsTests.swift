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
                // In a condition too (`principal::"a"` was read as the variable, then a syntax error),
                // and what `policy format` prints of it reads back.
                let condition = try Policies(text: #"permit (principal, action, resource) when { principal == \#(type)::"a" && [\#(type)::"a"].contains(principal) };"#)
                #expect(condition.isAllowed(request, entities: .empty))
                #expect(try Policies(text: condition.formatted).formatted == condition.formatted)
                #expect(try Policies(text: Policies(json: Array(condition.json.utf8)).formatted).isAllowed(request, entities: .empty))
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

/// With a schema, data that does not conform is refused, as Cedar refuses it (a second
/// differential run against cedarpy, session 16).
@Suite("Policy language: schemas agree with Cedar")
struct SchemaAgreementTests {
    static let schema = """
        entity User; entity Doc; action read;
        action view in [read] appliesTo { principal: [User], resource: [Doc] };
        action ping appliesTo { principal: [User], resource: [Doc] };
        """

    static func entities(_ json: String) throws -> EntityStore { try EntityStore(json: Array(json.utf8)) }

    @Test("action entities in the data must be the schema's own: an entities file cannot put an action in a group, take it out of one, give it attributes or name an undeclared action")
    func actionEntitiesMatchTheSchema() throws {
        let schema = try Schema(text: Self.schema)
        let policies = try Policies(text: #"permit (principal, action in Action::"read", resource);"#)
        try schema.validate(policies)
        func request(_ action: String) -> AuthorizationRequest {
            AuthorizationRequest(principal: EntityUID(type: "User", id: "u"), action: EntityUID(type: "Action", id: action), resource: EntityUID(type: "Doc", id: "d"))
        }
        // Given exactly as declared (Cedar accepts them), they change nothing.
        for json in [#"[{"uid": {"type": "Action", "id": "view"}, "attrs": {}, "parents": [{"type": "Action", "id": "read"}]}]"#,
                     #"[{"uid": {"type": "Action", "id": "read"}, "attrs": {}, "parents": []}]"#] {
            var store = try Self.entities(json)
            try schema.validate(store)
            try store.add(schema.actionEntities.filter { store[$0.uid] == nil })
            #expect(policies.isAllowed(request("view"), entities: store))
            #expect(!policies.isAllowed(request("ping"), entities: store))
        }
        // Otherwise each is an error naming the action (ping was allowed, view denied).
        for (json, says) in [
            (#"[{"uid": {"type": "Action", "id": "ping"}, "attrs": {}, "parents": [{"type": "Action", "id": "read"}]}]"#, #"Action::"ping""#),
            (#"[{"uid": {"type": "Action", "id": "view"}, "attrs": {}, "parents": []}]"#, #"Action::"view""#),
            (#"[{"uid": {"type": "Action", "id": "view"}, "attrs": {"x": 1}, "parents": [{"type": "Action", "id": "read"}]}]"#, #"Action::"view""#),
            (#"[{"uid": {"type": "Action", "id": "ping"}, "attrs": {}, "parents": [{"type": "Group", "id": "g"}]}]"#, #"Action::"ping""#),
            (#"[{"uid": {"type": "Action", "id": "nope"}, "attrs": {}, "parents": []}]"#, "not declared"),
        ] {
            let store = try Self.entities(json)
            let error = #expect(throws: PolicyDiagnostics.self, "\(json)") { try schema.validate(store) }
            #expect(error?.kind == .validation)
            #expect(error?.problems.first?.message.contains(says) == true, "\(error?.problems.first?.message ?? "")")
        }
        // Groups compare transitively, as in Cedar: with read in [rw] and rw in [all], data giving
        // read in [rw] alone is refused (its ancestors in the data are rw only); read in [rw, all],
        // or rw given in all beside it, is accepted.
        let groups = try Schema(text: "entity User; entity Doc; action all; action rw in [all]; action read in [rw] appliesTo { principal: [User], resource: [Doc] };")
        func action(_ id: String, _ parents: [String]) -> String {
            #"{"uid": {"type": "Action", "id": "\#(id)"}, "attrs": {}, "parents": [\#(parents.map { #"{"type": "Action", "id": "\#($0)"}"# }.joined(separator: ", "))]}"#
        }
        #expect(throws: PolicyDiagnostics.self) { try groups.validate(Self.entities("[\(action("read", ["rw"]))]")) }
        try groups.validate(Self.entities("[\(action("read", ["rw", "all"]))]"))
        try groups.validate(Self.entities("[\(action("read", ["rw"])), \(action("rw", ["all"]))]"))
        #expect(throws: PolicyDiagnostics.self) { try groups.validate(Self.entities("[\(action("read", ["rw", "all"])), \(action("rw", []))]")) }
    }

    @Test("a value of the wrong type in a request or an entity is named by its path and type, never repeated: it may be a secret")
    func dataErrorsDoNotEchoValues() throws {
        let schema = try Schema(text: #"entity Role enum ["admin"]; entity G; entity User { level: Long, home: ipaddr }; entity Doc; action view appliesTo { principal: [User], resource: [Doc], context: { depth: Long, src: ipaddr, g: G, r: Role } };"#)
        let secret = "sk_live_" + String(repeating: "Q", count: 64)
        var messages: [String] = []
        let rest = #""g": {"__entity": {"type": "G", "id": "g"}}, "r": {"__entity": {"type": "Role", "id": "admin"}}"#
        for context in [#"{"depth": 1, "src": {"__extn": {"fn": "ip", "arg": "10.0.0.1"}}, "g": {"__entity": {"type": "Role", "id": "\#(secret)"}}, "r": {"__entity": {"type": "Role", "id": "\#(secret)"}}}"#,
                        #"{"depth": 1, "src": {"__extn": {"fn": "\#(secret)", "arg": "10.0.0.1"}}, \#(rest)}"#,
                        #"{"depth": "\#(secret)", "src": {"__extn": {"fn": "ip", "arg": "10.0.0.1"}}, \#(rest)}"#,
                        #"{"depth": 1, "src": {"__extn": {"fn": "ip", "arg": "\#(secret)"}}, \#(rest)}"#,
                        #"{"depth": {"pw": "\#(secret)"}, "src": "\#(secret)", \#(rest)}"#] {
            do {
                let request = try AuthorizationRequest(json: Array(#"{"principal": "User::\"u\"", "action": "Action::\"view\"", "resource": "Doc::\"d\"", "context": \#(context)}"#.utf8))
                try schema.validate(request)
                Issue.record("accepted \(context)")
            } catch {
                messages += error.problems.map(\.message)
            }
        }
        do {
            try schema.validate(EntityStore(json: Array(#"[{"uid": "User::\"u\"", "attrs": {"level": "\#(secret)", "home": {"__extn": {"fn": "ip", "arg": "\#(secret)"}}}, "parents": []}]"#.utf8)))
            Issue.record("accepted the entity")
        } catch {
            messages += error.problems.map(\.message)
        }
        do {
            try schema.validate(EntityStore(json: Array(#"[{"uid": "User::\"u\"", "attrs": {"level": "\#(secret)", "home": "\#(secret)"}, "parents": []}]"#.utf8)))
            Issue.record("accepted the entity")
        } catch {
            messages += error.problems.map(\.message)
        }
        // An entity value whose type is not a name at all is data too.
        do {
            _ = try AuthorizationRequest(json: Array(#"{"principal": "User::\"u\"", "action": "Action::\"view\"", "resource": "Doc::\"d\"", "context": {"g": {"__entity": {"type": "\#(secret) x", "id": "a"}}}}"#.utf8))
            Issue.record("accepted a malformed type")
        } catch {
            messages += error.problems.map(\.message)
        }
        #expect(messages.count >= 10, "\(messages)")
        #expect(messages.contains("context.g must be an entity of type G, not one of type Role"), "\(messages)")
        for message in messages { #expect(!message.contains("QQQQ"), "\(message)") }
        #expect(messages.contains("context.depth must be Long, not String"), "\(messages)")
        #expect(messages.contains { $0.contains("is not an IP address or range") }, "\(messages)")
    }

    @Test("refusals say what is wrong: an undeclared type, an action that applies to nothing, a parent given twice reported once")
    func refusalMessages() throws {
        let schema = try Schema(text: Self.schema + " action lone; entity Team; entity Member in [Team];")
        func problems(_ principal: String, _ action: String) -> [String] {
            do {
                try schema.validate(AuthorizationRequest(principal: EntityUID(type: principal, id: "u"), action: EntityUID(type: "Action", id: action),
                                                         resource: EntityUID(type: "Doc", id: "d")))
                return []
            } catch { return error.problems.map(\.message) }
        }
        #expect(problems("Nope", "view") == [#"Action::"view" does not apply to a principal of type Nope, a type the schema does not declare (it applies to User)"#])
        #expect(problems("User", "lone") == [#"Action::"lone" does not apply to a principal of type User (it applies to no principal: it has no appliesTo)"#,
                                             #"Action::"lone" does not apply to a resource of type Doc (it applies to no resource: it has no appliesTo)"#])
        let twice = #expect(throws: PolicyDiagnostics.self) {
            try schema.validate(Self.entities(#"[{"uid": "Member::\"m\"", "attrs": {}, "parents": ["Doc::\"d\"", "Doc::\"d\""]}]"#))
        }
        #expect(twice?.problems.count == 1, "\(twice?.problems ?? [])")
        let cycle = #expect(throws: PolicyDiagnostics.self) { try Schema(text: "type A = { a: A }; entity U { x: A, y: A };") }
        #expect(cycle?.problems.map(\.message).filter { $0.contains("refers to itself") }.count == 1, "\(cycle?.problems ?? [])")
    }

    @Test("refusing large bad data is bounded: 'did you mean' for the first 100 problems only, at most ten enum ids listed, a parent type reached through a long chain found in one walk")
    func largeBadData() throws {
        // 2,000 undeclared attributes against 300 declared: each gets its problem, the first 100 a suggestion.
        let fields = (0..<300).map { "f\($0)?: Long" }.joined(separator: ", ")
        let schema = try Schema(text: #"entity Role enum [\#((0..<50).map { "\"r\($0)\"" }.joined(separator: ", "))]; entity User in [Role] { \#(fields) };"#)
        let attributes = (0..<2_000).map { #""g\#($0)": 1"# }.joined(separator: ", ")
        let error = #expect(throws: PolicyDiagnostics.self) {
            try schema.validate(EntityStore(json: Array(#"[{"uid": "User::\"u\"", "attrs": {\#(attributes)}, "parents": ["Role::\"zz\""]}]"#.utf8)))
        }
        let messages = error?.problems.map(\.message) ?? []
        #expect(messages.count == 2_001)
        #expect(messages.filter { $0.contains("did you mean") }.count <= Schema.suggestedProblems)
        #expect(messages.contains { $0.contains(#"is not one of the declared Role ids ("r0", "#) && $0.contains("… 40 more") }, "\(messages.first ?? "")")
        // A chain of 3,000 types, each entity directly in the last one (allowed: it is an ancestor type).
        let chain = (0..<3_000).map { "entity T\($0) in [T\($0 + 1)];" }.joined(separator: " ") + " entity T3000;"
        let long = try Schema(text: chain)
        let entities = (0..<3_000).map { #"{"uid": "T\#($0)::\"x\"", "attrs": {}, "parents": ["T3000::\"top\""]}"# }.joined(separator: ", ")
        try long.validate(EntityStore(json: Array("[\(entities)]".utf8)))
        #expect(throws: PolicyDiagnostics.self) { try long.validate(EntityStore(json: Array(#"[{"uid": "T5::\"x\"", "attrs": {}, "parents": ["T2::\"x\""]}]"#.utf8))) }
    }

    @Test("-0 is not a Long in JSON data (Cedar refuses it), and 0 is")
    func negativeZero() throws {
        for json in [#"[{"uid": "User::\"u\"", "attrs": {"level": -0}, "parents": []}]"#, #"[{"uid": "User::\"u\"", "attrs": {"level": [1, -0]}, "parents": []}]"#] {
            #expect(throws: PolicyDiagnostics.self, "\(json)") { try EntityStore(json: Array(json.utf8)) }
        }
        #expect(throws: PolicyDiagnostics.self) {
            try AuthorizationRequest(json: Array(#"{"principal": "User::\"u\"", "action": "Action::\"view\"", "resource": "Doc::\"d\"", "context": {"depth": -0}}"#.utf8))
        }
        let store = try EntityStore(json: Array(#"[{"uid": "User::\"u\"", "attrs": {"level": 0, "low": -1}, "parents": []}]"#.utf8))
        #expect(store[EntityUID(type: "User", id: "u")]?.attributes == ["level": .long(0), "low": .long(-1)])
    }

    @Test("a schema cannot use a word Cedar reserves unquoted: attribute, type or action names (quoted, an attribute or action may)",
          arguments: ["entity U { if: Long };", "entity in;", "entity U; action in appliesTo { principal: U, resource: U };",
                      "entity U; action a appliesTo { principal: U, resource: U, context: { then: Long } };", "type if = Long; entity U;",
                      "entity U { true: Bool };", "entity U { has: Bool };", "entity __cedar;", "entity U in [like];", "entity A::is;"])
    func schemaReservedWords(_ text: String) {
        let error = #expect(throws: PolicyDiagnostics.self) { try Schema(text: text) }
        #expect(error?.problems.first?.message.contains("reserved") == true, "\(error?.problems.first?.message ?? "")")
    }

    @Test("quoted, reserved words name attributes and actions; other keywords name anything", arguments: [
        #"entity U { "if": Long };"#, #"entity U; action "in" appliesTo { principal: U, resource: U };"#,
        "entity U { t: T }; type T = { principal: Long, when: Bool };", "entity when { __cedar: Bool };", "entity U { a: __cedar::Long };",
        "entity U; action __cedar appliesTo { principal: U, resource: U };",
    ])
    func schemaQuotedReservedWords(_ text: String) throws {
        let schema = try Schema(text: text)
        // Each name is declared as written, not dropped or read as the keyword.
        switch text {
        case #"entity U { "if": Long };"#:
            #expect(schema.entityType(named: "U")?.attributes["if"]?.type == .long)
        case #"entity U; action "in" appliesTo { principal: U, resource: U };"#:
            #expect(schema.actions[EntityUID(type: "Action", id: "in")]?.principals == ["U"])
        case "entity U { t: T }; type T = { principal: Long, when: Bool };":
            guard case .record(let fields)? = schema.entityType(named: "U")?.attributes["t"]?.type else {
                Issue.record("T is not a record: \(String(describing: schema.entityType(named: "U")))")
                return
            }
            #expect(fields["principal"]?.type == .long && fields["when"]?.type == .bool)
        case "entity when { __cedar: Bool };":
            #expect(schema.entityType(named: "when")?.attributes["__cedar"]?.type == .bool)
        case "entity U { a: __cedar::Long };":
            #expect(schema.entityType(named: "U")?.attributes["a"]?.type == .long)
        default:
            #expect(schema.actions[EntityUID(type: "Action", id: "__cedar")]?.resources == ["U"])
        }
    }

    @Test("an entity's parent may be of any type its declared parent types are in, transitively, as in Cedar (User in Group in Org: a User may be in an Org)")
    func transitiveParentTypes() throws {
        let schema = try Schema(text: "entity Org; entity Group in [Org]; entity User in [Group]; entity Doc;")
        try schema.validate(Self.entities(#"[{"uid": {"type": "User", "id": "u"}, "attrs": {}, "parents": [{"type": "Org", "id": "o"}]}]"#))
        // A type the declared parents are not in stays an error; so does a child type.
        for parent in ["Doc", "User"] {
            #expect(throws: PolicyDiagnostics.self, "\(parent)") {
                try schema.validate(Self.entities(#"[{"uid": {"type": "User", "id": "u"}, "attrs": {}, "parents": [{"type": "\#(parent)", "id": "o"}]}]"#))
            }
        }
        #expect(throws: PolicyDiagnostics.self) {
            try schema.validate(Self.entities(#"[{"uid": {"type": "Org", "id": "o"}, "attrs": {}, "parents": [{"type": "Group", "id": "g"}]}]"#))
        }
    }
}

extension CedarSemanticsTests {
    @Test("a literal in the JSON form is as deep as the text it prints as: a value nested past the limit is refused there as in text, and one within it prints text that reads back")
    func deepJSONLiteralsRoundTrip() throws {
        func nested(_ depth: Int, _ inner: String) -> String { String(repeating: "[", count: depth) + inner + String(repeating: "]", count: depth) }
        let request = AuthorizationRequest(principal: Self.principal, action: EntityUID(type: "Action", id: "view"), resource: EntityUID(type: "Doc", id: "d"))
        // Within the limit (the == and the literal's levels), valid or with a bad ip() inside: prints, reads back, decides the same.
        for inner in ["1", #"{"__extn": {"fn": "ip", "arg": "10.0.0.1"}}"#, #"{"__extn": {"fn": "ip", "arg": "bogus"}}"#] {
            for depth in [1, 150, 197] {
                let body = #"{"==": {"left": {"Value": \#(nested(depth, inner))}, "right": {"Value": 1}}}"#
                let policies = try Policies(json: Self.jsonPolicy(body))
                let reread = try Policies(text: policies.formatted)
                #expect(reread.formatted == policies.formatted, "\(depth)")
                #expect(reread.isAuthorized(request, entities: .empty).failures.count == policies.isAuthorized(request, entities: .empty).failures.count)
            }
            // Past it: the same error text gives (it was accepted, and printed text the reader refused).
            let deep = #"{"==": {"left": {"Value": \#(nested(205, inner))}, "right": {"Value": 1}}}"#
            let error = #expect(throws: PolicyDiagnostics.self) { try Policies(json: Self.jsonPolicy(deep)) }
            #expect(error?.problems.first?.message.contains("nests deeper than 200 levels") == true, "\(error?.problems.first?.message ?? "")")
            #expect(throws: PolicyDiagnostics.self) {
                try Policies(text: "permit (principal, action, resource) when { \(nested(205, inner.hasPrefix("{") ? #"ip("10.0.0.1")"# : inner)) == 1 };")
            }
        }
    }
}
