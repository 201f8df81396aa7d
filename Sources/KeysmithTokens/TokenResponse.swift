public import FoundationEssentials
import Keysmith

/// An RFC 6749 §5.1 token response, parsed and checked.
package struct TokenResponse {
    /// The longest lifetime a response may give: 100 years, in seconds. Every number a response
    /// carries is bounded, so no stored date can overflow a conversion later.
    static let maximumExpiresIn = 100 * 365 * 86_400
    package var accessToken: String
    var tokenType: String
    var expiresIn: Int?
    package var refreshToken: String?
    var scope: Set<Scope>?
    /// Fields beyond RFC 6749's, as compact JSON text by name.
    var additionalFields: [String: String] = [:]
    /// The names of fields beyond RFC 6749's that could not be kept and were dropped (the
    /// token never is for their sake): see ``additionalFields(_:)``.
    package var droppedFields: [String] = []

    /// The fields RFC 6749 §5.1 defines (typed); every other field is kept as sent.
    static let standardFields: Set<String> = ["access_token", "token_type", "expires_in", "refresh_token", "scope"]
    /// At most this many additional fields are kept, each name at most 256 bytes and each value
    /// at most 64 KiB of JSON: a response is bounded like every other input, and a field beyond
    /// these bounds is dropped, never the token.
    static let maximumAdditionalFields = 64
    static let maximumAdditionalFieldBytes = 65_536

    private struct Wire: Decodable {
        var access_token: String?
        var token_type: String?
        var expires_in: Flexible?
        var refresh_token: String?
        var scope: ScopeField?
    }

    /// `scope` arrives as a space- or comma-delimited string (RFC 6749; GitHub, Slack), or as a
    /// JSON array of scope strings (Facebook and others).
    private enum ScopeField: Decodable {
        case list(String)
        case array([String])
        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if let list = try? container.decode(String.self) { self = .list(list) } else {
                self = .array(try container.decode([String].self))
            }
        }

        func scopes() throws -> Set<Scope> {
            switch self {
            case .list(let list): try Scope.parseList(list)
            // Each element is one scope: a space (or a comma) inside one is refused as the
            // scope's own character error, never split into two.
            case .array(let items): Set(try items.map { item in
                guard !item.contains(",") else {
                    throw KeysmithError(.invalidScope, "a scope in the response's scope array holds a comma; each scope must be its own element")
                }
                return try Scope(item)
            })
            }
        }
    }

    /// `expires_in` arrives as a number, or (from some servers) as a numeric string.
    private enum Flexible: Decodable {
        case number(Double)
        case text(String)
        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if let number = try? container.decode(Double.self) { self = .number(number) } else {
                self = .text(try container.decode(String.self))
            }
        }
    }

    /// Parses a token response.
    ///
    /// - Throws: `KeysmithError.Code.malformedData` naming what is wrong (never quoting the
    ///   token); `KeysmithError.Code.invalidScope` for a bad scope.
    package static func parse(_ data: Data) throws -> TokenResponse {
        // RFC 8259 §8.1: JSON between systems is UTF-8 (Foundation would also take UTF-16 and
        // UTF-32); and a name twice is read differently by different parsers (the first value
        // here, the last elsewhere), so it is refused rather than guessed.
        guard String(validating: data, as: UTF8.self) != nil, !data.contains(0) else {
            throw KeysmithError(.malformedData, "the token response is not UTF-8 text (RFC 8259 §8.1 requires JSON in UTF-8)")
        }
        // The answer may have spent the refresh token it replaces: what is not needed is read
        // leniently (an extra field that cannot be kept is dropped), what is needed strictly.
        guard let read = CompactJSON.lenientMembers(of: Array(data), limit: maximumAdditionalFieldBytes, unlimited: standardFields) else {
            throw KeysmithError(.malformedData, "the token response is not a JSON object as RFC 8259 writes it (a trailing comma, "
                                + "or nesting deeper than \(CompactJSON.maximumDepth) levels)")
        }
        // A field RFC 6749 defines, named twice with different values, is ambiguous (parsers
        // disagree on which value counts): refused. Named twice with the same value, it is one.
        for name in standardFields {
            // Compared byte for byte (Swift's String equality would take two spellings of one
            // character for one value).
            let values = Set(read.members.filter { $0.name == name }.map { Array($0.text.utf8) })
            if values.isEmpty, read.dropped.contains(name) {
                throw KeysmithError(.malformedData, "the token response's field \(name) is not text Keysmith can keep (a lone surrogate "
                                    + "escape or bytes that are not UTF-8)")
            }
            if values.count > 1 || (values.count == 1 && read.dropped.contains(name)) {
                throw KeysmithError(.malformedData, "the token response names the field \(name) twice in one object with different values; "
                                    + "parsers disagree on which value counts, so it is refused")
            }
        }
        let wire: Wire
        do {
            wire = try JSONDecoder().decode(Wire.self, from: data)
        } catch let DecodingError.typeMismatch(_, context) where context.codingPath.first?.stringValue == "scope" {
            throw KeysmithError(.malformedData, "the token response's scope is neither a string nor an array of strings")
        } catch {
            throw KeysmithError(.malformedData, "the token response is not a JSON object with the RFC 6749 fields (access_token, token_type, …)")
        }
        guard let accessToken = wire.access_token, !accessToken.isEmpty else {
            throw KeysmithError(.malformedData, "the token response has no access_token")
        }
        guard let tokenType = wire.token_type, !tokenType.isEmpty else {
            throw KeysmithError(.malformedData, "the token response has no token_type (RFC 6749 §5.1 requires it)")
        }
        var expiresIn: Int?
        switch wire.expires_in {
        case .none: expiresIn = nil
        case .number(let value):
            guard value.isFinite, value == value.rounded(), value < 1e15 else {
                throw KeysmithError(.malformedData, "the token response's expires_in is not a whole number of seconds")
            }
            expiresIn = Int(value)
        case .text(let text):
            guard let value = Int(text) else {
                throw KeysmithError(.malformedData, "the token response's expires_in is not a number")
            }
            expiresIn = value
        }
        if let expiresIn, expiresIn < 0 {
            throw KeysmithError(.malformedData, "the token response's expires_in is negative (\(expiresIn))")
        }
        if let expiresIn, expiresIn > Self.maximumExpiresIn {
            throw KeysmithError(
                .malformedData, "the token response's expires_in (\(expiresIn) s) is more than 100 years; no token lives that long")
        }
        let scope = try wire.scope.map { try $0.scopes() }
        let extra = additionalFields(read)
        return TokenResponse(accessToken: accessToken, tokenType: tokenType, expiresIn: expiresIn,
                             refreshToken: wire.refresh_token, scope: scope, additionalFields: extra.kept, droppedFields: extra.dropped)
    }

    /// The first name that appears twice in one object of `bytes` (which need not be valid JSON:
    /// the decoder judges that), names compared after their escapes are decoded.
    static func duplicateName(in bytes: [UInt8]) -> String? {
        // One entry per open bracket: the names seen so far for an object, nil for an array.
        var stack: [Set<String>?] = []
        var expectingName = false
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "{"):
                stack.append([])
                expectingName = true
            case UInt8(ascii: "["):
                stack.append(nil)
                expectingName = false
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                if !stack.isEmpty { stack.removeLast() }
                expectingName = false
            case UInt8(ascii: ","):
                expectingName = stack.last.map { $0 != nil } ?? false
            case UInt8(ascii: "\""):
                let start = index
                index += 1
                while index < bytes.count, bytes[index] != UInt8(ascii: "\"") {
                    index += bytes[index] == UInt8(ascii: "\\") ? 2 : 1
                }
                if expectingName, index < bytes.count, case .some(.some(var names)) = stack.last {
                    let name = CompactJSON.string(literal: bytes[start...index])
                        ?? String(decoding: bytes[(start + 1)..<index], as: UTF8.self)
                    if names.contains(name) { return name }
                    names.insert(name)
                    stack[stack.count - 1] = names
                }
                expectingName = false
            default:
                break
            }
            index += 1
        }
        return nil
    }

    /// Every field beyond RFC 6749's, its value re-encoded as compact JSON (``CompactJSON``:
    /// members sorted by the bytes of their names, numbers as written), and the names of those
    /// dropped: a value over 64 KiB or holding a lone surrogate escape, a name given twice (or
    /// twice inside its value), empty or over 256 bytes, and every field after the 64th kept.
    private static func additionalFields(_ read: (members: [(name: String, text: String)], dropped: [String]))
        -> (kept: [String: String], dropped: [String])
    {
        var dropped = Set(read.dropped.filter { !standardFields.contains($0) })
        var counts: [String: Int] = [:]
        for member in read.members { counts[member.name, default: 0] += 1 }
        var fields: [String: String] = [:]
        for (name, text) in read.members where !standardFields.contains(name) {
            if dropped.contains(name) || counts[name, default: 0] > 1 || name.isEmpty || name.utf8.count > 256
                || duplicateName(in: Array(text.utf8)) != nil || fields.count >= maximumAdditionalFields
            {
                dropped.insert(name)
                continue
            }
            fields[name] = text
        }
        return (fields, dropped.sorted())
    }
}

/// A token as RFC 7662 (OAuth 2.0 Token Introspection) reports it.
///
/// Encodes with RFC 7662's field names: `active`, `scope`, `client_id`, `username`,
/// `token_type`, `exp`, `iat`, `nbf`, `sub`, `aud`, `iss`. An inactive token encodes as
/// `{"active": false}` only, as §2.2 recommends.
public struct TokenIntrospection: Sendable, Hashable, Codable {
    /// Whether the token is active.
    public var active: Bool
    /// The granted scopes, space-delimited.
    public var scope: String?
    /// The client.
    public var clientID: String?
    /// A human-readable identifier of the user (the subject here).
    public var username: String?
    /// The token type.
    public var tokenType: String?
    /// Expiry, seconds since 1970.
    public var exp: Int?
    /// Issue time, seconds since 1970.
    public var iat: Int?
    /// Not before, seconds since 1970 (the issue time).
    public var nbf: Int?
    /// The subject.
    public var sub: String?
    /// The audience.
    public var aud: [String]?
    /// The issuer.
    public var iss: String?

    enum CodingKeys: String, CodingKey {
        case active, scope, username, exp, iat, nbf, sub, aud, iss
        case clientID = "client_id"
        case tokenType = "token_type"
    }
}

extension OAuthToken {
    /// The token as RFC 7662 introspection reports it at `date`.
    public func introspection(at date: Date) -> TokenIntrospection {
        guard isActive(at: date) else { return TokenIntrospection(active: false) }
        return TokenIntrospection(
            active: true, scope: Scope.formatList(grantedScopes(at: date)), clientID: clientID, username: subject,
            tokenType: tokenType, exp: expiresAt.map { Self.seconds($0) },
            iat: Self.seconds(issuedAt), nbf: Self.seconds(issuedAt), sub: subject,
            aud: audience.isEmpty ? nil : audience, iss: issuer)
    }
}

extension OAuthToken {
    /// Whole seconds since 1970, clamped to what an `Int` holds: a date stored by an older
    /// Keysmith (before responses were bounded) can never trap a conversion.
    static func seconds(_ date: Date) -> Int {
        let value = date.timeIntervalSince1970.rounded(.down)
        guard value.isFinite else { return value > 0 ? Int.max : Int.min }
        if value >= 9.2e18 { return Int.max }
        if value <= -9.2e18 { return Int.min }
        return Int(value)
    }
}
