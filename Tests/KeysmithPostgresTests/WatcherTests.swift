import Foundation
import Keysmith
@testable import KeysmithPostgres
import Synchronization
import Testing

/// Changes reach every watcher, after a lost connection too, and writers can wait for them.
@Suite("PostgreSQL store: watchers", .enabled(if: ProcessInfo.processInfo.environment["KEYSMITH_TEST_DATABASE_URL"] != nil))
struct WatcherTests {
    final class Collected: Sendable {
        let changes = Mutex<[PostgresChange]>([])
        var count: Int { changes.withLock { $0.count } }
    }

    static func start(_ watcher: PostgresWatcher, into collected: Collected) -> Thread {
        let thread = Thread {
            try? watcher.run(pollInterval: .milliseconds(20)) { change in
                collected.changes.withLock { $0.append(change) }
                return true
            }
        }
        thread.start()
        return thread
    }

    static func waitUntil(_ seconds: Double = 10, _ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if condition() { return true }
            usleep(10_000)
        }
        return condition()
    }

    @Test("a watcher gets every change another handle commits, in order, with the item, and deletions")
    func changesArrive() throws {
        let namespace = "watch-\(UUID().uuidString)"
        let store = try PostgresStoreTests.open(namespace)
        let watcher = try PostgresWatcher(try PostgresStoreTests.settings(), namespace: namespace, masterKey: .key(PostgresStoreTests.key), name: "w1")
        let collected = Collected()
        _ = Self.start(watcher, into: collected)
        defer { watcher.stop() }
        let key = ItemKey.genericPassword(service: "news", account: "alice")
        try store.perform([.create(ItemAttributes(key: key), secret: Data("v1".utf8))])
        try store.perform([.update(ItemAttributes(key: key), secret: Data("v2".utf8))])
        try store.perform([.delete(key)])
        #expect(Self.waitUntil { collected.count == 3 })
        let changes = collected.changes.withLock { $0 }
        #expect(changes.map(\.key) == [key, key, key])
        #expect(changes.map(\.deleted) == [false, false, true])
        #expect(changes.map(\.sequence) == changes.map(\.sequence).sorted())
        #expect(watcher.lastSequence == store.lastCommittedSequence)
        #expect(Self.waitUntil { watcher.isCurrent })
    }

    @Test("a watcher whose connection is killed replays from its last sequence and misses nothing")
    func replayAfterKill() throws {
        let namespace = "kill-\(UUID().uuidString)"
        let store = try PostgresStoreTests.open(namespace)
        let watcher = try PostgresWatcher(try PostgresStoreTests.settings(), namespace: namespace, masterKey: .key(PostgresStoreTests.key),
                                          name: "victim-\(namespace.prefix(30))")
        let collected = Collected()
        _ = Self.start(watcher, into: collected)
        defer { watcher.stop() }
        var written: Set<ItemKey> = []
        for round in 0..<6 {
            for index in 0..<20 {
                let key = ItemKey.genericPassword(service: "s", account: "r\(round)-\(index)")
                try store.perform([.create(ItemAttributes(key: key), secret: Data("x".utf8))])
                written.insert(key)
            }
            // Kill the watcher's connection (the one that acknowledges as "victim-<namespace>"), as a failover would.
            let killed = try PostgresStoreTests.sql("""
                SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'keysmith watch victim-\(namespace.prefix(30))'
                """)
            #expect(killed.count == 1)
        }
        #expect(Self.waitUntil(20) { Set(collected.changes.withLock { $0.map(\.key) }) == written })
        #expect(watcher.reconnects > 0)
        let sequences = collected.changes.withLock { $0.map(\.sequence) }
        #expect(Set(sequences).count == sequences.count, "a change was delivered twice")
    }

    @Test("a writer waits until every live watcher acknowledged its change, and names those that did not")
    func waitForWatchers() throws {
        let namespace = "ack-\(UUID().uuidString)"
        let store = try PostgresStoreTests.open(namespace)
        let watchers = try (0..<3).map { index in
            try PostgresWatcher(try PostgresStoreTests.settings(), namespace: namespace, masterKey: .key(PostgresStoreTests.key), name: "host-\(index)")
        }
        let collected = (0..<3).map { _ in Collected() }
        for (watcher, sink) in zip(watchers, collected) { _ = Self.start(watcher, into: sink) }
        #expect(Self.waitUntil { watchers.allSatisfy(\.isCurrent) })
        try store.perform([.create(ItemAttributes(key: .genericPassword(service: "s", account: "revoked")), secret: Data("x".utf8))])
        let pending = try store.waitForWatchers(through: store.lastCommittedSequence, timeout: .seconds(10))
        #expect(pending.isEmpty)
        #expect(collected.allSatisfy { $0.count == 1 })
        // One watcher stops (a host that hangs): the next change is not acknowledged by it.
        watchers[2].stop()
        #expect(Self.waitUntil { !watchers[2].isCurrent })
        try store.perform([.create(ItemAttributes(key: .genericPassword(service: "s", account: "second")), secret: Data("x".utf8))])
        let late = try store.waitForWatchers(through: store.lastCommittedSequence, timeout: .milliseconds(500))
        #expect(late.map(\.name) == ["host-2"])
        watchers[0].stop()
        watchers[1].stop()
    }
}
