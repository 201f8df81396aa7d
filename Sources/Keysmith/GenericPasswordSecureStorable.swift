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
    /// The service, such as a host name or an application name. Case-sensitive.
    var service: String { get }
    /// Application data stored with the item; `nil` by default.
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
/// ```swift
/// struct Router: InternetPasswordSecureStorable, CreateableSecureStorable {
///     let server = "192.168.1.1"
///     let port = 443
///     let internetProtocol = InternetProtocol.https
///     let authenticationType = InternetAuthenticationType.httpBasic
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
    /// How the password authenticates; ``InternetAuthenticationType/default`` by default.
    var authenticationType: InternetAuthenticationType { get }
    /// The security domain; `nil` by default.
    var securityDomain: String? { get }
    /// The path on the server; `nil` by default.
    var path: String? { get }
}

extension InternetPasswordSecureStorable {
    /// The protocol's default authentication.
    public var authenticationType: InternetAuthenticationType { .default }
    /// No security domain.
    public var securityDomain: String? { nil }
    /// No path.
    public var path: String? { nil }

    /// The internet identity, with the metadata of the attribute protocols the type adopts.
    public var secureStoreAttributes: ItemAttributes {
        let key = InternetPasswordKey(
            server: server, port: port, internetProtocol: internetProtocol,
            authenticationType: authenticationType, securityDomain: securityDomain ?? "",
            path: path ?? "", account: account)
        return makeSecureStoreAttributes(key: .internetPassword(key))
    }
}
