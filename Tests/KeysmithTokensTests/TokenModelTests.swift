import Foundation
import Keysmith
import KeysmithTokens
import Testing

let t0 = Date(timeIntervalSince1970: 1_800_000_000)

// Tests only: scope literals. The library has none, so that `Scope("…")` always validates and
// never traps (a literal conformance would turn `Scope("bad one")` into a literal coercion).
extension Scope: ExpressibleByStringLiteral {
    init(stringLiteral value: String) {
        try! self.init(value)
    }
}

func response(_ fields: [String: Any]) -> Data {
    try! JSONSerialization.data(withJSONObject: fields)
}

let standard = response(["access_token": "AT-secret", "token_type": "Bearer", "expires_in": 3600,
                         "refresh_token": "RT-secret", "scope": "groups:read posts:write"])

@Suite("scopes")
struct ScopeTests {
    @Test("valid scope tokens are accepted, case-sensitively, as a set")
    func valid() throws {
        let (lower, upper) = (Scope("posts:write"), Scope("Posts:Write"))
        let printable = Scope("!#$%&'()*+,-./0123456789:;<=>?@AZ[]^_`az{|}~")
        #expect(lower.rawValue == "posts:write")
        #expect(upper != lower)
        #expect(printable.rawValue.count == 44)
        #expect(try Scope.parseList("b a  b a") == [Scope("a"), Scope("b")])
        #expect(try Scope.parseList("") == [])
        // Commas separate too (GitHub, Slack), mixed with spaces, repeats ignored.
        #expect(try Scope.parseList("repo,gist user,,repo , ") == [Scope("repo"), Scope("gist"), Scope("user")])
    }

    @Test("each forbidden character is rejected with an error naming it",
          arguments: [("has space", "space"), ("quo\"te", "double quote"), ("back\\slash", "backslash"),
                      ("tab\tx", "U+9"), ("é", "U+E9"), ("del\u{7F}", "U+7F")])
    func invalid(_ input: (String, String)) {
        let error = #expect(throws: KeysmithError.self) { try Scope(input.0) }
        #expect(error?.code == .invalidScope)
        #expect(error?.message.contains(input.1) == true, "\(error?.message ?? "")")
    }

    @Test("an empty scope is rejected")
    func empty() {
        let empty = String()
        #expect(throws: KeysmithError.self) { try Scope(empty) }
    }
}

@Suite("token model")
struct TokenModelTests {
    @Test("the granted set is the response's scope; requested scopes missing from it are declined")
    func grantFromResponse() throws {
        let token = try OAuthToken(response: standard, requested: ["groups:read", "posts:write", "posts:delete"], now: t0)
        #expect(token.state(of: "groups:read", at: t0) == .granted)
        #expect(token.state(of: "posts:write", at: t0) == .granted)
        #expect(token.state(of: "posts:delete", at: t0) == .declined)
        #expect(token.scopes["posts:delete"]?.reason == "requested but not granted")
        #expect(token.scopes["posts:delete"]?.changedAt == t0)
        #expect(token.state(of: "admin", at: t0) == nil)
        #expect(token.expiresAt == t0.addingTimeInterval(3600))
        #expect(token.refreshToken == "RT-secret")
        #expect(token.scopesToReRequest == ["posts:delete"])
    }

    @Test("without a scope in the response, the requested set is granted")
    func requestedWhenAbsent() throws {
        let token = try OAuthToken(response: response(["access_token": "a", "token_type": "Bearer"]),
                                   requested: ["a", "b"], now: t0)
        #expect(token.grantedScopes(at: t0) == ["a", "b"])
        #expect(token.expiresAt == nil)
        #expect(!token.isExpired(at: .distantFuture))
    }

    @Test("malformed responses are refused, each with its own message, never quoting the token",
          arguments: [
            (Data("not json".utf8), "not a JSON object"),
            (response(["token_type": "Bearer"]), "no access_token"),
            (response(["access_token": "", "token_type": "Bearer"]), "no access_token"),
            (response(["access_token": "SECRET1", "token_type": "Bearer", "expires_in": -5]), "negative"),
            (response(["access_token": "SECRET1", "token_type": "Bearer", "expires_in": "soon"]), "not a number"),
            (response(["access_token": "SECRET1", "token_type": "Bearer", "expires_in": 1.5]), "whole number"),
            (response(["access_token": "SECRET1"]), "token_type"),
          ])
    func malformed(_ input: (Data, String)) {
        let error = #expect(throws: KeysmithError.self) { try OAuthToken(response: input.0, requested: [], now: t0) }
        #expect(error?.code == .malformedData)
        #expect(error?.message.contains(input.1) == true, "\(error?.message ?? "")")
        #expect(error?.message.contains("SECRET1") == false)
    }

    @Test("a response that is not UTF-8, or names a field of RFC 6749 twice with different values, is refused (parsers disagree on which value counts)",
          arguments: [
            (Data(#"{"access_token":"SECRET1","token_type":"Bearer"}"#.utf16.flatMap { [UInt8($0 & 0xFF), UInt8($0 >> 8)] }), "UTF-8"),
            (Data([0xFF, 0xFE]) + Data(#"{"access_token":"SECRET1","token_type":"Bearer"}"#.utf16.flatMap { [UInt8($0 & 0xFF), UInt8($0 >> 8)] }), "UTF-8"),
            (Data(#"{"access_token":"SECRET1","token_type":"Bearer","expires_in":60,"expires_in":999999}"#.utf8), "expires_in twice"),
            (Data(#"{"access_token":"SECRET1","token_type":"Bearer","expires\u005fin":60,"expires_in":9}"#.utf8), "expires_in twice"),
            (Data(#"{"access_token":"SECRET1","access_token":"OTHER","token_type":"Bearer"}"#.utf8), "access_token twice"),
          ])
    func ambiguousResponses(_ input: (Data, String)) {
        let error = #expect(throws: KeysmithError.self) { try OAuthToken(response: input.0, requested: [], now: t0) }
        #expect(error?.code == .malformedData)
        #expect(error?.message.contains(input.1) == true, "\(error?.message ?? "")")
        #expect(error?.message.contains("SECRET1") == false)
    }

    @Test("the same name in different objects, and names that only look alike, are not duplicates")
    func namesInDifferentObjects() throws {
        let body = Data(#"{"access_token":"a","token_type":"Bearer","team":{"id":"T1","name":"x"},"enterprise":{"id":"E1"},"list":[{"id":1},{"id":2}],"ID":"y","note":"\"id\":1,\"id\":2"}"#.utf8)
        let token = try OAuthToken(response: body, requested: [], now: t0)
        #expect(token.accessToken == "a")
    }

    @Test("a response with an invalid scope is refused, naming the character")
    func invalidScopeInResponse() {
        let error = #expect(throws: KeysmithError.self) {
            try OAuthToken(response: response(["access_token": "a", "token_type": "Bearer", "scope": "ok bad\\scope"]),
                           requested: [], now: t0)
        }
        #expect(error?.code == .invalidScope)
        #expect(error?.message.contains("backslash") == true)
    }

    @Test("hasGranted holds only while the token is active: expiry and revocation end it")
    func clockDrivenExpiry() throws {
        var token = try OAuthToken(response: standard, requested: ["groups:read", "posts:write"], now: t0)
        token.dataAccessExpiresAt = t0.addingTimeInterval(90 * 86400)
        #expect(token.hasGranted("posts:write", at: t0.addingTimeInterval(3599)))
        #expect(!token.isExpired(at: t0.addingTimeInterval(3599)))
        #expect(token.isExpired(at: t0.addingTimeInterval(3600)))
        #expect(!token.hasGranted("posts:write", at: t0.addingTimeInterval(3600)))
        #expect(token.state(of: "posts:write", at: t0.addingTimeInterval(3600)) == .expired)
        #expect(token.statuses(at: t0.addingTimeInterval(4000))["posts:write"]?.changedAt == t0.addingTimeInterval(3600))
        #expect(!token.isDataAccessExpired(at: t0.addingTimeInterval(89 * 86400)))
        #expect(token.isDataAccessExpired(at: t0.addingTimeInterval(90 * 86400)))
        #expect(token.scopes(in: .expired, at: t0.addingTimeInterval(3600)) == ["groups:read", "posts:write"])
    }

    @Test("revoking one scope; revoking an unknown one is an error; revoking twice changes nothing")
    func revokeOne() throws {
        var token = try OAuthToken(response: standard, requested: ["groups:read", "posts:write"], now: t0)
        let changed = try token.revoke("posts:write", reason: "user request", at: t0 + 10)
        #expect(changed)
        #expect(token.state(of: "posts:write", at: t0 + 10) == .revoked)
        #expect(token.scopes["posts:write"]?.reason == "revoked: user request")
        #expect(!token.hasGranted("posts:write", at: t0 + 10))
        #expect(token.hasGranted("groups:read", at: t0 + 10))
        let again = try token.revoke("posts:write", reason: "again", at: t0 + 20)
        #expect(!again)
        #expect(token.scopes["posts:write"]?.changedAt == t0 + 10)
        let unknown = #expect(throws: KeysmithError.self) { try token.revoke("never:heard", reason: "x", at: t0) }
        #expect(unknown?.code == .itemNotFound)
        #expect(unknown?.message.contains("never:heard") == true)
    }

    @Test("revoking everything logs out: every scope revoked, the token inactive")
    func revokeAll() throws {
        var token = try OAuthToken(response: standard, requested: ["groups:read", "posts:write", "x"], now: t0)
        let loggedOut = token.revokeAll(reason: "log out", at: t0 + 5)
        #expect(loggedOut)
        #expect(!token.isActive(at: t0 + 5))
        #expect(token.scopes.values.allSatisfy { $0.state == .revoked })
        #expect(token.grantedScopes(at: t0 + 5).isEmpty)
        let again = token.revokeAll(reason: "again", at: t0 + 6)
        #expect(!again)
        #expect(!token.introspection(at: t0 + 5).active)
        #expect(token.introspection(at: t0 + 5).scope == nil)
    }

    @Test("a refresh may narrow the grant but never widen it; a widening refresh changes nothing")
    func refresh() throws {
        var token = try OAuthToken(response: standard, requested: ["groups:read", "posts:write"], now: t0)
        let before = token
        let widening = response(["access_token": "new", "token_type": "Bearer", "scope": "groups:read admin"])
        let error = #expect(throws: KeysmithError.self) { try token.applyRefresh(response: widening, at: t0 + 100) }
        #expect(error?.code == .invalidScope)
        #expect(error?.message.contains("admin") == true)
        #expect(token == before)

        let narrowing = response(["access_token": "AT2", "token_type": "Bearer", "expires_in": 60, "scope": "groups:read"])
        try token.applyRefresh(response: narrowing, at: t0 + 100)
        #expect(token.accessToken == "AT2")
        #expect(token.refreshToken == "RT-secret")
        #expect(token.refreshedAt == t0 + 100)
        #expect(token.expiresAt == t0 + 160)
        #expect(token.state(of: "posts:write", at: t0 + 100) == .declined)
        #expect(token.state(of: "groups:read", at: t0 + 100) == .granted)
        // A refresh without a scope keeps the grant as it is.
        try token.applyRefresh(response: response(["access_token": "AT3", "token_type": "Bearer"]), at: t0 + 200)
        #expect(token.grantedScopes(at: t0 + 200) == ["groups:read"])
    }

    @Test("a declined scope becomes granted only through a new grant, which adds to the set")
    func reRequest() throws {
        var token = try OAuthToken(response: standard, requested: ["groups:read", "posts:write", "posts:delete"], now: t0)
        #expect(token.scopesToReRequest == ["posts:delete"])
        let grant = response(["access_token": "AT2", "token_type": "Bearer", "expires_in": 3600, "scope": "posts:delete"])
        try token.applyGrant(response: grant, requested: token.scopesToReRequest, at: t0 + 50)
        #expect(token.grantedScopes(at: t0 + 50) == ["groups:read", "posts:write", "posts:delete"])
        #expect(token.scopes["posts:delete"]?.reason == "granted by incremental grant")
        #expect(token.scopesToReRequest.isEmpty)
    }

    @Test("introspection uses RFC 7662's field names")
    func introspection() throws {
        var token = try OAuthToken(response: standard, requested: ["groups:read", "posts:write"], clientID: "app",
                                   subject: "u1", issuer: "https://id.example", audience: ["api"], now: t0)
        token.dataAccessExpiresAt = nil
        let encoded = try JSONEncoder().encode(token.introspection(at: t0))
        let object = try #require(try JSONSerialization.jsonObject(with: encoded) as? [String: Any])
        #expect(Set(object.keys) == ["active", "scope", "client_id", "username", "token_type", "exp", "iat", "nbf", "sub", "aud", "iss"])
        #expect(object["active"] as? Bool == true)
        #expect(object["scope"] as? String == "groups:read posts:write")
        #expect(object["exp"] as? Int == Int(t0.timeIntervalSince1970) + 3600)
        #expect(object["client_id"] as? String == "app")
        let inactive = try JSONEncoder().encode(token.introspection(at: t0 + 7200))
        #expect(String(decoding: inactive, as: UTF8.self) == #"{"active":false}"#)
    }

    @Test("the stored form round-trips every field and state exactly")
    func storedFormRoundTrip() throws {
        var token = try OAuthToken(response: standard, requested: ["groups:read", "posts:write", "x:y"], clientID: "c",
                                   subject: "s", issuer: "i", audience: ["a", "b"], now: t0.addingTimeInterval(0.123))
        _ = try token.revoke("posts:write", reason: "r 🔑", at: t0 + 5)
        token.dataAccessExpiresAt = t0 + 1e6
        token.refreshedAt = t0 + 7
        let item = StoredToken(service: "s", account: "a", token: token)
        let decoded = try OAuthToken(storedSecret: item.secret)
        #expect(decoded.scopes == token.scopes)
        #expect(decoded.issuedAt == token.issuedAt)
        #expect(decoded.expiresAt == token.expiresAt)
        #expect(decoded.audience == token.audience)
        #expect(decoded.revokedAt == token.revokedAt)
        #expect(decoded.refreshedAt == token.refreshedAt)
        #expect(decoded.dataAccessExpiresAt == token.dataAccessExpiresAt)
        #expect(decoded == token)
        var cut = Array(item.secret)
        cut.removeLast()
        #expect(throws: KeysmithError.self) { try OAuthToken(storedSecret: Data(cut)) }
    }

    @Test("a stored token record with a hostile count or a time that is not a number is corrupt data, not a crash or a huge allocation")
    func hostileTokenRecords() throws {
        let token = try OAuthToken(response: Data(#"{"access_token":"AT-secret","token_type":"bearer","scope":"a b","expires_in":60}"#.utf8),
                                   requested: [], now: t0)
        let good = [UInt8](StoredToken(service: "svc", account: "a", token: token).secret)
        // Where the scope count sits: after the issued-at and four optional dates, just before
        // the first scope's name ("a").
        let firstScope = try #require(good.indices.first { good[$0...].starts(with: [0, 0, 0, 1, UInt8(ascii: "a")]) })
        var hugeCount = good
        hugeCount.replaceSubrange((firstScope - 4)..<firstScope, with: [0xFF, 0xFF, 0xFF, 0xFF])
        // The expiry date (optional: a 1 byte then 8 bytes) made NaN.
        let expiry = token.expiresAt!.timeIntervalSinceReferenceDate.bitPattern
        let expiryBytes = (0..<8).map { UInt8(truncatingIfNeeded: expiry >> (56 - 8 * $0)) }
        let expiryAt = try #require(good.indices.first { good[$0...].starts(with: expiryBytes) })
        var notANumber = good
        notANumber.replaceSubrange(expiryAt..<(expiryAt + 8), with: [0x7F, 0xF8, 0, 0, 0, 0, 0, 0])
        var infinite = good
        infinite.replaceSubrange(expiryAt..<(expiryAt + 8), with: [0x7F, 0xF0, 0, 0, 0, 0, 0, 0])
        for (name, bytes) in [("a scope count of 4,294,967,295", hugeCount), ("an expiry that is NaN", notANumber), ("an infinite expiry", infinite)] {
            let store = MemoryStore()
            try store.perform([.create(ItemAttributes(key: StoredToken.key(service: "svc", account: "a")), secret: Data(bytes))])
            let error = #expect(throws: KeysmithError.self, "\(name)") { try TokenKeeper(store: store).token(service: "svc", account: "a") }
            #expect(error?.code == .corruptData, "\(name)")
            #expect(error.map { !"\($0)".contains("AT-secret") } ?? true)
        }
        // The untouched record still reads.
        let store = MemoryStore()
        try store.perform([.create(ItemAttributes(key: StoredToken.key(service: "svc", account: "a")), secret: Data(good))])
        #expect(try TokenKeeper(store: store).token(service: "svc", account: "a")?.accessToken == "AT-secret")
    }

    @Test("fields beyond RFC 6749 are kept as sent, stored (KSTOKEN2), replaced by a refresh that carries them, and bounded")
    func additionalResponseFields() throws {
        let github = Data(#"""
            {"access_token":"AT-secret","token_type":"bearer","scope":"repo,gist","refresh_token":"RT-secret","expires_in":28800,
             "refresh_token_expires_in":15811200,"id_token":"eyJ.secret.jwt","team":{"name":"Acme","id":"T1"},"ok":true,"bot":null}
            """#.utf8)
        var token = try OAuthToken(response: github, requested: [], now: t0)
        #expect(token.grantedScopes(at: t0) == ["repo", "gist"])
        #expect(token.additionalFields == ["refresh_token_expires_in": "15811200", "id_token": #""eyJ.secret.jwt""#,
                                           "team": #"{"id":"T1","name":"Acme"}"#, "ok": "true", "bot": "null"])
        let stored = StoredToken(service: "github", account: "a", token: token).secret
        #expect(stored.prefix(8) == Data("KSTOKEN2".utf8))
        #expect(try OAuthToken(storedSecret: stored) == token)
        // A token without them keeps the first form, byte for byte readable by older readers.
        let plain = try OAuthToken(response: standard, requested: [], now: t0)
        #expect(StoredToken(service: "s", account: "a", token: plain).secret.prefix(8) == Data("KSTOKEN1".utf8))
        // A refresh replaces the fields it carries and keeps the others.
        try token.applyRefresh(response: Data(#"{"access_token":"AT2","token_type":"bearer","id_token":"eyJ.new"}"#.utf8), at: t0 + 10)
        #expect(token.additionalFields["id_token"] == #""eyJ.new""# && token.additionalFields["team"] == #"{"id":"T1","name":"Acme"}"#)
        #expect(!token.description.contains("eyJ"))

        // Bounds: at most 64 extra fields kept, each value at most 64 KiB; beyond them a field is
        // dropped, never the token (the provider may have spent a refresh token for it).
        var many: [String: Any] = ["access_token": "a", "token_type": "Bearer"]
        for index in 0..<65 { many["f\(index)"] = index }
        #expect(try OAuthToken(response: response(many), requested: [], now: t0).additionalFields.count == 64)
        let huge = response(["access_token": "a", "token_type": "Bearer", "blob": String(repeating: "x", count: 70_000), "small": 1])
        #expect(try OAuthToken(response: huge, requested: [], now: t0).additionalFields == ["small": "1"])

        // A damaged KSTOKEN2 (no fields after its marker, or a name twice) is corrupt data.
        var empty = Array(StoredToken(service: "s", account: "a", token: plain).secret)
        empty.replaceSubrange(0..<8, with: Array("KSTOKEN2".utf8))
        #expect(throws: KeysmithError.self) { try OAuthToken(storedSecret: Data(empty + [0, 0, 0, 0])) }
        var twice = token
        twice.additionalFields = ["a": "1"]
        var bytes = Array(StoredToken(service: "s", account: "a", token: twice).secret)
        bytes[bytes.count - 11] = 2  // the field count: 1 → 2
        bytes += [0, 0, 0, 1, UInt8(ascii: "a"), 0, 0, 0, 1, UInt8(ascii: "2")]
        #expect(throws: KeysmithError.self) { try OAuthToken(storedSecret: Data(bytes)) }
    }

    @Test("a token's description never shows its secrets")
    func redacted() throws {
        let token = try OAuthToken(response: standard, requested: [], now: t0)
        #expect(!token.description.contains("AT-secret"))
        #expect(!token.description.contains("RT-secret"))
    }
}
