/// Writes the abstract syntax back as policy text (for policies read from JSON, and for
/// `keysmith policy format`): parentheses exactly where precedence needs them.
enum PolicyPrinter {
    /// Binding strength: higher binds tighter.
    private static func level(_ expression: Expression) -> Int {
        switch expression.kind {
        case .ifThenElse: 0
        case .binary(.or, _, _): 1
        case .binary(.and, _, _): 2
        case .binary(.equal, _, _), .binary(.notEqual, _, _), .binary(.less, _, _), .binary(.lessEqual, _, _),
             .binary(.greater, _, _), .binary(.greaterEqual, _, _), .binary(.in, _, _), .has, .like, .isType: 3
        case .binary(.add, _, _), .binary(.subtract, _, _): 4
        case .binary(.multiply, _, _): 5
        case .not, .negate: 6
        case .literal(.long(let value)) where value < 0: 6
        default: 8
        }
    }

    private static func wrap(_ expression: Expression, atLeast minimum: Int) -> String {
        let text = print(expression)
        return level(expression) >= minimum ? text : "(\(text))"
    }

    static func print(_ expression: Expression) -> String {
        switch expression.kind {
        case .literal(let value): return literal(value)
        case .variable(let variable): return variable.rawValue
        case .not(let operand): return "!" + wrap(operand, atLeast: 7)
        case .negate(let operand): return "-" + wrap(operand, atLeast: 7)
        case .binary(let op, let left, let right):
            switch op {
            case .or: return "\(wrap(left, atLeast: 1)) || \(wrap(right, atLeast: 2))"
            case .and: return "\(wrap(left, atLeast: 2)) && \(wrap(right, atLeast: 3))"
            case .add, .subtract: return "\(wrap(left, atLeast: 4)) \(op.rawValue) \(wrap(right, atLeast: 5))"
            case .multiply: return "\(wrap(left, atLeast: 5)) * \(wrap(right, atLeast: 6))"
            default: return "\(wrap(left, atLeast: 4)) \(op.rawValue) \(wrap(right, atLeast: 4))"
            }
        case .ifThenElse(let condition, let then, let otherwise):
            return "if \(print(condition)) then \(print(then)) else \(print(otherwise))"
        case .has(let base, let name):
            return "\(wrap(base, atLeast: 4)) has \(identifierOrString(name))"
        case .like(let base, let pattern):
            var text = "\""
            for element in pattern {
                switch element {
                case .wildcard: text += "*"
                case .literal("*"): text += "\\*"
                case .literal(let scalar): text += String(PolicyValue.quoted(String(scalar)).dropFirst().dropLast())
                }
            }
            return "\(wrap(base, atLeast: 4)) like \(text)\""
        case .isType(let base, let type, let container):
            return "\(wrap(base, atLeast: 4)) is \(type)" + (container.map { " in \(wrap($0, atLeast: 4))" } ?? "")
        case .attribute(let base, let name):
            return isIdentifier(name) ? "\(wrap(base, atLeast: 7)).\(name)" : "\(wrap(base, atLeast: 7))[\(PolicyValue.quoted(name))]"
        case .method(let receiver, let name, let arguments):
            return "\(wrap(receiver, atLeast: 7)).\(name)(\(arguments.map(print).joined(separator: ", ")))"
        case .call(let name, let arguments):
            return "\(name)(\(arguments.map(print).joined(separator: ", ")))"
        case .set(let items):
            return "[" + items.map(print).joined(separator: ", ") + "]"
        case .record(let fields):
            return "{" + fields.map { "\(identifierOrString($0.0)): \(print($0.1))" }.joined(separator: ", ") + "}"
        }
    }

    static func literal(_ value: PolicyValue) -> String {
        switch value {
        case .set(let set): "[" + set.elements.map(literal).joined(separator: ", ") + "]"
        case .record(let fields): "{" + fields.sorted { $0.key < $1.key }.map { "\(identifierOrString($0.key)): \(literal($0.value))" }.joined(separator: ", ") + "}"
        default: value.description
        }
    }

    static func isIdentifier(_ name: String) -> Bool {
        hasIdentifierShape(name) && !PolicyParser.reserved.contains(name) && !PolicyParser.cedarReserved.contains(name)
    }

    /// Whether `name` is shaped as an identifier (ASCII letters, digits and `_`, not starting with
    /// a digit), reserved words included: what may name an annotation (`@if`, `@when`,
    /// `@__cedar`), as in Cedar and in the text form.
    static func hasIdentifierShape(_ name: String) -> Bool {
        guard let first = name.unicodeScalars.first, first == "_" || ("a"..."z").contains(first) || ("A"..."Z").contains(first) else { return false }
        return name.unicodeScalars.allSatisfy { $0 == "_" || ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) }
    }

    static func identifierOrString(_ name: String) -> String { isIdentifier(name) ? name : PolicyValue.quoted(name) }

    static func entityConstraint(_ variable: String, _ constraint: EntityConstraint) -> String {
        switch constraint {
        case .any: variable
        case .equal(let uid): "\(variable) == \(uid)"
        case .within(let uid): "\(variable) in \(uid)"
        case .isType(let type): "\(variable) is \(type)"
        case .isTypeWithin(let type, let uid): "\(variable) is \(type) in \(uid)"
        }
    }

    /// A whole policy as text.
    static func print(_ policy: ParsedPolicy) -> String {
        var out = ""
        for (name, value) in policy.annotations.sorted(by: { ($0.key == "id" ? 0 : 1, $0.key) < ($1.key == "id" ? 0 : 1, $1.key) }) {
            out += "@\(name)(\(PolicyValue.quoted(value)))\n"
        }
        let action = switch policy.action {
        case .any: "action"
        case .equal(let uid): "action == \(uid)"
        case .within(let list): "action in [" + list.map(\.description).joined(separator: ", ") + "]"
        }
        out += "\(policy.effect.rawValue) (\(entityConstraint("principal", policy.principal)), \(action), \(entityConstraint("resource", policy.resource)))"
        for (isWhen, body) in policy.conditions { out += "\n\(isWhen ? "when" : "unless") { \(print(body)) }" }
        return out + ";"
    }
}
