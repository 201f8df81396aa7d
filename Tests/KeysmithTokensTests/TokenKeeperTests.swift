import Foundation
import Keysmith
import KeysmithTokens
import KeysmithVault
import Testing

final class ManualClock: @unchecked Sendable {
    private let lock = NSLock()
    private var current = t0
    var now: Date { lock.withLock { current } }
    func advance(_ seconds: TimeInterval) { lock.withLock { current += seconds } }
}

/// A store for token tests: memory, or a fresh file vault.
struct TokenStoreFixture: Sendable, CustomTestStringConvertible {
    let name: String
    let make: @Sendable () throws -> (any SecureStore, @Sendable () -> Void)
    var testDescription: String { name }

    static let memory = TokenStoreFixture(name: "memory") { (MemoryStore(), {}) }
    static let vault = TokenStoreFixture(name: "file vault") {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("keysmith-tokens-\(UUID().uuidString)").path
        let vault = try FileVault.create(at: path, credential: .key([UInt8](repeating: 3, count: 32)))
        return (vault, { try? FileManager.default.removeItem(atPath: path) })
    }
    static let all = [memory, vault]
}

@Suite("token keeper")
struct TokenKeeperTests {
    @Test("a token persists with every scope state, and reopened stores read it back", arguments: TokenStoreFixture.all)
    func persistence(_ fixture: TokenStoreFixture) throws {
        let (store, cleanup) = try fixture.make()
        defer { cleanup() }
        let clock = ManualClock()
        let keeper = TokenKeeper(store: store, clock: { clock.now })
        try keeper.importResponse(standard, service: "news", account: "bob",
                                  requested: ["groups:read", "posts:write", "posts:delete"], clientID: "app", subject: "u1")
        clock.advance(10)
        try keeper.revoke(["posts:write"], service: "news", account: "bob", reason: "user request")
        let token = try #require(try keeper.token(service: "news", account: "bob"))
        #expect(token.state(of: "groups:read", at: clock.now) == .granted)
        #expect(token.state(of: "posts:write", at: clock.now) == .revoked)
        #expect(token.scopes["posts:write"]?.changedAt == t0 + 10)
        #expect(token.state(of: "posts:delete", at: clock.now) == .declined)
        #expect(token.accessToken == "AT-secret")
        #expect(token.clientID == "app")
        #expect(try keeper.tokenKeys().map(\.account) == ["bob"])
        if let vault = store as? FileVault {
            let reopened = try FileVault.open(at: vault.path, credential: .key([UInt8](repeating: 3, count: 32)))
            #expect(try TokenKeeper(store: reopened).token(service: "news", account: "bob") == token)
        }
        // A Keysmith record in the reserved namespace, not a generic password.
        let item = StoredToken(service: "news", account: "bob", token: token)
        let read = try #require(try store.read(item.key))
        #expect(read.key.namespace == .keysmith)
        #expect(try OAuthToken(storedSecret: read.secret) == token)
        #expect(try store.read(.genericPassword(service: "news", account: "bob")) == nil)
        #expect(try store.search(ItemQuery()).isEmpty)
        let notAToken = #expect(throws: KeysmithError.self) { try OAuthToken(storedSecret: Data("{}".utf8)) }
        #expect(notAToken?.code == .corruptData)
    }

    @Test("importing over a kept token is refused unless replacing, and a replacement is audited with what it discards",
          arguments: TokenStoreFixture.all)
    func importDoesNotSilentlyReplace(_ fixture: TokenStoreFixture) throws {
        let (store, cleanup) = try fixture.make()
        defer { cleanup() }
        let keeper = TokenKeeper(store: store, actor: AuditActor(user: "ops", host: "h1", process: 7, command: "rotation job"))
        try keeper.importResponse(standard, service: "news", account: "bob", requested: ["groups:read", "posts:write"])
        try keeper.revoke(["posts:write"], service: "news", account: "bob", reason: "incident")
        let refused = #expect(throws: KeysmithError.self) {
            try keeper.importResponse(standard, service: "news", account: "bob", requested: ["groups:read", "posts:write"])
        }
        #expect(refused?.code == .duplicateItem)
        #expect(try keeper.token(service: "news", account: "bob")?.scopes["posts:write"]?.state == .revoked)
        try keeper.importResponse(standard, service: "news", account: "bob", requested: ["groups:read", "posts:write"], replacing: true)
        let last = try #require(try keeper.auditEntries().last)
        #expect(last.event == "replace")
        #expect(last.detail.contains("discards the revocation of posts:write"))
        #expect(last.actor == AuditActor(user: "ops", host: "h1", process: 7, command: "rotation job"))
        #expect(try keeper.verifyAuditLog().isIntact)
    }

    @Test("with an audit anchor, a log cut short, deleted, or rewritten consistently by someone who can write the store is reported")
    func auditAnchorCatchesRewrites() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("keysmith-audit-anchor-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = MemoryStore()
        let keeper = TokenKeeper(store: store, auditAnchor: AuditAnchor(directory: directory))
        try keeper.importResponse(standard, service: "news", account: "bob", requested: ["groups:read", "posts:write"])
        try keeper.revoke(["posts:write"], service: "news", account: "bob", reason: "incident")
        #expect(try keeper.verifyAuditLog().isIntact)
        // Someone with write access to the store removes the whole log: head and entries.
        let auditRecords = try store.search(ItemQuery(service: "audit", namespace: .keysmith)).map(\.key)
        #expect(auditRecords.count == 3)
        try store.perform(auditRecords.map { .delete($0) })
        // Without the anchor, an empty log looks intact; with it, it is caught.
        #expect(try TokenKeeper(store: store).verifyAuditLog().isIntact)
        let deleted = try keeper.verifyAuditLog()
        #expect(!deleted.isIntact)
        #expect(deleted.problems.contains { $0.contains("this machine saw entry 2") }, "\(deleted.problems)")
        // They write a new, self-consistent log of the same length: caught too.
        let forger = TokenKeeper(store: store)
        try forger.delete(service: "news", account: "bob")
        try forger.importResponse(standard, service: "news", account: "bob", requested: ["groups:read", "posts:write"])
        #expect(try forger.verifyAuditLog().isIntact)
        let rewritten = try keeper.verifyAuditLog()
        #expect(rewritten.problems.contains { $0.contains("entry 2 is not the one this machine saw") }, "\(rewritten.problems)")
        // After a deliberate restore, the anchor accepts the log as it is, and follows it again.
        #expect(try keeper.acceptAuditLog().isIntact)
        try keeper.revoke(["posts:write"], service: "news", account: "bob", reason: "again")
        #expect(try keeper.verifyAuditLog().isIntact)
        // A log that only grows, written by another keeper on another anchor, stays intact.
        try forger.revoke(["groups:read"], service: "news", account: "bob", reason: "more")
        #expect(try keeper.verifyAuditLog().isIntact)
    }

    @Test("an unknown token, an unknown scope and a widening refresh each fail and leave the stored token as it was")
    func failuresChangeNothing() throws {
        let keeper = TokenKeeper(store: MemoryStore(), clock: { t0 })
        try keeper.importResponse(standard, service: "news", account: "bob", requested: ["groups:read", "posts:write"])
        let before = try keeper.token(service: "news", account: "bob")
        let entries = try keeper.auditEntries().count

        let unknownToken = #expect(throws: KeysmithError.self) {
            try keeper.revoke(["posts:write"], service: "news", account: "nobody", reason: "x")
        }
        #expect(unknownToken?.code == .itemNotFound)
        let unknownScope = #expect(throws: KeysmithError.self) {
            try keeper.revoke(["posts:write", "nope"], service: "news", account: "bob", reason: "x")
        }
        #expect(unknownScope?.code == .itemNotFound)
        let widening = #expect(throws: KeysmithError.self) {
            try keeper.refresh(response(["access_token": "n", "token_type": "Bearer", "scope": "admin"]), service: "news", account: "bob")
        }
        #expect(widening?.code == .invalidScope)
        let malformed = #expect(throws: KeysmithError.self) {
            try keeper.importResponse(Data("{".utf8), service: "news", account: "bob", requested: [])
        }
        #expect(malformed?.code == .malformedData)
        #expect(try keeper.token(service: "news", account: "bob") == before)
        #expect(try keeper.auditEntries().count == entries)
    }

    @Test("an audit entry stores exactly the documented fields: older Keysmith versions hash what they can decode, so an added field would make them report every new entry as edited (a shared PostgreSQL log is read by every version in a fleet)")
    func auditEntryFieldsAreFixed() throws {
        let store = MemoryStore()
        let keeper = TokenKeeper(store: store, actor: .current(command: "test"))
        try keeper.importResponse(standard, service: "news", account: "bob", requested: ["groups:read", "posts:write"])
        try keeper.importResponse(standard, service: "news", account: "eve", requested: ["groups:read", "posts:write"])
        _ = try keeper.revoke(scopes: ["posts:write"], matching: TokenFilter(service: "news"), reason: "bulk")
        let entries = try store.search(ItemQuery(namespace: .keysmith, recordType: .auditEntry))
        #expect(entries.count == 3)
        for info in entries {
            let stored = try #require(try store.read(info.key))
            let object = try #require(try JSONSerialization.jsonObject(with: stored.secret) as? [String: Any])
            #expect(Set(object.keys) == ["sequence", "time", "event", "service", "account", "scopes", "detail", "tokens", "actor", "previousHash", "hash"],
                    "docs/guide.md lists these fields; a new one breaks older verifiers: \(object.keys.sorted())")
        }
    }

    @Test("every change is in the audit log, chained; edits, reorders and deletions are detected")
    func auditChain() throws {
        let store = MemoryStore()
        let clock = ManualClock()
        let keeper = TokenKeeper(store: store, clock: { clock.now })
        try keeper.importResponse(standard, service: "news", account: "bob", requested: ["groups:read", "posts:write"])
        clock.advance(1)
        try keeper.revoke(["posts:write"], service: "news", account: "bob", reason: "r1")
        clock.advance(1)
        try keeper.refresh(response(["access_token": "n", "token_type": "Bearer"]), service: "news", account: "bob")
        clock.advance(1)
        try keeper.revokeAll(service: "news", account: "bob", reason: "log out")
        let entries = try keeper.auditEntries()
        #expect(entries.map(\.event) == ["import", "revoke", "refresh", "revoke-all"])
        #expect(entries.map(\.sequence) == [1, 2, 3, 4])
        #expect(entries[1].previousHash == entries[0].hash)
        #expect(try keeper.verifyAuditLog().isIntact)
        #expect(try keeper.verifyAuditLog().entries == 4)
        // Revoking an already revoked scope changes nothing and logs nothing.
        try keeper.revoke(["posts:write"], service: "news", account: "bob", reason: "again")
        #expect(try keeper.auditEntries().count == 4)

        func entryKey(_ n: Int) -> ItemKey {
            .keysmithRecord(KeysmithRecordKey(recordType: .auditEntry, service: "audit", account: String(format: "%012d", n)))
        }

        // Edited: change the detail of entry 2 in place.
        let original2 = try #require(try store.read(entryKey(2)))
        var edited = try JSONSerialization.jsonObject(with: original2.secret) as! [String: Any]
        edited["detail"] = "nothing to see"
        try store.update(original2.attributes, secret: try JSONSerialization.data(withJSONObject: edited))
        #expect(try keeper.verifyAuditLog().problems.contains { $0.contains("entry 2") && $0.contains("edited") })
        try store.update(original2.attributes, secret: original2.secret)
        #expect(try keeper.verifyAuditLog().isIntact)

        // Reordered: swap entries 2 and 3.
        let original3 = try #require(try store.read(entryKey(3)))
        try store.update(original2.attributes, secret: original3.secret)
        try store.update(original3.attributes, secret: original2.secret)
        #expect(try keeper.verifyAuditLog().problems.contains { $0.contains("reordered") })
        try store.update(original2.attributes, secret: original2.secret)
        try store.update(original3.attributes, secret: original3.secret)

        // Deleted: remove entry 3; and the last one.
        try store.delete(entryKey(3))
        #expect(try keeper.verifyAuditLog().problems.contains { $0.contains("entry 3 is missing") })
        try store.create(original3.attributes, secret: original3.secret)
        #expect(try keeper.verifyAuditLog().isIntact)
        try store.delete(entryKey(4))
        #expect(!(try keeper.verifyAuditLog().isIntact))
    }

    @Test("many tasks revoking different scopes of one token at once lose no revocation")
    func concurrentRevocations() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("keysmith-tokens-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let vault = try FileVault.create(at: directory, credential: .key([UInt8](repeating: 3, count: 32)))
        let scopes = (0..<24).map { try! Scope("s\($0)") }
        let keeper = TokenKeeper(store: vault)
        try keeper.importResponse(response(["access_token": "a", "token_type": "Bearer"]), service: "svc", account: "u",
                                  requested: Set(scopes))
        try await withThrowingTaskGroup(of: Void.self) { group in
            for scope in scopes {
                group.addTask {
                    // A keeper per task, over its own vault handle, as separate programs would have.
                    let handle = try FileVault.open(at: directory, credential: .key([UInt8](repeating: 3, count: 32)))
                    try TokenKeeper(store: handle).revoke([scope], service: "svc", account: "u", reason: "task")
                }
            }
            try await group.waitForAll()
        }
        let token = try #require(try keeper.token(service: "svc", account: "u"))
        #expect(token.scopes.values.allSatisfy { $0.state == .revoked })
        #expect(try keeper.verifyAuditLog().isIntact)
        #expect(try keeper.auditEntries().count == 25)
    }

    @Test("bulk revocation changes every matching token once, in one batch, and is idempotent", arguments: TokenStoreFixture.all)
    func bulkRevocation(_ fixture: TokenStoreFixture) throws {
        let (store, cleanup) = try fixture.make()
        defer { cleanup() }
        let keeper = TokenKeeper(store: store, clock: { t0 })
        for index in 0..<30 {
            let scope = index % 3 == 0 ? "groups:read" : "groups:read posts:write"
            try keeper.importResponse(response(["access_token": "a\(index)", "token_type": "Bearer", "scope": scope]),
                                      service: index < 20 ? "news" : "chat", account: "u\(index)", requested: [],
                                      clientID: index % 2 == 0 ? "web" : "cli", subject: "u\(index)")
        }
        let entriesBefore = try keeper.auditEntries().count

        let dry = try keeper.revoke(scope: "posts:write", matching: TokenFilter(service: "news"), reason: "incident", dryRun: true)
        #expect(dry.matched == 20)
        #expect(dry.changed == 13)  // indexes 0..<20 not divisible by 3
        #expect(try keeper.auditEntries().count == entriesBefore)
        #expect(try keeper.token(service: "news", account: "u1")?.state(of: "posts:write", at: t0) == .granted)

        var progress: [(Int, Int)] = []
        let report = try keeper.revoke(scope: "posts:write", matching: TokenFilter(service: "news", clientID: "cli"),
                                       reason: "incident") { progress.append(($0, $1)) }
        #expect(report.matched == 10)
        #expect(report.changed == 7)  // odd indexes below 20, not divisible by 3: 1 5 7 11 13 17 19
        #expect(progress.last.map { $0.0 == $0.1 } == true)
        let entries = try keeper.auditEntries()
        #expect(entries.count == entriesBefore + 1)
        #expect(entries.last?.event == "bulk-revoke")
        #expect(entries.last?.tokens.count == 7)
        #expect(entries.last?.tokens.contains("u1 at news") == true)
        #expect(try keeper.token(service: "news", account: "u1")?.state(of: "posts:write", at: t0) == .revoked)
        #expect(try keeper.token(service: "news", account: "u2")?.state(of: "posts:write", at: t0) == .granted)
        #expect(try keeper.token(service: "chat", account: "u25")?.state(of: "posts:write", at: t0) == .granted)

        let again = try keeper.revoke(scope: "posts:write", matching: TokenFilter(service: "news", clientID: "cli"), reason: "incident")
        #expect(again.changed == 0)
        #expect(try keeper.auditEntries().count == entriesBefore + 1)
        let bySubject = try keeper.revoke(scope: "groups:read", matching: TokenFilter(subject: "u25"), reason: "one user")
        #expect(bySubject.matched == 1 && bySubject.changed == 1)
        // Several scopes in one commit; only granted ones change.
        let entriesNow = try keeper.auditEntries().count
        let several = try keeper.revoke(scopes: ["groups:read", "posts:write"], matching: TokenFilter(subject: "u26"), reason: "both")
        #expect(several.changed == 1)
        #expect(try keeper.token(service: "chat", account: "u26")?.state(of: "groups:read", at: t0) == .revoked)
        #expect(try keeper.token(service: "chat", account: "u26")?.state(of: "posts:write", at: t0) == .revoked)
        #expect(try keeper.auditEntries().count == entriesNow + 1)
        #expect(try keeper.auditEntries().last?.scopes == ["groups:read", "posts:write"])
        #expect(throws: KeysmithError.self) { try keeper.revoke(scopes: [], matching: TokenFilter(), reason: "none") }
        // A granted scope of an expired token is revoked too: a later refresh must not bring it back.
        try keeper.importResponse(response(["access_token": "short", "token_type": "Bearer", "scope": "posts:write", "expires_in": 60]),
                                  service: "news", account: "short-lived", requested: [])
        let later = TokenKeeper(store: store, clock: { t0.addingTimeInterval(3_600) })
        #expect(try later.token(service: "news", account: "short-lived")?.state(of: "posts:write", at: t0.addingTimeInterval(3_600)) == .expired)
        let expired = try later.revoke(scope: "posts:write", matching: TokenFilter(service: "news"), reason: "incident")
        #expect(expired.changedTokens.contains(TokenReference(service: "news", account: "short-lived")))
        #expect(try later.token(service: "news", account: "short-lived")?.scopes["posts:write"]?.state == .revoked)
        #expect(try keeper.verifyAuditLog().isIntact)
    }
}

@Suite("permission manager")
struct PermissionManagerTests {
    struct Editor: PermissionGated { var requiredPermissions: Set<Permission> { ["posts:write", "groups:read"] } }
    struct Reader: PermissionGated { var requiredPermissions: Set<Permission> { ["groups:read"] } }

    @Test("answers, adds, removes and follows a token's granted scopes")
    func basics() throws {
        let token = try OAuthToken(response: standard, requested: [], now: t0)
        let manager = PermissionManager(token: token, at: t0)
        #expect(manager.hasPermission("posts:write"))
        #expect(!manager.hasPermission("posts:delete"))
        manager.add("posts:delete")
        #expect(manager.hasPermissions(["posts:delete", "groups:read"]))
        manager.remove("posts:write")
        #expect(!manager.hasPermission("posts:write"))
        #expect(manager.visible([Editor(), Editor()]).isEmpty)
        #expect(manager.visible([Reader()]).count == 1)
        manager.update(from: token, at: t0 + 7200)  // expired: nothing
        #expect(manager.permissions.isEmpty)
    }

    @Test("a long-running subscriber sees a revocation the moment it is applied")
    func changeStream() async throws {
        let keeper = TokenKeeper(store: MemoryStore(), clock: { t0 })
        let token = try keeper.importResponse(standard, service: "news", account: "bob", requested: [])
        let manager = PermissionManager(token: token, at: t0)
        let first = manager.changes()
        let second = manager.changes()
        let revoked = try keeper.revoke(["posts:write"], service: "news", account: "bob", reason: "r")
        manager.update(from: revoked, at: t0)
        manager.add("extra")
        var iterator = first.makeAsyncIterator()
        let change = try #require(await iterator.next())
        #expect(change.removed == ["posts:write"])
        #expect(change.added.isEmpty)
        #expect(change.current == ["groups:read"])
        #expect(await iterator.next()?.added == ["extra"])
        var other = second.makeAsyncIterator()
        #expect(await other.next()?.removed == ["posts:write"])
        // No change, no event: the next event is the one after.
        manager.update(from: revoked, at: t0)
        manager.remove("extra")
        #expect(await iterator.next()?.removed == ["extra"])
    }
}
