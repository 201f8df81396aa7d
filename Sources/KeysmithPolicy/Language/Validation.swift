extension Schema {
    /// Checks every entity against the schema: its type is declared, it has every required
    /// attribute and no undeclared one, every value has its declared type, and every parent's
    /// type is one the schema allows. Action entities come from the schema: one in the data
    /// must be declared, have no attributes and be in exactly the groups its declaration names
    /// (an entities file cannot move an action into or out of a group), as in Cedar.
    public func validate(_ entities: EntityStore) throws(PolicyDiagnostics) {
        var problems: [PolicyDiagnostic] = []
        var parentTypeCache: [String: Set<String>] = [:]
        for uid in entities.entities.keys.sorted() {
            let entity = entities.entities[uid]!
            let location = entities.location(of: uid)
            func report(_ message: String) { problems.append(PolicyDiagnostic(location: location, message: "\(uid): \(message)")) }
            if let action = actions[uid] {
                if !entity.attributes.isEmpty || Set(entity.parents) != Set(action.memberOf) {
                    let groups = action.memberOf.isEmpty ? "in no group" : "in " + action.memberOf.sorted().map(\.description).joined(separator: ", ")
                    report("does not match its declaration in the schema (no attributes, \(groups)): leave it out, actions come from the schema")
                }
                continue
            }
            if entityType(named: uid.type) == nil, actions.keys.contains(where: { $0.type == uid.type }) {
                let names = actions.keys.filter { $0.type == uid.type }.map(\.id)
                report("the action \(uid) is not declared in the schema\(Self.suggestion(uid.id, names))")
                continue
            }
            guard let declaration = entityType(named: uid.type) else {
                report("the entity type \(uid.type) is not declared in the schema\(Self.suggestion(uid.type, entityTypes.keys))")
                continue
            }
            if let problem = enumerationProblem(uid) { report(problem) }
            for parent in entity.parents {
                if let problem = enumerationProblem(parent) { report(problem) }
            }
            for problem in check(.record(entity.attributes), against: .record(declaration.attributes), path: "attributes") {
                report(problem)
            }
            let allowed = parentTypes(of: declaration, &parentTypeCache)
            var reported: Set<EntityUID> = []
            for parent in entity.parents where !Self.names(allowed, holdExactly: parent.type) && reported.insert(parent).inserted {
                report("a \(uid.type) cannot be in \(parent) (the schema allows \(allowed.isEmpty ? "no parents" : allowed.sorted().joined(separator: ", ")))\(Self.lookAlike(parent.type, allowed))")
            }
        }
        if !problems.isEmpty { throw PolicyDiagnostics(kind: .validation, problems: problems) }
    }

    /// The types an entity of `declaration`'s type may be in: its declared parent types and
    /// theirs, transitively (User in Group in Org: a User may be in an Org directly, as in
    /// Cedar). Found once per type and kept in `cache`.
    private func parentTypes(of declaration: EntityTypeDeclaration, _ cache: inout [String: Set<String>]) -> Set<String> {
        if let known = cache[declaration.name] { return known }
        var seen: Set<String> = []
        var pending = Array(declaration.memberOf)
        while let next = pending.popLast() {
            guard seen.insert(next).inserted else { continue }
            pending += entityType(named: next)?.memberOf ?? []
        }
        cache[declaration.name] = seen
        return seen
    }

    /// Checks a request: its action is declared, its principal's and resource's types are ones
    /// the action applies to, and its context has exactly the declared attributes, typed.
    public func validate(_ request: AuthorizationRequest, location: SourceLocation = SourceLocation(file: "<request>", line: 1, column: 1))
        throws(PolicyDiagnostics)
    {
        var problems: [String] = []
        if let action = actions[request.action] {
            func appliesTo(_ role: String, _ type: String, _ types: Set<String>) {
                guard !Self.names(types, holdExactly: type) else { return }
                let undeclared = entityType(named: type) == nil ? ", a type the schema does not declare" : ""
                let list = types.isEmpty ? "no \(role): it has no appliesTo" : types.sorted().joined(separator: ", ")
                problems.append("\(request.action) does not apply to a \(role) of type \(type)\(undeclared) (it applies to \(list))\(Self.lookAlike(type, types))")
            }
            appliesTo("principal", request.principal.type, action.principals)
            appliesTo("resource", request.resource.type, action.resources)
            if request.context["token"] != nil {
                problems.append("context.token is reserved: it is the principal's token, given by Keysmith")
            }
            var declared = action.context
            declared["token"] = nil
            var context = request.context
            context["token"] = nil
            problems += check(.record(context), against: .record(declared), path: "context")
            for uid in [request.principal, request.resource] {
                if let problem = enumerationProblem(uid) { problems.append(problem) }
            }
        } else {
            let names = actions.keys.filter { $0.type == request.action.type }.map(\.id)
            problems.append("the action \(request.action) is not declared in the schema\(Self.suggestion(request.action.id, names))")
        }
        if !problems.isEmpty {
            throw PolicyDiagnostics(kind: .validation, problems: problems.map { PolicyDiagnostic(location: location, message: $0) })
        }
    }

    /// " (did you mean X?)" for the closest known name, or "". A name with the letters of a
    /// known one in other bytes (a Kelvin sign for K) says so, with its characters escaped.
    static func suggestion(_ name: String, _ known: some Sequence<String>) -> String {
        let known = Array(known)
        let alike = lookAlike(name, known)
        if !alike.isEmpty { return alike }
        let lowered = name.lowercased()
        let best = known.map { ($0, editDistance(lowered, $0.lowercased())) }.min { $0.1 < $1.1 || ($0.1 == $1.1 && $0.0 < $1.0) }
        guard let best, best.1 <= max(1, name.count / 3) else { return "" }
        return " (did you mean \(best.0)?)"
    }

    /// ` (written "\u{212A}ey": not the bytes of Key)` when `name` has the letters of one of
    /// `known` in other bytes (Swift would call them equal, Cedar does not), else "".
    static func lookAlike(_ name: String, _ known: some Sequence<String>) -> String {
        guard let same = known.first(where: { $0 == name && !PolicyValue.sameBytes($0, name) }) else { return "" }
        return " (written \(PolicyValue.quoted(name, escapingNonASCII: true)): not the bytes of \(same))"
    }

    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        guard !a.isEmpty else { return b.count }
        var previous = Array(0...b.count)
        for i in 1...a.count {
            var row = [i] + Array(repeating: 0, count: b.count)
            for j in stride(from: 1, through: b.count, by: 1) {
                row[j] = min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            previous = row
        }
        return previous[b.count]
    }

    /// Why `uid` is not a value of its enumerated type, if it is not.
    func enumerationProblem(_ uid: EntityUID) -> String? {
        guard let ids = entityType(named: uid.type)?.enumeration, !ids.contains(where: { PolicyValue.sameBytes($0, uid.id) }) else { return nil }
        return "\(uid) is not one of the declared \(uid.type) ids (\(ids.map(PolicyValue.quoted).joined(separator: ", ")))\(Schema.suggestion(uid.id, ids))"
    }

    /// Every way `value` differs from `type`, as sentences naming the path.
    func check(_ value: PolicyValue, against type: SchemaType, path: String) -> [String] {
        switch (type, value) {
        case (.bool, .bool), (.long, .long), (.string, .string): return []
        case (.entity(let name), .entity(let uid)):
            guard PolicyValue.sameBytes(uid.type, name) else { return ["\(path) must be an entity of type \(name), not \(uid)\(Schema.lookAlike(uid.type, [name]))"] }
            return enumerationProblem(uid).map { ["\(path): \($0)"] } ?? []
        case (.set(let element), .set(let set)):
            return set.elements.flatMap { check($0, against: element, path: "an element of \(path)") }
        case (.record(let fields), .record(let record)):
            var problems: [String] = []
            func qualified(_ name: String) -> String { path == "attributes" ? "the attribute \(name)" : "\(path).\(name)" }
            for (name, attribute) in fields.sorted(by: { $0.key < $1.key }) {
                if let member = record.exactly(name) {
                    problems += check(member, against: attribute.type, path: path == "attributes" ? name : "\(path).\(name)")
                } else if attribute.required {
                    problems.append("\(qualified(name)) is missing (it is required, of type \(attribute.type))")
                }
            }
            for name in record.keys.sorted() where fields.exactly(name) == nil {
                problems.append("\(qualified(name)) is not declared\(Schema.suggestion(name, fields.keys))")
            }
            return problems
        case (.openRecord(let element), .record(let record)):
            return record.sorted(by: { $0.key < $1.key }).flatMap { check($0.value, against: element, path: "\(path)[\(PolicyValue.quoted($0.key))]") }
        case (.extension(let name), .ip) where name == "ipaddr": return []
        case (.extension(let name), .decimal) where name == "decimal": return []
        case (.extension(let name), .datetime) where name == "datetime": return []
        case (.extension(let name), .duration) where name == "duration": return []
        default:
            // The type only, not the value: a value in the wrong place may be a secret.
            return ["\(path) must be \(type), not \(value.typeName)"]
        }
    }
}
