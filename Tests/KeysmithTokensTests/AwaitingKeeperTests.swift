import Foundation
import Keysmith
import KeysmithTestSupport
import KeysmithTokens
import Synchronization
import Testing

/// `TokenKeeper.awaiting`: the same operations as the synchronous keeper, with the same checks,
/// audit entries and retries (docs/guide.md, "Tokens from async code").
@Suite("token keeper from async code: the same changes as the synchronous keeper")
struct AwaitingKeeperTests {
    /// One step of the script below, run on one keeper synchronously and on another awaited.
    struct Step: Sendable {
        let name: String
        let sync: @Sendable (TokenKeeper) throws -> String
        let awaited: @Sendable (TokenKeeper.Awaiting) async throws -> String
    }

    static let refreshed = response(["access_token": "AT-2", "token_type": "Bearer", "expires_in": 3600, "refresh_token": "RT-2",
                                     "scope": "groups:read"])
    static let grantResponse = response(["access_token": "AT-3", "token_type": "Bearer", "expires_in": 3600, "scope": "groups:read posts:delete"])
    static let renewed = response(["access_token": "AT-4", "token_type": "Bearer", "expires_in": 600, "refresh_token": "RT-4",
                                   "scope": "groups:read posts:write"])
    static let marker = ItemKey.keysmithRecord(KeysmithRecordKey(recordType: KeysmithRecordType(rawValue: "test-marker"), service: "news", account: "bob"))

    /// Every change the keeper makes, and the refusals it answers with, in an order where each
    /// step meets the state the steps before it left.
    static let script: [Step] = [
        Step(name: "import") { try describe($0.importResponse(standard, service: "news", account: "bob", requested: ["groups:read", "posts:write"], clientID: "app")) }
            awaited: { try await describe($0.importResponse(standard, service: "news", account: "bob", requested: ["groups:read", "posts:write"], clientID: "app")) },
        Step(name: "import again, refused") { try describe($0.importResponse(standard, service: "news", account: "bob", requested: [])) }
            awaited: { try await describe($0.importResponse(standard, service: "news", account: "bob", requested: [])) },
        Step(name: "batch: one new, one updated") {
            let result = try $0.importBatch([TokenImport(service: "news", account: "carol", response: standard, requested: ["groups:read"]),
                                             TokenImport(service: "news", account: "bob", response: renewed, requested: ["groups:read"])])
            return "\(result.imported) \(result.updated)"
        } awaited: {
            let result = try await $0.importBatch([TokenImport(service: "news", account: "carol", response: standard, requested: ["groups:read"]),
                                                   TokenImport(service: "news", account: "bob", response: renewed, requested: ["groups:read"])])
            return "\(result.imported) \(result.updated)"
        },
        Step(name: "revoke") { try describe($0.revoke(["posts:write"], service: "news", account: "bob", reason: "asked")) }
            awaited: { try await describe($0.revoke(["posts:write"], service: "news", account: "bob", reason: "asked")) },
        Step(name: "revoke a scope never held, refused") { try describe($0.revoke(["admin"], service: "news", account: "bob", reason: "x")) }
            awaited: { try await describe($0.revoke(["admin"], service: "news", account: "bob", reason: "x")) },
        Step(name: "revoke of no token, refused") { try describe($0.revoke(["posts:write"], service: "news", account: "nobody", reason: "x")) }
            awaited: { try await describe($0.revoke(["posts:write"], service: "news", account: "nobody", reason: "x")) },
        Step(name: "grant") { try describe($0.grant(grantResponse, requested: ["posts:delete"], service: "news", account: "bob")) }
            awaited: { try await describe($0.grant(grantResponse, requested: ["posts:delete"], service: "news", account: "bob")) },
        Step(name: "update, regranting") {
            let (token, outcome) = try $0.update(with: renewed, requested: ["groups:read", "posts:write"], allowRegrant: true, service: "news", account: "bob")
            return describe(token) + " \(outcome.granted.sorted()) \(outcome.dropped.sorted()) \(outcome.keptRevoked.sorted())"
        } awaited: {
            let (token, outcome) = try await $0.update(with: renewed, requested: ["groups:read", "posts:write"], allowRegrant: true,
                                                       service: "news", account: "bob")
            return describe(token) + " \(outcome.granted.sorted()) \(outcome.dropped.sorted()) \(outcome.keptRevoked.sorted())"
        },
        Step(name: "strict refresh") { try describe($0.refresh(refreshed, service: "news", account: "bob")) }
            awaited: { try await describe($0.refresh(refreshed, service: "news", account: "bob")) },
        Step(name: "refresh answering another refresh token, refused") {
            try describe($0.refresh(renewed, service: "news", account: "bob", detail: "at provider", answering: "RT-old"))
        } awaited: {
            try await describe($0.refresh(renewed, service: "news", account: "bob", detail: "at provider", answering: "RT-old"))
        },
        Step(name: "refresh from a provider") {
            try describe($0.refresh(renewed, service: "news", account: "bob", detail: "at provider", answering: "RT-2"))
        } awaited: {
            try await describe($0.refresh(renewed, service: "news", account: "bob", detail: "at provider", answering: "RT-2"))
        },
        Step(name: "an event with a record beside it") {
            try $0.recordEvent("note", service: "news", account: "bob", detail: "a note",
                               alongside: [.create(ItemAttributes(key: marker), secret: Data("m".utf8))])
            return "recorded"
        } awaited: {
            try await $0.recordEvent("note", service: "news", account: "bob", detail: "a note",
                                     alongside: [.create(ItemAttributes(key: marker), secret: Data("m".utf8))])
            return "recorded"
        },
        Step(name: "end a token, with what alongside returns") {
            try describe($0.endToken(service: "news", account: "bob", scopes: ["groups:read"], reason: "left", event: "revoke-all") { token in
                [.update(ItemAttributes(key: marker), secret: Data(token.accessToken.utf8))]
            })
        } awaited: {
            try await describe($0.endToken(service: "news", account: "bob", scopes: ["groups:read"], reason: "left", event: "revoke-all") { token in
                [.update(ItemAttributes(key: marker), secret: Data(token.accessToken.utf8))]
            })
        },
        Step(name: "revoke everything") { try describe($0.revokeAll(service: "news", account: "carol", reason: "log-out")) }
            awaited: { try await describe($0.revokeAll(service: "news", account: "carol", reason: "log-out")) },
        Step(name: "replace") { try describe($0.importResponse(standard, service: "news", account: "carol", requested: ["groups:read"], replacing: true)) }
            awaited: { try await describe($0.importResponse(standard, service: "news", account: "carol", requested: ["groups:read"], replacing: true)) },
        Step(name: "delete") { try $0.delete(service: "news", account: "carol"); return "deleted" }
            awaited: { try await $0.delete(service: "news", account: "carol"); return "deleted" },
        Step(name: "delete again, refused") { try $0.delete(service: "news", account: "carol"); return "deleted" }
            awaited: { try await $0.delete(service: "news", account: "carol"); return "deleted" },
        Step(name: "read") { try $0.token(service: "news", account: "bob").map(describe) ?? "none" }
            awaited: { try await $0.token(service: "news", account: "bob").map(describe) ?? "none" },
    ]

    /// Two keepers on two fresh stores of one kind, on one manual clock, as one actor: one run
    /// synchronously, the other awaited.
    struct Pair {
        let sync: TokenKeeper, awaited: TokenKeeper, clock = ManualClock()
        let cleanup: () -> Void

        init(_ fixture: TokenStoreFixture) throws {
            let (syncStore, cleanSync) = try fixture.make(), (awaitedStore, cleanAwaited) = try fixture.make()
            let actor = AuditActor.current(command: "test"), clock = clock
            sync = TokenKeeper(store: syncStore, clock: { clock.now }, actor: actor)
            awaited = TokenKeeper(store: awaitedStore, clock: { clock.now }, actor: actor)
            cleanup = { cleanSync(); cleanAwaited() }
        }

        /// Runs each step both ways, expecting the same outcome, and a refusal exactly where the
        /// step's name says so. Returns how many were refused.
        func run(_ script: [Step]) async -> Int {
            var refusals = 0
            for step in script {
                let expected = AwaitingKeeperTests.outcome { try step.sync(sync) }
                let got = await AwaitingKeeperTests.outcome { try await step.awaited(awaited.awaiting) }
                #expect(got == expected, "\(step.name)")
                #expect(expected.refused == step.name.hasSuffix("refused"), "\(step.name): \(expected)")
                if expected.refused { refusals += 1 }
                clock.advance(7)
            }
            return refusals
        }
    }

    static func describe(_ token: OAuthToken) -> String {
        let scopes = token.scopes.sorted { $0.key < $1.key }.map { "\($0.key.rawValue)=\($0.value.state)" }
        return "\(token.accessToken) \(token.refreshToken ?? "-") \(token.revokedAt.map { "\($0.timeIntervalSince1970)" } ?? "active") \(scopes)"
    }

    /// What a step came to: its result, or its error's kind (errors carry kinds; their text is
    /// compared too, since both ways must say the same).
    static func outcome(_ body: () throws -> String) -> Outcome {
        do { return Outcome(text: try body(), refused: false) } catch { return Outcome(error) }
    }

    static func outcome(_ body: () async throws -> String) async -> Outcome {
        do { return Outcome(text: try await body(), refused: false) } catch { return Outcome(error) }
    }

    struct Outcome: Equatable, CustomStringConvertible {
        var text: String
        var refused: Bool
        init(text: String, refused: Bool) {
            self.text = text
            self.refused = refused
        }
        init(_ error: any Error) {
            self.init(text: (error as? KeysmithError).map { "\($0.code): \($0.message)" } ?? "\(error)", refused: true)
        }
        var description: String { (refused ? "refused: " : "") + text }
    }

    @Test("every change, awaited, returns, refuses, stores and audits what the synchronous one does", arguments: TokenStoreFixture.all)
    func sameChanges(_ fixture: TokenStoreFixture) async throws {
        let pair = try Pair(fixture)
        defer { pair.cleanup() }
        let (sync, awaited, syncStore, awaitedStore) = (pair.sync, pair.awaited, pair.sync.store, pair.awaited.store)
        let refusals = await pair.run(Self.script)
        #expect(refusals == 5)
        // The same records: the same audit log, entry for entry (hashes included), the same tokens.
        let entries = try sync.auditEntries()
        #expect(entries.count == Self.script.count - refusals - 1)  // one entry per change; the read makes none
        #expect(try awaited.auditEntries() == entries)
        #expect(try awaited.tokens() .map(\.token) == sync.tokens().map(\.token))
        #expect(try awaitedStore.read(Self.marker)?.secret == syncStore.read(Self.marker)?.secret)
        #expect(try awaited.verifyAuditLog().problems.isEmpty)
    }

    /// A report, its tokens sorted: each store scans in an order of its own (a vault by keyed
    /// index, the memory store by hash), the same for both forms on one store but not across two.
    static func describe(_ report: BulkRevocationReport) -> String {
        "\(report.matched) matched, \(report.changed) changed \(report.changedTokens.map(\.description).sorted()) dry \(report.dryRun)"
    }

    /// Audit entries with the tokens of each in sorted order, and without the hashes that cover
    /// that order (the chain itself is verified on each store).
    static func comparable(_ entries: [AuditEntry]) -> [AuditEntry] {
        entries.map { entry in
            var entry = entry
            entry.tokens.sort()
            entry.hash = ""
            entry.previousHash = ""
            return entry
        }
    }

    static func markerKey(_ reference: TokenReference) -> ItemKey {
        .keysmithRecord(KeysmithRecordKey(recordType: KeysmithRecordType(rawValue: "test-marker"), service: reference.service, account: reference.account))
    }

    /// Bulk changes and listing, in an order where each meets what the one before left.
    static let bulkScript: [Step] = [
        Step(name: "listing") { try $0.tokens(matching: TokenFilter(service: "news")).map { "\($0.reference) " + describe($0.token) }.joined(separator: "; ") }
            awaited: { try await $0.tokens(matching: TokenFilter(service: "news")).map { "\($0.reference) " + describe($0.token) }.joined(separator: "; ") },
        Step(name: "dry run") { try describe($0.revoke(scopes: ["posts:write"], matching: TokenFilter(service: "news"), reason: "incident", dryRun: true)) }
            awaited: { try await describe($0.revoke(scopes: ["posts:write"], matching: TokenFilter(service: "news"), reason: "incident", dryRun: true)) },
        Step(name: "a scope nobody held, refused") { try describe($0.revoke(scope: "nope", matching: TokenFilter(), reason: "x")) }
            awaited: { try await describe($0.revoke(scope: "nope", matching: TokenFilter(), reason: "x")) },
        Step(name: "no token matches, refused") { try describe($0.revoke(scope: "posts:write", matching: TokenFilter(service: "none"), reason: "x")) }
            awaited: { try await describe($0.revoke(scope: "posts:write", matching: TokenFilter(service: "none"), reason: "x")) },
        Step(name: "bulk revoke") { try describe($0.revoke(scopes: ["posts:write"], matching: TokenFilter(service: "news"), reason: "incident")) }
            awaited: { try await describe($0.revoke(scopes: ["posts:write"], matching: TokenFilter(service: "news"), reason: "incident")) },
        Step(name: "again, changing nothing") { try describe($0.revoke(scopes: ["posts:write"], matching: TokenFilter(service: "news"), reason: "incident")) }
            awaited: { try await describe($0.revoke(scopes: ["posts:write"], matching: TokenFilter(service: "news"), reason: "incident")) },
        Step(name: "ending grants, with what alongside returns") {
            try describe($0.revokeEndingGrants(scopes: ["groups:read"], matching: TokenFilter(clientID: "web"), reason: "left") { reference, token in
                [.upsert(ItemAttributes(key: markerKey(reference)), secret: Data(token.accessToken.utf8))]
            })
        } awaited: {
            try await describe($0.revokeEndingGrants(scopes: ["groups:read"], matching: TokenFilter(clientID: "web"), reason: "left") { reference, token in
                [.upsert(ItemAttributes(key: markerKey(reference)), secret: Data(token.accessToken.utf8))]
            })
        },
        Step(name: "listing after") { try $0.tokens().map { "\($0.reference) " + describe($0.token) }.joined(separator: "; ") }
            awaited: { try await $0.tokens().map { "\($0.reference) " + describe($0.token) }.joined(separator: "; ") },
    ]

    @Test("bulk revocations and listings, awaited, return, refuse, store and audit what the synchronous ones do", arguments: TokenStoreFixture.all)
    func sameBulkChanges(_ fixture: TokenStoreFixture) async throws {
        let pair = try Pair(fixture)
        defer { pair.cleanup() }
        let (sync, awaited, syncStore, awaitedStore) = (pair.sync, pair.awaited, pair.sync.store, pair.awaited.store)
        for keeper in [sync, awaited] {
            for (account, client) in [("bob", "app"), ("carol", "web"), ("dave", "web")] {
                try keeper.importResponse(standard, service: "news", account: account, requested: ["groups:read", "posts:write"], clientID: client)
            }
            try keeper.importResponse(standard, service: "other", account: "erin", requested: ["groups:read"], clientID: "web")
        }
        let refusals = await pair.run(Self.bulkScript)
        #expect(refusals == 2)
        let entries = try sync.auditEntries()
        #expect(entries.filter { $0.event == "bulk-revoke" }.count == 2, "the revocation and the grants ended; the dry run and the repeat write none")
        #expect(Self.comparable(try awaited.auditEntries()) == Self.comparable(entries))
        #expect(try awaited.tokens().map(\.token) == sync.tokens().map(\.token))
        for account in ["carol", "dave", "erin"] {
            let marker = Self.markerKey(TokenReference(service: account == "erin" ? "other" : "news", account: account))
            #expect(try awaitedStore.read(marker)?.secret == syncStore.read(marker)?.secret)
            #expect(try syncStore.read(marker) != nil, "alongside's operation for \(account) was committed")
        }
        #expect(try awaited.verifyAuditLog().problems.isEmpty && sync.verifyAuditLog().problems.isEmpty)
    }

    @Test("changes awaited from many tasks at once lose no update", arguments: TokenStoreFixture.all)
    func racingTasks(_ fixture: TokenStoreFixture) async throws {
        let (store, cleanup) = try fixture.make()
        defer { cleanup() }
        let keeper = TokenKeeper(store: store)
        let scopes = try (0..<24).map { try Scope("s\($0)") }
        let all = response(["access_token": "AT", "token_type": "Bearer", "expires_in": 3600, "scope": scopes.map(\.rawValue).joined(separator: " ")])
        try keeper.importResponse(all, service: "news", account: "bob", requested: Set(scopes))
        try await withThrowingTaskGroup(of: Void.self) { group in
            for scope in scopes {
                group.addTask { try await keeper.awaiting.revoke([scope], service: "news", account: "bob", reason: "race") }
            }
            try await group.waitForAll()
        }
        let token = try #require(try keeper.token(service: "news", account: "bob"))
        #expect(scopes.allSatisfy { token.scopes[$0]?.state == .revoked })
        #expect(try keeper.auditEntries().filter { $0.event == "revoke" }.count == 24)
        #expect(try keeper.verifyAuditLog().problems.isEmpty)
    }

    /// A memory store in which another writer revokes `posts:write` of bob's token just before
    /// the first commit that writes a token: that commit then conflicts, and is read and built again.
    final class InterferingStore: ForwardingStore, @unchecked Sendable {
        let armed = Mutex(true)
        let commits = Mutex(0)
        override func perform(_ operations: [StoreOperation]) throws {
            let writesToken = operations.contains {
                if case .keysmithRecord(let key) = $0.key { return key.recordType == .oauthToken }
                return false
            }
            if writesToken, armed.withLock({ let was = $0; $0 = false; return was }) {
                try TokenKeeper(store: inner).revoke(["posts:write"], service: "news", account: "bob", reason: "the other writer")
            }
            commits.withLock { $0 += 1 }
            try inner.perform(operations)
        }
    }

    @Test("an awaited change that meets another writer's commit is read and built again: both changes are kept, and the audit log holds both")
    func conflictRetried() async throws {
        let store = InterferingStore()
        store.armed.withLock { $0 = false }
        let keeper = TokenKeeper(store: store)
        try keeper.importResponse(standard, service: "news", account: "bob", requested: ["groups:read", "posts:write"])
        store.armed.withLock { $0 = true }
        let before = store.commits.withLock { $0 }
        let token = try await keeper.awaiting.revoke(["groups:read"], service: "news", account: "bob", reason: "mine")
        // Two commits: the first refused (the other writer went first), the second applied.
        #expect(store.commits.withLock { $0 } - before == 2)
        #expect(token.scopes["groups:read"]?.state == .revoked && token.scopes["posts:write"]?.state == .revoked)
        #expect(try keeper.token(service: "news", account: "bob") == token)
        #expect(try keeper.auditEntries().map(\.detail).suffix(2) == ["the other writer", "mine"])
        #expect(try keeper.verifyAuditLog().problems.isEmpty)
    }

    @Test("a task cancelled before its change commits ends with CancellationError and changes nothing")
    func cancelled() async throws {
        let keeper = TokenKeeper(store: MemoryStore())
        try keeper.importResponse(standard, service: "news", account: "bob", requested: ["groups:read", "posts:write"])
        let before = try keeper.auditEntries()
        let task = Task {
            while !Task.isCancelled { await Task.yield() }
            return try await keeper.awaiting.revoke(["posts:write"], service: "news", account: "bob", reason: "never")
        }
        task.cancel()
        await #expect(throws: CancellationError.self) { try await task.value }
        #expect(try keeper.token(service: "news", account: "bob")?.scopes["posts:write"]?.state == .granted)
        #expect(try keeper.auditEntries() == before)
    }
}
