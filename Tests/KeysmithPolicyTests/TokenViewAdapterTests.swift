import Foundation
import Keysmith
@testable import KeysmithPolicy
import KeysmithTokenPolicy
import KeysmithTokens
import Synchronization
import Testing

/// The engine reads scopes by name; the adapter (KeysmithTokenPolicy) turns Keysmith's tokens
/// into those names; the deprecated KeysmithPolicy constructors of one release give the same.
@Suite("token views: the engine's names, the adapter's tokens")
struct TokenViewAdapterTests {
    static let issued = Date(timeIntervalSince1970: 1_763_700_000)

    static func token(revoked: Bool) throws -> OAuthToken {
        func status(_ state: ScopeState) -> ScopeStatus { ScopeStatus(state: state, changedAt: issued, reason: "why") }
        var token = OAuthToken(accessToken: "x", issuedAt: issued, expiresAt: issued.addingTimeInterval(3600), scopes: [
            try Scope("a"): status(.granted), try Scope("b"): status(.revoked), try Scope("c"): status(.declined),
        ])
        // Marked revoked as a whole with its scopes left as they were (as a token revoked before
        // per-scope states were kept reads): the view must still revoke the granted ones.
        if revoked { token.revokedAt = issued.addingTimeInterval(10) }
        return token
    }

    @Test("a stored token's view: its states by name, expiry and a whole-token revocation applied, as OAuthToken.decisionStatuses says")
    func storedToken() throws {
        let live = try Self.token(revoked: false)
        let view = TokenView(token: live, at: Self.issued.addingTimeInterval(60))
        #expect(view.snapshot().mapValues { $0?.state } == ["a": .granted, "b": .revoked, "c": .declined])
        // Past its expiry, the granted scope is expired, from the expiry.
        let later = TokenView(token: live, at: Self.issued.addingTimeInterval(7200)).snapshot()
        #expect(later["a"]??.state == .expired && later["a"]??.changedAt == Self.issued.addingTimeInterval(3600))
        // A revoked token: every granted scope revoked, from the revocation.
        let revoked = TokenView(token: try Self.token(revoked: true), at: Self.issued.addingTimeInterval(60)).snapshot()
        #expect(revoked["a"]??.state == .revoked && revoked["a"]??.changedAt == Self.issued.addingTimeInterval(10))
        #expect(revoked["c"]??.state == .declined && revoked["b"]??.changedAt == Self.issued)
        // The engine's own constructor, from names, builds the same record.
        let byName = TokenView(scopes: live.decisionStatuses(at: Self.issued.addingTimeInterval(60)))
        #expect(byName.currentRecord() == view.currentRecord())
    }

    @Test("a watched manager is read at every decision; granted(names:) and the adapter's granted(Set<Scope>) hold the same names")
    func liveAndGranted() throws {
        let manager = PermissionManager(granted: [try Scope("a")])
        let view = TokenView(watching: manager)
        #expect(view.currentRecord() == TokenView.granted(names: ["a"]).currentRecord())
        manager.replace(with: [try Scope("b")])
        #expect(view.snapshot().keys.sorted() == ["b"])
        #expect(TokenView(granted: [try Scope("a"), try Scope("b")]).currentRecord() == TokenView.granted(names: ["a", "b"]).currentRecord())
        // A live view over any source of names, without a PermissionManager.
        let names = Mutex<Set<String>>(["x"])
        let fromClosure = TokenView.live(grantedNames: { names.withLock { $0 } })
        names.withLock { $0 = ["y", "z"] }
        #expect(fromClosure.snapshot().keys.sorted() == ["y", "z"])
    }
}
