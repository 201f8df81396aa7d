import Foundation
import Keysmith
import KeysmithTokens
import Testing

/// What `keysmith token list` selects and prints, as a Swift program gets it.
@Suite("token listing: selections, standing, summaries")
struct TokenListingTests {
    /// Four tokens of client "web" unless named: one active for an hour, one for a day, one
    /// logged out, one of client "cli" whose posts:write is revoked.
    static func keeper(_ clock: ManualClock) throws -> TokenKeeper {
        let keeper = TokenKeeper(store: MemoryStore(), clock: { clock.now })
        for (account, lifetime, client) in [("hour", 3_600, "web"), ("day", 86_400, "web"), ("out", 3_600, "web"), ("other", 3_600, "cli")] {
            try keeper.importResponse(response(["access_token": "a-\(account)", "token_type": "Bearer", "expires_in": lifetime,
                                                "scope": "posts:read posts:write", "refresh_token": "r-\(account)", "ext": "x"]),
                                      service: "news", account: account, requested: ["posts:read", "posts:write"], clientID: client)
        }
        try keeper.revokeAll(service: "news", account: "out", reason: "logged out")
        try keeper.revoke(["posts:write"], service: "news", account: "other", reason: "incident \u{202E}")
        return keeper
    }

    static func accounts(_ keeper: TokenKeeper, _ selection: TokenSelection, at date: Date? = nil) throws -> [String] {
        try keeper.tokens(selectedBy: selection, at: date).map(\.reference.account)
    }

    @Test("a selection filters by client, by a scope and its state, by any scope in a state, and by expiry within a horizon (active tokens only)")
    func selections() throws {
        let clock = ManualClock()
        let keeper = try Self.keeper(clock)
        #expect(try Self.accounts(keeper, TokenSelection()) == ["day", "hour", "other", "out"])
        #expect(try Self.accounts(keeper, TokenSelection(filter: TokenFilter(clientID: "web"))) == ["day", "hour", "out"])
        let (read, write, delete) = (Scope("posts:read"), Scope("posts:write"), Scope("posts:delete"))
        #expect(try Self.accounts(keeper, TokenSelection(scope: write, state: .revoked)) == ["other", "out"])
        #expect(try Self.accounts(keeper, TokenSelection(scope: write, state: .granted)) == ["day", "hour"])
        #expect(try Self.accounts(keeper, TokenSelection(state: .revoked)) == ["other", "out"])
        #expect(try Self.accounts(keeper, TokenSelection(scope: delete)) == [])
        #expect(try Self.accounts(keeper, TokenSelection(expiringWithin: 7_200)) == ["hour", "other"])
        // Two hours later the hour-long tokens have expired: their granted scopes read expired,
        // and they no longer count as expiring.
        let later = t0.addingTimeInterval(7_200)
        #expect(try Self.accounts(keeper, TokenSelection(scope: read, state: .expired), at: later) == ["hour", "other"])
        #expect(try Self.accounts(keeper, TokenSelection(expiringWithin: 86_400), at: later) == ["day"])
    }

    @Test("a token stands logged out whatever its expiry, else expired, else active")
    func standing() throws {
        let clock = ManualClock()
        let keeper = try Self.keeper(clock)
        let hour = try #require(try keeper.token(service: "news", account: "hour"))
        let out = try #require(try keeper.token(service: "news", account: "out"))
        #expect(hour.standing(at: t0) == .active)
        #expect(hour.standing(at: t0.addingTimeInterval(3_601)) == .expired)
        #expect(out.standing(at: t0) == .loggedOut)
        #expect(out.standing(at: t0.addingTimeInterval(1e6)) == .loggedOut)
        #expect(OAuthToken.Standing.loggedOut.rawValue == "logged-out")
    }

    @Test("a summary holds the metadata and every scope with snake_case names and ISO 8601 times, never a token or an extra field's value")
    func summaries() throws {
        let clock = ManualClock()
        let keeper = try Self.keeper(clock)
        let (reference, token) = try #require(try keeper.tokens(selectedBy: TokenSelection(filter: TokenFilter(clientID: "cli"))).first)
        let summary = TokenSummary(reference, token, at: t0)
        let json = String(decoding: try JSONEncoder().encode(summary), as: UTF8.self)
        for secret in ["a-other", "r-other", "\"x\""] { #expect(!json.contains(secret), "\(json)") }
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
        #expect(object["service"] as? String == "news" && object["account"] as? String == "other" && object["active"] as? Bool == true)
        #expect(object["client_id"] as? String == "cli" && object["has_refresh_token"] as? Bool == true && object["response_fields"] as? [String] == ["ext"])
        #expect(object["issued_at"] as? String == "2027-01-15T08:00:00Z" && object["expires_at"] as? String == "2027-01-15T09:00:00Z")
        let scopes = try #require(object["scopes"] as? [[String: String]])
        #expect(scopes.map { $0["scope"] } == ["posts:read", "posts:write"])
        #expect(scopes[1]["state"] == "revoked" && scopes[1]["reason"] == "revoked: incident \u{202E}" && scopes[1]["changed_at"] == "2027-01-15T08:00:00Z", "\(scopes)")
    }
}
