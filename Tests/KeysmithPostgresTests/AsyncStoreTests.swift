import Foundation
import Keysmith
@testable import KeysmithPostgres
import KeysmithProvider
import KeysmithTestSupport
import KeysmithTokens
import NIOCore
import PostgresNIO
import Synchronization
import Testing

/// The PostgreSQL store's asynchronous API (docs/postgres.md, "From async code"): the same store
/// as the blocking API, connections bounded per handle, waits that never block a thread, and
/// cancellation that changes nothing.
@Suite("PostgreSQL store from async code: one store both ways, a bounded pool, cancellation that applies nothing",
       .enabled(if: ProcessInfo.processInfo.environment["KEYSMITH_TEST_DATABASE_URL"] != nil))
struct AsyncStoreTests {
    static func open(connections: Int, namespace: String = "async-\(UUID().uuidString)") throws -> PostgresStore {
        let settings = try PostgresStoreTests.settings()
        try PostgresStore.initialize(settings, masterKey: .key(PostgresStoreTests.key))
        return try PostgresStore(settings, namespace: namespace, masterKey: .key(PostgresStoreTests.key), connections: connections)
    }

    static func item(_ account: String) -> ItemAttributes { ItemAttributes(key: .genericPassword(service: "async", account: account)) }

    /// When `outcome(of:within:_:)` calls a task hung: ten minutes. Only a hang detector: with
    /// the whole suite running on two cores, a test's tasks can wait minutes for a thread of the
    /// cooperative pool (a two-minute bound stopped a run in which nothing was wrong).
    static let hangAfter = 600

    /// The task's outcome. A watchdog on a thread of its own (a deadlock of the cooperative pool
    /// would stop any task-based one) ends the test process with a message if the task has not
    /// ended within `seconds`: a hang detector, not a measure of speed.
    static func outcome<T: Sendable>(of task: Task<T, any Error>, within seconds: Int, _ what: String) async -> Result<T, any Error> {
        let ended = Mutex(false)
        let watchdog = Thread {
            for _ in 0..<(seconds * 10) {
                Thread.sleep(forTimeInterval: 0.1)
                if ended.withLock({ $0 }) { return }
            }
            FileHandle.standardError.write(Data("AsyncStoreTests: \(what) did not end within \(seconds) s (a deadlock?); stopping the tests\n".utf8))
            exit(70)
        }
        watchdog.start()
        let result = await task.result
        ended.withLock { $0 = true }
        return result
    }

    @Test("the async API reads, writes, lists and verifies the same store the blocking API does")
    func bothWays() async throws {
        let store = try Self.open(connections: 4)
        try await store.perform([.create(Self.item("a"), secret: Data("one".utf8)), .create(Self.item("b"), secret: Data("two".utf8))])
        let blocking = try (store as any SecureStore).read(.genericPassword(service: "async", account: "a"))
        let awaited = try await store.read(.genericPassword(service: "async", account: "a"))
        #expect(blocking?.secret == Data("one".utf8))
        #expect(awaited == blocking)
        try (store as any SecureStore).perform([.upsert(Self.item("b"), secret: Data("three".utf8))])
        #expect(try await store.read(.genericPassword(service: "async", account: "b"))?.secret == Data("three".utf8))
        let missing = try await store.read([.genericPassword(service: "async", account: "a"), .genericPassword(service: "async", account: "none")])
        #expect(missing.map { $0?.secret } == [Data("one".utf8), nil])

        let listed = try await store.search(ItemQuery(service: "async")).map(\.key)
        #expect(Set(listed) == Set(try (store as any SecureStore).search(ItemQuery(service: "async")).map(\.key)))
        #expect(listed.count == 2)
        var scanned: [String] = []
        try await store.forEachRecord(matching: ItemQuery(service: "async"), chunkSize: 1) { records, _ in
            await Task.yield()  // the body may await
            scanned += records.map { String(decoding: $0.secret, as: UTF8.self) }
        }
        #expect(scanned.sorted() == ["one", "three"])

        let newKey = try await store.rotateDataKey()
        #expect(newKey == 2)
        let report = try await store.rekey()
        #expect(report.rekeyed == 2 && report.currentKeyID == 2)
        #expect(try await store.verifyChangeFeed().problems.isEmpty)
        #expect(try await store.waitForWatchers(through: store.lastCommittedSequence, timeout: .seconds(1)).isEmpty)
    }

    @Test("64 tasks mixing async and blocking calls on a handle of 2 connections all finish; async callers never open a third, nor do blocking ones")
    func boundedPool() async throws {
        let store = try Self.open(connections: 2)
        try await store.perform((0..<64).map { .create(Self.item("n\($0)"), secret: Data("s\($0)".utf8)) })
        let all = Task {
            try await withThrowingTaskGroup(of: Bool.self) { group in
                for task in 0..<64 {
                    group.addTask {
                        for round in 0..<5 {
                            let key = ItemKey.genericPassword(service: "async", account: "n\((task + round) % 64)")
                            // Odd tasks call the blocking API from inside the cooperative pool:
                            // it must not wait for a pool thread that is itself waiting.
                            let record = task % 2 == 0 ? try await store.read(key) : try (store as any SecureStore).read(key)
                            guard record?.secret == Data("s\((task + round) % 64)".utf8) else { return false }
                        }
                        try await store.perform([.upsert(Self.item("w\(task)"), secret: Data("w".utf8))])
                        return true
                    }
                }
                var correct = 0
                for try await ok in group where ok { correct += 1 }
                return correct
            }
        }
        #expect(try await Self.outcome(of: all, within: Self.hangAfter, "64 tasks on 2 connections").get() == 64)
        #expect(store.pool.peakOpen == 2, "async callers used \(store.pool.peakOpen) connections at most")
        #expect(store.blockingPool.peakOpen <= 2, "blocking callers used \(store.blockingPool.peakOpen) connections at most")
        #expect(try await store.search(ItemQuery(service: "async")).count == 128)
    }

    @Test("a task cancelled while waiting for a connection or a row lock ends with CancellationError, applies nothing, and the handle works on")
    func cancellation() async throws {
        let store = try Self.open(connections: 1)
        let key = ItemKey.genericPassword(service: "async", account: "locked")
        try await store.perform([.create(ItemAttributes(key: key), secret: Data("before".utf8))])

        // Cancelled before it starts: nothing is sent.
        let early = Task {
            while !Task.isCancelled { await Task.yield() }
            try await store.perform([.create(Self.item("early"), secret: Data("x".utf8))])
        }
        early.cancel()
        await #expect(throws: CancellationError.self) { try await Self.outcome(of: early, within: Self.hangAfter, "a cancelled write").get() }
        #expect(try await store.read(.genericPassword(service: "async", account: "early")) == nil)

        // The administrator holds the item's row: a write of it waits on the lock, holding the
        // handle's only connection.
        let admin = try await Session.connect(try PostgresStoreTests.settings(), logger: .init(label: "dba"))
        defer { admin.close() }
        let hold = Transaction(session: admin)
        try await hold.execute("BEGIN")
        let namespace = ByteBuffer(bytes: store.keys.namespaceID), index = ByteBuffer(bytes: store.keys.blindIndex(key))
        try await hold.execute("SELECT 1 FROM keysmith_records WHERE namespace_id = \(namespace) AND blind_index = \(index) FOR UPDATE")
        let writer = Task { try await store.perform([.upsert(ItemAttributes(key: key), secret: Data("after".utf8))]) }
        var blocked: Int32?  // the waiting backend's pid
        for _ in 0..<3000 where blocked == nil {
            try await hold.execute("SELECT pg_stat_clear_snapshot()")
            blocked = try await hold.execute("SELECT pid FROM pg_stat_activity WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid))")
                .first?.decode(Int32.self)
            if blocked == nil { try await Task.sleep(for: .milliseconds(10)) }
        }
        let writerBackend = try #require(blocked, "the write never waited for the administrator's lock: nothing to cancel")

        // A read now waits for the connection; cancelled, it ends at once, the writer still waiting.
        let reader = Task { try await store.read(ItemKey.genericPassword(service: "async", account: "other")) }
        // Cancelled once the pool has it waiting, so the path under test is the one that runs.
        for _ in 0..<3000 where store.pool.waitingCount == 0 { try await Task.sleep(for: .milliseconds(10)) }
        try #require(store.pool.waitingCount == 1, "the read never waited for the connection: nothing to cancel")
        reader.cancel()
        await #expect(throws: CancellationError.self) { try await Self.outcome(of: reader, within: Self.hangAfter, "a read waiting for a connection").get() }

        // The writer, cancelled while its statement waits for the lock.
        writer.cancel()
        await #expect(throws: CancellationError.self) { try await Self.outcome(of: writer, within: Self.hangAfter, "a write waiting for a row lock").get() }
        // Its backend does not wait on: the server finds the connection closed (it checks every
        // second while a statement runs, on PostgreSQL 14 and later on Linux: the server these
        // tests start) and ends it, with the locks it took, while the administrator still holds
        // the row.
        let version = try await hold.execute("SELECT current_setting('server_version_num')::int").first?.decode(Int32.self) ?? 0
        try #require(version >= 140000, "PostgreSQL \(version) cannot check for closed connections while a statement runs")
        // Looked at once more after the deadline: a test starved of threads meanwhile still sees
        // what the server did.
        let waitedUntil = Date().addingTimeInterval(15)
        var stillThere = true
        while true {
            let late = Date() >= waitedUntil
            try await hold.execute("SELECT pg_stat_clear_snapshot()")
            stillThere = try await hold.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = \(writerBackend)")
                .first?.decode(Int64.self) != 0
            if !stillThere || late { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(!stillThere, "the cancelled write's backend (pid \(writerBackend)) was still there 15 s later")
        try await hold.execute("ROLLBACK")

        #expect(try await store.read(key)?.secret == Data("before".utf8), "a cancelled write changed the item")
        try await store.perform([.upsert(ItemAttributes(key: key), secret: Data("later".utf8))])
        #expect(try await store.read(key)?.secret == Data("later".utf8))
        #expect(try await store.verifyChangeFeed().problems.isEmpty)
        #expect(store.pool.peakOpen == 1)
    }

    @Test("a blocking call waits for nothing an async task holds: with every pool thread blocked in one, the tasks holding the connections finish")
    func blockingCallsBesideTasks() async throws {
        let store = try Self.open(connections: 1)
        try await store.perform([.create(Self.item("x"), secret: Data("x".utf8))])
        let threads = ProcessInfo.processInfo.activeProcessorCount
        let all = Task {
            try await withThrowingTaskGroup(of: Void.self) { group in
                // Async readers keep the handle's one async connection busy...
                for _ in 0..<16 {
                    group.addTask { for _ in 0..<20 { _ = try await store.read(ItemKey.genericPassword(service: "async", account: "x")) } }
                }
                // ...while as many blocking calls as the pool has threads run beside them.
                for _ in 0..<(threads * 4) {
                    group.addTask { for _ in 0..<20 { _ = try (store as any SecureStore).read(ItemKey.genericPassword(service: "async", account: "x")) } }
                }
                try await group.waitForAll()
            }
        }
        try await Self.outcome(of: all, within: Self.hangAfter, "blocking calls beside async tasks").get()
    }

    @Test("tokens asked for from async code are read without a blocking call: ProviderTokens holds no thread while PostgreSQL answers")
    func freshTokensAreAwaited() async throws {
        let store = try Self.open(connections: 4)
        let keeper = TokenKeeper(store: store)
        let response = Data(#"{"access_token":"at-1","token_type":"Bearer","expires_in":3600,"refresh_token":"rt-1","scope":"a b"}"#.utf8)
        _ = try keeper.importResponse(response, service: "news", account: "alice", requested: [try Scope("a"), try Scope("b")])
        let tokens = try ProviderTokens(keeper: keeper)
        let blockingBefore = store.blockingPool.lendings.load(ordering: .relaxed)
        let asyncBefore = store.pool.lendings.load(ordering: .relaxed)
        let all = Task {
            try await withThrowingTaskGroup(of: String.self) { group in
                for _ in 0..<64 {
                    group.addTask { try await tokens.freshToken(service: "news", account: "alice", minValidity: .seconds(60)).accessToken }
                }
                return try await group.reduce(into: [String]()) { $0.append($1) }
            }
        }
        let seen = try await Self.outcome(of: all, within: Self.hangAfter, "64 fresh-token reads").get()
        #expect(seen == Array(repeating: "at-1", count: 64))
        // Each read went through the async connections; none was a blocking call (the blocking
        // API uses the other pool: what a read through the synchronous protocol would do).
        #expect(store.blockingPool.lendings.load(ordering: .relaxed) == blockingBefore)
        #expect(store.pool.lendings.load(ordering: .relaxed) - asyncBefore >= 64)
        // The same read through the synchronous API does use the blocking pool: the check above can fail.
        _ = try await Task.detached { try tokens.tokenIfFresh(service: "news", account: "alice") }.value
        #expect(store.blockingPool.lendings.load(ordering: .relaxed) > blockingBefore)
    }

    @Test("token changes awaited on PostgreSQL hold no thread: 82 changes from as many tasks import, revoke, refresh and delete tokens, then a bulk revocation and a listing, without one blocking call, and lose no update")
    func tokenChangesAreAwaited() async throws {
        let store = try Self.open(connections: 4)
        let keeper = TokenKeeper(store: store)
        let blockingBefore = store.blockingPool.lendings.load(ordering: .relaxed)
        let asyncBefore = store.pool.lendings.load(ordering: .relaxed)
        let scopes = try (0..<8).map { try Scope("s\($0)") }
        let granted = Data(#"{"access_token":"at-1","token_type":"Bearer","expires_in":3600,"refresh_token":"rt-1","scope":"s0 s1 s2 s3 s4 s5 s6 s7"}"#.utf8)
        let refreshed = Data(#"{"access_token":"at-2","token_type":"Bearer","expires_in":3600,"refresh_token":"rt-2"}"#.utf8)
        let all = Task {
            try await withThrowingTaskGroup(of: Void.self) { group in
                // 8 accounts, each imported, then 8 tasks per account revoking one scope each
                // (conflicting with one another), one refreshing it; every 4th account deleted.
                for account in 0..<8 {
                    group.addTask {
                        let name = "user\(account)"
                        try await keeper.awaiting.importResponse(granted, service: "news", account: name, requested: Set(scopes))
                        try await withThrowingTaskGroup(of: Void.self) { inner in
                            for scope in scopes {
                                inner.addTask { try await keeper.awaiting.revoke([scope], service: "news", account: name, reason: "race") }
                            }
                            inner.addTask { try await keeper.awaiting.refresh(refreshed, service: "news", account: name) }
                            try await inner.waitForAll()
                        }
                        if account % 4 == 0 { try await keeper.awaiting.delete(service: "news", account: name) }
                    }
                }
                try await group.waitForAll()
            }
        }
        try await Self.outcome(of: all, within: Self.hangAfter, "64 token changes").get()
        // No change took a connection of the blocking pool: every read and commit was awaited.
        #expect(store.blockingPool.lendings.load(ordering: .relaxed) == blockingBefore)
        #expect(store.pool.lendings.load(ordering: .relaxed) - asyncBefore >= 8 * 11 * 2)
        // No update lost: every scope revoked, every refresh kept, every delete done.
        for account in 0..<8 {
            let token = try await keeper.awaiting.token(service: "news", account: "user\(account)")
            if account % 4 == 0 {
                #expect(token == nil)
                continue
            }
            let kept = try #require(token)
            #expect(kept.accessToken == "at-2")
            #expect(scopes.allSatisfy { kept.scopes[$0]?.state == .revoked }, "user\(account): \(kept.scopes)")
        }
        // A bulk revocation and a listing, awaited: the scan and the commit are awaited too.
        let granted2 = Data(#"{"access_token":"at-3","token_type":"Bearer","scope":"x y"}"#.utf8)
        for account in 0..<40 {
            try await keeper.awaiting.importResponse(granted2, service: "bulk", account: "b\(account)", requested: [try Scope("x"), try Scope("y")])
        }
        let report = try await keeper.awaiting.revoke(scope: try Scope("x"), matching: TokenFilter(service: "bulk"), reason: "bulk")
        #expect(report.matched == 40 && report.changed == 40)
        let listed = try await keeper.awaiting.tokens(matching: TokenFilter(service: "bulk"))
        #expect(listed.count == 40 && listed.allSatisfy { $0.token.scopes[try! Scope("x")]?.state == .revoked })
        #expect(store.blockingPool.lendings.load(ordering: .relaxed) == blockingBefore, "the bulk revocation or the listing made a blocking call")
        // The audit log, read synchronously (its reading is not awaited): from here the blocking pool is used.
        let entries = try keeper.auditEntries()
        #expect(entries.filter { $0.event == "revoke" }.count == 64)
        #expect(entries.filter { $0.event == "refresh" }.count == 8)
        #expect(entries.filter { $0.event == "delete" }.count == 2)
        #expect(entries.filter { $0.event == "bulk-revoke" }.count == 1)
        #expect(try keeper.verifyAuditLog().problems.isEmpty)
        // The synchronous keeper does use the blocking pool: the checks above can fail.
        let beforeSync = store.blockingPool.lendings.load(ordering: .relaxed)
        _ = try await Task.detached { try keeper.revokeAll(service: "news", account: "user1", reason: "sync") }.value
        #expect(store.blockingPool.lendings.load(ordering: .relaxed) > beforeSync)
    }

    @Test("a refresh from async code on PostgreSQL holds no thread: its lock, its reads and its commit are awaited, and 16 callers on two handles share one refresh",
          .enabled(if: OAuthTestServer.available))
    func refreshIsAwaited() async throws {
        let server = try OAuthTestServer()
        defer { server.destroy() }
        let namespace = "async-\(UUID().uuidString)"
        let store = try Self.open(connections: 4, namespace: namespace)
        // A second handle on the same namespace (as another process would have): its callers
        // do not share the first handle's in-process flight, so the two handles meet at the
        // grant's advisory lock, and the one that takes it second finds the token refreshed.
        let other = try Self.open(connections: 4, namespace: namespace)
        try ProviderRegistry(store: store).add(
            OAuthProvider(name: "dot", tokenEndpoint: server.url + "/token/", clientID: "ks-password", clientAuthentication: .clientSecretBasic),
            clientSecret: Array(server.clientSecret.utf8))
        // A grant whose access token is about to expire: every caller below needs a refresh.
        var granted = try #require(try JSONSerialization.jsonObject(with: Data(try server.passwordGrant().utf8)) as? [String: Any])
        granted["expires_in"] = 1
        let keeper = TokenKeeper(store: store)
        let before = try keeper.importResponse(try JSONSerialization.data(withJSONObject: granted), service: "dot", account: "alice",
                                               requested: [try Scope("read"), try Scope("write")])
        let tokens = try ProviderTokens(keeper: keeper), otherTokens = try ProviderTokens(keeper: TokenKeeper(store: other))
        let lendings = store.blockingPool.lendings.load(ordering: .relaxed) + other.blockingPool.lendings.load(ordering: .relaxed)
        let lockQuestions = store.blockingLockQuestions.load(ordering: .relaxed) + other.blockingLockQuestions.load(ordering: .relaxed)
        let all = Task {
            try await withThrowingTaskGroup(of: OAuthToken.self) { group in
                for caller in 0..<16 {
                    group.addTask { try await (caller % 2 == 0 ? tokens : otherTokens).freshToken(service: "dot", account: "alice", minValidity: .seconds(60)) }
                }
                return try await group.reduce(into: [OAuthToken]()) { $0.append($1) }
            }
        }
        let seen = try await Self.outcome(of: all, within: Self.hangAfter, "16 callers of one refresh").get()
        #expect(Set(seen.map(\.accessToken)).count == 1)
        #expect(seen[0].accessToken != before.accessToken && seen[0].refreshToken != before.refreshToken)
        #expect(try await keeper.awaiting.token(service: "dot", account: "alice")?.accessToken == seen[0].accessToken)
        #expect(try #require(try server.request("/test/refreshes?client_id=ks-password").json["issued"] as? Int) == 2,
                "one refresh at the provider after the grant")
        // Nothing blocked a thread: no connection of the blocking pool, no lock question asked blocking.
        #expect(store.blockingPool.lendings.load(ordering: .relaxed) + other.blockingPool.lendings.load(ordering: .relaxed) == lendings)
        #expect(store.blockingLockQuestions.load(ordering: .relaxed) + other.blockingLockQuestions.load(ordering: .relaxed) == lockQuestions)
        // The synchronous lock does ask blocking: the check above can fail.
        _ = try await Task.detached { try store.tryExclusiveLock(named: "sync")?.release() }.value
        #expect(store.blockingLockQuestions.load(ordering: .relaxed) + other.blockingLockQuestions.load(ordering: .relaxed) > lockQuestions)
    }

    @Test("the outbox from async code on PostgreSQL holds no thread: queueing one token's and a bulk revocation, listing the queue and sending it make no blocking call")
    func outboxIsAwaited() async throws {
        let store = try Self.open(connections: 4)
        // A provider at a port nobody listens on: each send is refused at once, and stays pending.
        try ProviderRegistry(store: store).add(OAuthProvider(name: "news", tokenEndpoint: "http://127.0.0.1:9/token",
                                                             revocationEndpoint: "http://127.0.0.1:9/revoke", clientID: "c"))
        let keeper = TokenKeeper(store: store)
        let granted = Data(#"{"access_token":"at-1","token_type":"Bearer","refresh_token":"rt-1","scope":"read write"}"#.utf8)
        for account in ["bob", "carol", "dave"] {
            try keeper.importResponse(granted, service: "news", account: account, requested: [try Scope("read"), try Scope("write")])
        }
        let outbox = RevocationOutbox(keeper: keeper, timeout: .seconds(10))
        let lendings = store.blockingPool.lendings.load(ordering: .relaxed)
        let lockQuestions = store.blockingLockQuestions.load(ordering: .relaxed)
        let one = try await outbox.awaiting.revoke(service: "news", account: "bob", reason: "left")
        #expect(one != nil)
        let (report, queued) = try await outbox.awaiting.revoke(scopes: [try Scope("write")], matching: TokenFilter(service: "news"), reason: "incident")
        #expect(report.changed == 2 && queued.count == 2, "\(report) \(queued)")
        #expect(try await outbox.awaiting.entries().count == 3)
        let sent = try await outbox.send(force: true)
        #expect(sent.pending == 3 && sent.confirmed == 0 && sent.failed == 0, "\(sent)")
        #expect(store.blockingPool.lendings.load(ordering: .relaxed) == lendings, "a blocking call")
        #expect(store.blockingLockQuestions.load(ordering: .relaxed) == lockQuestions, "a lock asked blocking")
        // Each stayed queued, with why (read synchronously now).
        #expect(try outbox.entries().allSatisfy { $0.state == "pending" && $0.attempts == 1 && $0.lastError != nil })
        #expect(try keeper.auditEntries().filter { $0.event == "provider-revoke-retry" }.count == 3)
    }
}
