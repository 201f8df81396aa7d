/// One committed change to an item, as a ``StoreWatcher`` delivers it.
public struct WatchedChange: Sendable {
    /// The item.
    public var key: ItemKey
    /// Whether the change deleted the item.
    public var deleted: Bool
    /// The item as it is when the watcher reads it (a newer version if it changed again since),
    /// `nil` when it is deleted by then.
    public var record: SecureRecord?

    /// A change: to `key`, a deletion or not, with the item as it is now.
    public init(key: ItemKey, deleted: Bool, record: SecureRecord?) {
        self.key = key
        self.deleted = deleted
        self.record = record
    }
}

/// Follows a store's committed changes, made by any process (and, for a shared store, on any
/// machine), and knows whether it is current: what a permission check that must see a
/// revocation made elsewhere needs. `WatchedPermissions` and `WatchedTokens` (module
/// `KeysmithTokens`) are fed by one; `PostgresWatcher` (module `KeysmithPostgres`) is one.
///
/// ```swift
/// let watcher: any StoreWatcher = try PostgresWatcher(settings, namespace: "payments", masterKey: key, name: "app-7")
/// watcher.start(pollInterval: .milliseconds(50)) { change in   // on a thread of its own
///     if change.key == followed { apply(change.record) }
/// }
/// if !watcher.isCurrent { /* deny: a revocation may not have arrived */ }
/// ```
///
/// A conformer delivers every change committed after it was made, each once, in commit order,
/// and never skips one: a change it cannot read ends the watch (``failure`` says why) rather
/// than being passed over, because the change passed over could be a revocation.
public protocol StoreWatcher: AnyObject, Sendable {
    /// The name it watches under (writers waiting for watchers see it).
    var name: String { get }

    /// Whether it confirmed recently that it had delivered every committed change, and was not
    /// stopped. While false, checks that rely on it must deny.
    var isCurrent: Bool { get }

    /// Why the watch ended by itself, if it did; it is then never current again.
    var failure: KeysmithError? { get }

    /// Starts watching on a thread of its own and returns at once; `apply` gets each change,
    /// in commit order.
    ///
    /// A watcher feeds one follower: called again, it starts nothing and returns false (the
    /// second `apply` would never be called, and its follower must not take the watcher's
    /// being current as its own; `WatchedPermissions` then denies every check).
    ///
    /// - Parameters:
    ///   - pollInterval: How often to look for changes when nothing says there is one.
    ///   - apply: Called on the watcher's thread, one change at a time.
    /// - Returns: Whether this call started the watch.
    @discardableResult
    func start(pollInterval: Duration, _ apply: @escaping @Sendable (WatchedChange) -> Void) -> Bool

    /// Ends the watch; from this call on the watcher is not current.
    func stop()
}
