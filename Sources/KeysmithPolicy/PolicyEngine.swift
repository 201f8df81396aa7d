public import Keysmith
import KeysmithTokens
import Synchronization

/// A problem found while building an engine or loading a policy file.
public struct PolicyProblem: Sendable, Hashable, CustomStringConvertible {
    /// The line in the policy file, when there is one.
    public var line: Int?
    /// What is wrong.
    public var message: String

    /// `line N: message`, or the message alone.
    public var description: String { line.map { "line \($0): \(message)" } ?? message }
}

/// The engine could not be built: every problem found, each with its line when from a file.
public struct PolicyValidationError: Error, Sendable, CustomStringConvertible {
    /// Every problem, in order.
    public var problems: [PolicyProblem]

    /// Every problem, one per line.
    public var description: String { problems.map(\.description).joined(separator: "\n") }

    /// The problems as a Keysmith error (code ``KeysmithError/Code/malformedData``).
    public var keysmithError: KeysmithError {
        KeysmithError(.malformedData, "the policy is invalid: " + problems.map(\.description).joined(separator: "; "))
    }
}

/// The answer to a request: allowed or not, and which policies decided it.
///
/// ```swift
/// let decision = engine.decide(request)
/// if decision.isAllowed { … }
/// print(decision.explanation)   // "allow: member-browse-post"
/// ```
public struct Decision: Sendable, CustomStringConvertible {
    /// Whether the request is allowed.
    public let isAllowed: Bool
    /// How it was decided.
    public let basis: Basis
    private let deciding: PolicySet
    private let names: PolicyNames
    /// Conditions that threw, by policy name; any makes the decision a denial.
    public let errors: [(policy: String, error: String)]

    /// How a decision was reached.
    public enum Basis: String, Sendable {
        /// At least one permit applied and no forbid.
        case permitted
        /// A forbid applied; forbids beat permits.
        case forbidden
        /// Nothing applied: default deny.
        case noPolicyApplied
        /// A condition threw: denied, with the error reported.
        case conditionFailed
    }

    init(isAllowed: Bool, basis: Basis, deciding: PolicySet, names: PolicyNames, errors: [(policy: String, error: String)] = []) {
        self.isAllowed = isAllowed
        self.basis = basis
        self.deciding = deciding
        self.names = names
        self.errors = errors
    }

    /// The names of the policies that decided: the permits that applied, or the forbids that
    /// applied; empty for a default deny.
    public var policies: [String] { deciding.indices.map { names.names[$0] } }

    /// One line: `allow: a, b`, `deny: forbidden by c`, `deny: no policy applies`, or
    /// `deny: condition of p failed: …`.
    public var explanation: String {
        switch basis {
        case .permitted: "allow: " + policies.joined(separator: ", ")
        case .forbidden: "deny: forbidden by " + policies.joined(separator: ", ")
        case .noPolicyApplied: "deny: no policy applies (default deny)"
        case .conditionFailed: "deny: " + errors.map { "condition of \($0.policy) failed: \($0.error)" }.joined(separator: "; ")
        }
    }

    /// The ``explanation``.
    public var description: String { explanation }
}

/// Policy names, shared by every decision of an engine.
final class PolicyNames: Sendable {
    let names: [String]
    init(_ names: [String]) { self.names = names }
}

/// A set of policy indices: a bit set for up to 64 policies, a list beyond.
enum PolicySet: Sendable {
    case bits(UInt64)
    case list([Int32])

    static let empty = PolicySet.bits(0)

    var isEmpty: Bool {
        switch self {
        case .bits(let bits): bits == 0
        case .list(let list): list.isEmpty
        }
    }

    var indices: [Int] {
        switch self {
        case .bits(var bits):
            var result: [Int] = []
            while bits != 0 {
                result.append(bits.trailingZeroBitCount)
                bits &= bits - 1
            }
            return result
        case .list(let list): return list.map(Int.init).sorted()
        }
    }

    mutating func insert(_ index: Int32) {
        switch self {
        case .bits(let bits) where index < 64: self = .bits(bits | (1 << UInt64(index)))
        case .bits(let bits):
            self = .list(PolicySet.bits(bits).indices.map(Int32.init) + [index])
        case .list(var list):
            if !list.contains(index) { list.append(index) }
            self = .list(list)
        }
    }
}

/// A principal whose roles and scopes are resolved against one engine: decide with it when the
/// same principal asks many times.
public struct PreparedPrincipal: Sendable {
    let engineID: Int
    /// The principal.
    public let principal: Principal
    let globalMask: UInt64
    let resourceMasks: [String: UInt64]
    /// The scopes the engine's policies mention, as a bit mask; `nil` for live scopes, which
    /// are read at each decision.
    let scopeMask: UInt64?
}

/// A policy reduced to what a decision reads, shared by reference so a decision copies nothing.
final class CompiledPolicy: Sendable {
    let name: String
    let effect: Effect
    let resourceType: String?
    let scopeMask: UInt64
    let conditions: [Condition]

    init(_ policy: Policy, scopeMask: UInt64) {
        name = policy.name
        effect = policy.effect
        resourceType = policy.resourceType
        self.scopeMask = scopeMask
        conditions = policy.conditions
    }
}

/// The policy engine: roles with a hierarchy, actions, and policies, built once and immutable.
///
/// - Default deny: nothing applies, nothing is allowed.
/// - A forbid that applies beats every permit.
/// - A condition that throws denies, and the decision reports the error.
/// - Policies are indexed by role and action; a decision looks only at the policies of the
///   principal's roles for that action, never at the whole list.
/// - Roles can be held on one resource (admin of group 1, member of group 2), and inherit: an
///   admin of a group is a member of it.
///
/// ```swift
/// let engine = try PolicyEngine(
///     roles: [RoleDefinition(.anyone), RoleDefinition(.authenticated), RoleDefinition(member),
///             RoleDefinition(admin, inherits: [member])],
///     actions: [browse, post],
///     policies: [member.shouldBeAbleTo(browse, post).named("member-browse-post")])
/// engine.decide(Request(principal: bob, action: post, resource: group)).isAllowed
/// ```
public struct PolicyEngine: Sendable {
    private static let nextID = Atomic<Int>(1)

    let id: Int
    let policies: [Policy]
    let names: PolicyNames
    let roleDefinitions: [RoleDefinition]
    let actionList: [Action]
    /// Global role id → local role index (−1 when the engine does not know the role).
    private let localRole: [Int16]
    /// Global action id → local action index.
    private let localAction: [Int16]
    /// Local role → the mask of itself and every role it inherits, transitively.
    private let closure: [UInt64]
    private let actionCount: Int
    /// (local role × actions + local action) → policy indices, forbids first, as one flat list
    /// with offsets: `slots[i]..<slots[i + 1]` indexes `candidates`.
    private let slots: [Int32]
    private let candidates: [Int32]
    private let compiled: [CompiledPolicy]
    /// Scope name id → bit in scope masks (the scopes the policies mention; at most 64).
    private let scopeBit: [String: UInt64]
    private let anyoneMask: UInt64
    private let authenticatedMask: UInt64

    /// Builds and validates an engine.
    ///
    /// - Parameters:
    ///   - roles: Every role and what it inherits. ``Role/anyone`` and ``Role/authenticated``
    ///     are added when missing.
    ///   - actions: Every action.
    ///   - policies: The policies.
    /// - Throws: ``PolicyValidationError`` listing every problem: unknown roles or actions,
    ///   duplicate names, inheritance cycles, more than 64 roles.
    public init(roles: [RoleDefinition], actions: [Action], policies: [Policy]) throws(PolicyValidationError) {
        var problems: [PolicyProblem] = []
        var definitions = roles
        for builtIn in [Role.anyone, Role.authenticated] where !definitions.contains(where: { $0.role == builtIn }) {
            definitions.append(RoleDefinition(builtIn))
        }
        var localOf: [Role: Int] = [:]
        for definition in definitions {
            if localOf[definition.role] != nil {
                problems.append(PolicyProblem(message: "the role \"\(definition.role)\" is declared twice"))
            } else {
                localOf[definition.role] = localOf.count
            }
        }
        if localOf.count > 64 { problems.append(PolicyProblem(message: "an engine holds at most 64 roles; there are \(localOf.count)")) }
        var actionOf: [Action: Int] = [:]
        for action in actions {
            if actionOf[action] != nil { problems.append(PolicyProblem(message: "the action \"\(action)\" is declared twice")) }
            actionOf[action] = actionOf[action] ?? actionOf.count
        }
        // Inheritance: known parents, no cycles.
        var parents = [[Int]](repeating: [], count: localOf.count)
        for definition in definitions {
            guard let child = localOf[definition.role] else { continue }
            for parent in definition.inherits {
                if let index = localOf[parent] {
                    parents[child].append(index)
                } else {
                    problems.append(PolicyProblem(message: "the role \"\(definition.role)\" inherits the unknown role \"\(parent)\""))
                }
            }
        }
        var closure = [UInt64](repeating: 0, count: localOf.count)
        for role in 0..<min(localOf.count, 64) {
            var mask: UInt64 = 0
            var stack = [role]
            while let next = stack.popLast() {
                let bit = UInt64(1) << UInt64(next)
                if mask & bit != 0 { continue }
                mask |= bit
                stack += parents[next]
            }
            closure[role] = mask
            for parent in parents[role] where closure.indices.contains(parent) {
                // A cycle: the parent reaches back to this role.
                var reach: UInt64 = 0
                var pending = [parent]
                while let next = pending.popLast() {
                    let bit = UInt64(1) << UInt64(next)
                    if reach & bit != 0 { continue }
                    reach |= bit
                    pending += parents[next]
                }
                if reach & (UInt64(1) << UInt64(role)) != 0 {
                    let name = definitions.first { localOf[$0.role] == role }?.role.name ?? "?"
                    problems.append(PolicyProblem(message: "the role \"\(name)\" inherits itself through a cycle"))
                }
            }
        }
        var seenNames: Set<String> = []
        for policy in policies {
            if !seenNames.insert(policy.name).inserted {
                problems.append(PolicyProblem(line: policy.line, message: "the policy name \"\(policy.name)\" is used twice"))
            }
            if policy.roles.isEmpty { problems.append(PolicyProblem(line: policy.line, message: "the policy \"\(policy.name)\" names no role")) }
            if policy.actions.isEmpty { problems.append(PolicyProblem(line: policy.line, message: "the policy \"\(policy.name)\" names no action")) }
            for role in policy.roles where localOf[role] == nil {
                problems.append(PolicyProblem(line: policy.line, message: "the policy \"\(policy.name)\" names the unknown role \"\(role)\""))
            }
            for action in policy.actions where actionOf[action] == nil {
                problems.append(PolicyProblem(line: policy.line, message: "the policy \"\(policy.name)\" names the unknown action \"\(action)\""))
            }
        }
        guard problems.isEmpty else { throw PolicyValidationError(problems: problems) }

        self.id = Self.nextID.wrappingAdd(1, ordering: .relaxed).oldValue
        self.policies = policies
        self.names = PolicyNames(policies.map(\.name))
        self.roleDefinitions = definitions
        self.actionList = actions
        self.closure = closure
        self.actionCount = max(actionOf.count, 1)
        var localRole = [Int16](repeating: -1, count: (localOf.keys.map(\.id).max() ?? 0) + 1)
        for (role, index) in localOf { localRole[role.id] = Int16(index) }
        self.localRole = localRole
        var localAction = [Int16](repeating: -1, count: (actionOf.keys.map(\.id).max() ?? 0) + 1)
        for (action, index) in actionOf { localAction[action.id] = Int16(index) }
        self.localAction = localAction
        var bySlot = [[Int32]](repeating: [], count: localOf.count * max(actionOf.count, 1))
        for (index, policy) in policies.enumerated() {
            for role in Set(policy.roles) {
                for action in Set(policy.actions) {
                    bySlot[localOf[role]! * max(actionOf.count, 1) + actionOf[action]!].append(Int32(index))
                }
            }
        }
        var slots: [Int32] = [0]
        var candidates: [Int32] = []
        for list in bySlot {
            candidates += list.filter { policies[Int($0)].effect == .forbid } + list.filter { policies[Int($0)].effect == .permit }
            slots.append(Int32(candidates.count))
        }
        self.slots = slots
        self.candidates = candidates
        var scopeBit: [String: UInt64] = [:]
        for policy in policies {
            for scope in policy.scopes.sorted() where scopeBit[scope.rawValue] == nil && scopeBit.count < 64 {
                scopeBit[scope.rawValue] = 1 << UInt64(scopeBit.count)
            }
        }
        if Set(policies.flatMap(\.scopes)).count > 64 {
            throw PolicyValidationError(problems: [PolicyProblem(message: "an engine's policies mention at most 64 distinct scopes")])
        }
        self.scopeBit = scopeBit
        self.compiled = policies.map { policy in
            CompiledPolicy(policy, scopeMask: policy.scopes.reduce(0) { $0 | (scopeBit[$1.rawValue] ?? 0) })
        }
        self.anyoneMask = closure[localOf[.anyone]!]
        self.authenticatedMask = closure[localOf[.authenticated]!]
    }

    /// Every policy, in order.
    public var allPolicies: [Policy] { policies }

    // MARK: Deciding

    private func mask(of roles: Set<Role>) -> UInt64 {
        var mask: UInt64 = 0
        for role in roles where role.id < localRole.count {
            let local = Int(localRole[role.id])
            if local >= 0 { mask |= closure[local] }
        }
        return mask
    }

    private func scopeMask(_ scopes: Set<Scope>) -> UInt64 {
        scopes.reduce(0) { $0 | (scopeBit[$1.rawValue] ?? 0) }
    }

    /// Resolves a principal's roles and fixed scopes against this engine, for many decisions.
    public func prepare(_ principal: Principal) -> PreparedPrincipal {
        let fixed: UInt64?
        switch principal.scopes {
        case .fixed(let scopes): fixed = scopeMask(scopes)
        case .none: fixed = 0
        case .live: fixed = nil
        }
        return PreparedPrincipal(
            engineID: id, principal: principal, globalMask: principal.isAnonymous ? 0 : mask(of: principal.roles),
            resourceMasks: principal.isAnonymous ? [:] : principal.resourceRoles.mapValues { mask(of: $0) }, scopeMask: fixed)
    }

    /// Decides a request.
    public func decide(_ request: Request) -> Decision {
        decide(prepare(request.principal), request.action, request.resource)
    }

    /// Decides for a prepared principal: the fast path for many decisions.
    public func decide(_ prepared: PreparedPrincipal, _ action: Action, _ resource: Resource) -> Decision {
        guard prepared.engineID == id else { return decide(prepare(prepared.principal), action, resource) }
        guard action.id < localAction.count, localAction[action.id] >= 0 else {
            return Decision(isAllowed: false, basis: .noPolicyApplied, deciding: .empty, names: names)
        }
        let actionIndex = Int(localAction[action.id])
        let anonymous = prepared.principal.isAnonymous
        var roles = anyoneMask
        if !anonymous {
            roles |= authenticatedMask | prepared.globalMask
            if let onResource = prepared.resourceMasks[resource.id] { roles |= onResource }
        }
        let scopes = prepared.scopeMask ?? scopeMask(prepared.principal.scopes.current)

        var errors: [(policy: String, error: String)] = []
        var forbidden = PolicySet.empty
        var permitted = PolicySet.empty
        var bits = roles
        while bits != 0 {
            let role = bits.trailingZeroBitCount
            bits &= bits - 1
            let slot = role * actionCount + actionIndex
            for position in Int(slots[slot])..<Int(slots[slot + 1]) {
                let index = candidates[position]
                let policy = compiled[Int(index)]
                switch applies(policy, anonymous: anonymous, scopes: scopes, prepared.principal, action, resource) {
                case .yes:
                    if policy.effect == .forbid { forbidden.insert(index) } else { permitted.insert(index) }
                case .no: break
                case .failed(let error): errors.append((policy.name, error))
                }
            }
        }
        if !errors.isEmpty {
            return Decision(isAllowed: false, basis: .conditionFailed, deciding: .empty, names: names, errors: errors)
        }
        if !forbidden.isEmpty { return Decision(isAllowed: false, basis: .forbidden, deciding: forbidden, names: names) }
        if !permitted.isEmpty { return Decision(isAllowed: true, basis: .permitted, deciding: permitted, names: names) }
        return Decision(isAllowed: false, basis: .noPolicyApplied, deciding: .empty, names: names)
    }

    private enum Applies {
        case yes, no
        case failed(String)
    }

    private func applies(
        _ policy: CompiledPolicy, anonymous: Bool, scopes: UInt64, _ principal: borrowing Principal, _ action: Action,
        _ resource: borrowing Resource
    ) -> Applies {
        if let type = policy.resourceType, type != resource.type { return .no }
        if policy.scopeMask != 0 {
            let holdsAll = scopes & policy.scopeMask == policy.scopeMask
            switch policy.effect {
            case .permit: if !holdsAll { return .no }
            case .forbid:
                // "Forbid unless granted": applies to principals with a token that lacks a scope.
                if holdsAll || anonymous { return .no }
            }
        }
        for condition in policy.conditions {
            switch condition {
            case .resourceAttribute(let name, let value):
                if resource.attributes[name] != value { return .no }
            case .principalAttribute(let name, let value):
                if principal.attributes[name] != value { return .no }
            case .custom(let check):
                do {
                    if try !check(Request(principal: copy principal, action: action, resource: copy resource)) { return .no }
                } catch {
                    return .failed("\(error)")
                }
            }
        }
        return .yes
    }
}

extension Principal {
    /// Whether the principal may do an action to a resource under an engine: Koosa's `can`.
    ///
    /// ```swift
    /// if bob.can(post, on: group, under: engine) { … }
    /// ```
    public func can(_ action: Action, on resource: Resource, under engine: PolicyEngine) -> Bool {
        engine.decide(Request(principal: self, action: action, resource: resource)).isAllowed
    }
}

extension PreparedPrincipal {
    /// Whether the prepared principal may do an action to a resource under its engine.
    public func can(_ action: Action, on resource: Resource, under engine: PolicyEngine) -> Bool {
        engine.decide(self, action, resource).isAllowed
    }
}
