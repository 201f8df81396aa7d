public import FoundationEssentials
public import Keysmith

/// A token as a record in a store: one of Keysmith's own records (`KeysmithRecordType.oauthToken`),
/// in the reserved namespace, whose secret is the token in its stored form.
///
/// Ordinary secret operations (the static API, the capability protocols, `keysmith secret …`,
/// `batch`) name generic and internet passwords only, so they can neither read, list, overwrite
/// nor delete a token, not even one stored under the same service and account as a password.
///
/// ```swift
/// let stored = StoredToken(service: "github", account: "ci", token: token)
/// try store.create(stored.attributes, secret: stored.secret)
/// let back = try store.read(stored.key).map { try OAuthToken(storedSecret: $0.secret) }
/// ```
///
/// ``TokenKeeper`` is the usual way in: it also keeps the audit log and makes every change a
/// conditional write.
public struct StoredToken: Sendable {
    /// The service the token is for, such as `github`.
    public let service: String
    /// The account the token is for.
    public let account: String
    /// The token.
    public var token: OAuthToken

    /// Creates the record view of a token.
    ///
    /// - Parameters:
    ///   - service: The service the token is for.
    ///   - account: The account the token is for.
    ///   - token: The token.
    public init(service: String, account: String, token: OAuthToken) {
        self.service = service
        self.account = account
        self.token = token
    }

    /// Where a token for a service and account is stored.
    ///
    /// - Parameters:
    ///   - service: The service.
    ///   - account: The account.
    /// - Returns: Its key in the reserved namespace.
    public static func key(service: String, account: String) -> ItemKey {
        .keysmithRecord(KeysmithRecordKey(recordType: .oauthToken, service: service, account: account))
    }

    /// Where this token is stored.
    public var key: ItemKey { Self.key(service: service, account: account) }

    /// The record's attributes: its key and the label `OAuth token: ACCOUNT at SERVICE`.
    public var attributes: ItemAttributes {
        ItemAttributes(key: key, label: "OAuth token: \(account) at \(service)")
    }

    /// The token in its stored form (see ``OAuthToken/init(storedSecret:)``).
    public var secret: Data { Data(TokenCodec.encode(token)) }
}

/// JSON coding of the audit log, in one place.
enum TokenCoding {
    static func encode<T: Encodable>(_ value: T) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return try encoder.encode(value)
    }

    static func decode<T: Decodable>(_ type: T.Type, from data: Data, what: String) throws -> T {
        let decoder = JSONDecoder()
        do {
            return try decoder.decode(type, from: data)
        } catch {
            throw KeysmithError(.corruptData, "\(what) does not decode as a Keysmith token record")
        }
    }
}
