public import Keysmith

/// A memory store behind another object, every call passed on: a test's wrapper subclasses it
/// and overrides the one or two calls it watches (a commit it interferes with, a lock it loses).
///
/// ```swift
/// final class Counting: ForwardingStore, @unchecked Sendable {
///     override func perform(_ operations: [StoreOperation]) throws { /* count */; try inner.perform(operations) }
/// }
/// ```
open class ForwardingStore: ExclusiveLocking, @unchecked Sendable {
    /// The store every call is passed to.
    public let inner = MemoryStore()

    public init() {}

    open var storeDescription: String { inner.storeDescription }
    open var isolation: StoreIsolation { inner.isolation }
    open var limits: StoreLimits { inner.limits }
    open func read(_ key: ItemKey) throws -> SecureRecord? { try inner.read(key) }
    open func search(_ query: ItemQuery) throws -> [ItemInfo] { try inner.search(query) }
    open func forEachRecord(matching query: ItemQuery, chunkSize: Int, _ body: ([SecureRecord], ScanProgress) throws -> Void) throws {
        try inner.forEachRecord(matching: query, chunkSize: chunkSize, body)
    }
    open func perform(_ operations: [StoreOperation]) throws { try inner.perform(operations) }
    open func tryExclusiveLock(named name: String) throws -> (any HeldLock)? { try inner.tryExclusiveLock(named: name) }
}
