import FoundationEssentials
import Keysmith

/// A change that would turn a denial into an allow.
public enum Remedy: Sendable, Hashable, CustomStringConvertible {
    /// Granting these scopes to the principal's token.
    case grant([String])
    /// Making the principal a member of these entities (roles, groups, teams).
    case membership([EntityUID])

    /// `grant posts:write` or `member of Role::"admin"`.
    public var description: String {
        switch self {
        case .grant(let scopes): OneLine.escaped("grant " + scopes.joined(separator: " and "))
        case .membership(let entities): OneLine.escaped("member of " + entities.map(\.description).joined(separator: " and "))
        }
    }
}

/// One thing a principal may do.
public struct PermittedAction: Sendable, Hashable {
    /// The action.
    public var action: EntityUID
    /// The resource.
    public var resource: EntityUID
    /// The permits that allow it.
    public var policies: [String]
}

extension Policies {
    /// Scope names the policies test in `context.token…` sets, and entities they test membership of.
    private var candidates: (scopes: [String], entities: [EntityUID]) {
        var scopes: [String] = [], entities: [EntityUID] = []
        // What each expression names (Expression.forEachExpression: the one walk).
        func walk(_ expression: Expression) {
            expression.forEachExpression { expression in
                scopes += expression.testedScopeNames
                guard case .binary(.in, let left, let right) = expression.kind, case .variable(.principal) = left.kind else { return }
                if case .literal(.entity(let uid)) = right.kind { entities.append(uid) }
                if case .set(let items) = right.kind {
                    for item in items { if case .literal(.entity(let uid)) = item.kind { entities.append(uid) } }
                }
            }
        }
        // Scopes named anywhere (a forbid's `unless` names what it needs); memberships that permits name.
        for policy in policies {
            switch policy.effect == .permit ? policy.principal : .any {
            case .within(let uid), .isTypeWithin(_, let uid): entities.append(uid)
            default: break
            }
            policy.conditions.forEach { walk($0.body) }
        }
        var seenScopes: Set<String> = [], seenEntities: Set<EntityUID> = []
        return (scopes.filter { seenScopes.insert($0).inserted }, entities.filter { seenEntities.insert($0).inserted })
    }

    /// What would allow a denied request: the smallest sets of scopes to grant, or of entities
    /// (roles, groups) to make the principal a member of, that turn it into an allow, each
    /// tried alone and then in pairs. Empty when the request is allowed, or when no such change
    /// among those the policies name would allow it (a forbid applies whatever, say). At most
    /// ``remedyBudget`` changes are tried (each is a decision), in that order, so a policy set
    /// naming hundreds of scopes answers in bounded time; what was found by then is returned.
    ///
    /// ```swift
    /// for remedy in policies.remedies(for: request, entities: entities) { print(remedy) }  // grant photos:write
    /// ```
    public func remedies(for request: AuthorizationRequest, entities: EntityStore) -> [Remedy] {
        guard !isAuthorized(request, entities: entities).isAllowed else { return [] }
        let (scopes, groups) = candidates
        let base = request.token?.snapshot() ?? [:]
        let granted = Set(base.filter { $0.value == nil || $0.value?.state == .granted }.keys)
        let scopeCandidates = request.token == nil ? [] : scopes.filter { !granted.contains($0) }
        let principal = entities[request.principal] ?? Entity(uid: request.principal)
        let groupCandidates = groups.filter { !entities.isDescendant(request.principal, of: $0) }
        func allowsWith(scopes extra: [String], groups extraGroups: [EntityUID]) -> Bool {
            var changed = request
            if !extra.isEmpty {
                var snapshot = base
                for scope in extra {
                    snapshot[scope] = ScopeStatus(state: .granted, changedAt: Date(timeIntervalSince1970: 0), reason: "what if")
                }
                changed.token = TokenView(source: .fixedSnapshot(snapshot))
            }
            var store = entities
            if !extraGroups.isEmpty {
                var member = principal
                member.parents += extraGroups
                store = (try? entities.replacing(member)) ?? entities
            }
            return isAuthorized(changed, entities: store).isAllowed
        }
        var remedies: [Remedy] = []
        var tries = 0
        /// Whether the change allows, while the budget lasts (`nil` once it is spent).
        func tryChange(scopes extra: [String], groups extraGroups: [EntityUID]) -> Bool? {
            guard tries < Self.remedyBudget else { return nil }
            tries += 1
            return allowsWith(scopes: extra, groups: extraGroups)
        }
        search: do {
            for scope in scopeCandidates {
                guard let allows = tryChange(scopes: [scope], groups: []) else { break search }
                if allows { remedies.append(.grant([scope])) }
            }
            for group in groupCandidates {
                guard let allows = tryChange(scopes: [], groups: [group]) else { break search }
                if allows { remedies.append(.membership([group])) }
            }
            guard remedies.isEmpty else { break search }
            for (index, first) in scopeCandidates.enumerated() {
                for second in scopeCandidates[(index + 1)...] {
                    guard let allows = tryChange(scopes: [first, second], groups: []) else { break search }
                    if allows { remedies.append(.grant([first, second])) }
                }
            }
            for (index, first) in groupCandidates.enumerated() {
                for second in groupCandidates[(index + 1)...] {
                    guard let allows = tryChange(scopes: [], groups: [first, second]) else { break search }
                    if allows { remedies.append(.membership([first, second])) }
                }
            }
        }
        return remedies
    }

    /// How many changes ``remedies(for:entities:)`` tries at most for one denial: 200 policies
    /// naming two scopes each made 80,000 pairs (22 s for one `policy check --explain`).
    public static let remedyBudget = 1_000

    /// What may this principal do? Every action the schema declares for the principal's type
    /// (or every action entity in `entities` without a schema), on every resource in `entities`
    /// of a type the action applies to, that is allowed, with the permits that allow it.
    ///
    /// ```swift
    /// let token = TokenView.granted(names: ["photos:read"])
    /// for permitted in try policies.permissions(of: bob, token: token, entities: entities, schema: schema) {
    ///     print(permitted.action, permitted.resource, permitted.policies)
    /// }
    /// ```
    ///
    /// - Throws: ``PolicyDiagnostics`` (kind `validation`), deciding nothing, when a schema is
    ///   given and the principal's type is not declared in it, the principal is not one of its
    ///   enumerated ids, or `context` is not what every action considered declares (an
    ///   attribute undeclared, missing or mistyped): as for a request, nothing is decided from
    ///   input that disagrees with the schema.
    public func permissions(of principal: EntityUID, token: TokenView?, context: [String: PolicyValue] = [:],
                            entities: EntityStore, schema: Schema?) throws(PolicyDiagnostics) -> [PermittedAction] {
        var actions: [(EntityUID, Set<String>?)] = []
        if let schema {
            let applying = schema.actions.values.filter { Schema.names($0.principals, holdExactly: principal.type) }
            var problems: [String] = []
            if schema.entityType(named: principal.type) == nil {
                problems.append("the principal's type \(PolicyValue.quoted(principal.type, escapingNonASCII: true)) is not declared in the schema")
            } else if let problem = schema.enumerationProblem(principal) {
                problems.append(problem)
            }
            for action in applying.sorted(by: { $0.uid < $1.uid }) {
                for problem in schema.contextProblems(context, for: action) where !problems.contains(problem) { problems.append(problem) }
            }
            if !problems.isEmpty {
                let location = SourceLocation(file: "<request>", line: 1, column: 1)
                throw PolicyDiagnostics(kind: .validation, problems: problems.map { PolicyDiagnostic(location: location, message: $0) })
            }
            actions = applying.map { ($0.uid, $0.resources) }
        } else {
            actions = entities.entities.keys.filter { PolicyParser.isActionType($0.type) }.map { ($0, nil) }
        }
        var out: [PermittedAction] = []
        let resources = entities.entities.keys.filter { !PolicyParser.isActionType($0.type) }.sorted()
        for (action, types) in actions.sorted(by: { $0.0 < $1.0 }) {
            for resource in resources where types.map({ Schema.names($0, holdExactly: resource.type) }) ?? true {
                let decision = isAuthorized(AuthorizationRequest(principal: principal, action: action, resource: resource, context: context,
                                                                 token: token), entities: entities)
                if decision.isAllowed { out.append(PermittedAction(action: action, resource: resource, policies: decision.determining.map(\.id))) }
            }
        }
        return out
    }
}

extension EntityStore {
    /// The store with one entity replaced (or added).
    func replacing(_ entity: Entity) throws(PolicyDiagnostics) -> EntityStore {
        var list = Array(entities.values.filter { $0.uid != entity.uid })
        list.append(entity)
        return try EntityStore(list)
    }
}
