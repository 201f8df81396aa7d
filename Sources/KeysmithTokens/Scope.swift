import Keysmith

/// One OAuth scope token, validated as RFC 6749 §3.3 says.
///
/// A scope token is one or more printable ASCII characters other than space, `"` and `\`
/// (`%x21 / %x23-5B / %x5D-7E`). Scopes are case-sensitive: `Posts:Write` and `posts:write`
/// are two scopes.
///
/// ```swift
/// let scope = try Scope("posts:write")
/// let scopes = try Scope.parseList("openid profile email")   // a set: order irrelevant
/// ```
public struct Scope: Hashable, Sendable, Comparable, Codable, CustomStringConvertible {
    /// The scope token.
    public let rawValue: String

    /// Validates a scope token.
    ///
    /// - Parameter rawValue: The token.
    /// - Throws: `KeysmithError.Code.invalidScope` naming the first forbidden character and
    ///   its position, or saying that the token is empty.
    public init(_ rawValue: String) throws {
        if let problem = ScopeToken.problem(in: rawValue) { throw KeysmithError(.invalidScope, problem) }
        self.rawValue = rawValue
    }

    /// Parses a scope list into a set: space-delimited as RFC 6749 §3.3 says, or
    /// comma-delimited as GitHub, Slack and Facebook send it (`"repo,gist"`), or both.
    ///
    /// RFC 6749 allows a comma inside a scope token, but no provider names a scope with one
    /// while several separate scopes with commas, so a list is split at commas too: a scope
    /// whose name holds a comma can be made with ``init(_:)`` but not given in a list.
    ///
    /// ```swift
    /// try Scope.parseList("repo,gist user")   // [repo, gist, user]
    /// ```
    ///
    /// - Parameter list: Scope tokens separated by spaces and/or commas (repeats ignored).
    /// - Returns: The set of scopes; empty for an empty list.
    /// - Throws: `KeysmithError.Code.invalidScope` for the first invalid token.
    public static func parseList(_ list: String) throws -> Set<Scope> {
        Set(try list.split(whereSeparator: { $0 == " " || $0 == "," }).map { try Scope(String($0)) })
    }

    /// Formats scopes as a space-delimited list, sorted for stable output.
    public static func formatList<S: Sequence>(_ scopes: S) -> String where S.Element == Scope {
        scopes.sorted().map(\.rawValue).joined(separator: " ")
    }

    /// The scope token.
    public var description: String { rawValue }

    /// Orders scopes by their tokens, for stable output.
    public static func < (lhs: Scope, rhs: Scope) -> Bool { lhs.rawValue < rhs.rawValue }

    /// Decodes a scope from a string, validating it.
    public init(from decoder: any Decoder) throws {
        try self.init(try decoder.singleValueContainer().decode(String.self))
    }

    /// Encodes the scope as its token string.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
}

/// A permission, in the permission manager's terms, is a scope.
public typealias Permission = Scope
