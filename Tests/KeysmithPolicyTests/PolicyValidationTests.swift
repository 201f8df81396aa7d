import Foundation
@testable import KeysmithPolicy
import KeysmithTokens
import Synchronization
import Testing

/// Schemas: every mistake is an error before any decision, with where it is.
@Suite("Policy language: schemas fail closed")
struct PolicyValidationTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("docs/examples/photos")

    static func schema() throws -> Schema {
        try Schema(text: try String(contentsOf: root.appendingPathComponent("schema.cedarschema"), encoding: .utf8), file: "schema.cedarschema")
    }

    static func policies() throws -> Policies {
        try Policies(text: try String(contentsOf: root.appendingPathComponent("policies.cedar"), encoding: .utf8), file: "policies.cedar")
    }

    static let photoJSON = #"""
    [{"uid": {"type": "User", "id": "alice"}, "attrs": {"name": "Alice", "email": "a@example.com", "level": 1}, "parents": [{"type": "Team", "id": "infra"}]},
     {"uid": {"type": "Team", "id": "infra"}, "parents": [{"type": "Org", "id": "acme"}]},
     {"uid": {"type": "Photo", "id": "42"}, "attrs": {"owner": {"__entity": {"type": "User", "id": "alice"}}, "archived": %ARCHIVED%, "tags": []}}]
    """#

    static func diagnostics(_ body: () throws -> Void) -> PolicyDiagnostics? {
        do {
            try body()
            return nil
        } catch let error as PolicyDiagnostics {
            return error
        } catch {
            return nil
        }
    }

    @Test("the example policies validate against the example schema")
    func examplesValidate() throws {
        let policies = try Self.policies()
        try Self.schema().validate(policies)
        // The check is not a pass-through: the same policies against the schema with the
        // attribute one of them reads (`resource.archived`) renamed are refused, naming it.
        let text = try String(contentsOf: Self.root.appendingPathComponent("schema.cedarschema"), encoding: .utf8)
        #expect(policies.text.contains("resource.archived"))
        let renamed = try Schema(text: text.replacingOccurrences(of: "archived: Bool", with: "hidden: Bool"), file: "schema.cedarschema")
        let error = Self.diagnostics { try renamed.validate(policies) }
        #expect(error?.problems.contains { $0.message.contains("archived") } == true, "\(String(describing: error))")
    }

    @Test("an attribute of the wrong type, misspelled, or missing is an error, never a decision",
          arguments: [#""true""#, "1", "null", "\"\""])
    func mistypedEntityAttribute(value: String) throws {
        let schema = try Self.schema()
        let json = Self.photoJSON.replacingOccurrences(of: "%ARCHIVED%", with: value)
        let error = Self.diagnostics {
            let entities = try EntityStore(json: Array(json.utf8), file: "entities.json")
            try schema.validate(entities)
        }
        #expect(error != nil)
        #expect(error?.problems.first?.message.contains("archived") == true, "\(String(describing: error))")
    }

    @Test("a misspelled or missing attribute in an entity is an error naming the declared one")
    func misspelledAttribute() throws {
        let schema = try Self.schema()
        let json = Self.photoJSON.replacingOccurrences(of: #""archived": %ARCHIVED%"#, with: #""Archived": true"#)
        let error = try #require(Self.diagnostics { try schema.validate(try EntityStore(json: Array(json.utf8), file: "entities.json")) })
        let messages = error.problems.map(\.message)
        #expect(messages.contains { $0.contains("Archived is not declared (did you mean archived?)") }, "\(messages)")
        #expect(messages.contains { $0.contains("archived is missing") }, "\(messages)")
        #expect(error.problems.allSatisfy { $0.location.file == "entities.json" && $0.location.line == 3 })
    }

    @Test("a duplicate key anywhere is an error, not the last copy winning")
    func duplicateKeys() throws {
        let json = #"[{"uid": {"type": "User", "id": "a"}, "attrs": {"level": 1, "level": 2}}]"#
        let error = try #require(Self.diagnostics { _ = try EntityStore(json: Array(json.utf8)) })
        #expect(error.problems[0].message.contains("appears twice"))
        let request = #"{"principal": "User::\"a\"", "action": "Action::\"view\"", "resource": "Photo::\"1\"", "action": "Action::\"delete\""}"#
        #expect(throws: PolicyDiagnostics.self) { try AuthorizationRequest(json: Array(request.utf8)) }
        for number in ["+1", "01", "1.", ".5", "1e", "-"] {
            #expect(throws: PolicyDiagnostics.self, "\(number)") {
                try EntityStore(json: Array(#"[{"uid": {"type": "User", "id": "a"}, "attrs": {"level": \#(number)}}]"#.utf8))
            }
        }
    }

    @Test("requests: undeclared action, wrong principal type, undeclared or mistyped context, unknown role id")
    func requests() throws {
        let schema = try Self.schema()
        func request(_ action: String, principal: EntityUID = EntityUID(type: "User", id: "alice"),
                     context: [String: PolicyValue] = ["ip": .ip(IPAddress("10.0.0.1")!), "now": .datetime(0), "mfa": .bool(true)])
            -> AuthorizationRequest
        {
            AuthorizationRequest(principal: principal, action: EntityUID(type: "Action", id: action), resource: EntityUID(type: "Photo", id: "42"),
                                 context: context)
        }
        try schema.validate(request("delete"))
        let typo = try #require(Self.diagnostics { try schema.validate(request("delet")) })
        #expect(typo.problems[0].message.contains("did you mean delete?"))
        #expect(Self.diagnostics { try schema.validate(request("delete", principal: EntityUID(type: "Team", id: "infra"))) } != nil)
        #expect(Self.diagnostics { try schema.validate(request("delete", context: ["ip": .ip(IPAddress("10.0.0.1")!), "now": .datetime(0), "mfa": .string("true")])) } != nil)
        #expect(Self.diagnostics { try schema.validate(request("delete", context: ["ip": .ip(IPAddress("10.0.0.1")!), "now": .datetime(0)])) } != nil)
        #expect(Self.diagnostics { try schema.validate(request("delete", context: ["ip": .ip(IPAddress("10.0.0.1")!), "now": .datetime(0), "mfa": .bool(true), "MFA": .bool(true)])) } != nil)
        #expect(Self.diagnostics { try schema.validate(request("delete", context: ["ip": .ip(IPAddress("10.0.0.1")!), "now": .datetime(0), "mfa": .bool(true), "token": .bool(true)])) } != nil)
        // Roles are an enumerated entity type: a misspelled role is an error wherever it appears.
        let json = #"[{"uid": {"type": "User", "id": "bob"}, "attrs": {"name": "B", "email": "b@x", "level": 1}, "parents": [{"type": "Role", "id": "admn"}]}]"#
        let role = try #require(Self.diagnostics { try schema.validate(try EntityStore(json: Array(json.utf8))) })
        #expect(role.problems[0].message.contains("did you mean \"admin\"") || role.problems[0].message.contains("did you mean admin"), "\(role)")
    }

    @Test("policy mistakes are all reported in one run, each with file:line:column")
    func policyMistakes() throws {
        let schema = try Self.schema()
        let text = """
        permit (principal, action == Action::"delet", resource);
        permit (principal in Role::"admn", action == Action::"view", resource);
        permit (principal, action == Action::"view", resource is Photo)
        when { resource.Archived == false };
        permit (principal, action == Action::"view", resource is Photo)
        when { resource.shareExpires > context.now };
        permit (principal, action == Action::"view", resource is Photo)
        when { resource.archived == "true" };
        permit (principal, action == Action::"view", resource is Phot);
        """
        let error = try #require(Self.diagnostics { try schema.validate(try Policies(text: text, file: "bad.cedar")) })
        let lines = error.problems.map(\.location.line)
        #expect(Set(lines) == [1, 2, 4, 6, 8, 9], "\(error)")
        #expect(error.problems.allSatisfy { $0.location.file == "bad.cedar" })
        let messages = error.description
        #expect(messages.contains("did you mean delete?"))
        #expect(messages.contains("did you mean \"admin\"") || messages.contains("did you mean admin"))
        #expect(messages.contains("did you mean archived?"))
        #expect(messages.contains("optional"))
        #expect(messages.contains("did you mean Photo?"))
        #expect(error.problems.first { $0.location.line == 4 }?.location.column == 8)
    }

    @Test("a request in JSON reports every problem in one run: each bad extension value, each unknown field, each part that is not an entity (the first stopped it), none echoing the values")
    func requestProblemsAllAtOnce() throws {
        let json = #"""
            {"principal": "User::alice", "action": {"type": "Action", "id": "view"}, "resource": "Photo::\"p\"", "extra": 1,
             "context": {"ip": {"__extn": {"fn": "ip", "arg": "SECRET6"}}, "now": {"__extn": {"fn": "datetime", "arg": "SECRET7"}}, "n": 1.5, "mfa": true}}
            """#
        let error = try #require(Self.diagnostics { _ = try AuthorizationRequest(json: Array(json.utf8), file: "r.json") })
        let messages = error.problems.map(\.message)
        #expect(messages.count == 5, "\(messages)")
        for part in ["the principal", "extra", "context.ip", "context.now", "context.n"] {
            #expect(messages.contains { $0.contains(part) }, "\(part): \(messages)")
        }
        #expect(!error.description.contains("SECRET"), "\(error)")
    }

    @Test("context.token.since is typed: each scope's time is an optional datetime, read after has")
    func scopeTimesAreTyped() throws {
        let schema = try Self.schema()
        let good = """
        forbid (principal, action == Action::"view", resource)
        when { context has token && context.token.since has "photos:read" && context.token.since["photos:read"] > context.now };
        """
        try schema.validate(try Policies(text: good, file: "good.cedar"))
        let bad = """
        forbid (principal, action == Action::"view", resource)
        when { context has token && context.token.since["photos:read"] > context.now };
        forbid (principal, action == Action::"view", resource)
        when { context has token && context.token.since has "photos:read" && context.token.since["photos:read"] > 3 };
        forbid (principal, action == Action::"view", resource)
        when { context has token && context.token.since has "photos:read" && context.token.since["photos:read"].contains("x") };
        """
        let error = try #require(Self.diagnostics { try schema.validate(try Policies(text: bad, file: "bad.cedar")) })
        #expect(Set(error.problems.map(\.location.line)) == [2, 4, 6], "\(error)")
        #expect(error.description.contains(#"context.token.since["photos:read"] is optional: test it first (context.token.since has "photos:read""#), "\(error)")
        // An entity's optional attribute is named by its path, not by its type.
        let users = try Schema(text: "entity User { suspended?: Bool }; action view appliesTo { principal: [User], resource: [User] };", file: "s")
        let policy = try Policies(text: "permit (principal, action, resource) when { principal.suspended };")
        let optional = try #require(Self.diagnostics { try users.validate(policy) })
        #expect(optional.description.contains("principal.suspended is optional: test it first (principal has suspended && …)"), "\(optional)")
    }

    @Test("what `has` proves crosses `||` when both sides prove it, or when the other side is always false (as in Cedar); otherwise reading the optional attribute is an error",
          arguments: [
              ("(principal has suspended || false) && principal.suspended", true),
              ("(false || principal has suspended) && principal.suspended", true),
              ("(principal has suspended || principal is Photo) && principal.suspended", true),  // always false: a User is not a Photo
              ("(principal has suspended && principal.level > 1 || principal has suspended && principal.level < -1) && principal.suspended", true),
              ("(principal has suspended || principal.level > 1) && principal.suspended", false),
              ("(principal has suspended || true) && principal.suspended", false),
          ])
    func hasAcrossOr(_ condition: String, _ valid: Bool) throws {
        let policies = try Policies(text: "permit (principal, action == Action::\"view\", resource) when { \(condition) };", file: "p.cedar")
        let error = Self.diagnostics { try Self.schema().validate(policies) }
        #expect((error == nil) == valid, "\(String(describing: error))")
        if let error { #expect(error.problems.allSatisfy { $0.message.contains("suspended") }, "\(error)") }
    }

    @Test("syntax errors in several policies are all reported, with their lines")
    func syntaxErrors() {
        let text = """
        permit (principal, action, resource) when { 1 = 1 };
        permit (principal, action, resource);
        forbid (principal, action resource);
        permit (principal, action, resource) when { principal.a == };
        """
        let error = Self.diagnostics { _ = try Policies(text: text, file: "x.cedar") }
        #expect(error?.problems.map(\.location.line) == [1, 3, 4])
        #expect(error?.kind == .syntax)
    }

    /// Conditions `levels` deep (a lone term is one level), nested in each way the language
    /// allows: parentheses, a chain of one left-associative operator, a chain of members,
    /// `if … else if`, and chains inside parentheses inside chains.
    static let nestings: [(name: String, condition: @Sendable (Int) -> String)] = [
        ("parentheses", { String(repeating: "(", count: $0 - 1) + "true" + String(repeating: ")", count: $0 - 1) }),
        ("||", { Array(repeating: "true", count: $0).joined(separator: " || ") }),
        ("&&", { Array(repeating: "true", count: $0).joined(separator: " && ") }),
        ("+", { Array(repeating: "1", count: $0).joined(separator: " + ") }),
        ("-", { Array(repeating: "1", count: $0).joined(separator: " - ") }),
        ("*", { Array(repeating: "1", count: $0).joined(separator: " * ") }),
        ("attributes", { "context" + String(repeating: ".a", count: $0 - 1) }),
        ("brackets", { "context" + String(repeating: #"["a"]"#, count: $0 - 1) }),
        ("if", { String(repeating: "if true then false else ", count: $0 - 1) + "true" }),
        ("chains in a chain", { levels in
            "(" + Array(repeating: "false", count: levels / 2).joined(separator: " || ") + ")"
                + String(repeating: " && true", count: levels - levels / 2)
        }),
    ]

    @Test("an expression deeper than 200 levels is a syntax error with where, however it nests (a chain of 100,000 || crashed the command); one at the limit parses, decides, explains, type-checks and prints",
          arguments: nestings.map(\.name))
    func nestingIsBounded(_ name: String) throws {
        let condition = Self.nestings.first { $0.name == name }!.condition
        func policy(_ levels: Int) -> String { "@id(\"deep\")\npermit (principal, action, resource) when { \(condition(levels)) };" }
        let limit = PolicyParser.maximumDepth
        #expect(limit == 200)
        for levels in [limit + 1, 4_000, 100_000] {
            let error = Self.diagnostics { _ = try Policies(text: policy(levels), file: "deep.cedar") }
            #expect(error?.kind == .syntax, "\(levels) levels")
            #expect(error?.problems.count == 1)
            #expect(error?.problems.first?.location.line == 2)
            #expect(error?.problems.first?.message.contains("deeper than 200 levels") == true)
        }
        // At the limit, every walk over the expression finishes: deciding (the condition is
        // evaluated down to its deepest term), explaining, type checking and printing.
        let policies = try Policies(text: policy(limit), file: "deep.cedar")
        let request = AuthorizationRequest(principal: EntityUID(type: "User", id: "alice"), action: EntityUID(type: "Action", id: "view"),
                                           resource: EntityUID(type: "Photo", id: "42"), context: ["a": .record([:])])
        let decision = policies.isAuthorized(request, entities: try EntityStore())
        #expect(decision.isAllowed == ["parentheses", "||", "&&"].contains(name))
        #expect(!decision.description.isEmpty)
        #expect(policies.isAllowed(request, entities: try EntityStore()) == decision.isAllowed)
        let checked = Self.diagnostics { try Self.schema().validate(policies) }
        #expect(checked == nil || checked?.kind == .validation, "\(checked?.description ?? "")")
        // The JSON form holds it too, and reads back as the same policy.
        let again = try Policies(json: Array(policies.json.utf8), file: "deep.json")
        #expect(again.json == policies.json)
        #expect(again.isAllowed(request, entities: try EntityStore()) == decision.isAllowed)
    }

    @Test("at the nesting limit, every walk fits in 8 MB of stack (Linux's default for the main thread, Foundation's and Dispatch's threads and Swift's concurrency threads), debug build included: sets and records, the deepest readers, too",
          arguments: nestings.map(\.name) + ["sets", "records"])
    func theLimitFitsTheDefaultStack(_ name: String) async throws {
        // One level below the limit, so that `(condition) && false` (a denial to explain) is at it.
        let levels = PolicyParser.maximumDepth - 1
        let condition: String = switch name {
        case "sets": String(repeating: "[", count: levels - 2) + "1" + String(repeating: "]", count: levels - 2) + " == [1]"
        case "records": String(repeating: "{a: ", count: levels - 2) + "1" + String(repeating: "}", count: levels - 2) + " has a"
        default: Self.nestings.first { $0.name == name }!.condition(levels)
        }
        @Sendable func everyWalk() -> String {
            do {
                let policies = try Policies(text: "@id(\"deep\")\npermit (principal, action, resource) when { \(condition) };", file: "deep.cedar")
                let request = AuthorizationRequest(principal: EntityUID(type: "User", id: "alice"), action: EntityUID(type: "Action", id: "view"),
                                                   resource: EntityUID(type: "Photo", id: "42"), context: ["a": .record([:])])
                _ = policies.isAuthorized(request, entities: try EntityStore()).unmet.map(\.description)
                let denied = try Policies(text: "permit (principal, action, resource) when { (\(condition)) && false };")
                _ = denied.isAuthorized(request, entities: try EntityStore()).unmet.map(\.description)
                _ = try? Self.schema().validate(policies)
                let again = try Policies(json: Array(policies.json.utf8), file: "deep.json")
                _ = try Policies(text: again.formatted, file: "printed.cedar")
                return "read, decided, explained, checked and printed"
            } catch {
                return "\(error)"
            }
        }
        // A thread made with 8 MB, as the main thread and Foundation's threads have on Linux.
        let outcome = Mutex<String?>(nil)
        let done = DispatchSemaphore(value: 0)
        let thread = Thread {
            outcome.withLock { $0 = everyWalk() }
            done.signal()
        }
        thread.stackSize = 8 << 20
        thread.start()
        done.wait()
        #expect(outcome.withLock { $0 } == "read, decided, explained, checked and printed")
        // A Swift concurrency thread and a Dispatch thread, as they come.
        #expect(await Task.detached { everyWalk() }.value == "read, decided, explained, checked and printed")
        let dispatched = Mutex<String?>(nil)
        let finished = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            dispatched.withLock { $0 = everyWalk() }
            finished.signal()
        }
        finished.wait()
        #expect(dispatched.withLock { $0 } == "read, decided, explained, checked and printed")
    }

    @Test("a JSON policy deeper than 200 levels is a syntax error, as in text")
    func jsonNestingIsBounded() throws {
        func chain(_ levels: Int) -> String {
            var expression = #"{"Value": true}"#
            for _ in 1..<levels { expression = #"{"||": {"left": \#(expression), "right": {"Value": false}}}"# }
            return #"{"effect": "permit", "principal": {"op": "All"}, "action": {"op": "All"}, "resource": {"op": "All"}, "#
                + #""conditions": [{"kind": "when", "body": \#(expression)}]}"#
        }
        #expect(try Policies(json: Array(chain(200).utf8)).isAllowed(
            AuthorizationRequest(principal: EntityUID(type: "U", id: "u"), action: EntityUID(type: "Action", id: "a"), resource: EntityUID(type: "R", id: "r")),
            entities: try EntityStore()))
        for levels in [201, 5_000] {
            let error = Self.diagnostics { _ = try Policies(json: Array(chain(levels).utf8), file: "deep.json") }
            #expect(error?.kind == .syntax)
            #expect(error?.problems.count == 1)
            #expect(error?.problems.first.map { $0.message.contains("deeper than") && $0.location.file == "deep.json" } == true, "\(error?.description ?? "")")
        }
    }

    @Test("schema mistakes are all reported in one run")
    func schemaMistakes() {
        let text = """
        entity User in [Tem] { name: Strng };
        entity User;
        action view appliesTo { principal: [Usr], resource: [User] };
        action edit in [write] appliesTo { principal: [User], resource: [User], context: { token: Bool } };
        """
        let error = Self.diagnostics { _ = try Schema(text: text, file: "s") }
        let messages = error?.problems.map(\.message) ?? []
        #expect(messages.count >= 5, "\(messages)")
        #expect(messages.contains { $0.contains("Tem") })
        #expect(messages.contains { $0.contains("Strng") })
        #expect(messages.contains { $0.contains("declared twice") })
        #expect(messages.contains { $0.contains("Usr") })
        #expect(messages.contains { $0.contains("reserved") })
        // Every unknown type of one entity, its nested records included (only the first was).
        let unknown = Self.diagnostics { _ = try Schema(text: "entity A { x: Foo, y: Baz, z: {q: Qux, r: Set<Quux>} };", file: "s") }
        #expect(Set(unknown?.problems.map(\.message) ?? []) == ["unknown type Foo", "unknown type Baz", "unknown type Qux", "unknown type Quux"],
                "\(unknown?.problems.map(\.message) ?? [])")
    }

    @Test("a policy test naming a deciding policy twice is an error (the ids are compared as a set, so the repeat went unnoticed)")
    func testCasesListEachPolicyOnce() {
        let text = #"{"policies": ["p.cedar"], "cases": [{"name": "c", "request": {"principal": "User::\"a\"", "action": "Action::\"x\"", "resource": "R::\"r\""}, "expect": "deny", "determining": ["scope-post", "scope-post"]}]}"#
        let error = Self.diagnostics { _ = try PolicyTestSuite(json: Array(text.utf8), file: "t.json") }
        #expect(error?.problems.map(\.message) == [#"the policy id "scope-post" is listed twice"#])
        let once = text.replacingOccurrences(of: #"["scope-post", "scope-post"]"#, with: #"["scope-post"]"#)
        #expect((try? PolicyTestSuite(json: Array(once.utf8), file: "t.json"))?.cases.first?.determining == ["scope-post"])
        // A case with a bad request and a bad expect: both are reported, as is each problem of the request.
        let bad = #"{"policies": ["p.cedar"], "cases": [{"name": "c", "request": {"principal": "User::a", "action": "Action::\"x\"", "resource": "R::\"r\"", "extra": 1}, "expect": "maybe"}]}"#
        let all = Self.diagnostics { _ = try PolicyTestSuite(json: Array(bad.utf8), file: "t.json") }
        let messages = all?.problems.map(\.message) ?? []
        #expect(messages.count == 3 && messages.contains { $0.contains("the principal") } && messages.contains { $0.contains("extra") }
                && messages.contains { $0.contains("expect must be") }, "\(messages)")
    }

    @Test("action groups that form a cycle are a schema error at the action's declaration (they were reported at <entities>:1:1)")
    func actionGroupCycles() {
        let text = """
            entity User;
            action a in [b] appliesTo { principal: [User], resource: [User] };
            action b in [c] appliesTo { principal: [User], resource: [User] };
            action c in [a] appliesTo { principal: [User], resource: [User] };
            action d in [d];
            action e in [a];
            """
        let error = Self.diagnostics { _ = try Schema(text: text, file: "s.cedarschema") }
        #expect(error?.problems.map(\.description) == [
            #"s.cedarschema:2:1: Action::"a" is in itself through its action groups: they form a cycle"#,
            #"s.cedarschema:5:1: Action::"d" is in itself through its action groups: they form a cycle"#,
        ])
    }

    @Test("a common type cannot take a built-in type's name (type Long = String silently made every Long a String), nor can an entity type take an attribute type's name")
    func builtInTypeNamesAreReserved() {
        for name in ["Long", "String", "Bool", "Boolean", "Set", "Record", "Entity", "Extension", "ipaddr", "decimal", "datetime", "duration"] {
            let error = Self.diagnostics { _ = try Schema(text: "type \(name) = String;\nentity U { a: Long };", file: "s") }
            #expect(error?.problems.map(\.message) == ["the type \(name) is built in and cannot be declared"], "\(name)")
            #expect(error?.problems.first?.location.line == 1)
        }
        #expect((try? Schema(text: "type Name = String;\nentity U { a: Name };")) != nil)
        // An entity type may not take the name of a type an attribute can have (the name would be
        // ambiguous); Boolean, Record, Entity and Extension are not such names and may be taken.
        for name in ["Long", "String", "Bool", "Set", "ipaddr", "decimal", "datetime", "duration"] {
            let error = Self.diagnostics { _ = try Schema(text: "entity U;\nentity \(name);", file: "s") }
            #expect(error?.problems.map(\.message) == ["the entity type \(name) is declared twice or names a built-in type"], "\(name)")
            #expect(error?.problems.first?.location.line == 2)
        }
        for name in ["Boolean", "Record", "Entity", "Extension"] {
            #expect((try? Schema(text: "entity \(name);\nentity U { a: \(name) };")) != nil, "\(name)")
        }
    }

    @Test("entities that share one id under many types hash apart (hashing the id alone made a request or entity file of 20,000 of them take 42 s), and a store of them finds each")
    func sameIDManyTypes() throws {
        let uids = (0..<5_000).map { EntityUID(type: "T\($0)", id: "x") }
        #expect(Set(uids.map(\.hashValue)).count > 4_990)
        #expect(Set(uids).count == 5_000)
        let store = try EntityStore(uids.map { Entity(uid: $0, attributes: ["n": .string($0.type)]) })
        #expect(uids.allSatisfy { store[$0]?.attributes["n"] == .string($0.type) })
        #expect(store[EntityUID(type: "T5000", id: "x")] == nil)
        // Ids (and strings) spelled in canonically equivalent ways are different here, and hash
        // apart too (Swift's string hash is one for all of them: 5,000 such entities took 83 s).
        let spellings = ["a\u{323}\u{301}", "a\u{301}\u{323}", "\u{1EA1}\u{301}", "\u{E1}\u{323}"]
        let ids = (0..<1024).map { number in (0..<5).map { spellings[(number >> (2 * $0)) & 3] }.joined() }
        #expect(Set(ids.map { EntityUID(type: "T", id: $0).hashValue }).count > 1_000)
        #expect(Set(ids.map { EntityUID(type: "T", id: $0) }).count == 1_024)
        #expect(Set(ids.map { PolicyValue.string($0).hashValue }).count > 1_000)
        #expect(PolicyValueSet(ids.map(PolicyValue.string)).count == 1_024)
    }

    @Test("typed entities: a role on Photo::\"42\" is not a role on Album::\"42\"")
    func typedEntities() throws {
        let policies = try Policies(text: """
        permit (principal, action == Action::"delete", resource) when { principal in resource.owners };
        """)
        let photo = Entity(uid: EntityUID(type: "Photo", id: "42"), attributes: ["owners": .entity(EntityUID(type: "Owners", id: "Photo-42"))])
        let album = Entity(uid: EntityUID(type: "Album", id: "42"), attributes: ["owners": .entity(EntityUID(type: "Owners", id: "Album-42"))])
        let user = Entity(uid: EntityUID(type: "User", id: "u"), parents: [EntityUID(type: "Owners", id: "Photo-42")])
        let entities = try EntityStore([photo, album, user])
        func decide(_ resource: EntityUID) -> Bool {
            policies.isAuthorized(AuthorizationRequest(principal: user.uid, action: EntityUID(type: "Action", id: "delete"), resource: resource),
                                  entities: entities).isAllowed
        }
        #expect(decide(photo.uid))
        #expect(!decide(album.uid))
    }

    @Test("attribute and field names compare by bytes, as in Cedar: a context key or attribute written cafe + combining accent is not café, a Kelvin-sign K is not K (Swift dictionaries found them)")
    func attributeNamesCompareByBytes() throws {
        let decomposed = "cafe\u{301}", kelvin = "\u{212A}ey"
        let user = Entity(uid: EntityUID(type: "User", id: "u"), attributes: [decomposed: .bool(true), "Key": .bool(true)])
        let entities = try EntityStore([user])
        let request = AuthorizationRequest(principal: user.uid, action: EntityUID(type: "Action", id: "a"), resource: user.uid,
                                           context: [decomposed: .bool(true)])
        // Each condition, and what it is: true, false, or (nil) a missing-attribute error.
        let cases: [(String, Bool?)] = [
            (#"context has "café""#, false), ("context has \"\(decomposed)\"", true),
            (#"context["café"]"#, nil), ("context[\"\(decomposed)\"]", true),
            (#"principal has "café""#, false), ("principal has \"\(decomposed)\"", true),
            (#"principal["café"]"#, nil), ("principal[\"\(decomposed)\"]", true),
            ("principal has \"\(kelvin)\"", false), (#"principal has "Key""#, true), ("principal[\"\(kelvin)\"]", nil),
            ("resource has \"\(kelvin)\"", false), ("resource[\"\(kelvin)\"]", nil),
            ("{\"\(decomposed)\": 1} has \"café\"", false), ("{\"\(decomposed)\": 1}[\"\(decomposed)\"] == 1", true),
            ("{\"\(decomposed)\": 1}[\"café\"] == 1", nil),
        ]
        for (condition, expected) in cases {
            let policies = try Policies(text: "@id(\"p\") permit (principal, action, resource) when { \(condition) };")
            let decision = policies.isAuthorized(request, entities: entities)
            if let expected {
                #expect(decision.isAllowed == expected && decision.failures.isEmpty, "\(condition): \(decision)")
            } else {
                #expect(!decision.isAllowed && decision.failures.map(\.error.kind) == [.missingAttribute], "\(condition): \(decision)")
            }
            // The evaluator's general path (explanations, errors) answers the same.
            let evaluator = Evaluator(request, entities: entities)
            let general = Result { () throws(EvaluationError) -> Bool in try evaluator.bool(policies.policies[0].conditions[0].body) }
            #expect((try? general.get()) == expected, "\(condition)")
        }
    }

    @Test("validation compares attribute names by bytes as decisions do: what validates never meets a missing attribute for a Kelvin-sign name")
    func validationComparesAttributeNamesByBytes() throws {
        let schema = try Schema(text: """
            entity User { Key: Bool };
            action view appliesTo { principal: [User], resource: [User], context: { Key: Bool } };
            """, file: "s")
        let kelvin = "\u{212A}ey"
        // An entity whose attribute is spelled with a Kelvin sign does not have Key.
        let entity = Self.diagnostics {
            try schema.validate(try EntityStore([Entity(uid: EntityUID(type: "User", id: "u"), attributes: [kelvin: .bool(true)])]))
        }
        #expect(entity?.kind == .validation)
        #expect(entity?.problems.count == 2, "\(entity?.description ?? "")")  // Key missing, the look-alike undeclared
        // A policy reading the look-alike name reads no declared attribute.
        for condition in ["principal[\"\(kelvin)\"]", "context[\"\(kelvin)\"]",
                          "if context has \"\(kelvin)\" then true else 1 + \"x\" == 2"] {
            let policies = try Policies(text: "permit (principal, action == Action::\"view\", resource) when { \(condition) };", file: "p")
            #expect(Self.diagnostics { try schema.validate(policies) }?.kind == .validation, "\(condition)")
        }
        let plain = try Policies(text: "permit (principal, action == Action::\"view\", resource) when { principal.Key && context.Key };", file: "p")
        try schema.validate(plain)
    }

    @Test("types, enumerated ids and applies-to lists compare by bytes: a Kelvin-sign K or a decomposed é is not the declared name")
    func schemaNamesCompareByBytes() throws {
        // U+212A KELVIN SIGN is canonically equivalent to K, so Swift's == and a Swift dictionary
        // call "\u{212A}ey" the same as "Key"; Cedar, and so Keysmith, compare bytes.
        let schema = try Schema(text: """
        entity Key;
        entity Role enum ["caf\u{E9}"];
        entity User in [Key, Role] { key: Key };
        action read appliesTo { principal: [User], resource: [Key] };
        """)
        let kelvin = "\u{212A}ey", decomposed = "cafe\u{301}"
        #expect(kelvin == "Key" && decomposed == "caf\u{E9}", "the premise: Swift calls them equal")
        let key = EntityUID(type: "Key", id: "k"), user = EntityUID(type: "User", id: "u")
        func entities(_ entities: [Entity]) -> PolicyDiagnostics? {
            Self.diagnostics { try schema.validate(try EntityStore(entities)) }
        }
        #expect(entities([Entity(uid: key), Entity(uid: user, attributes: ["key": .entity(key)], parents: [key, EntityUID(type: "Role", id: "caf\u{E9}")])]) == nil)
        // Each error says the name is the letters of a declared one in other bytes, escaped.
        func saysLookAlike(_ error: PolicyDiagnostics?, _ escaped: String) -> Bool {
            error?.problems.contains { $0.message.contains("written \"\(escaped)\": not the bytes of") } == true
        }
        // Entities read from JSON must have identifier types: the error escapes the look-alike.
        let readJSON = Self.diagnostics { _ = try EntityStore(json: Array(#"[{"uid": {"type": "\#(kelvin)", "id": "1"}}]"#.utf8)) }
        #expect(readJSON?.problems.first?.message.contains(#""\u{212A}ey" is not a type name"#) == true, "\(String(describing: readJSON))")
        // An entity of the look-alike type is undeclared.
        #expect(saysLookAlike(entities([Entity(uid: EntityUID(type: kelvin, id: "k"))]), "\\u{212A}ey"))
        // A parent of the look-alike type is not one the schema allows.
        #expect(saysLookAlike(entities([Entity(uid: user, attributes: ["key": .entity(key)], parents: [EntityUID(type: kelvin, id: "k")])]), "\\u{212A}ey"))
        // An attribute declared Key holding the look-alike type is mistyped.
        #expect(saysLookAlike(entities([Entity(uid: user, attributes: ["key": .entity(EntityUID(type: kelvin, id: "k"))])]), "\\u{212A}ey"))
        // A role id with the same letters in other bytes is not one of the enumerated ids.
        #expect(saysLookAlike(entities([Entity(uid: user, attributes: ["key": .entity(key)], parents: [EntityUID(type: "Role", id: decomposed)])]), "cafe\\u{301}"))
        // A request on the look-alike type is not one the action applies to.
        let read = EntityUID(type: "Action", id: "read")
        try schema.validate(AuthorizationRequest(principal: user, action: read, resource: key))
        #expect(saysLookAlike(Self.diagnostics { try schema.validate(AuthorizationRequest(principal: user, action: read, resource: EntityUID(type: kelvin, id: "k"))) }, "\\u{212A}ey"))
        // "What may this principal do?" lists only resources of a type the action applies to.
        let everything = try Policies(text: "permit (principal, action, resource);")
        let store = try EntityStore([Entity(uid: key), Entity(uid: EntityUID(type: kelvin, id: "k2")), Entity(uid: user, attributes: ["key": .entity(key)])])
        let listed = try everything.permissions(of: user, token: nil, entities: store, schema: schema)
        #expect(listed.map(\.resource) == [key], "\(listed)")
        // Policies naming the look-alike type or id are refused, when read (a type must be an
        // identifier) or when validated.
        for policy in [#"{"effect": "permit", "principal": {"op": "All"}, "action": {"op": "All"}, "resource": {"op": "==", "entity": {"type": "\#(kelvin)", "id": "k"}}, "conditions": []}"#,
                       #"{"effect": "permit", "principal": {"op": "All"}, "action": {"op": "All"}, "resource": {"op": "is", "entity_type": "\#(kelvin)"}, "conditions": []}"#,
                       #"{"effect": "permit", "principal": {"op": "All"}, "action": {"op": "All"}, "resource": {"op": "All"}, "conditions": [{"kind": "when", "body": {"is": {"left": {"Var": "resource"}, "entity_type": "\#(kelvin)"}}}]}"#,
                       #"{"effect": "permit", "principal": {"op": "in", "entity": {"type": "Role", "id": "\#(decomposed)"}}, "action": {"op": "All"}, "resource": {"op": "All"}, "conditions": []}"#] {
            #expect(Self.diagnostics { try schema.validate(try Policies(json: Array(policy.utf8))) } != nil, "\(policy)")
        }
    }

    @Test("a forbid whose condition errs denies, and the decision says why")
    func failClosed() throws {
        let policies = try Policies(text: """
        permit (principal, action, resource);
        @id("no-archived")
        forbid (principal, action, resource) when { resource.archived };
        """)
        let resource = Entity(uid: EntityUID(type: "Photo", id: "1"), attributes: ["Archived": .bool(true)])
        let decision = policies.isAuthorized(
            AuthorizationRequest(principal: EntityUID(type: "User", id: "u"), action: EntityUID(type: "Action", id: "delete"), resource: resource.uid),
            entities: try EntityStore([resource]))
        #expect(!decision.isAllowed)
        #expect(decision.failures.map(\.policy.id) == ["no-archived"])
        #expect(decision.failures[0].error.kind == .missingAttribute)
        #expect(decision.description.contains("could not be evaluated"))
        // A denial caused by a failed forbid is explained by the failure alone: the permits
        // that did not apply are not listed (they did not decide it).
        let withPermit = try Policies(text: """
        forbid (principal, action, resource) when { principal.nope };
        permit (principal, action, resource) when { context.n == 1 };
        """)
        let user = Entity(uid: EntityUID(type: "User", id: "a"))
        let denied = withPermit.isAuthorized(
            AuthorizationRequest(principal: user.uid, action: EntityUID(type: "Action", id: "x"), resource: user.uid, context: ["n": .long(2)]),
            entities: try EntityStore([user]))
        #expect(!denied.isAllowed)
        #expect(denied.failures.map(\.policy.id) == ["policy0"])
        #expect(denied.unmet == [], "\(denied)")
    }

    @Test("a store's entities have at most ten million ancestors in all (a chain of 4,000 parents took 1 GB, a cycle of 100,000 ran out of time); a large cycle is reported as its first ten members and how many more")
    func hierarchiesAreBounded() throws {
        #expect(EntityStore.maximumAncestorLinks == 10_000_000)
        // A chain u0 -> u1 -> ... -> u99: u_i is in 99 - i others, 4,950 in all.
        let chain = (0..<100).map { Entity(uid: EntityUID(type: "U", id: "u\($0)"), parents: $0 < 99 ? [EntityUID(type: "U", id: "u\($0 + 1)")] : []) }
        let store = try EntityStore(chain, ancestorLinks: 4_950)
        #expect(store.isDescendant(EntityUID(type: "U", id: "u0"), of: EntityUID(type: "U", id: "u99")))
        let refused = Self.diagnostics { _ = try EntityStore(chain, ancestorLinks: 4_949) }
        #expect(refused?.kind == .input)
        #expect(refused?.problems.count == 1)
        #expect(refused?.problems.first?.message.contains("takes more than 4949 steps to walk") == true)
        // A cycle of 30 (each its own ancestor): ten named, then how many more.
        let cycle = (0..<30).map { Entity(uid: EntityUID(type: "U", id: "c\($0)"), parents: [EntityUID(type: "U", id: "c\(($0 + 1) % 30)")]) }
        let cyclic = Self.diagnostics { _ = try EntityStore(cycle) }
        #expect(cyclic?.problems.count == 11)
        #expect(cyclic?.problems.last?.message == "and 20 more entities are their own ancestors (the first ten are listed)")
    }

    @Test("a cycle of parents is an error naming the entities' lines")
    func parentCycle() {
        let json = """
        [{"uid": {"type": "Team", "id": "a"}, "parents": [{"type": "Team", "id": "b"}]},
         {"uid": {"type": "Team", "id": "b"}, "parents": [{"type": "Team", "id": "a"}]},
         {"uid": {"type": "Team", "id": "c"}, "parents": [{"type": "Team", "id": "a"}]}]
        """
        let error = Self.diagnostics { _ = try EntityStore(json: Array(json.utf8), file: "teams.json") }
        #expect(error?.problems.map(\.location.line) == [1, 2])
        #expect(error?.problems.allSatisfy { $0.location.file == "teams.json" && $0.message.contains("cycle") } == true)
    }
}
