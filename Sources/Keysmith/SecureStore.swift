/// One change to a store, for ``SecureStore/perform(_:)``.
public enum StoreOperation: Sendable {
    /// Creates an item; fails with ``KeysmithError/Code/duplicateItem`` if its key exists.
    case create(ItemAttributes, secret: Data)
    /// Replaces an existing item's metadata and secret, keeping its creation date; fails with
    /// ``KeysmithError/Code/itemNotFound`` if its key does not exist.
    case update(ItemAttributes, secret: Data)
    /// Creates the item or replaces it if it exists.
    case upsert(ItemAttributes, secret: Data)
    /// Stores a record exactly as given, dates included, replacing any item with its key.
    /// Used by migration and restore.
    case restore(SecureRecord)
    /// Deletes an existing item; fails with ``KeysmithError/Code/itemNotFound`` if it does not exist.
    case delete(ItemKey)

    /// The key the operation touches.
    public var key: ItemKey {
        switch self {
        case .create(let attributes, _), .update(let attributes, _), .upsert(let attributes, _):
            attributes.key
        case .restore(let record): record.key
        case .delete(let key): key
        }
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
///   create of an existing one throws ``KeysmithError/Code/duplicateItem``.
/// - ``perform(_:)`` is all or nothing: if any operation fails, none is applied.
/// - Keys compare exactly: `"Bob"` and `"bob"` are two accounts.
/// - Every method is safe to call from many threads and tasks at once.
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
    /// - Parameter query: Which items; ``ItemQuery/init(kind:service:account:server:port:internetProtocol:authenticationType:securityDomain:path:label:type:)`` with no arguments matches all.
    /// - Returns: The matching items in no particular order; empty when none match.
    /// - Throws: ``KeysmithError`` when the store cannot answer.
    func search(_ query: ItemQuery) throws -> [ItemInfo]

    /// Applies operations in order, all or nothing.
    ///
    /// Later operations see the effect of earlier ones (a create then an update of the same key
    /// succeeds). A store that can commit durably commits the whole batch at once.
    ///
    /// - Parameter operations: The changes, applied in order.
    /// - Throws: ``KeysmithError``: ``KeysmithError/Code/duplicateItem``,
    ///   ``KeysmithError/Code/itemNotFound``, ``KeysmithError/Code/invalidArgument`` for the
    ///   first operation that cannot be applied, or a store failure. Nothing is applied then.
    func perform(_ operations: [StoreOperation]) throws
}

extension SecureStore {
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

    /// Replaces an existing item's metadata and secret.
    ///
    /// - Parameters:
    ///   - attributes: The item's identity and its new metadata.
    ///   - secret: The new secret.
    /// - Throws: ``KeysmithError/Code/itemNotFound`` if the key does not exist, or a store failure.
    public func update(_ attributes: ItemAttributes, secret: Data) throws {
        try perform([.update(attributes, secret: secret)])
    }

    /// Creates the item, or replaces it if it exists.
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
    /// - Parameter key: The item's identity.
    /// - Throws: ``KeysmithError/Code/itemNotFound`` if the key does not exist, or a store failure.
    public func delete(_ key: ItemKey) throws {
        try perform([.delete(key)])
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
