import Foundation
import Keysmith
import KeysmithPostgres
import KeysmithProvider
import KeysmithTestSupport
import KeysmithTokens
import KeysmithVault
import Synchronization
import Testing

/// A refresh killed with SIGKILL at each of its steps, in a real process (`store-race fresh`,
/// which refreshes through `ProviderTokens` and stops at a step it sees through the store it
/// is given: the library has no hook), against the test authorization server (refresh tokens
/// rotate with reuse protection, no grace period), on the file vault and on PostgreSQL.
///
/// What the guide ("The one window") and the threat model promise: killed before the request,
/// nothing is spent and the grant's lock is free at once; killed after the commit, the new
/// tokens are kept and handed out without another refresh; killed between the provider's
/// answer and the commit (the one window no client can close), the next refresh meets
/// `invalid_grant`, the provider ends the whole grant (so the lost tokens are dead too), the
/// token is marked logged out here with the reason, and signing in again is the way back.
@Suite("providers: a refresh killed (SIGKILL) at each of its steps", .enabled(if: OAuthTestServer.available))
struct RefreshCrashTests {
    enum Backend: String, CaseIterable, CustomTestStringConvertible {
        case vault, postgres
        var testDescription: String { self == .vault ? "file vault" : "PostgreSQL" }
    }

    /// A store with the provider `dot` (the server's `ks-password` client, its secret kept in
    /// the store) and alice's grant imported as the token `dot`/`alice`.
    final class Fixture {
        let server: OAuthTestServer
        let arguments: [String]
        let directory: String
        let open: () throws -> any SecureStore
        let cleanup: () -> Void

        init(_ backend: Backend) throws {
            server = try OAuthTestServer()
            directory = FileManager.default.temporaryDirectory.appendingPathComponent("keysmith-crash-\(UUID().uuidString.prefix(8))").path
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            switch backend {
            case .vault:
                // The key `store-race` opens every vault with.
                let key = [UInt8](repeating: 7, count: 32), path = directory + "/vault"
                _ = try FileVault.create(at: path, credential: .key(key))
                arguments = ["vault", path]
                open = { try FileVault.open(at: path, credential: .key(key)) }
                cleanup = {}
            case .postgres:
                let url = try #require(ProcessInfo.processInfo.environment["KEYSMITH_TEST_DATABASE_URL"],
                                       "no PostgreSQL server: run the tests under scripts/with-postgres.sh")
                let settings = try PostgresConnectionSettings(url: url)
                // The master key `store-race` opens every namespace with.
                let key = [UInt8](repeating: 9, count: 32), namespace = "crash-\(UUID().uuidString)"
                try PostgresStore.initialize(settings, masterKey: .key(key))
                arguments = ["postgres", namespace]
                open = { try PostgresStore(settings, namespace: namespace, masterKey: .key(key)) }
                let store = try open()
                cleanup = {
                    if let items = try? store.search(ItemQuery(namespace: .any)), !items.isEmpty { try? store.perform(items.map { .delete($0.key) }) }
                }
            }
            let store = try open()
            try ProviderRegistry(store: store).add(
                OAuthProvider(name: "dot", issuer: server.url, tokenEndpoint: server.url + "/token/", revocationEndpoint: server.url + "/revoke_token/",
                              introspectionEndpoint: server.url + "/introspect/", clientID: "ks-password", clientAuthentication: .clientSecretBasic),
                clientSecret: Array(server.clientSecret.utf8))
            try TokenKeeper(store: store).importResponse(Data(try server.passwordGrant().utf8), service: "dot", account: "alice",
                                                         requested: [try Scope("read"), try Scope("write")])
        }

        deinit {
            cleanup()
            server.destroy()
            try? FileManager.default.removeItem(atPath: directory)
        }

        var keeper: TokenKeeper { get throws { TokenKeeper(store: try open()) } }
        var token: OAuthToken { get throws { try #require(try keeper.token(service: "dot", account: "alice")) } }

        /// How many refresh tokens the provider has issued to the client (the grant's first one
        /// included): one more than the refreshes it made.
        var issued: Int { get throws { try #require(try server.request("/test/refreshes?client_id=ks-password").json["issued"] as? Int) } }
        var grantAlive: Bool { get throws { try server.request("/test/grant-alive?client_id=ks-password").json["alive"] as? Bool == true } }

        /// `store-race … fresh dot alice SECONDS`, stopped at `step` and killed there once it
        /// says it has reached it.
        func killed(at step: String, minValidity: Int = 7200) throws {
            let marker = directory + "/paused-\(step)"
            var environment = ProcessInfo.processInfo.environment
            environment["STORE_RACE_PAUSE"] = step
            environment["STORE_RACE_PAUSED"] = marker
            let process = try SpawnedProcess(Self.storeRace, arguments + ["fresh", "dot", "alice", String(minValidity)], environment: environment,
                                             standardOutput: .file(directory + "/killed.out"), standardError: .file(directory + "/killed.err"), deadline: 120)
            let deadline = Date().addingTimeInterval(60)
            while !FileManager.default.fileExists(atPath: marker), process.isRunning, Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
            let reached = FileManager.default.fileExists(atPath: marker)
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            let output = (try? String(contentsOfFile: directory + "/killed.out", encoding: .utf8)) ?? ""
            try #require(reached, "the refresh never reached the step \(step): \(output)")
        }

        /// `store-race … fresh dot alice SECONDS` to its end: its status, what it printed, and
        /// how long it took.
        func fresh(minValidity: Int) throws -> (status: Int32, output: String, seconds: Double) {
            let started = Date()
            let process = try SpawnedProcess(Self.storeRace, arguments + ["fresh", "dot", "alice", String(minValidity)],
                                             standardOutput: .file(directory + "/fresh.out"), standardError: .file(directory + "/fresh.err"), deadline: 200)
            process.waitUntilExit()
            let output = (try? String(contentsOfFile: directory + "/fresh.out", encoding: .utf8)) ?? ""
            return (process.terminationStatus, output.trimmingCharacters(in: .whitespacesAndNewlines), Date().timeIntervalSince(started))
        }

        /// The test runner sits beside the built `store-race`.
        static let storeRace: String = {
            let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
            var url = URL(fileURLWithPath: executable).deletingLastPathComponent()
            if url.pathExtension == "xctest" { url.deleteLastPathComponent() }
            return url.appendingPathComponent("store-race").path
        }()
    }

    @Test("killed holding the grant's lock, before the request: nothing is spent at the provider or changed here, and the next process takes the lock at once and refreshes",
          arguments: Backend.allCases)
    func killedBeforeTheRequest(backend: Backend) throws {
        let fixture = try Fixture(backend)
        let before = try fixture.token
        try fixture.killed(at: "locked")
        #expect(try fixture.issued == 1, "the killed process sent no refresh")
        #expect(try fixture.token.accessToken == before.accessToken && fixture.token.refreshToken == before.refreshToken)
        // The lock died with its holder: the next refresh does not wait out the 90 s lock timeout.
        let next = try fixture.fresh(minValidity: 7200)
        #expect(next.status == 0, "\(next.output)")
        #expect(next.seconds < 30, "the next refresh waited \(next.seconds) s for the dead process's lock")
        let after = try fixture.token
        #expect(next.output == "token " + after.accessToken && after.accessToken != before.accessToken)
        #expect(try fixture.issued == 2 && fixture.server.isActive(after.accessToken) && fixture.grantAlive)
        #expect(try fixture.keeper.verifyAuditLog().isIntact)
    }

    @Test("killed after the commit, before the token is handed out: the new tokens are kept (with their audit entry), the next caller gets them without another refresh, the grant lives",
          arguments: Backend.allCases)
    func killedAfterTheCommit(backend: Backend) throws {
        let fixture = try Fixture(backend)
        let before = try fixture.token
        try fixture.killed(at: "committed")
        let kept = try fixture.token
        #expect(kept.accessToken != before.accessToken && kept.refreshToken != before.refreshToken && kept.refreshedAt != nil)
        #expect(try fixture.issued == 2 && fixture.server.isActive(kept.accessToken))
        #expect(try fixture.keeper.auditEntries().contains { $0.event == "refresh" && $0.account == "alice" })
        // The kept token is fresh for 60 s: handed out with no request to the provider.
        let next = try fixture.fresh(minValidity: 60)
        #expect(next.status == 0 && next.output == "token " + kept.accessToken, "\(next.output)")
        #expect(try fixture.issued == 2 && fixture.grantAlive)
        #expect(try fixture.keeper.verifyAuditLog().isIntact)
    }

    @Test("killed with the provider's answer in hand, before the commit (the one window): the store is intact with the old token; the next refresh meets invalid_grant, the provider ends the whole grant (the lost tokens too), the token is logged out here with the reason; signing in again works",
          arguments: Backend.allCases)
    func killedBeforeTheCommit(backend: Backend) throws {
        let fixture = try Fixture(backend)
        let before = try fixture.token
        try fixture.killed(at: "answered")
        // The provider spent the old refresh token and issued new ones that nobody kept.
        #expect(try fixture.issued == 2)
        let kept = try fixture.token
        #expect(kept.accessToken == before.accessToken && kept.refreshToken == before.refreshToken && kept.revokedAt == nil)
        #expect(try fixture.keeper.verifyAuditLog().isIntact)
        let next = try fixture.fresh(minValidity: 7200)
        #expect(next.status == 1 && next.output.hasPrefix("error provider rejected invalid_grant"), "\(next.output)")
        // Reuse protection: the provider ended the grant, the tokens the killed process lost included.
        #expect(try !fixture.grantAlive)
        let ended = try fixture.token
        #expect(ended.revokedAt != nil)
        let entry = try #require(try fixture.keeper.auditEntries().last { $0.account == "alice" })
        #expect(entry.event == "revoke-all" && entry.detail.contains("invalid_grant") && entry.detail.contains("sign in again"), "\(entry)")
        // The way back: a new sign-in (here the password grant, as `token login` would keep it).
        try fixture.keeper.importResponse(Data(try fixture.server.passwordGrant().utf8), service: "dot", account: "alice",
                                          requested: [try Scope("read")], replacing: true)
        let again = try fixture.fresh(minValidity: 7200)
        #expect(again.status == 0, "\(again.output)")
        #expect(try fixture.grantAlive && fixture.server.isActive(fixture.token.accessToken))
    }
}

/// A refresh checks that it still holds the grant's lock just before it sends the refresh token
/// (on PostgreSQL a dropped connection releases the lock while its holder runs on): a lost lock
/// sends nothing and starts over.
@Suite("providers: a refresh whose lock was lost before sending starts over and sends nothing", .enabled(if: OAuthTestServer.available))
struct LostRefreshLockTests {
    /// A memory store whose first `losing` locks say they are no longer held (as a PostgreSQL
    /// lock does when its connection dropped), counting the locks taken.
    final class LosingLocks: ForwardingStore, @unchecked Sendable {
        let losing: Int
        let taken = Mutex(0)
        init(losing: Int) { self.losing = losing }

        final class Lost: HeldLock {
            let lock: any HeldLock
            init(_ lock: any HeldLock) { self.lock = lock }
            func release() { lock.release() }
            func isHeld() -> Bool { false }
        }

        override func tryExclusiveLock(named name: String) throws -> (any HeldLock)? {
            guard let lock = try inner.tryExclusiveLock(named: name) else { return nil }
            let count = taken.withLock { $0 += 1; return $0 }
            return count <= losing ? Lost(lock) : lock
        }
    }

    func setUp(_ server: OAuthTestServer, losing: Int) throws -> (LosingLocks, ProviderTokens, OAuthToken) {
        let store = LosingLocks(losing: losing)
        try ProviderRegistry(store: store).add(
            OAuthProvider(name: "dot", tokenEndpoint: server.url + "/token/", clientID: "ks-password", clientAuthentication: .clientSecretBasic),
            clientSecret: Array(server.clientSecret.utf8))
        let keeper = TokenKeeper(store: store)
        let token = try keeper.importResponse(Data(try server.passwordGrant().utf8), service: "dot", account: "alice", requested: [try Scope("read")])
        return (store, try ProviderTokens(keeper: keeper), token)
    }

    func issued(_ server: OAuthTestServer) throws -> Int {
        try #require(try server.request("/test/refreshes?client_id=ks-password").json["issued"] as? Int)
    }

    @Test("the first lock is lost before sending: nothing is sent under it; the lock is taken again and the grant refreshed once")
    func lostOnce() async throws {
        let server = try OAuthTestServer()
        defer { server.destroy() }
        let (store, tokens, before) = try setUp(server, losing: 1)
        let fresh = try await tokens.freshToken(service: "dot", account: "alice", minValidity: .seconds(7200))
        #expect(fresh.accessToken != before.accessToken && fresh.refreshToken != before.refreshToken)
        #expect(store.taken.withLock { $0 } == 2, "the lock was taken again")
        #expect(try issued(server) == 2, "one refresh at the provider")
        #expect(try server.isActive(fresh.accessToken))
    }

    @Test("every lock lost: the refresh gives up with storeUnavailable, having sent nothing; the kept token is unchanged and the grant lives")
    func lostAlways() async throws {
        let server = try OAuthTestServer()
        defer { server.destroy() }
        let (store, tokens, before) = try setUp(server, losing: .max)
        let error = await #expect(throws: KeysmithError.self) { try await tokens.freshToken(service: "dot", account: "alice", minValidity: .seconds(7200)) }
        #expect(error?.code == .storeUnavailable && error?.message.contains("nothing was sent") == true, "\(String(describing: error))")
        #expect(store.taken.withLock { $0 } == 3)
        #expect(try issued(server) == 1, "no refresh reached the provider")
        #expect(try tokens.keeper.token(service: "dot", account: "alice")?.refreshToken == before.refreshToken)
        #expect(try server.refreshWorks(try #require(before.refreshToken)), "the grant's refresh token was never spent")
    }
}

/// A caller whose task is cancelled once its refresh is under way (the grant's lock taken, the
/// provider about to be asked) does not lose the grant: the refresh token is sent, and the answer
/// kept and handed back, in a task the cancellation does not reach (a rotating provider has spent
/// the old refresh token the moment it answers).
@Suite("providers: a refresh whose caller is cancelled midway is sent and kept, never dropped", .enabled(if: OAuthTestServer.available))
struct CancelledRefreshTests {
    /// A memory store that cancels `victim` when the provider's record is read (the refresh
    /// reads it under the grant's lock, just before it checks the lock and sends).
    final class CancellingStore: ForwardingStore, @unchecked Sendable {
        let victim = Mutex<Task<OAuthToken, any Error>?>(nil)
        let cancelled = Mutex(false)

        override func read(_ key: ItemKey) throws -> SecureRecord? {
            if case .keysmithRecord(let record) = key, record.recordType == .oauthProvider, let task = victim.withLock({ $0 }) {
                task.cancel()
                cancelled.withLock { $0 = true }
            }
            return try inner.read(key)
        }
    }

    @Test("cancelled after taking the lock, the caller still gets the refreshed token; the store keeps it; the provider issued it once; the new refresh token works")
    func cancelledMidway() async throws {
        let server = try OAuthTestServer()
        defer { server.destroy() }
        let store = CancellingStore()
        try ProviderRegistry(store: store).add(
            OAuthProvider(name: "dot", tokenEndpoint: server.url + "/token/", clientID: "ks-password", clientAuthentication: .clientSecretBasic),
            clientSecret: Array(server.clientSecret.utf8))
        let keeper = TokenKeeper(store: store)
        let before = try keeper.importResponse(Data(try server.passwordGrant().utf8), service: "dot", account: "alice", requested: [try Scope("read")])
        let tokens = try ProviderTokens(keeper: keeper)
        let caller = Task {
            // Starts once it can be cancelled by the store.
            while store.victim.withLock({ $0 == nil }) { await Task.yield() }
            return try await tokens.refresh(service: "dot", account: "alice", rejected: before.accessToken)
        }
        store.victim.withLock { $0 = caller }
        let refreshed = try await caller.value
        #expect(store.cancelled.withLock { $0 }, "the caller was never cancelled: the test tested nothing")
        #expect(caller.isCancelled)
        #expect(refreshed.accessToken != before.accessToken && refreshed.refreshToken != before.refreshToken)
        #expect(try keeper.token(service: "dot", account: "alice")?.refreshToken == refreshed.refreshToken, "the answer was not kept")
        #expect(try #require(try server.request("/test/refreshes?client_id=ks-password").json["issued"] as? Int) == 2)
        #expect(try server.refreshWorks(try #require(refreshed.refreshToken)), "the kept refresh token is the grant's live one")
    }
}

/// A refresh whose token is logged out between the provider's answer and the commit keeps the
/// answer (the old refresh token is spent) but leaves the token logged out, and queues the new
/// tokens' revocation at the provider in the same commit, so that no crash can keep them
/// without it.
@Suite("providers: a refresh that meets a log-out queues the new tokens' revocation in the commit that keeps them", .enabled(if: OAuthTestServer.available))
struct RefreshMeetsLogOutTests {
    /// A memory store that logs the token out (as another process would) just before the first
    /// token write after it is armed, and records what each commit held.
    final class LoggingOut: ForwardingStore, @unchecked Sendable {
        let armed = Mutex(false)
        let commits = Mutex<[[String]]>([])

        override func perform(_ operations: [StoreOperation]) throws {
            let types = operations.compactMap { operation -> String? in
                if case .keysmithRecord(let key) = operation.key { return key.recordType.rawValue }
                return nil
            }
            if types.contains("oauth-token"), armed.withLock({ let was = $0; $0 = false; return was }) {
                try TokenKeeper(store: inner).revokeAll(service: "dot", account: "alice", reason: "logged out elsewhere")
            }
            try inner.perform(operations)
            commits.withLock { $0.append(types) }
        }
    }

    @Test("the refresh's commit holds the token and the queued revocation of its new tokens; the token stays logged out; the outbox sends them and the provider ends them")
    func oneCommit() async throws {
        let server = try OAuthTestServer()
        defer { server.destroy() }
        let store = LoggingOut()
        try ProviderRegistry(store: store).add(
            OAuthProvider(name: "dot", tokenEndpoint: server.url + "/token/", revocationEndpoint: server.url + "/revoke_token/",
                          clientID: "ks-password", clientAuthentication: .clientSecretBasic),
            clientSecret: Array(server.clientSecret.utf8))
        let keeper = TokenKeeper(store: store)
        try keeper.importResponse(Data(try server.passwordGrant().utf8), service: "dot", account: "alice", requested: [try Scope("read")])
        store.armed.withLock { $0 = true }
        let tokens = try ProviderTokens(keeper: keeper)
        let error = await #expect(throws: KeysmithError.self) { try await tokens.freshToken(service: "dot", account: "alice", minValidity: .seconds(7200)) }
        #expect(error?.code == .invalidArgument && error?.message.contains("logged out while it was being refreshed") == true, "\(String(describing: error))")
        let kept = try #require(try keeper.token(service: "dot", account: "alice"))
        #expect(kept.revokedAt != nil, "still logged out")
        // The commit that kept the refresh also created the outbox entry.
        let refreshCommit = try #require(store.commits.withLock { $0 }.last { $0.contains("oauth-token") })
        #expect(refreshCommit.contains("provider-revocation"), "\(refreshCommit)")
        let entries = try RevocationOutbox(keeper: keeper).entries()
        #expect(entries.count == 1 && entries.first?.reason.contains("logged out while it was being refreshed") == true)
        let newAccess = kept.accessToken, newRefresh = try #require(kept.refreshToken)
        #expect(try server.isActive(newAccess))
        let sent = try await RevocationOutbox(keeper: keeper).send(force: true)
        #expect(sent.confirmed == 1)
        #expect(try !server.isActive(newAccess) && !server.refreshWorks(newRefresh))
    }
}
