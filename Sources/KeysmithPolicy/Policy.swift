import Keysmith
public import KeysmithTokens

/// Whether a policy allows or forbids.
public enum Effect: String, Sendable, Hashable {
    /// Allows, unless a forbid applies.
    case permit
    /// Denies, whatever permits say.
    case forbid
}

/// A condition a policy needs to hold before it applies.
public enum Condition: Sendable {
    /// The resource's attribute equals a value (a missing attribute does not).
    case resourceAttribute(String, equals: AttributeValue)
    /// The principal's attribute equals a value (a missing attribute does not).
    case principalAttribute(String, equals: AttributeValue)
    /// Any check in Swift; if it throws, the decision is a denial that reports the error.
    case custom(@Sendable (Request) throws -> Bool)
}

/// A rule: these roles may (or may not) do these actions, when conditions hold.
///
/// Built Koosa-style from a role:
///
/// ```swift
/// Role("member").shouldBeAbleTo(post).named("member-post")
/// Role.anyone.shouldBeAbleTo(browse).when(.resourceAttribute("public", equals: .bool(true)))
/// Role.authenticated.shouldNotBeAbleTo(post).unlessGranted([postsWrite]).named("scope-post")
/// Role("editor").shouldBeAbleTo(publish).requiring([publishScope]).when { request in try isBusinessHours() }
/// ```
///
/// A policy always checks its roles and actions: an unconditioned policy allows exactly its
/// actions for exactly its roles (Koosa's unconditioned rule allowed every action of the role).
public struct Policy: Sendable {
    /// The policy's name, reported by decisions that it decides.
    public var name: String
    /// Permit or forbid.
    public var effect: Effect
    /// The roles it applies to.
    public var roles: [Role]
    /// The actions it applies to.
    public var actions: [Action]
    /// Conditions that must all hold.
    public var conditions: [Condition]
    /// For a permit: scopes the principal's token must all hold. For a forbid: the forbid
    /// applies when the token lacks any of them (``unlessGranted(_:)``). Anonymous principals
    /// (no token) are never held to scopes: they only ever hold ``Role/anyone``.
    public var scopes: Set<Scope>
    /// Only resources of this type, when set.
    public var resourceType: String?
    /// The source line, for policies loaded from a file.
    public var line: Int?

    /// Creates a policy; the builder methods on ``Role`` read better.
    public init(name: String, effect: Effect, roles: [Role], actions: [Action], conditions: [Condition] = [],
                scopes: Set<Scope> = [], resourceType: String? = nil) {
        self.name = name
        self.effect = effect
        self.roles = roles
        self.actions = actions
        self.conditions = conditions
        self.scopes = scopes
        self.resourceType = resourceType
    }

    /// The policy with a name (decisions report it).
    public func named(_ name: String) -> Policy { with { $0.name = name } }
    /// The policy, applying only when `condition` holds too.
    public func when(_ condition: Condition) -> Policy { with { $0.conditions.append(condition) } }
    /// The policy, applying only when `check` returns true; a throwing check denies.
    public func when(_ check: @escaping @Sendable (Request) throws -> Bool) -> Policy { when(.custom(check)) }
    /// A permit that needs the principal's token to hold every one of `scopes`.
    public func requiring(_ scopes: Set<Scope>) -> Policy { with { $0.scopes.formUnion(scopes) } }
    /// A forbid that applies when the principal's token lacks any of `scopes`.
    public func unlessGranted(_ scopes: Set<Scope>) -> Policy { with { $0.scopes.formUnion(scopes) } }
    /// The policy, for resources of one type only.
    public func on(_ resourceType: String) -> Policy { with { $0.resourceType = resourceType } }

    private func with(_ change: (inout Policy) -> Void) -> Policy {
        var copy = self
        change(&copy)
        return copy
    }
}

extension Role {
    /// A permit: this role may do these actions (name it with ``Policy/named(_:)``).
    public func shouldBeAbleTo(_ actions: Action...) -> Policy {
        Policy(name: "\(name)-can-\(actions.map(\.name).joined(separator: "-"))", effect: .permit, roles: [self], actions: actions)
    }

    /// A forbid: this role may not do these actions; forbids beat every permit.
    public func shouldNotBeAbleTo(_ actions: Action...) -> Policy {
        Policy(name: "\(name)-cannot-\(actions.map(\.name).joined(separator: "-"))", effect: .forbid, roles: [self], actions: actions)
    }
}

/// A role and the roles it inherits: holding `admin` that inherits `member` grants what
/// `member` grants too.
public struct RoleDefinition: Sendable {
    /// The role.
    public var role: Role
    /// The roles it inherits.
    public var inherits: [Role]

    /// Declares a role.
    public init(_ role: Role, inherits: [Role] = []) {
        self.role = role
        self.inherits = inherits
    }
}
