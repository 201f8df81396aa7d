/// A type in a schema: what an attribute, a context field or an expression may hold.
public indirect enum SchemaType: Sendable, Hashable, CustomStringConvertible {
    /// `Bool`.
    case bool
    /// `Long`.
    case long
    /// `String`.
    case string
    /// An entity of this type.
    case entity(String)
    /// `Set<T>`.
    case set(SchemaType)
    /// A record with these attributes.
    case record([String: SchemaAttribute])
    /// `ipaddr`, `decimal`, `datetime` or `duration`.
    case `extension`(String)
    /// A record whose attribute names are not declared, each of this type and optional (read one
    /// after `has`): `context.token.since`, keyed by scope name. Schemas cannot write one; it
    /// exists for the principal's token, which Keysmith declares itself.
    case openRecord(SchemaType)

    /// The type as the schema writes it.
    public var description: String {
        switch self {
        case .bool: "Bool"
        case .long: "Long"
        case .string: "String"
        case .entity(let name): name
        case .set(let element): "Set<\(element)>"
        case .record(let fields):
            "{" + fields.sorted { $0.key < $1.key }.map { "\($0.key)\($0.value.required ? "" : "?"): \($0.value.type)" }
                .joined(separator: ", ") + "}"
        case .extension(let name): name
        case .openRecord(let element): "{[name]?: \(element)}"
        }
    }
}

/// An attribute's type and whether it must be present.
public struct SchemaAttribute: Sendable, Hashable {
    /// The type.
    public var type: SchemaType
    /// Whether every value must have it (`name?: T` is optional).
    public var required: Bool
}

/// What a schema says about one entity type.
public struct EntityTypeDeclaration: Sendable, Hashable {
    /// The type's name.
    public var name: String
    /// The types its entities may be `in` (their parents' types).
    public var memberOf: Set<String>
    /// Its attributes.
    public var attributes: [String: SchemaAttribute]
    /// For an enumerated type (`entity Role enum ["admin", "member"];`), its only ids: any other
    /// id of this type, in a policy, an entity or a request, is an error.
    public var enumeration: [String]?
    /// Where it is declared.
    public var location: SourceLocation
}

/// What a schema says about one action.
public struct ActionDeclaration: Sendable, Hashable {
    /// The action's entity: `Action::"view"`.
    public var uid: EntityUID
    /// The action groups it belongs to.
    public var memberOf: [EntityUID]
    /// The principal types it applies to.
    public var principals: Set<String>
    /// The resource types it applies to.
    public var resources: Set<String>
    /// Its context's attributes (`token` is always allowed: the principal's token).
    public var context: [String: SchemaAttribute]
    /// Where it is declared.
    public var location: SourceLocation
}

/// A schema: entity types with their attributes and parents, and actions with what they apply to.
///
/// Written in Cedar's schema syntax (docs/policy-language.md, "Schemas"):
///
/// ```
/// entity Org;
/// entity Team in [Org];
/// entity User in [Team] { name: String, level?: Long };
/// entity Photo in [Album] { owner: User, tags: Set<String> };
/// entity Album;
/// entity Role enum ["admin", "member"];
/// action view, edit appliesTo { principal: [User], resource: [Photo], context: { ip: ipaddr } };
/// ```
///
/// With a schema, policies are type-checked (``validate(_:)-(Policies)``) and entities and requests are
/// checked before any decision (``validate(_:)-(EntityStore)``, ``validate(_:location:)``): an
/// undeclared or mistyped attribute, entity type or action is an error, never a decision.
public struct Schema: Sendable {
    /// Entity types by name.
    ///
    /// A Swift dictionary finds a key by canonical equivalence (`entityTypes["\u{212A}ey"]`,
    /// with a Kelvin sign, finds `Key`); to look a type up as Cedar does, by its bytes, use
    /// ``entityType(named:)``.
    public private(set) var entityTypes: [String: EntityTypeDeclaration]
    /// Actions by uid.
    public private(set) var actions: [EntityUID: ActionDeclaration]

    static let extensionTypes: Set<String> = ["ipaddr", "decimal", "datetime", "duration"]

    /// The type of `context.token`: four sets of scope names, and when each scope entered its
    /// state (`since`, by scope name; a scope with no known time is not in it).
    static let tokenType: SchemaType = .record(Dictionary(uniqueKeysWithValues: ["granted", "declined", "expired", "revoked"].map {
        ($0, SchemaAttribute(type: .set(.string), required: true))
    }).merging(["since": SchemaAttribute(type: .openRecord(.extension("datetime")), required: true)]) { a, _ in a })

    /// Parses schema text; every problem is reported at once.
    public init(text: String, file: String = "<schema>") throws(PolicyDiagnostics) {
        var parser = try SchemaParser(text: text, file: file)
        let (entityTypes, actions, problems) = parser.parse()
        if !problems.isEmpty { throw PolicyDiagnostics(kind: .validation, problems: problems) }
        self.entityTypes = entityTypes
        self.actions = actions
    }

    /// The declaration of the entity type named by exactly these bytes, or nil.
    ///
    /// ```swift
    /// schema.entityType(named: "Photo")?.attributes["owner"]   // the owner attribute
    /// schema.entityType(named: "\u{212A}ey")                   // nil, though Swift calls it "Key"
    /// ```
    public func entityType(named name: String) -> EntityTypeDeclaration? {
        guard let declaration = entityTypes[name], PolicyValue.sameBytes(declaration.name, name) else { return nil }
        return declaration
    }

    /// Whether `names` holds `name`, byte for byte (a set finds its members by canonical
    /// equivalence, and holds at most one of any canonically equivalent names).
    static func names(_ names: Set<String>, holdExactly name: String) -> Bool {
        guard let index = names.firstIndex(of: name) else { return false }
        return PolicyValue.sameBytes(names[index], name)
    }

    /// The action entities, with their groups as parents, for an ``EntityStore``.
    public var actionEntities: [Entity] {
        actions.values.sorted { $0.uid < $1.uid }.map { Entity(uid: $0.uid, parents: $0.memberOf) }
    }

    /// Every action entity `uid` is in, transitively.
    func actionAncestors(_ uid: EntityUID) -> Set<EntityUID> {
        var seen: Set<EntityUID> = []
        var pending = actions[uid]?.memberOf ?? []
        while let next = pending.popLast() {
            guard seen.insert(next).inserted else { continue }
            pending += actions[next]?.memberOf ?? []
        }
        return seen
    }
}

/// Reads Cedar's schema syntax.
struct SchemaParser {
    private var tokens: [Lexer.Located]
    private var position = 0
    private let file: String
    private var commonTypes: [String: (type: TypeSyntax, location: SourceLocation)] = [:]
    private var problems: [PolicyDiagnostic] = []
    private var depth = 0

    /// A type as written, resolved once every name is known.
    indirect enum TypeSyntax {
        case name(String, SourceLocation)
        case set(TypeSyntax)
        case record([(String, Bool, TypeSyntax, SourceLocation)])
    }

    init(text: String, file: String) throws(PolicyDiagnostics) {
        var lexer = Lexer(text: text, file: file)
        do { tokens = try lexer.tokens() } catch { throw PolicyDiagnostics(kind: .syntax, problems: [error]) }
        self.file = file
    }

    private var current: Lexer.Located { tokens[position] }

    private func problem(_ message: String) -> PolicyDiagnostic { PolicyDiagnostic(location: current.location, message: message) }

    private mutating func accept(_ symbol: String) -> Bool {
        guard current.token == .symbol(symbol) else { return false }
        position += 1
        return true
    }

    private mutating func expect(_ symbol: String, _ context: String) throws(PolicyDiagnostic) {
        guard accept(symbol) else { throw problem("expected '\(symbol)' \(context)") }
    }

    private mutating func keyword(_ word: String) -> Bool {
        guard current.token == .identifier(word) else { return false }
        position += 1
        return true
    }

    /// A type's name, `Name` or `Space::Name`. None of its parts may be a word Cedar reserves
    /// (`if`, `in`, …); a name being declared may not use `__cedar` either (a reference may:
    /// `__cedar::Long` is the built-in `Long`).
    private mutating func name(_ what: String, declaring: Bool = false) throws(PolicyDiagnostic) -> String {
        guard case .identifier(var name) = current.token else { throw problem("expected \(what)") }
        try refuseReserved(name, "cannot be part of a type's name", declaring: declaring)
        position += 1
        while current.token == .symbol("::"), case .identifier(let next) = tokens[position + 1].token {
            position += 1
            try refuseReserved(next, "cannot be part of a type's name", declaring: declaring)
            position += 1
            name += "::" + next
        }
        return name
    }

    /// Refuses the current token's word when Cedar reserves it where it stands unquoted (as
    /// Cedar's schema reader does); `__cedar` only where a name is declared.
    private func refuseReserved(_ word: String, _ why: String, declaring: Bool = true) throws(PolicyDiagnostic) {
        guard PolicyParser.cedarReserved.contains(word), declaring || word != "__cedar" else { return }
        throw problem("'\(word)' is a reserved word and \(why)")
    }

    private mutating func locatedName() throws(PolicyDiagnostic) -> (String, SourceLocation) {
        let location = current.location
        return (try name("an entity type"), location)
    }

    /// An action name: `view`, `"view"`, or a qualified `Action::"view"`.
    private mutating func actionName() throws(PolicyDiagnostic) -> EntityUID {
        switch current.token {
        case .string(let id, _):
            position += 1
            return EntityUID(type: "Action", id: id)
        case .identifier(let id):
            if tokens[position + 1].token != .symbol("::") {
                // `__cedar` may name an action (Cedar accepts `action __cedar`).
                try refuseReserved(id, "cannot name an action unquoted: write it as a string, \(PolicyValue.quoted(id))", declaring: false)
            }
            position += 1
            if current.token == .symbol("::") {
                var type = id
                while accept("::") {
                    switch current.token {
                    case .identifier(let part):
                        position += 1
                        type += "::" + part
                    case .string(let quoted, _):
                        position += 1
                        return EntityUID(type: type, id: quoted)
                    default:
                        throw problem("expected an action name")
                    }
                }
                throw problem("expected a quoted action id after \(type)::")
            }
            return EntityUID(type: "Action", id: id)
        default:
            throw problem("expected an action name")
        }
    }

    private mutating func skipDeclaration() {
        var nesting = 0
        while current.token != .end {
            let token = current.token
            position += 1
            switch token {
            case .symbol("{"), .symbol("["), .symbol("<"): nesting += 1
            case .symbol("}"), .symbol("]"), .symbol(">"): nesting = max(0, nesting - 1)
            case .symbol(";") where nesting == 0: return
            default: break
            }
        }
    }

    mutating func parse() -> ([String: EntityTypeDeclaration], [EntityUID: ActionDeclaration], [PolicyDiagnostic]) {
        var entities: [(name: String, memberOf: [(String, SourceLocation)], attributes: TypeSyntax?, enumeration: [String]?,
                        location: SourceLocation)] = []
        var actions: [(uid: EntityUID, memberOf: [EntityUID], principals: [(String, SourceLocation)],
                       resources: [(String, SourceLocation)], context: TypeSyntax?, location: SourceLocation)] = []
        while current.token != .end {
            let start = position
            let location = current.location
            do throws(PolicyDiagnostic) {
                if keyword("namespace") {
                    throw problem("namespaces are not supported yet: declare types at the top level")
                } else if keyword("entity") {
                    var names = [try name("an entity type name", declaring: true)]
                    while accept(",") { names.append(try name("an entity type name", declaring: true)) }
                    var parents: [(String, SourceLocation)] = []
                    if keyword("in") {
                        if accept("[") {
                            if !accept("]") {
                                repeat { parents.append(try locatedName()) } while accept(",")
                                try expect("]", "to close the list of parent types")
                            }
                        } else {
                            parents.append(try locatedName())
                        }
                    }
                    var attributes: TypeSyntax?
                    var enumeration: [String]?
                    if keyword("enum") {
                        try expect("[", "after enum")
                        var ids: [String] = [], seen: Set<String> = []
                        repeat {
                            guard case .string(let id, _) = current.token else { throw problem("expected a quoted id in the enum") }
                            guard seen.insert(id).inserted else { throw problem("the id \(PolicyValue.quoted(id)) appears twice in the enum") }
                            position += 1
                            ids.append(id)
                        } while accept(",")
                        try expect("]", "to close the enum")
                        enumeration = ids
                    } else {
                        if current.token == .symbol("=") { position += 1 }
                        if current.token == .symbol("{") { attributes = try recordType() }
                    }
                    if case .identifier("tags") = current.token { throw problem("entity tags are not supported") }
                    try expect(";", "at the end of the entity declaration")
                    for name in names { entities.append((name, parents, attributes, enumeration, location)) }
                } else if keyword("action") {
                    var uids = [try actionName()]
                    while accept(",") { uids.append(try actionName()) }
                    var groups: [EntityUID] = []
                    if keyword("in") {
                        if accept("[") {
                            if !accept("]") {
                                repeat { groups.append(try actionName()) } while accept(",")
                                try expect("]", "to close the list of action groups")
                            }
                        } else {
                            groups.append(try actionName())
                        }
                    }
                    var principals: [(String, SourceLocation)] = [], resources: [(String, SourceLocation)] = []
                    var context: TypeSyntax?
                    if keyword("appliesTo") {
                        try expect("{", "after appliesTo")
                        var seen: Set<String> = []
                        while !accept("}") {
                            let field = try name("principal, resource or context")
                            guard seen.insert(field).inserted else { throw problem("\(field) appears twice in appliesTo") }
                            try expect(":", "after \(field)")
                            switch field {
                            case "principal", "resource":
                                var list: [(String, SourceLocation)] = []
                                if accept("[") {
                                    if !accept("]") {
                                        repeat { list.append(try locatedName()) } while accept(",")
                                        try expect("]", "to close the list of types")
                                    }
                                } else {
                                    list.append(try locatedName())
                                }
                                if field == "principal" { principals = list } else { resources = list }
                            case "context":
                                context = try type()
                            default:
                                throw problem("appliesTo takes principal, resource and context, not \(field)")
                            }
                            if !accept(",") {
                                try expect("}", "to close appliesTo")
                                break
                            }
                        }
                    }
                    try expect(";", "at the end of the action declaration")
                    for uid in uids { actions.append((uid, groups, principals, resources, context, location)) }
                } else if keyword("type") {
                    let typeName = try name("a type name", declaring: true)
                    try expect("=", "after the type name")
                    let definition = try type()
                    try expect(";", "at the end of the type declaration")
                    if commonTypes[typeName] != nil { throw PolicyDiagnostic(location: location, message: "the type \(typeName) is declared twice") }
                    // A common type named Long (say) would silently redefine the built-in one.
                    if ["Bool", "Boolean", "Long", "String", "Set", "Record", "Entity", "Extension"].contains(typeName) || Schema.extensionTypes.contains(typeName) {
                        throw PolicyDiagnostic(location: location, message: "the type \(typeName) is built in and cannot be declared")
                    }
                    commonTypes[typeName] = (definition, location)
                } else {
                    throw problem("expected 'entity', 'action' or 'type'")
                }
            } catch {
                problems.append(error)
                if position == start { position += 1 }
                skipDeclaration()
            }
        }
        var entityTypes: [String: EntityTypeDeclaration] = [:]
        for entity in entities {
            if entityTypes[entity.name] != nil || Schema.extensionTypes.contains(entity.name) || ["Bool", "Long", "String", "Set"].contains(entity.name) {
                problems.append(PolicyDiagnostic(location: entity.location, message: "the entity type \(entity.name) is declared twice or names a built-in type"))
                continue
            }
            entityTypes[entity.name] = EntityTypeDeclaration(name: entity.name, memberOf: Set(entity.memberOf.map(\.0)), attributes: [:],
                                                             enumeration: entity.enumeration, location: entity.location)
        }
        for entity in entities {
            for (parent, location) in entity.memberOf where entityTypes[parent] == nil {
                problems.append(PolicyDiagnostic(location: location, message: "\(entity.name) is declared in \(parent), which is not a declared entity type"))
            }
            if let attributes = entity.attributes, case .record(let fields)? = resolve(attributes, entityTypes) {
                entityTypes[entity.name]?.attributes = fields
            }
        }
        var declared: [EntityUID: ActionDeclaration] = [:]
        for action in actions {
            guard declared[action.uid] == nil else {
                problems.append(PolicyDiagnostic(location: action.location, message: "the action \(action.uid) is declared twice"))
                continue
            }
            for (type, location) in action.principals + action.resources where entityTypes[type] == nil {
                problems.append(PolicyDiagnostic(location: location, message: "\(action.uid) applies to \(type), which is not a declared entity type"))
            }
            var context: [String: SchemaAttribute] = [:]
            if let syntax = action.context {
                switch resolve(syntax, entityTypes) {
                case .record(let fields)?: context = fields
                case nil: break
                case let other?: problems.append(PolicyDiagnostic(location: action.location, message: "\(action.uid)'s context must be a record, not \(other)"))
                }
            }
            if context["token"] != nil {
                problems.append(PolicyDiagnostic(location: action.location, message: "\(action.uid)'s context declares token, which is reserved for the principal's token"))
            }
            context["token"] = SchemaAttribute(type: Schema.tokenType, required: false)
            declared[action.uid] = ActionDeclaration(uid: action.uid, memberOf: action.memberOf, principals: Set(action.principals.map(\.0)),
                                                     resources: Set(action.resources.map(\.0)), context: context, location: action.location)
        }
        for action in actions {
            for group in action.memberOf where declared[group] == nil {
                problems.append(PolicyDiagnostic(location: action.location, message: "\(action.uid) is in \(group), which is not a declared action"))
            }
        }
        // Action groups form a hierarchy: an action in itself through its groups is an error
        // here, where the declaration is (depth-first, each action visited once).
        var state: [EntityUID: Bool] = [:]  // false: on the current path; true: done
        for action in actions where state[action.uid] == nil {
            var stack: [(uid: EntityUID, next: Int)] = [(action.uid, 0)]
            state[action.uid] = false
            while let top = stack.last {
                let groups = declared[top.uid]?.memberOf ?? []
                guard top.next < groups.count else {
                    state[top.uid] = true
                    stack.removeLast()
                    continue
                }
                stack[stack.count - 1].next += 1
                let group = groups[top.next]
                switch state[group] {
                case nil where declared[group] != nil:
                    state[group] = false
                    stack.append((group, 0))
                case false?:
                    problems.append(PolicyDiagnostic(location: declared[group]?.location ?? action.location,
                                                     message: "\(group) is in itself through its action groups: they form a cycle"))
                default:
                    break
                }
            }
        }
        // A problem found twice (a common type reached from two places) is reported once.
        var seen: Set<String> = []
        let distinct = problems.filter { seen.insert("\($0.location.line):\($0.location.column):\($0.message)").inserted }
        return (entityTypes, declared, distinct)
    }

    private mutating func recordType() throws(PolicyDiagnostic) -> TypeSyntax {
        try expect("{", "to open a record type")
        var fields: [(String, Bool, TypeSyntax, SourceLocation)] = [], names: Set<String> = []
        while !accept("}") {
            let location = current.location
            let field: String
            switch current.token {
            case .identifier(let name) where name != "__cedar":
                try refuseReserved(name, "cannot name an attribute unquoted: write it as a string, \(PolicyValue.quoted(name))")
                position += 1
                field = name
            case .identifier(let name), .string(let name, _):
                position += 1
                field = name
            default:
                throw problem("expected an attribute name")
            }
            guard names.insert(field).inserted else { throw PolicyDiagnostic(location: location, message: "the attribute \(field) is declared twice") }
            let optional = accept("?")
            try expect(":", "after the attribute name")
            fields.append((field, !optional, try type(), location))
            if !accept(",") {
                try expect("}", "to close the record type")
                break
            }
        }
        return .record(fields)
    }

    private mutating func type() throws(PolicyDiagnostic) -> TypeSyntax {
        depth += 1
        defer { depth -= 1 }
        guard depth < 64 else { throw problem("types nest deeper than 64 levels") }
        if current.token == .symbol("{") { return try recordType() }
        let location = current.location
        let typeName = try name("a type")
        if typeName == "Set" || typeName == "__cedar::Set" {
            try expect("<", "after Set")
            let element = try type()
            try expect(">", "to close Set<…>")
            return .set(element)
        }
        return .name(typeName, location)
    }

    private mutating func resolve(_ syntax: TypeSyntax, _ entityTypes: [String: EntityTypeDeclaration], seen: Set<String> = [])
        -> SchemaType?
    {
        switch syntax {
        case .set(let element):
            return resolve(element, entityTypes, seen: seen).map { .set($0) }
        case .record(let fields):
            // Every field is resolved, so each unknown type among them is reported, not the first.
            var out: [String: SchemaAttribute] = [:]
            var resolvedAll = true
            for (name, required, type, _) in fields {
                guard let resolved = resolve(type, entityTypes, seen: seen) else {
                    resolvedAll = false
                    continue
                }
                out[name] = SchemaAttribute(type: resolved, required: required)
            }
            return resolvedAll ? .record(out) : nil
        case .name(var name, let location):
            if name.hasPrefix("__cedar::") { name.removeFirst("__cedar::".count) }
            if let common = commonTypes[name] {
                guard !seen.contains(name) else {
                    problems.append(PolicyDiagnostic(location: location, message: "the type \(name) refers to itself"))
                    return nil
                }
                return resolve(common.type, entityTypes, seen: seen.union([name]))
            }
            switch name {
            case "Bool", "Boolean": return .bool
            case "Long": return .long
            case "String": return .string
            case _ where Schema.extensionTypes.contains(name): return .extension(name)
            case _ where entityTypes[name] != nil: return .entity(name)
            default:
                problems.append(PolicyDiagnostic(location: location, message: "unknown type \(name)"))
                return nil
            }
        }
    }
}

