import Foundation
import Keysmith
import KeysmithPolicy
@testable import KeysmithPostgres
import KeysmithTokenPolicy
import KeysmithTokens
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

    /// A namespace of its own whose store keeps alice's token for "news" (scope posts:read), and
    /// a watcher of it made after the token.
    static func aliceAndWatcher(_ prefix: String) throws -> (PostgresStore, PostgresWatcher) {
        let namespace = "\(prefix)-\(UUID().uuidString)"
        let store = try PostgresStoreTests.open(namespace)
        try TokenKeeper(store: store).importResponse(Data(#"{"access_token":"at-1","token_type":"Bearer","scope":"posts:read"}"#.utf8),
                                                     service: "news", account: "alice", requested: [])
        let watcher = try PostgresWatcher(try PostgresStoreTests.settings(), namespace: namespace, masterKey: .key(PostgresStoreTests.key),
                                          name: "\(prefix)-\(namespace.suffix(12))", staleAfter: .seconds(5))
        return (store, watcher)
    }

    @Test("a watcher feeds one follower: a second WatchedPermissions on a started watcher denies every check and says why, the first keeps its permissions")
    func oneFollowerPerWatcher() throws {
        let (store, watcher) = try Self.aliceAndWatcher("claim")
        let first = try WatchedPermissions(watcher: watcher, store: store, service: "news", account: "alice")
        let second = try WatchedPermissions(watcher: watcher, store: store, service: "news", account: "alice")
        let never = try WatchedPermissions(watcher: watcher, store: store, service: "news", account: "alice")
        first.start(pollInterval: .milliseconds(20))
        defer { first.stop() }
        second.start(pollInterval: .milliseconds(20))
        let read = try Scope("posts:read")
        #expect(Self.waitUntil { first.permissions.hasPermission(read) })
        #expect(watcher.isCurrent)
        #expect(!second.permissions.hasPermission(read) && !second.permissions.isCurrent)
        #expect(second.failure?.code == .invalidArgument)
        #expect(first.failure == nil)
        // A follower never started holds nothing, though the watcher it was given is current
        // (it would never see a revocation).
        #expect(!never.permissions.hasPermission(read) && !never.permissions.isCurrent && never.failure == nil)
        // The watcher's own start, asked again, starts nothing; run refuses at once.
        #expect(!watcher.start(pollInterval: .milliseconds(20)) { _ in })
        let error = #expect(throws: KeysmithError.self) { try watcher.run { _ in true } }
        #expect(error?.code == .invalidArgument)
        // The refused follower's stop and the unstarted one's leave the first one's feed alone.
        second.stop()
        never.stop()
        #expect(watcher.isCurrent && first.permissions.hasPermission(read))
        // A revocation still reaches the first.
        try TokenKeeper(store: store).revoke([read], service: "news", account: "alice", reason: "test")
        #expect(Self.waitUntil { !first.permissions.hasPermission(read) })
    }

    @Test("a watcher that was run, even one whose run has returned, never starts for a follower: a revocation the run took is not lost to it, it denies")
    func watcherRunBeforeFeedsNoFollower() throws {
        let (store, watcher) = try Self.aliceAndWatcher("ran")
        let follower = try WatchedPermissions(watcher: watcher, store: store, service: "news", account: "alice")
        let read = try Scope("posts:read")
        try TokenKeeper(store: store).revoke([read], service: "news", account: "alice", reason: "test")
        // A run takes the revocation's change and returns.
        var seen = 0
        try watcher.run(pollInterval: .milliseconds(20)) { _ in
            seen += 1
            return false
        }
        #expect(seen == 1)
        follower.start(pollInterval: .milliseconds(20))
        defer { follower.stop() }
        #expect(!follower.permissions.hasPermission(read) && !follower.permissions.isCurrent)
        #expect(follower.failure?.code == .invalidArgument)
        #expect(!watcher.start(pollInterval: .milliseconds(20)) { _ in })
        // The follower read the token before the revocation: had it started, it would grant.
        #expect(follower.permissions.permissions.isEmpty)
    }

    @Test("a watcher that is run cannot also be started for a follower: the follower denies every check and says why")
    func runWatcherFeedsNoFollower() throws {
        let (store, watcher) = try Self.aliceAndWatcher("running")
        _ = Self.start(watcher, into: Collected())
        defer { watcher.stop() }
        #expect(Self.waitUntil { watcher.isCurrent })
        let follower = try WatchedPermissions(watcher: watcher, store: store, service: "news", account: "alice")
        follower.start(pollInterval: .milliseconds(20))
        #expect(!follower.permissions.hasPermission(try Scope("posts:read")))
        #expect(follower.failure?.code == .invalidArgument)
    }

    // Written as a client of 0.4 that followed its deprecation messages would be (the forwards
    // from connection settings went in 0.5.0): a watcher and a store, then the follower.
    @Test("started twice, WatchedPermissions and WatchedTokens each watch once: one connection each in pg_stat_activity, and stop ends it")
    func startedTwiceWatchesOnce() throws {
        let namespace = "twice-\(UUID().uuidString)"
        let writer = TokenKeeper(store: try PostgresStoreTests.open(namespace))
        try writer.importResponse(Data(#"{"access_token":"at-1","token_type":"Bearer","scope":"posts:read"}"#.utf8),
                                  service: "news", account: "alice", requested: [])
        let suffix = namespace.suffix(12)
        let settings = try PostgresStoreTests.settings()
        let permissions = try WatchedPermissions(
            watcher: PostgresWatcher(settings, namespace: namespace, masterKey: .key(PostgresStoreTests.key), name: "p2-\(suffix)", staleAfter: .seconds(5)),
            store: PostgresStore(settings, namespace: namespace, masterKey: .key(PostgresStoreTests.key)), service: "news", account: "alice")
        let tokens = try WatchedTokens(
            watcher: PostgresWatcher(settings, namespace: namespace, masterKey: .key(PostgresStoreTests.key), name: "t2-\(suffix)", staleAfter: .seconds(5)),
            store: PostgresStore(settings, namespace: namespace, masterKey: .key(PostgresStoreTests.key)), service: "news")
        /// The connections a watcher of that name holds open now.
        func connections(_ name: String) throws -> Int {
            Int(try PostgresStoreTests.sql("SELECT count(*)::text FROM pg_stat_activity WHERE application_name = 'keysmith watch \(name)'")
                .first?.first ?? "") ?? -1
        }
        for _ in 0..<3 {
            permissions.start(pollInterval: .milliseconds(20))
            tokens.start(pollInterval: .milliseconds(20))
        }
        let read = try Scope("posts:read")
        #expect(Self.waitUntil { permissions.permissions.hasPermission(read) && tokens.permissions(account: "alice")?.hasPermission(read) == true })
        // A second watch, had it started, would have connected before its first poll delivered:
        // a change written now and seen by both followers bounds that by an event, not a pause.
        try writer.revoke([read], service: "news", account: "alice", reason: "a change to see")
        #expect(Self.waitUntil { !permissions.permissions.hasPermission(read) && tokens.permissions(account: "alice")?.hasPermission(read) == false })
        #expect(try connections("p2-\(suffix)") == 1)
        #expect(try connections("t2-\(suffix)") == 1)
        permissions.stop()
        tokens.stop()
        #expect(Self.waitUntil { (try? connections("p2-\(suffix)")) == 0 && (try? connections("t2-\(suffix)")) == 0 })
    }

    static func waitUntil(_ seconds: Double = 60, _ condition: () -> Bool) -> Bool {
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

    @Test("a watcher that never hears a notification still gets every change, in order, by polling")
    func droppedNotifications() throws {
        let namespace = "watch-\(UUID().uuidString)"
        let store = try PostgresStoreTests.open(namespace)
        let watcher = try PostgresWatcher(try PostgresStoreTests.settings(), namespace: namespace, masterKey: .key(PostgresStoreTests.key), name: "deaf")
        watcher.ignoreNotifications()
        let collected = Collected()
        _ = Self.start(watcher, into: collected)
        defer { watcher.stop() }
        let keys = (0..<20).map { ItemKey.genericPassword(service: "news", account: "user\($0)") }
        for key in keys { try store.perform([.create(ItemAttributes(key: key), secret: Data("v".utf8))]) }
        try store.perform(keys.map { .delete($0) })
        #expect(Self.waitUntil { collected.count == 40 })
        let changes = collected.changes.withLock { $0 }
        #expect(changes.prefix(20).map(\.key) == keys)
        #expect(changes.prefix(20).allSatisfy { !$0.deleted })
        // The deletions were one batch: all of them, after the creations.
        #expect(Set(changes.suffix(20).map(\.key)) == Set(keys))
        #expect(changes.suffix(20).allSatisfy { $0.deleted })
        #expect(changes.map(\.sequence) == changes.map(\.sequence).sorted())
        #expect(watcher.lastSequence == store.lastCommittedSequence)
        #expect(Self.waitUntil { watcher.isCurrent })
    }

    @Test("two writers racing in one namespace, the first slow to commit: the watcher gets both changes, in sequence order (none is numbered below one it already read)")
    func slowCommitNeverSkipped() throws {
        let namespace = "watch-\(UUID().uuidString)"
        let slow = try PostgresStoreTests.open(namespace), fast = try PostgresStoreTests.open(namespace)
        let watcher = try PostgresWatcher(try PostgresStoreTests.settings(), namespace: namespace, masterKey: .key(PostgresStoreTests.key), name: "order")
        let collected = Collected()
        _ = Self.start(watcher, into: collected)
        defer { watcher.stop() }
        // The slow writer's transaction stops inside its change-row insert (a trigger waits on a
        // lock this test holds), after its change row has taken a sequence number. Before the
        // fix, the fast writer then committed a higher-numbered change, the watcher read it, and
        // never went back for the slow one.
        let slowKey = ItemKey.genericPassword(service: "news", account: "slow")
        let fastKey = ItemKey.genericPassword(service: "news", account: "fast")
        let index = "'\\x" + slow.keys.blindIndex(slowKey).map { String(format: "%02x", $0) }.joined() + "'::bytea"
        let lockID = Int64.random(in: 1..<Int64.max)
        let function = "keysmith_test_hold_\(UUID().uuidString.prefix(8).lowercased())"
        _ = try PostgresStoreTests.sql("""
            CREATE FUNCTION \(function)() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN IF NEW.blind_index = \(index) THEN PERFORM pg_advisory_xact_lock(\(lockID)); END IF; RETURN NEW; END $$
            """, "CREATE TRIGGER \(function) AFTER INSERT ON keysmith_changes FOR EACH ROW EXECUTE FUNCTION \(function)()")
        defer { _ = try? PostgresStoreTests.sql("DROP TRIGGER \(function) ON keysmith_changes", "DROP FUNCTION \(function)()") }
        let holder = try Session.connect(try PostgresStoreTests.settings(), logger: .init(label: "holder"))
        defer { holder.close() }
        _ = try Transaction(session: holder).execute(PostgresQueryText.raw("SELECT pg_advisory_lock(\(lockID))"))
        let errors = Mutex<[any Error]>([])
        func writer(_ store: PostgresStore, _ key: ItemKey) -> Thread {
            let thread = Thread {
                do { try store.perform([.create(ItemAttributes(key: key), secret: Data("x".utf8))]) } catch { errors.withLock { $0.append(error) } }
            }
            thread.start()
            return thread
        }
        let slowWriter = writer(slow, slowKey)
        // The slow writer must be waiting inside its insert before the fast one starts: asked of
        // the server (pg_locks), not assumed after a fixed pause (under a loaded full run 300 ms
        // was not always enough, and the fast writer went first).
        let waiting = "SELECT count(*)::text FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objid = \(UInt32(truncatingIfNeeded: lockID))"
        #expect(Self.waitUntil { (try? PostgresStoreTests.sql(waiting))?.first?.first == "1" }, "the slow writer never reached its insert")
        let fastWriter = writer(fast, fastKey)
        // The fast writer cannot commit a change while the slow one holds the namespace's feed:
        // the server says it waits for the slow writer's backend (no fixed pause assumed).
        let blockedBySlow = """
            SELECT count(*)::text FROM pg_stat_activity a WHERE (SELECT l.pid FROM pg_locks l WHERE l.locktype = 'advisory' AND NOT l.granted
                AND l.objid = \(UInt32(truncatingIfNeeded: lockID))) = ANY(pg_blocking_pids(a.pid)) AND a.query LIKE '%keysmith_chain_heads%'
            """
        // (Only a writer of this namespace waits for its chain head; other tests' statements
        // that wait for the slow writer's table lock are not counted.)
        #expect(Self.waitUntil { (try? PostgresStoreTests.sql(blockedBySlow))?.first?.first == "1" }, "the fast writer never waited for the slow one")
        #expect(!fastWriter.isFinished)
        #expect(collected.count == 0)
        _ = try Transaction(session: holder).execute(PostgresQueryText.raw("SELECT pg_advisory_unlock(\(lockID))"))
        while !slowWriter.isFinished || !fastWriter.isFinished { usleep(10_000) }
        #expect(errors.withLock { $0.isEmpty }, "\(errors.withLock { $0 })")
        #expect(Self.waitUntil { collected.count == 2 }, "a change never reached the watcher")
        let changes = collected.changes.withLock { $0 }
        #expect(changes.map(\.key) == [slowKey, fastKey])
        #expect(changes.map(\.sequence) == changes.map(\.sequence).sorted())
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
            // Kill the watcher's connection (the one that acknowledges as "victim-<namespace>"), as a failover would,
            // once it is there: after the previous kill the watcher reconnects, which on a loaded machine takes a while.
            let victim = "application_name = 'keysmith watch victim-\(namespace.prefix(30))'"
            #expect(Self.waitUntil(20) { (try? PostgresStoreTests.sql("SELECT pid FROM pg_stat_activity WHERE \(victim)"))?.count == 1 },
                    "round \(round): the watcher is not connected")
            let killed = try PostgresStoreTests.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE \(victim)")
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
        for (watcher, sink) in zip(watchers.prefix(2), collected) { _ = Self.start(watcher, into: sink) }
        // The third hangs in its handler on the second change (a host that hangs): it never
        // acknowledges it, and stays registered.
        let release = DispatchSemaphore(value: 0)
        let hung = Thread {
            try? watchers[2].run(pollInterval: .milliseconds(20)) { change in
                collected[2].changes.withLock { $0.append(change) }
                if collected[2].count == 2 { release.wait() }
                return true
            }
        }
        hung.start()
        #expect(Self.waitUntil { watchers.allSatisfy(\.isCurrent) })
        try store.perform([.create(ItemAttributes(key: .genericPassword(service: "s", account: "revoked")), secret: Data("x".utf8))])
        let pending = try store.waitForWatchers(through: store.lastCommittedSequence, timeout: .seconds(60))
        #expect(pending.isEmpty)
        #expect(collected.allSatisfy { $0.count == 1 })
        try store.perform([.create(ItemAttributes(key: .genericPassword(service: "s", account: "second")), secret: Data("x".utf8))])
        // The two that are not held up acknowledge it (however long that takes on a loaded
        // machine); the one held up in its callback stays pending (counted as live though its
        // heartbeat stopped with it).
        let sequence = store.lastCommittedSequence
        var late: [String] = []
        #expect(Self.waitUntil {
            late = (try? store.waitForWatchers(through: sequence, timeout: .milliseconds(200), liveWithin: .seconds(600)))?.map(\.name) ?? ["error"]
            return late == ["host-2"]
        }, "\(late)")
        release.signal()
        for watcher in watchers { watcher.stop() }
    }

    @Test("permissions fed by a watcher: a revocation from another handle reaches them and policy decisions; while the database refuses the watcher they deny by themselves; then they come back")
    func watchedPermissionsFailClosed() throws {
        let namespace = "perm-\(UUID().uuidString)"
        let role = "keysmith_watch_" + UUID().uuidString.prefix(8).lowercased()
        _ = try PostgresStoreTests.sql("CREATE ROLE \(role) LOGIN")
        try PostgresStore.initialize(try PostgresStoreTests.settings(), masterKey: .key(PostgresStoreTests.key), applicationRole: role)
        let writer = TokenKeeper(store: try PostgresStoreTests.open(namespace))
        try writer.importResponse(Data(#"{"access_token":"at-secret","token_type":"Bearer","scope":"posts:read posts:write"}"#.utf8),
                                  service: "news", account: "alice", requested: [])
        var settings = try PostgresStoreTests.settings()
        settings.user = role
        let watched = try WatchedPermissions(
            watcher: PostgresWatcher(settings, namespace: namespace, masterKey: .key(PostgresStoreTests.key), name: "perm-\(role)", staleAfter: .seconds(5)),
            store: PostgresStore(settings, namespace: namespace, masterKey: .key(PostgresStoreTests.key)), service: "news", account: "alice")
        let write = try Scope("posts:write"), read = try Scope("posts:read")
        // Not current before it has watched: nothing is held yet.
        #expect(!watched.permissions.hasPermission(read))
        watched.start(pollInterval: .milliseconds(20))
        defer { watched.stop() }
        #expect(Self.waitUntil { watched.permissions.hasPermission(write) })
        let policies = try Policies(text: """
            permit (principal, action, resource) when { context has token && context.token.granted.contains("posts:write") };
            """)
        let request = AuthorizationRequest(principal: EntityUID(type: "User", id: "alice"), action: EntityUID(type: "Action", id: "post"),
                                           resource: EntityUID(type: "Group", id: "g"), token: TokenView(watching: watched.permissions))
        #expect(policies.isAuthorized(request, entities: try EntityStore()).isAllowed)

        try writer.revoke([write], service: "news", account: "alice", reason: "test")
        #expect(Self.waitUntil { !watched.permissions.hasPermission(write) })
        #expect(watched.permissions.hasPermission(read))
        #expect(!policies.isAuthorized(request, entities: try EntityStore()).isAllowed)

        // The database refuses the watcher (its role may no longer log in, its connection is
        // killed): within staleAfter, every check denies, without anyone telling it to.
        _ = try PostgresStoreTests.sql("ALTER ROLE \(role) NOLOGIN")
        _ = try PostgresStoreTests.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '\(role)'")
        #expect(Self.waitUntil { !watched.permissions.hasPermission(read) })
        #expect(watched.permissions.permissions.isEmpty && !watched.permissions.isCurrent)
        // Meanwhile the scope is granted again; when the watcher is let back in, it replays and
        // holds both.
        try writer.grant(Data(#"{"access_token":"at-secret-2","token_type":"Bearer","scope":"posts:read posts:write"}"#.utf8),
                         requested: [read, write], service: "news", account: "alice")
        _ = try PostgresStoreTests.sql("ALTER ROLE \(role) LOGIN")
        #expect(Self.waitUntil { watched.permissions.hasPermissions([read, write]) })
        #expect(watched.failure == nil)
    }

    @Test("one watcher follows every token of a service: a revocation reaches only its token, a token imported later appears, a deleted one denies, other services are ignored, and all deny once stopped")
    func watchedTokensFollowAService() throws {
        let namespace = "tokens-\(UUID().uuidString)"
        let writer = TokenKeeper(store: try PostgresStoreTests.open(namespace))
        for account in ["alice", "bob"] {
            try writer.importResponse(Data(#"{"access_token":"at-\#(account)","token_type":"Bearer","scope":"posts:read posts:write"}"#.utf8),
                                      service: "news", account: account, requested: [])
        }
        try writer.importResponse(Data(#"{"access_token":"at-other","token_type":"Bearer","scope":"posts:write"}"#.utf8),
                                  service: "other", account: "alice", requested: [])
        let settings = try PostgresStoreTests.settings()
        let tokens = try WatchedTokens(
            watcher: PostgresWatcher(settings, namespace: namespace, masterKey: .key(PostgresStoreTests.key), name: "tokens-\(namespace.prefix(20))",
                                     staleAfter: .seconds(5)),
            store: PostgresStore(settings, namespace: namespace, masterKey: .key(PostgresStoreTests.key)), service: "news")
        #expect(tokens.accounts == ["alice", "bob"])
        #expect(tokens.permissions(account: "carol") == nil)
        let alice = try #require(tokens.permissions(account: "alice")), bob = try #require(tokens.permissions(account: "bob"))
        let write = try Scope("posts:write"), read = try Scope("posts:read")
        #expect(!alice.hasPermission(read), "not current before it has watched")
        tokens.start(pollInterval: .milliseconds(20))
        defer { tokens.stop() }
        #expect(Self.waitUntil { alice.hasPermission(write) && bob.hasPermission(write) })

        try writer.revoke([write], service: "news", account: "bob", reason: "test")
        #expect(Self.waitUntil { !bob.hasPermission(write) })
        #expect(bob.hasPermission(read) && alice.hasPermission(write))
        // Another service's token of the same account changes nothing here.
        try writer.revoke([write], service: "other", account: "alice", reason: "test")
        try writer.importResponse(Data(#"{"access_token":"at-carol","token_type":"Bearer","scope":"posts:read"}"#.utf8),
                                  service: "news", account: "carol", requested: [])
        #expect(Self.waitUntil { tokens.permissions(account: "carol")?.hasPermission(read) == true })
        #expect(alice.hasPermission(write))
        #expect(tokens.permissions(account: "carol")?.hasPermission(write) == false)

        // Names are equal only when their bytes are: "josé" precomposed and decomposed are two
        // accounts, each with its own token and permissions.
        let composed = "jos\u{E9}", decomposed = "jose\u{301}"
        try writer.importResponse(Data(#"{"access_token":"at-c","token_type":"Bearer","scope":"posts:read"}"#.utf8),
                                  service: "news", account: composed, requested: [])
        try writer.importResponse(Data(#"{"access_token":"at-d","token_type":"Bearer","scope":"posts:write"}"#.utf8),
                                  service: "news", account: decomposed, requested: [])
        #expect(Self.waitUntil { tokens.permissions(account: decomposed)?.hasPermission(write) == true })
        #expect(Self.waitUntil { tokens.permissions(account: composed)?.hasPermission(read) == true })
        #expect(tokens.permissions(account: composed)?.hasPermission(write) == false)
        #expect(tokens.permissions(account: decomposed)?.hasPermission(read) == false)

        try writer.delete(service: "news", account: "alice")
        #expect(Self.waitUntil { !alice.hasPermission(read) })
        tokens.stop()
        #expect(!bob.hasPermission(read), "a stopped watcher's permissions still granted")
        #expect(tokens.failure == nil)
    }

    @Test("WatchedTokens: a token record that does not decode holds nothing while the others hold their scopes; a row edited by hand refuses the start (corrupt data), never a partial set")
    func watchedTokensAndDamage() throws {
        let namespace = "damaged-\(UUID().uuidString)"
        let store = try PostgresStoreTests.open(namespace)
        let writer = TokenKeeper(store: store)
        let namespaceID = "'\\x" + store.keys.namespaceID.map { String(format: "%02x", $0) }.joined() + "'::bytea"
        for account in ["bob", "carol"] {
            try writer.importResponse(Data(#"{"access_token":"at-\#(account)","token_type":"Bearer","scope":"posts:read"}"#.utf8),
                                      service: "news", account: account, requested: [])
        }
        // A record where alice's token belongs that is no token.
        try store.perform([.create(ItemAttributes(key: StoredToken.key(service: "news", account: "alice")), secret: Data("not a token".utf8))])
        let settings = try PostgresStoreTests.settings()
        func watched(_ name: String) throws -> WatchedTokens {
            try WatchedTokens(
                watcher: PostgresWatcher(settings, namespace: namespace, masterKey: .key(PostgresStoreTests.key), name: "\(name)-\(namespace.suffix(12))",
                                         staleAfter: .seconds(5)),
                store: store, service: "news")
        }
        let tokens = try watched("undecodable")
        #expect(tokens.accounts == ["alice", "bob", "carol"])
        tokens.start(pollInterval: .milliseconds(20))
        defer { tokens.stop() }
        let read = try Scope("posts:read")
        #expect(Self.waitUntil { tokens.permissions(account: "bob")?.hasPermission(read) == true })
        #expect(tokens.permissions(account: "carol")?.hasPermission(read) == true)
        #expect(tokens.permissions(account: "alice")?.isCurrent == true)
        #expect(tokens.permissions(account: "alice")?.permissions.isEmpty == true, "current, and holding nothing")

        // One bit of bob's sealed row flipped by hand: the listing refuses, and so does the start.
        _ = try PostgresStoreTests.sql("SET LOCAL session_replication_role = replica", """
            UPDATE keysmith_records r SET sealed = set_byte(r.sealed, 30, get_byte(r.sealed, 30) # 1) FROM keysmith_changes c
            WHERE c.namespace_id = \(namespaceID) AND c.seq = (SELECT min(seq) FROM keysmith_changes WHERE namespace_id = \(namespaceID))
              AND r.namespace_id = c.namespace_id AND r.blind_index = c.blind_index
            """)
        let error = #expect(throws: KeysmithError.self) { _ = try watched("edited") }
        #expect(error?.code == .corruptData)
    }

    @Test("a change row edited in the database stops the watcher with corrupt data; it is never current again and its permissions deny")
    func editedChangeRowStopsTheWatcher() throws {
        let namespace = "edit-\(UUID().uuidString)"
        let store = try PostgresStoreTests.open(namespace)
        let key = ItemKey.genericPassword(service: "s", account: "edited")
        try store.perform([.create(ItemAttributes(key: key), secret: Data("1".utf8))])
        try store.perform([.update(ItemAttributes(key: key), secret: Data("2".utf8))])
        try store.perform([.update(ItemAttributes(key: key), secret: Data("3".utf8))])
        // This namespace's three change rows (sequence numbers are shared by every namespace,
        // and other tests write at the same time: they are not consecutive).
        let namespaceID = "'\\x" + store.keys.namespaceID.map { String(format: "%02x", $0) }.joined() + "'::bytea"
        let sequences = try PostgresStoreTests.sql("SELECT seq::text FROM keysmith_changes WHERE namespace_id = \(namespaceID) ORDER BY keysmith_changes.seq")
            .compactMap { $0.first.flatMap { Int64($0) } }
        try #require(sequences.count == 3)
        // The administrator flips a byte of the middle change's sealed key, past the triggers
        // (session_replication_role = replica turns them off for that session only).
        _ = try PostgresStoreTests.sql("SET LOCAL session_replication_role = replica", """
            UPDATE keysmith_changes SET sealed_key = set_byte(sealed_key, 20, get_byte(sealed_key, 20) # 1) WHERE seq = \(sequences[1])
            """)
        let watcher = try PostgresWatcher(try PostgresStoreTests.settings(), namespace: namespace, masterKey: .key(PostgresStoreTests.key),
                                          name: "edited-\(namespace.prefix(20))", after: sequences[0] - 1)
        // Should it not stop by itself, it is stopped (and the expectations below fail).
        DispatchQueue.global().asyncAfter(deadline: .now() + 120) { watcher.stop() }
        let delivered = Collected()
        let error = #expect(throws: KeysmithError.self) {
            try watcher.run(pollInterval: .milliseconds(20)) { change in
                delivered.changes.withLock { $0.append(change) }
                return true
            }
        }
        #expect(error?.code == .corruptData)
        #expect(watcher.failure?.code == .corruptData)
        #expect(!watcher.isCurrent)
        // The change before the damaged one was delivered; nothing after it was.
        #expect(delivered.changes.withLock { $0.map(\.sequence) } == [sequences[0]])
        #expect(watcher.lastSequence == sequences[0])
    }

    @Test("a revocation undone by the owner (the older row put back, with or without a copy of its old change row appended) stops the watcher and its permissions with corrupt data: never delivered as granted",
          arguments: [false, true])
    func replayedRowStopsTheWatcher(appendOldChange: Bool) throws {
        let namespace = "replay-\(UUID().uuidString)"
        let store = try PostgresStoreTests.open(namespace)
        let writer = TokenKeeper(store: store)
        try writer.importResponse(Data(#"{"access_token":"at-secret","token_type":"Bearer","scope":"h:admin h:read"}"#.utf8),
                                  service: "h", account: "ops", requested: [])
        let namespaceID = "'\\x" + store.keys.namespaceID.map { String(format: "%02x", $0) }.joined() + "'::bytea"
        let before = try PostgresStoreTests.sql("SELECT coalesce(max(seq), 0)::text FROM keysmith_changes WHERE namespace_id = \(namespaceID)")
        let start = try #require(Int64(before[0][0]))
        // The owner keeps the token's row aside; the scope is revoked; the old row is put back.
        let token = try PostgresStoreTests.sql("""
            SELECT encode(r.blind_index, 'hex'), r.version::text, r.key_id::text, encode(r.sealed, 'hex') FROM keysmith_records r
            WHERE r.namespace_id = \(namespaceID) AND r.version = (SELECT max(c.version) FROM keysmith_changes c
                  WHERE c.namespace_id = r.namespace_id AND c.blind_index = r.blind_index AND c.seq = \(start))
            """)
        try #require(token.count == 1, "\(token)")
        let admin = try Scope("h:admin")
        // Permissions fed by a watcher, made before the revocation and started after the owner's edit.
        let watched = try WatchedPermissions(
            watcher: PostgresWatcher(try PostgresStoreTests.settings(), namespace: namespace, masterKey: .key(PostgresStoreTests.key),
                                     name: "replay-perm-\(namespace.prefix(12))", staleAfter: .milliseconds(500)),
            store: PostgresStoreTests.open(namespace), service: "h", account: "ops")
        #expect(watched.permissions.hasPermission(admin) == false)  // not current before it has watched
        try writer.revoke([admin], service: "h", account: "ops", reason: "test")
        _ = try PostgresStoreTests.sql("SET LOCAL session_replication_role = replica", """
            UPDATE keysmith_records SET version = \(token[0][1]), key_id = \(token[0][2]), sealed = decode('\(token[0][3])', 'hex')
            WHERE namespace_id = \(namespaceID) AND blind_index = decode('\(token[0][0])', 'hex')
            """)
        if appendOldChange {
            // What the application role alone may do: append a copy of the item's old change row.
            _ = try PostgresStoreTests.sql("""
                INSERT INTO keysmith_changes (seq, namespace_id, blind_index, version, deleted, sealed_key, chain)
                SELECT nextval('keysmith_changes_seq_seq'), namespace_id, blind_index, version, deleted, sealed_key, chain
                FROM keysmith_changes WHERE namespace_id = \(namespaceID) AND blind_index = decode('\(token[0][0])', 'hex')
                AND version = \(token[0][1]) ORDER BY seq LIMIT 1
                """)
        }
        // A watcher from before the revocation, and one from the start: neither delivers the
        // token as it was before, each ends with corrupt data.
        for after in [start, Int64(0)] {
            let watcher = try PostgresWatcher(try PostgresStoreTests.settings(), namespace: namespace, masterKey: .key(PostgresStoreTests.key),
                                              name: "replay-\(after)-\(appendOldChange)-\(namespace.prefix(12))", after: after)
            DispatchQueue.global().asyncAfter(deadline: .now() + 120) { watcher.stop() }
            let delivered = Collected()
            let error = #expect(throws: KeysmithError.self) {
                try watcher.run(pollInterval: .milliseconds(20)) { change in
                    delivered.changes.withLock { $0.append(change) }
                    return true
                }
            }
            #expect(error?.code == .corruptData, "after \(after): \(String(describing: error))")
            #expect(!watcher.isCurrent)
            for change in delivered.changes.withLock({ $0 }) {
                if let secret = change.record?.secret, let token = try? OAuthToken(storedSecret: secret) {
                    #expect(!token.hasGranted(admin, at: Date()), "after \(after): change \(change.sequence) delivered h:admin as granted")
                }
            }
        }
        // The permissions deny, and say why.
        watched.start(pollInterval: .milliseconds(20))
        defer { watched.stop() }
        #expect(Self.waitUntil { watched.failure != nil })
        #expect(watched.failure?.code == .corruptData)
        #expect(!watched.permissions.hasPermission(admin) && !watched.permissions.isCurrent)
    }

    @Test("a watcher that ends on purpose deregisters: a writer waiting for watchers no longer waits for it")
    func stoppedWatcherDeregisters() throws {
        let namespace = "dereg-\(UUID().uuidString)"
        let store = try PostgresStoreTests.open(namespace)
        let watcher = try PostgresWatcher(try PostgresStoreTests.settings(), namespace: namespace, masterKey: .key(PostgresStoreTests.key),
                                          name: "dereg-\(namespace.prefix(12))")
        let collected = Collected()
        let thread = Self.start(watcher, into: collected)
        try store.perform([.create(ItemAttributes(key: .genericPassword(service: "s", account: "a")), secret: Data("1".utf8))])
        #expect(Self.waitUntil { collected.count == 1 })
        let namespaceID = "'\\x" + store.keys.namespaceID.map { String(format: "%02x", $0) }.joined() + "'::bytea"
        #expect(Self.waitUntil { ((try? PostgresStoreTests.sql("SELECT count(*)::text FROM keysmith_watchers WHERE namespace_id = \(namespaceID)")) ?? []) == [["1"]] })
        watcher.stop()
        #expect(Self.waitUntil { thread.isFinished })
        #expect(try PostgresStoreTests.sql("SELECT count(*)::text FROM keysmith_watchers WHERE namespace_id = \(namespaceID)") == [["0"]])
        try store.perform([.create(ItemAttributes(key: .genericPassword(service: "s", account: "b")), secret: Data("2".utf8))])
        let started = ContinuousClock.now
        // A watcher still registered would count as live for 10 s after its last heartbeat, so
        // this wait would last its whole 8 s.
        #expect(try store.waitForWatchers(through: Int64.max / 2, timeout: .seconds(8)).isEmpty)
        #expect(ContinuousClock.now - started < .seconds(6), "a deregistered watcher was waited for")
    }

    @Test("a watcher that cannot go on after a master-key and a data-key rotation ends and says why, never goes quiet")
    func rotationEndsTheWatcher() throws {
        let settings = try KeyRotationTests.database()
        let first = PostgresMasterKey.key([UInt8](repeating: 4, count: 32))
        try PostgresStore.initialize(settings, masterKey: first, scrypt: .testing)
        let store = try PostgresStore(settings, namespace: "rot", masterKey: first)
        try store.perform([.create(ItemAttributes(key: .genericPassword(service: "s", account: "a")), secret: Data("1".utf8))])
        let watcher = try PostgresWatcher(settings, namespace: "rot", masterKey: first, name: "rot-watch")
        let ended = Mutex<KeysmithError?>(nil)
        let thread = Thread {
            do {
                try watcher.run(pollInterval: .milliseconds(20)) { _ in true }
            } catch let error as KeysmithError {
                ended.withLock { $0 = error }
            } catch {}
        }
        thread.start()
        defer { watcher.stop() }
        #expect(Self.waitUntil { watcher.isCurrent })
        let second = PostgresMasterKey.key([UInt8](repeating: 5, count: 32))
        #expect(try PostgresStore.rotateMasterKey(settings, from: first, to: second, scrypt: .testing) >= 1)
        let owner = try PostgresStore(settings, namespace: "rot", masterKey: second)
        _ = try owner.rotateDataKey()
        try owner.perform([.upsert(ItemAttributes(key: .genericPassword(service: "s", account: "a")), secret: Data("2".utf8))])
        #expect(Self.waitUntil { thread.isFinished }, "the watcher went quiet instead of ending")
        #expect(ended.withLock { $0 }?.code == .authenticationFailed, "\(String(describing: ended.withLock { $0 }))")
        #expect(watcher.failure?.code == .authenticationFailed)
        #expect(!watcher.isCurrent)
    }
}
