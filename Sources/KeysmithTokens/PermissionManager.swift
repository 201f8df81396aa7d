public import FoundationEssentials
import Keysmith
internal import Synchronization

/// A change the permission manager publishes.
public struct PermissionChange: Sendable, Hashable {
    /// Permissions that became available.
    public var added: Set<Permission>
    /// Permissions that went away.
    public var removed: Set<Permission>
    /// Every permission held after the change.
    public var current: Set<Permission>
}

/// Something that shows only when the user holds the permissions it needs: a view, a menu
/// item, a command.
public protocol PermissionGated {
    /// The permissions all of which are needed.
    var requiredPermissions: Set<Permission> { get }
}

/// Answers "may the user do this?", fed by a token's granted scopes, and publishes every change
/// so that a long-running program reacts the moment a scope is revoked.
///
/// ```swift
/// let permissions = PermissionManager(token: token, at: .now)
/// Task {
///     for await change in permissions.changes() {
///         if change.removed.contains(try Scope("posts:write")) { disableEditor() }
///     }
/// }
/// permissions.update(from: try keeper.token(service: "news", account: "bob")!, at: .now)
/// ```
public final class PermissionManager: Sendable {
    private struct State {
        var granted: Set<Permission>
        var subscribers: [Int: AsyncStream<PermissionChange>.Continuation] = [:]
        var nextID = 0
    }

    private let state: Mutex<State>
    /// When set, the manager holds nothing while it returns false (see ``init(granted:failingClosedUnless:)``).
    private let gate: (@Sendable () -> Bool)?

    /// Creates a manager holding some permissions.
    public init(granted: Set<Permission> = []) {
        state = Mutex(State(granted: granted))
        gate = nil
    }

    /// Creates a manager that fails closed by itself: while `isCurrent` returns false (the feed
    /// that keeps it up to date cannot confirm it is), it holds no permission at all —
    /// ``permissions`` is empty, every check denies, nothing is visible, and policies reading it
    /// through a live token view see no granted scope — and it answers from its permissions
    /// again as soon as `isCurrent` is true. `isCurrent` is called on every check; keep it cheap.
    ///
    /// ```swift
    /// let permissions = PermissionManager(granted: scopes, failingClosedUnless: { watcher.isCurrent })
    /// ```
    ///
    /// ``changes()`` reports changes of the permissions held, not of `isCurrent`.
    public init(granted: Set<Permission> = [], failingClosedUnless isCurrent: @escaping @Sendable () -> Bool) {
        state = Mutex(State(granted: granted))
        gate = isCurrent
    }

    /// Whether the manager's answers stand now: false while a fail-closed manager's feed cannot
    /// confirm it is current (it then holds nothing). Always true for a manager without a feed.
    public var isCurrent: Bool { gate?() ?? true }

    /// Creates a manager fed by a token's granted scopes at `date` (none when the token is inactive).
    public convenience init(token: OAuthToken, at date: Date) {
        self.init(granted: token.grantedScopes(at: date))
    }

    /// Every permission held now (none while the manager is not current).
    public var permissions: Set<Permission> {
        guard isCurrent else { return [] }
        return state.withLock { $0.granted }
    }

    /// Whether a permission is held (false while the manager is not current).
    public func hasPermission(_ permission: Permission) -> Bool {
        guard isCurrent else { return false }
        return state.withLock { $0.granted.contains(permission) }
    }

    /// Whether every one of the permissions is held (false while the manager is not current,
    /// unless `permissions` is empty).
    public func hasPermissions(_ permissions: Set<Permission>) -> Bool {
        guard permissions.isEmpty || isCurrent else { return false }
        return state.withLock { permissions.isSubset(of: $0.granted) }
    }

    /// Replaces the permissions with exactly these.
    public func replace(with permissions: Set<Permission>) { replace { $0 = permissions } }

    /// Adds a permission.
    public func add(_ permission: Permission) { replace { $0.insert(permission) } }

    /// Removes a permission.
    public func remove(_ permission: Permission) { replace { $0.remove(permission) } }

    /// Replaces the permissions with a token's granted scopes at `date`.
    public func update(from token: OAuthToken, at date: Date) {
        let granted = token.grantedScopes(at: date)
        replace { $0 = granted }
    }

    /// Which of the components may show now.
    public func visible<Component: PermissionGated>(_ components: [Component]) -> [Component] {
        let granted = permissions
        return components.filter { $0.requiredPermissions.isSubset(of: granted) }
    }

    /// A stream of every change from now on. Each call returns a stream of its own; it ends
    /// when the consumer stops iterating (or the manager goes away).
    public func changes() -> AsyncStream<PermissionChange> {
        let (stream, continuation) = AsyncStream.makeStream(of: PermissionChange.self, bufferingPolicy: .unbounded)
        let id = state.withLock { state in
            let id = state.nextID
            state.nextID += 1
            state.subscribers[id] = continuation
            return id
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.subscribers.removeValue(forKey: id) }
        }
        return stream
    }

    private func replace(_ body: (inout Set<Permission>) -> Void) {
        state.withLock { state in
            let before = state.granted
            body(&state.granted)
            guard state.granted != before else { return }
            let change = PermissionChange(added: state.granted.subtracting(before), removed: before.subtracting(state.granted),
                                          current: state.granted)
            for continuation in state.subscribers.values { continuation.yield(change) }
        }
    }

    deinit {
        state.withLock { state in
            for continuation in state.subscribers.values { continuation.finish() }
        }
    }
}
