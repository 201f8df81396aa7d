extension Schema {
    /// Checks every entity against the schema: its type is declared, it has every required
    /// attribute and no undeclared one, every value has its declared type, and every parent's
    /// type is one the schema allows (a declared parent type or one it is in, transitively).
    /// Action entities come from the schema: one in the data must be declared, have no
    /// attributes, and be in exactly the groups the schema puts it in, transitively on both
    /// sides (an entities file cannot move an action into or out of a group), as in Cedar.
    public func validate(_ entities: EntityStore) throws(PolicyDiagnostics) {
        var problems: [PolicyDiagnostic] = []
        // For each ancestor type asked about, every type that may be in it (one walk down the
        // declarations per ancestor type, whatever the number of entities).
        var children: [String: [String]] = [:]
        for (name, declaration) in entityTypes { for parent in declaration.memberOf { children[parent, default: []].append(name) } }
        var descendants: [String: Set<String>] = [:]
        func mayBeIn(_ type: String, _ ancestor: String) -> Bool {
            guard let declared = entityType(named: ancestor)?.name else { return false }
            if descendants[declared] == nil {
                var seen: Set<String> = [], pending = [declared]
                while let next = pending.popLast() {
                    for child in children[next] ?? [] where seen.insert(child).inserted { pending.append(child) }
                }
                descendants[declared] = seen
            }
            return descendants[declared]!.contains(type)
        }
        let actionTypes = Set(actions.keys.map(\.type))
        // "Did you mean" for the first problems only: a file of thousands of undeclared
        // names, each compared with thousands of declared ones, would take minutes.
        var suggestions = Self.suggestedProblems
        func suggest(_ name: String, _ known: some Sequence<String>) -> String {
            suggestions -= 1
            return suggestions >= 0 ? Self.suggestion(name, known) : ""
        }
        for uid in entities.entities.keys.sorted() {
            let entity = entities.entities[uid]!
            let location = entities.location(of: uid)
            func report(_ message: String) { problems.append(PolicyDiagnostic(location: location, message: "\(uid): \(message)")) }
            if let action = actions[uid] {
                // Its groups, transitively through the data, must be the schema's, transitively
                // (as Cedar compares them): `read in [rw]` given where the schema says `read in
                // [rw]` and `rw in [all]` is refused unless `rw` is given in `all` too.
                if !entity.attributes.isEmpty || Set(entities.record(uid)?.ancestors ?? entity.parents) != actionAncestors(uid) {
                    let groups = action.memberOf.isEmpty ? "in no group" : "in " + action.memberOf.sorted().map(\.description).joined(separator: ", ")
                    report("does not match its declaration in the schema (no attributes, \(groups)): leave it out, actions come from the schema")
                }
                continue
            }
            if entityType(named: uid.type) == nil, actionTypes.contains(uid.type) {
                report("the action \(uid) is not declared in the schema\(suggest(uid.id, actions.keys.lazy.filter { $0.type == uid.type }.map(\.id)))")
                continue
            }
            guard let declaration = entityType(named: uid.type) else {
                report("the entity type \(uid.type) is not declared in the schema\(suggest(uid.type, entityTypes.keys))")
                continue
            }
            for named in [uid] + entity.parents {
                if let problem = enumerationProblem(named, suggesting: suggestions > 0) {
                    suggestions -= 1
                    report(problem)
                }
            }
            for problem in check(.record(entity.attributes), against: .record(declaration.attributes), path: "attributes", suggestions: &suggestions) {
                report(problem)
            }
            // A declared parent type, or (as in Cedar) a type one of those is in, transitively:
            // with User in [Team] and Team in [Org], a User may be in an Org directly.
            var reported: Set<EntityUID> = []
            for parent in entity.parents where !Self.names(declaration.memberOf, holdExactly: parent.type) && reported.insert(parent).inserted {
                guard !mayBeIn(declaration.name, parent.type) else { continue }
                let declared = declaration.memberOf.isEmpty ? "no parents" : declaration.memberOf.sorted().joined(separator: ", ") + ", or a type they are in"
                report("a \(uid.type) cannot be in \(parent) (the schema allows \(declared))\(Self.lookAlike(parent.type, declaration.memberOf))")
            }
        }
        if !problems.isEmpty { throw PolicyDiagnostics(kind: .validation, problems: problems) }
    }

    /// What is wrong with `context` as the context of a request for `action`: `token` given
    /// (it is reserved), an attribute the action does not declare, missing or mistyped.
    func contextProblems(_ context: [String: PolicyValue], for action: ActionDeclaration) -> [String] {
        var problems: [String] = []
        if context["token"] != nil {
            problems.append("context.token is reserved: it is the principal's token, given by Keysmith")
        }
        // Without `token` on either side (copied only when it is there: a decider checks every
        // request, and most contexts are small or empty).
        let declared = action.context["token"] == nil ? action.context : action.context.filter { $0.key != "token" }
        let context = context["token"] == nil ? context : context.filter { $0.key != "token" }
        problems += check(.record(context), against: .record(declared), path: "context")
        return problems
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
            problems += contextProblems(request.context, for: action)
            if let problem = enumerationProblem(request.principal) { problems.append(problem) }
            if let problem = enumerationProblem(request.resource) { problems.append(problem) }
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
        // Bounded work, whatever the input: a long name gets no suggestion, and only the
        // candidates within reach (by length) are compared, until about 20,000 character
        // pairs have been.
        let count = name.count, reach = max(1, count / 3)
        guard count <= Self.suggestedNameLength else { return "" }
        let lowered = name.lowercased()
        var best: (String, Int)?, work = 0
        for candidate in known {
            // Its UTF-8 length bounds its length in characters (1 to 4 bytes each) without counting them.
            let bytes = candidate.utf8.count
            guard bytes >= count - reach, bytes <= (count + reach) * 4, abs(candidate.count - count) <= reach else { continue }
            work += count * candidate.count
            guard work <= 20_000 else { break }
            let distance = editDistance(lowered, candidate.lowercased())
            if distance <= reach, best.map({ distance < $0.1 || (distance == $0.1 && candidate < $0.0) }) ?? true { best = (candidate, distance) }
        }
        return best.map { " (did you mean \($0.0)?)" } ?? ""
    }

    /// How many problems of one entity file or request get a "did you mean".
    static let suggestedProblems = 100

    /// Names longer than this get no "did you mean".
    static let suggestedNameLength = 64

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
    /// `naming` the entity (a request's principal or resource, an entity's own uid or parent)
    /// or not (an attribute's value, which is data: neither it nor a "did you mean" from it is
    /// repeated).
    func enumerationProblem(_ uid: EntityUID, naming: Bool = true, suggesting: Bool = true) -> String? {
        guard let ids = entityType(named: uid.type)?.enumeration, !ids.contains(where: { PolicyValue.sameBytes($0, uid.id) }) else { return nil }
        // At most ten ids listed: an enum of thousands, repeated in each of thousands of
        // problems, printed hundreds of megabytes.
        let declared = ids.prefix(10).map(PolicyValue.quoted).joined(separator: ", ") + (ids.count > 10 ? ", … \(ids.count - 10) more" : "")
        guard naming else { return "it is not one of the declared \(uid.type) ids (\(declared))" }
        return "\(uid) is not one of the declared \(uid.type) ids (\(declared))\(suggesting ? Schema.suggestion(uid.id, ids) : "")"
    }

    /// Every way `value` differs from `type`, as sentences naming the path; a "did you mean"
    /// for at most `suggestions` of them (a record of thousands of undeclared names, each
    /// compared with hundreds of declared ones, would take minutes).
    func check(_ value: PolicyValue, against type: SchemaType, path: String) -> [String] {
        var suggestions = Self.suggestedProblems
        return check(value, against: type, path: path, suggestions: &suggestions)
    }

    private func check(_ value: PolicyValue, against type: SchemaType, path: String, suggestions: inout Int) -> [String] {
        switch (type, value) {
        case (.bool, .bool), (.long, .long), (.string, .string): return []
        case (.entity(let name), .entity(let uid)):
            // The type, not the entity: the value is data.
            guard PolicyValue.sameBytes(uid.type, name) else { return ["\(path) must be an entity of type \(name), not one of type \(uid.type)\(Schema.lookAlike(uid.type, [name]))"] }
            return enumerationProblem(uid, naming: false).map { ["\(path): \($0)"] } ?? []
        case (.set(let element), .set(let set)):
            var problems: [String] = []
            for member in set.elements { problems += check(member, against: element, path: "an element of \(path)", suggestions: &suggestions) }
            return problems
        case (.record(let fields), .record(let record)):
            var problems: [String] = []
            func qualified(_ name: String) -> String { path == "attributes" ? "the attribute \(name)" : "\(path).\(name)" }
            for (name, attribute) in fields.sorted(by: { $0.key < $1.key }) {
                if let member = record.exactly(name) {
                    problems += check(member, against: attribute.type, path: path == "attributes" ? name : "\(path).\(name)", suggestions: &suggestions)
                } else if attribute.required {
                    problems.append("\(qualified(name)) is missing (it is required, of type \(attribute.type))")
                }
            }
            for name in record.keys.sorted() where fields.exactly(name) == nil {
                suggestions -= 1
                problems.append("\(qualified(name)) is not declared\(suggestions >= 0 ? Schema.suggestion(name, fields.keys) : "")")
            }
            return problems
        case (.openRecord(let element), .record(let record)):
            var problems: [String] = []
            for (key, member) in record.sorted(by: { $0.key < $1.key }) {
                problems += check(member, against: element, path: "\(path)[\(PolicyValue.quoted(key))]", suggestions: &suggestions)
            }
            return problems
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
