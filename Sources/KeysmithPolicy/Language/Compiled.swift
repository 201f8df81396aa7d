/// A condition compiled for deciding: a tree of nodes made once per policy, so a decision
/// neither copies the syntax tree nor re-evaluates constant parts.
///
/// Every node computes exactly what ``Evaluator/evaluate(_:)`` computes for its expression.
/// Nodes take the common, successful way directly; whenever something is off (a type
/// mismatch, a missing attribute, an entity the store lacks), they hand the whole expression
/// back to the evaluator, which re-reads it (evaluation only reads) and reports the very error
/// it always reported, with the same kind, message and location. The oracle tests hold both to
/// Cedar's decisions.
///
/// ```swift
/// let node = Compiler.compile(expression)
/// let allowed = try node.bool(evaluator)
/// ```
class Node: @unchecked Sendable {  // immutable after init; every subclass keeps only `let`s
    /// The expression this node computes (for the evaluator's way and its errors).
    let source: Expression

    init(_ source: Expression) { self.source = source }

    /// The expression's value.
    func value(_ evaluator: borrowing Evaluator) throws(EvaluationError) -> PolicyValue {
        try evaluator.evaluate(source)
    }

    /// When the expression's value is an entity the store holds, that entity's record; `nil`
    /// when it is not, or when this node cannot tell without computing the value (then use
    /// ``value(_:)``, which is always right).
    func record(_ evaluator: borrowing Evaluator) throws(EvaluationError) -> EntityRecord? { nil }

    /// When the expression's value is a set of entities all held by the store: whether it
    /// holds `member` or, with `container`, holds `member` or an entity `member` is in; with
    /// `container`, also when the value is one entity of the store: whether `member` is in it
    /// (see ``EntityRecord/setHolds(_:hash:_:container:)``). `nil` when this node cannot tell.
    func setHolds(_ member: EntityRecord, container: Bool, _ evaluator: borrowing Evaluator) throws(EvaluationError) -> Bool? { nil }

    /// The expression's value as a Boolean; a value of another type is the evaluator's error.
    func bool(_ evaluator: borrowing Evaluator) throws(EvaluationError) -> Bool {
        guard case .bool(let flag) = try value(evaluator) else { return try evaluator.bool(source) }
        return flag
    }
}

/// Builds nodes from expressions.
enum Compiler {
    static func compile(_ expression: Expression) -> Node {
        if let constant = constant(expression) { return LiteralNode(expression, constant) }
        switch expression.kind {
        case .literal(let value):
            return LiteralNode(expression, value)
        case .variable(let variable):
            return variable == .context ? Node(expression) : VariableNode(expression, variable)
        case .not(let operand):
            return NotNode(expression, compile(operand))
        case .binary(.and, let left, let right):
            return PairNode(expression, .and, compile(left), compile(right))
        case .binary(.or, let left, let right):
            return PairNode(expression, .or, compile(left), compile(right))
        case .binary(.equal, let left, let right):
            return PairNode(expression, .equal, compile(left), compile(right))
        case .binary(.notEqual, let left, let right):
            return PairNode(expression, .notEqual, compile(left), compile(right))
        case .binary(let op, let left, let right):
            return BinaryNode(expression, op, compile(left), compile(right))
        case .ifThenElse(let condition, let then, let otherwise):
            return IfNode(expression, compile(condition), compile(then), compile(otherwise))
        case .has(let base, let name):
            if case .variable(.context) = base.kind { return ContextHasNode(expression, name) }
            return HasNode(expression, compile(base), name)
        case .attribute(let base, let name):
            if case .attribute(let inner, "token") = base.kind, case .variable(.context) = inner.kind, let field = TokenField(rawValue: name) {
                return TokenFieldNode(expression, field, general: AttributeNode(expression, compile(base), name))
            }
            if case .variable(let variable) = base.kind {
                switch variable {
                case .context: return ContextAttributeNode(expression, name)
                case .principal, .resource: return VariableAttributeNode(expression, variable, name)
                case .action: break
                }
            }
            return AttributeNode(expression, compile(base), name)
        case .method(let receiver, let name, let arguments):
            return MethodNode(expression, compile(receiver), name, arguments.map(compile))
        case .like(let base, let pattern):
            return LikeNode(expression, compile(base), pattern)
        case .set(let items):
            return SetNode(expression, items.map(compile))
        case .negate, .isType, .call, .record:
            return Node(expression)
        }
    }

    /// The value of an expression that reads nothing of the request or the entities (a
    /// literal, a set or record of such, `ip("10.0.0.0/8")`, `-5`), when it evaluates without an
    /// error; `nil` otherwise (an erring constant keeps erring at every decision).
    static func constant(_ expression: Expression) -> PolicyValue? {
        func reads(_ expression: Expression) -> Bool {
            switch expression.kind {
            case .literal: false
            case .set(let items), .call(_, let items): items.contains(where: reads)
            case .record(let fields): fields.contains { reads($0.1) }
            case .negate(let operand): reads(operand)
            default: true
            }
        }
        if case .literal = expression.kind { return nil }
        guard !reads(expression) else { return nil }
        let nobody = EntityUID(type: "_", id: "")
        let nothing = Evaluator(AuthorizationRequest(principal: nobody, action: nobody, resource: nobody), entities: .empty)
        return try? nothing.evaluate(expression)
    }
}

/// A policy's conditions compiled for deciding: each clause's node and whether it is a
/// `when` (true) or an `unless`, in order; the policy applies when every `when` is true and
/// every `unless` false.
final class CompiledConditions: Sendable {
    let clauses: [Node], isWhen: [Bool]
    init(_ conditions: [(isWhen: Bool, body: Expression)]) {
        clauses = conditions.map { Compiler.compile($0.body) }
        isWhen = conditions.map(\.isWhen)
    }
    /// The first clause that keeps the policy from applying (a `when` that is false or an
    /// `unless` that is true), or `nil` when it applies; clauses after it are not evaluated.
    func firstFailed(_ evaluator: borrowing Evaluator) throws(EvaluationError) -> Int? {
        for index in clauses.indices where try clauses[index].bool(evaluator) != isWhen[index] { return index }
        return nil
    }
}

final class LiteralNode: Node, @unchecked Sendable {
    let constant: PolicyValue
    init(_ source: Expression, _ constant: PolicyValue) {
        self.constant = constant
        super.init(source)
    }
    override func value(_ evaluator: borrowing Evaluator) throws(EvaluationError) -> PolicyValue { constant }
}

final class VariableNode: Node, @unchecked Sendable {
    let variable: Variable
    init(_ source: Expression, _ variable: Variable) {
        self.variable = variable
        super.init(source)
    }
    override func value(_ evaluator: borrowing Evaluator) throws(EvaluationError) -> PolicyValue {
        switch variable {
        case .principal: .entity(evaluator.principal)
        case .action: .entity(evaluator.action)
        case .resource: .entity(evaluator.resource)
        case .context: evaluator.contextRecord
        }
    }
    override func record(_ evaluator: borrowing Evaluator) throws(EvaluationError) -> EntityRecord? {
        switch variable {
        case .principal: evaluator.principalRecord
        case .action: evaluator.actionRecord
        case .resource: evaluator.resourceRecord
        case .context: nil
        }
    }
}

final class NotNode: Node, @unchecked Sendable {
    let operand: Node
    init(_ source: Expression, _ operand: Node) {
        self.operand = operand
        super.init(source)
    }
    override func value(_ evaluator: borrowing Evaluator) throws(EvaluationError) -> PolicyValue { .bool(try bool(evaluator)) }
    override func bool(_ evaluator: borrowing Evaluator) throws(EvaluationError) -> Bool { !(try operand.bool(evaluator)) }
}

/// `&&` and `||` (the right side evaluated only when the left does not decide), `==` and `!=`:
/// the operators whose answer is a Boolean from two operands.
final class PairNode: Node, @unchecked Sendable {
    enum Kind { case and, or, equal, notEqual }
    let kind: Kind, left: Node, right: Node
    /// For `==` and `!=` with a request variable on one side (`resource.owner == principal`):
    /// that side, asked first whether its value is an entity of the store, and the other.
    let variable: Node?, other: Node?
    init(_ source: Expression, _ kind: Kind, _ left: Node, _ right: Node) {
        self.kind = kind
        self.left = left
        self.right = right
        let comparesEntities = kind == .equal || kind == .notEqual
        (variable, other) = !comparesEntities ? (nil, nil) : right is VariableNode ? (right, left) : left is VariableNode ? (left, right) : (nil, nil)
        super.init(source)
    }
    override func value(_ evaluator: borrowing Evaluator) throws(EvaluationError) -> PolicyValue { .bool(try bool(evaluator)) }
    override func bool(_ evaluator: borrowing Evaluator) throws(EvaluationError) -> Bool {
        switch kind {
        case .and: return try left.bool(evaluator) ? try right.bool(evaluator) : false
        case .or: return try left.bool(evaluator) ? true : try right.bool(evaluator)
        case .equal, .notEqual:
            // Two entities of the store are equal when they are the same record.
            if let variable, let a = try variable.record(evaluator), let b = try other?.record(evaluator) {
                return (a === b) == (kind == .equal)
            }
            let a = try left.value(evaluator)
            return (a == (try right.value(evaluator))) == (kind == .equal)
        }
    }
}

final class BinaryNode: Node, @unchecked Sendable {
    let op: BinaryOperator, left: Node, right: Node
    init(_ source: Expression, _ op: BinaryOperator, _ left: Node, _ right: Node) {
        self.op = op
        self.left = left
        self.right = right
        super.init(source)
    }
    override func value(_ evaluator: borrowing Evaluator) throws(EvaluationError) -> PolicyValue {
        if op == .in, let found = try placedIn(evaluator) { return .bool(found) }
        let a = try left.value(evaluator)
        return try evaluator.binary(op, a, try right.value(evaluator), source)
    }
    override func bool(_ evaluator: borrowing Evaluator) throws(EvaluationError) -> Bool {
        if op == .in, let found = try placedIn(evaluator) { return found }
        return try super.bool(evaluator)
    }
    /// `a in b` by places, when `a` is an entity of the store and `b` one too or a set of
    /// them; `nil` otherwise.
    private func placedIn(_ evaluator: borrowing Evaluator) throws(EvaluationError) -> Bool? {
        guard let member = try left.record(evaluator) else { return nil }
        if let found = try right.setHolds(member, container: true, evaluator) { return found }
        guard let container = try right.record(evaluator) else { return nil }
        return member.isIn(place: container.place)
    }
}

final class IfNode: Node, @unchecked Sendable {
    let condition: Node, then: Node, otherwise: Node
    init(_ source: Expression, _ condition: Node, _ then: Node, _ otherwise: Node) {
        self.condition = condition
        self.then = then
        self.otherwise = otherwise
        super.init(source)
    }
    override func value(_ evaluator: borrowing Evaluator) throws(EvaluationError) -> PolicyValue {
        try condition.bool(evaluator) ? try then.value(evaluator) : try otherwise.value(evaluator)
    }
    // No `bool` of its own: a branch that is not a Boolean is an error about the whole
    // `if`, as the evaluator reports it.
}

/// `context has name`.
final class ContextHasNode: Node, @unchecked Sendable {
    let name: String, isToken: Bool
    init(_ source: Expression, _ name: String) {
        self.name = name
        self.isToken = name == "token"
        super.init(source)
    }
    override func value(_ evaluator: borrowing Evaluator) throws(EvaluationError) -> PolicyValue { .bool(try bool(evaluator)) }
    override func bool(_ evaluator: borrowing Evaluator) throws(EvaluationError) -> Bool {
        isToken ? evaluator.hasToken : evaluator.contextField(name) != nil
    }
}

/// `base has name` for any other base.
final class HasNode: Node, @unchecked Sendable {
    let base: Node, name: String, hash: Int
    init(_ source: Expression, _ base: Node, _ name: String) {
        self.base = base
        self.name = name
        self.hash = name.hashValue
        super.init(source)
    }
    override func value(_ evaluator: borrowing Evaluator) throws(EvaluationError) -> PolicyValue { .bool(try bool(evaluator)) }
    override func bool(_ evaluator: borrowing Evaluator) throws(EvaluationError) -> Bool {
        if let record = try base.record(evaluator) { return record.attribute(name, hash: hash) != nil }
        switch try base.value(evaluator) {
        case .record(let fields): return fields.exactly(name) != nil
        case .entity(let uid): return evaluator.entity(uid, base.source)?.attributes.exactly(name) != nil
        default: return try evaluator.bool(source)
        }
    }
}

/// `context.name`.
final class ContextAttributeNode: Node, @unchecked Sendable {
    let name: String
    init(_ source: Expression, _ name: String) {
        self.name = name
        super.init(source)
    }
    override func value(_ evaluator: borrowing Evaluator) throws(EvaluationError) -> PolicyValue {
        guard let value = evaluator.contextField(name) else { return try evaluator.evaluate(source) }
        return value
    }
}

/// `principal.name` and `resource.name`: the entity looked up once per request.
final class VariableAttributeNode: Node, @unchecked Sendable {
    let isPrincipal: Bool, name: String, hash: Int
    init(_ source: Expression, _ variable: Variable, _ name: String) {
        self.isPrincipal = variable == .principal
        self.name = name
        self.hash = name.hashValue
        super.init(source)
    }
    override func value(_ evaluator: borrowing Evaluator) throws(EvaluationError) -> PolicyValue {
        guard let found = (isPrincipal ? evaluator.principalRecord : evaluator.resourceRecord)?.attribute(name, hash: hash) else {
            return try evaluator.evaluate(source)
        }
        return found.value
    }
    override func record(_ evaluator: borrowing Evaluator) throws(EvaluationError) -> EntityRecord? {
        guard let found = (isPrincipal ? evaluator.principalRecord : evaluator.resourceRecord)?.attribute(name, hash: hash) else { return nil }
        return evaluator.entities.record(at: found.linked)
    }
    override func setHolds(_ member: EntityRecord, container: Bool, _ evaluator: borrowing Evaluator) throws(EvaluationError) -> Bool? {
        (isPrincipal ? evaluator.principalRecord : evaluator.resourceRecord)?.setHolds(name, hash: hash, member, container: container)
    }
}

/// `base.name` for any other base: a record's field or an entity's attribute.
final class AttributeNode: Node, @unchecked Sendable {
    let base: Node, name: String, hash: Int
    init(_ source: Expression, _ base: Node, _ name: String) {
        self.base = base
        self.name = name
        self.hash = name.hashValue
        super.init(source)
    }
    override func value(_ evaluator: borrowing Evaluator) throws(EvaluationError) -> PolicyValue {
        if let record = try base.record(evaluator), let found = record.attribute(name, hash: hash) { return found.value }
        let found: PolicyValue? = switch try base.value(evaluator) {
        case .record(let fields): fields.exactly(name)
        case .entity(let uid): evaluator.entities[uid]?.attributes.exactly(name)
        default: nil
        }
        guard let found else { return try evaluator.evaluate(source) }
        return found
    }
    override func record(_ evaluator: borrowing Evaluator) throws(EvaluationError) -> EntityRecord? {
        guard let found = try base.record(evaluator)?.attribute(name, hash: hash) else { return nil }
        return evaluator.entities.record(at: found.linked)
    }
    override func setHolds(_ member: EntityRecord, container: Bool, _ evaluator: borrowing Evaluator) throws(EvaluationError) -> Bool? {
        try base.record(evaluator)?.setHolds(name, hash: hash, member, container: container)
    }
}

/// `context.token.granted` (and `declined`, `expired`, `revoked`, `since`): read from the token
/// view's fields when it keeps them, else as any attribute.
final class TokenFieldNode: Node, @unchecked Sendable {
    let index: Int, general: Node
    init(_ source: Expression, _ field: TokenField, general: Node) {
        self.index = TokenField.allCases.firstIndex(of: field)!
        self.general = general
        super.init(source)
    }
    override func value(_ evaluator: borrowing Evaluator) throws(EvaluationError) -> PolicyValue {
        if let fields = evaluator.tokenFields { return fields[index] }
        return try general.value(evaluator)
    }
}

/// A method call; `contains`, `containsAll` and `containsAny` on sets directly, the others
/// through the evaluator's table.
final class MethodNode: Node, @unchecked Sendable {
    enum Kind { case contains, containsAll, containsAny, other }
    let receiver: Node, name: String, arguments: [Node], kind: Kind
    /// The argument of `contains`, `containsAll` and `containsAny` (the receiver for other
    /// calls, where it is not read).
    let argument: Node
    /// Whether `contains`' argument may be an entity of the store, to be found by place (a
    /// literal never is one: its record is never asked for).
    let byPlace: Bool
    init(_ source: Expression, _ receiver: Node, _ name: String, _ arguments: [Node]) {
        self.receiver = receiver
        self.name = name
        self.arguments = arguments
        self.argument = arguments.count == 1 ? arguments[0] : receiver
        let kind: Kind = switch name {
        case "contains": .contains
        case "containsAll": .containsAll
        case "containsAny": .containsAny
        default: .other
        }
        self.kind = arguments.count == 1 ? kind : .other
        self.byPlace = self.kind == .contains && !(arguments[0] is LiteralNode)
        // `contains` asks for its one member; `containsAll` and `containsAny` for the literal
        // set's members (a literal that is not a set takes the general way, with its error).
        let members: [PolicyValue]? = switch (self.kind, (arguments.first as? LiteralNode)?.constant) {
        case (.contains, let literal?): [literal]
        case (.containsAll, .set(let set)?), (.containsAny, .set(let set)?): set.elements
        default: nil
        }
        if let field = receiver as? TokenFieldNode, let members {
            (tokenField, tokenMembers) = (field.index, members)
        } else {
            (tokenField, tokenMembers) = (-1, [])
        }
        super.init(source)
    }
    /// For `context.token.granted.contains("s")`, `.containsAll([…])` and `.containsAny([…])`
    /// (any token field, a literal argument): the field's place (-1 for other calls) and the
    /// members asked for, tested in the token view's own set (nothing copied).
    let tokenField: Int, tokenMembers: [PolicyValue]
    override func value(_ evaluator: borrowing Evaluator) throws(EvaluationError) -> PolicyValue {
        if kind != .other { return .bool(try bool(evaluator)) }
        let target = try receiver.value(evaluator)
        var values: [PolicyValue] = []
        for argument in arguments { values.append(try argument.value(evaluator)) }
        return try evaluator.method(name, target, values, source)
    }
    override func bool(_ evaluator: borrowing Evaluator) throws(EvaluationError) -> Bool {
        if kind == .other { return try super.bool(evaluator) }
        if tokenField >= 0, let holds = evaluator.tokenField(tokenField, holds: tokenMembers, all: kind != .containsAny) { return holds }
        if byPlace, let member = try argument.record(evaluator),
           let holds = try receiver.setHolds(member, container: false, evaluator) {
            return holds
        }
        let target = try receiver.value(evaluator)
        let argument = try argument.value(evaluator)
        guard case .set(let set) = target else { return try evaluator.bool(source) }
        switch kind {
        case .contains:
            return set.contains(argument)
        case .containsAll:
            guard case .set(let other) = argument else { return try evaluator.bool(source) }
            return other.elements.allSatisfy(set.contains)
        default:
            guard case .set(let other) = argument else { return try evaluator.bool(source) }
            return other.elements.contains(where: set.contains)
        }
    }
}

final class LikeNode: Node, @unchecked Sendable {
    let base: Node, pattern: [PatternElement]
    init(_ source: Expression, _ base: Node, _ pattern: [PatternElement]) {
        self.base = base
        self.pattern = pattern
        super.init(source)
    }
    override func value(_ evaluator: borrowing Evaluator) throws(EvaluationError) -> PolicyValue { .bool(try bool(evaluator)) }
    override func bool(_ evaluator: borrowing Evaluator) throws(EvaluationError) -> Bool {
        guard case .string(let text) = try base.value(evaluator) else { return try evaluator.bool(source) }
        return Evaluator.matches(Array(text.unicodeScalars), pattern)
    }
}

final class SetNode: Node, @unchecked Sendable {
    let items: [Node]
    init(_ source: Expression, _ items: [Node]) {
        self.items = items
        super.init(source)
    }
    override func value(_ evaluator: borrowing Evaluator) throws(EvaluationError) -> PolicyValue {
        var values: [PolicyValue] = []
        values.reserveCapacity(items.count)
        for item in items { values.append(try item.value(evaluator)) }
        return .set(PolicyValueSet(values))
    }
}
