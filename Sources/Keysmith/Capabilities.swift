public import FoundationEssentials

/// The capability to be created in and updated in a store.
///
/// A type that adopts it provides its ``secret``; creating and updating come from this
/// protocol's extension.
public protocol CreateableSecureStorable: SecureStorable {
    /// The secret to store. May throw (when it is encoded from a value, for instance).
    var secret: Data { get throws }
}

extension CreateableSecureStorable {
    /// Stores the item as a new item (only if none with its identity exists).
    ///
    /// - Throws: ``KeysmithError/Code/duplicateItem`` if an item with the same identity exists;
    ///   ``KeysmithError/Code/invalidArgument`` for an empty account or service, or a property
    ///   that looks like an attribute but would be ignored (``SecureStorable/checkDeclaredAttributes()``);
    ///   a store failure.
    public func createInSecureStore() throws {
        try checkDeclaredAttributes()
        try secureStore.create(secureStoreAttributes, secret: secret)
    }

    /// Replaces the stored item's secret, and the metadata of the attribute protocols this type
    /// adopts; metadata it does not declare are kept (the update rule, ``ItemAttributes``).
    ///
    /// - Throws: ``KeysmithError/Code/itemNotFound`` if no item with the same identity exists;
    ///   a store failure.
    public func updateInSecureStore() throws {
        try checkDeclaredAttributes()
        try secureStore.update(secureStoreAttributes, secret: secret)
    }

    /// Creates the item, or replaces it if one with the same identity exists, keeping the
    /// metadata this type does not declare.
    ///
    /// - Throws: A store failure.
    public func saveInSecureStore() throws {
        try checkDeclaredAttributes()
        try secureStore.upsert(secureStoreAttributes, secret: secret)
    }
}

/// A ``CreateableSecureStorable`` whose secret is any `Codable` value, stored as JSON.
///
/// ```swift
/// struct Credentials: Codable, Sendable { var user: String; var password: String }
/// struct Login: GenericPasswordSecureStorable, CodableSecureStorable, ReadableSecureStorable {
///     let service = "db"; let account = "app"
///     var value: Credentials
/// }
/// try Login(value: Credentials(user: "app", password: "pw")).createInSecureStore()
/// let stored = try Login(value: …).readFromSecureStore()?.decode(Credentials.self)
/// ```
public protocol CodableSecureStorable: CreateableSecureStorable {
    /// The type of the stored value.
    associatedtype Value: Codable & Sendable
    /// The value to store as the secret.
    var value: Value { get }
}

extension CodableSecureStorable {
    /// ``value`` encoded as JSON.
    public var secret: Data {
        get throws { try SecretCoding.encode(value) }
    }
}

/// The capability to be read from a store.
public protocol ReadableSecureStorable: SecureStorable {}

extension ReadableSecureStorable {
    /// Reads the stored item with this item's identity.
    ///
    /// The result's type is fixed by the item kind, also in generic code:
    /// `func f<T: ReadableSecureStorable>(_ t: T) throws -> T.Result?` returns a
    /// ``GenericPasswordResult`` for a generic password type.
    ///
    /// - Returns: The typed result, or `nil` when the store holds no such item.
    /// - Throws: A store failure; never "not found".
    public func readFromSecureStore() throws -> Result? {
        try checkDeclaredAttributes()
        guard let record = try secureStore.read(secureStoreKey) else { return nil }
        return try Result(record: record)
    }
}

/// The capability to be deleted from a store.
public protocol DeleteableSecureStorable: SecureStorable {}

extension DeleteableSecureStorable {
    /// Deletes the stored item with this item's identity.
    ///
    /// - Throws: ``KeysmithError/Code/itemNotFound`` if there is none; a store failure.
    public func deleteFromSecureStore() throws {
        try checkDeclaredAttributes()
        try secureStore.delete(secureStoreKey)
    }
}

/// JSON coding of secret values, in one place so every API encodes the same way.
enum SecretCoding {
    static func encode<Value: Encodable>(_ value: Value) throws -> Data {
        do {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            return try encoder.encode(value)
        } catch {
            throw KeysmithError.invalidArgument("the value of type \(Value.self) cannot be encoded as JSON")
        }
    }

    static func decode<Value: Decodable>(_ type: Value.Type, from data: Data, key: ItemKey) throws -> Value {
        do {
            return try JSONDecoder().decode(type, from: data)
        } catch {
            throw KeysmithError.invalidArgument("the secret of \(key) is not a JSON \(Value.self)")
        }
    }
}
