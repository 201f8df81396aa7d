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
            for record in records {
                guard case .keysmithRecord(let key) = record.key else { continue }
                let token = try TokenCodec.decode(Array(record.secret), what: "the token for \(key.account) at \(key.service)")
                if let client = filter.clientID, token.clientID != client { continue }
                if let subject = filter.subject, token.subject != subject { continue }
                found.append((TokenReference(service: key.service, account: key.account), token))
            }
        }
        return found.sorted { ($0.reference.service, $0.reference.account) < ($1.reference.service, $1.reference.account) }
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
        let time = now
        let token = try OAuthToken(response: response, requested: requested, clientID: clientID, subject: subject,
                                   issuer: issuer, audience: audience, now: time)
        try commit(at: time) { _ in
            let granted = token.scopes.filter { $0.value.state == .granted }.map(\.key.rawValue).sorted()
            let declined = token.scopes.filter { $0.value.state == .declined }.map(\.key.rawValue).sorted()
            let imported = "granted: \(granted.joined(separator: " ")); declined: \(declined.joined(separator: " "))"
            let found: (token: OAuthToken, version: ItemVersion, record: SecureRecord)?
            do {
                found = try versionedToken(service: service, account: account)
            } catch let error as KeysmithError where error.code == .corruptData && replacing {
                // The stored token is damaged: replacing it is its repair (the new record
                // supersedes the damaged one); nothing of the old one can be kept.
                let stored = StoredToken(service: service, account: account, token: token)
                return ([.upsert(stored.attributes, secret: stored.secret)],
                        [Event("replace", service, account, granted + declined, "replaced a damaged token; " + imported)])
            }
            guard let existing = found else {
                return ([Self.tokenWrite(StoredToken(service: service, account: account, token: token), replacing: nil)],
                        [Event("import", service, account, granted + declined, "imported; " + imported)])
            }
            guard replacing else {
                throw KeysmithError(.duplicateItem, "a token is kept for \(account) at \(service) already; update it, or replace it")
            }
            // Say what the replacement discards: revocations and a log-out.
            let revoked = existing.token.scopes.filter { $0.value.state == .revoked }.map(\.key.rawValue).sorted()
            let discarded = (revoked.isEmpty ? "" : "; discards the revocation of \(revoked.joined(separator: " "))")
                + (existing.token.revokedAt == nil ? "" : "; ends a log-out")
            return ([Self.tokenWrite(StoredToken(service: service, account: account, token: token), replacing: existing.version)],
                    [Event("replace", service, account, granted + declined, "replaced; " + imported + discarded)])
        }
        return token
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
        var imported: [TokenReference] = [], updated: [TokenReference] = []
        try commit(at: time) { _ in
            imported = []
            updated = []
            var writes: [StoreOperation] = []
            // One read for the whole batch (a store that can, PostgreSQL, answers it in one
            // query: read one at a time, 20,000 tokens took 53 s there).
            let kept = try versionedTokens(imports.map { (service: $0.service, account: $0.account) })
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
            guard !writes.isEmpty else { return ([], []) }
            let detail = "batch of \(writes.count): \(imported.count) imported, \(updated.count) " + (replacing ? "replaced" : "updated")
            return (writes, [Event("import-batch", "*", "*", [], detail, tokens: (imported + updated).map(\.description))])
        }
        return (imported, updated)
    }

    /// Revokes scopes of one token.
    ///
    /// - Returns: The token after the change.
    /// - Throws: `KeysmithError.Code.itemNotFound` for an unknown token or a scope the token
    ///   never heard of (nothing changes then); a store failure.
    @discardableResult
    public func revoke(_ scopes: [Scope], service: String, account: String, reason: String) throws -> OAuthToken {
        try change(service: service, account: account, event: "revoke", scopes: scopes.map(\.rawValue), detail: reason) { token, time in
            var changed = false
            for scope in scopes { changed = try token.revoke(scope, reason: reason, at: time) || changed }
            return changed
        }
    }

    /// Revokes everything (log-out): every scope revoked, the token inactive.
    @discardableResult
    public func revokeAll(service: String, account: String, reason: String) throws -> OAuthToken {
        try change(service: service, account: account, event: "revoke-all", scopes: [], detail: reason) { token, time in
            token.revokeAll(reason: reason, at: time)
        }
    }

    /// Applies a refresh response (which may narrow the grant, never widen it).
    @discardableResult
    public func refresh(_ response: Data, service: String, account: String) throws -> OAuthToken {
        try strictRefresh(response, service: service, account: account, detail: "refreshed")
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
        var ignored: Set<Scope> = []
        return try change(service: service, account: account, event: "refresh", scopes: [], detail: detail, { token, time in
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

    private func strictRefresh(_ response: Data, service: String, account: String, detail: String) throws -> OAuthToken {
        try change(service: service, account: account, event: "refresh", scopes: [], detail: detail) { token, time in
            try token.applyRefresh(response: response, at: time)
            return true
        }
    }

    /// Applies an incremental grant (which adds to the granted set; re-requested declined scopes
    /// become granted this way).
    @discardableResult
    public func grant(_ response: Data, requested: Set<Scope>, service: String, account: String) throws -> OAuthToken {
        try change(service: service, account: account, event: "grant", scopes: requested.map(\.rawValue), detail: "incremental grant") { token, time in
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
        var outcome = OAuthToken.UpdateOutcome()
        var regranted: [String] = []
        let token = try change(service: service, account: account, event: "update", scopes: [], detail: "new token response") { token, time in
            let before = token
            outcome = try token.applyUpdate(response: response, requested: requested, allowRegrant: allowRegrant, at: time)
            regranted = outcome.granted.filter { before.scopes[$0]?.state == .revoked }.map(\.rawValue).sorted()
            return true
        } describe: {
            // The entry names every scope whose state changed (change() does) and says how.
            var parts = ["new token response"]
            if !outcome.granted.isEmpty { parts.append("granted \(Scope.formatList(outcome.granted))") }
            if !regranted.isEmpty { parts.append("granted again after a revocation (--allow-regrant): \(regranted.joined(separator: " "))") }
            if !outcome.dropped.isEmpty { parts.append("dropped \(Scope.formatList(outcome.dropped))") }
            if !outcome.keptRevoked.isEmpty { parts.append("kept revoked \(Scope.formatList(outcome.keptRevoked))") }
            return parts.joined(separator: "; ")
        }
        return (token, outcome)
    }

    /// Deletes a token (the audit log keeps its history). A token whose record is damaged is
    /// deleted too: that repairs it (the audit entry says so).
    public func delete(service: String, account: String) throws {
        let key = Self.key(service: service, account: account)
        var deletion: [StoreOperation] = []
        try commit(at: now) { _ in
            let current: (token: OAuthToken, version: ItemVersion, record: SecureRecord)?
            do {
                current = try self.versionedToken(service: service, account: account)
            } catch let error as KeysmithError where error.code == .corruptData {
                // A damaged token is deleted as it is: deleting is its repair.
                deletion = [.delete(key)]
                return ([], [Event("delete", service, account, [], "deleted a damaged token")])
            }
            guard let current else {
                throw KeysmithError(.itemNotFound, "there is no token for \(account) at \(service)")
            }
            deletion = [.delete(key, ifVersion: current.version)]
            return ([], [Event("delete", service, account, [], "deleted")])
        } extra: { deletion }
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
        let time = now
        var result: OAuthToken?
        var extra: [StoreOperation] = []
        try commit(at: time) { _ in
            guard let (read, version, record) = try self.versionedToken(service: service, account: account) else {
                throw KeysmithError(.itemNotFound, "there is no token for \(account) at \(service)")
            }
            extra = try alongside(read)
            var token = read
            if let scopes {
                for scope in scopes { _ = try token.revoke(scope, reason: reason, at: time) }
            }
            _ = token.revokeAll(reason: reason, at: time)
            result = token
            let touched = token.scopes.filter { read.scopes[$0.key]?.state != $0.value.state }.map(\.key.rawValue).sorted()
            if deleting {
                extra.insert(.delete(Self.key(service: service, account: account), ifVersion: version), at: 0)
                return ([], [Event(event, service, account, touched, reason)])
            }
            return ([Self.tokenReplace(StoredToken(service: service, account: account, token: token), over: record)],
                    [Event(event, service, account, touched, reason)])
        } extra: { extra }
        guard let result else { throw KeysmithError(.itemNotFound, "there is no token for \(account) at \(service)") }
        return result
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
        try commit(at: now) { _ in ([], [Event(event, service, account, [], detail, tokens: tokens.map(\.description))]) } extra: { alongside }
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
        try commit(at: time) { _ in
            ([], [Event("audit-repair", "*", "*", [], "repaired the audit log: head \(repair.headRebuilt ? "rebuilt" : "kept"); "
                        + "entries replaced by markers: \(replaced.isEmpty ? "none" : replaced.map(String.init).joined(separator: " "))"
                        + (left.isEmpty ? "" : "; entries left damaged (append-only log): \(left.map(String.init).joined(separator: " "))"))])
        }
        return repair
    }

    /// Records a repair of the store itself (`keysmith vault repair`) in the audit log: one
    /// `store-repair` entry whose detail is `summary` (what the repair kept and what may be lost;
    /// never a secret). When the audit log's own records did not survive the damage, it is
    /// repaired first (``repairAuditLog()``, which leaves its own entry), so the entry is written.
    ///
    /// - Throws: `KeysmithError.Code.corruptData` when the audit log cannot be repaired either.
    public func recordStoreRepair(_ summary: String) throws {
        let append = { try self.commit(at: self.now) { _ in ([], [Event("store-repair", "*", "*", [], summary)]) } }
        do {
            try append()
        } catch let error as KeysmithError where error.code == .corruptData || error.code == .duplicateItem || error.code == .writeConflict {
            _ = try repairAuditLog()
            try append()
        }
    }

    /// Every audit entry, in order.
    public func auditEntries() throws -> [AuditEntry] { try AuditLog.entries(in: store) }

    private func change(
        service: String, account: String, event: String, scopes: [String], detail: String,
        _ body: (inout OAuthToken, Date) throws -> Bool, describe: (() -> String)? = nil,
        alongside: ((OAuthToken) throws -> (operations: [StoreOperation], events: [Event]))? = nil
    ) throws -> OAuthToken {
        let time = now
        var result: OAuthToken?
        try commit(at: time) { _ in
            guard let (read, _, record) = try self.versionedToken(service: service, account: account) else {
                throw KeysmithError(.itemNotFound, "there is no token for \(account) at \(service)")
            }
            var token = read
            let changed = try body(&token, time)
            result = token
            guard changed else { return ([], []) }
            // The scopes the entry names: those given, else every scope whose state changed.
            let touched = scopes.isEmpty
                ? token.scopes.filter { read.scopes[$0.key]?.state != $0.value.state }.map(\.key.rawValue).sorted()
                : scopes
            let extra: (operations: [StoreOperation], events: [Event]) = try alongside?(token) ?? ([], [])
            return ([Self.tokenReplace(StoredToken(service: service, account: account, token: token), over: record)] + extra.operations,
                    [Event(event, service, account, touched, describe?() ?? detail)] + extra.events)
        }
        guard let result else { throw KeysmithError(.itemNotFound, "there is no token for \(account) at \(service)") }
        return result
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

    /// Builds a batch from fresh reads and commits it with its audit entries, every write
    /// conditional on what was read; retries when another writer changed a token or appended to
    /// the audit log in between (the batch then fails as a duplicate or a write conflict, and
    /// nothing of it was applied).
    func commit(
        at time: Date, attempts: Int = 200,
        _ build: (Int) throws -> (tokens: [StoreOperation], events: [Event]),
        extra: () -> [StoreOperation] = { [] }
    ) throws {
        var attempt = 0
        while true {
            attempt += 1
            let head = try AuditLog.head(in: store)
            // The token writes become the batch in place: a bulk change is not copied.
            var (operations, events) = try build(attempt)
            guard !events.isEmpty else { return }
            operations += extra()
            let appended = try AuditLog.appendOperations(events, after: head, at: time, actor: actor)
            operations += appended.operations
            do {
                try store.perform(operations)
                auditAnchor?.advance(for: store, to: appended.head)
                return
            } catch let error as KeysmithError
                where (error.code == .duplicateItem || error.code == .writeConflict) && attempt < attempts
            {
                continue  // another writer went first: read again and retry
            }
        }
    }
}
