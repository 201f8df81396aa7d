public import FoundationEssentials
public import Keysmith
internal import Synchronization

/// A `PermissionManager` that follows one stored token through a store's change feed, and fails
/// closed by itself: a revocation committed on any machine reaches it as soon as its watcher
/// delivers it, and while the watcher cannot confirm it is current (the store is unreachable,
/// the feed is damaged, the watch was stopped), or once the token has expired, it holds no
/// permission at all.
///
/// ```swift
/// let watcher = try PostgresWatcher(settings, namespace: "payments", masterKey: key, name: "app-7")   // first
/// let store = try PostgresStore(settings, namespace: "payments", masterKey: key)
/// let watched = try WatchedPermissions(watcher: watcher, store: store, service: "news", account: "alice")
/// watched.start()
/// if watched.permissions.hasPermission(try Scope("posts:write")) { … }   // false once revoked, or while the feed is stale
/// let view = TokenView(watching: watched.permissions)                   // and so are policy decisions (KeysmithTokenPolicy)
/// ```
///
/// Make the watcher before this reads the token, starting at the newest change (for
/// `PostgresWatcher`, without `after:`): the watcher delivers every change committed after it
/// was made, so a change between the two is delivered again (and applied twice, harmlessly)
/// rather than missed. A watcher feeds one follower (`StoreWatcher.start(pollInterval:_:)`):
/// the permissions hold nothing until ``start(pollInterval:)`` started the watcher for this
/// follower; one already started or run by something else makes every check deny, and
/// ``failure`` says why.
public final class WatchedPermissions: Sendable {
    /// The permissions: the token's granted scopes while current, none otherwise.
    public let permissions: PermissionManager
    /// The watcher that feeds them.
    public let watcher: any StoreWatcher
    /// The token followed.
    public let service: String
    /// The token's account.
    public let account: String

    private let tokenKey: ItemKey
    private let clock: @Sendable () -> Date
    private let followed: FollowedToken
    private let feed: FeedClaim

    /// Reads the token from `store`, then follows it through `watcher`.
    ///
    /// - Parameters:
    ///   - watcher: The store's watcher, made before this call and not started.
    ///   - store: The store the token is read from (the one `watcher` watches).
    ///   - service: The token's service…
    ///   - account: …and account.
    ///   - clock: The time the token's expiry is compared with.
    /// - Throws: `KeysmithError.Code.invalidArgument` for a service or account that is not a
    ///   valid item name; what reading the token throws (`corruptData` for a token that does
    ///   not decode).
    public init(watcher: any StoreWatcher, store: any SecureStore, service: String, account: String,
                clock: @escaping @Sendable () -> Date = { Date() }) throws {
        self.service = service
        self.account = account
        self.clock = clock
        self.watcher = watcher
        tokenKey = TokenKeeper.key(service: service, account: account)
        try tokenKey.validate()
        let token = try TokenKeeper(store: store).token(service: service, account: account)
        feed = FeedClaim()
        followed = FollowedToken(token, at: clock(), watcher: watcher, feed: feed, clock: clock)
        permissions = followed.permissions
    }

    /// Starts watching on the watcher's thread; returns at once. Call ``stop()`` to end it.
    /// Called again, it does nothing (as ``WatchedTokens/start(pollInterval:)``).
    public func start(pollInterval: Duration = .milliseconds(50)) {
        let tokenKey = self.tokenKey, followed = self.followed, clock = self.clock
        feed.start(watcher, pollInterval: pollInterval) { change in
            guard change.key == tokenKey else { return }
            followed.apply(FollowedToken.token(in: change), at: clock())
        }
    }

    /// Stops the watch (and the watcher, when it was started for this follower); from then on
    /// the permissions are not current (every check denies).
    public func stop() {
        feed.stop(watcher)
    }

    /// Why the watch ended by itself, if it did (`StoreWatcher.failure`), or why it never
    /// began (the watcher feeds another follower).
    public var failure: KeysmithError? { feed.failure(of: watcher) }
}

/// Permissions that follow every token kept under one service through a store's change feed,
/// with one watcher (for PostgreSQL, one connection and one thread) however many tokens there
/// are: what a server that authorizes many callers needs, where ``WatchedPermissions`` follows
/// one. Each token's permissions fail closed as ``WatchedPermissions``' do: while the watcher
/// cannot confirm it is current, or once the token has expired, they hold nothing.
///
/// ```swift
/// let watcher = try PostgresWatcher(settings, namespace: "api", masterKey: key, name: "api-host-1")
/// let tokens = try WatchedTokens(watcher: watcher, store: PostgresStore(settings, namespace: "api", masterKey: key),
///                                service: "reports")
/// tokens.start()
/// let caller = tokens.permissions(account: "client-7")            // nil: no token kept for it
/// let request = AuthorizationRequest(principal: client, action: read, resource: report,
///                                    token: caller.map { TokenView(watching: $0) })
/// ```
///
/// A token imported after the start appears at the change that created it; a token deleted
/// keeps its `PermissionManager`, empty (a caller holding it is denied). A token record that
/// does not decode as a token holds nothing, as the watcher treats it.
public final class WatchedTokens: Sendable {
    /// The watcher that feeds the permissions.
    public let watcher: any StoreWatcher
    /// The service whose tokens are followed.
    public let service: String

    /// By the account's bytes: names are equal only when their bytes are (two spellings of
    /// "josé" are two accounts), as everywhere in Keysmith.
    private let followed: Mutex<[[UInt8]: FollowedToken]>
    private let clock: @Sendable () -> Date
    private let feed: FeedClaim

    /// Reads every token of `service` from `store` in one read, then follows them through
    /// `watcher`.
    ///
    /// - Parameters:
    ///   - watcher: The store's watcher, made before this call and not started.
    ///   - store: The store the tokens are read from (the one `watcher` watches).
    ///   - service: The service whose tokens are followed.
    ///   - clock: The time the tokens' expiries are compared with.
    /// - Throws: `KeysmithError.Code.invalidArgument` for an empty or over-long service;
    ///   `corruptData` when a row of the store does not open (the store's listing refuses, so
    ///   the follower never starts on a partial set); a store failure.
    public init(watcher: any StoreWatcher, store: any SecureStore, service: String,
                clock: @escaping @Sendable () -> Date = { Date() }) throws {
        try TokenKeeper.key(service: service, account: "x").validate()
        self.service = service
        self.clock = clock
        self.watcher = watcher
        let feed = FeedClaim()
        self.feed = feed
        let keys = try TokenKeeper(store: store).tokenKeys(service: service).map { TokenKeeper.key(service: $0.service, account: $0.account) }
        let records = try store.read(keys)
        let now = clock()
        var followed: [[UInt8]: FollowedToken] = [:]
        for (key, record) in zip(keys, records) {
            guard case .keysmithRecord(let tokenKey) = key else { continue }
            let token = record.flatMap { try? OAuthToken(storedSecret: $0.secret) }
            followed[Array(tokenKey.account.utf8)] = FollowedToken(token, at: now, watcher: watcher, feed: feed, clock: clock)
        }
        self.followed = Mutex(followed)
    }

    /// The permissions of the token kept under `account`, or `nil` when the service has no
    /// token for it (yet).
    public func permissions(account: String) -> PermissionManager? {
        followed.withLock { $0[Array(account.utf8)]?.permissions }
    }

    /// The accounts followed: every account of the service that had a token at the start or
    /// since (a deleted token's account stays, its permissions empty).
    public var accounts: [String] { followed.withLock { $0.keys.map { String(decoding: $0, as: UTF8.self) }.sorted() } }

    /// Starts watching on the watcher's thread; returns at once. Call ``stop()`` to end it.
    /// Called again, it does nothing.
    public func start(pollInterval: Duration = .milliseconds(50)) {
        feed.start(watcher, pollInterval: pollInterval) { [self] change in
            guard case .keysmithRecord(let record) = change.key, record.recordType == .oauthToken,
                  record.service.utf8.elementsEqual(service.utf8) else {
                return
            }
            apply(FollowedToken.token(in: change), account: record.account)
        }
    }

    private func apply(_ token: OAuthToken?, account: String) {
        let now = clock()
        let existing = followed.withLock { followed -> FollowedToken? in
            if let existing = followed[Array(account.utf8)] { return existing }
            followed[Array(account.utf8)] = FollowedToken(token, at: now, watcher: watcher, feed: feed, clock: clock)
            return nil
        }
        existing?.apply(token, at: now)
    }

    /// Stops the watch (and the watcher, when it was started for this follower); from then on
    /// no permission is current (every check denies).
    public func stop() {
        feed.stop(watcher)
    }

    /// Why the watch ended by itself, if it did (`StoreWatcher.failure`), or why it never
    /// began (the watcher feeds another follower).
    public var failure: KeysmithError? { feed.failure(of: watcher) }
}

/// A follower's claim on its watcher. The follower is current only while its own start fed it
/// (the watcher started for it) and the watcher is current: a watcher started or run by anyone
/// else says nothing of this follower, which never sees its changes. Before its start, after a
/// refused start and after its stop, every check denies.
final class FeedClaim: Sendable {
    private enum State: UInt8, AtomicRepresentable {
        case waiting, fed, refused, stopped
    }
    private let state = Atomic(State.waiting)
    /// Whether the watcher refused this follower (kept after a stop, for ``failure(of:)``).
    private let wasRefused = Atomic(false)

    /// Starts the watcher for this follower, once.
    func start(_ watcher: any StoreWatcher, pollInterval: Duration, _ apply: @escaping @Sendable (WatchedChange) -> Void) {
        guard state.compareExchange(expected: .waiting, desired: .refused, ordering: .acquiringAndReleasing).exchanged else { return }
        // Refused until the watcher says it started for this follower.
        guard watcher.start(pollInterval: pollInterval, apply) else {
            wasRefused.store(true, ordering: .releasing)
            return
        }
        // A stop that came meanwhile found nothing to stop: the watch started for it ends here.
        if !state.compareExchange(expected: .refused, desired: .fed, ordering: .acquiringAndReleasing).exchanged { watcher.stop() }
    }

    /// Whether this follower is fed and its watcher current.
    func isCurrent(_ watcher: any StoreWatcher) -> Bool {
        state.load(ordering: .acquiring) == .fed && watcher.isCurrent
    }

    /// Ends this follower's watch: its watcher is stopped only when it was started for it (a
    /// refused follower never stops another's feed).
    func stop(_ watcher: any StoreWatcher) {
        if state.exchange(.stopped, ordering: .acquiringAndReleasing) == .fed { watcher.stop() }
    }

    func failure(of watcher: any StoreWatcher) -> KeysmithError? {
        if wasRefused.load(ordering: .acquiring) {
            return KeysmithError(.invalidArgument, "the watcher \(watcher.name) was started or run before, by something else: a watcher feeds one follower; every check through this one denies")
        }
        switch state.load(ordering: .acquiring) {
        case .fed, .stopped: return watcher.failure
        case .waiting, .refused: return nil
        }
    }
}

/// One followed token: its permissions, which fail closed unless its watcher is current and the
/// token unexpired, and its expiry (shared by the watch thread and the permission checks).
/// `WatchedPermissions` follows one, `WatchedTokens` one per account.
struct FollowedToken: Sendable {
    let permissions: PermissionManager
    private let expiry: Expiry

    init(_ token: OAuthToken?, at now: Date, watcher: any StoreWatcher, feed: FeedClaim, clock: @escaping @Sendable () -> Date) {
        let expiry = Expiry(token?.expiresAt)
        self.expiry = expiry
        permissions = PermissionManager(granted: token?.grantedScopes(at: now) ?? [], failingClosedUnless: {
            guard feed.isCurrent(watcher) else { return false }
            guard let expiresAt = expiry.date.withLock({ $0 }) else { return true }
            return clock() < expiresAt
        })
    }

    /// The token a change leaves: `nil` when it was deleted, or its record does not open (it
    /// then holds nothing).
    static func token(in change: WatchedChange) -> OAuthToken? {
        change.deleted ? nil : change.record.flatMap { try? OAuthToken(storedSecret: $0.secret) }
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
