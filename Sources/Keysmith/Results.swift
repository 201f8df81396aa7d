public import FoundationEssentials

/// What a read returns: a typed view of a stored record.
///
/// Each item kind has its result type; ``ReadableSecureStorable/readFromSecureStore()`` builds
/// it from the store's ``SecureRecord``.
public protocol SecureStorableResult: Sendable {
    /// Builds the result from a stored record.
    ///
    /// - Parameter record: The record a store returned.
    /// - Throws: ``KeysmithError/Code/corruptData`` if the record is of another kind.
    init(record: SecureRecord) throws

    /// The stored attributes, identity included.
    var attributes: ItemAttributes { get }

    /// The stored secret.
    var secret: Data { get }
}

extension SecureStorableResult {
    /// Decodes the secret as a JSON value (stored by ``CodableSecureStorable`` or by
    /// `Keysmith.set(_:forAccount:inService:in:)` given an `Encodable` value).
    ///
    /// - Parameter type: The value's type.
    /// - Returns: The decoded value.
    /// - Throws: ``KeysmithError/Code/invalidArgument`` if the secret is not a JSON `type`; the
    ///   message never quotes the secret.
    public func decode<Value: Decodable>(_ type: Value.Type) throws -> Value {
        try SecretCoding.decode(type, from: secret, key: attributes.key)
    }
}

/// The result of reading a generic password: every attribute, the secret and the dates.
///
/// `description` never shows the secret.
public struct GenericPasswordResult: SecureStorableResult, Hashable, CustomStringConvertible,
    CustomDebugStringConvertible, CustomReflectable
{
    /// All stored attributes.
    public let attributes: ItemAttributes
    /// The secret.
    public let secret: Data
    /// The attributes, dates and version as the store returned them.
    public let info: ItemInfo
    /// When the item was first stored.
    public var created: Date { info.created }
    /// When it last changed.
    public var modified: Date { info.modified }

    /// Builds the result from a stored generic password.
    ///
    /// - Throws: ``KeysmithError/Code/corruptData`` if the record is not a generic password.
    public init(record: SecureRecord) throws {
        guard case .genericPassword = record.key else {
            throw KeysmithError(.corruptData, "expected a generic password, found \(record.key)")
        }
        attributes = record.attributes
        secret = record.secret
        info = record.info
    }

    /// The service.
    public var service: String { attributes.key.service ?? "" }
    /// The account.
    public var account: String { attributes.key.account }
    /// The application data, if any.
    public var generic: Data? { attributes.generic }
    /// The label, if any.
    public var label: String? { attributes.label }
    /// The comment, if any.
    public var comment: String? { attributes.comment }
    /// The description of the kind of item, if any.
    public var itemDescription: String? { attributes.itemDescription }
    /// The creating program, if recorded.
    public var creator: String? { attributes.creator }
    /// The application-defined type, if any.
    public var type: String? { attributes.type }
    /// Whether tools should hide the item.
    public var isInvisible: Bool { attributes.isInvisible ?? false }
    /// Whether the item is a negative entry.
    public var isNegative: Bool { attributes.isNegative ?? false }
    /// The store's version of the item, for a conditional write.
    public var version: ItemVersion { info.version }

    /// The identity and the secret's size, never the secret.
    public var description: String { "\(attributes.key) (secret: \(secret.count) bytes, redacted)" }
    /// The same as ``description``.
    public var debugDescription: String { description }
    /// What `dump` shows: metadata and dates, the secret as `<redacted>`.
    public var customMirror: Mirror { redactedMirror(info: info, secretSize: secret.count) }
}

/// The result of reading an internet password: every attribute, the secret and the dates.
///
/// `description` never shows the secret.
public struct InternetPasswordResult: SecureStorableResult, Hashable, CustomStringConvertible,
    CustomDebugStringConvertible, CustomReflectable
{
    /// All stored attributes.
    public let attributes: ItemAttributes
    /// The internet identity.
    public let internetKey: InternetPasswordKey
    /// The secret.
    public let secret: Data
    /// The attributes, dates and version as the store returned them.
    public let info: ItemInfo
    /// When the item was first stored.
    public var created: Date { info.created }
    /// When it last changed.
    public var modified: Date { info.modified }

    /// Builds the result from a stored internet password.
    ///
    /// - Throws: ``KeysmithError/Code/corruptData`` if the record is not an internet password.
    public init(record: SecureRecord) throws {
        guard case .internetPassword(let key) = record.key else {
            throw KeysmithError(.corruptData, "expected an internet password, found \(record.key)")
        }
        attributes = record.attributes
        internetKey = key
        secret = record.secret
        info = record.info
    }

    /// The server.
    public var server: String { internetKey.server }
    /// The port; `0` when unspecified.
    public var port: Int { internetKey.port }
    /// The protocol.
    public var internetProtocol: InternetProtocol { internetKey.internetProtocol }
    /// The authentication type.
    public var authenticationType: InternetAuthenticationType { internetKey.authenticationType }
    /// The security domain; `nil` when none.
    public var securityDomain: String? { internetKey.securityDomain.isEmpty ? nil : internetKey.securityDomain }
    /// The path; `nil` when none.
    public var path: String? { internetKey.path.isEmpty ? nil : internetKey.path }
    /// The account.
    public var account: String { internetKey.account }
    /// The label, if any.
    public var label: String? { attributes.label }
    /// The comment, if any.
    public var comment: String? { attributes.comment }
    /// The description of the kind of item, if any.
    public var itemDescription: String? { attributes.itemDescription }
    /// The creating program, if recorded.
    public var creator: String? { attributes.creator }
    /// The application-defined type, if any.
    public var type: String? { attributes.type }
    /// Whether tools should hide the item.
    public var isInvisible: Bool { attributes.isInvisible ?? false }
    /// Whether the item is a negative entry.
    public var isNegative: Bool { attributes.isNegative ?? false }
    /// The store's version of the item, for a conditional write.
    public var version: ItemVersion { info.version }

    /// The identity and the secret's size, never the secret.
    public var description: String { "\(attributes.key) (secret: \(secret.count) bytes, redacted)" }
    /// The same as ``description``.
    public var debugDescription: String { description }
    /// What `dump` shows: metadata and dates, the secret as `<redacted>`.
    public var customMirror: Mirror { redactedMirror(info: info, secretSize: secret.count) }
}
