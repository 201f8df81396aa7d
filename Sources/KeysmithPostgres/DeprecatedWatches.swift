// Deprecated forwards, for one release: `WatchedPermissions` and `WatchedTokens` moved to
// KeysmithTokens, fed by any `StoreWatcher`. This file is the only one in KeysmithPostgres that
// imports KeysmithTokens (docs/architecture.md; ModuleMapTests holds it so); it goes with the
// forwards, and the arrow with it.
public import Foundation
import Keysmith
public import KeysmithTokens

// The old names forward, unmarked: marked deprecated, they warned a program that imports both
// modules for the new spelling too (the name resolves to this alias). The initializers from
// connection settings below are what is deprecated; the aliases go with them.

/// Moved to `KeysmithTokens.WatchedPermissions`; this name forwards for one release.
public typealias WatchedPermissions = KeysmithTokens.WatchedPermissions

/// Moved to `KeysmithTokens.WatchedTokens`; this name forwards for one release.
public typealias WatchedTokens = KeysmithTokens.WatchedTokens

extension KeysmithTokens.WatchedPermissions {
    /// Opens the namespace, starts a watcher at the newest committed change, then reads the
    /// token: `WatchedPermissions(watcher:store:service:account:clock:)` with a
    /// ``PostgresWatcher`` and a ``PostgresStore``.
    @available(*, deprecated, message: "WatchedPermissions(watcher: PostgresWatcher(settings, namespace:masterKey:name:staleAfter:), store: PostgresStore(settings, namespace:masterKey:), service:account:)")
    public convenience init(_ settings: PostgresConnectionSettings, namespace: String = "default", masterKey: PostgresMasterKey,
                            service: String, account: String, name: String, staleAfter: Duration = .seconds(2),
                            clock: @escaping @Sendable () -> Date = { Date() }) throws {
        try ItemKey.keysmithRecord(KeysmithRecordKey(recordType: .oauthToken, service: service, account: account)).validate()
        let watcher = try PostgresWatcher(settings, namespace: namespace, masterKey: masterKey, name: name, staleAfter: staleAfter)
        let store = try PostgresStore(settings, namespace: namespace, masterKey: masterKey)
        try self.init(watcher: watcher, store: store, service: service, account: account, clock: clock)
    }
}

extension KeysmithTokens.WatchedTokens {
    /// Opens the namespace, starts a watcher at the newest committed change, then reads every
    /// token of `service`: `WatchedTokens(watcher:store:service:clock:)` with a
    /// ``PostgresWatcher`` and a ``PostgresStore``.
    @available(*, deprecated, message: "WatchedTokens(watcher: PostgresWatcher(settings, namespace:masterKey:name:staleAfter:), store: PostgresStore(settings, namespace:masterKey:), service:)")
    public convenience init(_ settings: PostgresConnectionSettings, namespace: String = "default", masterKey: PostgresMasterKey,
                            service: String, name: String, staleAfter: Duration = .seconds(2),
                            clock: @escaping @Sendable () -> Date = { Date() }) throws {
        try ItemKey.keysmithRecord(KeysmithRecordKey(recordType: .oauthToken, service: service, account: "x")).validate()
        let watcher = try PostgresWatcher(settings, namespace: namespace, masterKey: masterKey, name: name, staleAfter: staleAfter)
        let store = try PostgresStore(settings, namespace: namespace, masterKey: masterKey, connections: 1)
        try self.init(watcher: watcher, store: store, service: service, clock: clock)
    }
}
