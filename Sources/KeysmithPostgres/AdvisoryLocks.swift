public import Keysmith
internal import KeysmithCrypto
internal import Logging
internal import PostgresNIO
import KeysmithSystem
import Synchronization
import Foundation

extension PostgresStore: ExclusiveLocking, AwaitableLocking {
    /// A PostgreSQL session-level advisory lock (`pg_try_advisory_lock`), on a connection of
    /// its own that this handle keeps while it holds any lock: every process and machine
    /// using this database's namespace contends for it, and the server releases it when that
    /// connection ends (a killed holder's included). The lock's number is a keyed digest of the
    /// namespace and the name (the database learns neither).
    public func tryExclusiveLock(named name: String) throws -> (any HeldLock)? {
        blockingLockQuestions.add(1, ordering: .relaxed)
        return try Blocking.runOffEventLoop { try await tryExclusiveLockAwaiting(named: name) }
    }

    /// ``tryExclusiveLock(named:)`` for async code: the connection that holds this handle's
    /// locks is opened, and `pg_try_advisory_lock` asked, without holding a thread while the
    /// server answers. The same lock, on the same connection: a lock taken either way excludes
    /// the other. Cancellation is checked before the question is sent; once sent, it is
    /// answered (a lock taken is returned, for its holder to release).
    package func tryExclusiveLockAwaiting(named name: String) async throws -> (any HeldLock)? {
        guard advisory.withLock({ $0.held.insert(name).inserted }) else { return nil }
        let number = lockNumber(name)
        do {
            try Task.checkCancellation()
            var (session, generation) = try await advisorySession()
            let rows: [PostgresRow]
            do {
                rows = try await Transaction(session: session).execute("SELECT pg_try_advisory_lock(\(number))", cancellable: false)
            } catch where session.isClosed {
                // The connection was lost (another caller may have opened the next one
                // meanwhile): asked once more on a connection that is open.
                (session, generation) = try await advisorySession()
                rows = try await Transaction(session: session).execute("SELECT pg_try_advisory_lock(\(number))", cancellable: false)
            }
            guard try rows.first?.decode(Bool.self) ?? false else {
                advisory.withLock { _ = $0.held.remove(name) }
                return nil
            }
            return PostgresLock(store: self, name: name, number: number, generation: generation)
        } catch {
            advisory.withLock { _ = $0.held.remove(name) }
            throw error
        }
    }

    /// The connection that holds this handle's advisory locks, opened (awaited) when there is
    /// none or it closed. Its `application_name` is `keysmith-lock PID`, so an operator can tell
    /// which process holds a lock (`pg_locks` joined with `pg_stat_activity`). Two tasks opening at once keep the first installed; the other's is closed.
    private func advisorySession() async throws -> (Session, Int) {
        if let open = advisory.withLock({ state -> (Session, Int)? in
            guard let session = state.session, !session.isClosed else { return nil }
            return (session, state.generation)
        }) { return open }
        let opened = try await Session.connect(settings, logger: Logger(label: "keysmith.postgres"), application: "keysmith-lock \(ProcessInfo.processInfo.processIdentifier)")
        opened.statementTimeout = .seconds(5)
        let (session, generation) = advisory.withLock { state -> (Session, Int) in
            if let session = state.session, !session.isClosed { return (session, state.generation) }
            state.session?.close()
            state.session = opened
            state.generation += 1
            return (opened, state.generation)
        }
        if session !== opened { opened.close() }
        return (session, generation)
    }

    /// ``advisoryHeld(number:generation:)`` for async code: the server is asked without
    /// holding a thread.
    func advisoryHeldAwaiting(number: Int64, generation: Int) async -> Bool {
        guard let session = advisory.withLock({ state -> Session? in
            guard state.generation == generation, let session = state.session, !session.isClosed else { return nil }
            return session
        }) else { return false }
        guard let rows = try? await Transaction(session: session).execute(Self.advisoryHeldQuery(number), cancellable: false),
              let held = try? rows.first?.decode(Bool.self)
        else {
            session.close()
            return false
        }
        // Asked of the connection of `generation`: still this handle's?
        return held && advisory.withLock { $0.generation == generation && $0.session === session && !session.isClosed }
    }

    /// Whether this session holds the bigint advisory lock `number`: listed with its high 32
    /// bits as classid, its low as objid.
    static func advisoryHeldQuery(_ number: Int64) -> PostgresQuery {
        let high = UInt32(truncatingIfNeeded: UInt64(bitPattern: number) >> 32), low = UInt32(truncatingIfNeeded: UInt64(bitPattern: number))
        return "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted AND classid::bigint = \(Int64(high)) AND objid::bigint = \(Int64(low)) AND objsubid = 1)"
    }

    /// The advisory lock's number: 64 bits of an HMAC of the name under the namespace's index
    /// key (the blind index's), so names are not visible to the database.
    func lockNumber(_ name: String) -> Int64 {
        let digest = keys.blindIndex(.keysmithRecord(KeysmithRecordKey(recordType: KeysmithRecordType(rawValue: "advisory-lock"),
                                                                      service: name, account: "")))
        return digest.prefix(8).reduce(Int64(0)) { $0 << 8 | Int64($1) }
    }

    /// Whether the lock `number`, taken on the connection of `generation`, is still held: that
    /// connection is still this handle's, open, and the server lists the lock as its session's.
    /// A connection that fails to answer is closed (the server then releases its locks) and the
    /// answer is `false`.
    func advisoryHeld(number: Int64, generation: Int) -> Bool {
        blockingLockQuestions.add(1, ordering: .relaxed)
        return Blocking.runOffEventLoop { await advisoryHeldAwaiting(number: number, generation: generation) }
    }

    /// ``releaseAdvisory(name:number:)`` for async code: `pg_advisory_unlock` is awaited.
    /// The name stays taken in this handle until the server has answered, so no caller of
    /// this handle takes the same lock again on this connection meanwhile (a session's advisory
    /// locks count up).
    func releaseAdvisoryAwaiting(name: String, number: Int64) async {
        guard let session = advisory.withLock({ state -> Session? in
            guard state.held.contains(name) else { return nil }
            return state.session.flatMap { $0.isClosed ? nil : $0 }
        }) else {
            advisory.withLock { state in
                _ = state.held.remove(name)
                if state.held.isEmpty { state.session?.close(); state.session = nil }
            }
            return
        }
        // A connection that fails here ends, and its locks with it.
        if (try? await Transaction(session: session).execute("SELECT pg_advisory_unlock(\(number))", cancellable: false)) == nil {
            session.close()
        }
        advisory.withLock { state in
            guard state.held.remove(name) != nil else { return }
            if state.held.isEmpty {
                state.session?.close()
                state.session = nil
            }
        }
    }

    func releaseAdvisory(name: String, number: Int64) {
        blockingLockQuestions.add(1, ordering: .relaxed)
        Blocking.runOffEventLoop { await releaseAdvisoryAwaiting(name: name, number: number) }
    }
}

/// The advisory locks a ``PostgresStore`` handle holds, and their connection.
struct AdvisoryState: ~Copyable {
    var held: Set<String> = []
    var session: Session?
    /// Counts the connections opened for locks: a lock taken on an earlier one is not held on a later one.
    var generation = 0
}

/// A held advisory lock.
final class PostgresLock: HeldLock, AwaitableHeldLock {
    let store: PostgresStore
    let name: String
    let number: Int64
    let generation: Int
    let released = Atomic(false)

    init(store: PostgresStore, name: String, number: Int64, generation: Int) {
        self.store = store
        self.name = name
        self.number = number
        self.generation = generation
    }

    /// An advisory lock is the connection's: a dropped connection gives it to the next taker.
    var canBeLostWhileHolderRuns: Bool { true }

    func isHeld() -> Bool {
        !released.load(ordering: .acquiring) && store.advisoryHeld(number: number, generation: generation)
    }

    func release() {
        guard !released.exchange(true, ordering: .acquiringAndReleasing) else { return }
        store.releaseAdvisory(name: name, number: number)
    }

    /// ``isHeld()``, the server asked without holding a thread.
    func isHeldAwaiting() async -> Bool {
        guard !released.load(ordering: .acquiring) else { return false }
        return await store.advisoryHeldAwaiting(number: number, generation: generation)
    }

    /// ``release()``, the server's answer awaited without holding a thread.
    func releaseAwaiting() async {
        guard !released.exchange(true, ordering: .acquiringAndReleasing) else { return }
        await store.releaseAdvisoryAwaiting(name: name, number: number)
    }

    deinit { release() }
}
