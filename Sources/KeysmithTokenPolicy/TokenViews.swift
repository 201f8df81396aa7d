public import FoundationEssentials
public import KeysmithPolicy
public import KeysmithTokens

/// A Keysmith token, or a permission manager, as the policy engine reads it: the adapter
/// between KeysmithTokens (which keeps tokens and knows OAuth) and KeysmithPolicy (which
/// decides on scope names and knows neither).
///
/// ```swift
/// import KeysmithTokenPolicy
///
/// let request = AuthorizationRequest(principal: alice, action: post, resource: group,
///                                    token: TokenView(token: stored, at: .now))
/// let watched = TokenView(watching: manager)     // a revocation changes the very next decision
/// ```
extension TokenView {
    /// A stored token's scopes at `date`, with when and why each entered its state: granted
    /// scopes of an expired token are `expired` (from its expiry), and every granted scope of a
    /// revoked token is `revoked` (from its revocation) (`OAuthToken.decisionStatuses(at:)`).
    public init(token: OAuthToken, at date: Date) {
        self.init(scopes: token.decisionStatuses(at: date))
    }

    /// A permission manager, read at every decision: a revocation applied to it (by a
    /// `WatchedPermissions` fed from another machine, say) changes the very next decision, and a
    /// manager that fails closed holds no scope while it is not current. Only granted scopes
    /// are known.
    public init(watching manager: PermissionManager) {
        self = .live(grantedNames: { Set(manager.permissions.map(\.rawValue)) })
    }

    /// A fixed set of granted scopes, with no history.
    public init(granted scopes: Set<Scope>) {
        self = .granted(names: Set(scopes.map(\.rawValue)))
    }
}
