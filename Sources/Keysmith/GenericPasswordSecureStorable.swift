public import FoundationEssentials

/// An item kind: a secret for a service and an account, like a keychain's generic password.
///
/// Reads of such a type return ``GenericPasswordResult``, also through generic code.
///
/// ```swift
/// struct APIKey: GenericPasswordSecureStorable, ReadableSecureStorable {
///     let service = "api.example.com"
///     let account = "deploy-bot"
/// }
/// let result = try APIKey().readFromSecureStore()   // GenericPasswordResult?
/// ```
public protocol GenericPasswordSecureStorable: AccountBasedSecureStorable
where Result == GenericPasswordResult {
    /// The service, such as a host name or an application name. Compared by its bytes.
    var service: String { get }
    /// Application data stored with the item; `nil` by default. Declare it as `Data?`: a
    /// `generic` property of another type is reported at first use (see ``SecureStorable``).
    var generic: Data? { get }
}

extension GenericPasswordSecureStorable {
    /// No application data.
    public var generic: Data? { nil }

    /// The service and account, with the metadata of the attribute protocols the type adopts.
    public var secureStoreAttributes: ItemAttributes {
        makeSecureStoreAttributes(key: .genericPassword(service: service, account: account), generic: generic)
    }
}

/// An item kind: a secret for an account on an internet server, like a keychain's internet
/// password.
///
/// Reads of such a type return ``InternetPasswordResult``, also through generic code.
///
/// Every part of the identity is required, with its exact type: a property of the wrong type
/// (`let securityDomain = "realm"`, a `String` where `String?` is required, or
/// `let authenticationType = "http-basic"`) or a misspelled name (`secDomain`) is a compile
/// error, never an item silently stored under a default identity. Declare `nil` for "none".
///
/// ```swift
/// struct Router: InternetPasswordSecureStorable, CreateableSecureStorable {
///     let server = "192.168.1.1"
///     let port = 443
///     let internetProtocol = InternetProtocol.https
///     let authenticationType = InternetAuthenticationType.httpBasic
///     let securityDomain: String? = "admin area"
///     let path: String? = nil
///     let account = "admin"
///     let secret: Data
/// }
/// ```
public protocol InternetPasswordSecureStorable: AccountBasedSecureStorable
where Result == InternetPasswordResult {
    /// The server's host name or address.
    var server: String { get }
    /// The port; `0` when unspecified.
    var port: Int { get }
    /// The protocol.
    var internetProtocol: InternetProtocol { get }
    /// How the password authenticates (``InternetAuthenticationType/default`` for the protocol's usual one).
    var authenticationType: InternetAuthenticationType { get }
    /// The security domain (an HTTP realm, for instance); `nil` for none.
    var securityDomain: String? { get }
    /// The path on the server; `nil` for none.
    var path: String? { get }
}

extension InternetPasswordSecureStorable {
    /// The internet identity, with the metadata of the attribute protocols the type adopts.
    public var secureStoreAttributes: ItemAttributes {
        let key = InternetPasswordKey(
            server: server, port: port, internetProtocol: internetProtocol,
            authenticationType: authenticationType, securityDomain: securityDomain ?? "",
            path: path ?? "", account: account)
        return makeSecureStoreAttributes(key: .internetPassword(key))
    }
}
