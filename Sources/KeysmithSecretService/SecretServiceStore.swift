public import FoundationEssentials
public import Keysmith
public import Logging
import KeysmithSystem
import Synchronization

/// The freedesktop Secret Service (gnome-keyring, KeePassXC, …) as a Keysmith store, through
/// libsecret.
///
/// Items are stored under Keysmith's schemas, `org.keysmith.GenericPassword` and
/// `org.keysmith.InternetPassword`, with attributes the standard tools understand:
/// `secret-tool search service mail account bob` finds a generic password Keysmith stored, and
/// an item that `secret-tool store` created with those attributes reads back through Keysmith
/// (docs/secret-service.md lists every attribute).
///
/// ```swift
/// let store = try SecretServiceStore()                         // the default collection
/// try Keysmith.set(Data("pw".utf8), forAccount: "bob", inService: "mail", in: store)
/// ```
///
/// Every call has a deadline (``timeout``, 5 s by default): a locked collection, a dismissed
/// prompt, no Secret Service on the bus and no D-Bus session at all each give their own
/// `KeysmithError` in at most that time, never a hang.
///
/// The Secret Service has no transactions: ``perform(_:)`` takes a writer lock that every
/// Keysmith process shares (a `flock` on a file under `$XDG_RUNTIME_DIR`), checks the whole
/// batch, then applies it item by item, and on a failure puts back what it had changed; if that
/// fails too, it throws `KeysmithError.Code.partiallyApplied` naming the keys left changed
/// (``isolation`` is `StoreIsolation.serializedWrites`; see docs/secret-service.md).
public final class SecretServiceStore: SecureStore {
    /// The collection's alias or label.
    public let collectionName: String
    /// When set, the store sees only items carrying this namespace (attribute
    /// `keysmith-namespace`), and marks every item it writes with it: several applications, or
    /// tests, can share a collection without seeing each other's items.
    public let namespace: String?
    /// The deadline of every call to the service.
    public let timeout: Duration
    private let clock: @Sendable () -> Date
    private let state: Mutex<Connection>
    private let writerLock: WriterLock
    private let faults = Mutex(FaultPlan())
    /// Where the store reports what it does: batches at `debug`, a failed rollback at `error`.
    /// Messages never contain a secret, and name items only at `trace`.
    public let logger: Logger

    /// Failures to inject, for the tests of rollback (the real service fails rarely on cue).
    package struct FaultPlan: Sendable {
        /// Fail the write with this index (0-based) within the next batch.
        package var failWrite: Int?
        /// Fail every rollback write of that batch too.
        package var failRollback = false
        package init(failWrite: Int? = nil, failRollback: Bool = false) {
            self.failWrite = failWrite
            self.failRollback = failRollback
        }
    }

    /// Makes the next batch fail as planned (tests only).
    package func injectFaults(_ plan: FaultPlan) {
        faults.withLock { $0 = plan }
    }

    private struct Connection: @unchecked Sendable {
        // GObject references, used only under the mutex.
        var service: GObjectReference
        var collection: GObjectReference
    }

    static let genericSchema = LibSecret.GSchema(
        name: "org.keysmith.GenericPassword",
        attributes: ["service", "account", "comment", "description", "creator", "type", "invisible", "negative", "generic",
                     "keysmith-labelled", "keysmith-created", "keysmith-modified", "keysmith-namespace", "keysmith-version"])
    static let internetSchema = LibSecret.GSchema(
        name: "org.keysmith.InternetPassword",
        attributes: ["server", "port", "protocol", "authtype", "domain", "path", "account", "comment", "description", "creator",
                     "type", "invisible", "negative", "generic", "keysmith-labelled", "keysmith-created", "keysmith-modified",
                     "keysmith-namespace", "keysmith-version"])
    /// Keysmith's own records (tokens, the audit log): a schema of their own, marked by the
    /// `keysmith-record` attribute, so user-level searches and `secret-tool` users can tell them apart.
    static let recordSchema = LibSecret.GSchema(
        name: "org.keysmith.Record",
        attributes: ["keysmith-record", "service", "account", "comment", "description", "creator", "type", "invisible",
                     "negative", "generic", "keysmith-labelled", "keysmith-created", "keysmith-modified",
                     "keysmith-namespace", "keysmith-version"])

    /// Connects to the Secret Service and opens a collection.
    ///
    /// - Parameters:
    ///   - collection: An alias (`default`, `session`) or a collection's label; `default` if omitted.
    ///   - namespace: Only items of this namespace (see ``namespace``); all Keysmith-shaped items if `nil`.
    ///   - timeout: The deadline of every call; 5 seconds if omitted.
    ///   - clock: The source of created and modified dates.
    ///   - logger: Where to report what the store does (label `keysmith.secret-service` if omitted).
    /// - Throws: `KeysmithError.Code.storeUnavailable` when libsecret cannot be loaded (it is
    ///   loaded here, on first use: a program that never opens this store never loads it), when
    ///   there is no D-Bus session, no Secret Service on it, or no such collection; `KeysmithError.Code.storeLocked` when the
    ///   collection is locked; `KeysmithError.Code.timedOut` when the service does not answer;
    ///   `KeysmithError.Code.ioFailure` when the writer lock's directory (under
    ///   `$XDG_RUNTIME_DIR`, else `/tmp/keysmith-UID`) cannot be made.
    public init(
        collection: String = "default", namespace: String? = nil, timeout: Duration = .seconds(5),
        clock: @escaping @Sendable () -> Date = { Date() }, logger: Logger = Logger(label: "keysmith.secret-service")
    ) throws {
        // libsecret is loaded here, on first use, not at the program's start.
        _ = try LibSecretLibrary.loaded.get()
        try Self.checkSessionBus()
        // Connecting loads the collection's items: one deleted by another process meanwhile
        // makes the load fail, and connecting again sees the collection as it is now.
        var attempt = 0
        var connected: (service: GObjectReference, collection: GObjectReference)
        while true {
            attempt += 1
            do {
                let service = try LibSecret.connect(timeout: timeout)
                connected = (service, try LibSecret.collection(service, named: collection, timeout: timeout))
                break
            } catch let vanished as SecretVanished {
                if attempt >= 20 { throw vanished.error }
                System.sleep(microseconds: UInt32(1_000 * attempt))
            }
        }
        let service = connected.service, opened = connected.collection
        if LibSecret.isLocked(opened) {
            throw KeysmithError(.storeLocked, "the Secret Service collection \"\(collection)\" is locked; unlock it (log in to the desktop, or unlock it in your keyring manager) and try again")
        }
        self.collectionName = collection
        self.namespace = namespace
        self.timeout = timeout
        self.clock = clock
        self.state = Mutex(Connection(service: service, collection: opened))
        self.writerLock = try WriterLock.forSecretService()
        self.logger = logger
    }

    /// Whether a Secret Service answers on this session within `timeout`.
    public static func isAvailable(timeout: Duration = .seconds(1)) -> Bool {
        (try? SecretServiceStore(timeout: timeout)) != nil
    }

    /// Fails fast, with a clear message, when there is no session bus to talk to at all.
    private static func checkSessionBus() throws {
        let environment = ProcessInfo.processInfo.environment
        if let address = environment["DBUS_SESSION_BUS_ADDRESS"], !address.isEmpty { return }
        if let runtime = environment["XDG_RUNTIME_DIR"], FileManager.default.fileExists(atPath: runtime + "/bus") { return }
        throw KeysmithError(
            .storeUnavailable,
            "there is no D-Bus session bus (DBUS_SESSION_BUS_ADDRESS is unset and $XDG_RUNTIME_DIR/bus does not exist); run inside a desktop session or dbus-run-session, or use the file vault")
    }

    /// Locks the collection (for tests of the locked state, and for scripts that want to).
    public func lock() throws {
        do {
            try state.withLock { try LibSecret.lock($0.service, $0.collection, timeout: timeout) }
        } catch let vanished as SecretVanished {
            throw vanished.error
        }
    }

    /// `Secret Service collection NAME`.
    public var storeDescription: String { "Secret Service collection \"\(collectionName)\"" }

    /// `StoreIsolation.serializedWrites`: writers are serialized across processes by the writer
    /// lock, but the service applies a batch item by item.
    public var isolation: StoreIsolation { .serializedWrites }

    /// Secrets up to 8 MiB (each goes over D-Bus in one message and lives in the daemon's memory),
    /// names and metadata up to 64 KiB each.
    public var limits: StoreLimits { Self.limits }

    static let limits = StoreLimits(maximumSecretSize: 8 << 20, maximumFieldSize: 64 << 10)

    // MARK: SecureStore

    /// Reads one item with its secret; `nil` when there is none.
    ///
    /// - Throws: `KeysmithError.Code.storeLocked`, `KeysmithError.Code.timedOut` or
    ///   `KeysmithError.Code.storeUnavailable` when the service cannot answer.
    public func read(_ key: ItemKey) throws -> SecureRecord? {
        try retryingVanished {
            try state.withLock { connection in
                try find(key, in: connection, secrets: true).first.flatMap { try record($0, withSecret: true) }
            }
        }
    }

    /// Runs a read again when an item it found vanished before it could be read: reads do not
    /// take the writer lock, so another process may replace an item between a search and the
    /// loading of its secret. A read then sees the state before or after that write, never an
    /// error. Gives up (with the last error) after 20 attempts.
    private func retryingVanished<T>(_ body: () throws -> T) throws -> T {
        var attempt = 0
        while true {
            attempt += 1
            do {
                return try body()
            } catch let vanished as SecretVanished {
                if attempt >= 20 { throw vanished.error }
                System.sleep(microseconds: UInt32(1_000 * attempt))  // let the other writer finish
            }
        }
    }

    /// Lists the Keysmith-shaped items that match, without loading secrets. Identity fields
    /// and the type are matched by the service; the rest here.
    public func search(_ query: ItemQuery) throws -> [ItemInfo] {
        try retryingVanished { try searchOnce(query) }
    }

    private func searchOnce(_ query: ItemQuery) throws -> [ItemInfo] {
        try state.withLock { connection in
            var attributes: [String: String] = [:]
            if let service = query.service { attributes["service"] = service }
            if let account = query.account { attributes["account"] = account }
            if let server = query.server { attributes["server"] = server }
            if let type = query.type { attributes["type"] = type }
            if let recordType = query.recordType { attributes["keysmith-record"] = recordType.rawValue }
            if let namespace { attributes["keysmith-namespace"] = namespace }
            let items = try LibSecret.search(connection.collection, attributes: attributes, loadSecrets: false, timeout: timeout)
            return try items.compactMap { try record($0, withSecret: false)?.info }.filter { query.matches($0.attributes) }
        }
    }

    /// Checks the batch's sizes against ``limits``; then, under the writer lock shared by every
    /// Keysmith process, checks the whole batch against the collection and applies it item by
    /// item; on a failure, puts back what it changed.
    ///
    /// - Throws: `KeysmithError.Code.limitExceeded` before the lock is taken when an operation
    ///   gives a secret or a field over the limits; otherwise the batch's first error when nothing is left changed; `KeysmithError.Code.partiallyApplied`
    ///   naming the keys left changed when putting them back failed too; `KeysmithError.Code.timedOut`
    ///   when another process holds the writer lock past the deadline.
    public func perform(_ operations: [StoreOperation]) throws {
        try checkBatchLimits(operations, limits: limits, store: storeDescription)
        try state.withLock { connection in
            try writerLock.withExclusive(timeout: timeout) {
                do {
                    try performLocked(operations, in: connection)
                } catch let vanished as SecretVanished {
                    throw vanished.error  // under the writer lock no Keysmith process replaces items
                }
            }
        }
    }

    private func performLocked(_ operations: [StoreOperation], in connection: Connection) throws {
        let now = clock()
        var before: [ItemKey: SecureRecord] = [:]
        // The items each key holds now, found once while checking the batch and reused when
        // applying it (resolveBatch gives one write per key, so nothing changes in between).
        var found: [ItemKey: [LibSecret.Item]] = [:]
        let version = ItemVersion(rawValue: try Self.newVersion())
        let writes = try resolveBatch(operations, now: now, version: version, limits: limits, store: storeDescription) { key, _ in
            let items = try find(key, in: connection, secrets: true)
            found[key] = items
            guard let item = items.first, let existing = try record(item, withSecret: true) else { return .absent }
            before[key] = existing
            return .present(existing.info)
        }
        var applied: [ResolvedWrite] = []
        let plan = faults.withLock { plan in
            defer { plan = FaultPlan() }
            return plan
        }
        do {
            for (index, write) in writes.enumerated() {
                if plan.failWrite == index { throw KeysmithError(.storeUnavailable, "a write failed (injected fault)") }
                try apply(write, replacing: found[write.key], in: connection)
                applied.append(write)
            }
        } catch {
            // Put back what this batch changed, newest first; what cannot be put back is named.
            var leftChanged: [ItemKey] = []
            var rollbackErrors: [KeysmithError] = []
            for write in applied.reversed() {
                do {
                    if plan.failRollback { throw KeysmithError(.storeUnavailable, "a rollback write failed (injected fault)") }
                    if let previous = before[write.key] {
                        try apply(.put(previous), in: connection)
                    } else {
                        try apply(.remove(write.key), in: connection)
                    }
                } catch let rollbackError as KeysmithError {
                    leftChanged.append(write.key)
                    rollbackErrors.append(rollbackError)
                }
            }
            logger.warning("a batch failed midway and was rolled back", metadata: [
                "writes": "\(writes.count)", "applied": "\(applied.count)", "leftChanged": "\(leftChanged.count)",
            ])
            guard leftChanged.isEmpty else {
                logger.error("a rollback failed: changes are left applied", metadata: ["leftChanged": "\(leftChanged.count)"])
                throw KeysmithError(
                    .partiallyApplied,
                    "a batch failed in \(storeDescription) (\(error)) and \(leftChanged.count) of its changes could not be put back: "
                        + leftChanged.map(\.description).joined(separator: "; ")
                        + "; first rollback error: \(rollbackErrors[0].message)")
            }
            throw error
        }
        logger.debug("applied a batch", metadata: ["writes": "\(writes.count)"])
    }

    /// A fresh version tag: 16 random bytes as hex.
    private static func newVersion() throws -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<2).map { _ in
            let value = generator.next() as UInt64
            let digits = String(value, radix: 16)
            return String(repeating: "0", count: 16 - digits.count) + digits
        }.joined()
    }

    // MARK: Mapping

    private func find(_ key: ItemKey, in connection: Connection, secrets: Bool) throws -> [LibSecret.Item] {
        let items = try LibSecret.search(connection.collection, attributes: identityQuery(key), loadSecrets: secrets, timeout: timeout)
        return try items.filter { try record($0, withSecret: false)?.key == key }
    }

    /// Writes one item. `existing` is what the key holds now, when the caller already knows;
    /// otherwise it is looked up (rollback, after other writes).
    private func apply(_ write: ResolvedWrite, replacing known: [LibSecret.Item]? = nil, in connection: Connection) throws {
        let existing = try known ?? find(write.key, in: connection, secrets: false)
        switch write {
        case .put(let record):
            var attributes = Self.attributes(of: record)
            if let namespace { attributes["keysmith-namespace"] = namespace }
            let schema = switch record.key.kind {
            case .genericPassword: Self.genericSchema
            case .internetPassword: Self.internetSchema
            case .keysmithRecord: Self.recordSchema
            }
            try LibSecret.store(connection.collection, schema: schema, attributes: attributes, label: Self.label(of: record),
                                secret: Array(record.secret), timeout: timeout)
            // The store replaced an item with exactly these attributes; other versions of the
            // same item (different metadata) go.
            for item in existing where item.attributes != attributes {
                try LibSecret.delete(item.reference, timeout: timeout)
            }
        case .remove:
            for item in existing { try LibSecret.delete(item.reference, timeout: timeout) }
        }
    }

    private func identityQuery(_ key: ItemKey) -> [String: String] {
        var query: [String: String]
        switch key {
        case .genericPassword(let service, let account): query = ["service": service, "account": account]
        case .internetPassword(let internet):
            query = ["server": internet.server, "protocol": internet.internetProtocol.rawValue, "account": internet.account]
        case .keysmithRecord(let record):
            query = ["keysmith-record": record.recordType.rawValue, "service": record.service, "account": record.account]
        }
        if let namespace { query["keysmith-namespace"] = namespace }
        return query
    }

    static func label(of record: SecureRecord) -> String {
        if let label = record.attributes.label { return label }
        switch record.key {
        case .genericPassword(let service, let account): return "\(account) at \(service)"
        case .internetPassword(let internet): return "\(internet.account) at \(internet.internetProtocol.rawValue)://\(internet.server)"
        case .keysmithRecord(let record): return "Keysmith \(record.recordType): \(record.account) at \(record.service)"
        }
    }

    static func encode(_ date: Date) -> String { String(date.timeIntervalSinceReferenceDate.bitPattern, radix: 16) }

    static func decode(_ text: String?) -> Date? {
        text.flatMap { UInt64($0, radix: 16) }.map { Date(timeIntervalSinceReferenceDate: Double(bitPattern: $0)) }
    }

    static func attributes(of record: SecureRecord) -> [String: String] {
        let attributes = record.attributes
        var result: [String: String] = [:]
        switch attributes.key {
        case .genericPassword(let service, let account):
            result["service"] = service
            result["account"] = account
        case .internetPassword(let internet):
            result["server"] = internet.server
            result["port"] = String(internet.port)
            result["protocol"] = internet.internetProtocol.rawValue
            result["authtype"] = internet.authenticationType.rawValue
            result["domain"] = internet.securityDomain
            result["path"] = internet.path
            result["account"] = internet.account
        case .keysmithRecord(let key):
            result["keysmith-record"] = key.recordType.rawValue
            result["service"] = key.service
            result["account"] = key.account
        }
        if let comment = attributes.comment { result["comment"] = comment }
        if let description = attributes.itemDescription { result["description"] = description }
        if let creator = attributes.creator { result["creator"] = creator }
        if let type = attributes.type { result["type"] = type }
        if attributes.isInvisible == true { result["invisible"] = "true" }
        if attributes.isNegative == true { result["negative"] = "true" }
        if let generic = attributes.generic { result["generic"] = generic.base64EncodedString() }
        if attributes.label != nil { result["keysmith-labelled"] = "true" }
        result["keysmith-created"] = encode(record.info.created)
        result["keysmith-modified"] = encode(record.info.modified)
        result["keysmith-version"] = record.info.version.rawValue
        return result
    }

    /// An item as a record; `nil` for items that are not Keysmith-shaped (other programs' items).
    private func record(_ item: LibSecret.Item, withSecret: Bool) throws -> SecureRecord? {
        let a = item.attributes
        guard let account = a["account"], a["keysmith-namespace"] == namespace else { return nil }
        let key: ItemKey
        if let recordType = a["keysmith-record"] {
            guard let service = a["service"] else { return nil }
            key = .keysmithRecord(KeysmithRecordKey(recordType: KeysmithRecordType(rawValue: recordType), service: service, account: account))
        } else if let service = a["service"], a["server"] == nil {
            key = .genericPassword(service: service, account: account)
        } else if let server = a["server"], let name = a["protocol"], let internetProtocol = InternetProtocol(rawValue: name) {
            guard let authentication = InternetAuthenticationType(rawValue: a["authtype"] ?? "default") else { return nil }
            key = .internetPassword(InternetPasswordKey(
                server: server, port: Int(a["port"] ?? "0") ?? 0, internetProtocol: internetProtocol,
                authenticationType: authentication, securityDomain: a["domain"] ?? "", path: a["path"] ?? "", account: account))
        } else {
            return nil
        }
        let labelled = a["keysmith-labelled"] == "true" || a["keysmith-created"] == nil
        let attributes = ItemAttributes(
            key: key, label: labelled ? item.label : nil, comment: a["comment"], itemDescription: a["description"],
            creator: a["creator"], type: a["type"], isInvisible: a["invisible"] == "true", isNegative: a["negative"] == "true",
            generic: a["generic"].flatMap { Data(base64Encoded: $0) })
        let created = Self.decode(a["keysmith-created"]) ?? Date(timeIntervalSince1970: TimeInterval(item.created))
        let modified = Self.decode(a["keysmith-modified"]) ?? Date(timeIntervalSince1970: TimeInterval(item.modified))
        if withSecret, item.secret == nil {
            // Either the collection is locked, or the item was replaced between the search and
            // the loading of secrets: readers try again (`retryingVanished`) before saying locked.
            throw SecretVanished(error: KeysmithError(
                .storeLocked, "the Secret Service did not hand over the secret of \(key); is the collection locked?"))
        }
        // Items Keysmith wrote carry their version; others (secret-tool's) change their modified
        // time, to the second, when the service rewrites them.
        let version = a["keysmith-version"].map { ItemVersion(rawValue: $0) }
            ?? ItemVersion(rawValue: "ss-\(item.created)-\(item.modified)")
        return SecureRecord(info: ItemInfo(attributes: attributes, created: created, modified: modified, version: version),
                            secret: Data(item.secret ?? []))
    }
}

/// A secret that was not handed over: the collection is locked, or the item was replaced after
/// it was found. Readers try again; anything else reports `error`.
struct SecretVanished: Error {
    let error: KeysmithError
}

extension SecretServiceStore: ExclusiveLocking {
    /// An open-file-description lock on one byte of `$XDG_RUNTIME_DIR/keysmith/locks/named.lock`, shared
    /// by every Keysmith process of this user; released by the holder's end too.
    public func tryExclusiveLock(named name: String) throws -> (any HeldLock)? {
        let directory = String(writerLock.path[..<(writerLock.path.lastIndex(of: "/") ?? writerLock.path.endIndex)]) + "/locks"
        do {
            return try LockFile.tryAcquire(directory: directory, name: name).map(SecretServiceLock.init)
        } catch let error as SystemError {
            throw KeysmithError(.ioFailure, "cannot take the lock \"\(OneLine.escaped(String(name.prefix(64))))\": \(error)")
        }
    }
}

/// A held `LockFile`, as the core's ``HeldLock``.
final class SecretServiceLock: HeldLock {
    let file: LockFile
    init(_ file: LockFile) { self.file = file }
    func release() { file.release() }
    func isHeld() -> Bool { file.isHeld }
}
