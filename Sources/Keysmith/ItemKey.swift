/// The identity of a stored item: what makes two items the same item.
///
/// A store holds at most one item per key. **Identity is bytes**: two names are the same name
/// exactly when their UTF-8 bytes are equal. `"Bob"` and `"bob"` are two accounts, and so are
/// the precomposed `"café"` (`c a f U+00E9`) and the decomposed `"café"` (`c a f e U+0301`),
/// although Swift's `String ==` calls those two equal. Keysmith never normalizes a name: the
/// bytes you give are the bytes every store keeps, the bytes a record id is computed from, and
/// the bytes `secret-tool` matches, so equality, hashing, record ids and every store agree.
///
/// Keys of Keysmith's own records (tokens, the audit log) are ``keysmithRecord(_:)`` keys: a
/// namespace of their own that user-level operations never produce, list or touch.
///
/// ```swift
/// let key = ItemKey.genericPassword(service: "mail", account: "bob@example.com")
/// let record = try store.read(key)
/// ```
public enum ItemKey: Hashable, Sendable, CustomStringConvertible {
    /// A generic password: one secret per service and account.
    case genericPassword(service: String, account: String)
    /// An internet password: one secret per server, port, protocol, authentication type,
    /// security domain, path and account. (Boxed, so that every key, and so every record and
    /// operation, stays small: a bulk job holds 100,000 of them.)
    indirect case internetPassword(InternetPasswordKey)
    /// A record Keysmith keeps for itself (a token, an audit-log entry), in the reserved
    /// namespace. Searches see these only when they ask for ``ItemNamespace/keysmith``.
    case keysmithRecord(KeysmithRecordKey)

    /// Whether two keys name the same item: their kinds and the UTF-8 bytes of every name are equal.
    public static func == (lhs: ItemKey, rhs: ItemKey) -> Bool {
        switch (lhs, rhs) {
        case (.genericPassword(let s1, let a1), .genericPassword(let s2, let a2)):
            sameBytes(s1, s2) && sameBytes(a1, a2)
        case (.internetPassword(let k1), .internetPassword(let k2)): k1 == k2
        case (.keysmithRecord(let k1), .keysmithRecord(let k2)): k1 == k2
        default: false
        }
    }

    /// Hashes the kind and the UTF-8 bytes of every name, consistently with ``==(_:_:)``.
    public func hash(into hasher: inout Hasher) {
        switch self {
        case .genericPassword(let service, let account):
            hasher.combine(1 as UInt8)
            hashBytes(service, into: &hasher)
            hashBytes(account, into: &hasher)
        case .internetPassword(let key):
            hasher.combine(2 as UInt8)
            key.hash(into: &hasher)
        case .keysmithRecord(let key):
            hasher.combine(3 as UInt8)
            key.hash(into: &hasher)
        }
    }

    /// The kind of item this key identifies.
    public var kind: ItemKind {
        switch self {
        case .genericPassword: .genericPassword
        case .internetPassword: .internetPassword
        case .keysmithRecord: .keysmithRecord
        }
    }

    /// Which namespace the key belongs to: the user's items, or Keysmith's own records.
    public var namespace: ItemNamespace {
        if case .keysmithRecord = self { return .keysmith }
        return .user
    }

    /// The account, present in every kind of key.
    public var account: String {
        switch self {
        case .genericPassword(_, let account): account
        case .internetPassword(let key): key.account
        case .keysmithRecord(let key): key.account
        }
    }

    /// The service of a generic password or of a Keysmith record, `nil` for internet passwords.
    public var service: String? {
        switch self {
        case .genericPassword(let service, _): service
        case .internetPassword: nil
        case .keysmithRecord(let key): key.service
        }
    }

    /// A readable form for messages, such as `generic password (service "mail", account "bob")`.
    public var description: String {
        switch self {
        case .genericPassword(let service, let account):
            "generic password (service \(quoted(service)), account \(quoted(account)))"
        case .internetPassword(let key):
            "internet password (\(key))"
        case .keysmithRecord(let key):
            "Keysmith record (\(key))"
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
        case .keysmithRecord(let key):
            try checkName(key.recordType.rawValue, field: "record type", allowEmpty: false)
            try checkName(key.service, field: "service", allowEmpty: false)
            try checkName(key.account, field: "account", allowEmpty: false)
        }
    }
}

/// Which items an operation sees: the user's, Keysmith's own records, or both.
public enum ItemNamespace: String, Sendable, Hashable, Codable, CaseIterable {
    /// Generic and internet passwords: what applications and people store.
    case user
    /// Keysmith's own records: tokens, the audit log.
    case keysmith
    /// Both.
    case any

    /// Whether an item of `namespace` is in this one.
    public func contains(_ namespace: ItemNamespace) -> Bool {
        self == .any || self == namespace
    }
}

/// The type of a record Keysmith keeps for itself, such as ``oauthToken``.
///
/// A struct rather than an enum so that later record types do not break your `switch`.
public struct KeysmithRecordType: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
    /// The type's name as stored, such as `oauth-token`.
    public let rawValue: String

    /// Names a record type.
    ///
    /// - Parameter rawValue: The stored name.
    public init(rawValue: String) { self.rawValue = rawValue }

    /// An OAuth token with its scopes (the KeysmithTokens module).
    public static let oauthToken = KeysmithRecordType(rawValue: "oauth-token")
    /// One entry of the audit log.
    public static let auditEntry = KeysmithRecordType(rawValue: "audit-entry")
    /// The audit log's head: its last entry's sequence and MAC.
    public static let auditHead = KeysmithRecordType(rawValue: "audit-head")

    /// The stored name.
    public var description: String { rawValue }
}

/// The identity of one of Keysmith's own records: its type, and a service and account that
/// name it within the type (for a token, the service and account it was stored under).
///
/// Compared by bytes, like every identity.
public struct KeysmithRecordKey: Hashable, Sendable, CustomStringConvertible {
    /// What kind of record it is.
    public var recordType: KeysmithRecordType
    /// The service (for a token, the service it is for).
    public var service: String
    /// The account (for a token, the account it is for).
    public var account: String

    /// Creates a record identity.
    ///
    /// - Parameters:
    ///   - recordType: What kind of record it is.
    ///   - service: The service that names it.
    ///   - account: The account that names it.
    public init(recordType: KeysmithRecordType, service: String, account: String) {
        self.recordType = recordType
        self.service = service
        self.account = account
    }

    /// Whether two record identities are the same: same type and the same bytes in each name.
    public static func == (lhs: KeysmithRecordKey, rhs: KeysmithRecordKey) -> Bool {
        sameBytes(lhs.recordType.rawValue, rhs.recordType.rawValue) && sameBytes(lhs.service, rhs.service)
            && sameBytes(lhs.account, rhs.account)
    }

    /// Hashes the UTF-8 bytes of every field.
    public func hash(into hasher: inout Hasher) {
        hashBytes(recordType.rawValue, into: &hasher)
        hashBytes(service, into: &hasher)
        hashBytes(account, into: &hasher)
    }

    /// `oauth-token, service "news", account "bob"`.
    public var description: String {
        "\(recordType), service \(quoted(service)), account \(quoted(account))"
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

    /// Whether two internet identities are the same: every field equal, names by their UTF-8 bytes.
    public static func == (lhs: InternetPasswordKey, rhs: InternetPasswordKey) -> Bool {
        lhs.port == rhs.port && lhs.internetProtocol == rhs.internetProtocol
            && lhs.authenticationType == rhs.authenticationType && sameBytes(lhs.server, rhs.server)
            && sameBytes(lhs.securityDomain, rhs.securityDomain) && sameBytes(lhs.path, rhs.path)
            && sameBytes(lhs.account, rhs.account)
    }

    /// Hashes every field, names by their UTF-8 bytes.
    public func hash(into hasher: inout Hasher) {
        hashBytes(server, into: &hasher)
        hasher.combine(port)
        hasher.combine(internetProtocol)
        hasher.combine(authenticationType)
        hashBytes(securityDomain, into: &hasher)
        hashBytes(path, into: &hasher)
        hashBytes(account, into: &hasher)
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
    /// A record Keysmith keeps for itself (see ``ItemKey/keysmithRecord(_:)``).
    case keysmithRecord = "keysmith-record"
}

/// Whether two names are the same name: the same UTF-8 bytes (no Unicode normalization).
@inline(__always)
package func sameBytes(_ lhs: String, _ rhs: String) -> Bool {
    lhs.utf8.elementsEqual(rhs.utf8)
}

/// Hashes a name's UTF-8 bytes and its length (so that field boundaries count).
@inline(__always)
func hashBytes(_ text: String, into hasher: inout Hasher) {
    hasher.combine(text.utf8.count)
    for byte in text.utf8 { hasher.combine(byte) }
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
