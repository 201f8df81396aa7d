public import FoundationEssentials
public import Keysmith
public import KeysmithCredentials
import KeysmithCrypto
import KeysmithSystem
import Logging
import NIOCore
import NIOPosix
import PostgresNIO
import Synchronization

/// The key that wraps every data key; it never enters the database.
public enum PostgresMasterKey: Sendable {
    /// 32 bytes held by the caller.
    case key([UInt8])
    /// A keyfile of 64 hexadecimal digits (the vault's keyfile format).
    case keyfile(path: String)
    /// A passphrase, stretched by scrypt with the salt and cost stored in the database.
    case passphrase(String)

    /// The master key a key source found (`KeySources.resolve()`): a keyfile, or a
    /// passphrase read as text. With `making` (`initialize` may make the key from it), a
    /// passphrase whose bytes are not UTF-8, or a variable holding a line break, is refused
    /// (`KeySource.passphraseText(making:)`).
    ///
    /// ```swift
    /// guard let source = try KeySources(prompt: "PostgreSQL master passphrase: ").resolve() else { throw … }
    /// let store = try PostgresStore(settings, namespace: "payments", masterKey: try PostgresMasterKey(source))
    /// ```
    ///
    /// - Throws: `KeysmithError.Code.invalidArgument` naming where the passphrase came from.
    public init(_ source: KeySource, making: Bool = false) throws {
        switch source {
        case .keyfile(let path): self = .keyfile(path: path)
        case .passphrase(_, let origin):
            guard let text = try source.passphraseText(making: making) else {
                throw KeysmithError.invalidArgument("\(origin) gave no passphrase")
            }
            self = .passphrase(text)
        }
    }
}

/// A Keysmith store on PostgreSQL, encrypted on the client: the database holds sealed rows,
/// keyed blind indexes and wrapped keys, never a secret, a service or account name, a token or
/// a scope in the clear (docs/postgres.md: the schema, the key hierarchy, the threat model).
///
/// ```swift
/// let settings = try PostgresConnectionSettings(url: "postgresql://keysmith@/keysmith?host=/run/postgresql")
/// try PostgresStore.initialize(settings, masterKey: .keyfile(path: "/etc/keysmith/master.key"))   // once
/// let store = try PostgresStore(settings, namespace: "payments", masterKey: .keyfile(path: "/etc/keysmith/master.key"))
/// try Keysmith.set(Data("s3cret".utf8), forAccount: "bob", inService: "mail", in: store)
/// ```
///
/// Every batch is one serializable unit: one transaction, retried when PostgreSQL reports a
/// conflict with a concurrent transaction, so two processes can never lose each other's update.
/// A handle keeps a few connections (``init(_:namespace:masterKey:connections:clock:)``), so
/// callers on many threads or tasks share one handle; every operation has an `async` form that
/// never blocks a thread while the database answers.
public final class PostgresStore: AsyncSecureStore {
    /// The connection settings.
    public let settings: PostgresConnectionSettings
    /// The namespace (tenant) this handle reads and writes. Its name is not stored.
    public let namespace: String
    /// The largest item the store accepts (the vault's).
    public let limits: StoreLimits = .standard

    let keys: NamespaceKeys
    /// The connections of async callers (``init(_:namespace:masterKey:connections:clock:)``).
    let pool: SessionPool
    /// The connections of blocking callers: apart, so that a blocking call never waits for a
    /// connection an async task holds (that task may need the very thread the call blocks).
    let blockingPool: SessionPool
    /// The advisory locks this handle holds (``tryExclusiveLock(named:)``).
    let advisory = Mutex(AdvisoryState())
    /// How many questions about advisory locks were asked blocking the calling thread (a test
    /// checks that async callers ask none).
    let blockingLockQuestions = Atomic<Int>(0)
    private let lastSequence = Mutex<Int64>(0)
    /// Rows this handle's committed batches wrote without reading and locking them first (their
    /// replaces were trusted, `apply`): what shows that the fast path is taken.
    let trustedWrites = Atomic<Int>(0)
    /// Why this handle's batches were last run again (the SQLSTATE, or what a count showed),
    /// oldest first, the newest 64: what a test that expects the fast path reports when it was left.
    let batchConflicts = Mutex<[String]>([])

    /// The change-feed sequence of this handle's newest committed change (0 before its first
    /// write): what `waitForWatchers(through:timeout:liveWithin:)` waits for.
    public var lastCommittedSequence: Int64 { lastSequence.withLock { $0 } }
    private let logger: Logger
    private let clock: @Sendable () -> Date

    /// `PostgreSQL database D as U on … (namespace N)`.
    public var storeDescription: String { "PostgreSQL \(settings.description) (namespace \(namespace))" }

    /// `StoreIsolation.serializable`: every batch is one transaction.
    public var isolation: StoreIsolation { .serializable }

    /// Creates the schema when it is missing, and the master key's record (its KDF parameters
    /// and a verifier) when the database has none. Idempotent with the same master key; with a
    /// different one it throws `KeysmithError.Code.authenticationFailed`. Run it as the role
    /// that owns the schema.
    ///
    /// ```swift
    /// try PostgresStore.initialize(settings, masterKey: .keyfile(path: "/etc/keysmith/master.key"),
    ///                              applicationRole: "keysmith_app")
    /// ```
    ///
    /// - Parameter applicationRole: the database role applications connect as, granted what
    ///   they need and no more: records and watcher acknowledgements read and written, data
    ///   keys added, the audit log and the change feed appended to and read, never changed or
    ///   deleted (docs/postgres.md, "Grants"). A lower-case SQL identifier; the role must exist.
    public static func initialize(_ settings: PostgresConnectionSettings, masterKey: PostgresMasterKey,
                                  scrypt: ScryptCost = .standard, applicationRole: String? = nil) throws {
        try initialize(settings, masterKey: masterKey, scrypt: scrypt, applicationRole: applicationRole, application: "keysmith")
    }

    /// ``initialize(_:masterKey:scrypt:applicationRole:)`` on a connection named `application`
    /// in `pg_stat_activity` (a test finds its own installer by it).
    static func initialize(_ settings: PostgresConnectionSettings, masterKey: PostgresMasterKey,
                           scrypt: ScryptCost, applicationRole: String?, application: String) throws {
        if let role = applicationRole, !Self.isPlainIdentifier(role) {
            throw KeysmithError.invalidArgument("a database role here is 1 to 63 lower-case letters, digits and underscores, not starting with a digit")
        }
        try Blocking.runOffEventLoop {
            let session = try await Session.connect(settings, logger: Logger(label: "keysmith.postgres"), application: application)
            defer { session.close() }
            // The schema's statements lock tables that running applications write: a deadlock with
            // one of them rolls this back, and it is run again.
            try await RetryableConflict.retrying({
                try await session.transaction { transaction in
                    // One initializer at a time (CREATE … IF NOT EXISTS races itself in PostgreSQL).
                    try await transaction.execute("SELECT pg_advisory_xact_lock(\(PostgresSchema.initializationLock))")
                    for statement in PostgresSchema.statements { try await transaction.execute(PostgresQuery(unsafeSQL: statement)) }
                    _ = try await MasterKeyRecord.loadOrCreate(masterKey, transaction: transaction, scrypt: scrypt, create: true)
                    if let role = applicationRole {
                        for statement in PostgresSchema.grants(to: role) { try await transaction.execute(PostgresQuery(unsafeSQL: statement)) }
                    }
                }
            }, failure: { KeysmithError(.writeConflict, "installing the Keysmith schema in PostgreSQL kept conflicting with other transactions (\($0)); nothing was changed") })
        }
    }

    /// `[a-z_][a-z0-9_]{0,62}`: safe to write into a statement unquoted.
    static func isPlainIdentifier(_ name: String) -> Bool {
        guard let first = name.utf8.first, name.utf8.count <= 63, first == UInt8(ascii: "_") || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(first) else {
            return false
        }
        return name.utf8.allSatisfy { $0 == UInt8(ascii: "_") || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains($0) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }
    }

    /// Opens a namespace: derives the master key, checks it against the database's verifier,
    /// and creates the namespace's first data key if it has none.
    ///
    /// - Throws: `KeysmithError.Code.storeUnavailable` when the database cannot be reached or
    ///   has no Keysmith schema (run ``initialize(_:masterKey:scrypt:applicationRole:)`` or `keysmith postgres
    ///   init`); `KeysmithError.Code.authenticationFailed` for a wrong master key;
    ///   `KeysmithError.Code.corruptData` for a wrapped key that does not open.
    public convenience init(_ settings: PostgresConnectionSettings, namespace: String = "default", masterKey: PostgresMasterKey,
                            clock: @escaping @Sendable () -> Date = { Date() }) throws {
        try self.init(settings, namespace: namespace, masterKey: masterKey, connections: 4, clock: clock)
    }

    /// Opens a namespace, as ``init(_:namespace:masterKey:clock:)``, with at most `connections`
    /// connections open at once for async callers (1 to 64; 4 by default), and as many for
    /// blocking callers. They are opened as operations need them and kept: a handle used by one
    /// caller at a time holds one, and concurrent operations each use their own; a task that
    /// finds them all in use waits without blocking a thread. Blocking calls have connections
    /// of their own because a blocking call made from async code holds a thread of Swift's
    /// cooperative pool: waiting there for a connection that a suspended task holds could wait
    /// for ever, the task needing that very thread to finish.
    ///
    /// ```swift
    /// let store = try PostgresStore(settings, masterKey: key, connections: 16)
    /// try await withThrowingTaskGroup(of: SecureRecord?.self) { group in
    ///     for key in keys { group.addTask { try await store.read(key) } }
    ///     for try await _ in group {}
    /// }
    /// ```
    public init(_ settings: PostgresConnectionSettings, namespace: String = "default", masterKey: PostgresMasterKey,
                connections: Int, clock: @escaping @Sendable () -> Date = { Date() }) throws {
        guard !namespace.isEmpty, namespace.utf8.count <= 256 else { throw KeysmithError.invalidArgument("a namespace is 1 to 256 bytes") }
        guard (1...64).contains(connections) else { throw KeysmithError.invalidArgument("a store handle opens 1 to 64 connections") }
        self.settings = settings
        self.namespace = namespace
        self.clock = clock
        var logger = Logger(label: "keysmith.postgres")
        logger.logLevel = .warning
        self.logger = logger
        let (session, keys) = try Blocking.runOffEventLoop {
            let session = try await Session.connect(settings, logger: logger)
            do {
                let keys = try await RetryableConflict.retrying({
                    try await session.transaction { transaction in
                        let master = try await MasterKeyRecord.loadOrCreate(masterKey, transaction: transaction, scrypt: .standard, create: false)
                        return try await NamespaceKeys.loadOrCreate(namespace: namespace, master: master, transaction: transaction)
                    }
                }, failure: { KeysmithError(.writeConflict, "opening the namespace kept conflicting with other transactions (\($0))") })
                return (session, keys)
            } catch {
                session.close()
                throw error
            }
        }
        self.keys = keys
        self.pool = SessionPool(settings: settings, logger: logger, limit: connections)
        self.blockingPool = SessionPool(settings: settings, logger: logger, limit: connections, first: session)
    }

    deinit {
        advisory.withLock { $0.session?.close() }
    }

    /// Runs `body` on one of this handle's connections (of the blocking callers' pool when a
    /// synchronous call is running it), connecting again if it was lost.
    private func withSession<T>(_ body: (Session) async throws -> T) async throws -> T {
        try await (Blocking.isActive ? blockingPool : pool).withSession(body)
    }

    /// A read in a session, run again when it conflicted with a concurrent transaction.
    private func readRetrying<T>(_ body: (Session) async throws -> T) async throws -> T {
        try await RetryableConflict.retrying({ try await withSession(body) }, failure: {
            KeysmithError(.writeConflict, "reading \(storeDescription) kept conflicting with other transactions (\($0))")
        })
    }

    /// The session, for this module's other parts (the watcher's waiting).
    func withSessionPublic<T>(_ body: (Session) async throws -> T) async throws -> T { try await withSession(body) }

    /// Reads one item.
    public func read(_ key: ItemKey) throws -> SecureRecord? {
        try read([key])[0]
    }

    /// Reads one item without blocking a thread: the same read as the synchronous
    /// `read(_:)`, awaited. Cancelling the task ends it with `CancellationError`.
    ///
    /// ```swift
    /// let record = try await store.read(ItemKey(service: "api", account: "billing"))
    /// ```
    public func read(_ key: ItemKey) async throws -> SecureRecord? {
        try await read([key])[0]
    }

    /// Reads many items in one query.
    public func read(_ itemKeys: [ItemKey]) throws -> [SecureRecord?] {
        try Blocking.runOffEventLoop { try await read(itemKeys) }
    }

    /// Reads many items in one query without blocking a thread; cancelling the task ends it with
    /// `CancellationError`.
    public func read(_ itemKeys: [ItemKey]) async throws -> [SecureRecord?] {
        guard !itemKeys.isEmpty else { return [] }
        for key in itemKeys { try key.validate() }
        let indexes = itemKeys.map(keys.blindIndex)
        // Items of one table, few enough for one statement: that statement alone, outside a
        // transaction (one round trip instead of four; a statement sees one snapshot), answers,
        // with what the feed says of the items without a row.
        let oneStatement = itemKeys.count <= RecordRows.chunkLimit && Set(itemKeys.map(RecordTable.init)).count <= 1
        let (rows, live) = try await readRetrying { session in
            if oneStatement, let table = itemKeys.first.map(RecordTable.init) {
                let transaction = Transaction(session: session)
                let (rows, live) = try await RecordRows.read(indexes, namespace: keys.namespaceID, table: table, in: transaction)
                try await keys.ensureKnown(rows.values.map(\.keyID), in: transaction)
                return (rows, live)
            }
            // One snapshot for both questions: under READ COMMITTED a create committed between
            // them left its item without a row but live in the feed, and the read called that
            // damage (found by the conformance suite's racing creates).
            return try await session.transaction(snapshot: true) { transaction in
                let rows = try await fetch(Array(zip(itemKeys, indexes)), in: transaction, lock: false)
                // An item with no row is absent only if the feed agrees: a row deleted, or its
                // index edited, by hand is damage, not "does not exist".
                let missing = indexes.filter { rows[$0] == nil }
                return (rows, missing.isEmpty ? [] : try await RecordRows.liveInFeed(missing, namespace: keys.namespaceID, in: transaction))
            }
        }
        return try zip(itemKeys, indexes).map { key, index in
            guard let row = rows[index] else {
                guard !live.contains(index) else {
                    throw KeysmithError(.corruptData, "\(key) has no row in \(storeDescription), though the change feed records it: its row was "
                                        + "deleted or moved by hand (`keysmith postgres verify` counts such rows); writing the item again repairs it")
                }
                return nil
            }
            let record = try keys.open(row, withSecret: true)
            guard record.key == key else { throw KeysmithError(.corruptData, "a row of \(storeDescription) holds another item than its index says") }
            return record
        }
    }

    /// The rows of these items, from the table each lives in (audit entries in the audit log's).
    private func fetch(_ items: [(ItemKey, [UInt8])], in transaction: Transaction, lock: Bool, withSealed: Bool = true) async throws -> [[UInt8]: RecordRow] {
        var rows: [[UInt8]: RecordRow] = [:]
        for table in RecordTable.allCases {
            let indexes = items.filter { RecordTable($0.0) == table }.map(\.1)
            guard !indexes.isEmpty else { continue }
            // Audit rows are never locked: they are only ever inserted (a racing insert is a unique
            // violation, and the batch is retried), and the application role may not lock them.
            rows.merge(try await RecordRows.fetch(indexes, namespace: keys.namespaceID, table: table, in: transaction,
                                                  lock: lock && table == .records, withSealed: withSealed)) { a, _ in a }
        }
        try await keys.ensureKnown(rows.values.map(\.keyID), in: transaction)
        return rows
    }

    /// Lists matching items, without their secrets (each row is opened on the client: the
    /// database cannot filter what it cannot read).
    public func search(_ query: ItemQuery) throws -> [ItemInfo] {
        try Blocking.runOffEventLoop { try await search(query) }
    }

    /// Lists matching items without blocking a thread; cancelling the task ends it with
    /// `CancellationError`.
    public func search(_ query: ItemQuery) async throws -> [ItemInfo] {
        var found: [ItemInfo] = []
        try await scan(query, chunkSize: 1024, withSecret: false) { records, _ in found += records.map(\.info) }
        return found
    }

    /// Reads every matching item a chunk at a time, in blind-index order with a cursor: each
    /// item that exists for the whole scan comes exactly once.
    public func forEachRecord(matching query: ItemQuery, chunkSize: Int, _ body: ([SecureRecord], ScanProgress) throws -> Void) throws {
        try Blocking.runOffEventLoop { try await scan(query, chunkSize: chunkSize, withSecret: true) { try body($0, $1) } }
    }

    /// Reads every matching item a chunk at a time, as the synchronous
    /// `forEachRecord(matching:chunkSize:_:)`, without blocking a thread; `body` may await.
    public func forEachRecord(matching query: ItemQuery, chunkSize: Int, _ body: ([SecureRecord], ScanProgress) async throws -> Void) async throws {
        try await scan(query, chunkSize: chunkSize, withSecret: true, body)
    }

    private func scan(_ query: ItemQuery, chunkSize: Int, withSecret: Bool, _ body: ([SecureRecord], ScanProgress) async throws -> Void) async throws {
        let size = max(1, min(chunkSize, 4096))
        var examined = 0
        let total = try await readRetrying { session in
            try await session.transaction { transaction in
                var total = 0
                for table in RecordTable.allCases { total += try await RecordRows.count(namespace: keys.namespaceID, table: table, in: transaction) }
                return total
            }
        }
        for table in RecordTable.allCases {
            try await scan(table, query, size: size, withSecret: withSecret, examined: &examined, total: total, body)
        }
    }

    private func scan(_ table: RecordTable, _ query: ItemQuery, size: Int, withSecret: Bool, examined: inout Int, total: Int,
                      _ body: ([SecureRecord], ScanProgress) async throws -> Void) async throws {
        // Audit entries are never what a query for other record types, or for the user's own
        // items, wants: skip their table (so a damaged entry, which an append-only log keeps,
        // does not stop listing the user's items).
        if table == .audit, let type = query.recordType, type != .auditEntry { return }
        if table == .audit, !query.namespace.contains(.keysmith) { return }
        var after: [UInt8]? = nil
        while true {
            let page = try await readRetrying { session in
                try await session.transaction { transaction in
                    let page = try await RecordRows.page(namespace: keys.namespaceID, table: table, after: after, limit: size, in: transaction)
                    try await keys.ensureKnown(page.map(\.keyID), in: transaction)
                    return page
                }
            }
            guard let last = page.last else { break }
            after = last.blindIndex
            examined += page.count
            // Opened on every core (each row independent; the order is kept). A row that does not
            // open (edited, swapped, or put back from an older copy) fails the scan, as a damaged
            // record fails a file vault's listing: a list that left it out would look whole.
            // Reading the item names it; writing it repairs it.
            let opened = try concurrentChunks(count: page.count, minimum: 512) { range in
                let ciphers = NamespaceKeys.Ciphers()
                return try range.map { position -> SecureRecord in
                do {
                    return try keys.open(page[position], withSecret: withSecret, ciphers: ciphers)
                } catch {
                    let reason = (error as? KeysmithError)?.message ?? "\(error)"
                    throw KeysmithError(.corruptData, "a row of \(storeDescription) does not open (\(reason)), so a listing could be missing items; "
                                        + "run `keysmith postgres verify`, and write the damaged item again to repair it")
                }
            } }
            let records = opened.filter { query.matches($0.attributes) }
            if !records.isEmpty { try await body(records, ScanProgress(examined: examined, total: total)) }
            if page.count < size { break }
        }
        // Items the feed says exist that have no row: a listing must not leave them out without
        // a word. Looked for once, after the records' scan, in one statement over the whole
        // namespace (a write committing meanwhile is seen whole or not at all); per page, the
        // same look cost a sort of the page's stretch of the feed each time, three times as much.
        guard table == .records else { return }
        let missing = try await readRetrying { session in
            try await session.transaction { transaction in try await RecordRows.missing(namespace: keys.namespaceID, in: transaction) }
        }
        for item in missing {
            let key = try? keys.openKey(item.sealedKey, blindIndex: item.blindIndex, version: item.version)
            // A deleted audit entry is the audit log's to report (its chain breaks), as a
            // damaged one is: it does not stop the user's listings.
            if let key, RecordTable(key) == .audit { continue }
            throw KeysmithError(.corruptData, "\(key.map { "\($0)" } ?? "an item") has no row in \(storeDescription), though the change feed "
                                + "records it: its row was deleted or moved by hand, so a listing would leave it out (`keysmith postgres "
                                + "verify` counts such rows); writing the item again repairs it")
        }
    }

    /// Applies a batch in one transaction, all or nothing. A conflict with a concurrent
    /// transaction (a unique violation on a create both made, a serialization failure) retries
    /// the whole batch from its reads, so its checks always see the latest committed state.
    public func perform(_ operations: [StoreOperation]) throws {
        try Blocking.runOffEventLoop { try await perform(operations) }
    }

    /// Applies a batch, as the synchronous `perform(_:)`, without blocking a
    /// thread. Cancelling the task before the batch's `COMMIT` is sent rolls it back and throws
    /// `CancellationError` (nothing applied); once it is sent, the commit is awaited and the call
    /// returns normally.
    ///
    /// ```swift
    /// try await store.perform([.replace(updated)])
    /// ```
    public func perform(_ operations: [StoreOperation]) async throws {
        guard !operations.isEmpty else { return }
        try checkBatchLimits(operations, limits: limits, store: storeDescription)
        for operation in operations { try operation.key.validate() }
        let now = clock()
        // The first attempt trusts what a replace says it replaces (`apply`); every later attempt
        // reads and locks each row first.
        var trusting = true
        let (sequence, trusted) = try await RetryableConflict.retrying({
            try await withSession { session in
                defer { trusting = false }
                return try await session.transaction { transaction in try await apply(operations, now: now, trusting: trusting, in: transaction) }
            }
        }, failure: { KeysmithError(.writeConflict, "\(storeDescription) kept conflicting with other writers (\($0)); nothing was applied") },
           conflicted: { state in
               batchConflicts.withLock { conflicts in
                   conflicts.append(state)
                   if conflicts.count > 64 { conflicts.removeFirst(conflicts.count - 64) }
               }
           })
        if sequence > 0 { lastSequence.withLock { $0 = max($0, sequence) } }
        if trusted > 0 { trustedWrites.add(trusted, ordering: .relaxed) }
    }


    /// Writes a batch in `transaction`. With `trusting`, an item whose first operation is a
    /// replace at a stated version is taken to be at that version without reading and locking its
    /// row first (a bulk revocation replaces every token it read: the read and lock of 100,000
    /// rows cost a second); the write itself checks it (`UPDATE … WHERE version = stated`, and
    /// the same for a delete) and a row found changed throws `RetryableConflict`, so the batch runs
    /// again the careful way. Either way a row is written only at the version the batch saw, and
    /// the versions of one item are written in increasing order: a writer that took a lower
    /// version and waited for another's lock finds the row changed. A row another process
    /// re-sealed with a newer data key meanwhile (`rekey`) is found changed too, so the batch
    /// never writes a row back under an older key. When the batch planner refuses the batch, the
    /// trusted versions are read again: the refusal stands if they still hold, and the batch runs
    /// the careful way if not (its error may then differ). Audit entries are never trusted.
    /// Returns the sequence number of the batch's last change row and how many items it trusted.
    private func apply(_ operations: [StoreOperation], now: Date, trusting: Bool, in transaction: Transaction) async throws -> (Int64, Int) {
        let batch = try BatchRows(operations, trusting: trusting, keys: keys)
        let rows = try await fetch(batch.toRead, in: transaction, lock: true, withSealed: batch.readsRecords)
        // The version is taken after the rows are locked: two writers of one item then number
        // their versions in the order they commit (taken before, the one that waited for the
        // lock wrote the lower version over the higher, and the item's newest change looked
        // newer than its row).
        let (version, newestKey) = try await transaction.nextVersion(namespace: keys.namespaceID)
        // A data key rotated in elsewhere: load it, and seal this batch with it.
        if newestKey > keys.currentKeyID { try await keys.refresh(in: transaction) }
        let dataKey = keys.current
        let writes: [ResolvedWrite]
        do {
            writes = try resolveBatch(operations, now: now, version: ItemVersion(rawValue: String(version)), limits: limits,
                                      store: storeDescription) { key, needsMetadata in
                batch.existing(key, needsMetadata: needsMetadata, rows: rows)
            }
        } catch let error as KeysmithError where !batch.stated.isEmpty {
            // Refused while trusting: the refusal is the batch's own if what was trusted holds.
            let current = try await RecordRows.versions(batch.stated.keys.compactMap { batch.indexes[$0] }, namespace: keys.namespaceID,
                                                        in: transaction)
            guard batch.stated.allSatisfy({ key, version in batch.indexes[key].flatMap { current[$0] } == version }) else {
                throw RetryableConflict(state: "a trusted version was stale")
            }
            throw error
        }
        // Written in a few statements whatever the batch's size (arrays, not a statement per row),
        // a run of 16,384 rows at a time: each run is sealed on every core while the server
        // writes the run before.
        var pending: [Transaction.Pending] = []
        do {
            var putChanges: [RecordRows.Change] = [], removalChanges: [RecordRows.Change] = []
            for start in stride(from: 0, to: writes.count, by: 16_384) {
                let (puts, removals) = try batch.seal(writes[start..<min(start + 16_384, writes.count)], version: version, dataKey: dataKey,
                                                      rows: rows)
                pending += RecordRows.send(puts: puts, removals: removals, namespace: keys.namespaceID, version: version, keyID: dataKey.id,
                                           in: transaction)
                putChanges += puts.map { ($0.blindIndex, false, $0.sealedKey) }
                removalChanges += removals.map { ($0.blindIndex, true, $0.sealedKey) }
            }
            return (try await RecordRows.appendChanges(putChanges + removalChanges, keys: keys, version: version, after: pending, in: transaction),
                    batch.stated.count)
        } catch {
            // Statements already sent run on: each is waited for (its answer dropped) before the
            // transaction is rolled back, so the rollback and the next attempt do not queue
            // behind them, and their locks go with the rollback.
            for statement in pending { _ = try? await transaction.wait(statement) }
            throw error
        }
    }
}

/// The cost of the passphrase KDF for a new database.
public struct ScryptCost: Sendable, Hashable {
    /// log2 of N.
    public var logN: Int
    /// The vault's default (N = 2^17).
    public static let standard = ScryptCost(logN: 17)
    /// For tests (N = 2^14).
    public static let testing = ScryptCost(logN: 14)

    /// A cost of 2^logN (14 to 20).
    public init(logN: Int) { self.logN = logN }
}
