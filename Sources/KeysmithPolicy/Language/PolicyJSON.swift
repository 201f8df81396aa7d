/// Cedar's JSON policy format, the policy language's interchange form: read and written.
///
/// A policy set is `{"staticPolicies": {"id": POLICY, …}, "templates": {}, "templateLinks": []}`;
/// a POLICY is `{"effect", "principal", "action", "resource", "conditions", "annotations"}`, with
/// expressions as Cedar writes them (`{"==": {"left": …, "right": …}}`, `{"Var": "principal"}`,
/// `{"Value": …}`, `{".": {"left": …, "attr": "a"}}`, `{"isInRange": [receiver, argument]}`, …).
enum PolicyJSON {
    struct Reader {
        let file: String
        var depth = 0

        func problem(_ value: Located, _ message: String) -> PolicyDiagnostic {
            PolicyDiagnostic(location: SourceLocation(file: file, line: value.line, column: value.column), message: message)
        }

        func location(_ value: Located) -> SourceLocation { SourceLocation(file: file, line: value.line, column: value.column) }

        func members(_ value: Located, _ what: String, _ allowed: Set<String>) throws(PolicyDiagnostic) -> [String: Located] {
            try JSONValues.members(value, file, what, allowed: allowed)
        }

        func string(_ value: Located?, _ what: String, in parent: Located) throws(PolicyDiagnostic) -> String {
            try JSONValues.string(value, file, what, in: parent)
        }

        func uid(_ value: Located?, _ what: String, in parent: Located) throws(PolicyDiagnostic) -> EntityUID {
            guard let value else { throw problem(parent, "\(what) is missing") }
            return try headUID(value, what)
        }

        /// An entity in a policy's head: `{"type": …, "id": …}` or `{"__entity": {…}}`, as in
        /// Cedar's policy JSON (which refuses the text form `"User::\"alice\""` there).
        func headUID(_ value: Located, _ what: String) throws(PolicyDiagnostic) -> EntityUID {
            if case .string = value.value { throw problem(value, "\(what) is an object {\"type\": …, \"id\": …}, not text") }
            return try JSONValues.uid(value, file, what)
        }

        /// Refuses fields of a head constraint that its op does not use (Cedar reads `in` with
        /// both `entity` and `entities` as the first: such a constraint is ambiguous, not read).
        func only(_ used: Set<String>, of fields: [String: Located], _ what: String, op: String, in value: Located) throws(PolicyDiagnostic) {
            if let extra = fields.keys.sorted().first(where: { !used.contains($0) }) {
                throw problem(fields[extra] ?? value, "\(what) with op \(PolicyValue.quoted(op)) has no field \(PolicyValue.quoted(extra))")
            }
        }

        func policy(_ value: Located, id: String?) throws(PolicyDiagnostic) -> ParsedPolicy {
            let fields = try members(value, "a policy", ["effect", "principal", "action", "resource", "conditions", "annotations"])
            let effectText = try string(fields["effect"], "the effect", in: value)
            guard let effect = Effect(rawValue: effectText) else { throw problem(value, "the effect must be \"permit\" or \"forbid\"") }
            guard let principalValue = fields["principal"], let actionValue = fields["action"], let resourceValue = fields["resource"] else {
                throw problem(value, "a policy needs principal, action and resource")
            }
            let principal = try entityConstraint(principalValue, "principal")
            let resource = try entityConstraint(resourceValue, "resource")
            let actionFields = try members(actionValue, "the action constraint", ["op", "entity", "entities"])
            let action: ActionConstraint
            let actionOp = try string(actionFields["op"], "the action's op", in: actionValue)
            switch actionOp {
            case "All":
                try only(["op"], of: actionFields, "the action constraint", op: actionOp, in: actionValue)
                action = .any
            case "==":
                try only(["op", "entity"], of: actionFields, "the action constraint", op: actionOp, in: actionValue)
                action = .equal(try uid(actionFields["entity"], "the action", in: actionValue))
            case "in":
                if let list = actionFields["entities"] {
                    guard case .array(let items) = list.value else { throw problem(list, "entities must be an array") }
                    if actionFields["entity"] != nil {
                        throw problem(actionValue, "the action constraint with op \"in\" has both \"entity\" and \"entities\": give one")
                    }
                    var uids: [EntityUID] = []
                    for item in items { uids.append(try headUID(item, "an action")) }
                    action = .within(uids)
                } else {
                    action = .within([try uid(actionFields["entity"], "the action", in: actionValue)])
                }
            case let other: throw problem(actionValue, "the action's op \(PolicyValue.quoted(other)) is not All, == or in")
            }
            let named: [EntityUID] = switch action {
            case .any: []
            case .equal(let uid): [uid]
            case .within(let list): list
            }
            if let other = named.first(where: { !PolicyParser.isActionType($0.type) }) {
                throw problem(actionValue, "an action in a policy's head is of type Action (or Namespace::Action), not \(other.type)")
            }
            var annotations: [String: String] = [:]
            if let annotationsValue = fields["annotations"] {
                guard case .object(let items) = annotationsValue.value else { throw problem(annotationsValue, "annotations must be an object") }
                for (key, item) in items {
                    guard PolicyPrinter.hasIdentifierShape(key) else { throw problem(item, "the annotation name \(PolicyValue.quoted(key)) is not an identifier") }
                    switch item.value {
                    case .string(let text): annotations[key] = text
                    case .null: annotations[key] = ""  // `@name` with no value, written `""` (as `@name` in text reads)
                    default: throw problem(item, "an annotation's value must be a string or null")
                    }
                }
            }
            var conditions: [(isWhen: Bool, body: Expression)] = []
            if let conditionsValue = fields["conditions"] {
                guard case .array(let items) = conditionsValue.value else { throw problem(conditionsValue, "conditions must be an array") }
                for item in items {
                    let condition = try members(item, "a condition", ["kind", "body"])
                    let kind = try string(condition["kind"], "the condition's kind", in: item)
                    guard kind == "when" || kind == "unless" else { throw problem(item, "a condition's kind must be \"when\" or \"unless\"") }
                    guard let body = condition["body"] else { throw problem(item, "the condition has no body") }
                    var reader = self
                    conditions.append((kind == "when", try reader.expression(body).keepingText()))
                }
            }
            // In a policy set the key is the policy's id; it is kept as `@id` so that text keeps it.
            if let id, annotations["id"] == nil { annotations["id"] = id }
            let policyID = annotations["id"] ?? "policy0"
            return ParsedPolicy(id: policyID, effect: effect, principal: principal, action: action, resource: resource, conditions: conditions,
                                annotations: annotations, location: location(value),
                                principalLocation: location(principalValue), actionLocation: location(actionValue),
                                resourceLocation: location(resourceValue))
        }

        func entityConstraint(_ value: Located, _ variable: String) throws(PolicyDiagnostic) -> EntityConstraint {
            let fields = try members(value, "the \(variable) constraint", ["op", "entity", "entity_type", "in", "slot"])
            if fields["slot"] != nil { throw problem(value, "templates (slots) are not supported") }
            let op = try string(fields["op"], "the \(variable)'s op", in: value)
            let used: Set<String> = switch op {
            case "All": ["op"]
            case "==", "in": ["op", "entity"]
            case "is": ["op", "entity_type", "in"]
            default: Set(fields.keys)  // the op itself is the error, below
            }
            try only(used, of: fields, "the \(variable) constraint", op: op, in: value)
            switch op {
            case "All": return .any
            case "==": return .equal(try uid(fields["entity"], "the \(variable)", in: value))
            case "in": return .within(try uid(fields["entity"], "the \(variable)", in: value))
            case "is":
                let type = try string(fields["entity_type"], "the \(variable)'s entity_type", in: value)
                guard JSONValues.isTypeName(type) else { throw problem(value, "\(PolicyValue.quoted(type, escapingNonASCII: true)) is not a type name") }
                if let container = fields["in"] {
                    let inner = try members(container, "the \(variable)'s in", ["entity", "slot"])
                    return .isTypeWithin(type, try uid(inner["entity"], "the \(variable)'s container", in: container))
                }
                return .isType(type)
            case let other: throw problem(value, "the \(variable)'s op \(PolicyValue.quoted(other)) is not All, ==, in or is")
            }
        }

        static let binary: [String: BinaryOperator] = [
            "==": .equal, "!=": .notEqual, "<": .less, "<=": .lessEqual, ">": .greater, ">=": .greaterEqual,
            "+": .add, "-": .subtract, "*": .multiply, "in": .in, "&&": .and, "||": .or,
        ]
        static let setOperations: Set<String> = ["contains", "containsAll", "containsAny"]
        static let methods: Set<String> = [
            "isIpv4", "isIpv6", "isLoopback", "isMulticast", "isInRange", "lessThan", "lessThanOrEqual", "greaterThan",
            "greaterThanOrEqual", "offset", "durationSince", "toDate", "toTime", "toMilliseconds", "toSeconds", "toMinutes", "toHours", "toDays",
        ]

        /// A `Value`: a literal, unless it holds an extension value (`__extn`) that is not one
        /// (`ip("bogus")`, a wrong number of arguments); then, as in Cedar, the constructor's
        /// call and the sets and records around it, so that it is this policy's evaluation error
        /// (as the same text is), not a refused file. A literal is as many levels deep as the
        /// text it prints as (`[[1]]` three, `ip("…")` two), so what `policy format` prints of it
        /// reads back: the same bound applies to both.
        func literal(_ body: Located) throws(PolicyDiagnostic) -> Expression {
            let expression: Expression
            if let value = try? JSONValues.policyValue(body, file, "a value") {
                expression = Expression(literal: value, height: Self.printedDepth(value), location: location(body))
            } else {
                expression = try valueOrCalls(body).expression
            }
            return try bounded(expression, body)
        }

        /// `expression`, unless it nests deeper than the language allows (the text's limit).
        func bounded(_ expression: Expression, _ at: Located) throws(PolicyDiagnostic) -> Expression {
            guard expression.height <= PolicyParser.maximumDepth else { throw tooDeep(at) }
            return expression
        }

        func tooDeep(_ at: Located) -> PolicyDiagnostic { problem(at, "the expression nests deeper than \(PolicyParser.maximumDepth) levels") }

        /// How many levels deep a literal value's text is: a term one, a set or record one more
        /// than its deepest member, an extension value two (`ip("…")`, a call of a string).
        static func printedDepth(_ value: PolicyValue) -> Int {
            switch value {
            case .set(let set): 1 + set.elements.reduce(0) { max($0, printedDepth($1)) }
            case .record(let fields): 1 + fields.values.reduce(0) { max($0, printedDepth($1)) }
            case .ip, .decimal, .datetime, .duration: 2
            default: 1
            }
        }

        /// A part of a `Value` being walked: a value (with how deep it prints) or, where some
        /// value inside it is not one, an expression.
        private struct Part {
            let value: PolicyValue?, depth: Int, call: Expression?, location: SourceLocation
            var expression: Expression {
                call ?? Expression(literal: value!, height: depth, location: location)
            }
        }

        /// One pass over a `Value` that is not a value: the parts that are values stay literals,
        /// the others become calls and the sets and records around them (no part is read twice,
        /// so a deep value costs its size, not its size times its depth); any other problem is
        /// thrown where it is.
        private func valueOrCalls(_ body: Located) throws(PolicyDiagnostic) -> Part {
            let at = location(body)
            func make(_ kind: Expression.Kind) throws(PolicyDiagnostic) -> Part {
                let expression = try bounded(Expression(kind: kind, location: at, written: .printed), body)
                return Part(value: nil, depth: expression.height, call: expression, location: at)
            }
            func value(_ value: PolicyValue, _ depth: Int) -> Part { Part(value: value, depth: depth, call: nil, location: at) }
            switch body.value {
            case .array(let items):
                var elements: [Part] = []
                for item in items { elements.append(try valueOrCalls(item)) }
                guard elements.allSatisfy({ $0.value != nil }) else { return try make(.set(elements.map(\.expression))) }
                return value(.set(PolicyValueSet(elements.map { $0.value! })), 1 + elements.reduce(0) { max($0, $1.depth) })
            case .object(let members) where members.count == 1 && members[0].key == "__extn":
                let (function, arguments) = try JSONValues.extensionCall(members[0].value, file, "a value", in: body)
                if arguments.count == 1, case .string(let argument) = arguments[0].value,
                   let constant = try? Evaluator.extensionValue(function, argument) {
                    return value(constant, 2)
                }
                var items: [Expression] = []
                for argument in arguments { items.append(try valueOrCalls(argument).expression) }
                return try make(.call(function, items))
            case .object(let members) where !(members.count == 1 && members[0].key == "__entity"):
                var fields: [(String, Part)] = []
                for (name, member) in members { fields.append((name, try valueOrCalls(member))) }
                guard fields.allSatisfy({ $0.1.value != nil }) else { return try make(.record(fields.map { ($0.0, $0.1.expression) })) }
                var record: [String: PolicyValue] = [:]
                for (name, field) in fields { record[name] = field.value }
                return value(.record(record), 1 + fields.reduce(0) { max($0, $1.1.depth) })
            default:
                return value(try JSONValues.policyValue(body, file, "a value"), 1)
            }
        }

        mutating func expression(_ value: Located) throws(PolicyDiagnostic) -> Expression {
            depth += 1
            defer { depth -= 1 }
            guard depth <= PolicyParser.maximumDepth else { throw tooDeep(value) }
            guard case .object(let members) = value.value, members.count == 1 else {
                throw problem(value, "an expression must be an object with one key, such as {\"Var\": \"principal\"}")
            }
            let (key, body) = members[0]
            // The text is printed when asked: printing every sub-expression here would take time
            // and memory growing with the square of the expression's depth.
            func make(_ kind: Expression.Kind) throws(PolicyDiagnostic) -> Expression {
                try bounded(Expression(kind: kind, location: location(value), written: .printed), value)
            }
            func pair() throws(PolicyDiagnostic) -> (Expression, Expression) {
                let fields = try self.members(body, "\(key)", ["left", "right"])
                guard let left = fields["left"], let right = fields["right"] else { throw problem(body, "\(key) needs left and right") }
                return (try expression(left), try expression(right))
            }
            func list() throws(PolicyDiagnostic) -> [Expression] {
                guard case .array(let items) = body.value else { throw problem(body, "\(key) takes an array") }
                var out: [Expression] = []
                for item in items { out.append(try expression(item)) }
                return out
            }
            switch key {
            case "Value":
                return try literal(body)
            case "Var":
                guard case .string(let name) = body.value, let variable = Variable(rawValue: name) else {
                    throw problem(body, "Var must be principal, action, resource or context")
                }
                return try make(.variable(variable))
            case "Slot":
                throw problem(value, "templates (slots) are not supported")
            case "!", "neg", "isEmpty":
                let fields = try self.members(body, key, ["arg"])
                guard let argument = fields["arg"] else { throw problem(body, "\(key) needs arg") }
                let operand = try expression(argument)
                switch key {
                case "!": return try make(.not(operand))
                case "neg": return try make(.negate(operand))
                default: return try make(.method(operand, "isEmpty", []))
                }
            case _ where Self.binary[key] != nil:
                let (left, right) = try pair()
                return try make(.binary(Self.binary[key]!, left, right))
            case _ where Self.setOperations.contains(key):
                let (left, right) = try pair()
                return try make(.method(left, key, [right]))
            case ".", "has":
                let fields = try self.members(body, key, ["left", "attr"])
                guard let left = fields["left"] else { throw problem(body, "\(key) needs left") }
                let attribute = try string(fields["attr"], "\(key)'s attr", in: body)
                let base = try expression(left)
                return try make(key == "." ? .attribute(base, attribute) : .has(base, attribute))
            case "like":
                let fields = try self.members(body, key, ["left", "pattern"])
                guard let left = fields["left"], case .array(let items)? = fields["pattern"]?.value else { throw problem(body, "like needs left and a pattern array") }
                var pattern: [PatternElement] = []
                for item in items {
                    switch item.value {
                    case .string("Wildcard"): pattern.append(.wildcard)
                    case .object(let literal) where literal.count == 1 && literal[0].key == "Literal":
                        guard case .string(let text) = literal[0].value.value else { throw problem(item, "a Literal must be a string") }
                        pattern += text.unicodeScalars.map { .literal($0) }
                    default: throw problem(item, "a pattern element must be \"Wildcard\" or {\"Literal\": \"…\"}")
                    }
                }
                return try make(.like(try expression(left), pattern))
            case "is":
                let fields = try self.members(body, key, ["left", "entity_type", "in"])
                guard let left = fields["left"] else { throw problem(body, "is needs left") }
                let type = try string(fields["entity_type"], "is's entity_type", in: body)
                guard JSONValues.isTypeName(type) else { throw problem(body, "\(PolicyValue.quoted(type, escapingNonASCII: true)) is not a type name") }
                return try make(.isType(try expression(left), type, in: try fields["in"].map { (container: Located) throws(PolicyDiagnostic) -> Expression in try expression(container) }))
            case "if-then-else":
                let fields = try self.members(body, key, ["if", "then", "else"])
                guard let condition = fields["if"], let then = fields["then"], let otherwise = fields["else"] else {
                    throw problem(body, "if-then-else needs if, then and else")
                }
                return try make(.ifThenElse(try expression(condition), try expression(then), try expression(otherwise)))
            case "Set":
                return try make(.set(try list()))
            case "Record":
                guard case .object(let fields) = body.value else { throw problem(body, "Record takes an object") }
                var out: [(String, Expression)] = []
                for (name, item) in fields { out.append((name, try expression(item))) }
                return try make(.record(out))
            case _ where PolicyParser.extensionFunctions.contains(key):
                return try make(.call(key, try list()))
            case _ where Self.methods.contains(key):
                let items = try list()
                guard let receiver = items.first else { throw problem(body, "\(key) needs its receiver first") }
                return try make(.method(receiver, key, Array(items.dropFirst())))
            default:
                throw problem(value, "unknown expression \(PolicyValue.quoted(key))")
            }
        }
    }

    /// How deep a JSON policy document may nest: each level of an expression is two levels of
    /// JSON (`{"||": {"left": …}}`), below a policy set's five, so that every policy the text
    /// form holds (``PolicyParser/maximumDepth`` levels) is read back from its JSON form.
    static let maximumDocumentDepth = 2 * PolicyParser.maximumDepth + 16

    /// Reads a policy set (`{"staticPolicies": …}`) or one policy.
    static func parse(_ bytes: [UInt8], file: String) throws(PolicyDiagnostics) -> [ParsedPolicy] {
        let document = try JSONValues.document(bytes, file: file, kind: .syntax, maximumDepth: maximumDocumentDepth)
        let reader = Reader(file: file)
        var problems: [PolicyDiagnostic] = []
        var policies: [ParsedPolicy] = []
        if case .object(let members) = document.value, members.contains(where: { $0.key == "staticPolicies" }) {
            do throws(PolicyDiagnostic) {
                let fields = try reader.members(document, "a policy set", ["staticPolicies", "templates", "templateLinks"])
                if case .object(let templates)? = fields["templates"]?.value, !templates.isEmpty {
                    throw reader.problem(fields["templates"]!, "templates are not supported")
                }
                if case .array(let links)? = fields["templateLinks"]?.value, !links.isEmpty {
                    throw reader.problem(fields["templateLinks"]!, "template links are not supported")
                }
                guard case .object(let items)? = fields["staticPolicies"]?.value else {
                    throw reader.problem(document, "staticPolicies must be an object of policies by id")
                }
                for (id, item) in items {
                    do throws(PolicyDiagnostic) {
                        let policy = try reader.policy(item, id: id)
                        if let declared = policy.annotations["id"], declared != id {
                            throw reader.problem(item, "the policy \(PolicyValue.quoted(id)) has @id \(PolicyValue.quoted(declared)): they must agree")
                        }
                        policies.append(policy)
                    } catch {
                        problems.append(error)
                    }
                }
            } catch {
                problems.append(error)
            }
        } else {
            do throws(PolicyDiagnostic) { policies.append(try reader.policy(document, id: nil)) } catch { problems.append(error) }
        }
        if !problems.isEmpty { throw PolicyDiagnostics(kind: .syntax, problems: problems) }
        return policies
    }

    /// Writes policies as a Cedar JSON policy set (ids as keys).
    static func write(_ policies: [ParsedPolicy]) -> String {
        func uid(_ uid: EntityUID) -> String { "{\"type\":\(quoted(uid.type)),\"id\":\(quoted(uid.id))}" }
        func constraint(_ constraint: EntityConstraint) -> String {
            switch constraint {
            case .any: "{\"op\":\"All\"}"
            case .equal(let entity): "{\"op\":\"==\",\"entity\":\(uid(entity))}"
            case .within(let entity): "{\"op\":\"in\",\"entity\":\(uid(entity))}"
            case .isType(let type): "{\"op\":\"is\",\"entity_type\":\(quoted(type))}"
            case .isTypeWithin(let type, let entity): "{\"op\":\"is\",\"entity_type\":\(quoted(type)),\"in\":{\"entity\":\(uid(entity))}}"
            }
        }
        var out = "{\"staticPolicies\":{"
        out += policies.map { policy in
            let action = switch policy.action {
            case .any: "{\"op\":\"All\"}"
            case .equal(let entity): "{\"op\":\"==\",\"entity\":\(uid(entity))}"
            case .within(let list): "{\"op\":\"in\",\"entities\":[" + list.map(uid).joined(separator: ",") + "]}"
            }
            var text = "\(quoted(policy.id)):{\"effect\":\"\(policy.effect.rawValue)\",\"principal\":\(constraint(policy.principal)),"
            text += "\"action\":\(action),\"resource\":\(constraint(policy.resource)),\"conditions\":["
            text += policy.conditions.map { "{\"kind\":\"\($0.isWhen ? "when" : "unless")\",\"body\":\(expression($0.body))}" }.joined(separator: ",")
            text += "],\"annotations\":{" + policy.annotations.sorted { $0.key < $1.key }.map { "\(quoted($0.key)):\(quoted($0.value))" }.joined(separator: ",") + "}}"
            return text
        }.joined(separator: ",")
        return out + "},\"templates\":{},\"templateLinks\":[]}"
    }

    static func quoted(_ text: String) -> String { JSONOutput.string(text) }

    static func expression(_ expression: Expression) -> String {
        func node(_ key: String, _ body: String) -> String { "{\(quoted(key)):\(body)}" }
        func pair(_ key: String, _ left: Expression, _ right: Expression) -> String {
            node(key, "{\"left\":\(self.expression(left)),\"right\":\(self.expression(right))}")
        }
        switch expression.kind {
        case .literal(let value): return node("Value", JSONOutput.value(value))
        case .variable(let variable): return node("Var", quoted(variable.rawValue))
        case .not(let operand): return node("!", "{\"arg\":\(self.expression(operand))}")
        case .negate(let operand): return node("neg", "{\"arg\":\(self.expression(operand))}")
        case .binary(let op, let left, let right): return pair(op.rawValue, left, right)
        case .ifThenElse(let a, let b, let c):
            return node("if-then-else", "{\"if\":\(self.expression(a)),\"then\":\(self.expression(b)),\"else\":\(self.expression(c))}")
        case .has(let base, let name): return node("has", "{\"left\":\(self.expression(base)),\"attr\":\(quoted(name))}")
        case .attribute(let base, let name): return node(".", "{\"left\":\(self.expression(base)),\"attr\":\(quoted(name))}")
        case .like(let base, let pattern):
            var elements: [String] = []
            var literal = ""
            for element in pattern {
                switch element {
                case .wildcard:
                    if !literal.isEmpty { elements.append("{\"Literal\":\(quoted(literal))}") }
                    literal = ""
                    elements.append("\"Wildcard\"")
                case .literal(let scalar): literal.unicodeScalars.append(scalar)
                }
            }
            if !literal.isEmpty { elements.append("{\"Literal\":\(quoted(literal))}") }
            return node("like", "{\"left\":\(self.expression(base)),\"pattern\":[\(elements.joined(separator: ","))]}")
        case .isType(let base, let type, let container):
            return node("is", "{\"left\":\(self.expression(base)),\"entity_type\":\(quoted(type))" + (container.map { ",\"in\":\(self.expression($0))" } ?? "") + "}")
        case .method(let receiver, let name, let arguments):
            if name == "isEmpty", arguments.isEmpty { return node("isEmpty", "{\"arg\":\(self.expression(receiver))}") }
            if Reader.setOperations.contains(name), arguments.count == 1 { return pair(name, receiver, arguments[0]) }
            return node(name, "[" + ([receiver] + arguments).map(self.expression).joined(separator: ",") + "]")
        case .call(let name, let arguments):
            return node(name, "[" + arguments.map(self.expression).joined(separator: ",") + "]")
        case .set(let items):
            return node("Set", "[" + items.map(self.expression).joined(separator: ",") + "]")
        case .record(let fields):
            return node("Record", "{" + fields.map { "\(quoted($0.0)):\(self.expression($0.1))" }.joined(separator: ",") + "}")
        }
    }
}

/// JSON text for values (Cedar's forms: `__entity`, `__extn`); the command writes its own JSON
/// strings with it too.
package enum JSONOutput {
    /// Appends `text` as a JSON string literal to `out`, as UTF-8: the bytes of
    /// ``string(_:)``, written without an intermediate string (runs that need no escape are
    /// copied whole, between escapes).
    package static func append(_ text: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        // Bytes are read from the string's storage in place (a span); runs between escapes are
        // copied whole.
        let utf8 = text.utf8, bytes = text.utf8Span.span
        // Most strings need no escape: then the whole string is copied at once (the string's
        // own copy into an array, not a slice's byte-by-byte one).
        if !needsEscape(bytes) {
            out.append(contentsOf: utf8)
            out.append(UInt8(ascii: "\""))
            return
        }
        func copy(_ range: Range<Int>) {
            guard !range.isEmpty else { return }
            out.append(contentsOf: utf8[utf8.index(utf8.startIndex, offsetBy: range.lowerBound)..<utf8.index(utf8.startIndex, offsetBy: range.upperBound)])
        }
        var run = 0, index = 0
        while index < bytes.count {
            let byte = bytes[index]
            var next = index + 1
            let escape: String
            switch byte {
            case UInt8(ascii: "\""): escape = "\\\""
            case UInt8(ascii: "\\"): escape = "\\\\"
            case UInt8(ascii: "\n"): escape = "\\n"
            case UInt8(ascii: "\r"): escape = "\\r"
            case UInt8(ascii: "\t"): escape = "\\t"
            case 0..<0x20, 0x7F: escape = unicodeEscape(UInt32(byte))
            case 0xE2:
                // U+2028 and U+2029 are E2 80 A8 and E2 80 A9; other scalars starting with E2
                // are copied.
                guard next + 1 < bytes.count, bytes[next] == 0x80, bytes[next + 1] == 0xA8 || bytes[next + 1] == 0xA9 else {
                    index = next
                    continue
                }
                escape = bytes[next + 1] == 0xA8 ? "\\u2028" : "\\u2029"
                next += 2
            default:
                index = next
                continue
            }
            copy(run..<index)
            out.append(contentsOf: escape.utf8)
            run = next
            index = next
        }
        copy(run..<bytes.count)
        out.append(UInt8(ascii: "\""))
    }

    /// Whether any byte would be escaped: a control character, a quote, a backslash, U+007F,
    /// or 0xE2 (which starts U+2028 and U+2029; others that start with it go the careful way).
    @inline(__always)
    private static func needsEscape(_ bytes: Span<UInt8>) -> Bool {
        for index in bytes.indices {
            let byte = bytes[index]
            if byte < 0x20 || byte == 0x22 || byte == 0x5C || byte == 0x7F || byte == 0xE2 { return true }
        }
        return false
    }

    /// `\u` and the scalar's four lowercase hex digits.
    private static func unicodeEscape(_ value: UInt32) -> String {
        let hex = String(value, radix: 16)
        return "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
    }

    /// A JSON string literal: quotes, backslashes and control characters escaped, and U+007F,
    /// U+2028 and U+2029 too (so that a line of output stays one line in every reader).
    package static func string(_ text: String) -> String {
        // Most strings need no escape: one pass over the bytes finds out.
        if !needsEscape(text.utf8Span.span) {
            return "\"" + text + "\""
        }
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if scalar.value < 0x20 || scalar.value == 0x7F || (0x2028...0x2029).contains(scalar.value) {
                    out += unicodeEscape(scalar.value)
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out + "\""
    }

    static func value(_ value: PolicyValue) -> String { render(JSONValues.json(value)) }

    static func render(_ value: JSONValue) -> String {
        switch value {
        case .object(let members): "{" + members.map { string($0.key) + ":" + render($0.value.value) }.joined(separator: ",") + "}"
        case .array(let items): "[" + items.map { render($0.value) }.joined(separator: ",") + "]"
        case .string(let text): string(text)
        case .integer(let number): String(number)
        case .number(let number): String(number)
        case .bool(let flag): flag ? "true" : "false"
        case .null: "null"
        }
    }
}
