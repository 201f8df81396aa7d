public import FoundationEssentials

// The vocabulary a token's scopes are read in, shared by the token module (which keeps them)
// and the policy engine (which decides on them) without either depending on the other.

/// The state a scope is in. Every scope a token has heard of is in exactly one.
public enum ScopeState: String, Sendable, Hashable, Codable, CaseIterable {
    /// Granted and usable while the token is active.
    case granted
    /// Requested but not granted by the authorization server (or narrowed away by a refresh).
    case declined
    /// Granted once, but the token expired.
    case expired
    /// Revoked: one scope, or every scope at log-out.
    case revoked
}

/// A scope's state, with when and why it last changed.
public struct ScopeStatus: Sendable, Hashable, Codable {
    /// The state.
    public var state: ScopeState
    /// When it last changed.
    public var changedAt: Date
    /// Why it last changed, such as `granted by token response` or `revoked: user request`.
    public var reason: String

    /// Creates a status.
    public init(state: ScopeState, changedAt: Date, reason: String) {
        self.state = state
        self.changedAt = changedAt
        self.reason = reason
    }
}

/// A scope token's spelling as RFC 6749 §3.3 allows it: one or more printable ASCII characters
/// other than space, `"` and `\` (`%x21 / %x23-5B / %x5D-7E`). `Scope` (module KeysmithTokens)
/// and the policy engine's token views check names here.
package enum ScopeToken {
    /// Why `name` is not a scope token, or `nil` when it is one.
    package static func problem(in name: String) -> String? {
        guard !name.isEmpty else { return "a scope token cannot be empty" }
        for (offset, scalar) in name.unicodeScalars.enumerated() {
            let value = scalar.value
            guard value == 0x21 || (0x23...0x5B).contains(value) || (0x5D...0x7E).contains(value) else {
                return "the scope \(printable(name)) has a forbidden character \(describe(scalar)) at position \(offset + 1); "
                    + "RFC 6749 §3.3 allows printable ASCII except space, '\"' and '\\'"
            }
        }
        return nil
    }

    private static func describe(_ scalar: Unicode.Scalar) -> String {
        switch scalar {
        case " ": "' ' (space)"
        case "\"": "'\"' (double quote)"
        case "\\": "'\\' (backslash)"
        default:
            scalar.value < 0x20 || scalar.value == 0x7F || scalar.value > 0x7E
                ? "U+\(String(scalar.value, radix: 16, uppercase: true))" : "'\(scalar)'"
        }
    }

    private static func printable(_ text: String) -> String {
        "\"" + text.unicodeScalars.map { $0.value < 0x20 || $0.value == 0x7F ? "\\u{\(String($0.value, radix: 16))}" : String($0) }.joined() + "\""
    }
}
