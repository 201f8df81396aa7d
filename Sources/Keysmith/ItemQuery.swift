/// A search over items by any subset of their attributes.
///
/// Every field left `nil` matches anything; every field that is set must match exactly
/// (case-sensitive). The empty query matches every item.
///
/// ```swift
/// let all = try store.search(ItemQuery())
/// let mail = try store.search(ItemQuery(service: "mail"))
/// let bobsWeb = try store.search(ItemQuery(kind: .internetPassword, account: "bob"))
/// ```
public struct ItemQuery: Hashable, Sendable {
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
    public init(
        kind: ItemKind? = nil, service: String? = nil, account: String? = nil,
        server: String? = nil, port: Int? = nil, internetProtocol: InternetProtocol? = nil,
        authenticationType: InternetAuthenticationType? = nil, securityDomain: String? = nil,
        path: String? = nil, label: String? = nil, type: String? = nil
    ) {
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
        if let kind, kind != key.kind { return false }
        if let account, account != key.account { return false }
        if let label, label != attributes.label { return false }
        if let type, type != attributes.type { return false }
        switch key {
        case .genericPassword(let itemService, _):
            if let service, service != itemService { return false }
            return server == nil && port == nil && internetProtocol == nil
                && authenticationType == nil && securityDomain == nil && path == nil
        case .internetPassword(let internet):
            if service != nil { return false }
            if let server, server != internet.server { return false }
            if let port, port != internet.port { return false }
            if let internetProtocol, internetProtocol != internet.internetProtocol { return false }
            if let authenticationType, authenticationType != internet.authenticationType { return false }
            if let securityDomain, securityDomain != internet.securityDomain { return false }
            if let path, path != internet.path { return false }
            return true
        }
    }
}
