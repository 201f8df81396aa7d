/// A search over items by any subset of their attributes.
///
/// Every field left `nil` matches anything; every field that is set must match exactly: the
/// same UTF-8 bytes, as identities compare (``ItemKey``). The empty query matches every item of
/// the user's namespace; Keysmith's own records (tokens, the audit log) are matched only by a
/// query whose ``namespace`` includes ``ItemNamespace/keysmith``.
///
/// ```swift
/// let all = try store.search(ItemQuery())
/// let mail = try store.search(ItemQuery(service: "mail"))
/// let bobsWeb = try store.search(ItemQuery(kind: .internetPassword, account: "bob"))
/// let tokens = try store.search(ItemQuery(namespace: .keysmith, recordType: .oauthToken))
/// ```
public struct ItemQuery: Hashable, Sendable {
    /// Which namespace to search: ``ItemNamespace/user`` (the default), ``ItemNamespace/keysmith`` or both.
    public var namespace: ItemNamespace
    /// Only Keysmith records of this type (implies the Keysmith namespace).
    public var recordType: KeysmithRecordType?
    /// Only items of this kind.
    public var kind: ItemKind?
    /// Only generic passwords of this service.
    public var service: String?
    /// Only items of this account.
    public var account: String?
    /// Only internet passwords on this server.
    public var server: String?
    /// Only internet passwords on this port.
    public var port: Int?
    /// Only internet passwords of this protocol.
    public var internetProtocol: InternetProtocol?
    /// Only internet passwords of this authentication type.
    public var authenticationType: InternetAuthenticationType?
    /// Only internet passwords of this security domain.
    public var securityDomain: String?
    /// Only internet passwords of this path.
    public var path: String?
    /// Only items with this label.
    public var label: String?
    /// Only items with this type.
    public var type: String?

    /// Creates a query; every argument left out matches anything.
    ///
    /// - Parameters:
    ///   - kind: The kind of item.
    ///   - service: A generic password's service.
    ///   - account: The account.
    ///   - server: An internet password's server.
    ///   - port: An internet password's port.
    ///   - internetProtocol: An internet password's protocol.
    ///   - authenticationType: An internet password's authentication type.
    ///   - securityDomain: An internet password's security domain.
    ///   - path: An internet password's path.
    ///   - label: The label.
    ///   - type: The application-defined type.
    ///   - namespace: The user's items (the default), Keysmith's records, or both.
    ///   - recordType: Only Keysmith records of this type.
    public init(
        kind: ItemKind? = nil, service: String? = nil, account: String? = nil,
        server: String? = nil, port: Int? = nil, internetProtocol: InternetProtocol? = nil,
        authenticationType: InternetAuthenticationType? = nil, securityDomain: String? = nil,
        path: String? = nil, label: String? = nil, type: String? = nil,
        namespace: ItemNamespace = .user, recordType: KeysmithRecordType? = nil
    ) {
        self.namespace = recordType == nil && kind != .keysmithRecord ? namespace : .keysmith
        self.recordType = recordType
        self.kind = kind
        self.service = service
        self.account = account
        self.server = server
        self.port = port
        self.internetProtocol = internetProtocol
        self.authenticationType = authenticationType
        self.securityDomain = securityDomain
        self.path = path
        self.label = label
        self.type = type
    }

    /// Whether an item with these attributes matches the query.
    ///
    /// - Parameter attributes: The item's attributes.
    /// - Returns: `true` when every field the query sets equals the item's.
    public func matches(_ attributes: ItemAttributes) -> Bool {
        let key = attributes.key
        guard namespace.contains(key.namespace) else { return false }
        if let kind, kind != key.kind { return false }
        if let account, !sameBytes(account, key.account) { return false }
        if let label, !equal(label, attributes.label) { return false }
        if let type, !equal(type, attributes.type) { return false }
        switch key {
        case .genericPassword(let itemService, _):
            if let service, !sameBytes(service, itemService) { return false }
            return server == nil && port == nil && internetProtocol == nil
                && authenticationType == nil && securityDomain == nil && path == nil && recordType == nil
        case .internetPassword(let internet):
            if service != nil || recordType != nil { return false }
            if let server, !sameBytes(server, internet.server) { return false }
            if let port, port != internet.port { return false }
            if let internetProtocol, internetProtocol != internet.internetProtocol { return false }
            if let authenticationType, authenticationType != internet.authenticationType { return false }
            if let securityDomain, !sameBytes(securityDomain, internet.securityDomain) { return false }
            if let path, !sameBytes(path, internet.path) { return false }
            return true
        case .keysmithRecord(let record):
            if let recordType, recordType != record.recordType { return false }
            if let service, !sameBytes(service, record.service) { return false }
            return server == nil && port == nil && internetProtocol == nil
                && authenticationType == nil && securityDomain == nil && path == nil
        }
    }

    private func equal(_ wanted: String, _ value: String?) -> Bool {
        guard let value else { return false }
        return sameBytes(wanted, value)
    }
}
