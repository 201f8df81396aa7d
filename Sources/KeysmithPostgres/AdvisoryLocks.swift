public import Keysmith
internal import KeysmithCrypto
internal import Logging
internal import PostgresNIO
import Synchronization

extension PostgresStore: ExclusiveLocking {
    /// A PostgreSQL session-level advisory lock (`pg_try_advisory_lock`), on a connection of
    /// its own that this handle keeps while it holds any lock: every process and machine
    /// using this database's namespace contends for it, and the server releases it when that
    /// connection ends (a killed holder's included). The lock's number is a keyed digest of the
    /// namespace and the name (the database learns neither).
    public func tryExclusiveLock(named name: String) throws -> (any HeldLock)? {
        // One connection holds every lock of this handle, and a session may take a lock it
        // already holds: callers of this handle are kept apart here first.
        guard advisory.withLock({ $0.held.insert(name).inserted }) else { return nil }
        let number = lockNumber(name)
        do {
            let (taken, generation) = try advisory.withLock { state -> (Bool, Int) in
                if state.session == nil || state.session?.isClosed == true {
                    state.session?.close()
                    let settings = settings
                    let session = try Blocking.run {
                        try await Session.connect(settings, logger: Logger(label: "keysmith.postgres"), application: "keysmith-lock")
                    }
                    // Its statements are instant at a live server: one that hangs (a half-open
                    // connection) is cut after 5 s, not 120, with the handle's lock state held.
                    session.statementTimeout = .seconds(5)
                    state.session = session
                    state.generation += 1
                }
                let session = state.session!
                let rows = try Blocking.run { try await Transaction(session: session).execute("SELECT pg_try_advisory_lock(\(number))") }
                return (try rows.first?.decode(Bool.self) ?? false, state.generation)
            }
            guard taken else {
                advisory.withLock { _ = $0.held.remove(name) }
                return nil
            }
            return PostgresLock(store: self, name: name, number: number, generation: generation)
        } catch {
            advisory.withLock { _ = $0.held.remove(name) }
            throw error
        }
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
        advisory.withLock { state in
            guard state.generation == generation, let session = state.session, !session.isClosed else { return false }
            // A bigint advisory lock is listed with its high 32 bits as classid, its low as objid.
            let high = UInt32(truncatingIfNeeded: UInt64(bitPattern: number) >> 32), low = UInt32(truncatingIfNeeded: UInt64(bitPattern: number))
            let query: PostgresQuery = "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted AND classid::bigint = \(Int64(high)) AND objid::bigint = \(Int64(low)) AND objsubid = 1)"
            guard let rows = try? Blocking.run({ try await Transaction(session: session).execute(query) }), let held = try? rows.first?.decode(Bool.self) else {
                session.close()
                return false
            }
            return held
        }
    }

    func releaseAdvisory(name: String, number: Int64) {
        advisory.withLock { state in
            guard state.held.remove(name) != nil else { return }
            if let session = state.session, !session.isClosed {
                // A connection that fails here ends, and its locks with it.
                if (try? Blocking.run({ try await Transaction(session: session).execute("SELECT pg_advisory_unlock(\(number))") })) == nil {
                    session.close()
                }
            }
            if state.held.isEmpty {
                state.session?.close()
                state.session = nil
            }
        }
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
final class PostgresLock: HeldLock {
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

    func isHeld() -> Bool {
        !released.load(ordering: .acquiring) && store.advisoryHeld(number: number, generation: generation)
    }

    func release() {
        guard !released.exchange(true, ordering: .acquiringAndReleasing) else { return }
        store.releaseAdvisory(name: name, number: number)
    }

    deinit { release() }
}
