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
}
