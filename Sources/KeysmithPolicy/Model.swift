public import Keysmith
public import KeysmithTokens

/// An attribute value of a principal or a resource.
public enum AttributeValue: Hashable, Sendable, CustomStringConvertible {
    /// A flag, such as a group's `public`.
    case bool(Bool)
    /// A text value.
    case string(String)
    /// A whole number.
    case int(Int)

    /// The value as it would be written in a policy file: `true`, `"text"`, `42`.
    public var description: String {
        switch self {
        case .bool(let value): "\(value)"
        case .string(let value): "\"\(value)\""
        case .int(let value): "\(value)"
        }
    }

    var typeName: String {
        switch self {
        case .bool: "bool"
        case .string: "string"
        case .int: "int"
        }
    }
}

/// What an action is done to: its type, its id and its attributes.
///
/// ```swift
/// let group = Resource(type: "group", id: "g1", attributes: ["public": .bool(true)])
/// ```
public struct Resource: Hashable, Sendable {
    /// The resource type, such as `group`.
    public var type: String
    /// The resource's id; resource-scoped roles are held on it.
    public var id: String
    /// Attributes that conditions read.
    public var attributes: [String: AttributeValue]

    /// Creates a resource.
    public init(type: String, id: String, attributes: [String: AttributeValue] = [:]) {
        self.type = type
        self.id = id
        self.attributes = attributes
    }
}

/// Where a principal's scopes come from.
public enum ScopeSource: Sendable {
    /// A fixed set, read once (from a token at some instant, say).
    case fixed(Set<Scope>)
    /// A permission manager, read at every decision: a revocation applied to it changes the
    /// very next decision.
    case live(PermissionManager)
    /// No token at all: an anonymous principal.
    case none

    var current: Set<Scope> {
        switch self {
        case .fixed(let scopes): scopes
        case .live(let manager): manager.permissions
        case .none: []
        }
    }
}

/// Who acts: their roles (global and per resource), their token's scopes and their attributes.
///
/// ```swift
/// let bob = Principal(id: "bob", roles: [], resourceRoles: ["g1": [Role("admin")], "g2": [Role("member")]],
///                     scopes: .fixed(try Scope.parseList("groups:read posts:write")))
/// let visitor = Principal.anonymous(id: "visitor")
/// ```
public struct Principal: Sendable {
    /// The principal's id.
    public var id: String
    /// Whether the principal acts without a token (signed out).
    public var isAnonymous: Bool
    /// Roles held everywhere.
    public var roles: Set<Role>
    /// Roles held on one resource, by resource id.
    public var resourceRoles: [String: Set<Role>]
    /// The token's scopes.
    public var scopes: ScopeSource
    /// Attributes that conditions read.
    public var attributes: [String: AttributeValue]

    /// A signed-in principal.
    public init(
        id: String, roles: Set<Role> = [], resourceRoles: [String: Set<Role>] = [:], scopes: ScopeSource,
        attributes: [String: AttributeValue] = [:]
    ) {
        self.id = id
        self.isAnonymous = false
        self.roles = roles
        self.resourceRoles = resourceRoles
        self.scopes = scopes
        self.attributes = attributes
    }

    /// A principal with no token: it holds only the role ``Role/anyone``.
    public static func anonymous(id: String = "anonymous", attributes: [String: AttributeValue] = [:]) -> Principal {
        var principal = Principal(id: id, scopes: .none, attributes: attributes)
        principal.isAnonymous = true
        return principal
    }

    /// A principal whose scopes are a token's granted scopes at `date`.
    public init(id: String, roles: Set<Role> = [], resourceRoles: [String: Set<Role>] = [:], token: OAuthToken, at date: Date,
                attributes: [String: AttributeValue] = [:]) {
        self.init(id: id, roles: roles, resourceRoles: resourceRoles, scopes: .fixed(token.grantedScopes(at: date)),
                  attributes: attributes)
    }
}

/// One question for the engine: may this principal do this action to this resource?
public struct Request: Sendable {
    /// Who.
    public var principal: Principal
    /// What.
    public var action: Action
    /// To what.
    public var resource: Resource

    /// Creates a request.
    public init(principal: Principal, action: Action, resource: Resource) {
        self.principal = principal
        self.action = action
        self.resource = resource
    }
}
