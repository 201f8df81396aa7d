public import Foundation
public import Keysmith
public import KeysmithTokens
import Synchronization

/// Permissions that follow every token kept under one service through PostgreSQL's change feed,
/// with one watcher (one connection, one thread) however many tokens there are: what a server
/// that authorizes many callers needs, where ``WatchedPermissions`` follows one. Each token's
/// permissions fail closed as ``WatchedPermissions``' do: while the watcher cannot confirm it is
/// current, or once the token has expired, they hold nothing.
///
/// ```swift
/// let tokens = try WatchedTokens(settings, namespace: "api", masterKey: .keyfile(path: keyfile),
///                                service: "reports", name: "api-host-1")
/// tokens.start()
/// let caller = tokens.permissions(account: "client-7")            // nil: no token kept for it
/// let request = AuthorizationRequest(principal: client, action: read, resource: report,
///                                    token: caller.map(TokenView.live))
/// ```
///
/// A token imported after the start appears at the change that created it; a token deleted
/// keeps its `PermissionManager`, empty (a caller holding it is denied).
public final class WatchedTokens: Sendable {
    /// The watcher that feeds the permissions; it registers under its name, so `keysmith revoke
    /// … --wait` waits for it to apply a revocation.
    public let watcher: PostgresWatcher
    /// The service whose tokens are followed.
    public let service: String

    /// By the account's bytes: names are equal only when their bytes are (two spellings of
    /// "josé" are two accounts), as everywhere in Keysmith.
    private let followed: Mutex<[[UInt8]: FollowedToken]>
    private let clock: @Sendable () -> Date
    private let started = Atomic(false)

    /// Opens the namespace, starts a watcher at the newest committed change, then reads every
    /// token of `service` (a change after the watcher's start is replayed to it, so none is
    /// missed between the two).
    ///
    /// - Parameter staleAfter: how long a confirmation of being current is good for; past it,
    ///   every check denies until the watcher confirms again.
    /// - Throws: what ``PostgresStore/init(_:namespace:masterKey:clock:)`` throws;
    ///   `KeysmithError.Code.invalidArgument` for an empty or over-long watcher name or service.
    public init(_ settings: PostgresConnectionSettings, namespace: String = "default", masterKey: PostgresMasterKey,
                service: String, name: String, staleAfter: Duration = .seconds(2),
                clock: @escaping @Sendable () -> Date = { Date() }) throws {
        try ItemKey.keysmithRecord(KeysmithRecordKey(recordType: .oauthToken, service: service, account: "x")).validate()
        self.service = service
        self.clock = clock
        let watcher = try PostgresWatcher(settings, namespace: namespace, masterKey: masterKey, name: name, staleAfter: staleAfter)
        self.watcher = watcher
        let store = try PostgresStore(settings, namespace: namespace, masterKey: masterKey, connections: 1)
        let keeper = TokenKeeper(store: store)
        let now = clock()
        var followed: [[UInt8]: FollowedToken] = [:]
        for (_, account) in try keeper.tokenKeys(service: service) {
            let token: OAuthToken?
            do {
                token = try keeper.token(service: service, account: account)
            } catch let error as KeysmithError where error.code == .corruptData || error.code == .malformedData {
                token = nil  // a token that does not open holds nothing, as the watcher treats it
            }
            followed[Array(account.utf8)] = FollowedToken(token, at: now, watcher: watcher, clock: clock)
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

    /// Starts watching on a thread of its own; returns at once. Call ``stop()`` to end it.
    /// Called again, it does nothing.
    public func start(pollInterval: Duration = .milliseconds(50)) {
        guard !started.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let thread = Thread { [self] in
            _ = try? watcher.run(pollInterval: pollInterval) { change in
                guard case .keysmithRecord(let record) = change.key, record.recordType == .oauthToken,
                      record.service.utf8.elementsEqual(service.utf8) else {
                    return true
                }
                apply(WatchedPermissions.token(in: change), account: record.account)
                return true
            }
        }
        thread.name = "keysmith watch \(watcher.name)"
        thread.start()
    }

    private func apply(_ token: OAuthToken?, account: String) {
        let now = clock()
        let existing = followed.withLock { followed -> FollowedToken? in
            if let existing = followed[Array(account.utf8)] { return existing }
            followed[Array(account.utf8)] = FollowedToken(token, at: now, watcher: watcher, clock: clock)
            return nil
        }
        existing?.apply(token, at: now)
    }

    /// Stops the watcher; from then on no permission is current (every check denies).
    public func stop() {
        watcher.stop()
    }

    /// Why the watch ended by itself, if it did (``PostgresWatcher/failure``).
    public var failure: KeysmithError? { watcher.failure }
}
