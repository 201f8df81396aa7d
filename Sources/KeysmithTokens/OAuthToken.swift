public import FoundationEssentials
public import Keysmith
// A scope's state and status are in the core module, so that the policy engine reads a token's
// scopes without depending on this module; a program that imports this module alone still sees
// them under their names.
@_exported public import enum Keysmith.ScopeState
@_exported public import struct Keysmith.ScopeStatus

/// An OAuth-style token: its secrets, its metadata and the state of every scope it has heard of.
///
/// Values are immutable snapshots; the mutating methods return errors instead of leaving a
/// half-changed token, and ``TokenKeeper`` persists each change with an audit entry.
///
/// ```swift
/// let write = try Scope("posts:write")
/// var token = try OAuthToken(response: json, requested: [try Scope("openid"), write], now: .now)
/// token.hasGranted(write, at: .now)        // true while active
/// try token.revoke(write, reason: "user request", at: .now)
/// ```
///
/// `description` never shows the access or refresh token.
public struct OAuthToken: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The access token: a secret.
    public var accessToken: String
    /// The refresh token, if any: a secret.
    public var refreshToken: String?
    /// The token type, such as `Bearer`.
    public var tokenType: String
    /// The OAuth client the token was issued to.
    public var clientID: String?
    /// The subject (user) the token acts for.
    public var subject: String?
    /// The issuer.
    public var issuer: String?
    /// The audience.
    public var audience: [String]
    /// When the token was issued.
    public var issuedAt: Date
    /// When the access token expires; `nil` when the server said nothing.
    public var expiresAt: Date?
    /// When access to the user's data expires (Facebook's data-access expiry); `nil` for never.
    public var dataAccessExpiresAt: Date?
    /// When the token was last refreshed.
    public var refreshedAt: Date?
    /// When the whole token was revoked (log-out); `nil` while it was not.
    public var revokedAt: Date?
    /// Every scope the token has heard of, with its state.
    public var scopes: [Scope: ScopeStatus]
    /// The token response's fields beyond RFC 6749's (`id_token`, GitHub's
    /// `refresh_token_expires_in`, Slack's `team`, …), kept as sent: each field's value as compact
    /// JSON text, by field name. A refresh or a grant replaces the fields its response carries
    /// and keeps the others. Values may be secrets (an `id_token` is one): the command prints
    /// them only when asked for one by name (`keysmith token get --field NAME`).
    public var additionalFields: [String: String] = [:]

    enum CodingKeys: String, CodingKey {
        case accessToken, refreshToken, tokenType, clientID, subject, issuer, audience, issuedAt, expiresAt
        case dataAccessExpiresAt, refreshedAt, revokedAt, scopes, additionalFields
    }

    /// Decodes a token encoded by `Codable`; `additionalFields` may be absent (older encodings).
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        accessToken = try container.decode(String.self, forKey: .accessToken)
        refreshToken = try container.decodeIfPresent(String.self, forKey: .refreshToken)
        tokenType = try container.decode(String.self, forKey: .tokenType)
        clientID = try container.decodeIfPresent(String.self, forKey: .clientID)
        subject = try container.decodeIfPresent(String.self, forKey: .subject)
        issuer = try container.decodeIfPresent(String.self, forKey: .issuer)
        audience = try container.decode([String].self, forKey: .audience)
        issuedAt = try container.decode(Date.self, forKey: .issuedAt)
        expiresAt = try container.decodeIfPresent(Date.self, forKey: .expiresAt)
        dataAccessExpiresAt = try container.decodeIfPresent(Date.self, forKey: .dataAccessExpiresAt)
        refreshedAt = try container.decodeIfPresent(Date.self, forKey: .refreshedAt)
        revokedAt = try container.decodeIfPresent(Date.self, forKey: .revokedAt)
        scopes = try container.decode([Scope: ScopeStatus].self, forKey: .scopes)
        additionalFields = try container.decodeIfPresent([String: String].self, forKey: .additionalFields) ?? [:]
    }

    /// Creates a token from its parts. Prefer ``init(response:requested:clientID:subject:issuer:audience:now:)``.
    public init(
        accessToken: String, refreshToken: String? = nil, tokenType: String = "Bearer", clientID: String? = nil,
        subject: String? = nil, issuer: String? = nil, audience: [String] = [], issuedAt: Date,
        expiresAt: Date? = nil, dataAccessExpiresAt: Date? = nil, scopes: [Scope: ScopeStatus] = [:]
    ) {
        self.accessToken = accessToken
        self.refreshToken = refreshToken
        self.tokenType = tokenType
        self.clientID = clientID
        self.subject = subject
        self.issuer = issuer
        self.audience = audience
        self.issuedAt = issuedAt
        self.expiresAt = expiresAt
        self.dataAccessExpiresAt = dataAccessExpiresAt
        self.scopes = scopes
    }

    /// Builds a token from an RFC 6749 §5.1 token response and the scopes that were requested.
    ///
    /// The granted set is the response's `scope` when present, else the requested set (§3.3);
    /// requested scopes missing from the grant are declined.
    ///
    /// - Parameters:
    ///   - response: The JSON body of the token response.
    ///   - requested: The scopes the client asked for.
    ///   - clientID: The client the token was issued to.
    ///   - subject: The user it acts for.
    ///   - issuer: The issuer.
    ///   - audience: The audience.
    ///   - now: The time of issue (and the base of `expires_in`).
    /// - Throws: `KeysmithError.Code.malformedData` for malformed JSON, a missing or empty
    ///   `access_token` or `token_type`, or a negative `expires_in`;
    ///   `KeysmithError.Code.invalidScope` for a malformed scope.
    public init(
        response: Data, requested: Set<Scope>, clientID: String? = nil, subject: String? = nil,
        issuer: String? = nil, audience: [String] = [], now: Date
    ) throws {
        let parsed = try TokenResponse.parse(response)
        self.init(
            accessToken: parsed.accessToken, refreshToken: parsed.refreshToken, tokenType: parsed.tokenType,
            clientID: clientID, subject: subject, issuer: issuer, audience: audience, issuedAt: now,
            expiresAt: parsed.expiresIn.map { now.addingTimeInterval(TimeInterval($0)) })
        additionalFields = parsed.additionalFields
        let granted = parsed.scope ?? requested
        for scope in granted {
            scopes[scope] = ScopeStatus(state: .granted, changedAt: now, reason: "granted by token response")
        }
        for scope in requested.subtracting(granted) {
            scopes[scope] = ScopeStatus(state: .declined, changedAt: now, reason: "requested but not granted")
        }
    }

    // MARK: Questions

    /// Whether the access token has expired at `date`.
    public func isExpired(at date: Date) -> Bool {
        guard let expiresAt else { return false }
        return date >= expiresAt
    }

    /// Whether access to the user's data has expired at `date`.
    public func isDataAccessExpired(at date: Date) -> Bool {
        guard let dataAccessExpiresAt else { return false }
        return date >= dataAccessExpiresAt
    }

    /// Whether the access token is a bearer token (`token_type` `Bearer`, in any case: RFC 6750
    /// §4, RFC 6749 §5.1), the only kind that may be sent as `Authorization: Bearer …`. A token
    /// of another type (`mac`, `DPoP`, …) needs a proof of possession its client must make: the
    /// `keysmith` command and the git helper refuse to hand it out as a bearer token.
    ///
    /// ```swift
    /// guard token.isBearer else { throw MyError.unsupportedTokenType(token.tokenType) }
    /// request.setValue("Bearer \(token.accessToken)", forHTTPHeaderField: "Authorization")
    /// ```
    public var isBearer: Bool {
        tokenType.lowercased() == "bearer"
    }

    /// Whether the token can be used at `date`: not expired, not revoked.
    public func isActive(at date: Date) -> Bool {
        revokedAt == nil && !isExpired(at: date)
    }

    /// The state of a scope at `date`: a granted scope of an expired token is `expired`.
    ///
    /// - Returns: The state, or `nil` for a scope the token never heard of.
    public func state(of scope: Scope, at date: Date) -> ScopeState? {
        guard let status = scopes[scope] else { return nil }
        if status.state == .granted && isExpired(at: date) { return .expired }
        return status.state
    }

    /// The status of every scope at `date`, with expiry applied (see ``state(of:at:)``).
    public func statuses(at date: Date) -> [Scope: ScopeStatus] {
        guard isExpired(at: date), let expiresAt else { return scopes }
        return scopes.mapValues { status in
            status.state == .granted ? ScopeStatus(state: .expired, changedAt: expiresAt, reason: "the token expired") : status
        }
    }

    /// Every scope's status at `date` by name, as an authorization decision reads it: expiry
    /// applied (``statuses(at:)``), and every granted or expired scope of a revoked token
    /// `revoked` (from the revocation). What a policy's `context.token` holds
    /// (`TokenView(token:at:)`, module KeysmithTokenPolicy).
    public func decisionStatuses(at date: Date) -> [String: ScopeStatus] {
        var statuses: [String: ScopeStatus] = [:]
        for (scope, status) in self.statuses(at: date) {
            if let revokedAt, status.state == .granted || status.state == .expired {
                statuses[scope.rawValue] = ScopeStatus(state: .revoked, changedAt: revokedAt, reason: "the token was revoked")
            } else {
                statuses[scope.rawValue] = status
            }
        }
        return statuses
    }

    /// Whether `scope` is usable at `date`: the token is active and the scope granted.
    public func hasGranted(_ scope: Scope, at date: Date) -> Bool {
        isActive(at: date) && scopes[scope]?.state == .granted
    }

    /// The scopes usable at `date`: empty when the token is not active.
    public func grantedScopes(at date: Date) -> Set<Scope> {
        guard isActive(at: date) else { return [] }
        return Set(scopes.lazy.filter { $0.value.state == .granted }.map(\.key))
    }

    /// The scopes in one state at `date`.
    public func scopes(in state: ScopeState, at date: Date) -> Set<Scope> {
        Set(statuses(at: date).lazy.filter { $0.value.state == state }.map(\.key))
    }

    /// The declined scopes: what to ask for again. They become granted only through a new grant
    /// (``applyGrant(response:requested:at:)``).
    public var scopesToReRequest: Set<Scope> {
        Set(scopes.lazy.filter { $0.value.state == .declined }.map(\.key))
    }

    // MARK: Changes

    /// Revokes one scope.
    ///
    /// - Parameters:
    ///   - scope: The scope.
    ///   - reason: Why, for the audit log.
    ///   - date: When.
    /// - Returns: Whether anything changed (`false` when the scope was already revoked).
    /// - Throws: `KeysmithError.Code.itemNotFound` for a scope the token never heard of.
    @discardableResult
    public mutating func revoke(_ scope: Scope, reason: String, at date: Date) throws -> Bool {
        guard let status = scopes[scope] else {
            throw KeysmithError(
                .itemNotFound,
                "the token has never heard of the scope \(scope); its scopes are: \(Scope.formatList(scopes.keys))")
        }
        guard status.state != .revoked else { return false }
        scopes[scope] = ScopeStatus(state: .revoked, changedAt: date, reason: "revoked: \(reason)")
        return true
    }

    /// Revokes everything (log-out): every scope revoked, the token inactive.
    ///
    /// - Returns: Whether anything changed (`false` when already revoked).
    @discardableResult
    public mutating func revokeAll(reason: String, at date: Date) -> Bool {
        guard revokedAt == nil || scopes.values.contains(where: { $0.state != .revoked }) else { return false }
        revokedAt = revokedAt ?? date
        for (scope, status) in scopes where status.state != .revoked {
            scopes[scope] = ScopeStatus(state: .revoked, changedAt: date, reason: "revoked: \(reason)")
        }
        return true
    }

    /// Applies a refresh response (RFC 6749 §6): a new access token, which may narrow the grant
    /// but never widen it.
    ///
    /// - Parameters:
    ///   - response: The JSON body of the refresh response.
    ///   - date: When.
    /// - Throws: `KeysmithError.Code.invalidScope` if the response names a scope that is not
    ///   granted now; `KeysmithError.Code.malformedData` for a malformed response. The token is
    ///   unchanged when it throws.
    public mutating func applyRefresh(response: Data, at date: Date) throws {
        _ = try applyRefresh(response: response, at: date, keepingWhatItCannotWiden: false)
    }

    /// Applies a refresh response; with `keepingWhatItCannotWiden`, a response that names scopes
    /// the token does not hold as granted (revoked here, or never held) is applied anyway, those
    /// scopes keeping their state: what a refresh at the provider must do, since the old refresh
    /// token is spent by then and the new one must be kept.
    ///
    /// - Returns: The scopes the response named that were not applied.
    package mutating func applyRefresh(response: Data, at date: Date, keepingWhatItCannotWiden: Bool) throws -> Set<Scope> {
        let parsed = try TokenResponse.parse(response)
        let grantedNow = Set(scopes.lazy.filter { $0.value.state == .granted }.map(\.key))
        var notApplied: Set<Scope> = []
        if let narrowed = parsed.scope {
            let widened = narrowed.subtracting(grantedNow)
            notApplied = widened
            guard widened.isEmpty || keepingWhatItCannotWiden else {
                throw KeysmithError(
                    .invalidScope,
                    "the refresh response grants \(Scope.formatList(widened)), which the token did not have; "
                        + "a refresh may narrow the grant but never widen it (RFC 6749 §6)")
            }
        }
        var next = self
        next.accessToken = parsed.accessToken
        if let refresh = parsed.refreshToken { next.refreshToken = refresh }
        next.tokenType = parsed.tokenType
        next.additionalFields.merge(parsed.additionalFields) { _, new in new }
        next.refreshedAt = date
        next.expiresAt = parsed.expiresIn.map { date.addingTimeInterval(TimeInterval($0)) }
        if keepingWhatItCannotWiden, parsed.expiresIn == nil, let expiry = expiresAt {
            // No expires_in: the new access token is taken to live as long as the last one did
            // (nil would read as "never expires", and it would never be refreshed again).
            next.expiresAt = date.addingTimeInterval(max(0, expiry.timeIntervalSince(refreshedAt ?? issuedAt)))
        }
        if let narrowed = parsed.scope {
            for scope in grantedNow.subtracting(narrowed) {
                next.scopes[scope] = ScopeStatus(state: .declined, changedAt: date, reason: "dropped by refresh")
            }
        }
        self = next
        return notApplied
    }

    /// Applies an incremental grant: a new token response for more scopes, which adds to the
    /// granted set. Declined scopes that it grants become granted; requested scopes it does not
    /// grant are declined (unless already granted).
    ///
    /// - Throws: `KeysmithError.Code.malformedData` or `KeysmithError.Code.invalidScope`;
    ///   the token is unchanged then.
    public mutating func applyGrant(response: Data, requested: Set<Scope>, at date: Date) throws {
        let parsed = try TokenResponse.parse(response)
        var next = self
        next.accessToken = parsed.accessToken
        if let refresh = parsed.refreshToken { next.refreshToken = refresh }
        next.tokenType = parsed.tokenType
        next.additionalFields.merge(parsed.additionalFields) { _, new in new }
        next.revokedAt = nil
        next.expiresAt = parsed.expiresIn.map { date.addingTimeInterval(TimeInterval($0)) }
        let granted = parsed.scope ?? requested
        for scope in granted where next.scopes[scope]?.state != .granted {
            next.scopes[scope] = ScopeStatus(state: .granted, changedAt: date, reason: "granted by incremental grant")
        }
        for scope in requested.subtracting(granted) where next.scopes[scope]?.state != .granted {
            next.scopes[scope] = ScopeStatus(state: .declined, changedAt: date, reason: "requested again but not granted")
        }
        self = next
    }

    /// What ``applyUpdate(response:requested:allowRegrant:at:)`` changed.
    public struct UpdateOutcome: Sendable, Hashable {
        /// Scopes that became granted (new, or declined or expired before).
        public var granted: Set<Scope> = []
        /// Scopes that were granted and that the new response does not grant: now declined.
        public var dropped: Set<Scope> = []
        /// Scopes the response grants that were revoked here and stay revoked.
        public var keptRevoked: Set<Scope> = []
    }

    /// Applies a new token response to a token already kept (a re-import): the refresh and the
    /// incremental-grant rules at once, with the token's history and identity kept.
    ///
    /// The new access token, refresh token (if given), type and expiry replace the old ones.
    /// The response's scopes (else `requested`) are what is granted now: a scope it grants that
    /// was absent, declined or expired becomes granted; a granted scope it leaves out becomes
    /// declined ("dropped"), with the time and the reason; a requested scope it does not grant
    /// is declined if it was unknown. A scope **revoked** here stays revoked (a revocation is a
    /// local decision a provider's new token must not undo) unless `allowRegrant`, which also
    /// ends a log-out when the response grants at least one scope. With neither a response scope nor `requested`, the scopes are kept.
    ///
    /// - Returns: What changed.
    /// - Throws: `KeysmithError.Code.malformedData` or `KeysmithError.Code.invalidScope`;
    ///   the token is unchanged then.
    @discardableResult
    public mutating func applyUpdate(response: Data, requested: Set<Scope>, allowRegrant: Bool = false, at date: Date) throws
        -> UpdateOutcome
    {
        let parsed = try TokenResponse.parse(response)
        var next = self
        next.accessToken = parsed.accessToken
        if let refresh = parsed.refreshToken { next.refreshToken = refresh }
        next.tokenType = parsed.tokenType
        next.additionalFields.merge(parsed.additionalFields) { _, new in new }
        next.refreshedAt = date
        next.expiresAt = parsed.expiresIn.map { date.addingTimeInterval(TimeInterval($0)) }
        var outcome = UpdateOutcome()
        if parsed.scope != nil || !requested.isEmpty {
            let offered = parsed.scope ?? requested
            for scope in offered {
                switch next.scopes[scope]?.state {
                case .granted?:
                    continue
                case .revoked? where !allowRegrant:
                    outcome.keptRevoked.insert(scope)
                default:
                    next.scopes[scope] = ScopeStatus(state: .granted, changedAt: date, reason: "granted by a new token response")
                    outcome.granted.insert(scope)
                }
            }
            for (scope, status) in scopes where status.state == .granted && !offered.contains(scope) {
                next.scopes[scope] = ScopeStatus(state: .declined, changedAt: date, reason: "dropped: the new token response does not grant it")
                outcome.dropped.insert(scope)
            }
            for scope in requested.subtracting(offered) where next.scopes[scope] == nil {
                next.scopes[scope] = ScopeStatus(state: .declined, changedAt: date, reason: "requested but not granted")
            }
        }
        // A log-out ends only when the new response actually grants something.
        if allowRegrant, !outcome.granted.isEmpty { next.revokedAt = nil }
        self = next
        return outcome
    }

    /// The token's identity and scopes, never its secrets.
    public var description: String {
        "OAuth token (\(tokenType), client \(clientID ?? "-"), subject \(subject ?? "-"), \(scopes.count) scope(s), secrets redacted)"
    }
}
