public import Keysmith

/// A token as an item in a store: a generic password whose secret is the token (in its stored form) and
/// whose type is `oauth-token`. It composes the same capability protocols as any item, so it
/// lives in any store: the file vault, the Secret Service, memory.
///
/// ```swift
/// let item = StoredToken(store: vault, service: "github", account: "ci", token: token)
/// try item.createInSecureStore()
/// let read = try item.readFromSecureStore().map { try OAuthToken(storedSecret: $0.secret) }
/// ```
///
/// ``TokenKeeper`` is the usual way in: it also keeps the audit log.
public struct StoredToken: GenericPasswordSecureStorable, CreateableSecureStorable, ReadableSecureStorable,
    DeleteableSecureStorable, TypeDesignatableSecureStorable, LabellableSecureStorable
{
    /// The type name tokens are stored under.
    public static let itemType = "oauth-token"

    /// The store the token lives in.
    public let store: any SecureStore
    /// The store the token lives in.
    public var secureStore: any SecureStore { store }
    /// The service the token is for, such as `github`.
    public let service: String
    /// The account the token is for.
    public let account: String
    /// The token.
    public var token: OAuthToken

    /// Creates the item view of a token.
    public init(store: any SecureStore, service: String, account: String, token: OAuthToken) {
        self.store = store
        self.service = service
        self.account = account
        self.token = token
    }

    /// The token in its stored form (see ``OAuthToken/init(storedSecret:)``).
    public var secret: Data { Data(TokenCodec.encode(token)) }

    /// `oauth-token`.
    public var type: String { Self.itemType }

    /// `OAuth token: ACCOUNT at SERVICE`.
    public var label: String { "OAuth token: \(account) at \(service)" }
}

/// JSON coding of the audit log, in one place.
enum TokenCoding {
    static func encode<T: Encodable>(_ value: T) throws -> Data {
        let encoder = JSONEncoder()
        // The same coding as the core's Codable secrets, so `result.decode(OAuthToken.self)`
        // reads a stored token back.
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
