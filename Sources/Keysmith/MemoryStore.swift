internal import Synchronization

/// A store that keeps items in memory, for tests and for programs that need no persistence.
///
/// It keeps every rule of ``SecureStore`` and passes the same conformance suite as the file
/// vault and the Secret Service, so code tested against it behaves the same on a real store.
/// Its contents are gone when the last reference to it is.
///
/// ```swift
/// let store = MemoryStore()
/// try Keysmith.save(Data("s3cret".utf8), forAccount: "bob", inService: "mail", in: store)
/// ```
public final class MemoryStore: SecureStore {
    private let records = Mutex<[ItemKey: SecureRecord]>([:])
    private let clock: @Sendable () -> Date

    /// Creates an empty in-memory store.
    ///
    /// - Parameter clock: The source of created and modified dates; the system clock if omitted.
    public init(clock: @escaping @Sendable () -> Date = { Date() }) {
        self.clock = clock
    }

    /// `in-memory store`.
    public var storeDescription: String { "in-memory store" }

    /// Reads one item; `nil` when there is none.
    public func read(_ key: ItemKey) throws -> SecureRecord? {
        records.withLock { $0[key] }
    }

    /// Lists matching items without their secrets.
    public func search(_ query: ItemQuery) throws -> [ItemInfo] {
        records.withLock { records in
            records.values.lazy.filter { query.matches($0.attributes) }.map(\.info)
        }
    }

    /// Applies a batch, all or nothing.
    public func perform(_ operations: [StoreOperation]) throws {
        let now = clock()
        try records.withLock { records in
            let writes = try resolveBatch(operations, now: now) { records[$0]?.info.created }
            for write in writes {
                switch write {
                case .put(let record): records[record.key] = record
                case .remove(let key): records[key] = nil
                }
            }
        }
    }
}
