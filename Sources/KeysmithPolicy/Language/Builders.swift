import FoundationEssentials

/// A policy built in Swift, Koosa-style, that becomes policy-language text: the same parser, the
/// same validation against a schema, the same decisions.
///
/// ```swift
/// let policies = try Policies {
///     Role("member").shouldBeAbleTo("browse", "post").on("Group")
///         .when("principal.member_of.contains(resource)").named("member-browse-post")
///     Principals.ofType("User").shouldNotBeAbleTo("post").unlessGranted("posts:write").named("scope-post")
///     Role("editor").shouldBeAbleTo("publish").requiring("posts:write")
/// }
/// print(policies.text)   // the policies in the policy language
/// ```
///
/// `requiring` (a permit that needs scopes) and `unlessGranted` (a forbid that applies unless
/// the scopes are granted) are different clauses; each is accepted on its own effect only.
public struct PolicyBuilder: Sendable {
    enum Head: Sendable {
        case any
        case within(EntityUID)
        case isType(String)
        case equal(EntityUID)
    }

    var effect: Effect
    var principal: Head
    var actions: [String]
    var resourceType: String?
    var conditions: [(isWhen: Bool, text: String)] = []
    var name: String?
    var problem: String?
    let file: String
    let line: Int

    /// The policy, named (decisions report the name).
    public func named(_ name: String) -> PolicyBuilder { with { $0.name = name } }

    /// The policy, applying only when `condition` (an expression of the policy language) is true.
    public func when(_ condition: String) -> PolicyBuilder { with { $0.conditions.append((true, condition)) } }

    /// The policy, not applying when `condition` is true.
    public func unless(_ condition: String) -> PolicyBuilder { with { $0.conditions.append((false, condition)) } }

    /// The policy, for resources of one entity type only.
    public func on(_ resourceType: String) -> PolicyBuilder { with { $0.resourceType = resourceType } }

    /// A permit that needs the principal's token to grant every one of `scopes`.
    public func requiring(_ scopes: String...) -> PolicyBuilder {
        with { policy in
            if policy.effect != .permit { policy.problem = "requiring(…) is for permits; a forbid takes unlessGranted(…)" }
            policy.conditions.append((true, "context has token && context.token.granted.containsAll(\(Self.list(scopes)))"))
        }
    }

    /// A forbid that applies unless the principal's token grants every one of `scopes`.
    public func unlessGranted(_ scopes: String...) -> PolicyBuilder {
        with { policy in
            if policy.effect != .forbid { policy.problem = "unlessGranted(…) is for forbids; a permit takes requiring(…)" }
            policy.conditions.append((false, "context has token && context.token.granted.containsAll(\(Self.list(scopes)))"))
        }
    }

    static func list(_ scopes: [String]) -> String { "[" + scopes.map(PolicyValue.quoted).joined(separator: ", ") + "]" }

    private func with(_ change: (inout PolicyBuilder) -> Void) -> PolicyBuilder {
        var copy = self
        change(&copy)
        return copy
    }

    /// The policy in the policy language.
    public var text: String {
        var out = name.map { "@id(\(PolicyValue.quoted($0)))\n" } ?? ""
        let principalText = switch principal {
        case .any: "principal"
        case .within(let uid): "principal in \(uid)"
        case .isType(let type): "principal is \(type)"
        case .equal(let uid): "principal == \(uid)"
        }
        let actionText = switch actions.count {
        case 0: "action"
        case 1: "action == \(EntityUID(type: "Action", id: actions[0]))"
        default: "action in [" + actions.map { EntityUID(type: "Action", id: $0).description }.joined(separator: ", ") + "]"
        }
        out += "\(effect.rawValue) (\(principalText), \(actionText), \(resourceType.map { "resource is \($0)" } ?? "resource"))"
        for (isWhen, condition) in conditions { out += "\n\(isWhen ? "when" : "unless") { \(condition) }" }
        return out + ";"
    }
}

/// A role: an entity `Role::"name"` that principals are `in` (directly or through other roles).
public struct Role: Sendable, Hashable {
    /// The role's entity.
    public var uid: EntityUID

    /// The role `Role::"name"`.
    public init(_ name: String) { uid = EntityUID(type: "Role", id: name) }

    /// A permit: holders of the role may do these actions.
    public func shouldBeAbleTo(_ actions: String..., file: String = #fileID, line: Int = #line) -> PolicyBuilder {
        PolicyBuilder(effect: .permit, principal: .within(uid), actions: actions, file: file, line: line)
    }

    /// A forbid: holders of the role may not do these actions; forbids beat every permit.
    public func shouldNotBeAbleTo(_ actions: String..., file: String = #fileID, line: Int = #line) -> PolicyBuilder {
        PolicyBuilder(effect: .forbid, principal: .within(uid), actions: actions, file: file, line: line)
    }
}

/// Principals that are not a role: everyone, one entity type, one entity, members of a group.
public struct Principals: Sendable {
    let head: PolicyBuilder.Head

    /// Every principal.
    public static let anyone = Principals(head: .any)
    /// Principals of one entity type (`User`).
    public static func ofType(_ type: String) -> Principals { Principals(head: .isType(type)) }
    /// One principal.
    public static func only(_ uid: EntityUID) -> Principals { Principals(head: .equal(uid)) }
    /// Members of a group, team or org (transitively).
    public static func members(of uid: EntityUID) -> Principals { Principals(head: .within(uid)) }

    /// A permit for these principals.
    public func shouldBeAbleTo(_ actions: String..., file: String = #fileID, line: Int = #line) -> PolicyBuilder {
        PolicyBuilder(effect: .permit, principal: head, actions: actions, file: file, line: line)
    }

    /// A forbid for these principals.
    public func shouldNotBeAbleTo(_ actions: String..., file: String = #fileID, line: Int = #line) -> PolicyBuilder {
        PolicyBuilder(effect: .forbid, principal: head, actions: actions, file: file, line: line)
    }
}

/// Collects builders in `Policies { … }`.
@resultBuilder
public enum PolicyListBuilder {
    /// The builders, in order.
    public static func buildBlock(_ components: [PolicyBuilder]...) -> [PolicyBuilder] { components.flatMap(\.self) }
    /// One builder.
    public static func buildExpression(_ expression: PolicyBuilder) -> [PolicyBuilder] { [expression] }
    /// Several builders.
    public static func buildExpression(_ expression: [PolicyBuilder]) -> [PolicyBuilder] { expression }
    /// An `if` without `else`.
    public static func buildOptional(_ component: [PolicyBuilder]?) -> [PolicyBuilder] { component ?? [] }
    /// `if`/`else`, first branch.
    public static func buildEither(first component: [PolicyBuilder]) -> [PolicyBuilder] { component }
    /// `if`/`else`, second branch.
    public static func buildEither(second component: [PolicyBuilder]) -> [PolicyBuilder] { component }
    /// `for … in`.
    public static func buildArray(_ components: [[PolicyBuilder]]) -> [PolicyBuilder] { components.flatMap(\.self) }
}

extension Policies {
    /// Policies built in Swift; each is parsed as policy-language text, so a mistake in a
    /// condition is an error naming the Swift file and line that built it.
    public init(@PolicyListBuilder _ build: () -> [PolicyBuilder]) throws(PolicyDiagnostics) {
        let builders = build()
        var problems: [PolicyDiagnostic] = []
        var files: [(file: String, text: String)] = []
        for builder in builders {
            let where_ = "\(builder.file):\(builder.line)"
            if let problem = builder.problem {
                problems.append(PolicyDiagnostic(location: SourceLocation(file: builder.file, line: builder.line, column: 1), message: problem))
            }
            files.append((where_, builder.text))
        }
        if !problems.isEmpty { throw PolicyDiagnostics(kind: .syntax, problems: problems) }
        try self.init(files: files)
        source = builders.map(\.text).joined(separator: "\n\n") + "\n"
    }
}

extension Entity {
    /// An entity whose attributes are a `Codable` value's stored properties: numbers become
    /// `Long` (fractions are an error), arrays sets, nested values records, `EntityUID`s
    /// entity references and `Date`s datetimes.
    ///
    /// ```swift
    /// struct PhotoAttributes: Encodable { var owner: EntityUID; var tags: [String]; var archived: Bool; var taken: Date }
    /// let photo = try Entity(uid: EntityUID(type: "Photo", id: "42"),
    ///                        attributes: PhotoAttributes(owner: alice, tags: ["beach"], archived: false, taken: .now),
    ///                        parents: [EntityUID(type: "Album", id: "trip")])
    /// ```
    public init(uid: EntityUID, attributes: some Encodable, parents: [EntityUID] = []) throws(PolicyDiagnostics) {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.container(keyedBy: ExtensionKey.self)
            var inner = container.nestedContainer(keyedBy: ExtensionKey.self, forKey: .extn)
            try inner.encode("datetime", forKey: .fn)
            try inner.encode(DateTimeText.format(milliseconds: Int64((date.timeIntervalSince1970 * 1000).rounded(.down))), forKey: .arg)
        }
        let data: Data
        do {
            data = try encoder.encode(attributes)
        } catch {
            throw PolicyDiagnostics(kind: .input, problems: [PolicyDiagnostic(location: SourceLocation(file: "\(uid)", line: 1, column: 1),
                                                                              message: "the attributes cannot be encoded: \(error)")])
        }
        let value: PolicyValue
        do {
            let document = try JSONReader.parse(Array(data))
            value = try JSONValues.policyValue(document, "\(uid)", "\(uid)'s attributes")
        } catch let error as PolicyDiagnostic {
            throw PolicyDiagnostics(kind: .input, problems: [error])
        } catch let error as JSONSyntaxError {
            throw PolicyDiagnostics(kind: .input, problems: [PolicyDiagnostic(location: SourceLocation(file: "\(uid)", line: error.line, column: error.column), message: error.message)])
        } catch {
            throw PolicyDiagnostics(kind: .input, problems: [])
        }
        guard case .record(let fields) = value else {
            throw PolicyDiagnostics(kind: .input, problems: [PolicyDiagnostic(location: SourceLocation(file: "\(uid)", line: 1, column: 1),
                                                                              message: "the attributes must encode as a keyed value (a struct)")])
        }
        self.init(uid: uid, attributes: fields, parents: parents)
    }
}

private enum ExtensionKey: String, CodingKey {
    case extn = "__extn", fn, arg
}

extension EntityUID: Encodable {
    /// Encodes as Cedar's entity reference `{"__entity": {"type": …, "id": …}}`.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: ReferenceKey.self)
        var inner = container.nestedContainer(keyedBy: ReferenceKey.self, forKey: .entity)
        try inner.encode(type, forKey: .type)
        try inner.encode(id, forKey: .id)
    }

    private enum ReferenceKey: String, CodingKey {
        case entity = "__entity", type, id
    }
}
