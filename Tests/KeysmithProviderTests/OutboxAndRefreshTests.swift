import Foundation
import Keysmith
import KeysmithProvider
import KeysmithTokens
import Testing

/// The provider module's bookkeeping, without a server: what a queued revocation shows, and how
/// a refresh answer is kept.
@Suite("providers: the outbox's records and refresh bookkeeping")
struct OutboxAndRefreshTests {
    static let response = Data(#"{"access_token":"AT-secret-1","token_type":"Bearer","expires_in":600,"refresh_token":"RT-secret-1","scope":"read write"}"#.utf8)

    func keeper() throws -> TokenKeeper {
        let store = MemoryStore()
        try ProviderRegistry(store: store).add(OAuthProvider(name: "p", tokenEndpoint: "https://auth.example/token",
                                                             revocationEndpoint: "https://auth.example/revoke", clientID: "c"))
        let keeper = TokenKeeper(store: store)
        try keeper.importResponse(Self.response, service: "p", account: "alice", requested: [try Scope("read"), try Scope("write")])
        return keeper
    }

    @Test("a queued revocation holds the tokens, and neither its description, its dump, nor the listing's fields show them; the token ends here in the same commit")
    func queuedRevocationHidesTokens() throws {
        let keeper = try keeper()
        let outbox = RevocationOutbox(keeper: keeper)
        let id = try #require(try outbox.revoke(service: "p", account: "alice", reason: "test"))
        let entry = try #require(try outbox.entries().first { $0.id == id })
        var dumped = ""
        dump(entry, to: &dumped)
        for text in [String(describing: entry), dumped, "\(entry.reason) \(entry.lastError ?? "")"] {
            #expect(!text.contains("AT-secret-1") && !text.contains("RT-secret-1"), "\(text)")
        }
        #expect(try keeper.token(service: "p", account: "alice")?.isActive(at: Date()) == false)
        // The record itself holds them (sealed by the store): the queue can send them.
        let record = try #require(try keeper.store.read(.keysmithRecord(KeysmithRecordKey(recordType: .providerRevocation, service: "p", account: id))))
        #expect(String(decoding: record.secret, as: UTF8.self).contains("RT-secret-1"))
    }

    /// The outbox's queueing and listing, run one way: what each step came to (ids, which are
    /// random, replaced by whether there was one), the queue, and every token's standing.
    static func queueing(awaited: Bool) async throws -> [String] {
        let store = MemoryStore()
        let registry = ProviderRegistry(store: store)
        try registry.add(OAuthProvider(name: "news", tokenEndpoint: "https://auth.example/token", revocationEndpoint: "https://auth.example/revoke",
                                       clientID: "c"))
        try registry.add(OAuthProvider(name: "plain", tokenEndpoint: "https://plain.example/token", clientID: "c"))
        let keeper = TokenKeeper(store: store)
        for (service, account) in [("news", "bob"), ("news", "carol"), ("news", "dave"), ("plain", "erin"), ("gone", "fay")] {
            try keeper.importResponse(response, service: service, account: account, requested: [try Scope("read"), try Scope("write")])
        }
        let outbox = RevocationOutbox(keeper: keeper)
        func outcome(_ body: () async throws -> String) async -> String {
            do { return try await body() } catch let error as KeysmithError { return "refused \(error.code): \(error.message)" }
            catch let error as ProviderError { return "refused \(error.kind): \(error.message)" } catch { return "\(error)" }
        }
        func revoke(_ service: String, _ account: String, deleting: Bool = false) async -> String {
            await outcome {
                let id = awaited ? try await outbox.awaiting.revoke(service: service, account: account, deleting: deleting, reason: "left")
                    : try outbox.revoke(service: service, account: account, deleting: deleting, reason: "left")
                return id == nil ? "none queued" : "queued"
            }
        }
        func bulk(_ filter: TokenFilter) async -> String {
            await outcome {
                let (report, queued) = awaited ? try await outbox.awaiting.revoke(scopes: [try Scope("write")], matching: filter, reason: "incident")
                    : try outbox.revoke(scopes: [try Scope("write")], matching: filter, reason: "incident")
                return "\(report.matched) matched, \(report.changed) changed, \(queued.count) queued"
            }
        }
        var seen = [await revoke("news", "bob"), await revoke("news", "carol", deleting: true), await revoke("plain", "erin"),
                    await revoke("gone", "fay"), await bulk(TokenFilter(service: "gone")), await bulk(TokenFilter(service: "plain")),
                    await bulk(TokenFilter(service: "news"))]
        let entries = awaited ? try await outbox.awaiting.entries() : try outbox.entries()
        seen.append(entries.map { "\($0.provider)/\($0.account) \($0.state)" }.sorted().joined(separator: ", "))
        seen.append(try keeper.tokens().map { "\($0.reference) \($0.token.isActive(at: Date()))" }.joined(separator: ", "))
        seen.append(try keeper.auditEntries().map { "\($0.event) \($0.service) \($0.account) \($0.detail)" }.joined(separator: "; "))
        return seen
    }

    @Test("awaited, the outbox queues, refuses and lists what it does synchronously: one token, a deleted one, a bulk revocation, and their refusals")
    func awaitedQueueing() async throws {
        let sync = try await Self.queueing(awaited: false), awaited = try await Self.queueing(awaited: true)
        #expect(awaited == sync)
        // The steps did what they are for: queued, refused for no endpoint, refused for no provider,
        // the bulk refused whole while one token's service has no endpoint, then queued.
        #expect(Array(sync.prefix(4)) == ["queued", "queued", sync[2], sync[3]])
        #expect(sync[2].hasPrefix("refused unsupported") && sync[3].hasPrefix("refused item not found"), "\(sync)")
        // (A bulk revocation over tokens of both bad services would name whichever a scan meets
        // first: the order is the store's, and two memory stores differ. Each is asked alone.)
        #expect(sync[4].hasPrefix("refused item not found") && sync[5].hasPrefix("refused unsupported") && sync[6] == "2 matched, 1 changed, 1 queued", "\(sync)")
        #expect(sync[7] == "news/bob pending, news/carol pending, news/dave pending", "\(sync)")
    }

    @Test("a refresh answer for a refresh token the kept token no longer holds is not applied (a newer sign-in stays); without expires_in the new token lives as long as the last")
    func refreshBookkeeping() throws {
        let keeper = try keeper()
        let answer = Data(#"{"access_token":"AT-2","token_type":"Bearer","refresh_token":"RT-2"}"#.utf8)
        let conflict = #expect(throws: KeysmithError.self) {
            try keeper.refresh(answer, service: "p", account: "alice", detail: "test", answering: "RT-spent-elsewhere")
        }
        #expect(conflict?.code == .writeConflict)
        #expect(try keeper.token(service: "p", account: "alice")?.accessToken == "AT-secret-1")
        let refreshed = try keeper.refresh(answer, service: "p", account: "alice", detail: "test", answering: "RT-secret-1")
        #expect(refreshed.accessToken == "AT-2" && refreshed.refreshToken == "RT-2")
        let lifetime = try #require(refreshed.expiresAt).timeIntervalSince(try #require(refreshed.refreshedAt))
        #expect(abs(lifetime - 600) < 1, "\(lifetime)")
    }

    @Test("a provider kept before git hosts existed reads back with none; a damaged provider record is passed over when a git host is looked up, and named when providers are listed")
    func providerRecordsOldAndDamaged() throws {
        let store = MemoryStore()
        let old = #"{"clientAuthentication":"none","clientID":"cli","name":"news","rotatesRefreshTokens":true,"scopeSeparator":" ","tokenEndpoint":"https://auth.example/token"}"#
        try store.create(ItemAttributes(key: .keysmithRecord(KeysmithRecordKey(recordType: .oauthProvider, service: "news", account: "provider"))),
                         secret: Data(old.utf8))
        let registry = ProviderRegistry(store: store)
        let news = try #require(try registry.provider(named: "news"))
        #expect(news.gitHosts.isEmpty && news.gitScope == nil && news.tokenEndpoint == "https://auth.example/token")
        var forge = OAuthProvider(name: "forge", tokenEndpoint: "https://forge.example/token", clientID: "git")
        forge.gitHosts = ["Git.Example:8443"]
        try registry.add(forge)
        try store.create(ItemAttributes(key: .keysmithRecord(KeysmithRecordKey(recordType: .oauthProvider, service: "broken", account: "provider"))),
                         secret: Data("not json".utf8))
        #expect(try registry.provider(forGitHost: "git.example:8443")?.name == "forge")
        #expect(try registry.provider(forGitHost: "git.example") == nil, "the port is part of the host")
        #expect(throws: KeysmithError.self) { try registry.providers() }
    }
}
