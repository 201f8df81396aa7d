public import Keysmith
import KeysmithCrypto
import KeysmithSystem
import Logging
import NIOCore
import PostgresNIO
import Synchronization
import Dispatch
import Foundation

/// One committed change to an item of a namespace, as a watcher receives it.
public struct PostgresChange: Sendable {
    /// The change feed's sequence number: strictly increasing, never reused.
    public var sequence: Int64
    /// The item.
    public var key: ItemKey
    /// The item's version after the change.
    public var version: Int64
    /// Whether the change deleted the item.
    public var deleted: Bool
    /// The item as it is when the watcher reads it (a newer version if it changed again since;
    /// `nil` when it is deleted by then). A row that does not open, that is older than the
    /// item's newest change (put back from an older copy) or that is missing while the feed says
    /// the item exists ends the watch with `KeysmithError.Code.corruptData`: never delivered.
    public var record: SecureRecord?
    /// The row's chain link (checked against the row before it), `nil` for a row written before chaining.
    var link: [UInt8]? = nil
}

/// Follows a namespace's changes as they are committed, from any process on any machine, and
/// never misses one: it wakes on PostgreSQL's `NOTIFY`, polls as a fallback, and after a lost
/// connection replays from the last sequence it applied.
///
/// ```swift
/// let watcher = try PostgresWatcher(settings, namespace: "payments", masterKey: key, name: "app-7")
/// try watcher.run { change in
///     apply(change)                                  // e.g. update a PermissionManager
///     return true                                    // keep watching
/// }
/// ```
///
/// A watcher registers under its name and acknowledges each sequence it applied, so a writer can
/// wait until every live watcher has applied a revocation (`PostgresStore.waitForWatchers(through:timeout:liveWithin:)`).
/// ``isCurrent`` is false when the watcher could not confirm within `staleAfter` that it has
/// seen every committed change: callers must then fail closed.
public final class PostgresWatcher: Sendable {
    /// The namespace.
    public let namespace: String
    /// The name it registers and acknowledges under (a label such as a host name; stored in the clear).
    public let name: String
    /// How long a confirmation of being current is good for.
    public let staleAfter: Duration

    private let settings: PostgresConnectionSettings
    private let keys: NamespaceKeys
    private let state: Mutex<State>
    private let wake = DispatchSemaphoreBox()

    struct State {
        var applied: Int64
        var confirmedAt: ContinuousClock.Instant?
        var stopped = false
        /// Set by the first ``start(pollInterval:_:)``: the watcher feeds that follower for good.
        var started = false
        /// Whether a watch loop is running (``run(pollInterval:_:)``, or the one `start` began):
        /// one at a time, for two would share the applied sequence and each miss the other's changes.
        var running = false
        /// Set by the first ``run(pollInterval:_:)``: the changes it applied went to its caller,
        /// so the watcher can never start for a follower, which would not see them.
        var wasRun = false
        var reconnects = 0
        /// Tests only: behave as if every notification were dropped on the way (no LISTEN).
        var ignoresNotifications = false
        /// The chain link of the newest change row applied (or of the row the watch started
        /// after); `nil` before the namespace's first chained row.
        var link: [UInt8]?
        /// Why the watch ended on its own (a damaged change feed, or `apply`'s error).
        var failure: KeysmithError?
    }

    /// Opens the namespace (as ``PostgresStore`` does) and starts after `sequence`: the given
    /// one, or the newest committed change when `nil` (only changes from now on).
    public init(_ settings: PostgresConnectionSettings, namespace: String = "default", masterKey: PostgresMasterKey, name: String,
                after sequence: Int64? = nil, staleAfter: Duration = .seconds(2)) throws {
        guard !name.isEmpty, name.utf8.count <= 200 else { throw KeysmithError.invalidArgument("a watcher's name is 1 to 200 bytes") }
        self.settings = settings
        self.namespace = namespace
        self.name = name
        self.staleAfter = staleAfter
        let (keys, start, link) = try Blocking.runOffEventLoop { try await Self.open(settings, namespace: namespace, masterKey: masterKey, after: sequence) }
        self.keys = keys
        state = Mutex(State(applied: start, link: link))
    }

    /// The namespace's keys, the sequence to start after, and the chain link there.
    private static func open(_ settings: PostgresConnectionSettings, namespace: String, masterKey: PostgresMasterKey,
                             after sequence: Int64?) async throws -> (NamespaceKeys, Int64, [UInt8]?) {
        let session = try await Session.connect(settings, logger: Logger(label: "keysmith.postgres.watch"))
        defer { session.close() }
        return try await session.transaction { transaction in
            let master = try await MasterKeyRecord.loadOrCreate(masterKey, transaction: transaction, scrypt: .standard, create: false)
            let keys = try await NamespaceKeys.loadOrCreate(namespace: namespace, master: master, transaction: transaction)
            let namespaceBuffer = ByteBuffer(bytes: keys.namespaceID)
            let start: Int64
            if let sequence {
                start = sequence
            } else {
                start = try await transaction.execute("SELECT coalesce(max(seq), 0) FROM keysmith_changes WHERE namespace_id = \(namespaceBuffer)")
                    .first?.decode(Int64.self) ?? 0
            }
            // The chain continues from the newest row at or before the start.
            let link = try await transaction.execute("""
                SELECT chain FROM keysmith_changes WHERE namespace_id = \(namespaceBuffer) AND seq <= \(start) ORDER BY seq DESC LIMIT 1
                """).first?.decode(ByteBuffer?.self)?.bytes
            return (keys, start, link)
        }
    }

    /// The newest sequence applied.
    public var lastSequence: Int64 { state.withLock { $0.applied } }

    /// How many times the watcher lost its connection and replayed.
    public var reconnects: Int { state.withLock { $0.reconnects } }

    /// Whether the watcher confirmed, less than `staleAfter` ago, that it had applied every
    /// committed change, and has not been stopped. When false, scope checks that rely on it
    /// must deny.
    public var isCurrent: Bool {
        state.withLock { state in
            guard !state.stopped, state.failure == nil, let confirmed = state.confirmedAt else { return false }
            return ContinuousClock.now - confirmed < staleAfter
        }
    }

    /// Why the watch ended by itself, if it did: a change row that does not open (edited or
    /// moved in the database: `corruptData`), or the error `apply` threw. The watcher is then
    /// never current again.
    public var failure: KeysmithError? { state.withLock { $0.failure } }

    /// Tests only: from the next connection on, listen for no notification, as if every one were
    /// dropped; the watcher then learns of changes by polling alone.
    func ignoreNotifications() { state.withLock { $0.ignoresNotifications = true } }

    /// Ends ``run(pollInterval:_:)`` at its next wake-up; the watcher then removes its
    /// registration, so writers waiting for watchers no longer wait for it. From this call on it
    /// is not current (it applies no more changes).
    public func stop() {
        state.withLock { $0.stopped = true }
        wake.signal()
    }

    /// Watches until `apply` returns false or ``stop()`` is called, on the calling thread.
    /// `apply` gets each change in sequence order, once; a change counts as applied when
    /// `apply` returns (true or false), and the acknowledgment is written after it, so an
    /// acknowledged change was applied. Connection failures are retried (with the replay) until
    /// stopped. A change row that does not open ends the watch with `KeysmithError.Code.corruptData`
    /// (retrying cannot get past it, and skipping it could skip a revocation), as do `apply`'s
    /// errors; either way ``failure`` says why and ``isCurrent`` stays false.
    ///
    /// - Throws: `KeysmithError.Code.invalidArgument` at once when the watcher is already
    ///   watching (another `run`, or ``start(pollInterval:_:)``, whose follower it feeds): two
    ///   loops would share its applied sequence, and each would miss the changes the other took.
    public func run(pollInterval: Duration = .milliseconds(50), _ apply: (PostgresChange) throws -> Bool) throws {
        let claimed = state.withLock { state -> Bool in
            guard !state.started, !state.running else { return false }
            state.running = true
            state.wasRun = true
            return true
        }
        guard claimed else {
            throw KeysmithError.invalidArgument("the watcher \(name) is already watching (run, or started for a follower): a watcher runs one watch at a time")
        }
        defer { state.withLock { $0.running = false } }
        try watch(pollInterval: pollInterval, apply)
    }

    /// The watch loop of ``run(pollInterval:_:)`` and ``start(pollInterval:_:)``.
    private func watch(pollInterval: Duration, _ apply: (PostgresChange) throws -> Bool) throws {
        var logger = Logger(label: "keysmith.postgres.watch")
        logger.logLevel = .warning
        while !state.withLock({ $0.stopped }) {
            let session: Session
            do {
                let (settings, name) = (settings, name)
                session = try Blocking.runOffEventLoop { try await Session.connect(settings, logger: logger, application: "keysmith watch \(name)") }
                session.statementTimeout = .seconds(5)
            } catch {
                wake.wait(timeout: pollInterval)
                continue
            }
            defer { session.close() }
            let listens = !state.withLock { $0.ignoresNotifications }
            let listener = listens ? session.connection.addListener(channel: PostgresSchema.channel) { [wake] _, _ in wake.signal() } : nil
            defer { listener?.stop() }
            do {
                if listens { _ = try Blocking.runOffEventLoop { try await Transaction(session: session).execute("LISTEN keysmith_changes") } }
                while !state.withLock({ $0.stopped }) {
                    let asked = ContinuousClock.now
                    let changes = try Blocking.runOffEventLoop { try await fetch(session) }
                    var keepGoing = true
                    for change in changes where keepGoing {
                        do { keepGoing = try apply(change) } catch { throw ApplyFailure(error: error) }
                        state.withLock { state in
                            state.applied = change.sequence
                            if let link = change.link { state.link = link }
                        }
                    }
                    try Blocking.runOffEventLoop { try await acknowledge(session) }
                    guard keepGoing else {
                        Blocking.runOffEventLoop { await deregister(session) }
                        return
                    }
                    if changes.isEmpty { state.withLock { $0.confirmedAt = asked } }
                    if changes.isEmpty { wake.wait(timeout: pollInterval) }
                }
                Blocking.runOffEventLoop { await deregister(session) }
                return
            } catch let failure as ApplyFailure {
                let error = failure.error as? KeysmithError ?? KeysmithError(.ioFailure, "the watcher's handler failed: \(type(of: failure.error))")
                state.withLock { $0.failure = error }
                throw failure.error
            } catch let damaged as DamagedChange {
                let error = KeysmithError(.corruptData, "change \(damaged.sequence) of the feed does not open (\(damaged.error.message)): "
                                          + "the watcher \(name) stopped; it is not current, so checks through it deny")
                state.withLock { $0.failure = error }
                throw error
            } catch let error as KeysmithError where error.code == .authenticationFailed || error.code == .storeLocked {
                // Retrying cannot help (the master key was rotated since it opened, say): say so
                // and end, never go quiet.
                let ended = KeysmithError(error.code, "the watcher \(name) stopped: \(error.message); it is not current, so checks through it deny")
                state.withLock { $0.failure = ended }
                throw ended
            } catch {
                // Anything else is the connection or the server (killed, restarted, failed
                // over): reconnect and replay from the last applied sequence.
                state.withLock { $0.reconnects += 1 }
                wake.wait(timeout: pollInterval)
                continue
            }
        }
    }

    /// An error of the caller's `apply`, which ends the watch (every other error reconnects).
    private struct ApplyFailure: Error {
        let error: any Error
    }

    /// A change row that does not open, which ends the watch.
    private struct DamagedChange: Error {
        let sequence: Int64
        let error: KeysmithError
    }

    /// The changes after the applied sequence, at most 4,096, each with its item as it is now.
    private func fetch(_ session: Session) async throws -> [PostgresChange] {
        let applied = lastSequence
        let namespaceBuffer = ByteBuffer(bytes: keys.namespaceID)
        let transaction = Transaction(session: session)
        // With each change, the item's newest change (its highest version, as reads take it, and
        // whether it deleted the item), read in the same statement as the row: the row must be
        // that version, or absent after a deletion; an older row put back, or one deleted by
        // hand, is damage, never delivered as it is. Highest by version, not by sequence: a copy
        // of an old change row appended (the application role may insert change rows) must not
        // make an old row put back look current.
        let rows = try await transaction.execute("""
            SELECT c.seq, c.blind_index, c.version, c.deleted, c.sealed_key,
                   coalesce(r.version, a.version), coalesce(r.key_id, a.key_id), coalesce(r.sealed, a.sealed), c.chain,
                   n.version, n.deleted
            FROM keysmith_changes c
            CROSS JOIN LATERAL (SELECT c2.version, c2.deleted FROM keysmith_changes c2
                                WHERE c2.namespace_id = c.namespace_id AND c2.blind_index = c.blind_index
                                ORDER BY c2.version DESC, c2.seq DESC LIMIT 1) n
            LEFT JOIN keysmith_records r ON r.namespace_id = c.namespace_id AND r.blind_index = c.blind_index
            LEFT JOIN keysmith_audit a ON a.namespace_id = c.namespace_id AND a.blind_index = c.blind_index
            WHERE c.namespace_id = \(namespaceBuffer) AND c.seq > \(applied) ORDER BY c.seq LIMIT 4096
            """)
        // Rows and change rows sealed under a data key rotated in since: load it first.
        var keyIDs: [Int32] = []
        for row in rows {
            let (_, _, _, _, sealedKey, _, keyID, _, _, _, _) =
                try row.decode((Int64, ByteBuffer, Int64, Bool, ByteBuffer, Int64?, Int32?, ByteBuffer?, ByteBuffer?, Int64, Bool).self)
            let bytes = sealedKey.readableBytesView
            if bytes.count >= 4 { keyIDs.append(Int32(bitPattern: bytes.prefix(4).reduce(0) { $0 << 8 | UInt32($1) })) }
            if let keyID { keyIDs.append(keyID) }
        }
        try await keys.ensureKnown(keyIDs, in: transaction)
        var changes: [PostgresChange] = []
        var link = state.withLock { $0.link }
        for row in rows {
            let (sequence, index, version, deleted, sealedKey, rowVersion, keyID, sealed, chain, newestVersion, newestDeleted) =
                try row.decode((Int64, ByteBuffer, Int64, Bool, ByteBuffer, Int64?, Int32?, ByteBuffer?, ByteBuffer?, Int64, Bool).self)
            let key: ItemKey
            var record: SecureRecord?
            do {
                // Each row must continue the chain from the row before it: one deleted,
                // edited, reordered or renumbered breaks it here. Rows without a link are
                // allowed only before the namespace's first chained row.
                switch keys.chainStep(after: link, sequence: sequence, blindIndex: index.bytes, version: version, deleted: deleted,
                                      sealedKey: sealedKey.bytes, stored: chain?.bytes) {
                case .unlinked:
                    break
                case .missingLink:
                    throw KeysmithError(.corruptData, "it has no chain link, though the rows before it have: the change feed was edited")
                case .broken:
                    throw KeysmithError(.corruptData, "it does not continue the chain from the change before it: a change row was deleted, edited or reordered")
                case .linked(let next):
                    link = next
                }
                key = try keys.openKey(sealedKey.bytes, blindIndex: index.bytes, version: version)
                // The item as it is now must be what the feed says it is now.
                if let rowVersion, let keyID, let sealed {
                    guard rowVersion == newestVersion, !newestDeleted else {
                        throw KeysmithError(
                            .corruptData,
                            rowVersion < newestVersion || newestDeleted
                                ? "its item's row is older than the item's newest change (version \(rowVersion), the feed has \(newestVersion)): an older row was put back"
                                : "its item's row has no change of its version \(rowVersion): the item's change rows were deleted")
                    }
                    record = try keys.open(RecordRow(blindIndex: index.bytes, version: rowVersion, keyID: keyID, sealed: sealed.bytes), withSecret: true)
                } else if !newestDeleted {
                    throw KeysmithError(.corruptData, "its item has no row, though the feed's newest change to it (version \(newestVersion)) is not a deletion: the row was deleted by hand")
                }
            } catch let error as KeysmithError where error.code == .corruptData {
                // The changes before it are delivered first; the next fetch starts at this one.
                if changes.isEmpty { throw DamagedChange(sequence: sequence, error: error) }
                return changes
            }
            changes.append(PostgresChange(sequence: sequence, key: key, version: version, deleted: deleted, record: record, link: chain?.bytes))
        }
        return changes
    }

    /// Removes the watcher's registration (best effort): a watcher that ended on purpose is no
    /// longer waited for by `PostgresStore.waitForWatchers(through:timeout:liveWithin:)`.
    private func deregister(_ session: Session) async {
        let namespaceBuffer = ByteBuffer(bytes: keys.namespaceID)
        _ = try? await Transaction(session: session).execute(
            "DELETE FROM keysmith_watchers WHERE namespace_id = \(namespaceBuffer) AND watcher = \(name)")
    }

    /// Records the applied sequence and that the watcher is alive.
    private func acknowledge(_ session: Session) async throws {
        let namespaceBuffer = ByteBuffer(bytes: keys.namespaceID)
        let applied = lastSequence
        try await Transaction(session: session).execute("""
            INSERT INTO keysmith_watchers (namespace_id, watcher, acked_seq, seen_at) VALUES (\(namespaceBuffer), \(name), \(applied), now())
            ON CONFLICT (namespace_id, watcher) DO UPDATE SET acked_seq = excluded.acked_seq, seen_at = now()
            """)
    }
}

extension PostgresWatcher: StoreWatcher {
    /// Runs ``run(pollInterval:_:)`` on a thread of its own, handing each change to `apply`
    /// as a `WatchedChange`; returns at once. ``stop()`` ends it. A watcher feeds one follower:
    /// called again, or on a watcher that ``run(pollInterval:_:)`` ever watched (its changes
    /// went to that caller), this starts nothing and returns false.
    @discardableResult
    public func start(pollInterval: Duration = .milliseconds(50), _ apply: @escaping @Sendable (WatchedChange) -> Void) -> Bool {
        let claimed = state.withLock { state -> Bool in
            guard !state.started, !state.running, !state.wasRun else { return false }
            state.started = true
            state.running = true
            return true
        }
        guard claimed else { return false }
        let thread = Thread { [self] in
            defer { state.withLock { $0.running = false } }
            _ = try? watch(pollInterval: pollInterval) { change in
                apply(WatchedChange(key: change.key, deleted: change.deleted, record: change.record))
                return true
            }
        }
        thread.name = "keysmith watch \(name)"
        thread.start()
        return true
    }
}

/// A watcher that has not acknowledged a change.
public struct PendingWatcher: Sendable, Hashable {
    /// Its name.
    public var name: String
    /// The newest sequence it acknowledged.
    public var acknowledged: Int64
}

extension PostgresStore {
    /// Waits until every watcher of this namespace that is live when it is called (seen within
    /// `liveWithin`) has acknowledged `sequence`, or `timeout` passes. A watcher that dies while
    /// it waits stays in the set: it is named, never silently dropped.
    ///
    /// - Returns: The watchers that had not acknowledged it by the timeout (empty: all did).
    public func waitForWatchers(through sequence: Int64, timeout: Duration, liveWithin: Duration = .seconds(10)) throws -> [PendingWatcher] {
        try Blocking.runOffEventLoop { try await waitForWatchers(through: sequence, timeout: timeout, liveWithin: liveWithin) }
    }

    /// `waitForWatchers(through:timeout:liveWithin:)` without blocking a thread: it polls every 5 ms with `Task.sleep`, and cancelling the task ends it with `CancellationError`.
    public func waitForWatchers(through sequence: Int64, timeout: Duration, liveWithin: Duration = .seconds(10)) async throws -> [PendingWatcher] {
        let deadline = ContinuousClock.now + timeout
        let namespaceBuffer = ByteBuffer(bytes: keys.namespaceID)
        let seconds = liveWithin.inSeconds
        let live = try await withSessionPublic { session in
            try await Transaction(session: session).execute("""
                SELECT watcher FROM keysmith_watchers WHERE namespace_id = \(namespaceBuffer) AND seen_at > now() - make_interval(secs => \(seconds))
                """).map { try $0.decode(String.self) }
        }
        guard !live.isEmpty else { return [] }
        while true {
            let pending = try await withSessionPublic { session in
                try await Transaction(session: session).execute("""
                    SELECT watcher, acked_seq FROM keysmith_watchers
                    WHERE namespace_id = \(namespaceBuffer) AND watcher = ANY(\(live)) AND acked_seq < \(sequence)
                    ORDER BY watcher
                    """).map { row in
                    let (name, acknowledged) = try row.decode((String, Int64).self)
                    return PendingWatcher(name: name, acknowledged: acknowledged)
                }
            }
            if pending.isEmpty || ContinuousClock.now >= deadline { return pending }
            try await Blocking.pause(.milliseconds(5))
        }
    }
}

/// A semaphore that a NOTIFY handler signals and the watch loop waits on.
final class DispatchSemaphoreBox: Sendable {
    private let semaphore = DispatchSemaphore(value: 0)

    func signal() { semaphore.signal() }

    func wait(timeout: Duration) {
        let nanoseconds = timeout.inNanoseconds
        _ = semaphore.wait(timeout: .now() + .nanoseconds(nanoseconds))
    }
}
