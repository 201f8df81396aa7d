public import Foundation
public import Keysmith
public import KeysmithTokens
import Synchronization

/// A `PermissionManager` that follows one stored token through PostgreSQL's change feed, and
/// fails closed by itself: a revocation committed on any machine reaches it within about the
/// watcher's poll interval, and while its watcher cannot confirm it is current (the database is
/// unreachable, the feed is damaged, the watch was stopped), or once the token has expired, it
/// holds no permission at all.
///
/// ```swift
/// let watched = try WatchedPermissions(settings, namespace: "payments", masterKey: .keyfile(path: keyfile),
///                                      service: "news", account: "alice", name: "app-7")
/// watched.start()
/// if watched.permissions.hasPermission(try Scope("posts:write")) { … }   // false once revoked, or while the feed is stale
/// let view = TokenView.live(watched.permissions)                        // and so are policy decisions
/// ```
///
/// The watcher registers under `name`, so `keysmith revoke … --wait` waits for it to apply a
/// revocation.
public final class WatchedPermissions: Sendable {
    /// The permissions: the token's granted scopes while current, none otherwise.
    public let permissions: PermissionManager
    /// The watcher that feeds them.
    public let watcher: PostgresWatcher
    /// The token followed.
    public let service: String
    /// The token's account.
    public let account: String

    private let tokenKey: ItemKey
    private let clock: @Sendable () -> Date
    private let followed: FollowedToken
    /// Set by the first ``start(pollInterval:)``: a second one starts no second watch.
    private let started = Atomic(false)

    /// Opens the namespace, starts a watcher at the newest committed change, then reads the
    /// token (so that no change between the two is missed: a change after the watcher's start
    /// is replayed to it).
    ///
    /// - Parameter staleAfter: how long a confirmation of being current is good for; past it,
    ///   every check denies until the watcher confirms again.
    /// - Throws: what ``PostgresStore/init(_:namespace:masterKey:clock:)`` throws;
    ///   `KeysmithError.Code.invalidArgument` for a watcher name that is empty or over 200
    ///   bytes, or a service or account that is not a valid item name.
    public init(_ settings: PostgresConnectionSettings, namespace: String = "default", masterKey: PostgresMasterKey,
                service: String, account: String, name: String, staleAfter: Duration = .seconds(2),
                clock: @escaping @Sendable () -> Date = { Date() }) throws {
        self.service = service
        self.account = account
        self.clock = clock
        tokenKey = .keysmithRecord(KeysmithRecordKey(recordType: .oauthToken, service: service, account: account))
        try tokenKey.validate()
        let watcher = try PostgresWatcher(settings, namespace: namespace, masterKey: masterKey, name: name, staleAfter: staleAfter)
        self.watcher = watcher
        let store = try PostgresStore(settings, namespace: namespace, masterKey: masterKey)
        let token = try TokenKeeper(store: store).token(service: service, account: account)
        followed = FollowedToken(token, at: clock(), watcher: watcher, clock: clock)
        permissions = followed.permissions
    }

    /// Starts watching on a thread of its own; returns at once. Call ``stop()`` to end it.
    /// Called again, it does nothing (as ``WatchedTokens/start(pollInterval:)``).
    public func start(pollInterval: Duration = .milliseconds(50)) {
        guard !started.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let watcher = self.watcher, tokenKey = self.tokenKey, followed = self.followed, clock = self.clock
        let thread = Thread {
            _ = try? watcher.run(pollInterval: pollInterval) { change in
                guard change.key == tokenKey else { return true }
                followed.apply(Self.token(in: change), at: clock())
                return true
            }
        }
        thread.name = "keysmith watch \(watcher.name)"
        thread.start()
    }

    /// The token a change leaves: `nil` when it was deleted, or its row does not open (it then
    /// holds nothing).
    static func token(in change: PostgresChange) -> OAuthToken? {
        change.deleted ? nil : change.record.flatMap { try? OAuthToken(storedSecret: $0.secret) }
    }

    /// Stops the watcher; from then on the permissions are not current (every check denies).
    public func stop() {
        watcher.stop()
    }

    /// Why the watch ended by itself, if it did (``PostgresWatcher/failure``).
    public var failure: KeysmithError? { watcher.failure }
}

/// One followed token: its permissions, which fail closed unless its watcher is current and the
/// token unexpired, and its expiry (shared by the watch thread and the permission checks).
/// `WatchedPermissions` follows one, `WatchedTokens` one per account.
struct FollowedToken: Sendable {
    let permissions: PermissionManager
    private let expiry: Expiry

    init(_ token: OAuthToken?, at now: Date, watcher: PostgresWatcher, clock: @escaping @Sendable () -> Date) {
        let expiry = Expiry(token?.expiresAt)
        self.expiry = expiry
        permissions = PermissionManager(granted: token?.grantedScopes(at: now) ?? [], failingClosedUnless: {
            guard watcher.isCurrent else { return false }
            guard let expiresAt = expiry.date.withLock({ $0 }) else { return true }
            return clock() < expiresAt
        })
    }

    /// Takes what a change left (`nil`: deleted, or a row that does not open: nothing held).
    /// The scopes are emptied first, so that no check pairs the old scopes with the new expiry.
    func apply(_ token: OAuthToken?, at now: Date) {
        permissions.replace(with: [])
        expiry.date.withLock { $0 = token?.expiresAt }
        permissions.replace(with: token?.grantedScopes(at: now) ?? [])
    }
}

/// The followed token's expiry.
final class Expiry: Sendable {
    let date: Mutex<Date?>
    init(_ date: Date?) { self.date = Mutex(date) }
}
