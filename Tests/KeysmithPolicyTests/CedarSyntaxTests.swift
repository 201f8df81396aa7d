import Foundation
@testable import KeysmithPolicy
import Testing

/// Syntax Cedar accepts is accepted and means what it means in Cedar; syntax Cedar refuses is a
/// syntax error with where. (The random policies of the oracle suite use these forms too, and
/// are decided by Cedar itself.)
@Suite("Policy language: Cedar's syntax")
struct CedarSyntaxTests {
    static func decide(_ condition: String, context: [String: PolicyValue] = [:]) throws -> AuthorizationDecision {
        let policies = try Policies(text: "@id(\"p\") permit (principal, action, resource) when { \(condition) };")
        return policies.isAuthorized(AuthorizationRequest(principal: EntityUID(type: "User", id: "a"), action: EntityUID(type: "Action", id: "view"),
                                                          resource: EntityUID(type: "Doc", id: "d"), context: context), entities: .empty)
    }

    /// The one syntax problem of `text`, as `line:column: message`, or nil when it parses.
    static func syntaxProblem(_ text: String) -> String? {
        do {
            _ = try Policies(text: text, file: "p.cedar")
            return nil
        } catch {
            guard error.kind == .syntax, error.problems.count == 1, let problem = error.problems.first else { return "\(error)" }
            return "\(problem.location.line):\(problem.location.column): \(problem.message)"
        }
    }

    @Test("a trailing comma is accepted after a policy's head, in sets, records, arguments and action lists, and changes nothing",
          arguments: [
              ("permit (principal, action, resource,);", "permit (principal, action, resource);"),
              ("permit (principal, action in [Action::\"view\", Action::\"edit\",], resource);",
               "permit (principal, action in [Action::\"view\", Action::\"edit\"], resource);"),
              ("permit (principal, action, resource) when { [1, 2,].contains(2,) && {a: 1, \"b\": 2,}.b == 2 && ip(\"10.0.0.1\",).isIpv4() };",
               "permit (principal, action, resource) when { [1, 2].contains(2) && {a: 1, \"b\": 2}.b == 2 && ip(\"10.0.0.1\").isIpv4() };"),
          ])
    func trailingCommas(_ written: String, _ plain: String) throws {
        let policies = try Policies(text: written)
        let expected = try Policies(text: plain)
        #expect(PolicyPrinter.print(policies.policies[0]) == PolicyPrinter.print(expected.policies[0]))
        let request = AuthorizationRequest(principal: EntityUID(type: "User", id: "a"), action: EntityUID(type: "Action", id: "view"),
                                           resource: EntityUID(type: "Doc", id: "d"))
        #expect(policies.isAllowed(request, entities: .empty))
    }

    @Test("only one trailing comma, and only after an item: two commas, or a comma alone, are syntax errors with where",
          arguments: [
              ("permit (principal, action, resource,,);", "1:37: expected ')' to close the policy's head, found ','"),
              ("permit (principal, action, resource) when { [1,,2].isEmpty() };", "1:48: expected an expression, found ','"),
              ("permit (principal, action, resource) when { [1,2,,].isEmpty() };", "1:50: expected an expression, found ','"),
              ("permit (principal, action, resource) when { [,].isEmpty() };", "1:46: expected an expression, found ','"),
              ("permit (principal, action, resource) when { {,} == {} };", "1:46: expected a field name in the record"),
              ("permit (principal, action, resource) when { [].isEmpty(,) };", "1:56: expected an expression, found ','"),
              ("permit (principal, action in [,], resource);", "1:31: expected an entity such as User::\"alice\", found ','"),
              ("permit (principal, action in [Action::\"a\",,], resource);", "1:43: expected an entity such as User::\"alice\", found ','"),
          ])
    func extraCommas(_ text: String, _ expected: String) {
        #expect(Self.syntaxProblem(text) == expected)
    }

    @Test("`e has a.b.c` tests each step as Cedar does: e has a && e.a has b && e.a.b has c")
    func hasPath() throws {
        func record(_ fields: [String: PolicyValue]) -> PolicyValue { .record(fields) }
        let full: [String: PolicyValue] = ["a": record(["b": record(["c": .long(1)])])]
        #expect(try Self.decide("context has a.b.c", context: full).isAllowed)
        #expect(try Self.decide("context has a .b", context: full).isAllowed)
        #expect(try !Self.decide("context has a.b.d", context: full).isAllowed)
        #expect(try !Self.decide("context has x.b.c", context: full).isAllowed)
        #expect(try Self.decide("!(context has x.b)", context: full).isAllowed)  // false, not an error: `has a` fails first
        // A step into a value that is neither a record nor an entity is an error (the policy
        // does not apply, and says why), as `context.a.b.c has d` would be.
        let error = try Self.decide("context has a.b.c.d", context: full)
        #expect(!error.isAllowed)
        #expect(error.failures.map(\.policy.id) == ["p"])
        // The JSON form is Cedar's: the steps joined by &&.
        let policies = try Policies(text: "permit (principal, action, resource) when { context has a.b.c };")
        let printed = PolicyPrinter.print(try Policies(json: Array(policies.json.utf8)).policies[0])
        #expect(printed.contains("context has a && context.a has b && context.a.b has c"), "\(printed)")
    }

    @Test("a path after `has` is attribute names only: no quoted step, no trailing dot, no method call",
          arguments: [
              ("permit (principal, action, resource) when { context has \"a\".b };",
               "1:60: a quoted name after 'has' takes no path: write the names unquoted (context has a.b)"),
              ("permit (principal, action, resource) when { context has a. };", "1:60: expected an attribute name after '.' in the path after 'has'"),
              ("permit (principal, action, resource) when { context has a.\"b\" };", "1:59: expected an attribute name after '.' in the path after 'has'"),
              ("permit (principal, action, resource) when { context has a.b.contains(1) };", "1:69: a path after 'has' names attributes only, not a method call"),
          ])
    func hasPathErrors(_ text: String, _ expected: String) {
        #expect(Self.syntaxProblem(text) == expected)
    }

    @Test("a path after `has` nests like the attribute reads it stands for: 100,000 steps are one syntax error")
    func longHasPath() {
        let text = "permit (principal, action, resource) when { context has a" + String(repeating: ".a", count: 100_000) + " };"
        let problem = Self.syntaxProblem(text)
        #expect(problem?.hasSuffix("the expression nests deeper than 200 levels") == true, "\(String(describing: problem))")
    }

    @Test("a has path on a has path on a has path… is refused once it would repeat more than 1,000 expressions (18 levels in 234 bytes took 8.9 s and 337 MB)")
    func nestedHasPaths() {
        var condition = "context"
        for _ in 0..<18 { condition = "(\(condition) has a.a)" }
        let problem = Self.syntaxProblem("permit (principal, action, resource) when { \(condition) };")
        #expect(problem?.hasSuffix("the path after 'has' would repeat the expression before it 2 times, more than 1000 expressions in all: test each step with its own 'has'") == true,
                "\(String(describing: problem))")
        // A few levels are fine, and mean what Cedar says: each step tested.
        var few = "context"
        for _ in 0..<3 { few = "(\(few) has a.a)" }
        #expect(Self.syntaxProblem("permit (principal, action, resource) when { \(few) };") == nil)
    }

    @Test("a // comment ends at a carriage return too, as in Cedar: what follows a lone \\r is read (it was hidden: allow where Cedar denies)")
    func commentsEndAtCarriageReturns() throws {
        #expect(try !Self.decide("true // note\r && false\n").isAllowed)
        #expect(try Self.decide("false // note\r || true\n").isAllowed)
    }

    @Test("reserved words cannot be part of a type's name; methods are the language's, the set methods with their number of arguments; entity tags are refused",
          arguments: [
              ("permit (principal is like, action, resource);", "1:22: 'like' is a reserved word and cannot be part of a type's name"),
              ("permit (principal, action, resource) when { principal == like::\"a\" };", "1:58: 'like' is a reserved word and cannot be part of a type's name"),
              ("permit (principal, action, resource) when { principal == User::has::\"a\" };", "1:64: 'has' is a reserved word and cannot be part of a type's name"),
              ("permit (principal, action == __cedar::Action::\"view\", resource);", "1:30: '__cedar' is a reserved word and cannot be part of a type's name"),
              ("permit (principal, action, resource) when { principal is User::if };", "1:64: 'if' is a reserved word and cannot be part of a type's name"),
              ("permit (principal, action, resource) when { context.foo(1) };", "1:53: there is no method .foo(): the methods are contains, containsAll, containsAny, durationSince, greaterThan, greaterThanOrEqual, isEmpty, isInRange, isIpv4, isIpv6, isLoopback, isMulticast, lessThan, lessThanOrEqual, offset, toDate, toDays, toHours, toMilliseconds, toMinutes, toSeconds, toTime"),
              ("permit (principal, action, resource) when { principal.hasTag(\"a\") };", "1:55: entity tags (.hasTag()) are not supported"),
              ("permit (principal, action, resource) when { [1].contains() };", "1:49: .contains() takes one argument, not 0"),
              ("permit (principal, action, resource) when { [1].containsAny([1], [2]) };", "1:49: .containsAny() takes one argument, not 2"),
              ("permit (principal, action, resource) when { [1].isEmpty(1) };", "1:49: .isEmpty() takes no arguments, not 1"),
          ])
    func reservedTypeNamesAndMethods(_ text: String, _ expected: String) {
        #expect(Self.syntaxProblem(text) == expected)
    }

    @Test("an annotation may take any identifier's name, reserved words included, in text and in the JSON form, and reads back from its own JSON")
    func annotationNames() throws {
        for name in ["if", "when", "principal", "__cedar", "like"] {
            let policies = try Policies(text: "@\(name)(\"x\") permit (principal, action, resource);")
            let back = try Policies(json: Array(policies.json.utf8))
            #expect(back.policies[0].annotations[name] == "x", "\(name)")
        }
    }

    @Test("words Cedar reserves cannot name an attribute or a field unquoted; quoted, they can; other keywords can",
          arguments: ["true", "false", "if", "then", "else", "in", "is", "like", "has", "__cedar"])
    func reservedAttributeNames(_ word: String) throws {
        let message = "'\(word)' is a reserved word and cannot name an attribute unquoted: write it as a string, \"\(word)\""
        #expect(Self.syntaxProblem("permit (principal, action, resource) when { context has \(word) };")
                == "1:57: \(message)")
        #expect(Self.syntaxProblem("permit (principal, action, resource) when { context has a.\(word) };")
                == "1:59: \(message)")
        #expect(Self.syntaxProblem("permit (principal, action, resource) when { context.\(word) == 1 };")
                == "1:53: \(message)")
        #expect(Self.syntaxProblem("permit (principal, action, resource) when { {\(word): 1} == {} };")
                == "1:46: '\(word)' is a reserved word and cannot name a record's field unquoted: write it as a string, \"\(word)\"")
        // Quoted, the word is a name like any other; printed, it stays quoted.
        let context: [String: PolicyValue] = [word: .long(1)]
        #expect(try Self.decide("context has \"\(word)\" && context[\"\(word)\"] == 1 && {\"\(word)\": 1} has \"\(word)\"", context: context).isAllowed)
        let policies = try Policies(json: Array(try Policies(text: "permit (principal, action, resource) when { context[\"\(word)\"] == 1 };").json.utf8))
        let printed = PolicyPrinter.print(policies.policies[0])
        #expect(try Policies(text: printed).policies.count == 1, "\(printed)")
        // Keywords Cedar does not reserve name attributes unquoted.
        #expect(try Self.decide("context has principal.when && context.principal.when", context: ["principal": .record(["when": .bool(true)])]).isAllowed)
    }

    @Test("\\x escapes: two hex digits naming an ASCII character; \\* only in a like pattern",
          arguments: [
              (#""\x41\x7a\x7F" == "Az\u{7f}""#, nil),
              (#""\x4" == "A""#, #"1:47: \x must be followed by two hex digits"#),
              (#""\x4g" == "A""#, #"1:47: \x must be followed by two hex digits"#),
              (#""\x80" == "A""#, #"1:47: \x escapes only ASCII characters (at most \x7f): write \u{…} for others"#),
              (#""a\*" == "a*""#, #"1:48: \* is an escape of 'like' patterns only: write * in other strings"#),
              (#"context has "\*""#, #"1:59: \* is an escape of 'like' patterns only: write * in other strings"#),
              (#""a*" like "a\*""#, nil),
          ] as [(String, String?)])
    func stringEscapes(_ condition: String, _ expected: String?) throws {
        let text = "permit (principal, action, resource) when { \(condition) };"
        #expect(Self.syntaxProblem(text) == expected)
        if expected == nil { #expect(try Self.decide(condition).isAllowed) }
    }

    @Test("any Unicode white space separates tokens, as in Cedar (a form feed, a no-break space, U+2028, U+3000); a zero-width space or a byte order mark does not",
          arguments: ["\u{0B}", "\u{0C}", "\u{A0}", "\u{85}", "\u{2028}", "\u{2029}", "\u{2003}", "\u{3000}", "\u{200B}", "\u{FEFF}"])
    func whiteSpace(_ space: String) {
        let problem = Self.syntaxProblem("permit (principal,\(space)action, resource);")
        if space == "\u{200B}" || space == "\u{FEFF}" {
            #expect(problem?.hasPrefix("1:19: unexpected character") == true, "\(String(describing: problem))")
        } else {
            #expect(problem == nil)
        }
    }

    @Test("\\u{…} takes up to six hex digits with underscores after the first, as in Cedar; a raw carriage return in a string is refused",
          arguments: [
              (#""\u{1_0}" == "\u{10}" && "\u{4_1_}" == "A" && "\u{10_FFFF}" == "\u{10FFFF}""#, nil),
              (#""\u{_41}" == "A""#, #"1:47: an invalid \u{…} escape"#),
              (#""\u{}" == "A""#, #"1:47: an invalid \u{…} escape"#),
              (#""\u{1_0_0_0_0_0_0}" == "A""#, #"1:47: an invalid \u{…} escape"#),
              (#""\u{0000041}" == "A""#, #"1:47: an invalid \u{…} escape"#),
              (#""\u{D800}" == "A""#, #"1:47: an invalid \u{…} escape"#),
              ("\"a\rb\" == \"a\\rb\"", #"1:47: a string cannot hold a raw carriage return: write \r"#),
              ("\"a\nb\" == \"a\\nb\"", nil),
              (#""\u{10FFFF_}" == "\u{10FFFF}" && "\u{1_0_0_0_0_0}" == "\u{100000}""#, nil),
              // The character after a backslash is shown escaped: raw, a carriage return would
              // send the terminal back to the start of the message's line.
              ("\"a\\\rb\" == \"a\"", #"1:48: an unknown escape \ followed by "\r" in a string"#),
              ("\"a\\\u{202E}b\" == \"a\"", #"1:48: an unknown escape \ followed by "\u{202E}" in a string"#),
          ] as [(String, String?)])
    func unicodeEscapes(_ condition: String, _ expected: String?) throws {
        #expect(Self.syntaxProblem("permit (principal, action, resource) when { \(condition) };") == expected)
        if expected == nil { #expect(try Self.decide(condition).isAllowed) }
    }

    @Test("in a like pattern only \\* is a literal star: a star written \\u{2a} or \\x2a is a wildcard, as in Cedar")
    func escapedStarsAreWildcards() throws {
        #expect(try Self.decide(#""axb" like "a\u{2a}b""#).isAllowed)
        #expect(try Self.decide(#""axb" like "a\x2ab""#).isAllowed)
        #expect(try !Self.decide(#""axb" like "a\*b""#).isAllowed)
        #expect(try Self.decide(#""a*b" like "a\*b""#).isAllowed)
        // Printed, the wildcard is a star and the literal star stays escaped.
        let policies = try Policies(text: #"permit (principal, action, resource) when { context.s like "\u{2a}\*" };"#)
        #expect(PolicyPrinter.print(policies.policies[0]).contains(#"like "*\*""#))
    }

    @Test("an action in a policy's head is of type Action or Namespace::Action, in text and in the JSON form, as in Cedar",
          arguments: [#"action == User::"x""#, #"action in [Action::"a", User::"x"]"#, #"action in Group::"g""#, #"action == ActionX::"x""#, #"action == My::NsAction::"x""#])
    func actionHeadsAreActions(_ head: String) throws {
        let problem = Self.syntaxProblem("permit (principal, \(head), resource);")
        #expect(problem?.contains("an action in a policy's head is of type Action (or Namespace::Action)") == true, "\(problem ?? "accepted")")
        // The JSON form of the same head is refused too.
        let entity = head.contains("User") ? #"{"type": "User", "id": "x"}"# : head.contains("Group") ? #"{"type": "Group", "id": "g"}"# : head.contains("ActionX") ? #"{"type": "ActionX", "id": "x"}"# : #"{"type": "My::NsAction", "id": "x"}"#
        #expect(throws: PolicyDiagnostics.self) {
            try Policies(json: Array(#"{"effect": "permit", "principal": {"op": "All"}, "action": {"op": "in", "entities": [\#(entity)]}, "resource": {"op": "All"}, "conditions": []}"#.utf8))
        }
        for accepted in [#"action == Action::"x""#, #"action == Ns::Action::"x""#, #"action in [Action::"a", Ns::Action::"b"]"#] {
            #expect(Self.syntaxProblem("permit (principal, \(accepted), resource);") == nil, "\(accepted)")
        }
    }

    @Test("a JSON head constraint holds only the fields its op uses: `in` with both entity and entities (Cedar reads the first, Keysmith read the second: a forbid became an allow) is refused, and so are extra fields and entities written as text", arguments: [
        #""action": {"op": "in", "entity": {"type": "Action", "id": "view"}, "entities": [{"type": "Action", "id": "edit"}]}"#,
        #""action": {"op": "All", "entity": {"type": "Action", "id": "view"}}"#,
        #""action": {"op": "==", "entity": {"type": "Action", "id": "view"}, "entities": []}"#,
        #""action": {"op": "in", "entities": ["Action::"view""]}"#,
        #""action": {"op": "==", "entity": "Action::"view""}"#,
        #""principal": {"op": "is", "entity_type": "User", "entity": {"type": "User", "id": "a"}}"#,
        #""principal": {"op": "All", "entity_type": "User"}"#,
        #""principal": {"op": "==", "entity": {"type": "User", "id": "a"}, "in": {"entity": {"type": "Team", "id": "t"}}}"#,
        #""principal": {"op": "in", "entity": "Team::"t""}"#,
        #""principal": {"op": "is", "entity_type": "User", "in": {"entity": "Team::"t""}}"#,
    ])
    func headConstraintsAreStrict(_ constraint: String) throws {
        var fields = [#""principal": {"op": "All"}"#, #""action": {"op": "All"}"#, #""resource": {"op": "All"}"#]
        let replaced = fields.firstIndex { $0.prefix(12) == constraint.prefix(12) }!
        fields[replaced] = constraint
        let json = #"{"effect": "forbid", "#.appending(fields.joined(separator: ", ")) + #", "conditions": []}"#
        #expect(throws: PolicyDiagnostics.self, "\(json)") { try Policies(json: Array(json.utf8)) }
        // Each of the same heads, written with the fields its op uses, reads.
        let accepted = [#""action": {"op": "in", "entity": {"type": "Action", "id": "view"}}"#, #""action": {"op": "in", "entities": [{"type": "Action", "id": "edit"}]}"#,
                        #""principal": {"op": "is", "entity_type": "User", "in": {"entity": {"type": "Team", "id": "t"}}}"#]
        for head in accepted {
            var fields = [#""principal": {"op": "All"}"#, #""action": {"op": "All"}"#, #""resource": {"op": "All"}"#]
            fields[fields.firstIndex { $0.prefix(12) == head.prefix(12) }!] = head
            let json = #"{"effect": "forbid", "#.appending(fields.joined(separator: ", ")) + #", "conditions": []}"#
            #expect(throws: Never.self, "\(json)") { try Policies(json: Array(json.utf8)) }
        }
    }

    @Test("after a syntax error the parser resumes at the next policy: a ; inside the failing policy's brackets does not end it (a false second error), and a missing ; does not swallow the next policy (its problems went unreported)")
    func syntaxErrorRecovery() throws {
        #expect(Self.syntaxProblem(#"permit (principal, action == Action::"view", resource) when { resource.owner == principal ; };"#)
                == "1:91: expected '}' to close the 'when' clause, found ';'")
        let text = """
            permit (principal, action == Action::"view", resource) when { true }
            permit (principal, action == Action::"a", resource);
            @id("x") @doc("d") permit (principal, action, resource) when { 1 + };
            @id("y") permit (principal, action == Action::"b", resource);
            """
        let (read, problems) = Policies.readingWhatParses([(file: "p.cedar", text: text)])
        #expect(problems.map { "\($0.location.line):\($0.location.column)" } == ["2:1", "3:68"], "\(problems)")
        // The policies after each error were read (and so are type-checked by `policy validate`).
        let actions = read.policies.map { policy -> String in
            if case .equal(let uid) = policy.action { return uid.id }
            return "?"
        }
        #expect(actions == ["a", "b"], "\(actions)")
    }

    @Test("a null annotation in the JSON form is an annotation with no value (@name in text), as in Cedar")
    func nullAnnotations() throws {
        let json = #"{"staticPolicies": {"p0": {"effect": "permit", "principal": {"op": "All"}, "action": {"op": "All"}, "resource": {"op": "All"}, "conditions": [], "annotations": {"id": "p0", "reviewed": null}}}}"#
        let policies = try Policies(json: Array(json.utf8))
        #expect(policies.policies[0].annotations == ["id": "p0", "reviewed": ""])
        let wrong = #"{"staticPolicies": {"p0": {"effect": "permit", "principal": {"op": "All"}, "action": {"op": "All"}, "resource": {"op": "All"}, "conditions": [], "annotations": {"reviewed": 1}}}}"#
        #expect(throws: PolicyDiagnostics.self) { try Policies(json: Array(wrong.utf8)) }
    }
}
