public import FoundationEssentials
internal import Synchronization

/// A store that keeps items in memory, for tests and for programs that need no persistence.
///
/// It keeps every rule of ``SecureStore`` and passes the same conformance suite as the file
/// vault and the Secret Service, so code tested against it behaves the same on a real store.
/// Its contents are gone when the last reference to it is.
///
/// ```swift
/// let store = MemoryStore()
/// try Keysmith.set(Data("s3cret".utf8), forAccount: "bob", inService: "mail", in: store)
/// ```
public final class MemoryStore: SecureStore {
    private struct State {
        var records: [ItemKey: SecureRecord] = [:]
        /// The last version handed out; every batch takes the next.
        var lastVersion: UInt64 = 0
    }

    private let state = Mutex(State())
    /// The names of the locks held (``ExclusiveLocking``).
    let heldLocks = Mutex(Set<String>())
    private let clock: @Sendable () -> Date
    /// The largest item the store accepts.
    public let limits: StoreLimits

    /// Creates an empty in-memory store.
    ///
    /// - Parameters:
    ///   - limits: The largest item it accepts; the file vault's (``StoreLimits/standard``) if omitted,
    ///     so that code tested here is refused here what the vault would refuse.
    ///   - clock: The source of created and modified dates; the system clock if omitted.
    public init(limits: StoreLimits = .standard, clock: @escaping @Sendable () -> Date = { Date() }) {
        self.limits = limits
        self.clock = clock
    }

    /// `in-memory store`.
    public var storeDescription: String { "in-memory store" }

    /// ``StoreIsolation/serializable``: one mutex covers every batch (within this process; the
    /// store is not shared with others).
    public var isolation: StoreIsolation { .serializable }

    /// Reads one item; `nil` when there is none.
    public func read(_ key: ItemKey) throws -> SecureRecord? {
        state.withLock { $0.records[key] }
    }

    /// Lists matching items without their secrets.
    public func search(_ query: ItemQuery) throws -> [ItemInfo] {
        state.withLock { state in
            state.records.values.lazy.filter { query.matches($0.attributes) }.map(\.info)
        }
    }

    /// Applies a batch, all or nothing.
    public func perform(_ operations: [StoreOperation]) throws {
        try checkBatchLimits(operations, limits: limits, store: storeDescription)
        let now = clock()
        try state.withLock { state in
            let version = ItemVersion(rawValue: "m\(state.lastVersion + 1)")
            let writes = try resolveBatch(
                operations, now: now, version: version, limits: limits, store: storeDescription
            ) { key, _ in
                state.records[key].map { .present($0.info) } ?? .absent
            }
            guard !writes.isEmpty else { return }
            state.lastVersion += 1
            for write in writes {
                switch write {
                case .put(let record): state.records[record.key] = record
                case .remove(let key): state.records[key] = nil
                }
            }
        }
    }
}

extension MemoryStore: ExclusiveLocking {
    /// A lock held in this store's memory: its holders are this process's users of this store.
    public func tryExclusiveLock(named name: String) throws -> (any HeldLock)? {
        let taken = heldLocks.withLock { $0.insert(name).inserted }
        return taken ? MemoryLock(name: name, store: self) : nil
    }
}

/// A lock of a ``MemoryStore``.
final class MemoryLock: HeldLock {
    let name: String
    let store: MemoryStore
    let released = Mutex(false)

    init(name: String, store: MemoryStore) {
        self.name = name
        self.store = store
    }

    func release() {
        guard released.withLock({ done in defer { done = true }; return !done }) else { return }
        _ = store.heldLocks.withLock { $0.remove(name) }
    }

    func isHeld() -> Bool { !released.withLock { $0 } }

    deinit { release() }
}
