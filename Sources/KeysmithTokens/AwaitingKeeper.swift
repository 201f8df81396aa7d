public import FoundationEssentials
public import Keysmith

extension TokenKeeper {
    /// This keeper's reads and changes for async code (a request handler, a refresh): the same
    /// operations, with the same checks, audit entries and retries, whose reads and commits are
    /// awaited through the store's async API when it has one (`AsyncSecureStore`, the
    /// PostgreSQL store), so no thread is held while the store answers. On a store without one
    /// (the file vault, the Secret Service) each call runs as the synchronous one does.
    ///
    /// ```swift
    /// let keeper = TokenKeeper(store: postgres)
    /// try await keeper.awaiting.revoke([try Scope("admin")], service: "github", account: "ci", reason: "rotated")
    /// let token = try await keeper.awaiting.token(service: "github", account: "ci")
    /// ```
    public var awaiting: Awaiting { Awaiting(keeper: self) }

    /// A ``TokenKeeper``'s operations, awaited (``TokenKeeper/awaiting``). Each method does what
    /// the synchronous method of the same name does, and throws what it throws; a task
    /// cancelled before a change is committed ends with `CancellationError` and changes nothing
    /// (a commit already sent is awaited: it either happened or not, as for the store).
    public struct Awaiting: Sendable {
        /// The keeper whose operations these are.
        public let keeper: TokenKeeper

        /// Reads a token, as ``TokenKeeper/token(service:account:)``.
        public func token(service: String, account: String) async throws -> OAuthToken? {
            try await keeper.versionedTokensAwaiting([(service, account)])[0]?.token
        }

        /// Imports a token response, as
        /// ``TokenKeeper/importResponse(_:service:account:requested:clientID:subject:issuer:audience:replacing:)``.
        @discardableResult
        public func importResponse(
            _ response: Data, service: String, account: String, requested: Set<Scope>, clientID: String? = nil,
            subject: String? = nil, issuer: String? = nil, audience: [String] = [], replacing: Bool = false
        ) async throws -> OAuthToken {
            try await keeper.runAwaiting(keeper.importChange(response, service: service, account: account, requested: requested,
                                                             clientID: clientID, subject: subject, issuer: issuer, audience: audience,
                                                             replacing: replacing))
        }

        /// Imports many token responses in one all-or-nothing commit, as ``TokenKeeper/importBatch(_:replacing:)``.
        @discardableResult
        public func importBatch(_ imports: [TokenImport], replacing: Bool = false) async throws
            -> (imported: [TokenReference], updated: [TokenReference])
        {
            try await keeper.runAwaiting(keeper.importBatchChange(imports, replacing: replacing))
        }

        /// Every stored token that matches the filter, as ``TokenKeeper/tokens(matching:)``:
        /// one pass over the store, awaited.
        public func tokens(matching filter: TokenFilter = TokenFilter()) async throws -> [(reference: TokenReference, token: OAuthToken)] {
            try await keeper.tokensAwaiting(matching: filter)
        }

        /// Revokes one scope across every matching token, as
        /// ``TokenKeeper/revoke(scope:matching:reason:dryRun:progress:)``: the scan and the
        /// commit awaited.
        public func revoke(scope: Scope, matching filter: TokenFilter, reason: String, dryRun: Bool = false,
                           progress: ((Int, Int) -> Void)? = nil) async throws -> BulkRevocationReport {
            try await revoke(scopes: [scope], matching: filter, reason: reason, dryRun: dryRun, progress: progress)
        }

        /// Revokes scopes across every matching token in one commit, as
        /// ``TokenKeeper/revoke(scopes:matching:reason:dryRun:progress:)``: the scan and the
        /// commit awaited.
        public func revoke(scopes: [Scope], matching filter: TokenFilter, reason: String, dryRun: Bool = false,
                           progress: ((Int, Int) -> Void)? = nil) async throws -> BulkRevocationReport {
            try await keeper.runAwaiting(keeper.bulkRevokeChange(scopes: scopes, matching: filter, reason: reason, dryRun: dryRun,
                                                                 progress: progress, alongside: nil))
        }

        /// Revokes scopes across every matching token and ends each changed token's grant, as
        /// ``TokenKeeper/revokeEndingGrants(scopes:matching:reason:progress:alongside:)``.
        public func revokeEndingGrants(
            scopes: [Scope], matching filter: TokenFilter, reason: String, progress: ((Int, Int) -> Void)? = nil,
            alongside: @escaping (TokenReference, OAuthToken) throws -> [StoreOperation]
        ) async throws -> BulkRevocationReport {
            try await keeper.runAwaiting(keeper.bulkRevokeChange(scopes: scopes, matching: filter, reason: reason, dryRun: false,
                                                                 progress: progress, alongside: alongside))
        }

        /// Revokes scopes of one token, as ``TokenKeeper/revoke(_:service:account:reason:)``.
        @discardableResult
        public func revoke(_ scopes: [Scope], service: String, account: String, reason: String) async throws -> OAuthToken {
            try await keeper.runAwaiting(keeper.revokeChange(scopes, service: service, account: account, reason: reason))
        }

        /// Revokes everything (log-out), as ``TokenKeeper/revokeAll(service:account:reason:)``.
        @discardableResult
        public func revokeAll(service: String, account: String, reason: String) async throws -> OAuthToken {
            try await keeper.runAwaiting(keeper.revokeAllChange(service: service, account: account, reason: reason))
        }

        /// Applies a refresh response, as ``TokenKeeper/refresh(_:service:account:)``.
        @discardableResult
        public func refresh(_ response: Data, service: String, account: String) async throws -> OAuthToken {
            try await keeper.runAwaiting(keeper.strictRefreshChange(response, service: service, account: account, detail: "refreshed"))
        }

        /// Applies a refresh response obtained from the provider, as
        /// ``TokenKeeper/refresh(_:service:account:detail:answering:ifLoggedOut:)``.
        @discardableResult
        public func refresh(_ response: Data, service: String, account: String, detail: String, answering sent: String? = nil,
                            ifLoggedOut: (operations: [StoreOperation], event: String, detail: String)? = nil) async throws -> OAuthToken {
            try await keeper.runAwaiting(keeper.refreshChange(response, service: service, account: account, detail: detail,
                                                              answering: sent, ifLoggedOut: ifLoggedOut))
        }

        /// Applies an incremental grant, as ``TokenKeeper/grant(_:requested:service:account:)``.
        @discardableResult
        public func grant(_ response: Data, requested: Set<Scope>, service: String, account: String) async throws -> OAuthToken {
            try await keeper.runAwaiting(keeper.grantChange(response, requested: requested, service: service, account: account))
        }

        /// Applies a new token response to a kept token, as
        /// ``TokenKeeper/update(with:requested:allowRegrant:service:account:)``.
        @discardableResult
        public func update(
            with response: Data, requested: Set<Scope>, allowRegrant: Bool = false, service: String, account: String
        ) async throws -> (token: OAuthToken, outcome: OAuthToken.UpdateOutcome) {
            try await keeper.runAwaiting(keeper.updateChange(with: response, requested: requested, allowRegrant: allowRegrant,
                                                             service: service, account: account))
        }

        /// Deletes a token, as ``TokenKeeper/delete(service:account:)``.
        public func delete(service: String, account: String) async throws {
            try await keeper.runAwaiting(keeper.deleteChange(service: service, account: account))
        }

        /// Ends a token and commits other records with it, as
        /// ``TokenKeeper/endToken(service:account:scopes:deleting:reason:event:alongside:)``.
        /// `alongside` is called at each attempt, with the token as that attempt read it.
        @discardableResult
        public func endToken(service: String, account: String, scopes: [Scope]?, deleting: Bool = false, reason: String, event: String,
                             alongside: @escaping (OAuthToken) throws -> [StoreOperation]) async throws -> OAuthToken {
            try await keeper.runAwaiting(keeper.endTokenChange(service: service, account: account, scopes: scopes, deleting: deleting,
                                                               reason: reason, event: event, alongside: alongside))
        }

        /// Appends one audit entry with other operations, as
        /// ``TokenKeeper/recordEvent(_:service:account:detail:tokens:alongside:)``.
        public func recordEvent(_ event: String, service: String, account: String, detail: String, tokens: [TokenReference] = [],
                                alongside: [StoreOperation] = []) async throws {
            try await keeper.runAwaiting(keeper.eventChange(event, service: service, account: account, detail: detail,
                                                            tokens: tokens, alongside: alongside))
        }
    }
}
