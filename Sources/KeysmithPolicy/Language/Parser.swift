/// One policy of a policy file, parsed. A class: deciding walks every policy, and a reference
/// costs one retain where a struct of strings and arrays costs one per field.
final class ParsedPolicy: Sendable {
    let id: String
    let effect: Effect
    let principal: EntityConstraint
    let action: ActionConstraint
    let resource: EntityConstraint
    /// `when` (true) and `unless` (false) clauses, in order.
    let conditions: [(isWhen: Bool, body: Expression)]
    /// The conditions compiled for deciding (so deciding never copies the syntax tree).
    let compiled: CompiledConditions
    /// The scope names each condition reads from `context.token` (for explanations), in the
    /// same order.
    let scopeNames: [[String]]
    let annotations: [String: String]
    /// Whether the id comes from `@id` (else it is `policyN`, its index, as in Cedar).
    var hasExplicitID: Bool { annotations["id"] != nil }
    let location: SourceLocation
    /// Where the head's principal, action and resource constraints are.
    let principalLocation: SourceLocation
    let actionLocation: SourceLocation
    let resourceLocation: SourceLocation

    init(id: String, effect: Effect, principal: EntityConstraint, action: ActionConstraint, resource: EntityConstraint,
         conditions: [(isWhen: Bool, body: Expression)], annotations: [String: String], location: SourceLocation,
         principalLocation: SourceLocation, actionLocation: SourceLocation, resourceLocation: SourceLocation) {
        self.id = id
        self.effect = effect
        self.principal = principal
        self.action = action
        self.resource = resource
        self.conditions = conditions
        self.compiled = CompiledConditions(conditions)
        self.scopeNames = conditions.map { Policies.scopeNames(in: $0.body) }
        self.annotations = annotations
        self.location = location
        self.principalLocation = principalLocation
        self.actionLocation = actionLocation
        self.resourceLocation = resourceLocation
    }

    /// The same policy under another id (policies without `@id` are numbered across files).
    func renamed(_ id: String) -> ParsedPolicy {
        ParsedPolicy(id: id, effect: effect, principal: principal, action: action, resource: resource, conditions: conditions,
                     annotations: annotations, location: location, principalLocation: principalLocation,
                     actionLocation: actionLocation, resourceLocation: resourceLocation)
    }
}

/// Reads policy text: Cedar's policy syntax (see docs/policy-language.md).
struct PolicyParser {
    private var tokens: [Lexer.Located]
    private var position = 0
    private let source: String.UnicodeScalarView
    private let file: String
    private var depth = 0

    /// Expressions nest at most this deep (a hostile file cannot exhaust the stack).
    static let maximumDepth = 200

    /// Words that are not identifiers where an expression or a policy's head is read (type
    /// names may be any but ``cedarReserved``: `when::"a"` is an entity).
    static let reserved: Set<String> = [
        "true", "false", "if", "then", "else", "in", "is", "like", "has", "principal", "action", "resource", "context",
        "permit", "forbid", "when", "unless",
    ]
    static let extensionFunctions: Set<String> = ["ip", "decimal", "datetime", "duration"]
    /// Words Cedar reserves: none may be part of a type's name, nor name an attribute or a
    /// record field unquoted (`context.if`, `context has true`, `{in: 1}`; write them as
    /// strings: `context["if"]`, `context has "true"`, `{"in": 1}`). `principal`, `when` and the
    /// other words in ``reserved`` are attribute and type names like any other. All start with a
    /// lowercase letter or `_` (``JSONValues/isTypeName(_:)`` relies on it).
    static let cedarReserved: Set<String> = ["true", "false", "if", "then", "else", "in", "is", "like", "has", "__cedar"]
    /// The methods (`receiver.name(…)`, the ones the JSON form reads), and how many arguments
    /// the set methods take (Cedar checks theirs when it parses; the others' at evaluation).
    static let methods: [String: Int?] = Dictionary(uniqueKeysWithValues:
        PolicyJSON.Reader.setOperations.map { ($0, Int?.some(1)) } + [("isEmpty", 0)] + PolicyJSON.Reader.methods.map { ($0, Int?.none) })
    /// The most expressions a path after `has` may repeat: `e has a.b.c` tests `e` once per
    /// step, so without a bound a `has` path on a `has` path (on a `has` path…) grows
    /// exponentially with its length in the text.
    static let maximumHasPathCopies = 1_000

    /// Every policy that parses and every policy's syntax problem (each problem stops only its
    /// own policy; ids used twice are left to the caller, `Policies`, which checks them across
    /// files), so the policies that did parse can still be type-checked in the same run.
    static func parseReportingAll(_ text: String, file: String) -> (policies: [ParsedPolicy], problems: [PolicyDiagnostic]) {
        var lexer = Lexer(text: text, file: file)
        let tokens: [Lexer.Located]
        do { tokens = try lexer.tokens() } catch { return ([], [error]) }
        var parser = PolicyParser(tokens: tokens, source: text.unicodeScalars, file: file)
        var policies: [ParsedPolicy] = []
        var problems: [PolicyDiagnostic] = []
        while parser.current.token != .end {
            let start = parser.position
            do {
                policies.append(try parser.policy(index: policies.count + problems.count))
            } catch {
                problems.append(error)
                parser.skipPolicy(from: start)
            }
        }
        return (policies, problems)
    }

    private init(tokens: [Lexer.Located], source: String.UnicodeScalarView, file: String) {
        self.tokens = tokens
        self.source = source
        self.file = file
    }

    private var current: Lexer.Located { tokens[position] }

    private func problem(_ message: String, at token: Lexer.Located? = nil) -> PolicyDiagnostic {
        PolicyDiagnostic(location: (token ?? current).location, message: message)
    }

    private static func describe(_ token: Lexer.Token) -> String {
        switch token {
        case .identifier(let name): "'\(name)'"
        case .string(let text, _): PolicyValue.quoted(text)
        case .integer(let digits): digits
        case .symbol(let symbol): "'\(symbol)'"
        case .annotationStart: "'@'"
        case .end: "the end of the file"
        }
    }

    /// Skips to just past the next `;` outside brackets (after a problem).
    /// After a policy that does not parse: moves past it, to the token after its `;`, counting
    /// brackets from the policy's first token (counted from the error, a `;` inside its
    /// condition ended it early and the rest read as a policy of its own, a false second error);
    /// a `permit`, `forbid` or `@` outside brackets also ends it (its `;` was missing: the next
    /// policy starts there rather than being swallowed, its own problems unreported).
    private mutating func skipPolicy(from start: Int) {
        let failedAt = position
        position = start
        var nesting = 0
        // Whether this policy's own effect (after its annotations) has been passed: only then
        // does an effect or an annotation start the next policy.
        var pastEffect = false
        while current.token != .end {
            let token = current.token
            if nesting == 0 {
                switch token {
                case .annotationStart where pastEffect: return
                case .identifier("permit"), .identifier("forbid"):
                    if pastEffect { return }
                    pastEffect = true
                default: break
                }
            }
            position += 1
            switch token {
            case .symbol("("), .symbol("{"), .symbol("["): nesting += 1
            case .symbol(")"), .symbol("}"), .symbol("]"): nesting = max(0, nesting - 1)
            case .symbol(";") where nesting == 0: return
            default: break
            }
        }
        // Nothing ended it: the rest of the file was this policy. Never end before the error.
        if position < failedAt { position = failedAt }
    }

    private mutating func accept(_ symbol: String) -> Bool {
        if current.token == .symbol(symbol) {
            position += 1
            return true
        }
        return false
    }

    private mutating func expect(_ symbol: String, _ context: String) throws(PolicyDiagnostic) {
        guard accept(symbol) else { throw problem("expected '\(symbol)' \(context), found \(Self.describe(current.token))") }
    }

    private mutating func keyword(_ name: String) -> Bool {
        if current.token == .identifier(name) {
            position += 1
            return true
        }
        return false
    }

    private mutating func identifier(_ what: String) throws(PolicyDiagnostic) -> String {
        guard case .identifier(let name) = current.token else { throw problem("expected \(what), found \(Self.describe(current.token))") }
        position += 1
        return name
    }

    private mutating func policy(index: Int) throws(PolicyDiagnostic) -> ParsedPolicy {
        var annotations: [String: String] = [:]
        while current.token == .annotationStart {
            let at = current
            position += 1
            let name = try identifier("an annotation name after '@'")
            var value = ""
            if accept("(") {
                guard case .string(let text, _) = current.token else { throw problem("an annotation's value must be a string") }
                position += 1
                value = text
                try expect(")", "after the annotation's value")
            }
            guard annotations[name] == nil else { throw problem("the annotation @\(name) appears twice", at: at) }
            annotations[name] = value
        }
        let start = current
        let effect: Effect
        if keyword("permit") {
            effect = .permit
        } else if keyword("forbid") {
            effect = .forbid
        } else {
            throw problem("expected 'permit' or 'forbid', found \(Self.describe(current.token))")
        }
        try expect("(", "after '\(effect.rawValue)'")
        let principalLocation = current.location
        guard keyword("principal") else { throw problem("the head's first element must be 'principal'") }
        let principal = try entityConstraint("principal")
        try expect(",", "after the principal constraint")
        let actionLocation = current.location
        guard keyword("action") else { throw problem("the head's second element must be 'action'") }
        var action = ActionConstraint.any
        if accept("==") {
            action = .equal(try actionReference())
        } else if keyword("in") {
            if accept("[") {
                var list: [EntityUID] = []
                if !accept("]") {
                    repeat { list.append(try actionReference()) } while accept(",") && current.token != .symbol("]")
                    try expect("]", "to close the list of actions")
                }
                action = .within(list)
            } else {
                action = .within([try actionReference()])
            }
        }
        try expect(",", "after the action constraint")
        let resourceLocation = current.location
        guard keyword("resource") else { throw problem("the head's third element must be 'resource'") }
        let resource = try entityConstraint("resource")
        _ = accept(",")  // a trailing comma, as in Cedar
        try expect(")", "to close the policy's head")
        var conditions: [(Bool, Expression)] = []
        while case .identifier(let word) = current.token, word == "when" || word == "unless" {
            position += 1
            try expect("{", "after '\(word)'")
            let body = try expression()
            try expect("}", "to close the '\(word)' clause")
            conditions.append((word == "when", body.keepingText()))
        }
        try expect(";", "at the end of the policy")
        let id = annotations["id"] ?? "policy\(index)"
        return ParsedPolicy(id: id, effect: effect, principal: principal, action: action, resource: resource,
                            conditions: conditions, annotations: annotations, location: start.location,
                            principalLocation: principalLocation, actionLocation: actionLocation, resourceLocation: resourceLocation)
    }

    private mutating func entityConstraint(_ variable: String) throws(PolicyDiagnostic) -> EntityConstraint {
        if accept("==") {
            if current.token == .symbol("?") { throw problem("templates (?\(variable)) are not supported") }
            return .equal(try entityReference())
        }
        if keyword("is") {
            let type = try path()
            if keyword("in") { return .isTypeWithin(type, try entityReference()) }
            return .isType(type)
        }
        if keyword("in") {
            if current.token == .symbol("?") { throw problem("templates (?\(variable)) are not supported") }
            return .within(try entityReference())
        }
        return .any
    }

    /// `Name` or `Name::Name…` (a type path).
    private mutating func path() throws(PolicyDiagnostic) -> String {
        let first = try identifier("an entity type")
        var name = try typeName(first)
        while current.token == .symbol("::"), case .identifier(let next) = tokens[position + 1].token {
            position += 2
            name += "::" + (try typeName(next))
        }
        return name
    }

    /// `name`, the part of a type's name just read, unless Cedar reserves it (``cedarReserved``).
    private func typeName(_ name: String) throws(PolicyDiagnostic) -> String {
        try refuseReserved(name, "cannot be part of a type's name", at: tokens[position - 1])
        return name
    }

    /// An action entity in a policy's head: of type `Action` or `Namespace::Action`, as Cedar
    /// requires (`action == User::"x"` is refused there).
    private mutating func actionReference() throws(PolicyDiagnostic) -> EntityUID {
        let start = current
        let uid = try entityReference()
        guard PolicyParser.isActionType(uid.type) else {
            throw problem("an action in a policy's head is of type Action (or Namespace::Action), not \(uid.type)", at: start)
        }
        return uid
    }

    /// Whether `type` is `Action` or `Namespace::Action`.
    static func isActionType(_ type: String) -> Bool {
        type.utf8.elementsEqual("Action".utf8) || (type.utf8.count > 8 && type.utf8.suffix(8).elementsEqual("::Action".utf8))
    }

    /// `Type::"id"` or `Name::Space::Type::"id"`.
    private mutating func entityReference() throws(PolicyDiagnostic) -> EntityUID {
        let start = current
        let first = try identifier("an entity such as User::\"alice\"")
        var parts = [try typeName(first)]
        while accept("::") {
            switch current.token {
            case .identifier(let name):
                position += 1
                parts.append(try typeName(name))
            case .string(let id, _):
                position += 1
                return EntityUID(type: parts.joined(separator: "::"), id: id)
            default:
                throw problem("expected a type name or a quoted id after '::'")
            }
        }
        throw problem("expected an entity such as \(parts.joined(separator: "::"))::\"id\"", at: start)
    }

    /// The source from `start` to the last token read, shared with the file's text.
    private func written(from start: Lexer.Located) -> Expression.Written {
        let end = tokens[max(position - 1, 0)].end
        guard start.start <= end else { return .text("") }
        return .source(source[start.start..<end])
    }

    /// The expression from `start` to the last token read; an error when it would nest deeper
    /// than ``maximumDepth`` (a chain of one operator, or of members, deepens the expression
    /// without the parser nesting its calls, so depth is counted on the expression too).
    /// `written` replaces the source text for an expression that was not written as such (the
    /// steps of a `has` path).
    private func node(_ kind: Expression.Kind, from start: Lexer.Located, written: Expression.Written? = nil) throws(PolicyDiagnostic) -> Expression {
        let expression = Expression(kind: kind, location: start.location, written: written ?? self.written(from: start))
        guard expression.height <= Self.maximumDepth else { throw problem("the expression nests deeper than \(Self.maximumDepth) levels") }
        return expression
    }

    private mutating func nested() throws(PolicyDiagnostic) {
        depth += 1
        guard depth <= Self.maximumDepth else { throw problem("the expression nests deeper than \(Self.maximumDepth) levels") }
    }

    mutating func expression() throws(PolicyDiagnostic) -> Expression {
        try nested()
        defer { depth -= 1 }
        let start = current
        if keyword("if") {
            let condition = try expression()
            guard keyword("then") else { throw problem("expected 'then' after the 'if' condition") }
            let then = try expression()
            guard keyword("else") else { throw problem("expected 'else': every 'if' needs one") }
            let otherwise = try expression()
            return try node(.ifThenElse(condition, then, otherwise), from: start)
        }
        var left = try conjunction()
        while accept("||") {
            let right = try conjunction()
            left = try node(.binary(.or, left, right), from: start)
        }
        return left
    }

    private mutating func conjunction() throws(PolicyDiagnostic) -> Expression {
        let start = current
        var left = try relation()
        while accept("&&") {
            let right = try relation()
            left = try node(.binary(.and, left, right), from: start)
        }
        return left
    }

    private mutating func relation() throws(PolicyDiagnostic) -> Expression {
        let start = current
        let left = try additive()
        func make(_ kind: Expression.Kind) throws(PolicyDiagnostic) -> Expression { try node(kind, from: start) }
        for symbol in ["==", "!=", "<=", ">=", "<", ">"] where current.token == .symbol(symbol) {
            position += 1
            let right = try additive()
            return try make(.binary(BinaryOperator(rawValue: symbol)!, left, right))
        }
        if current.token == .symbol("=") { throw problem("'=' is not an operator: write '==' to compare") }
        if keyword("in") {
            let right = try additive()
            return try make(.binary(.in, left, right))
        }
        if keyword("has") {
            switch current.token {
            case .string(let name, _):
                position += 1
                if current.token == .symbol(".") {
                    throw problem("a quoted name after 'has' takes no path: write the names unquoted (context has a.b)")
                }
                return try make(.has(left, name))
            case .identifier(let name):
                try attributeIdentifier(name, "an attribute")
                position += 1
                var path = [name]
                while accept(".") {
                    guard case .identifier(let next) = current.token else {
                        throw problem("expected an attribute name after '.' in the path after 'has'")
                    }
                    try attributeIdentifier(next, "an attribute")
                    position += 1
                    path.append(next)
                }
                if current.token == .symbol("(") { throw problem("a path after 'has' names attributes only, not a method call") }
                return path.count == 1 ? try make(.has(left, name)) : try hasPath(left, path, from: start)
            default:
                throw problem("expected an attribute name after 'has'")
            }
        }
        if keyword("like") {
            guard case .string(_, let pattern) = current.token else { throw problem("expected a quoted pattern after 'like'") }
            position += 1
            return try make(.like(left, pattern))
        }
        if keyword("is") {
            let type = try path()
            if keyword("in") {
                let container = try additive()
                return try make(.isType(left, type, in: container))
            }
            return try make(.isType(left, type, in: nil))
        }
        return left
    }

    private mutating func additive() throws(PolicyDiagnostic) -> Expression {
        let start = current
        var left = try multiplicative()
        while true {
            let op: BinaryOperator
            if accept("+") { op = .add } else if accept("-") { op = .subtract } else { return left }
            let right = try multiplicative()
            left = try node(.binary(op, left, right), from: start)
        }
    }

    private mutating func multiplicative() throws(PolicyDiagnostic) -> Expression {
        let start = current
        var left = try unary()
        while accept("*") {
            let right = try unary()
            left = try node(.binary(.multiply, left, right), from: start)
        }
        return left
    }

    /// `!` or `-` repeated at most four times (not mixed, as in Cedar), then a member.
    private mutating func unary() throws(PolicyDiagnostic) -> Expression {
        let start = current
        guard current.token == .symbol("!") || current.token == .symbol("-") else { return try member() }
        let symbol = current.token
        var operators: [Lexer.Located] = []
        while current.token == symbol {
            operators.append(current)
            position += 1
        }
        guard operators.count <= 4 else { throw problem("'\(symbol == .symbol("!") ? "!" : "-")' is repeated more than four times", at: start) }
        if current.token == .symbol("!") || current.token == .symbol("-") {
            throw problem("'!' and '-' cannot be mixed without parentheses")
        }
        var operand: Expression
        if symbol == .symbol("-"), case .integer(let digits) = current.token {
            // `-9223372036854775808` is a literal: the magnitude alone would not fit.
            let sign = operators.removeLast()
            position += 1
            guard let value = Int64("-" + digits) else { throw problem("the integer -\(digits) does not fit in 64 bits", at: sign) }
            operand = try accessChain(try node(.literal(.long(value)), from: sign), start: sign)
        } else {
            operand = try member()
        }
        for op in operators.reversed() {
            operand = try node(symbol == .symbol("!") ? .not(operand) : .negate(operand), from: op)
        }
        return operand
    }

    private mutating func member() throws(PolicyDiagnostic) -> Expression {
        let start = current
        return try accessChain(try primary(), start: start)
    }

    private mutating func accessChain(_ base: Expression, start: Lexer.Located) throws(PolicyDiagnostic) -> Expression {
        var value = base
        while true {
            if accept(".") {
                let name = try identifier("an attribute or method name after '.'")
                if accept("(") {
                    let nameToken = tokens[position - 2]
                    guard let arity = Self.methods[name] else {
                        throw problem(name == "getTag" || name == "hasTag" ? "entity tags (.\(name)()) are not supported"
                                      : "there is no method .\(name)(): the methods are \(Self.methods.keys.sorted().joined(separator: ", "))", at: nameToken)
                    }
                    let arguments = try expressionList(closing: ")")
                    if let arity, arguments.count != arity {
                        throw problem(".\(name)() takes \(arity == 0 ? "no arguments" : "one argument"), not \(arguments.count)", at: nameToken)
                    }
                    value = try node(.method(value, name, arguments), from: start)
                } else {
                    try attributeIdentifier(name, "an attribute", at: tokens[position - 1])
                    value = try node(.attribute(value, name), from: start)
                }
            } else if current.token == .symbol("[") {
                position += 1
                guard case .string(let name, _) = current.token else { throw problem("expected a quoted attribute name inside [ ]") }
                position += 1
                try expect("]", "after the attribute name")
                value = try node(.attribute(value, name), from: start)
            } else {
                return value
            }
        }
    }

    /// `base has a.b.c`, as Cedar reads it: `base has a && base.a has b && base.a.b has c` (each
    /// test reads an attribute only when the ones before it are there). The parts print
    /// themselves; the whole keeps its text as written.
    private func hasPath(_ base: Expression, _ path: [String], from start: Lexer.Located) throws(PolicyDiagnostic) -> Expression {
        func part(_ kind: Expression.Kind) throws(PolicyDiagnostic) -> Expression { try node(kind, from: start, written: .printed) }
        guard base.height + path.count <= Self.maximumDepth else { throw problem("the expression nests deeper than \(Self.maximumDepth) levels") }
        let copies = base.count(upTo: Self.maximumHasPathCopies) * (path.count - 1)
        guard copies <= Self.maximumHasPathCopies else {
            throw problem("the path after 'has' would repeat the expression before it \(path.count) times, more than \(Self.maximumHasPathCopies) expressions in all: test each step with its own 'has'", at: start)
        }
        var owner = base
        var tests = try part(.has(base, path[0]))
        for (index, name) in path.enumerated().dropFirst() {
            owner = try part(.attribute(owner, path[index - 1]))
            tests = try part(.binary(.and, tests, try part(.has(owner, name))))
        }
        return try node(tests.kind, from: start)
    }

    /// Refuses a word Cedar reserves (``cedarReserved``) as an unquoted attribute or field name.
    private func attributeIdentifier(_ name: String, _ what: String, at token: Lexer.Located? = nil) throws(PolicyDiagnostic) {
        try refuseReserved(name, "cannot name \(what) unquoted: write it as a string, \(PolicyValue.quoted(name))", at: token)
    }

    /// Refuses `name` when Cedar reserves it (``cedarReserved``): "'name' is a reserved word"
    /// and why it cannot stand where it is.
    private func refuseReserved(_ name: String, _ why: String, at token: Lexer.Located?) throws(PolicyDiagnostic) {
        guard Self.cedarReserved.contains(name) else { return }
        throw problem("'\(name)' is a reserved word and \(why)", at: token)
    }

    private mutating func expressionList(closing: String) throws(PolicyDiagnostic) -> [Expression] {
        var items: [Expression] = []
        if accept(closing) { return items }
        repeat { items.append(try expression()) } while accept(",") && current.token != .symbol(closing)
        try expect(closing, "to close the list")
        return items
    }

    private mutating func primary() throws(PolicyDiagnostic) -> Expression {
        let start = current
        func make(_ kind: Expression.Kind) throws(PolicyDiagnostic) -> Expression { try node(kind, from: start) }
        switch current.token {
        case .integer(let digits):
            position += 1
            guard let value = Int64(digits) else { throw problem("the integer \(digits) does not fit in 64 bits", at: start) }
            return try make(.literal(.long(value)))
        case .string(let value, _):
            position += 1
            return try make(.literal(.string(value)))
        case .symbol("("):
            position += 1
            let inner = try expression()
            try expect(")", "to close the parenthesis")
            return try node(inner.kind, from: start)
        case .symbol("["):
            position += 1
            return try make(.set(try expressionList(closing: "]")))
        case .symbol("{"):
            position += 1
            var fields: [(String, Expression)] = [], names: Set<String> = []
            if !accept("}") {
                repeat {
                    let name: String
                    switch current.token {
                    case .identifier(let identifier):
                        try attributeIdentifier(identifier, "a record's field")
                        name = identifier
                    case .string(let identifier, _): name = identifier
                    default: throw problem("expected a field name in the record")
                    }
                    position += 1
                    guard names.insert(name).inserted else { throw problem("the field \(PolicyValue.quoted(name)) appears twice in the record") }
                    try expect(":", "after the field name")
                    fields.append((name, try expression()))
                } while accept(",") && current.token != .symbol("}")
                try expect("}", "to close the record")
            }
            return try make(.record(fields))
        case .identifier(let name):
            switch name {
            case "true", "false":
                position += 1
                return try make(.literal(.bool(name == "true")))
            case _ where tokens[position + 1].token == .symbol("::"):
                // An entity, whatever its type's name: `principal::"a"` and `when::"a"` are
                // entities in Cedar (only the words it reserves cannot name a type).
                return try make(.literal(.entity(try entityReference())))
            case "principal", "action", "resource", "context":
                position += 1
                return try make(.variable(Variable(rawValue: name)!))
            default:
                break
            }
            if tokens[position + 1].token == .symbol("("), Self.extensionFunctions.contains(name) {
                position += 2
                let arguments = try expressionList(closing: ")")
                return try make(.call(name, arguments))
            }
            if tokens[position + 1].token == .symbol("(") {
                throw problem("unknown function '\(name)': the functions are ip, decimal, datetime and duration")
            }
            if Self.reserved.contains(name) { throw problem("'\(name)' cannot start an expression") }
            throw problem("unknown name '\(name)': a condition reads principal, action, resource and context")
        default:
            throw problem("expected an expression, found \(Self.describe(current.token))")
        }
    }
}
