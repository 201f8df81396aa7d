/// The static type of an expression while checking a policy.
indirect enum StaticType: Equatable, CustomStringConvertible {
    /// Boolean, value unknown.
    case bool
    /// Boolean and always true, or always false (`true`, `x is T` of another type, `e has a`
    /// where no type has `a`): as in Cedar, code these make unreachable is not checked.
    case alwaysTrue, alwaysFalse
    case long
    case string
    /// An entity of one of these types.
    case entity(Set<String>)
    case set(StaticType)
    case record([String: SchemaAttribute])
    /// A record of undeclared, optional attributes of one type (`context.token.since`).
    case openRecord(SchemaType)
    case `extension`(String)

    init(_ type: SchemaType) {
        switch type {
        case .bool: self = .bool
        case .long: self = .long
        case .string: self = .string
        case .entity(let name): self = .entity([name])
        case .set(let element): self = .set(StaticType(element))
        case .record(let fields): self = .record(fields)
        case .openRecord(let element): self = .openRecord(element)
        case .extension(let name): self = .extension(name)
        }
    }

    var description: String {
        switch self {
        case .bool, .alwaysTrue, .alwaysFalse: "Bool"
        case .long: "Long"
        case .string: "String"
        case .entity(let types): types.count == 1 ? "entity of type \(types.first!)" : "entity of type " + types.sorted().joined(separator: " or ")
        case .set(let element): "Set<\(element)>"
        case .record, .openRecord: "record"
        case .extension(let name): name
        }
    }

    var isBoolean: Bool { self == .bool || self == .alwaysTrue || self == .alwaysFalse }

    /// The least type both fit in, if any. As in Cedar's strict validation, entities of different
    /// types have none (a set holds one entity type).
    func join(_ other: StaticType) -> StaticType? {
        switch (self, other) {
        case _ where isBoolean && other.isBoolean: return self == other ? self : .bool
        case (.entity(let a), .entity(let b)): return a == b ? self : nil
        case (.set(let a), .set(let b)): return a.join(b).map { .set($0) }
        case (.record(let a), .record(let b)):
            guard Set(a.keys) == Set(b.keys) else { return nil }
            var fields: [String: SchemaAttribute] = [:]
            for (name, attribute) in a {
                let otherAttribute = b[name]!
                guard attribute.required == otherAttribute.required,
                      StaticType(attribute.type).join(StaticType(otherAttribute.type)) == StaticType(attribute.type)
                else { return nil }
                fields[name] = attribute
            }
            return .record(fields)
        default: return self == other ? self : nil
        }
    }
}

extension Schema {
    /// Type-checks policies against the schema: every problem of every policy, each with
    /// file:line:column, in one run (like `cedar validate`). A policy passes when, for every
    /// request the schema allows that its head matches, its conditions are Boolean, read only
    /// declared attributes (an optional one only after `has`), and apply operators to the types
    /// they take. A head that no allowed request can match is an error too.
    public func validate(_ policies: Policies) throws(PolicyDiagnostics) {
        var problems: [PolicyDiagnostic] = []
        var seen: Set<PolicyDiagnostic> = []
        for policy in policies.policies {
            for problem in check(policy) where seen.insert(problem).inserted { problems.append(problem) }
        }
        if !problems.isEmpty {
            throw PolicyDiagnostics(kind: .validation, problems: problems.sorted {
                ($0.location.file, $0.location.line, $0.location.column) < ($1.location.file, $1.location.line, $1.location.column)
            })
        }
    }

    func check(_ policy: ParsedPolicy) -> [PolicyDiagnostic] {
        var problems: [PolicyDiagnostic] = []
        // The head's entity literals must name declared types and actions.
        func declared(_ uid: EntityUID, _ location: SourceLocation) {
            if entityType(named: uid.type) == nil {
                problems.append(PolicyDiagnostic(location: location, message: "the entity type \(uid.type) is not declared in the schema\(Self.suggestion(uid.type, entityTypes.keys))"))
            } else if let problem = enumerationProblem(uid) {
                problems.append(PolicyDiagnostic(location: location, message: problem))
            }
        }
        func declared(type: String, _ location: SourceLocation) {
            if entityType(named: type) == nil {
                problems.append(PolicyDiagnostic(location: location, message: "the entity type \(type) is not declared in the schema\(Self.suggestion(type, entityTypes.keys))"))
            }
        }
        for (constraint, location) in [(policy.principal, policy.principalLocation), (policy.resource, policy.resourceLocation)] {
            switch constraint {
            case .any: break
            case .equal(let uid), .within(let uid): declared(uid, location)
            case .isType(let type): declared(type: type, location)
            case .isTypeWithin(let type, let uid):
                declared(type: type, location)
                declared(uid, location)
            }
        }
        var actionList: [EntityUID] = []
        switch policy.action {
        case .any: actionList = Array(actions.keys)
        case .equal(let uid):
            if actions[uid] == nil {
                problems.append(PolicyDiagnostic(location: policy.actionLocation, message: "the action \(uid) is not declared in the schema\(Self.suggestion(uid.id, actions.keys.map(\.id)))"))
            }
            actionList = [uid]
        case .within(let groups):
            for group in groups where actions[group] == nil {
                problems.append(PolicyDiagnostic(location: policy.actionLocation, message: "the action \(group) is not declared in the schema\(Self.suggestion(group.id, actions.keys.map(\.id)))"))
            }
            actionList = actions.keys.filter { action in groups.contains { $0 == action || actionAncestors(action).contains($0) } }
        }
        if !problems.isEmpty { return problems }
        var environments: [(principal: String, action: ActionDeclaration, resource: String)] = []
        for uid in actionList.sorted() {
            guard let action = actions[uid] else { continue }
            for principal in action.principals.sorted() where headAllows(policy.principal, type: principal) {
                for resource in action.resources.sorted() where headAllows(policy.resource, type: resource) {
                    environments.append((principal, action, resource))
                }
            }
        }
        if environments.isEmpty {
            return [PolicyDiagnostic(location: policy.location, message: "\(policy.id) matches no request the schema allows: no declared action applies to its principal and resource")]
        }
        for environment in environments {
            var checker = TypeChecker(schema: self, principal: environment.principal, action: environment.action, resource: environment.resource)
            // The clauses are one conjunction, as in Cedar: what a `when` proves (`context has
            // token`) holds in the clauses after it, and a clause that is always false (or an
            // `unless` always true) leaves the rest unreachable and unchecked.
            var known: Set<String> = []
            for (isWhen, body) in policy.conditions {
                let (type, whenTrue) = checker.check(body, known: known)
                if let type, !type.isBoolean { checker.report(body, "a condition must be true or false, and this is \(type)") }
                if isWhen { known.formUnion(whenTrue) }
                if type == (isWhen ? .alwaysFalse : .alwaysTrue) { break }
            }
            problems += checker.problems
        }
        return problems
    }

    /// Whether an entity of `type` can satisfy the head constraint.
    func headAllows(_ constraint: EntityConstraint, type: String) -> Bool {
        switch constraint {
        case .any: true
        case .equal(let uid): uid.type == type
        case .within(let uid): uid.type == type || typeCanBeIn(type, uid.type)
        case .isType(let name): name == type
        case .isTypeWithin(let name, let uid): name == type && (uid.type == type || typeCanBeIn(type, uid.type))
        }
    }

    /// Whether an entity of type `type` may have an ancestor of type `ancestor` (names
    /// compared by their bytes).
    func typeCanBeIn(_ type: String, _ ancestor: String) -> Bool {
        var seen: Set<String> = []
        var pending = Array(entityType(named: type)?.memberOf ?? [])
        while let next = pending.popLast() {
            if PolicyValue.sameBytes(next, ancestor) { return true }
            guard seen.insert(next).inserted else { continue }
            pending += entityType(named: next)?.memberOf ?? []
        }
        return false
    }
}

/// Checks one policy's conditions in one request environment.
struct TypeChecker {
    let schema: Schema
    let principal: String
    let action: ActionDeclaration
    let resource: String
    var problems: [PolicyDiagnostic] = []

    init(schema: Schema, principal: String, action: ActionDeclaration, resource: String) {
        self.schema = schema
        self.principal = principal
        self.action = action
        self.resource = resource
    }

    mutating func report(_ expression: Expression, _ message: String) {
        problems.append(PolicyDiagnostic(location: expression.location, message: message))
    }

    /// A path of attribute reads from a variable (`principal.manager`), for `has` narrowing.
    static func path(_ expression: Expression) -> String? {
        switch expression.kind {
        case .variable(let variable): variable.rawValue
        case .attribute(let base, let name): path(base).map { "\($0).\(name)" }
        default: nil
        }
    }

    /// The expression's type (nil after an error), and the attribute paths known present when it is true.
    mutating func check(_ expression: Expression, known: Set<String>) -> (type: StaticType?, whenTrue: Set<String>) {
        func plain(_ type: StaticType?) -> (StaticType?, Set<String>) { (type, []) }
        switch expression.kind {
        case .literal(let value):
            return plain(literalType(value, expression))
        case .variable(let variable):
            switch variable {
            case .principal: return plain(.entity([principal]))
            case .resource: return plain(.entity([resource]))
            case .action: return plain(.entity([action.uid.type]))
            case .context: return plain(.record(action.context))
            }
        case .not(let operand):
            let type = check(operand, known: known).type
            switch type {
            case .alwaysTrue?: return plain(.alwaysFalse)
            case .alwaysFalse?: return plain(.alwaysTrue)
            case let type? where !type.isBoolean: report(operand, "'!' needs true or false, and this is \(type)")
            default: break
            }
            return plain(.bool)
        case .negate(let operand):
            expect(operand, .long, known, "'-' needs a Long")
            return plain(.long)
        case .binary(.and, let left, let right):
            let leftResult = check(left, known: known)
            if let type = leftResult.type, !type.isBoolean { report(left, "'&&' needs true or false, and this is \(type)") }
            if leftResult.type == .alwaysFalse { return plain(.alwaysFalse) }
            let rightResult = check(right, known: known.union(leftResult.whenTrue))
            if let type = rightResult.type, !type.isBoolean { report(right, "'&&' needs true or false, and this is \(type)") }
            let type: StaticType = rightResult.type == .alwaysFalse ? .alwaysFalse
                : leftResult.type == .alwaysTrue && rightResult.type == .alwaysTrue ? .alwaysTrue : .bool
            return (type, leftResult.whenTrue.union(rightResult.whenTrue))
        case .binary(.or, let left, let right):
            let leftResult = check(left, known: known)
            if let type = leftResult.type, !type.isBoolean { report(left, "'||' needs true or false, and this is \(type)") }
            if leftResult.type == .alwaysTrue { return plain(.alwaysTrue) }
            let rightResult = check(right, known: known)
            if let type = rightResult.type, !type.isBoolean { report(right, "'||' needs true or false, and this is \(type)") }
            if leftResult.type == .alwaysFalse { return (rightResult.type == nil ? .bool : rightResult.type!, rightResult.whenTrue) }
            // Likewise `e || false` is true only when `e` is, and proves what `e` proves (as in Cedar).
            if rightResult.type == .alwaysFalse { return (leftResult.type ?? .bool, leftResult.whenTrue) }
            let type: StaticType = rightResult.type == .alwaysTrue ? .alwaysTrue : .bool
            return (type, leftResult.whenTrue.intersection(rightResult.whenTrue))
        case .binary(let op, let left, let right):
            let a = check(left, known: known).type, b = check(right, known: known).type
            guard let a, let b else { return plain(resultType(op)) }
            switch op {
            case .equal, .notEqual:
                // As in Cedar: two constants (literals, or the action, which each request
                // environment fixes) may be compared whatever their types, and so may two
                // entities; when their types cannot meet, the comparison is constant.
                func isConstant(_ expression: Expression) -> Bool {
                    switch expression.kind {
                    case .literal, .variable(.action): true
                    default: false
                    }
                }
                let disjoint: Bool
                if case .entity(let typesA) = a, case .entity(let typesB) = b {
                    disjoint = typesA.isDisjoint(with: typesB)
                } else if isConstant(left) && isConstant(right) {
                    disjoint = a.join(b) == nil
                } else {
                    if a.join(b) == nil { report(expression, "'\(op.rawValue)' compares \(a) with \(b): they are never equal") }
                    disjoint = false
                }
                if disjoint { return plain(op == .equal ? .alwaysFalse : .alwaysTrue) }
            case .less, .lessEqual, .greater, .greaterEqual:
                let ordered = (a == b) && (a == .long || a == .extension("datetime") || a == .extension("duration"))
                if !ordered { report(expression, "'\(op.rawValue)' compares two Longs, two datetimes or two durations, not \(a) and \(b)") }
            case .add, .subtract, .multiply:
                if a != .long || b != .long { report(expression, "'\(op.rawValue)' needs two Longs, not \(a) and \(b)") }
            case .in:
                guard case .entity(let members) = a else {
                    report(left, "'in' needs an entity on its left, not \(a)")
                    break
                }
                let containers: Set<String>
                switch b {
                case .entity(let types), .set(.entity(let types)): containers = types
                default:
                    report(right, "'in' needs an entity or a set of entities on its right, not \(b)")
                    return plain(.bool)
                }
                // As in Cedar: an entity that cannot be in the container's type makes it always false.
                let possible = members.contains { member in containers.contains { $0 == member || schema.typeCanBeIn(member, $0) } }
                if !possible { return plain(.alwaysFalse) }
            case .and, .or: break
            }
            return plain(resultType(op))
        case .ifThenElse(let condition, let then, let otherwise):
            let conditionResult = check(condition, known: known)
            if let type = conditionResult.type, !type.isBoolean { report(condition, "'if' needs true or false, and this is \(type)") }
            if conditionResult.type == .alwaysTrue { return check(then, known: known.union(conditionResult.whenTrue)) }
            if conditionResult.type == .alwaysFalse { return check(otherwise, known: known) }
            let a = check(then, known: known.union(conditionResult.whenTrue))
            let b = check(otherwise, known: known)
            guard let typeA = a.type, let typeB = b.type else { return plain(nil) }
            guard let joined = typeA.join(typeB) else {
                report(expression, "the branches of 'if' have different types: \(typeA) and \(typeB)")
                return plain(nil)
            }
            return (joined, joined.isBoolean ? a.whenTrue.intersection(b.whenTrue) : [])
        case .has(let base, let name):
            guard let type = check(base, known: known).type else { return plain(.bool) }
            switch type {
            case .entity(let types):
                if types.allSatisfy({ schema.entityType(named: $0)?.attributes.exactly(name) == nil }) { return plain(.alwaysFalse) }
            case .record(let fields):
                guard let field = fields.exactly(name) else { return plain(.alwaysFalse) }
                if field.required { return plain(.alwaysTrue) }
            case .openRecord: break
            default: report(expression, "'has' needs an entity or a record, not \(type)")
            }
            return (.bool, Self.path(base).map { ["\($0).\(name)"] } ?? [])
        case .like(let base, _):
            expect(base, .string, known, "'like' needs a String")
            return plain(.bool)
        case .isType(let base, let type, let container):
            if schema.entityType(named: type) == nil {
                report(expression, "the entity type \(type) is not declared in the schema\(Schema.suggestion(type, schema.entityTypes.keys))")
            }
            let baseType = check(base, known: known).type
            if let baseType, !isEntity(baseType) { report(base, "'is' needs an entity, not \(baseType)") }
            if case .entity(let types)? = baseType, !types.contains(type) { return plain(.alwaysFalse) }
            if container == nil, baseType == .entity([type]) { return plain(.alwaysTrue) }
            if let container, let containerType = check(container, known: known).type {
                switch containerType {
                case .entity, .set(.entity): break
                default: report(container, "'is … in' needs an entity or a set of entities, not \(containerType)")
                }
            }
            return plain(.bool)
        case .attribute(let base, let name):
            guard let type = check(base, known: known).type else { return plain(nil) }
            let path = Self.path(expression)
            let fields: [String: SchemaAttribute]
            let owner: String
            switch type {
            case .openRecord(let element):
                fields = [name: SchemaAttribute(type: element, required: false)]
                owner = Self.path(base) ?? "the record"
            case .record(let record):
                fields = record
                owner = Self.path(base) ?? "the record"
            case .entity(let types):
                var common: [String: SchemaAttribute]?
                for typeName in types.sorted() {
                    let attributes = schema.entityType(named: typeName)?.attributes ?? [:]
                    common = common.map { previous in previous.filter { attributes[$0.key] == $0.value } } ?? attributes
                }
                fields = common ?? [:]
                owner = type.description
            default:
                report(expression, "only entities and records have attributes, and this is \(type)")
                return plain(nil)
            }
            guard let attribute = fields.exactly(name) else {
                report(expression, "\(owner) has no attribute \(name)\(Schema.suggestion(name, fields.keys))")
                return plain(nil)
            }
            if !attribute.required, path.map({ !known.contains($0) }) ?? true {
                let written = PolicyPrinter.identifierOrString(name)
                // `principal.suspended`, `context.token.since["photos:read"]`; without a path to
                // the base, `the attribute suspended of entity of type User`.
                let access = Self.path(base).map { PolicyPrinter.isIdentifier(name) ? "\($0).\(name)" : "\($0)[\(written)]" }
                    ?? "the attribute \(written) of \(owner)"
                report(expression, "\(access) is optional: test it first (\(Self.path(base) ?? "…") has \(written) && …)")
            }
            return plain(StaticType(attribute.type))
        case .method(let receiver, let name, let arguments):
            let receiverType = check(receiver, known: known).type
            let argumentTypes = arguments.map { check($0, known: known).type }
            guard let receiverType, !argumentTypes.contains(where: { $0 == nil }) else { return plain(methodResult(name)) }
            methodCheck(name, receiverType, argumentTypes.map { $0! }, expression)
            return plain(methodResult(name))
        case .call(let name, let arguments):
            guard arguments.count == 1, case .literal(.string(let text)) = arguments[0].kind else {
                report(expression, "\(name)() takes one string literal")
                return plain(nil)
            }
            do {
                let value = try Evaluator.extensionValue(name, text)
                return plain(literalType(value, expression))
            } catch {
                report(expression, error.message)
                return plain(nil)
            }
        case .set(let items):
            guard !items.isEmpty else {
                report(expression, "an empty set literal has no type: compare with .isEmpty() instead")
                return plain(nil)
            }
            var element: StaticType?
            for item in items {
                guard let type = check(item, known: known).type else { return plain(nil) }
                guard let joined = element.map({ $0.join(type) }) ?? type else {
                    report(item, "a set's elements must have one type, and this is \(type) among \(element!)")
                    return plain(nil)
                }
                element = joined
            }
            return plain(.set(element!))
        case .record(let fields):
            var out: [String: SchemaAttribute] = [:]
            for (name, value) in fields {
                guard let type = check(value, known: known).type, let schemaType = type.schemaType else { return plain(nil) }
                out[name] = SchemaAttribute(type: schemaType, required: true)
            }
            return plain(.record(out))
        }
    }

    private func isEntity(_ type: StaticType) -> Bool {
        if case .entity = type { return true }
        return false
    }

    private mutating func expect(_ expression: Expression, _ type: StaticType, _ known: Set<String>, _ message: String) {
        if let actual = check(expression, known: known).type, actual.join(type) != type { report(expression, "\(message), and this is \(actual)") }
    }

    private func resultType(_ op: BinaryOperator) -> StaticType {
        switch op {
        case .add, .subtract, .multiply: .long
        default: .bool
        }
    }

    private mutating func literalType(_ value: PolicyValue, _ expression: Expression) -> StaticType? {
        switch value {
        case .bool(let flag): return flag ? .alwaysTrue : .alwaysFalse
        case .long: return .long
        case .string: return .string
        case .entity(let uid):
            if schema.actions[uid] != nil { return .entity([uid.type]) }
            if PolicyParser.isActionType(uid.type) {
                report(expression, "the action \(uid) is not declared in the schema\(Schema.suggestion(uid.id, schema.actions.keys.map(\.id)))")
                return nil
            }
            guard schema.entityType(named: uid.type) != nil else {
                report(expression, "the entity type \(uid.type) is not declared in the schema\(Schema.suggestion(uid.type, schema.entityTypes.keys))")
                return nil
            }
            if let problem = schema.enumerationProblem(uid) {
                report(expression, problem)
                return nil
            }
            return .entity([uid.type])
        case .ip: return .extension("ipaddr")
        case .decimal: return .extension("decimal")
        case .datetime: return .extension("datetime")
        case .duration: return .extension("duration")
        case .set, .record: return nil
        }
    }

    private func methodResult(_ name: String) -> StaticType? {
        switch name {
        case "offset", "toDate": .extension("datetime")
        case "durationSince", "toTime": .extension("duration")
        case "toMilliseconds", "toSeconds", "toMinutes", "toHours", "toDays": .long
        case "contains", "containsAll", "containsAny", "isEmpty", "isIpv4", "isIpv6", "isLoopback", "isMulticast", "isInRange",
             "lessThan", "lessThanOrEqual", "greaterThan", "greaterThanOrEqual": .bool
        default: nil
        }
    }

    private mutating func methodCheck(_ name: String, _ receiver: StaticType, _ arguments: [StaticType], _ expression: Expression) {
        func needs(_ count: Int, _ receiverOK: Bool, _ argumentsOK: Bool, _ signature: String) {
            if arguments.count != count || !receiverOK || !argumentsOK {
                report(expression, ".\(name)() is \(signature); here it is called on \(receiver)\(arguments.isEmpty ? "" : " with " + arguments.map(\.description).joined(separator: ", "))")
            }
        }
        let first = arguments.first
        switch name {
        case "contains":
            if case .set(let element) = receiver {
                needs(1, true, first.map { element.join($0) != nil } ?? false, "Set<T>.contains(T)")
            } else {
                needs(1, false, true, "Set<T>.contains(T)")
            }
        case "containsAll", "containsAny":
            if case .set(let element) = receiver, case .set(let other)? = first {
                needs(1, true, element.join(other) != nil, "Set<T>.\(name)(Set<T>)")
            } else {
                needs(1, false, true, "Set<T>.\(name)(Set<T>)")
            }
        case "isEmpty":
            if case .set = receiver { needs(0, true, true, "Set<T>.isEmpty()") } else { needs(0, false, true, "Set<T>.isEmpty()") }
        case "isIpv4", "isIpv6", "isLoopback", "isMulticast":
            needs(0, receiver == .extension("ipaddr"), true, "ipaddr.\(name)()")
        case "isInRange":
            needs(1, receiver == .extension("ipaddr"), first == .extension("ipaddr"), "ipaddr.isInRange(ipaddr)")
        case "lessThan", "lessThanOrEqual", "greaterThan", "greaterThanOrEqual":
            needs(1, receiver == .extension("decimal"), first == .extension("decimal"), "decimal.\(name)(decimal)")
        case "offset":
            needs(1, receiver == .extension("datetime"), first == .extension("duration"), "datetime.offset(duration)")
        case "durationSince":
            needs(1, receiver == .extension("datetime"), first == .extension("datetime"), "datetime.durationSince(datetime)")
        case "toDate", "toTime":
            needs(0, receiver == .extension("datetime"), true, "datetime.\(name)()")
        case "toMilliseconds", "toSeconds", "toMinutes", "toHours", "toDays":
            needs(0, receiver == .extension("duration"), true, "duration.\(name)()")
        default:
            report(expression, "there is no method .\(name)()")
        }
    }
}

extension StaticType {
    /// The schema type of a single-typed static type (records built in conditions).
    var schemaType: SchemaType? {
        switch self {
        case .bool, .alwaysTrue, .alwaysFalse: .bool
        case .long: .long
        case .string: .string
        case .entity(let types): types.count == 1 ? .entity(types.first!) : nil
        case .set(let element): element.schemaType.map { .set($0) }
        case .record(let fields): .record(fields)
        case .openRecord(let element): .openRecord(element)
        case .extension(let name): .extension(name)
        }
    }
}
