public import Keysmith
public import KeysmithTokens
public import Foundation

extension KeysmithRecordType {
    /// A revocation at a provider that is queued until the provider confirms it
    /// (``RevocationOutbox``); it holds the tokens to revoke, sealed like every record.
    public static let providerRevocation = KeysmithRecordType(rawValue: "provider-revocation")
}

/// One queued revocation, as ``RevocationOutbox/entries()`` lists it. Its tokens stay inside:
/// they are not public, and its description and reflection (`print`, `dump`) leave them out.
public struct QueuedRevocation: Sendable, Hashable, CustomStringConvertible, CustomReflectable {
    /// The entry's id.
    public var id: String
    /// The provider (the token's service).
    public var provider: String
    /// The token's account.
    public var account: String
    /// Why it was revoked.
    public var reason: String
    /// When it was queued.
    public var queuedAt: Date
    /// Requests made so far.
    public var attempts: Int
    /// When the next attempt is due.
    public var nextAttemptAt: Date
    /// The last failure, when there was one.
    public var lastError: String?
    /// `pending` (to be sent, or sent again), `failed` (the provider cannot revoke it: no
    /// revocation endpoint, or it refused for good) or `damaged` (its record does not decode:
    /// drop it); a confirmed one is removed.
    public var state: String
    /// The tokens still to revoke, refresh token first (kept in the record only).
    var tokens: [PendingToken]

    struct PendingToken: Sendable, Hashable, Codable {
        var token: String
        var hint: String
    }

    /// `STATE ID ACCOUNT at PROVIDER`, never a token.
    public var description: String { "\(state) \(id) \(account) at \(provider)" }

    /// Everything but the tokens.
    public var customMirror: Mirror {
        Mirror(self, children: ["id": id, "provider": provider, "account": account, "state": state, "attempts": attempts,
                                "queuedAt": queuedAt, "nextAttemptAt": nextAttemptAt, "lastError": lastError as Any, "reason": reason])
    }

    /// The record's JSON (internal: the tokens are in it).
    struct Stored: Codable {
        var id: String, provider: String, account: String, reason: String, queuedAt: Date, attempts: Int, nextAttemptAt: Date
        var lastError: String?, state: String, tokens: [PendingToken]
    }
}

/// Revocations at providers (RFC 7009), queued in the store in the same commit as the local
/// revocation and sent until each provider confirms: a revocation accepted here is durable at
/// once, survives the provider being down and the process being killed, and is sent again with
/// growing pauses (honouring `Retry-After`) until the provider answers 200. Every request,
/// confirmation and failure is an audit entry (without the token).
///
/// The refresh token is revoked first: a server that implements RFC 7009 §2.1 then drops the
/// grant's access tokens too; the access token is revoked after it.
///
/// ```swift
/// let outbox = RevocationOutbox(keeper: keeper)
/// try outbox.revoke(service: "news", account: "bob", reason: "left the team")   // local + queued, one commit
/// let report = await outbox.send()                                              // to the provider
/// ```
public struct RevocationOutbox: Sendable {
    /// The keeper of the tokens and the queue.
    public let keeper: TokenKeeper
    /// Each request's whole time.
    public var timeout: Duration
    /// Requests in flight at once to one provider.
    public var concurrency: Int

    /// The outbox of `keeper`'s store.
    public init(keeper: TokenKeeper, timeout: Duration = .seconds(30), concurrency: Int = 8) {
        self.keeper = keeper
        self.timeout = timeout
        self.concurrency = max(1, concurrency)
    }

    static func key(_ id: String, provider: String) -> ItemKey {
        .keysmithRecord(KeysmithRecordKey(recordType: .providerRevocation, service: provider, account: id))
    }

    /// Ends the token here (every scope revoked, the token inactive; with `deleting`, deleted)
    /// and queues its revocation at its provider, in one commit.
    ///
    /// - Parameters:
    ///   - scopes: The scopes the person named (recorded as revoked); the provider cannot take
    ///     back part of a grant, so the whole grant ends there and the token is inactive here.
    /// - Returns: The queued entry's id, or `nil` when the token holds nothing to revoke.
    /// - Throws: `KeysmithError.Code.itemNotFound` for no such token or no provider of its
    ///   service; ``ProviderError`` (``ProviderError/Kind/unsupported``) when the provider has
    ///   no revocation endpoint: nothing changes then, here either.
    @discardableResult
    public func revoke(service: String, account: String, scopes: [Scope]? = nil, deleting: Bool = false, reason: String) throws -> String? {
        try Self.checkRevocable(try ProviderRegistry(store: keeper.store).provider(named: service), service)
        let queue = Queued()
        try keeper.endToken(service: service, account: account, scopes: scopes, deleting: deleting,
                            reason: reason + " (queued for revocation at provider \(service))", event: deleting ? "delete" : "revoke-all",
                            alongside: entry(service: service, account: account, reason: reason, into: queue))
        return queue.ids.last
    }

    /// What a revocation queued: the ids of the entries its commit holds (the last attempt's
    /// last, for one token; every attempt's, for a bulk one, filtered by what was committed).
    final class Queued: @unchecked Sendable {
        // @unchecked: filled by one change's attempts, one after another, then read once.
        var ids: [String] = []
        var revocable: [String: Bool] = [:]
    }

    /// The provider named `service`, which must be kept and have a revocation endpoint.
    static func checkRevocable(_ provider: OAuthProvider?, _ service: String) throws {
        guard let provider else {
            throw KeysmithError(.itemNotFound, "there is no provider named \(service) to revoke the token at (see `keysmith provider list`)")
        }
        guard provider.revocationEndpoint != nil else {
            throw ProviderError(.unsupported, "provider \(OneLine.escaped(service)) has no revocation endpoint: the token cannot be revoked there; "
                                + "nothing was changed (revoke without --at-provider to end it here only)")
        }
    }

    /// The `alongside` of a token's end: the queued entry for the token as read.
    func entry(service: String, account: String, reason: String, into queue: Queued) -> (OAuthToken) throws -> [StoreOperation] {
        { token in
            queue.ids = []  // once per attempt: the last attempt's is the one committed
            guard let (id, operation) = try newEntry(provider: service, account: account, reason: reason,
                                                     refreshToken: token.refreshToken, accessToken: token.accessToken) else { return [] }
            queue.ids.append(id)
            return [operation]
        }
    }

    /// Revokes scopes across every matching token (`TokenKeeper.revokeEndingGrants(scopes:matching:reason:progress:alongside:)`)
    /// and queues each changed token's revocation at its provider, in one commit. Every
    /// matching token's service must be a provider with a revocation endpoint: otherwise
    /// nothing changes.
    ///
    /// - Returns: The bulk report, and the ids of the entries queued (send them with
    ///   ``send(force:only:)``).
    public func revoke(scopes: [Scope], matching filter: TokenFilter, reason: String) throws -> (report: BulkRevocationReport, queued: [String]) {
        let registry = ProviderRegistry(store: keeper.store)
        let queue = Queued()
        let report = try keeper.revokeEndingGrants(scopes: scopes, matching: filter, reason: reason + " (queued for revocation at the provider)",
                                                   alongside: entries(reason: reason, provider: { try registry.provider(named: $0) }, into: queue))
        // The build may have run more than once (a conflict retried): only ids committed count.
        let committed = Set(try entries().map(\.id))
        return (report, queue.ids.filter(committed.contains))
    }

    /// The `alongside` of a bulk revocation: each changed token's queued entry, once its
    /// service is known to be a provider with a revocation endpoint (`provider` looks it up).
    func entries(reason: String, provider: @escaping (String) throws -> OAuthProvider?, into queue: Queued)
        -> (TokenReference, OAuthToken) throws -> [StoreOperation]
    {
        { reference, token in
            let known = try queue.revocable[reference.service] ?? {
                guard let found = try provider(reference.service) else {
                    throw KeysmithError(.itemNotFound, "the token for \(reference) is kept under \(reference.service), which is no provider "
                                        + "(see `keysmith provider list`); nothing was revoked")
                }
                return found.revocationEndpoint != nil
            }()
            queue.revocable[reference.service] = known
            guard known else {
                throw ProviderError(.unsupported, "provider \(OneLine.escaped(reference.service)) has no revocation endpoint; nothing was revoked")
            }
            guard let (id, operation) = try newEntry(provider: reference.service, account: reference.account, reason: reason,
                                                     refreshToken: token.refreshToken, accessToken: token.accessToken) else { return [] }
            queue.ids.append(id)
            return [operation]
        }
    }

    /// Queues the revocation of the tokens in a token response (never kept as a token), with an
    /// audit entry saying why: the tokens a refresh obtained for a token that ended meanwhile.
    func queue(response: Data, provider: String, account: String, reason: String) async throws {
        let parsed = try TokenResponse.parse(response)
        guard let (_, operation) = try newEntry(provider: provider, account: account, reason: reason,
                                                refreshToken: parsed.refreshToken, accessToken: parsed.accessToken) else { return }
        try await keeper.awaiting.recordEvent("provider-revoke-queued", service: provider, account: account, detail: reason, alongside: [operation])
    }

    /// A new pending entry for these tokens (refresh token first) and the operation that
    /// creates its record; `nil` when there is no token to revoke.
    func newEntry(provider: String, account: String, reason: String, refreshToken: String?, accessToken: String) throws
        -> (id: String, operation: StoreOperation)?
    {
        var tokens: [QueuedRevocation.PendingToken] = []
        if let refreshToken { tokens.append(.init(token: refreshToken, hint: "refresh_token")) }
        if !accessToken.isEmpty { tokens.append(.init(token: accessToken, hint: "access_token")) }
        guard !tokens.isEmpty else { return nil }
        let id = Self.newID()
        let entry = QueuedRevocation(id: id, provider: provider, account: account, reason: reason, queuedAt: keeper.now, attempts: 0,
                                     nextAttemptAt: keeper.now, lastError: nil, state: "pending", tokens: tokens)
        return (id, .create(ItemAttributes(key: Self.key(id, provider: provider), label: "revocation at \(provider)"), secret: try Self.encode(entry)))
    }

    /// Makes every failed entry pending again (due now), after the cause was mended (the
    /// provider added again, its secret replaced), with an audit entry.
    ///
    /// - Returns: How many entries were failed.
    @discardableResult
    public func retryFailed() throws -> Int {
        var operations: [StoreOperation] = []
        var accounts: [TokenReference] = []
        try keeper.store.forEachRecord(matching: ItemQuery(recordType: .providerRevocation), chunkSize: 512) { records, _ in
            for record in records {
                var entry = try Self.decode(record.secret)
                guard entry.state == "failed" else { continue }
                entry.state = "pending"
                entry.nextAttemptAt = keeper.now
                var updated = record
                updated.secret = try Self.encode(entry)
                operations.append(.replace(updated))
                accounts.append(TokenReference(service: entry.provider, account: entry.account))
            }
        }
        guard !operations.isEmpty else { return 0 }
        try keeper.recordEvent("provider-revoke-retry", service: "*", account: "*",
                               detail: "\(operations.count) failed revocation(s) at providers made pending again", tokens: accounts, alongside: operations)
        return operations.count
    }

    /// Gives up one queued revocation: the entry (and the tokens it holds) is removed without
    /// being sent, with a `provider-revoke-dropped` audit entry. For a provider that is gone
    /// for good; the token may still work there.
    ///
    /// - Throws: `KeysmithError.Code.itemNotFound` for no such entry.
    public func drop(id: String, reason: String) throws {
        guard let entry = try entries().first(where: { $0.id == id }) else {
            throw KeysmithError(.itemNotFound, "no queued revocation has the id \(OneLine.escaped(String(id.prefix(64))))")
        }
        try keeper.recordEvent("provider-revoke-dropped", service: entry.provider, account: entry.account,
                               detail: "the revocation at provider \(entry.provider) was given up, unsent: \(reason)",
                               alongside: [.delete(Self.key(id, provider: entry.provider))])
    }

    /// Every queued revocation, oldest first.
    /// A record that does not decode is listed as `damaged` (its provider and id from its key),
    /// so that one bad record neither stops the others nor hides from ``drop(id:reason:)``.
    public func entries() throws -> [QueuedRevocation] {
        var found: [QueuedRevocation] = []
        try keeper.store.forEachRecord(matching: ItemQuery(recordType: .providerRevocation), chunkSize: 512) { records, _ in
            Self.collect(records, into: &found)
        }
        return Self.sorted(found)
    }

    /// ``entries()``, the scan awaited through the store's async API when it has one.
    func entriesAwaiting() async throws -> [QueuedRevocation] {
        var found: [QueuedRevocation] = []
        try await keeper.store.forEachRecordAwaiting(matching: ItemQuery(recordType: .providerRevocation), chunkSize: 512) { records, _ in
            Self.collect(records, into: &found)
        }
        return Self.sorted(found)
    }

    /// The queued revocations of a scan's chunk, a damaged one listed as `damaged`.
    private static func collect(_ records: [SecureRecord], into found: inout [QueuedRevocation]) {
        for record in records {
            if let entry = try? decode(record.secret) {
                found.append(entry)
            } else if case .keysmithRecord(let key) = record.key {
                found.append(QueuedRevocation(id: key.account, provider: key.service, account: "?", reason: "", queuedAt: record.info.created,
                                              attempts: 0, nextAttemptAt: record.info.created, lastError: "its record does not decode",
                                              state: "damaged", tokens: []))
            }
        }
    }

    private static func sorted(_ found: [QueuedRevocation]) -> [QueuedRevocation] {
        found.sorted { ($0.queuedAt, $0.id) < ($1.queuedAt, $1.id) }
    }

    /// What ``RevocationOutbox/send(force:only:)`` did.
    public struct SendReport: Sendable, Hashable {
        /// Entries the provider confirmed (removed from the queue).
        public var confirmed: Int = 0
        /// Entries still pending (sent and failed for now, or not due yet).
        public var pending: Int = 0
        /// Entries that failed for good (kept, with why).
        public var failed: Int = 0
        /// What became of each entry sent, by id: `confirmed`, `pending`, `failed`, or `gone`
        /// (finished by another process meanwhile).
        public var outcomes: [String: String] = [:]
        /// An empty report.
        public init() {}
    }

    /// Sends every pending entry that is due (all of them with `force`), at most
    /// ``concurrency`` requests at a time per provider. Each entry is sent under its own named
    /// lock, held until its outcome is committed, so two processes never send the same one;
    /// it is read again after the lock (another process may have finished it). Confirmations
    /// are committed in batches of up to 64, each batch one audit entry naming its tokens: a
    /// process killed before a batch's commit sends those again (revocation is idempotent,
    /// RFC 7009 §2.2), and forgets none.
    ///
    /// - Parameters:
    ///   - force: Send pending entries whatever their back-off.
    ///   - only: Send only these entries (those a command just queued); `nil` for all.
    /// - Throws: A store failure reading the queue.
    public func send(force: Bool = false, only: Set<String>? = nil) async throws -> SendReport {
        var report = SendReport()
        let all = try await entriesAwaiting().filter { only?.contains($0.id) ?? true }
        let due = all.filter { $0.state == "pending" && (force || $0.nextAttemptAt <= keeper.now) }
        report.pending = all.filter { $0.state == "pending" }.count - due.count
        report.failed = all.filter { $0.state == "failed" }.count
        for (provider, group) in Dictionary(grouping: due, by: \.provider) {
            var next = group.makeIterator()
            var batch: [Outcome] = []
            func flush() async {
                let confirmed = batch.filter { $0.state == "confirmed" && $0.operation != nil }
                if !confirmed.isEmpty {
                    do {
                        // Recorded even when this task is cancelled meanwhile: the provider has
                        // confirmed them (a task of its own, which the cancellation does not reach).
                        try await Task { [keeper] in
                            try await keeper.awaiting.recordEvent(
                                "provider-revoke", service: provider, account: confirmed.count == 1 ? confirmed[0].account : "*",
                                detail: "revoked at provider \(provider): \(confirmed.count) token(s) confirmed",
                                tokens: confirmed.map { TokenReference(service: provider, account: $0.account) },
                                alongside: confirmed.compactMap(\.operation))
                        }.value
                    } catch {
                        // Not recorded: they stay queued, and are sent again (idempotent).
                        report.confirmed -= confirmed.count
                        report.pending += confirmed.count
                        for outcome in confirmed { report.outcomes[outcome.id] = "pending" }
                    }
                }
                for outcome in batch { await outcome.lock?.awaitRelease() }
                batch = []
            }
            await withTaskGroup(of: Outcome.self) { tasks in
                var running = 0
                while running < concurrency, let entry = next.next() {
                    tasks.addTask { await self.sendOne(entry) }
                    running += 1
                }
                for await outcome in tasks {
                    report.outcomes[outcome.id] = outcome.state
                    switch outcome.state {
                    case "confirmed": report.confirmed += 1
                    case "failed": report.failed += 1
                    case "gone": break
                    default: report.pending += 1
                    }
                    batch.append(outcome)
                    if batch.count >= 64 { await flush() }
                    if let entry = next.next() { tasks.addTask { await self.sendOne(entry) } }
                }
            }
            await flush()
        }
        return report
    }

    /// What sending one entry came to: its state, the operation that records it (the entry's
    /// removal), and its lock, held until that is committed.
    struct Outcome: Sendable {
        var id: String
        var state: String
        var account: String
        var operation: StoreOperation?
        var lock: (any HeldLock)?
    }

    /// Sends one entry. A failure is committed at once (with its audit entry); a confirmation
    /// is returned for the batch's commit.
    private func sendOne(_ listed: QueuedRevocation) async -> Outcome {
        let key = Self.key(listed.id, provider: listed.provider)
        guard let locks = keeper.store as? any ExclusiveLocking,
              let lock = try? await locks.awaitLock(named: "outbox \(listed.provider)\u{0}\(listed.id)")
        else { return Outcome(id: listed.id, state: "pending", account: listed.account) }  // another process is sending it
        let record: SecureRecord
        var entry: QueuedRevocation
        do {
            guard let read = try await keeper.store.readAwaiting([key])[0] else {
                await lock.awaitRelease()
                return Outcome(id: listed.id, state: "gone", account: listed.account)  // confirmed by another process meanwhile
            }
            record = read
            entry = try Self.decode(read.secret)
        } catch {
            await lock.awaitRelease()  // unreadable now: left as it is, for the next attempt
            return Outcome(id: listed.id, state: (error as? KeysmithError)?.code == .corruptData ? "failed" : "pending", account: listed.account)
        }
        guard entry.state == "pending" else {
            await lock.awaitRelease()
            return Outcome(id: listed.id, state: entry.state, account: listed.account)
        }
        do {
            guard let client = try await ProviderRegistry(store: keeper.store).clientAwaiting(named: entry.provider, timeout: timeout) else {
                throw ProviderError(.unsupported, "provider \(OneLine.escaped(entry.provider)) is no longer kept")
            }
            entry.attempts += 1
            let endedGrant = entry.tokens.first?.hint == "refresh_token"
            while let first = entry.tokens.first {
                do {
                    try await client.revoke(first.token, hint: first.hint)
                } catch let error as ProviderError
                    where error.oauthError == "unsupported_token_type" && first.hint == "access_token" && (endedGrant || entry.attempts > 1)
                {
                    // RFC 7009 §2.2.1: the server does not revoke access tokens by themselves;
                    // the grant they belong to ended with its refresh token.
                }
                entry.tokens.removeFirst()
            }
            return Outcome(id: entry.id, state: "confirmed", account: entry.account, operation: .delete(key, ifVersion: record.info.version), lock: lock)
        } catch {
            // The lock is released once the failure is committed (or could not be).
            let failure: ProviderError
            let transient: Bool
            if let error = error as? ProviderError {
                failure = error
                transient = error.isTransient
            } else {
                // The store or the provider's description: waiting may help only a store that
                // is away for now (or a send cancelled); a missing secret or a bad description
                // needs a person.
                let code = (error as? KeysmithError)?.code
                failure = ProviderError(.unsupported, (error as? KeysmithError)?.message ?? "\(type(of: error))")
                transient = [.storeUnavailable, .storeLocked, .timedOut, .writeConflict].contains(code) || error is CancellationError
            }
            // What the server wrote is escaped already; it never gets to repeat a token here.
            var message = failure.message
            for pending in entry.tokens where !pending.token.isEmpty { message = message.replacingOccurrences(of: pending.token, with: "[token]") }
            entry.lastError = message
            if transient {
                // 2, 4, 8 … s, at most 15 min; a Retry-After the provider sent wins.
                let pause = failure.retryAfter.map(Double.init) ?? min(900, pow(2, Double(min(entry.attempts, 10))))
                entry.nextAttemptAt = keeper.now.addingTimeInterval(pause)
            } else {
                entry.state = "failed"
            }
            var updated = record
            guard let secret = try? Self.encode(entry) else {
                await lock.awaitRelease()
                return Outcome(id: entry.id, state: "pending", account: entry.account)
            }
            updated.secret = secret
            try? await keeper.awaiting.recordEvent(
                transient ? "provider-revoke-retry" : "provider-revoke-failed", service: entry.provider, account: entry.account,
                detail: "revocation at provider \(entry.provider) " + (transient ? "will be retried" : "failed") + ": \(message)",
                alongside: [.replace(updated)])
            await lock.awaitRelease()
            return Outcome(id: entry.id, state: transient ? "pending" : "failed", account: entry.account)
        }
    }

    static func newID() -> String {
        let bytes = (0..<12).map { _ in UInt8.random(in: 0...255) }
        return bytes.hexString
    }

    static func encode(_ entry: QueuedRevocation) throws -> Data {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .secondsSince1970
        return try encoder.encode(QueuedRevocation.Stored(id: entry.id, provider: entry.provider, account: entry.account, reason: entry.reason,
                                                          queuedAt: entry.queuedAt, attempts: entry.attempts, nextAttemptAt: entry.nextAttemptAt,
                                                          lastError: entry.lastError, state: entry.state, tokens: entry.tokens))
    }

    static func decode(_ data: Data) throws -> QueuedRevocation {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .secondsSince1970
        do {
            let stored = try decoder.decode(QueuedRevocation.Stored.self, from: data)
            return QueuedRevocation(id: stored.id, provider: stored.provider, account: stored.account, reason: stored.reason, queuedAt: stored.queuedAt,
                                    attempts: stored.attempts, nextAttemptAt: stored.nextAttemptAt, lastError: stored.lastError, state: stored.state,
                                    tokens: stored.tokens)
        } catch {
            throw KeysmithError(.corruptData, "a queued revocation does not decode")
        }
    }
}

extension RevocationOutbox {
    /// This outbox's queueing and listing for async code: the same operations, whose reads and
    /// commits are awaited through the store's async API when it has one (`AsyncSecureStore`,
    /// the PostgreSQL store). ``send(force:only:)`` is async already.
    ///
    /// ```swift
    /// let id = try await outbox.awaiting.revoke(service: "news", account: "bob", reason: "left the team")
    /// _ = try await outbox.send(only: Set([id].compactMap { $0 }))
    /// ```
    public var awaiting: Awaiting { Awaiting(outbox: self) }

    /// A ``RevocationOutbox``'s operations, awaited (``RevocationOutbox/awaiting``): each does
    /// what the synchronous method of the same name does, and throws what it throws.
    public struct Awaiting: Sendable {
        /// The outbox whose operations these are.
        public let outbox: RevocationOutbox

        /// Ends the token here and queues its revocation at its provider, in one commit, as
        /// ``RevocationOutbox/revoke(service:account:scopes:deleting:reason:)``.
        @discardableResult
        public func revoke(service: String, account: String, scopes: [Scope]? = nil, deleting: Bool = false, reason: String) async throws -> String? {
            let keeper = outbox.keeper
            try RevocationOutbox.checkRevocable(try await ProviderRegistry(store: keeper.store).providerAwaiting(named: service), service)
            let queue = Queued()
            try await keeper.awaiting.endToken(service: service, account: account, scopes: scopes, deleting: deleting,
                                               reason: reason + " (queued for revocation at provider \(service))",
                                               event: deleting ? "delete" : "revoke-all",
                                               alongside: outbox.entry(service: service, account: account, reason: reason, into: queue))
            return queue.ids.last
        }

        /// Revokes scopes across every matching token and queues each changed token's
        /// revocation at its provider, in one commit, as
        /// ``RevocationOutbox/revoke(scopes:matching:reason:)``.
        public func revoke(scopes: [Scope], matching filter: TokenFilter, reason: String) async throws
            -> (report: BulkRevocationReport, queued: [String])
        {
            // The providers are read first (the scan's chunks are handled without waiting),
            // each as it reads: a damaged record fails the revocation only if a token needs it.
            let providers = try await ProviderRegistry(store: outbox.keeper.store).everyProviderAwaiting()
            let queue = Queued()
            let report = try await outbox.keeper.awaiting.revokeEndingGrants(
                scopes: scopes, matching: filter, reason: reason + " (queued for revocation at the provider)",
                alongside: outbox.entries(reason: reason, provider: { try providers[$0]?.get() }, into: queue))
            let committed = Set(try await entries().map(\.id))
            return (report, queue.ids.filter(committed.contains))
        }

        /// Every queued revocation, oldest first, as ``RevocationOutbox/entries()``.
        public func entries() async throws -> [QueuedRevocation] {
            try await outbox.entriesAwaiting()
        }
    }
}
