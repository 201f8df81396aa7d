/// An item's identity and metadata as JSON: what `keysmith secret list --json` prints for each
/// item and what a `keysmith batch` line names (docs/cli.md; ``StoreOperation/batch(jsonLines:allowEmpty:)``).
/// One shape for both, so scripts can feed one into the other. Dates are ISO 8601 in UTC, the
/// generic data base64; a field the item does not have is absent.
///
/// ```swift
/// let documents = try store.search(ItemQuery()).map(ItemDocument.init)
/// let json = try JSONEncoder().encode(documents)
/// let key = try documents[0].key()          // the identity these fields name
/// ```
public struct ItemDocument: Codable, Sendable, Hashable {
    /// The item's kind: `generic-password`, `internet-password` or `keysmith-record` (``ItemKind``'s raw value).
    public var kind: String?
    /// A generic password's service (or a Keysmith record's).
    public var service: String?
    /// The account.
    public var account: String?
    /// An internet password's server…
    public var server: String?
    /// …port (0 or absent: none)…
    public var port: Int?
    /// …protocol (``InternetProtocol``'s raw value)…
    public var `protocol`: String?
    /// …authentication type (``InternetAuthenticationType``'s raw value; absent: `default`)…
    public var authType: String?
    /// …security domain…
    public var securityDomain: String?
    /// …and path.
    public var path: String?
    /// Set for Keysmith's own records (`secret list --all`): their record type.
    public var recordType: String?
    /// The label.
    public var label: String?
    /// The comment.
    public var comment: String?
    /// The item's description attribute (``ItemAttributes/itemDescription``).
    public var description: String?
    /// The type code.
    public var type: String?
    /// When the item was created (ISO 8601, UTC).
    public var created: String?
    /// When it was last changed (ISO 8601, UTC).
    public var modified: String?
    /// The creator code.
    public var creator: String?
    /// Whether the item is marked invisible.
    public var isInvisible: Bool?
    /// Whether the item is marked negative.
    public var isNegative: Bool?
    /// The item's generic data, in base64 (it is any bytes).
    public var genericBase64: String?

    /// Every field, by its JSON name (what a `batch` line may hold beside `op` and the secret).
    public enum CodingKeys: String, CodingKey, CaseIterable {
        case kind, service, account, server, port, `protocol`, authType, securityDomain, path, recordType, label, comment,
             description, type, created, modified, creator, isInvisible, isNegative, genericBase64
    }

    /// The document of an item's identity, attributes and dates (never its secret).
    public init(_ info: ItemInfo) {
        let attributes = info.attributes
        kind = attributes.key.kind.rawValue
        account = attributes.key.account
        switch attributes.key {
        case .genericPassword(let service, _):
            self.service = service
        case .internetPassword(let key):
            server = key.server
            port = key.port
            `protocol` = key.internetProtocol.rawValue
            authType = key.authenticationType.rawValue
            securityDomain = key.securityDomain
            path = key.path
        case .keysmithRecord(let key):
            service = key.service
            recordType = key.recordType.rawValue
        }
        label = attributes.label
        comment = attributes.comment
        description = attributes.itemDescription
        type = attributes.type
        creator = attributes.creator
        isInvisible = attributes.isInvisible
        isNegative = attributes.isNegative
        genericBase64 = attributes.generic?.base64EncodedString()
        created = iso8601(info.created)
        modified = iso8601(info.modified)
    }

    /// The identity these fields name.
    ///
    /// - Throws: ``KeysmithError/Code/invalidArgument`` saying which field is missing or unknown.
    public func key() throws -> ItemKey {
        if recordType != nil || kind == ItemKind.keysmithRecord.rawValue {
            throw KeysmithError.invalidArgument(
                "Keysmith's own records (tokens, the audit log) cannot be written as secrets; use `keysmith token …`")
        }
        guard let account else { throw KeysmithError.invalidArgument("\"account\" is missing") }
        if let service { return .genericPassword(service: service, account: account) }
        guard let server else { throw KeysmithError.invalidArgument("give \"service\" or \"server\"") }
        guard let name = `protocol`, let internetProtocol = InternetProtocol(rawValue: name) else {
            throw KeysmithError.invalidArgument("an internet password needs a known \"protocol\"")
        }
        guard let authentication = InternetAuthenticationType(rawValue: authType ?? "default") else {
            throw KeysmithError.invalidArgument("unknown \"authType\"")
        }
        return .internetPassword(InternetPasswordKey(
            server: server, port: port ?? 0, internetProtocol: internetProtocol, authenticationType: authentication,
            securityDomain: securityDomain ?? "", path: path ?? "", account: account))
    }
}
