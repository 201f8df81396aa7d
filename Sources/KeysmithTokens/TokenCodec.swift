public import FoundationEssentials
import Keysmith

/// The stored form of a token: a compact binary encoding, tens of times faster than JSON, so
/// that bulk jobs over 100,000 tokens take seconds. Specified in docs/guide.md ("How tokens are
/// stored").
///
///     "KSTOKEN1" ‖ fields ‖ scope count (u32) ‖ scopes
///     "KSTOKEN2" ‖ fields ‖ scope count (u32) ‖ scopes ‖ additional field count (u32) ‖ (name ‖ JSON value)…
///
/// A token with no additional response fields is written in the first form (readers before
/// KSTOKEN2 read it), one with some in the second; both are read.
///
/// Strings are u32 length ‖ UTF-8; optional strings and dates carry a presence byte first;
/// dates are IEEE 754 binary64 seconds since 2001-01-01T00:00:00Z (Foundation's reference date,
/// so every `Date` round-trips exactly) as big-endian bit patterns; integers are
/// big-endian.
enum TokenCodec {
    static let magic = Array("KSTOKEN1".utf8)
    static let magic2 = Array("KSTOKEN2".utf8)

    static func encode(_ token: OAuthToken) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256 + token.scopes.count * 64)
        out += token.additionalFields.isEmpty ? magic : magic2
        func u32(_ value: Int) {
            let v = UInt32(truncatingIfNeeded: value)
            out += [UInt8(v >> 24), UInt8((v >> 16) & 0xFF), UInt8((v >> 8) & 0xFF), UInt8(v & 0xFF)]
        }
        func string(_ value: String) {
            let utf8 = value.utf8
            u32(utf8.count)
            out += utf8
        }
        func optional(_ value: String?) {
            if let value {
                out.append(1)
                string(value)
            } else {
                out.append(0)
            }
        }
        func date(_ value: Date) {
            let bits = value.timeIntervalSinceReferenceDate.bitPattern
            for shift in stride(from: 56, through: 0, by: -8) { out.append(UInt8((bits >> UInt64(shift)) & 0xFF)) }
        }
        func optionalDate(_ value: Date?) {
            if let value {
                out.append(1)
                date(value)
            } else {
                out.append(0)
            }
        }
        string(token.accessToken)
        optional(token.refreshToken)
        string(token.tokenType)
        optional(token.clientID)
        optional(token.subject)
        optional(token.issuer)
        u32(token.audience.count)
        for audience in token.audience { string(audience) }
        date(token.issuedAt)
        optionalDate(token.expiresAt)
        optionalDate(token.dataAccessExpiresAt)
        optionalDate(token.refreshedAt)
        optionalDate(token.revokedAt)
        u32(token.scopes.count)
        for (scope, status) in token.scopes.sorted(by: { $0.key < $1.key }) {
            string(scope.rawValue)
            out.append(stateByte(status.state))
            date(status.changedAt)
            string(status.reason)
        }
        if !token.additionalFields.isEmpty {
            u32(token.additionalFields.count)
            for (name, value) in token.additionalFields.sorted(by: { $0.key < $1.key }) {
                string(name)
                string(value)
            }
        }
        return out
    }

    static func decode(_ bytes: [UInt8], what: String) throws -> OAuthToken {
        var reader = Reader(bytes: bytes)
        do {
            let header = try reader.bytes(magic.count)
            let second = header == magic2[...]
            guard header == magic[...] || second else { throw Reader.Failure() }
            let accessToken = try reader.string()
            let refreshToken = try reader.optionalString()
            let tokenType = try reader.string()
            let clientID = try reader.optionalString()
            let subject = try reader.optionalString()
            let issuer = try reader.optionalString()
            let audienceCount = try reader.u32()
            var audience: [String] = []
            for _ in 0..<audienceCount { audience.append(try reader.string()) }
            var token = OAuthToken(
                accessToken: accessToken, refreshToken: refreshToken, tokenType: tokenType, clientID: clientID,
                subject: subject, issuer: issuer, audience: audience, issuedAt: try reader.date())
            token.expiresAt = try reader.optionalDate()
            token.dataAccessExpiresAt = try reader.optionalDate()
            token.refreshedAt = try reader.optionalDate()
            token.revokedAt = try reader.optionalDate()
            let scopeCount = try reader.u32()
            // A count is only a claim: reserve no more than the bytes left could hold (a scope
            // takes at least 18), so a damaged or hostile count cannot demand gigabytes.
            token.scopes.reserveCapacity(min(scopeCount, (bytes.count - reader.offset) / 18))
            for _ in 0..<scopeCount {
                let scope = try Scope(try reader.string())
                guard let state = state(try reader.byte()) else { throw Reader.Failure() }
                token.scopes[scope] = ScopeStatus(state: state, changedAt: try reader.date(), reason: try reader.string())
            }
            if second {
                let count = try reader.u32()
                guard count > 0 else { throw Reader.Failure() }
                for _ in 0..<count {
                    let name = try reader.string()
                    guard token.additionalFields[name] == nil else { throw Reader.Failure() }
                    token.additionalFields[name] = try reader.string()
                }
            }
            guard reader.offset == bytes.count else { throw Reader.Failure() }
            return token
        } catch {
            throw KeysmithError(.corruptData, "\(what) is not a Keysmith token record")
        }
    }

    private static func stateByte(_ state: ScopeState) -> UInt8 {
        switch state {
        case .granted: 1
        case .declined: 2
        case .expired: 3
        case .revoked: 4
        }
    }

    private static func state(_ byte: UInt8) -> ScopeState? {
        switch byte {
        case 1: .granted
        case 2: .declined
        case 3: .expired
        case 4: .revoked
        default: nil
        }
    }

    private struct Reader {
        struct Failure: Error {}
        let bytes: [UInt8]
        var offset = 0

        mutating func bytes(_ count: Int) throws -> ArraySlice<UInt8> {
            guard count >= 0, bytes.count - offset >= count else { throw Failure() }
            defer { offset += count }
            return bytes[offset..<offset + count]
        }
        mutating func byte() throws -> UInt8 { try bytes(1).first! }
        mutating func u32() throws -> Int {
            try bytes(4).reduce(0) { $0 << 8 | Int($1) }
        }
        mutating func string() throws -> String {
            let count = try u32()
            guard let text = String(validating: try bytes(count), as: UTF8.self) else { throw Failure() }
            return text
        }
        mutating func optionalString() throws -> String? {
            switch try byte() {
            case 0: return nil
            case 1: return try string()
            default: throw Failure()
            }
        }
        mutating func date() throws -> Date {
            let bits = try bytes(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            // Only finite times within ±10,000 years: NaN or infinity would trap later, in
            // arithmetic and in formatting.
            let seconds = Double(bitPattern: bits)
            guard seconds.isFinite, abs(seconds) < 316_000_000_000 else { throw Failure() }
            return Date(timeIntervalSinceReferenceDate: seconds)
        }
        mutating func optionalDate() throws -> Date? {
            switch try byte() {
            case 0: return nil
            case 1: return try date()
            default: throw Failure()
            }
        }
    }
}

extension OAuthToken {
    /// Decodes a token from the secret of a stored token item (`StoredToken`).
    ///
    /// - Parameter storedSecret: The secret of an item of type `oauth-token`.
    /// - Throws: `KeysmithError.Code.corruptData` if it is not a stored token.
    public init(storedSecret: Data) throws {
        self = try TokenCodec.decode(Array(storedSecret), what: "the secret")
    }
}
