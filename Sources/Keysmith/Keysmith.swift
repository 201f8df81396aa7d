public import FoundationEssentials
internal import Synchronization

/// The one-line API for the simple case, and the process-wide default store.
///
/// In the spirit of Locksmith's `saveData` / `loadDataForUserAccount` / `updateData` /
/// `deleteDataForUserAccount`, named after what they do, as KeychainAccess and keyring-rs name
/// theirs. Every call takes an optional store; without one it uses ``defaultStore``.
///
/// | call | the item exists | it does not |
/// |---|---|---|
/// | ``set(_:forAccount:inService:in:)-(Data,_,_,_)`` | replaces the secret, keeps the metadata | creates it |
/// | ``create(_:forAccount:inService:in:)`` | throws ``KeysmithError/Code/duplicateItem`` | creates it |
/// | ``update(_:forAccount:inService:in:)`` | replaces the secret, keeps the metadata | throws ``KeysmithError/Code/itemNotFound`` |
/// | ``load(forAccount:inService:from:)`` | returns the secret | returns `nil` |
/// | ``delete(forAccount:inService:from:)`` | deletes it | throws ``KeysmithError/Code/itemNotFound`` |
///
/// ```swift
/// try Keysmith.set(Data("s3cret".utf8), forAccount: "bob", inService: "mail")
/// let secret = try Keysmith.load(forAccount: "bob", inService: "mail")   // Data?
/// try Keysmith.update(Data("n3w".utf8), forAccount: "bob", inService: "mail")
/// try Keysmith.delete(forAccount: "bob", inService: "mail")
/// ```
public enum Keysmith {
    private enum DefaultStore {
        case none
        case provider(@Sendable () throws -> any SecureStore)
        case store(any SecureStore)
    }

    private static let defaultStoreState = Mutex<DefaultStore>(.none)

    /// The store that item types and the static API use when given none.
    ///
    /// Configure it once at start-up with ``setDefaultStore(_:)`` or, to open it lazily on
    /// first use, ``setDefaultStoreProvider(_:)``. The `KeysmithVault` module's
    /// `FileVault.bootstrapDefault()` installs the file vault at `$KEYSMITH_VAULT`, else
    /// `$XDG_DATA_HOME/keysmith`, else `~/.local/share/keysmith`.
    ///
    /// - Throws: ``KeysmithError/Code/storeUnavailable`` when no default store is configured,
    ///   or whatever the provider throws when it opens the store.
    public static var defaultStore: any SecureStore {
        get throws {
            try defaultStoreState.withLock { state in
                switch state {
                case .store(let store):
                    return store
                case .provider(let provider):
                    let store = try provider()
                    state = .store(store)
                    return store
                case .none:
                    throw KeysmithError(
                        .storeUnavailable,
                        "no default store is configured; call Keysmith.setDefaultStore(_:) or "
                            + "FileVault.bootstrapDefault() at start-up, or pass a store explicitly")
                }
            }
        }
    }

    /// Sets the process-wide default store.
    ///
    /// - Parameter store: The store to use from now on.
    public static func setDefaultStore(_ store: any SecureStore) {
        defaultStoreState.withLock { $0 = .store(store) }
    }

    /// Sets a function that opens the default store on first use.
    ///
    /// The provider runs at most once successfully; if it throws, the error reaches the caller
    /// and the next use tries again.
    ///
    /// - Parameter provider: Opens the store.
    public static func setDefaultStoreProvider(_ provider: @escaping @Sendable () throws -> any SecureStore) {
        defaultStoreState.withLock { $0 = .provider(provider) }
    }

    /// Forgets the default store, so that ``defaultStore`` throws until one is configured again.
    public static func resetDefaultStore() {
        defaultStoreState.withLock { $0 = .none }
    }

    private static func resolve(_ store: (any SecureStore)?) throws -> any SecureStore {
        if let store { return store }
        return try defaultStore
    }

    private static func key(_ account: String, _ service: String) -> ItemKey {
        .genericPassword(service: service, account: account)
    }

    /// Stores a new secret for an account of a service, only if there is none.
    ///
    /// - Parameters:
    ///   - secret: The secret.
    ///   - account: The account.
    ///   - service: The service.
    ///   - store: The store; ``defaultStore`` if `nil`.
    /// - Throws: ``KeysmithError/Code/duplicateItem`` if one exists; a store failure.
    public static func create(
        _ secret: Data, forAccount account: String, inService service: String, in store: (any SecureStore)? = nil
    ) throws {
        try resolve(store).create(ItemAttributes(key: key(account, service)), secret: secret)
    }

    /// Stores any `Encodable` value, as JSON, for an account of a service, creating or replacing it.
    ///
    /// - Parameters:
    ///   - value: The value.
    ///   - account: The account.
    ///   - service: The service.
    ///   - store: The store; ``defaultStore`` if `nil`.
    /// - Throws: ``KeysmithError/Code/invalidArgument`` if the value cannot be encoded; a store failure.
    public static func set<Value: Encodable>(
        _ value: Value, forAccount account: String, inService service: String, in store: (any SecureStore)? = nil
    ) throws {
        try set(SecretCoding.encode(value), forAccount: account, inService: service, in: store)
    }

    /// Creates the secret for an account of a service, or replaces it keeping the item's metadata.
    ///
    /// - Parameters:
    ///   - secret: The secret.
    ///   - account: The account.
    ///   - service: The service.
    ///   - store: The store; ``defaultStore`` if `nil`.
    /// - Throws: A store failure.
    public static func set(
        _ secret: Data, forAccount account: String, inService service: String, in store: (any SecureStore)? = nil
    ) throws {
        try resolve(store).upsert(ItemAttributes(key: key(account, service)), secret: secret)
    }

    /// Stores any `Encodable` value, as JSON: Keysmith 0.1's name for
    /// ``set(_:forAccount:inService:in:)-(Value,_,_,_)``, which it forwards to. Removed without a
    /// deprecation in 0.2.0 and restored, deprecated, in 0.4.0; it will be removed in 0.5.0.
    ///
    /// ```swift
    /// try Keysmith.set(Settings(theme: "dark"), forAccount: "bob", inService: "app")  // instead of save
    /// ```
    @available(*, deprecated, renamed: "set(_:forAccount:inService:in:)")
    public static func save<Value: Encodable>(
        _ value: Value, forAccount account: String, inService service: String, in store: (any SecureStore)? = nil
    ) throws {
        try set(value, forAccount: account, inService: service, in: store)
    }

    /// Locksmith's name, kept so code written for Locksmith builds: it creates or replaces
    /// (it is ``set(_:forAccount:inService:in:)-(Data,_,_,_)``), which the name did not make clear. Use
    /// ``set(_:forAccount:inService:in:)-(Data,_,_,_)`` to create or replace, or
    /// ``create(_:forAccount:inService:in:)`` to create only.
    @available(*, deprecated, message: "use set(_:forAccount:inService:in:) to create or replace, or create(_:forAccount:inService:in:) to create only")
    public static func save(
        _ secret: Data, forAccount account: String, inService service: String, in store: (any SecureStore)? = nil
    ) throws {
        try set(secret, forAccount: account, inService: service, in: store)
    }

    /// Reads the secret for an account of a service.
    ///
    /// - Parameters:
    ///   - account: The account.
    ///   - service: The service.
    ///   - store: The store; ``defaultStore`` if `nil`.
    /// - Returns: The secret, or `nil` if there is none.
    /// - Throws: A store failure; never "not found".
    public static func load(
        forAccount account: String, inService service: String, from store: (any SecureStore)? = nil
    ) throws -> Data? {
        try resolve(store).read(key(account, service))?.secret
    }

    /// Reads a value stored as JSON for an account of a service.
    ///
    /// - Parameters:
    ///   - type: The value's type.
    ///   - account: The account.
    ///   - service: The service.
    ///   - store: The store; ``defaultStore`` if `nil`.
    /// - Returns: The value, or `nil` if there is none.
    /// - Throws: ``KeysmithError/Code/invalidArgument`` if the secret is not a JSON `type`; a
    ///   store failure.
    public static func load<Value: Decodable>(
        _ type: Value.Type, forAccount account: String, inService service: String,
        from store: (any SecureStore)? = nil
    ) throws -> Value? {
        let key = key(account, service)
        guard let record = try resolve(store).read(key) else { return nil }
        return try SecretCoding.decode(type, from: record.secret, key: key)
    }

    /// Replaces the secret for an account of a service, keeping the item's metadata.
    ///
    /// - Parameters:
    ///   - secret: The new secret.
    ///   - account: The account.
    ///   - service: The service.
    ///   - store: The store; ``defaultStore`` if `nil`.
    /// - Throws: ``KeysmithError/Code/itemNotFound`` if there is none; a store failure.
    public static func update(
        _ secret: Data, forAccount account: String, inService service: String, in store: (any SecureStore)? = nil
    ) throws {
        try resolve(store).update(ItemAttributes(key: key(account, service)), secret: secret)
    }

    /// Deletes the secret for an account of a service.
    ///
    /// - Parameters:
    ///   - account: The account.
    ///   - service: The service.
    ///   - store: The store; ``defaultStore`` if `nil`.
    /// - Throws: ``KeysmithError/Code/itemNotFound`` if there is none; a store failure.
    public static func delete(
        forAccount account: String, inService service: String, from store: (any SecureStore)? = nil
    ) throws {
        try resolve(store).delete(key(account, service))
    }
}
