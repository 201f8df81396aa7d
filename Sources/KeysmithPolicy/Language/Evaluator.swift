import Keysmith

/// Why a condition could not be evaluated. A policy whose condition errs never allows, and a
/// forbid whose condition errs denies (see ``Policies``).
public struct EvaluationError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What went wrong.
    public enum Kind: String, Sendable {
        /// An operand has the wrong type (`1 && true`, `"a" < "b"`).
        case typeMismatch
        /// An attribute read that is not there (test it with `has` first).
        case missingAttribute
        /// An attribute read of an entity that the entities do not hold.
        case missingEntity
        /// Arithmetic overflowed 64 bits.
        case overflow
        /// An extension constructor's text is malformed: `ip("300.0.0.1")`.
        case invalidExtensionValue
        /// An unknown method or a wrong number of arguments.
        case unknownFunction
    }

    /// What went wrong.
    public var kind: Kind
    /// One sentence.
    public var message: String
    /// Where, when known.
    public var location: SourceLocation?

    /// The message, with where.
    public var description: String { location.map { "\($0): \(message)" } ?? message }
}

/// Evaluates one request's expressions. It only reads; it never throws for a value that is
/// merely false. Made once per decision, owning the request moved into it, and lent to every
/// node: it is never copied (`~Copyable`), so a decision copies no part of its request.
struct Evaluator: ~Copyable, Sendable {
    /// The request, moved in from the caller (deciding copies none of its parts).
    let request: AuthorizationRequest
    let entities: EntityStore
    /// The principal's and the resource's entities and ancestors, looked up once per request.
    let principalRecord: EntityRecord?
    let resourceRecord: EntityRecord?
    /// The record of a token view that does not keep one (a live view, a what-if copy), read
    /// once at the start of the decision, so every condition of one decision sees the same
    /// scopes; `nil` for views that keep theirs.
    private let readRecord: PolicyValue?

    var principal: EntityUID { request.principal }
    var action: EntityUID { request.action }
    var resource: EntityUID { request.resource }
    /// The action's record, looked up when asked for: most policies compare the action with
    /// `==`, and action entities usually come from a schema only `in` needs.
    var actionRecord: EntityRecord? { entities.record(action) }
    var principalEntity: Entity? { principalRecord?.entity }
    var resourceEntity: Entity? { resourceRecord?.entity }
    /// `context.token`: the token view's record; without a token, the context's own `token`
    /// field, if it has one (which a schema refuses).
    var token: PolicyValue? {
        guard let view = request.token else { return request.context.exactly("token") }
        return view.fixedRecord ?? readRecord
    }
    /// Whether there is a `context.token` (`token != nil`, without copying the record).
    var hasToken: Bool { request.token != nil || request.context.exactly("token") != nil }
    /// Whether the token view's field (its place in ``TokenField`` order) holds every one of
    /// `members` (`all`: `containsAll`, and `contains` of one) or at least one, when the view
    /// keeps its fields and that field is a set; `nil` otherwise (then the field is read as a
    /// value, with its errors).
    func tokenField(_ index: Int, holds members: [PolicyValue], all: Bool) -> Bool? {
        request.token?.storage.field(index, holds: members, all: all)
    }
    /// `token`'s fields in ``TokenField`` order, when the token view keeps them.
    var tokenFields: [PolicyValue]? { request.token?.fixedFields }

    /// The evaluator for a request.
    init(_ request: consuming AuthorizationRequest, entities: EntityStore) {
        readRecord = Self.tokenRecord(request)
        (principalRecord, resourceRecord) = Self.records(request, entities)
        self.entities = entities
        self.request = request
    }

    /// The principal's and the resource's records (from the borrowed request, so none of its
    /// parts is copied).
    private static func records(_ request: borrowing AuthorizationRequest, _ entities: EntityStore) -> (EntityRecord?, EntityRecord?) {
        (entities.record(request.principal), entities.record(request.resource))
    }

    /// The record of the request's token view when the view keeps none, read now.
    private static func tokenRecord(_ request: borrowing AuthorizationRequest) -> PolicyValue? {
        request.token?.storage.keepsRecord == false ? request.token?.currentRecord() : nil
    }

    /// A decided request, kept for explaining the decision later: the request, and the
    /// token record the decision read from a view that keeps none (a live one).
    struct Taken: Sendable {
        let request: AuthorizationRequest
        let tokenRecord: PolicyValue?
        /// The principal's and the resource's records, as found (not looked up again).
        let principalRecord: EntityRecord?
        let resourceRecord: EntityRecord?

        /// Each scope's status as the decision saw it: a live view's granted scopes from the
        /// record the decision read (not the permission manager now); other views are fixed.
        func snapshot() -> [String: ScopeStatus?]? {
            guard let view = request.token else { return nil }
            guard case .live = view.source, case .record(let fields)? = tokenRecord, case .set(let granted)? = fields["granted"] else {
                return view.snapshot()
            }
            var out: [String: ScopeStatus?] = [:]
            for case .string(let name) in granted.elements { out[name] = .some(nil) }
            return out
        }
    }

    /// The request back, when the decision is done (for explaining it later).
    consuming func take() -> Taken {
        Taken(request: request, tokenRecord: readRecord, principalRecord: principalRecord, resourceRecord: resourceRecord)
    }

    /// The evaluator of a decided request, reading its token as the decision did.
    init(_ decided: Taken, entities: EntityStore) {
        principalRecord = decided.principalRecord
        resourceRecord = decided.resourceRecord
        readRecord = decided.tokenRecord
        self.entities = entities
        self.request = decided.request
    }

    /// Whether `uid` is `container` or is in it (the request's variables from their records).
    func isIn(_ uid: EntityUID, _ container: EntityUID) -> Bool {
        if uid == container { return true }
        if uid == request.principal { return principalRecord?.isIn(container) ?? false }
        if uid == request.resource { return resourceRecord?.isIn(container) ?? false }
        if uid == request.action { return actionRecord?.isIn(container) ?? false }
        return entities.isDescendant(uid, of: container)
    }

    /// The entity, from the per-request cache for the principal and the resource.
    func entity(_ uid: EntityUID, _ base: Expression) -> Entity? {
        if case .variable(let variable) = base.kind {
            if variable == .principal { return principalEntity }
            if variable == .resource { return resourceEntity }
        }
        return entities[uid]
    }

    /// The whole context as one record (only when a condition uses `context` as a value).
    var contextRecord: PolicyValue {
        var fields = request.context
        if let token { fields["token"] = token }
        return .record(fields)
    }

    /// `context.name` without building the whole record.
    func contextField(_ name: String) -> PolicyValue? { name == "token" ? token : request.context.exactly(name) }

    private func fail(_ kind: EvaluationError.Kind, _ message: String, _ expression: Expression) -> EvaluationError {
        EvaluationError(kind: kind, message: message, location: expression.location)
    }

    func evaluate(_ expression: Expression) throws(EvaluationError) -> PolicyValue {
        switch expression.kind {
        case .literal(let value):
            return value
        case .variable(let variable):
            switch variable {
            case .principal: return .entity(principal)
            case .action: return .entity(action)
            case .resource: return .entity(resource)
            case .context: return contextRecord
            }
        case .not(let operand):
            return .bool(!(try bool(operand)))
        case .negate(let operand):
            let value = try long(operand)
            guard value != .min else { throw fail(.overflow, "-(\(value)) overflows 64 bits", expression) }
            return .long(-value)
        case .binary(.and, let left, let right):
            guard try bool(left) else { return .bool(false) }
            return .bool(try bool(right))
        case .binary(.or, let left, let right):
            if try bool(left) { return .bool(true) }
            return .bool(try bool(right))
        case .binary(let op, let left, let right):
            return try binary(op, try evaluate(left), try evaluate(right), expression)
        case .ifThenElse(let condition, let then, let otherwise):
            return try bool(condition) ? try evaluate(then) : try evaluate(otherwise)
        case .has(let base, let name):
            if case .variable(.context) = base.kind { return .bool(contextField(name) != nil) }
            switch try evaluate(base) {
            case .record(let fields): return .bool(fields.exactly(name) != nil)
            case .entity(let uid): return .bool(entity(uid, base)?.attributes.exactly(name) != nil)
            case let other: throw fail(.typeMismatch, "'has' needs an entity or a record, not \(other.typeName)", expression)
            }
        case .like(let base, let pattern):
            guard case .string(let text) = try evaluate(base) else {
                throw fail(.typeMismatch, "'like' needs a string", expression)
            }
            return .bool(Self.matches(Array(text.unicodeScalars), pattern))
        case .isType(let base, let type, let container):
            guard case .entity(let uid) = try evaluate(base) else { throw fail(.typeMismatch, "'is' needs an entity", expression) }
            guard PolicyValue.sameBytes(uid.type, type) else { return .bool(false) }
            guard let container else { return .bool(true) }
            return try binary(.in, .entity(uid), try evaluate(container), expression)
        case .attribute(let base, let name):
            if case .variable(.context) = base.kind {
                guard let value = contextField(name) else {
                    throw fail(.missingAttribute, "the record has no attribute \(PolicyValue.quoted(name)) (test it with 'has' first)", expression)
                }
                return value
            }
            switch try evaluate(base) {
            case .record(let fields):
                guard let value = fields.exactly(name) else {
                    throw fail(.missingAttribute, "the record has no attribute \(PolicyValue.quoted(name)) (test it with 'has' first)", expression)
                }
                return value
            case .entity(let uid):
                guard let entity = entity(uid, base) else {
                    throw fail(.missingEntity, "\(uid) is not among the entities, so it has no attribute \(PolicyValue.quoted(name))", expression)
                }
                guard let value = entity.attributes.exactly(name) else {
                    throw fail(.missingAttribute, "\(uid) has no attribute \(PolicyValue.quoted(name)) (test it with 'has' first)", expression)
                }
                return value
            case let other:
                throw fail(.typeMismatch, "only entities and records have attributes, not \(other.typeName)", expression)
            }
        case .method(let receiver, let name, let arguments):
            let value = try evaluate(receiver)
            var values: [PolicyValue] = []
            for argument in arguments { values.append(try evaluate(argument)) }
            return try method(name, value, values, expression)
        case .call(let name, let arguments):
            guard arguments.count == 1 else { throw fail(.unknownFunction, "\(name)() takes one string", expression) }
            guard case .string(let text) = try evaluate(arguments[0]) else {
                throw fail(.typeMismatch, "\(name)() takes a string", expression)
            }
            do {
                return try Self.extensionValue(name, text)
            } catch {
                throw fail(.invalidExtensionValue, error.message, expression)
            }
        case .set(let items):
            var values: [PolicyValue] = []
            for item in items { values.append(try evaluate(item)) }
            return .set(PolicyValueSet(values))
        case .record(let fields):
            var record: [String: PolicyValue] = [:]
            for (name, value) in fields { record[name] = try evaluate(value) }
            return .record(record)
        }
    }

    func bool(_ expression: Expression) throws(EvaluationError) -> Bool {
        guard case .bool(let value) = try evaluate(expression) else {
            throw fail(.typeMismatch, "\(expression.text) is not true or false", expression)
        }
        return value
    }

    private func long(_ expression: Expression) throws(EvaluationError) -> Int64 {
        guard case .long(let value) = try evaluate(expression) else {
            throw fail(.typeMismatch, "\(expression.text) is not a Long", expression)
        }
        return value
    }

    func binary(_ op: BinaryOperator, _ left: PolicyValue, _ right: PolicyValue, _ expression: Expression)
        throws(EvaluationError) -> PolicyValue
    {
        switch op {
        case .equal: return .bool(left == right)
        case .notEqual: return .bool(left != right)
        case .less, .lessEqual, .greater, .greaterEqual:
            let ordered: (Int64, Int64)
            switch (left, right) {
            case (.long(let a), .long(let b)), (.datetime(let a), .datetime(let b)), (.duration(let a), .duration(let b)):
                ordered = (a, b)
            default:
                throw fail(.typeMismatch, "'\(op.rawValue)' compares two Longs, two datetimes or two durations, not \(left.typeName) and \(right.typeName)", expression)
            }
            switch op {
            case .less: return .bool(ordered.0 < ordered.1)
            case .lessEqual: return .bool(ordered.0 <= ordered.1)
            case .greater: return .bool(ordered.0 > ordered.1)
            default: return .bool(ordered.0 >= ordered.1)
            }
        case .add, .subtract, .multiply:
            guard case .long(let a) = left, case .long(let b) = right else {
                throw fail(.typeMismatch, "'\(op.rawValue)' needs two Longs, not \(left.typeName) and \(right.typeName)", expression)
            }
            let (result, overflow) = switch op {
            case .add: a.addingReportingOverflow(b)
            case .subtract: a.subtractingReportingOverflow(b)
            default: a.multipliedReportingOverflow(by: b)
            }
            guard !overflow else { throw fail(.overflow, "\(a) \(op.rawValue) \(b) overflows 64 bits", expression) }
            return .long(result)
        case .in:
            guard case .entity(let uid) = left else { throw fail(.typeMismatch, "'in' needs an entity on its left, not \(left.typeName)", expression) }
            switch right {
            case .entity(let container):
                return .bool(isIn(uid, container))
            case .set(let set):
                // Every element must be an entity, wherever the match is (as in Cedar): `principal
                // in [principal, 1]` is an error, not true because the match comes first.
                var found = false
                for element in set.elements {
                    guard case .entity(let container) = element else {
                        throw fail(.typeMismatch, "'in' needs a set of entities on its right, and it holds \(element.typeName)", expression)
                    }
                    if !found && isIn(uid, container) { found = true }
                }
                return .bool(found)
            default:
                throw fail(.typeMismatch, "'in' needs an entity or a set of entities on its right, not \(right.typeName)", expression)
            }
        case .and, .or:
            preconditionFailure("short-circuit operators are evaluated before their right side")
        }
    }

    func method(_ name: String, _ receiver: PolicyValue, _ arguments: [PolicyValue], _ expression: Expression)
        throws(EvaluationError) -> PolicyValue
    {
        func arity(_ count: Int) throws(EvaluationError) {
            guard arguments.count == count else {
                throw fail(.unknownFunction, ".\(name)() takes \(count == 0 ? "no arguments" : count == 1 ? "one argument" : "\(count) arguments")", expression)
            }
        }
        func mismatch(_ needs: String) -> EvaluationError {
            fail(.typeMismatch, ".\(name)() \(needs), not \(receiver.typeName)\(arguments.isEmpty ? "" : " and " + arguments.map(\.typeName).joined(separator: ", "))", expression)
        }
        switch name {
        case "contains":
            try arity(1)
            guard case .set(let set) = receiver else { throw mismatch("is a method of sets") }
            return .bool(set.contains(arguments[0]))
        case "containsAll", "containsAny":
            try arity(1)
            guard case .set(let set) = receiver, case .set(let other) = arguments[0] else { throw mismatch("needs two sets") }
            return .bool(name == "containsAll" ? other.elements.allSatisfy(set.contains) : other.elements.contains(where: set.contains))
        case "isEmpty":
            try arity(0)
            guard case .set(let set) = receiver else { throw mismatch("is a method of sets") }
            return .bool(set.count == 0)
        case "isIpv4", "isIpv6", "isLoopback", "isMulticast":
            try arity(0)
            guard case .ip(let address) = receiver else { throw mismatch("is a method of ipaddr") }
            switch name {
            case "isIpv4": return .bool(!address.isV6)
            case "isIpv6": return .bool(address.isV6)
            case "isLoopback": return .bool(address.isLoopback)
            default: return .bool(address.isMulticast)
            }
        case "isInRange":
            try arity(1)
            guard case .ip(let address) = receiver, case .ip(let range) = arguments[0] else { throw mismatch("needs two ipaddr") }
            return .bool(address.isIn(range))
        case "lessThan", "lessThanOrEqual", "greaterThan", "greaterThanOrEqual":
            try arity(1)
            guard case .decimal(let a) = receiver, case .decimal(let b) = arguments[0] else { throw mismatch("needs two decimals") }
            switch name {
            case "lessThan": return .bool(a < b)
            case "lessThanOrEqual": return .bool(a <= b)
            case "greaterThan": return .bool(a > b)
            default: return .bool(a >= b)
            }
        case "offset":
            try arity(1)
            guard case .datetime(let instant) = receiver, case .duration(let length) = arguments[0] else { throw mismatch("needs a datetime and a duration") }
            let (sum, overflow) = instant.addingReportingOverflow(length)
            guard !overflow else { throw fail(.overflow, "the offset overflows", expression) }
            return .datetime(sum)
        case "durationSince":
            try arity(1)
            guard case .datetime(let a) = receiver, case .datetime(let b) = arguments[0] else { throw mismatch("needs two datetimes") }
            let (difference, overflow) = a.subtractingReportingOverflow(b)
            guard !overflow else { throw fail(.overflow, "the duration overflows", expression) }
            return .duration(difference)
        case "toDate":
            try arity(0)
            guard case .datetime(let instant) = receiver else { throw mismatch("is a method of datetime") }
            // The day's start is before the lowest datetime for the lowest seven hours of the range.
            let (day, overflow) = DateTimeText.floorDivide(instant, 86_400_000).multipliedReportingOverflow(by: 86_400_000)
            guard !overflow else { throw fail(.overflow, "the date of \(instant) ms overflows", expression) }
            return .datetime(day)
        case "toTime":
            try arity(0)
            guard case .datetime(let instant) = receiver else { throw mismatch("is a method of datetime") }
            return .duration(DateTimeText.floorModulo(instant, 86_400_000))
        case "toMilliseconds", "toSeconds", "toMinutes", "toHours", "toDays":
            try arity(0)
            guard case .duration(let length) = receiver else { throw mismatch("is a method of duration") }
            let unit: Int64 = switch name {
            case "toMilliseconds": 1
            case "toSeconds": 1000
            case "toMinutes": 60_000
            case "toHours": 3_600_000
            default: 86_400_000
            }
            return .long(length / unit)
        default:
            throw fail(.unknownFunction, "there is no method .\(name)()", expression)
        }
    }

    /// The value of `ip("…")`, `decimal("…")`, `datetime("…")` or `duration("…")`. The error
    /// quotes `text` when `quoting` (a policy's own literal); data's text is not repeated.
    static func extensionValue(_ function: String, _ text: String, quoting: Bool = true) throws(EvaluationError) -> PolicyValue {
        func invalid(_ what: String) -> EvaluationError {
            EvaluationError(kind: .invalidExtensionValue, message: "\(quoting ? PolicyValue.quoted(text) : "its text") is not \(what)", location: nil)
        }
        switch function {
        case "ip":
            guard let address = IPAddress(text) else { throw invalid("an IP address or range") }
            return .ip(address)
        case "decimal":
            guard let value = parseDecimal(text) else { throw invalid("a decimal (digits, a point, 1 to 4 digits)") }
            return .decimal(value)
        case "datetime":
            guard let value = DateTimeText.parse(text) else { throw invalid("a datetime such as 2026-11-22T10:00:00Z") }
            return .datetime(value)
        case "duration":
            guard let value = DateTimeText.parseDuration(text) else { throw invalid("a duration such as 1h30m") }
            return .duration(value)
        default:
            throw EvaluationError(kind: .unknownFunction, message: "there is no function \(function)()", location: nil)
        }
    }

    static func parseDecimal(_ text: String) -> Int64? {
        var rest = Substring(text)
        let negative = rest.first == "-"
        if negative { rest = rest.dropFirst() }
        let parts = rest.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty, (1...4).contains(parts[1].count),
              (parts[0] + parts[1]).allSatisfy({ $0.isASCII && $0.isNumber }),
              let whole = Int64(parts[0]), let fraction = Int64(parts[1] + String(repeating: "0", count: 4 - parts[1].count))
        else { return nil }
        let (scaled, overflow) = whole.multipliedReportingOverflow(by: 10_000)
        guard !overflow else { return nil }
        if negative {
            let (value, overflow) = (0 - scaled).subtractingReportingOverflow(fraction)
            return overflow ? nil : value
        }
        let (value, sumOverflow) = scaled.addingReportingOverflow(fraction)
        return sumOverflow ? nil : value
    }

    /// `like`: `*` matches any run of characters (greedy with backtracking, linear memory).
    static func matches(_ text: [Unicode.Scalar], _ pattern: [PatternElement]) -> Bool {
        var t = 0, p = 0
        var star = -1, mark = 0
        while t < text.count {
            if p < pattern.count, case .literal(let scalar) = pattern[p], scalar == text[t] {
                t += 1
                p += 1
            } else if p < pattern.count, pattern[p] == .wildcard {
                star = p
                mark = t
                p += 1
            } else if star >= 0 {
                p = star + 1
                mark += 1
                t = mark
            } else {
                return false
            }
        }
        while p < pattern.count, pattern[p] == .wildcard { p += 1 }
        return p == pattern.count
    }
}
