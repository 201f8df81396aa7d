public import FoundationEssentials
import Keysmith

/// Which tokens a listing shows (what `keysmith token list` selects with): where they are kept
/// and whom they belong to (``TokenFilter``), a scope and its state, and how soon they expire.
///
/// ```swift
/// // Active tokens of client "web" that still hold posts:write and expire within a day.
/// let selection = TokenSelection(filter: TokenFilter(clientID: "web"), scope: try Scope("posts:write"), state: .granted,
///                                expiringWithin: 86_400)
/// for (reference, token) in try keeper.tokens(selectedBy: selection) { print(reference, token.expiresAt!) }
/// ```
public struct TokenSelection: Sendable, Hashable {
    /// Where the tokens are kept and whom they belong to.
    public var filter: TokenFilter
    /// Only tokens that hold this scope, in any state (or in ``state``).
    public var scope: Scope?
    /// With ``scope``, only tokens holding it in this state; alone, tokens with any scope in it.
    /// States are as of the moment asked (a granted scope of an expired token is expired).
    public var state: ScopeState?
    /// Only active tokens that expire within this many seconds.
    public var expiringWithin: TimeInterval?

    /// A selection; every argument left out selects everything.
    public init(filter: TokenFilter = TokenFilter(), scope: Scope? = nil, state: ScopeState? = nil, expiringWithin: TimeInterval? = nil) {
        self.filter = filter
        self.scope = scope
        self.state = state
        self.expiringWithin = expiringWithin
    }

    /// Whether `token` is selected at `date` (the filter's service is the caller's to check:
    /// it is where the token is kept, not part of the token).
    public func matches(_ token: OAuthToken, at date: Date) -> Bool {
        if let client = filter.clientID, token.clientID != client { return false }
        if let subject = filter.subject, token.subject != subject { return false }
        let statuses = token.statuses(at: date)
        if let scope {
            guard let status = statuses[scope] else { return false }
            if let state, status.state != state { return false }
        } else if let state, !statuses.values.contains(where: { $0.state == state }) {
            return false
        }
        if let expiringWithin {
            guard token.isActive(at: date), let expiry = token.expiresAt, expiry <= date.addingTimeInterval(expiringWithin) else { return false }
        }
        return true
    }
}

extension TokenKeeper {
    /// The stored tokens a selection selects at `date` (the keeper's `now` if omitted; pass the
    /// instant the caller will show states for), sorted by service then account (one pass over
    /// the store, as ``tokens(matching:)``).
    ///
    /// - Throws: As ``tokens(matching:)``.
    public func tokens(selectedBy selection: TokenSelection, at date: Date? = nil) throws -> [(reference: TokenReference, token: OAuthToken)] {
        let date = date ?? now
        return try tokens(matching: selection.filter).filter { selection.matches($0.token, at: date) }
    }
}

extension OAuthToken {
    /// Where a token stands as a whole.
    public enum Standing: String, Sendable, Hashable {
        /// Neither expired nor logged out.
        case active
        /// Past its expiry (a refresh may bring it back).
        case expired
        /// Logged out or revoked whole (``OAuthToken/revokedAt`` is set): nothing brings it back.
        case loggedOut = "logged-out"
    }

    /// Where the token stands at `date`: logged out (whatever its expiry), else expired, else
    /// active.
    public func standing(at date: Date) -> Standing {
        if revokedAt != nil { return .loggedOut }
        return isExpired(at: date) ? .expired : .active
    }
}

/// What `keysmith token list --json` writes for one token (and `token scopes --json` for the one
/// asked for): where it is kept, its metadata and every scope's state, with snake_case names and
/// ISO 8601 UTC times; never the access or refresh token, nor the values of the response's
/// extra fields (only their names).
///
/// ```swift
/// let summaries = try keeper.tokens(selectedBy: TokenSelection()).map { TokenSummary($0.reference, $0.token, at: keeper.now) }
/// let json = try JSONEncoder().encode(summaries)
/// ```
public struct TokenSummary: Sendable, Hashable, Encodable {
    /// One scope's state, when it changed, and why.
    public struct ScopeEntry: Sendable, Hashable, Encodable {
        /// The scope.
        public var scope: String
        /// `granted`, `declined`, `expired` or `revoked`.
        public var state: String
        /// When it took this state (ISO 8601).
        public var changedAt: String
        /// Why.
        public var reason: String
        enum CodingKeys: String, CodingKey {
            case scope, state, reason
            case changedAt = "changed_at"
        }
    }

    /// The service it is kept under.
    public var service: String
    /// The account it is kept under.
    public var account: String
    /// Whether it is active (``OAuthToken/isActive(at:)``).
    public var active: Bool
    /// The token type (`Bearer`).
    public var tokenType: String
    /// The client it was issued to.
    public var clientID: String?
    /// The subject it acts for.
    public var subject: String?
    /// The issuer.
    public var issuer: String?
    /// When it was issued.
    public var issuedAt: String
    /// When it expires.
    public var expiresAt: String?
    /// When it was logged out.
    public var revokedAt: String?
    /// Whether a refresh token is kept.
    public var hasRefreshToken: Bool
    /// The names of the response's fields beyond RFC 6749's (their values may be secrets).
    public var responseFields: [String]
    /// Every scope, sorted.
    public var scopes: [ScopeEntry]

    enum CodingKeys: String, CodingKey {
        case service, account, active, subject, issuer, scopes
        case responseFields = "response_fields"
        case tokenType = "token_type"
        case clientID = "client_id"
        case issuedAt = "issued_at"
        case expiresAt = "expires_at"
        case revokedAt = "revoked_at"
        case hasRefreshToken = "has_refresh_token"
    }

    /// The summary of `token`, kept at `reference`, as of `date`.
    public init(_ reference: TokenReference, _ token: OAuthToken, at date: Date) {
        service = reference.service
        account = reference.account
        active = token.isActive(at: date)
        tokenType = token.tokenType
        clientID = token.clientID
        subject = token.subject
        issuer = token.issuer
        issuedAt = iso8601(token.issuedAt)
        expiresAt = token.expiresAt.map(iso8601)
        revokedAt = token.revokedAt.map(iso8601)
        hasRefreshToken = token.refreshToken != nil
        responseFields = token.additionalFields.keys.sorted()
        scopes = token.statuses(at: date).sorted { $0.key < $1.key }.map {
            ScopeEntry(scope: $0.key.rawValue, state: $0.value.state.rawValue, changedAt: iso8601($0.value.changedAt), reason: $0.value.reason)
        }
    }
}
