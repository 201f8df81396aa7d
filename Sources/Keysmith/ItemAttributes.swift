/// Everything a store keeps about an item except its secret: its identity and its metadata.
///
/// The metadata mirror the attribute protocols (``LabellableSecureStorable`` and its siblings);
/// an item kind fills them in from whichever of those protocols a type adopts.
public struct ItemAttributes: Hashable, Sendable {
    /// The item's identity.
    public var key: ItemKey
    /// A name a person can read, shown by tools such as `secret-tool`.
    public var label: String?
    /// A free-form comment.
    public var comment: String?
    /// A description of the kind of item ("Mail password"). Named `itemDescription` so that
    /// it cannot collide with `CustomStringConvertible.description`.
    public var itemDescription: String?
    /// The name of the program that created the item.
    public var creator: String?
    /// An application-defined type name for the item.
    public var type: String?
    /// Whether tools should hide the item from people.
    public var isInvisible: Bool
    /// Whether the item is a "negative" entry: a record that no password should be stored.
    public var isNegative: Bool
    /// Application data stored in the clear-text attributes of a generic password (encrypted in
    /// the file vault like everything else).
    public var generic: Data?

    /// Creates attributes for a key, with no metadata.
    ///
    /// - Parameters:
    ///   - key: The item's identity.
    ///   - label: A name a person can read.
    ///   - comment: A free-form comment.
    ///   - itemDescription: A description of the kind of item.
    ///   - creator: The name of the creating program.
    ///   - type: An application-defined type name.
    ///   - isInvisible: Whether tools should hide the item.
    ///   - isNegative: Whether the item records that no password should be stored.
    ///   - generic: Application data for a generic password.
    public init(
        key: ItemKey, label: String? = nil, comment: String? = nil, itemDescription: String? = nil,
        creator: String? = nil, type: String? = nil, isInvisible: Bool = false,
        isNegative: Bool = false, generic: Data? = nil
    ) {
        self.key = key
        self.label = label
        self.comment = comment
        self.itemDescription = itemDescription
        self.creator = creator
        self.type = type
        self.isInvisible = isInvisible
        self.isNegative = isNegative
        self.generic = generic
    }

    /// Checks the key and the metadata.
    ///
    /// - Throws: ``KeysmithError/Code/invalidArgument`` naming the bad field.
    public func validate() throws {
        try key.validate()
        let fields: [(String, String?)] = [
            ("label", label), ("comment", comment), ("description", itemDescription),
            ("creator", creator), ("type", type),
        ]
        for (name, value) in fields where value?.utf8.contains(0) == true {
            throw KeysmithError.invalidArgument("the \(name) contains a NUL character")
        }
    }
}

/// What a store knows of an item without its secret: its attributes and when it was created and
/// last modified. Searches return these, so that listing items never decrypts a secret.
public struct ItemInfo: Hashable, Sendable {
    /// The item's identity and metadata.
    public var attributes: ItemAttributes
    /// When the item was first stored.
    public var created: Date
    /// When the item or its secret last changed.
    public var modified: Date

    /// Creates item information.
    ///
    /// - Parameters:
    ///   - attributes: The identity and metadata.
    ///   - created: When the item was first stored.
    ///   - modified: When it last changed.
    public init(attributes: ItemAttributes, created: Date, modified: Date) {
        self.attributes = attributes
        self.created = created
        self.modified = modified
    }

    /// The item's identity.
    public var key: ItemKey { attributes.key }
}

/// A stored item with its secret, as a store's ``SecureStore/read(_:)`` returns it.
///
/// `description` never shows the secret.
public struct SecureRecord: Hashable, Sendable, CustomStringConvertible {
    /// The attributes and dates.
    public var info: ItemInfo
    /// The secret bytes.
    public var secret: Data

    /// Creates a record.
    ///
    /// - Parameters:
    ///   - info: The attributes and dates.
    ///   - secret: The secret bytes.
    public init(info: ItemInfo, secret: Data) {
        self.info = info
        self.secret = secret
    }

    /// The item's identity.
    public var key: ItemKey { info.attributes.key }
    /// The item's attributes.
    public var attributes: ItemAttributes { info.attributes }

    /// The item's identity and the size of its secret; never the secret itself.
    public var description: String { "\(info.key) (secret: \(secret.count) bytes, redacted)" }
}
