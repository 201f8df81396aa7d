public import FoundationEssentials
public import Keysmith

/// Keeps OAuth tokens in a store and records every change of state in a hash-chained audit log
/// kept in the same store. Tokens and audit entries are Keysmith's own records
/// (`ItemNamespace.keysmith`): user-level secret operations cannot see or change them.
///
/// Each change (import, revoke, refresh, grant, log-out) is one all-or-nothing batch of
/// conditional writes: the token is replaced only if it is still at the version that was read,
/// the audit entry is created only if its sequence number is free, and the log's head is replaced
/// only if it is unchanged. When another handle or process changed either in between, the batch
/// fails as a whole, the keeper reads again and retries, so no update is lost and the audit chain
/// never forks. This holds on every store, across processes (`StoreIsolation`). A failed change
/// leaves the stored token as it was.
///
/// ```swift
/// let keeper = TokenKeeper(store: vault)
/// let repo = try Scope("repo"), workflow = try Scope("workflow")
/// try keeper.importResponse(json, service: "github", account: "ci", requested: [repo, workflow])
/// try keeper.revoke([workflow], service: "github", account: "ci", reason: "rotated")
/// try keeper.token(service: "github", account: "ci")?.hasGranted(repo, at: .now)
/// ```
public final class TokenKeeper: Sendable {
    /// The store the tokens and the audit log live in.
    public let store: any SecureStore
    private let clock: @Sendable () -> Date
    /// Who the audit log says made the changes this keeper makes.
    public let actor: AuditActor
    /// Where the newest audit head this keeper wrote or verified is recorded outside the store;
    /// `nil` keeps none.
    public let auditAnchor: AuditAnchor?

    /// Creates a keeper over a store.
    ///
    /// - Parameters:
    ///   - store: Where tokens and the audit log live.
    ///   - clock: The time source for state changes and expiry; the system clock if omitted.
    ///   - actor: Who the audit log names for this keeper's changes; this process if omitted.
    ///   - auditAnchor: Where to record the newest audit head outside the store, so that
    ///     ``verifyAuditLog()`` notices a log cut short, deleted or rewritten; none if omitted
    ///     (the `keysmith` command uses ``AuditAnchor/standard``).
    public init(store: any SecureStore, clock: @escaping @Sendable () -> Date = { Date() }, actor: AuditActor = .current(),
                auditAnchor: AuditAnchor? = nil) {
        self.store = store
        self.clock = clock
        self.actor = actor
        self.auditAnchor = auditAnchor
    }

    /// The current time of the keeper's clock.
    public var now: Date { clock() }

    static func key(service: String, account: String) -> ItemKey {
        StoredToken.key(service: service, account: account)
    }

    // MARK: Reading

    /// Reads a token.
    ///
    /// - Returns: The token, or `nil` if there is none for this service and account.
    /// - Throws: `KeysmithError.Code.corruptData` if the record does not decode; a store failure.
    public func token(service: String, account: String) throws -> OAuthToken? {
        try versionedToken(service: service, account: account)?.token
    }

    /// A token with the store's version of its record, for a conditional write.
    func versionedToken(service: String, account: String) throws -> (token: OAuthToken, version: ItemVersion, record: SecureRecord)? {
        try versionedTokens([(service, account)])[0]
    }

    /// Many tokens at once (``SecureStore/read(_:)-([ItemKey])``), in order, `nil` where none is kept.
    func versionedTokens(_ references: [(service: String, account: String)]) throws
        -> [(token: OAuthToken, version: ItemVersion, record: SecureRecord)?]
    {
        try Self.decoded(references, try store.read(references.map { Self.key(service: $0.service, account: $0.account) }))
    }

    /// ``versionedTokens(_:)``, reading through the store's async API when it has one
    /// (`AsyncSecureStore`): for async callers, which then hold no thread while the store answers.
    package func versionedTokensAwaiting(_ references: [(service: String, account: String)]) async throws
        -> [(token: OAuthToken, version: ItemVersion, record: SecureRecord)?]
    {
        try Self.decoded(references, try await store.readAwaiting(references.map { Self.key(service: $0.service, account: $0.account) }))
    }

    /// The tokens in records read for `references`, in order.
    private static func decoded(_ references: [(service: String, account: String)], _ records: [SecureRecord?]) throws
        -> [(token: OAuthToken, version: ItemVersion, record: SecureRecord)?]
    {
        try zip(references, records).map { reference, record in
            guard let record else { return nil }
            let token = try TokenCodec.decode(Array(record.secret), what: "the token for \(reference.account) at \(reference.service)")
            return (token, record.info.version, record)
        }
    }

    /// Every stored token that matches the filter, with where it is kept, sorted by service
    /// then account: one pass over the store, each token read once
    /// (`SecureStore.forEachRecord(matching:chunkSize:_:)`).
    ///
    /// ```swift
    /// let soon = try keeper.tokens(matching: TokenFilter(clientID: "web"))
    ///     .filter { $0.token.isActive(at: .now) && ($0.token.expiresAt ?? .distantFuture) < .now + 86_400 }
    /// ```
    ///
    /// - Throws: `KeysmithError.Code.corruptData` naming a token that does not decode; a
    ///   store failure.
    public func tokens(matching filter: TokenFilter = TokenFilter()) throws -> [(reference: TokenReference, token: OAuthToken)] {
        var found: [(reference: TokenReference, token: OAuthToken)] = []
        try store.forEachRecord(matching: ItemQuery(service: filter.service, recordType: .oauthToken), chunkSize: 1024) { records, _ in
            try Self.collect(records, matching: filter, into: &found)
        }
        return Self.sorted(found)
    }

    /// ``tokens(matching:)`` through the store's async API when it has one.
    func tokensAwaiting(matching filter: TokenFilter) async throws -> [(reference: TokenReference, token: OAuthToken)] {
        var found: [(reference: TokenReference, token: OAuthToken)] = []
        try await store.forEachRecordAwaiting(matching: ItemQuery(service: filter.service, recordType: .oauthToken), chunkSize: 1024) { records, _ in
            try Self.collect(records, matching: filter, into: &found)
        }
        return Self.sorted(found)
    }

    /// The tokens of a scan's chunk that match the filter, decoded, added to `found`.
    private static func collect(_ records: [SecureRecord], matching filter: TokenFilter,
                                into found: inout [(reference: TokenReference, token: OAuthToken)]) throws {
        for record in records {
            guard case .keysmithRecord(let key) = record.key else { continue }
            let token = try TokenCodec.decode(Array(record.secret), what: "the token for \(key.account) at \(key.service)")
            if let client = filter.clientID, token.clientID != client { continue }
            if let subject = filter.subject, token.subject != subject { continue }
            found.append((TokenReference(service: key.service, account: key.account), token))
        }
    }

    private static func sorted(_ found: [(reference: TokenReference, token: OAuthToken)]) -> [(reference: TokenReference, token: OAuthToken)] {
        found.sorted { ($0.reference.service, $0.reference.account) < ($1.reference.service, $1.reference.account) }
    }

    /// Lists where tokens are stored, optionally for one service.
    public func tokenKeys(service: String? = nil) throws -> [(service: String, account: String)] {
        try store.search(ItemQuery(service: service, recordType: .oauthToken)).compactMap { info in
            guard case .keysmithRecord(let key) = info.key else { return nil }
            return (key.service, key.account)
        }
    }

    // MARK: Changes

    /// Imports an RFC 6749 token response as a new token (or replaces the one stored there).
    ///
    /// - Parameters:
    ///   - response: The token response's JSON body.
    ///   - service: Where to keep it: the service…
    ///   - account: …and the account.
    ///   - requested: The scopes that were requested.
    ///   - clientID: The client it was issued to.
    ///   - subject: The user it acts for.
    ///   - issuer: The issuer.
    ///   - audience: The audience.
    ///   - replacing: Whether a token already kept there may be replaced (its history, its
    ///     revocations and a log-out go with it; the audit entry is a `replace` naming the
    ///     scopes that were revoked). Without it, a kept token is an error: update it with
    ///     ``update(with:requested:allowRegrant:service:account:)``. A kept token whose record
    ///     is damaged is replaced as it is: that repairs it.
    /// - Returns: The stored token.
    /// - Throws: `KeysmithError.Code.malformedData` or `KeysmithError.Code.invalidScope` for
    ///   a bad response (nothing is stored then); `KeysmithError.Code.duplicateItem` when a
    ///   token is kept there and `replacing` is `false` (also when another process imported one
    ///   a moment earlier); a store failure.
    @discardableResult
    public func importResponse(
        _ response: Data, service: String, account: String, requested: Set<Scope>, clientID: String? = nil,
        subject: String? = nil, issuer: String? = nil, audience: [String] = [], replacing: Bool = false
    ) throws -> OAuthToken {
        try run(importChange(response, service: service, account: account, requested: requested, clientID: clientID, subject: subject,
                             issuer: issuer, audience: audience, replacing: replacing))
    }

    /// ``importResponse(_:service:account:requested:clientID:subject:issuer:audience:replacing:)`` as a change to run.
    func importChange(
        _ response: Data, service: String, account: String, requested: Set<Scope>, clientID: String?,
        subject: String?, issuer: String?, audience: [String], replacing: Bool
    ) throws -> Change<OAuthToken> {
        let time = now
        let token = try OAuthToken(response: response, requested: requested, clientID: clientID, subject: subject,
                                   issuer: issuer, audience: audience, now: time)
        return Change(time: time, reading: [Self.key(service: service, account: account)]) { read in
            let granted = token.scopes.filter { $0.value.state == .granted }.map(\.key.rawValue).sorted()
            let declined = token.scopes.filter { $0.value.state == .declined }.map(\.key.rawValue).sorted()
            let imported = "granted: \(granted.joined(separator: " ")); declined: \(declined.joined(separator: " "))"
            let found: Versioned?
            do {
                found = try Self.decoded([(service, account)], try read.get())[0]
            } catch let error as KeysmithError where error.code == .corruptData && replacing {
                // The stored token is damaged: replacing it is its repair (the new record
                // supersedes the damaged one); nothing of the old one can be kept.
                let stored = StoredToken(service: service, account: account, token: token)
                return Built([.upsert(stored.attributes, secret: stored.secret)],
                             [Event("replace", service, account, granted + declined, "replaced a damaged token; " + imported)], token)
            }
            guard let existing = found else {
                return Built([Self.tokenWrite(StoredToken(service: service, account: account, token: token), replacing: nil)],
                             [Event("import", service, account, granted + declined, "imported; " + imported)], token)
            }
            guard replacing else {
                throw KeysmithError(.duplicateItem, "a token is kept for \(account) at \(service) already; update it, or replace it")
            }
            // Say what the replacement discards: revocations and a log-out.
            let revoked = existing.token.scopes.filter { $0.value.state == .revoked }.map(\.key.rawValue).sorted()
            let discarded = (revoked.isEmpty ? "" : "; discards the revocation of \(revoked.joined(separator: " "))")
                + (existing.token.revokedAt == nil ? "" : "; ends a log-out")
            return Built([Self.tokenWrite(StoredToken(service: service, account: account, token: token), replacing: existing.version)],
                         [Event("replace", service, account, granted + declined, "replaced; " + imported + discarded)], token)
        }
    }

    /// Imports many token responses as one all-or-nothing commit, with one audit entry
    /// (`import-batch`) naming every token: a new token is imported; a kept one is updated as
    /// ``update(with:requested:allowRegrant:service:account:)`` updates it (history kept,
    /// revoked scopes stay revoked), or with `replacing` replaced.
    ///
    /// ```swift
    /// let result = try keeper.importBatch(responses.map {
    ///     TokenImport(service: "github", account: $0.user, response: $0.json, requested: [try Scope("repo")])
    /// })
    /// print("\(result.imported.count) new, \(result.updated.count) updated")
    /// ```
    ///
    /// - Throws: `KeysmithError.Code.invalidArgument` when a token appears twice;
    ///   `KeysmithError.Code.malformedData` or `KeysmithError.Code.invalidScope` naming the
    ///   first bad response (by its position, from 1); a store failure. Nothing is stored then.
    @discardableResult
    public func importBatch(_ imports: [TokenImport], replacing: Bool = false) throws
        -> (imported: [TokenReference], updated: [TokenReference])
    {
        try run(importBatchChange(imports, replacing: replacing))
    }

    /// ``importBatch(_:replacing:)`` as a change to run.
    func importBatchChange(_ imports: [TokenImport], replacing: Bool) throws
        -> Change<(imported: [TokenReference], updated: [TokenReference])>
    {
        let time = now
        // Every response is parsed before anything is read: a bad one fails the whole batch.
        var seen = Set<TokenReference>()
        var fresh: [OAuthToken] = []
        for (index, item) in imports.enumerated() {
            let reference = TokenReference(service: item.service, account: item.account)
            guard seen.insert(reference).inserted else {
                throw KeysmithError.invalidArgument("token \(index + 1) (\(reference)) appears twice in the batch")
            }
            do {
                fresh.append(try OAuthToken(response: item.response, requested: item.requested, clientID: item.clientID,
                                            subject: item.subject, issuer: item.issuer, now: time))
            } catch let error as KeysmithError {
                throw KeysmithError(error.code, "token \(index + 1) (\(reference)): \(error.message)")
            }
        }
        // One read for the whole batch (a store that can, PostgreSQL, answers it in one
        // query: read one at a time, 20,000 tokens took 53 s there).
        let references = imports.map { (service: $0.service, account: $0.account) }
        return Change(time: time, reading: references.map { Self.key(service: $0.service, account: $0.account) }) { read in
            var imported: [TokenReference] = [], updated: [TokenReference] = []
            var writes: [StoreOperation] = []
            let kept = try Self.decoded(references, try read.get())
            for ((item, token), existing) in zip(zip(imports, fresh), kept) {
                let reference = TokenReference(service: item.service, account: item.account)
                let stored = StoredToken(service: item.service, account: item.account, token: token)
                guard let existing else {
                    writes.append(Self.tokenWrite(stored, replacing: nil))
                    imported.append(reference)
                    continue
                }
                if replacing {
                    writes.append(Self.tokenWrite(stored, replacing: existing.version))
                } else {
                    var kept = existing.token
                    try kept.applyUpdate(response: item.response, requested: item.requested, at: time)
                    writes.append(Self.tokenReplace(StoredToken(service: item.service, account: item.account, token: kept), over: existing.record))
                }
                updated.append(reference)
            }
            guard !writes.isEmpty else { return Built([], [], ([], [])) }
            let detail = "batch of \(writes.count): \(imported.count) imported, \(updated.count) " + (replacing ? "replaced" : "updated")
            return Built(writes, [Event("import-batch", "*", "*", [], detail, tokens: (imported + updated).map(\.description))], (imported, updated))
        }
    }

    /// Revokes scopes of one token.
    ///
    /// - Returns: The token after the change.
    /// - Throws: `KeysmithError.Code.itemNotFound` for an unknown token or a scope the token
    ///   never heard of (nothing changes then); a store failure.
    @discardableResult
    public func revoke(_ scopes: [Scope], service: String, account: String, reason: String) throws -> OAuthToken {
        try run(revokeChange(scopes, service: service, account: account, reason: reason))
    }

    func revokeChange(_ scopes: [Scope], service: String, account: String, reason: String) -> Change<OAuthToken> {
        change(service: service, account: account, event: "revoke", scopes: scopes.map(\.rawValue), detail: reason) { token, time in
            var changed = false
            for scope in scopes { changed = try token.revoke(scope, reason: reason, at: time) || changed }
            return changed
        }
    }

    /// Revokes everything (log-out): every scope revoked, the token inactive.
    @discardableResult
    public func revokeAll(service: String, account: String, reason: String) throws -> OAuthToken {
        try run(revokeAllChange(service: service, account: account, reason: reason))
    }

    func revokeAllChange(service: String, account: String, reason: String) -> Change<OAuthToken> {
        change(service: service, account: account, event: "revoke-all", scopes: [], detail: reason) { token, time in
            token.revokeAll(reason: reason, at: time)
        }
    }

    /// Applies a refresh response (which may narrow the grant, never widen it).
    @discardableResult
    public func refresh(_ response: Data, service: String, account: String) throws -> OAuthToken {
        try run(strictRefreshChange(response, service: service, account: account, detail: "refreshed"))
    }

    /// Applies a refresh response obtained from the provider, with the audit entry's detail
    /// given. Unlike ``refresh(_:service:account:)``, the response is kept even when it names
    /// scopes the token does not hold as granted (the provider has spent the old refresh token:
    /// the new one must be kept); those scopes keep their state here, and the detail says so.
    /// A token logged out meanwhile stays logged out (its new tokens are kept so that they can
    /// be revoked at the provider).
    ///
    /// - Parameters:
    ///   - sent: The refresh token the response answers: when the token kept now holds
    ///     another (a sign-in or an import replaced it meanwhile), nothing is applied and
    ///     `KeysmithError.Code.writeConflict` is thrown (the caller then ends the response's
    ///     tokens at the provider; the newer ones stay).
    ///   - ifLoggedOut: Written in the same commit when the token turns out logged out (the
    ///     revocation at the provider of the tokens the response brings, and what the audit
    ///     log says of it), so that no crash can leave them kept without it.
    @discardableResult
    public func refresh(_ response: Data, service: String, account: String, detail: String, answering sent: String? = nil,
                        ifLoggedOut: (operations: [StoreOperation], event: String, detail: String)? = nil) throws -> OAuthToken {
        try run(refreshChange(response, service: service, account: account, detail: detail, answering: sent, ifLoggedOut: ifLoggedOut))
    }

    func refreshChange(_ response: Data, service: String, account: String, detail: String, answering sent: String?,
                       ifLoggedOut: (operations: [StoreOperation], event: String, detail: String)?) -> Change<OAuthToken> {
        // One attempt's finding, for the entry's detail (each attempt sets it before describe reads it).
        var ignored: Set<Scope> = []
        return change(service: service, account: account, event: "refresh", scopes: [], detail: detail, { token, time in
            if let sent, token.refreshToken != sent {
                throw KeysmithError(.writeConflict, "the token for \(account) at \(service) was replaced while it was being refreshed")
            }
            ignored = try token.applyRefresh(response: response, at: time, keepingWhatItCannotWiden: true)
            return true
        }, describe: {
            ignored.isEmpty ? detail : detail + "; the response also named \(Scope.formatList(ignored)), which stay as they were here"
        }, alongside: { token in
            guard token.revokedAt != nil, let ifLoggedOut else { return ([], []) }
            return (ifLoggedOut.operations, [Event(ifLoggedOut.event, service, account, [], ifLoggedOut.detail)])
        })
    }

    func strictRefreshChange(_ response: Data, service: String, account: String, detail: String) -> Change<OAuthToken> {
        change(service: service, account: account, event: "refresh", scopes: [], detail: detail) { token, time in
            try token.applyRefresh(response: response, at: time)
            return true
        }
    }

    /// Applies an incremental grant (which adds to the granted set; re-requested declined scopes
    /// become granted this way).
    @discardableResult
    public func grant(_ response: Data, requested: Set<Scope>, service: String, account: String) throws -> OAuthToken {
        try run(grantChange(response, requested: requested, service: service, account: account))
    }

    func grantChange(_ response: Data, requested: Set<Scope>, service: String, account: String) -> Change<OAuthToken> {
        change(service: service, account: account, event: "grant", scopes: requested.map(\.rawValue), detail: "incremental grant") { token, time in
            try token.applyGrant(response: response, requested: requested, at: time)
            return true
        }
    }

    /// Applies a new token response to a token already kept, keeping its history and identity
    /// (``OAuthToken/applyUpdate(response:requested:allowRegrant:at:)``), with an audit entry
    /// (`update`) whose scopes are every scope whose state changed and whose detail says which
    /// were granted, granted again after a revocation, dropped and kept revoked.
    ///
    /// - Throws: `KeysmithError.Code.itemNotFound` when there is no such token; a bad response
    ///   (nothing changes then); a store failure.
    @discardableResult
    public func update(
        with response: Data, requested: Set<Scope>, allowRegrant: Bool = false, service: String, account: String
    ) throws -> (token: OAuthToken, outcome: OAuthToken.UpdateOutcome) {
        try run(updateChange(with: response, requested: requested, allowRegrant: allowRegrant, service: service, account: account))
    }

    func updateChange(
        with response: Data, requested: Set<Scope>, allowRegrant: Bool, service: String, account: String
    ) -> Change<(token: OAuthToken, outcome: OAuthToken.UpdateOutcome)> {
        // The last attempt's outcome (each attempt sets it before describe and the result read it).
        var found = (outcome: OAuthToken.UpdateOutcome(), regranted: [String]())
        let change = change(service: service, account: account, event: "update", scopes: [], detail: "new token response") { token, time in
            let before = token
            let outcome = try token.applyUpdate(response: response, requested: requested, allowRegrant: allowRegrant, at: time)
            found = (outcome, outcome.granted.filter { before.scopes[$0]?.state == .revoked }.map(\.rawValue).sorted())
            return true
        } describe: {
            let (outcome, regranted) = found
            // The entry names every scope whose state changed (change() does) and says how.
            var parts = ["new token response"]
            if !outcome.granted.isEmpty { parts.append("granted \(Scope.formatList(outcome.granted))") }
            if !regranted.isEmpty { parts.append("granted again after a revocation (--allow-regrant): \(regranted.joined(separator: " "))") }
            if !outcome.dropped.isEmpty { parts.append("dropped \(Scope.formatList(outcome.dropped))") }
            if !outcome.keptRevoked.isEmpty { parts.append("kept revoked \(Scope.formatList(outcome.keptRevoked))") }
            return parts.joined(separator: "; ")
        }
        return change.map { ($0, found.outcome) }
    }

    /// Deletes a token (the audit log keeps its history). A token whose record is damaged is
    /// deleted too: that repairs it (the audit entry says so).
    public func delete(service: String, account: String) throws {
        try run(deleteChange(service: service, account: account))
    }

    func deleteChange(service: String, account: String) -> Change<Void> {
        let key = Self.key(service: service, account: account)
        return Change(time: now, reading: [key]) { read in
            let current: Versioned?
            do {
                current = try Self.decoded([(service, account)], try read.get())[0]
            } catch let error as KeysmithError where error.code == .corruptData {
                // A damaged token is deleted as it is: deleting is its repair.
                return Built([.delete(key)], [Event("delete", service, account, [], "deleted a damaged token")], ())
            }
            guard let current else {
                throw KeysmithError(.itemNotFound, "there is no token for \(account) at \(service)")
            }
            return Built([.delete(key, ifVersion: current.version)], [Event("delete", service, account, [], "deleted")], ())
        }
    }

    /// Ends a token here and commits other records with it, in one commit with one audit
    /// entry: the scopes named (every scope when `scopes` is `nil`) revoked and the token made
    /// inactive, as ``revokeAll(service:account:reason:)`` does, or with `deleting` the token
    /// deleted. `alongside` is given the token as it was read and returns the operations to
    /// commit beside the change (the KeysmithProvider module queues the revocation at the
    /// provider this way: the local revocation and the queued one are durable together or not
    /// at all). A token already inactive is committed again when `alongside` returns operations.
    ///
    /// ```swift
    /// try keeper.endToken(service: "news", account: "bob", scopes: nil, reason: "left the team", event: "revoke-all") { token in
    ///     [.create(ItemAttributes(key: myRecordKey), secret: Data(token.refreshToken!.utf8))]
    /// }
    /// ```
    ///
    /// - Throws: `KeysmithError.Code.itemNotFound` for no such token, or a scope it never had;
    ///   what `alongside` throws; a store failure. Nothing is committed then.
    @discardableResult
    public func endToken(service: String, account: String, scopes: [Scope]?, deleting: Bool = false, reason: String, event: String,
                         alongside: (OAuthToken) throws -> [StoreOperation]) throws -> OAuthToken {
        try withoutActuallyEscaping(alongside) { alongside in
            try run(endTokenChange(service: service, account: account, scopes: scopes, deleting: deleting, reason: reason, event: event,
                                   alongside: alongside))
        }
    }

    func endTokenChange(service: String, account: String, scopes: [Scope]?, deleting: Bool, reason: String, event: String,
                        alongside: @escaping (OAuthToken) throws -> [StoreOperation]) -> Change<OAuthToken> {
        let time = now
        return Change(time: time, reading: [Self.key(service: service, account: account)]) { records in
            guard let (read, version, record) = try Self.decoded([(service, account)], try records.get())[0] else {
                throw KeysmithError(.itemNotFound, "there is no token for \(account) at \(service)")
            }
            var extra = try alongside(read)
            var token = read
            if let scopes {
                for scope in scopes { _ = try token.revoke(scope, reason: reason, at: time) }
            }
            _ = token.revokeAll(reason: reason, at: time)
            let touched = token.scopes.filter { read.scopes[$0.key]?.state != $0.value.state }.map(\.key.rawValue).sorted()
            if deleting {
                extra.insert(.delete(Self.key(service: service, account: account), ifVersion: version), at: 0)
                return Built(extra, [Event(event, service, account, touched, reason)], token)
            }
            return Built([Self.tokenReplace(StoredToken(service: service, account: account, token: token), over: record)] + extra,
                         [Event(event, service, account, touched, reason)], token)
        }
    }

    /// Appends one audit entry, with other operations in the same commit (for modules that
    /// keep records of their own beside the tokens: the provider's revocation outbox records
    /// each confirmation and failure this way).
    ///
    /// - Parameters:
    ///   - event: The entry's event, such as `provider-revoke`.
    ///   - service: The token's service (`*` for none).
    ///   - account: The token's account (`*` for none).
    ///   - detail: What happened, for people (never a secret).
    ///   - alongside: Operations committed with the entry.
    ///   - tokens: The tokens the entry is about, for an entry about many (`ACCOUNT at SERVICE`).
    public func recordEvent(_ event: String, service: String, account: String, detail: String, tokens: [TokenReference] = [],
                            alongside: [StoreOperation] = []) throws {
        try run(eventChange(event, service: service, account: account, detail: detail, tokens: tokens, alongside: alongside))
    }

    func eventChange(_ event: String, service: String, account: String, detail: String, tokens: [TokenReference] = [],
                     alongside: [StoreOperation] = []) -> Change<Void> {
        Change(time: now, reading: []) { _ in
            Built(alongside, [Event(event, service, account, [], detail, tokens: tokens.map(\.description))], ())
        }
    }

    /// Verifies the audit log's hash chain, and against ``auditAnchor`` that the log still
    /// reaches the newest entry this machine saw, unchanged. An intact log moves the anchor up.
    public func verifyAuditLog() throws -> AuditVerification { try AuditLog.verify(in: store, anchor: auditAnchor) }

    /// Makes the anchor accept the audit log as it is now (after a deliberate restore of the
    /// store from a backup), then verifies it.
    public func acceptAuditLog() throws -> AuditVerification {
        auditAnchor?.reset(for: store)
        return try verifyAuditLog()
    }

    /// Repairs what damage left of the audit log, so that token changes can be recorded again
    /// (a head that does not read stops every one): each entry that does not read is replaced
    /// by a `damaged` marker, and the head is rebuilt to name the last entry; then an
    /// `audit-repair` entry records the repair. The loss stays visible: ``verifyAuditLog()``
    /// reports every marker, so the log never passes as whole again. A PostgreSQL audit log
    /// is append-only: its damaged entries cannot be replaced (``AuditRepair/entriesLeft``),
    /// only its head.
    ///
    /// ```swift
    /// let repair = try keeper.repairAuditLog()
    /// if repair.changed { print("repaired: head \(repair.headRebuilt), entries \(repair.entriesReplaced)") }
    /// ```
    public func repairAuditLog() throws -> AuditRepair {
        let time = now
        var plan = try AuditLog.planRepair(in: store, at: time, actor: actor)
        var replaced = plan.markers.map(\.sequence), left: [Int] = []
        do {
            // The markers and the head in one commit: an interrupted repair did nothing.
            let writes = plan.markers.map(\.operation) + (plan.head.map { [$0] } ?? [])
            if !writes.isEmpty { try store.perform(writes) }
        } catch let error as KeysmithError where error.code == .invalidArgument && !plan.markers.isEmpty {
            // An append-only log refuses to replace entries: they stay damaged. The head is
            // then rebuilt only if it does not read, from what the entries say without markers.
            left = replaced
            replaced = []
            plan = try AuditLog.planRepair(in: store, at: time, actor: actor, markDamaged: false)
            if !plan.headDamaged { plan.head = nil }  // a head that reads keeps naming what it names
            if let head = plan.head { try store.perform([head]) }
        }
        let repair = AuditRepair(headRebuilt: plan.head != nil, entriesReplaced: replaced, entriesLeft: left)
        guard repair.changed else { return repair }
        let detail = "repaired the audit log: head \(repair.headRebuilt ? "rebuilt" : "kept"); "
            + "entries replaced by markers: \(replaced.isEmpty ? "none" : replaced.map(String.init).joined(separator: " "))"
            + (left.isEmpty ? "" : "; entries left damaged (append-only log): \(left.map(String.init).joined(separator: " "))")
        try run(Change(time: time, reading: []) { _ in Built([], [Event("audit-repair", "*", "*", [], detail)], ()) })
        return repair
    }

    /// Records a repair of the store itself (`keysmith vault repair`) in the audit log: one
    /// `store-repair` entry whose detail is `summary` (what the repair kept and what may be lost;
    /// never a secret). When the audit log's own records did not survive the damage, it is
    /// repaired first (``repairAuditLog()``, which leaves its own entry), so the entry is written.
    ///
    /// - Throws: `KeysmithError.Code.corruptData` when the audit log cannot be repaired either.
    public func recordStoreRepair(_ summary: String) throws {
        let append = { try self.run(self.eventChange("store-repair", service: "*", account: "*", detail: summary)) }
        do {
            try append()
        } catch let error as KeysmithError where error.code == .corruptData || error.code == .duplicateItem || error.code == .writeConflict {
            _ = try repairAuditLog()
            try append()
        }
    }

    /// Every audit entry, in order.
    public func auditEntries() throws -> [AuditEntry] { try AuditLog.entries(in: store) }

    /// A change of one token (revoke, refresh, grant, update): `body` changes the token as read
    /// and says whether anything changed; the entry names `scopes`, or when none are given every
    /// scope whose state changed, and says `describe()` or else `detail`; `alongside` adds
    /// operations and entries to the same commit.
    private func change(
        service: String, account: String, event: String, scopes: [String], detail: String,
        _ body: @escaping (inout OAuthToken, Date) throws -> Bool, describe: (() -> String)? = nil,
        alongside: ((OAuthToken) throws -> (operations: [StoreOperation], events: [Event]))? = nil
    ) -> Change<OAuthToken> {
        let time = now
        return Change(time: time, reading: [Self.key(service: service, account: account)]) { records in
            guard let (read, _, record) = try Self.decoded([(service, account)], try records.get())[0] else {
                throw KeysmithError(.itemNotFound, "there is no token for \(account) at \(service)")
            }
            var token = read
            let changed = try body(&token, time)
            guard changed else { return Built([], [], token) }
            // The scopes the entry names: those given, else every scope whose state changed.
            let touched = scopes.isEmpty
                ? token.scopes.filter { read.scopes[$0.key]?.state != $0.value.state }.map(\.key.rawValue).sorted()
                : scopes
            let extra: (operations: [StoreOperation], events: [Event]) = try alongside?(token) ?? ([], [])
            return Built([Self.tokenReplace(StoredToken(service: service, account: account, token: token), over: record)] + extra.operations,
                         [Event(event, service, account, touched, describe?() ?? detail)] + extra.events, token)
        }
    }

    typealias Event = AuditLog.Event

    /// The store operation that writes a changed token back over the record it was read from,
    /// if that record is still at the version read (``StoreOperation/replace(_:)``: the store
    /// checks the version without decrypting the record again).
    static func tokenReplace(_ stored: StoredToken, over record: SecureRecord) -> StoreOperation {
        var replaced = record
        replaced.info.attributes = stored.attributes.merged(over: record.attributes)
        replaced.secret = stored.secret
        return .replace(replaced)
    }

    /// The store operation that writes a token: replacing the record at `version`, or creating
    /// it when `version` is `nil`. Only the operation is kept (a bulk change holds one per token:
    /// the decoded token is dropped as soon as it is encoded).
    static func tokenWrite(_ stored: StoredToken, replacing version: ItemVersion?) -> StoreOperation {
        if let version {
            .update(stored.attributes, secret: stored.secret, ifVersion: version)
        } else {
            .create(stored.attributes, secret: stored.secret)
        }
    }

    // MARK: Running a change

    /// A token as read, with the store's version of its record, for a conditional write.
    typealias Versioned = (token: OAuthToken, version: ItemVersion, record: SecureRecord)

    /// One change of tokens and the audit log, apart from its I/O: which token records to read,
    /// and the batch to commit given what was read. The same change runs synchronously
    /// (``run(_:attempts:)``) or awaiting the store (``runAwaiting(_:attempts:)``): the logic of
    /// every change is written once, and only the reading and the writing differ.
    struct Change<Output> {
        /// When the change happens: the audit entries' time.
        var time: Date
        /// The token records read, in one read, at each attempt before ``build``.
        var reading: [ItemKey]
        /// A scan run at each attempt before ``build`` (a bulk change's read), or none.
        var scanning: ChangeScan? = nil
        /// The batch for what was read (or why it could not be read: a change that repairs a
        /// damaged record goes on without it), and the caller's result. Called once per
        /// attempt, with fresh reads each time.
        var build: (_ read: Result<[SecureRecord?], any Error>) throws -> Built<Output>

        /// The same change with its result transformed.
        func map<Other>(_ transform: @escaping (Output) -> Other) -> Change<Other> {
            let build = self.build
            return Change<Other>(time: time, reading: reading, scanning: scanning) { read in
                let built = try build(read)
                return Built<Other>(built.operations, built.events, transform(built.output))
            }
        }
    }

    /// The scan a bulk change reads with: `start` resets what the change gathers, then `each`
    /// is given the matching records a chunk at a time (each record read and decrypted once).
    struct ChangeScan {
        var query: ItemQuery
        var chunkSize: Int
        var start: () -> Void
        var each: ([SecureRecord], ScanProgress) throws -> Void
    }

    /// What one attempt of a ``Change`` commits: token writes and other operations, then
    /// audit entries for `events` (no events: nothing is committed), and the caller's result.
    struct Built<Output> {
        var operations: [StoreOperation]
        var events: [Event]
        var output: Output

        init(_ operations: [StoreOperation], _ events: [Event], _ output: Output) {
            self.operations = operations
            self.events = events
            self.output = output
        }
    }

    /// Runs a change: reads the audit log's head and the change's tokens, builds its batch,
    /// and commits it with its audit entries, every write conditional on what was read. When
    /// another writer changed a token or appended to the audit log in between, the batch fails
    /// as a whole (a duplicate or a write conflict, nothing of it applied) and the change is
    /// read and built again, up to `attempts` times.
    func run<Output>(_ change: Change<Output>, attempts: Int = 200) throws -> Output {
        var attempt = 0
        while true {
            attempt += 1
            let head = try AuditLog.head(from: try store.read(AuditLog.headKey))
            if let scan = change.scanning {
                scan.start()
                try store.forEachRecord(matching: scan.query, chunkSize: scan.chunkSize, scan.each)
            }
            let read = change.reading.isEmpty ? .success([]) : Result { try store.read(change.reading) }
            var built = try change.build(read)
            guard let newHead = try appendAudit(to: &built, after: head, at: change.time) else { return built.output }
            do {
                try store.perform(built.operations)
                auditAnchor?.advance(for: store, to: newHead)
                return built.output
            } catch let error as KeysmithError where Self.anotherWriterWentFirst(error) && attempt < attempts {
                continue  // read again and retry
            }
        }
    }

    /// ``run(_:attempts:)`` for async code: the same reads, batch and retries, each read and
    /// the commit awaited through the store's async API when it has one (`AsyncSecureStore`),
    /// so no thread is held while the store answers. Cancellation is checked before each
    /// attempt; a commit already sent is awaited (the store's rule).
    func runAwaiting<Output>(_ change: Change<Output>, attempts: Int = 200) async throws -> Output {
        var attempt = 0
        while true {
            attempt += 1
            try Task.checkCancellation()
            let head = try AuditLog.head(from: try await store.readAwaiting([AuditLog.headKey])[0])
            if let scan = change.scanning {
                scan.start()
                try await store.forEachRecordAwaiting(matching: scan.query, chunkSize: scan.chunkSize, scan.each)
            }
            let read: Result<[SecureRecord?], any Error>
            if change.reading.isEmpty {
                read = .success([])
            } else {
                do { read = .success(try await store.readAwaiting(change.reading)) } catch { read = .failure(error) }
            }
            var built = try change.build(read)
            guard let newHead = try appendAudit(to: &built, after: head, at: change.time) else { return built.output }
            do {
                try await store.performAwaiting(built.operations)
                auditAnchor?.advance(for: store, to: newHead)
                return built.output
            } catch let error as KeysmithError where Self.anotherWriterWentFirst(error) && attempt < attempts {
                continue  // read again and retry
            }
        }
    }

    /// Appends to the attempt's operations the audit entries for its events, after `head`, and
    /// the head's update, in place (a bulk change's hundred thousand writes are not copied).
    /// - Returns: The new head; `nil` when there is nothing to commit.
    private func appendAudit<Output>(to built: inout Built<Output>, after head: AuditLog.ReadHead, at time: Date) throws -> AuditLog.Head? {
        guard !built.events.isEmpty else { return nil }
        let appended = try AuditLog.appendOperations(built.events, after: head, at: time, actor: actor)
        built.operations += appended.operations
        return appended.head
    }

    /// Whether a failed commit met another writer's change (the batch is read and built again).
    private static func anotherWriterWentFirst(_ error: KeysmithError) -> Bool {
        error.code == .duplicateItem || error.code == .writeConflict
    }
}
