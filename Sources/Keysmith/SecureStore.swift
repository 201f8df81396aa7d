public import FoundationEssentials

/// One change to a store, for ``SecureStore/perform(_:)``.
///
/// Metadata follow the update rule (``ItemAttributes``): a field left `nil` is kept by an
/// update or upsert, stored as none by a create; an empty string clears it.
public enum StoreOperation: Sendable {
    /// Creates an item only if its key is absent: fails with ``KeysmithError/Code/duplicateItem``
    /// if it exists, also when another handle or process created it a moment earlier.
    case create(ItemAttributes, secret: Data)
    /// Replaces an existing item's secret and the metadata given, keeping its creation date;
    /// fails with ``KeysmithError/Code/itemNotFound`` if its key does not exist. With
    /// `ifVersion`, only if the item is still at that version (it was not written since it was
    /// read): otherwise it fails with ``KeysmithError/Code/writeConflict``.
    case update(ItemAttributes, secret: Data, ifVersion: ItemVersion? = nil)
    /// Creates the item, or replaces its secret and the metadata given if it exists.
    case upsert(ItemAttributes, secret: Data)
    /// Writes back a record read from this store, changed, if the item is still at the version
    /// it was read at (``ItemInfo/version``): a compare-and-swap of the whole record, the
    /// way to finish a read-modify-write. The item's metadata and secret become exactly the
    /// record's (no update rule: nothing is merged) and its creation date the record's; the
    /// store sets the modification date and a new version. Fails with
    /// ``KeysmithError/Code/writeConflict`` if the item was written since, and with
    /// ``KeysmithError/Code/itemNotFound`` if it was deleted.
    ///
    /// ```swift
    /// var record = try #require(try store.read(key))
    /// record.secret = Data("rotated".utf8)
    /// try store.perform([.replace(record)])   // writeConflict if someone wrote in between
    /// ```
    ///
    /// A store checks the version without reading the item's metadata first, so a bulk job
    /// that read its records with ``SecureStore/forEachRecord(matching:chunkSize:_:)`` writes
    /// them back without the store decrypting each again.
    case replace(SecureRecord)
    /// Stores a record exactly as given, dates and metadata included, replacing any item with its
    /// key. Used by migration and restore; the store gives it a new version.
    case restore(SecureRecord)
    /// Deletes an existing item; fails with ``KeysmithError/Code/itemNotFound`` if it does not
    /// exist, and with ``KeysmithError/Code/writeConflict`` if `ifVersion` is given and the item
    /// was written since.
    case delete(ItemKey, ifVersion: ItemVersion? = nil)

    /// The key the operation touches.
    public var key: ItemKey {
        switch self {
        case .create(let attributes, _), .update(let attributes, _, _), .upsert(let attributes, _):
            attributes.key
        case .replace(let record), .restore(let record): record.key
        case .delete(let key, _): key
        }
    }
}

/// What a store guarantees about concurrent batches (``SecureStore/isolation``).
public enum StoreIsolation: String, Sendable, Hashable, CaseIterable {
    /// Every batch is applied at once and in isolation, across handles and processes: a reader
    /// sees all of a batch or none of it, and a batch's checks (duplicates, versions) and its
    /// writes happen under one lock. The file vault (a `flock` and one atomic commit file) and the
    /// in-memory store (one mutex).
    case serializable
    /// Writers are serialized across handles and processes (so create-only-if-absent and
    /// conditional updates hold), but a batch is applied item by item: a concurrent reader may see
    /// part of it, and a batch that fails midway is rolled back item by item; a rollback that
    /// fails throws ``KeysmithError/Code/partiallyApplied`` naming the keys left changed. The
    /// Secret Service, which has no transactions.
    case serializedWrites
}

/// The largest item a store accepts (``SecureStore/limits``). A write over a limit is refused
/// with ``KeysmithError/Code/limitExceeded`` before anything is written: a store never
/// acknowledges what it could not read back.
public struct StoreLimits: Hashable, Sendable, CustomStringConvertible {
    /// The largest secret, in bytes.
    public var maximumSecretSize: Int
    /// The largest name, metadata string or `generic` data, in UTF-8 bytes.
    public var maximumFieldSize: Int

    /// Creates limits.
    ///
    /// - Parameters:
    ///   - maximumSecretSize: The largest secret, in bytes.
    ///   - maximumFieldSize: The largest name or metadata field, in bytes.
    public init(maximumSecretSize: Int, maximumFieldSize: Int) {
        self.maximumSecretSize = maximumSecretSize
        self.maximumFieldSize = maximumFieldSize
    }

    /// The file vault's limits, also the in-memory store's by default: secrets up to 32 MiB,
    /// fields up to 64 KiB.
    public static let standard = StoreLimits(maximumSecretSize: 32 << 20, maximumFieldSize: 64 << 10)

    /// `secrets up to N bytes, fields up to M bytes`.
    public var description: String {
        "secrets up to \(maximumSecretSize) bytes, names and metadata up to \(maximumFieldSize) bytes each"
    }

    /// Checks a record about to be written.
    ///
    /// - Parameters:
    ///   - record: The record.
    ///   - store: The store's description, for the message.
    /// - Throws: ``KeysmithError/Code/limitExceeded`` naming the item, the field and the limit;
    ///   never quoting the secret.
    public func check(_ record: SecureRecord, in store: String) throws {
        try check(record.attributes, secretSize: record.secret.count, in: store)
    }

    /// Checks what an item is to hold: its key, the attributes it keeps and its secret's size.
    ///
    /// - Throws: ``KeysmithError/Code/limitExceeded`` naming the item, the field and the limit.
    package func check(_ attributes: ItemAttributes, secretSize: Int, in store: String) throws {
        if secretSize > maximumSecretSize {
            throw KeysmithError(
                .limitExceeded,
                "the secret of \(attributes.key) is \(secretSize) bytes; \(store) keeps secrets of at most \(maximumSecretSize) bytes; nothing was written")
        }
        // Most writes are far below the limits: found without building the list below.
        if Self.largestField(attributes) <= maximumFieldSize { return }
        var fields = attributes.metadataStrings.compactMap { name, value in value.map { (name, $0.utf8.count) } }
        switch attributes.key {
        case .genericPassword(let service, let account):
            fields += [("service", service.utf8.count), ("account", account.utf8.count)]
        case .internetPassword(let key):
            fields += [("server", key.server.utf8.count), ("account", key.account.utf8.count),
                       ("security domain", key.securityDomain.utf8.count), ("path", key.path.utf8.count)]
        case .keysmithRecord(let key):
            fields += [("service", key.service.utf8.count), ("account", key.account.utf8.count)]
        }
        if let generic = attributes.generic { fields.append(("generic data", generic.count)) }
        for (name, size) in fields where size > maximumFieldSize {
            throw KeysmithError(
                .limitExceeded,
                "the \(name) of an item is \(size) bytes; \(store) keeps names and metadata of at most \(maximumFieldSize) bytes; nothing was written")
        }
    }

    /// The size of the largest name, metadata string or `generic` data, in bytes.
    private static func largestField(_ attributes: ItemAttributes) -> Int {
        var largest = max(attributes.label?.utf8.count ?? 0, attributes.comment?.utf8.count ?? 0,
                          attributes.itemDescription?.utf8.count ?? 0, attributes.creator?.utf8.count ?? 0,
                          attributes.type?.utf8.count ?? 0, attributes.generic?.count ?? 0)
        switch attributes.key {
        case .genericPassword(let service, let account):
            largest = max(largest, service.utf8.count, account.utf8.count)
        case .internetPassword(let key):
            largest = max(largest, key.server.utf8.count, key.account.utf8.count, key.securityDomain.utf8.count, key.path.utf8.count)
        case .keysmithRecord(let key):
            largest = max(largest, key.service.utf8.count, key.account.utf8.count)
        }
        return largest
    }
}

/// A place that keeps secrets: the data access layer that application code talks to.
///
/// Application code never looks behind this protocol, so stores can be swapped (the file vault,
/// the Secret Service, the in-memory store) without touching it. A store implements three
/// requirements; creating, updating and deleting one item are extensions built on
/// ``perform(_:)``.
///
/// Rules every store keeps, checked by the shared conformance suite:
/// - Reads that find nothing return `nil` (or an empty array); they never throw "not found".
///   Update and delete of a missing item throw ``KeysmithError/Code/itemNotFound``;
///   create of an existing one throws ``KeysmithError/Code/duplicateItem``, also across
///   handles and processes.
/// - ``perform(_:)`` is all or nothing: if any operation fails, none is applied.
/// - Identity is bytes (``ItemKey``): `"Bob"` and `"bob"`, and the two Unicode spellings of
///   `"café"`, are different items in every store.
/// - Metadata follow the update rule (``ItemAttributes``): what a write does not give is kept.
/// - Every read returns the item's ``ItemVersion``; a conditional update or delete fails with
///   ``KeysmithError/Code/writeConflict`` if the item was written since.
/// - A write over ``limits`` is refused before anything is written.
/// - Keysmith's own records (``ItemNamespace/keysmith``) are listed only when asked for.
/// - Every method is safe to call from many threads and tasks at once; ``isolation`` says what
///   a concurrent reader sees of a batch.
///
/// ```swift
/// let store: any SecureStore = MemoryStore()
/// let key = ItemKey.genericPassword(service: "mail", account: "bob")
/// try store.create(ItemAttributes(key: key, label: "Bob's mail"), secret: Data("s3cret".utf8))
/// let record = try store.read(key)   // SecureRecord?
/// ```
public protocol SecureStore: AnyObject, Sendable {
    /// A short description of the store for messages, such as `file vault at /home/me/.local/share/keysmith`.
    var storeDescription: String { get }

    /// What the store guarantees about concurrent batches.
    var isolation: StoreIsolation { get }

    /// The largest item the store accepts; larger writes are refused before anything is written.
    var limits: StoreLimits { get }

    /// Reads one item with its secret.
    ///
    /// - Parameter key: The item's identity.
    /// - Returns: The record, or `nil` when the store holds no such item.
    /// - Throws: ``KeysmithError`` when the store cannot answer (locked, unavailable, or the
    ///   record is corrupt); never for a missing item.
    func read(_ key: ItemKey) throws -> SecureRecord?

    /// Reads many items at once; a store may do it faster than one read at a time.
    ///
    /// - Parameter keys: The items' identities.
    /// - Returns: One entry per key, in order: the record, or `nil` for a missing item.
    /// - Throws: As ``read(_:)``, for the first key that fails.
    func read(_ keys: [ItemKey]) throws -> [SecureRecord?]

    /// Lists the items that match a query, without their secrets.
    ///
    /// - Parameter query: Which items; ``ItemQuery/init(kind:service:account:server:port:internetProtocol:authenticationType:securityDomain:path:label:type:namespace:recordType:)`` with no arguments matches all.
    /// - Returns: The matching items in no particular order; empty when none match.
    /// - Throws: ``KeysmithError`` when the store cannot answer;
    ///   ``KeysmithError/Code/corruptData`` when it holds a record it cannot read (damaged,
    ///   tampered with, rolled back): a listing never looks whole while leaving one out.
    func search(_ query: ItemQuery) throws -> [ItemInfo]

    /// Reads every item that matches a query, secrets included, a chunk at a time: the way
    /// for a bulk job to visit many items without holding them all, or reading each twice.
    ///
    /// Each chunk is read at one instant; an item written between chunks may come at its old
    /// or its new version (make the writes that follow conditional on
    /// ``ItemInfo/version``). Every matching item that exists for the whole scan comes
    /// exactly once. A damaged record fails the scan with ``KeysmithError/Code/corruptData``,
    /// as it fails ``search(_:)``: never left out silently.
    ///
    /// ```swift
    /// try store.forEachRecord(matching: ItemQuery(service: "mail"), chunkSize: 512) { records, progress in
    ///     for record in records { print(record.key, record.secret.count) }
    ///     print("\(progress.examined) of about \(progress.total)")
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - query: Which items.
    ///   - chunkSize: At most this many records per call of `body` (at least 1).
    ///   - body: Called with each non-empty chunk and how far the scan has got; `body` may call
    ///     the store. An error it throws ends the scan and is rethrown.
    /// - Throws: ``KeysmithError`` when the store cannot answer, or what `body` throws.
    func forEachRecord(
        matching query: ItemQuery, chunkSize: Int, _ body: (_ records: [SecureRecord], _ progress: ScanProgress) throws -> Void
    ) throws

    /// Applies operations in order, all or nothing.
    ///
    /// Later operations see the effect of earlier ones (a create then an update of the same key
    /// succeeds). A store that can commit durably commits the whole batch at once.
    ///
    /// - Parameter operations: The changes, applied in order.
    /// - Throws: ``KeysmithError``: ``KeysmithError/Code/limitExceeded`` when any operation
    ///   gives a secret or a field over ``limits`` (checked first, before the store is read or
    ///   its writer lock taken, whichever operation it is); otherwise
    ///   ``KeysmithError/Code/duplicateItem``, ``KeysmithError/Code/itemNotFound``,
    ///   ``KeysmithError/Code/invalidArgument`` for the first operation that cannot be applied,
    ///   or a store failure. Nothing is applied then.
    func perform(_ operations: [StoreOperation]) throws
}

/// How far a scan (``SecureStore/forEachRecord(matching:chunkSize:_:)``) has got.
public struct ScanProgress: Sendable, Hashable {
    /// Items examined so far (matching or not).
    public var examined: Int
    /// About how many items the scan examines in all (never less than `examined`).
    public var total: Int

    /// Creates a progress report.
    public init(examined: Int, total: Int) {
        self.examined = examined
        self.total = max(total, examined)
    }
}

extension SecureStore {
    /// ``forEachRecord(matching:chunkSize:_:)`` in chunks of 1,024 records.
    public func forEachRecord(
        matching query: ItemQuery, _ body: (_ records: [SecureRecord], _ progress: ScanProgress) throws -> Void
    ) throws {
        try forEachRecord(matching: query, chunkSize: 1024, body)
    }

    /// Lists the matches with ``search(_:)``, then reads them with ``SecureStore/read(_:)-([ItemKey])``
    /// `chunkSize` at a time; an item deleted in between is left out.
    public func forEachRecord(
        matching query: ItemQuery, chunkSize: Int, _ body: (_ records: [SecureRecord], _ progress: ScanProgress) throws -> Void
    ) throws {
        let keys = try search(query).map(\.key)
        let size = max(1, chunkSize)
        for start in stride(from: 0, to: keys.count, by: size) {
            let end = min(start + size, keys.count)
            let records = try read(Array(keys[start..<end])).compactMap { $0 }.filter { query.matches($0.info.attributes) }
            if !records.isEmpty { try body(records, ScanProgress(examined: end, total: keys.count)) }
        }
    }

    /// Reads the keys one by one with ``read(_:)-(ItemKey)``.
    public func read(_ keys: [ItemKey]) throws -> [SecureRecord?] {
        try keys.map { try read($0) }
    }

    /// Creates an item.
    ///
    /// - Parameters:
    ///   - attributes: The item's identity and metadata.
    ///   - secret: The secret.
    /// - Throws: ``KeysmithError/Code/duplicateItem`` if the key exists, or a store failure.
    public func create(_ attributes: ItemAttributes, secret: Data) throws {
        try perform([.create(attributes, secret: secret)])
    }

    /// Replaces an existing item's secret and the metadata given (the rest is kept).
    ///
    /// - Parameters:
    ///   - attributes: The item's identity and the metadata to change.
    ///   - secret: The new secret.
    ///   - version: Only if the item is still at this version; unconditionally if `nil`.
    /// - Throws: ``KeysmithError/Code/itemNotFound`` if the key does not exist;
    ///   ``KeysmithError/Code/writeConflict`` if it is no longer at `version`; a store failure.
    public func update(_ attributes: ItemAttributes, secret: Data, ifVersion version: ItemVersion? = nil) throws {
        try perform([.update(attributes, secret: secret, ifVersion: version)])
    }

    /// Creates the item, or replaces its secret and the metadata given if it exists.
    ///
    /// - Parameters:
    ///   - attributes: The item's identity and metadata.
    ///   - secret: The secret.
    /// - Throws: A store failure.
    public func upsert(_ attributes: ItemAttributes, secret: Data) throws {
        try perform([.upsert(attributes, secret: secret)])
    }

    /// Deletes an existing item.
    ///
    /// - Parameters:
    ///   - key: The item's identity.
    ///   - version: Only if the item is still at this version; unconditionally if `nil`.
    /// - Throws: ``KeysmithError/Code/itemNotFound`` if the key does not exist;
    ///   ``KeysmithError/Code/writeConflict`` if it is no longer at `version`; a store failure.
    public func delete(_ key: ItemKey, ifVersion version: ItemVersion? = nil) throws {
        try perform([.delete(key, ifVersion: version)])
    }

    /// Whether the store holds an item with this key.
    ///
    /// - Parameter key: The item's identity.
    /// - Returns: `true` if the item exists.
    /// - Throws: A store failure.
    public func contains(_ key: ItemKey) throws -> Bool {
        try read(key) != nil
    }
}

/// A store whose operations can be awaited without blocking a thread: one that waits on the
/// network or on other processes' locks (the PostgreSQL store), so that async code (a request
/// handler of a Swift server) never parks one of the cooperative pool's few threads for a
/// round trip. The synchronous requirements of ``SecureStore`` stay; the async ones are the
/// same operations, awaited, and cancelling the task ends them with `CancellationError`.
///
/// Keysmith's own async code (refreshing tokens at their provider, `ProviderTokens`) reads
/// through these when the store has them; stores that only do local work (the file vault, the
/// in-memory store) are synchronous, and are read synchronously.
///
/// A conforming store implements each async requirement so that it suspends, never blocks,
/// while it waits. (Swift lets a synchronous method satisfy an `async` requirement, so an empty
/// conformance compiles; it would hold the caller's thread exactly as the synchronous API does.)
///
/// ```swift
/// func handle(_ store: any AsyncSecureStore) async throws -> Data? {
///     try await store.read(ItemKey(service: "api", account: "billing"))?.secret
/// }
/// ```
public protocol AsyncSecureStore: SecureStore {
    /// Reads one item with its secret, as ``SecureStore/read(_:)-(ItemKey)``, awaited.
    func read(_ key: ItemKey) async throws -> SecureRecord?

    /// Reads many items at once, as ``SecureStore/read(_:)-([ItemKey])``, awaited.
    func read(_ keys: [ItemKey]) async throws -> [SecureRecord?]

    /// Lists the items that match a query, as ``SecureStore/search(_:)``, awaited.
    func search(_ query: ItemQuery) async throws -> [ItemInfo]

    /// Reads every item that matches a query, a chunk at a time, as
    /// ``SecureStore/forEachRecord(matching:chunkSize:_:)``, awaited; `body` may await too.
    func forEachRecord(matching query: ItemQuery, chunkSize: Int, _ body: ([SecureRecord], ScanProgress) async throws -> Void) async throws

    /// Applies a batch, all or nothing, as ``SecureStore/perform(_:)``, awaited. Cancelled
    /// before its commit is sent, it applies nothing and throws `CancellationError`; once it is
    /// sent, it is awaited and the call returns normally.
    func perform(_ operations: [StoreOperation]) async throws
}

extension SecureStore {
    /// Reads many items: awaited without blocking a thread when the store is an
    /// ``AsyncSecureStore``, synchronously otherwise. For Keysmith's own async code.
    package func readAwaiting(_ keys: [ItemKey]) async throws -> [SecureRecord?] {
        if let awaitable = self as? any AsyncSecureStore { return try await awaitable.read(keys) }
        return try read(keys)
    }

    /// Lists the items that match a query: awaited without blocking a thread when the store is
    /// an ``AsyncSecureStore``, synchronously otherwise. For Keysmith's own async code.
    package func searchAwaiting(_ query: ItemQuery) async throws -> [ItemInfo] {
        if let awaitable = self as? any AsyncSecureStore { return try await awaitable.search(query) }
        return try search(query)
    }

    /// Reads every matching item a chunk at a time: awaited without blocking a thread when the
    /// store is an ``AsyncSecureStore``, synchronously otherwise. For Keysmith's own async code.
    package func forEachRecordAwaiting(matching query: ItemQuery, chunkSize: Int, _ body: ([SecureRecord], ScanProgress) throws -> Void)
        async throws
    {
        if let awaitable = self as? any AsyncSecureStore {
            return try await awaitable.forEachRecord(matching: query, chunkSize: chunkSize) { records, progress async throws in
                try body(records, progress)
            }
        }
        try forEachRecord(matching: query, chunkSize: chunkSize, body)
    }

    /// Applies a batch: awaited without blocking a thread when the store is an
    /// ``AsyncSecureStore``, synchronously otherwise. For Keysmith's own async code.
    package func performAwaiting(_ operations: [StoreOperation]) async throws {
        if let awaitable = self as? any AsyncSecureStore { return try await awaitable.perform(operations) }
        try perform(operations)
    }
}
