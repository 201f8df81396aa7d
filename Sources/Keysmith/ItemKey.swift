/// The identity of a stored item: what makes two items the same item.
///
/// A store holds at most one item per key. Names are compared exactly: `"Bob"` and `"bob"` are
/// two different accounts, and Unicode strings are compared by their scalars as Swift compares
/// `String`s (canonically equivalent spellings are equal).
///
/// ```swift
/// let key = ItemKey.genericPassword(service: "mail", account: "bob@example.com")
/// let record = try store.read(key)
/// ```
public enum ItemKey: Hashable, Sendable, CustomStringConvertible {
    /// A generic password: one secret per service and account.
    case genericPassword(service: String, account: String)
    /// An internet password: one secret per server, port, protocol, authentication type,
    /// security domain, path and account.
    case internetPassword(InternetPasswordKey)

    /// The kind of item this key identifies.
    public var kind: ItemKind {
        switch self {
        case .genericPassword: .genericPassword
        case .internetPassword: .internetPassword
        }
    }

    /// The account, present in every kind of key.
    public var account: String {
        switch self {
        case .genericPassword(_, let account): account
        case .internetPassword(let key): key.account
        }
    }

    /// The service of a generic password, `nil` for other kinds.
    public var service: String? {
        if case .genericPassword(let service, _) = self { return service }
        return nil
    }

    /// A readable form for messages, such as `generic password (service "mail", account "bob")`.
    public var description: String {
        switch self {
        case .genericPassword(let service, let account):
            "generic password (service \(quoted(service)), account \(quoted(account)))"
        case .internetPassword(let key):
            "internet password (\(key))"
        }
    }

    /// Checks that the key's fields are well formed.
    ///
    /// - Throws: ``KeysmithError/Code/invalidArgument`` naming the bad field: an empty service,
    ///   account or server, a port outside 0...65535, or a name with a NUL character.
    public func validate() throws {
        switch self {
        case .genericPassword(let service, let account):
            try checkName(service, field: "service", allowEmpty: false)
            try checkName(account, field: "account", allowEmpty: false)
        case .internetPassword(let key):
            try checkName(key.server, field: "server", allowEmpty: false)
            try checkName(key.account, field: "account", allowEmpty: false)
            try checkName(key.securityDomain, field: "security domain", allowEmpty: true)
            try checkName(key.path, field: "path", allowEmpty: true)
            guard (0...65535).contains(key.port) else {
                throw KeysmithError.invalidArgument("port \(key.port) is outside 0...65535")
            }
        }
    }
}

/// The identity of an internet password.
///
/// An empty ``securityDomain`` or ``path`` means "none".
public struct InternetPasswordKey: Hashable, Sendable, CustomStringConvertible {
    /// The server's host name, such as `example.com`.
    public var server: String
    /// The port, `0` when unspecified.
    public var port: Int
    /// The protocol, such as ``InternetProtocol/https``.
    public var internetProtocol: InternetProtocol
    /// How the password authenticates.
    public var authenticationType: InternetAuthenticationType
    /// The security domain (an HTTP realm, for instance); empty for none.
    public var securityDomain: String
    /// The path on the server; empty for none.
    public var path: String
    /// The account on the server.
    public var account: String

    /// Creates an internet password identity.
    ///
    /// - Parameters:
    ///   - server: The server's host name.
    ///   - port: The port, `0` when unspecified.
    ///   - internetProtocol: The protocol.
    ///   - authenticationType: How the password authenticates; ``InternetAuthenticationType/default`` if omitted.
    ///   - securityDomain: The security domain; empty for none.
    ///   - path: The path on the server; empty for none.
    ///   - account: The account on the server.
    public init(
        server: String, port: Int = 0, internetProtocol: InternetProtocol,
        authenticationType: InternetAuthenticationType = .default,
        securityDomain: String = "", path: String = "", account: String
    ) {
        self.server = server
        self.port = port
        self.internetProtocol = internetProtocol
        self.authenticationType = authenticationType
        self.securityDomain = securityDomain
        self.path = path
        self.account = account
    }

    /// A readable form such as `https://example.com:443/path, account "bob"`.
    public var description: String {
        var text = "\(internetProtocol.rawValue)://\(server)"
        if port != 0 { text += ":\(port)" }
        if !path.isEmpty { text += path.hasPrefix("/") ? path : "/" + path }
        if !securityDomain.isEmpty { text += ", domain \(quoted(securityDomain))" }
        if authenticationType != .default { text += ", \(authenticationType.rawValue)" }
        return text + ", account \(quoted(account))"
    }
}

/// The kinds of item a store keeps.
public enum ItemKind: String, Sendable, Hashable, Codable, CaseIterable {
    /// A secret for a service and an account.
    case genericPassword = "generic-password"
    /// A secret for an account on an internet server.
    case internetPassword = "internet-password"
}

func quoted(_ text: String) -> String {
    "\"" + text.unicodeScalars.map { $0.value < 0x20 ? "\\u{\(String($0.value, radix: 16))}" : String($0) }.joined() + "\""
}

private func checkName(_ value: String, field: String, allowEmpty: Bool) throws {
    if !allowEmpty && value.isEmpty {
        throw KeysmithError.invalidArgument("the \(field) is empty; give a non-empty \(field)")
    }
    if value.utf8.contains(0) {
        throw KeysmithError.invalidArgument("the \(field) \(quoted(value)) contains a NUL character")
    }
}
