public import FoundationEssentials

/// Everything a store keeps about an item except its secret: its identity and its metadata.
///
/// The metadata mirror the attribute protocols (``LabellableSecureStorable`` and its siblings);
/// an item kind fills them in from whichever of those protocols a type adopts.
///
/// **The update rule.** In a write, a metadata field left `nil` is *not given*: a create
/// stores none (and `false` for the flags), an update or a create-or-replace keeps what the item
/// holds. An empty string (or empty `generic` data) clears a field. Every path follows it: the
/// static API, the capability protocols, ``SecureStore/perform(_:)``, the command and `batch`.
/// What a store returns always has both flags set.
///
/// ```swift
/// try store.create(ItemAttributes(key: key, label: "Mail", comment: "work"), secret: pw)
/// try store.update(ItemAttributes(key: key, comment: ""), secret: newPassword)
/// // label "Mail" kept, comment cleared
/// ```
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
    /// Whether tools should hide the item from people; `nil` in a write means "not given".
    public var isInvisible: Bool?
    /// Whether the item is a "negative" entry: a record that no password should be stored;
    /// `nil` in a write means "not given".
    public var isNegative: Bool?
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
        creator: String? = nil, type: String? = nil, isInvisible: Bool? = nil,
        isNegative: Bool? = nil, generic: Data? = nil
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
        for (name, value) in metadataStrings where value?.utf8.contains(0) == true {
            throw KeysmithError.invalidArgument("the \(name) contains a NUL character")
        }
    }

    /// The metadata strings with their names, for checks that treat them alike.
    var metadataStrings: [(String, String?)] {
        [("label", label), ("comment", comment), ("description", itemDescription), ("creator", creator), ("type", type)]
    }

    /// These attributes written over `existing` by the update rule: fields not given are kept,
    /// empty ones cleared. With no existing item, what a create stores.
    ///
    /// - Parameter existing: What the item holds now, or `nil`.
    /// - Returns: What the store keeps, with both flags set.
    public func merged(over existing: ItemAttributes?) -> ItemAttributes {
        func pick(_ new: String?, _ old: String?) -> String? {
            guard let new else { return old }
            return new.isEmpty ? nil : new
        }
        var result = self
        result.label = pick(label, existing?.label)
        result.comment = pick(comment, existing?.comment)
        result.itemDescription = pick(itemDescription, existing?.itemDescription)
        result.creator = pick(creator, existing?.creator)
        result.type = pick(type, existing?.type)
        result.isInvisible = isInvisible ?? existing?.isInvisible ?? false
        result.isNegative = isNegative ?? existing?.isNegative ?? false
        if let generic { result.generic = generic.isEmpty ? nil : generic } else { result.generic = existing?.generic }
        return result
    }
}

/// A version of a stored item: it changes with every write of the item, so a write can be made
/// conditional on the item being unchanged since it was read (optimistic concurrency, like an
/// HTTP ETag).
///
/// Opaque: compare versions for equality only. Each store makes its own (a commit sequence in the
/// file vault, a random tag in the Secret Service, a counter in memory); a version from one store
/// means nothing to another.
///
/// ```swift
/// guard let record = try store.read(key) else { return }
/// try store.perform([.update(newAttributes, secret: newSecret, ifVersion: record.info.version)])
/// // throws KeysmithError.Code.writeConflict if another handle or process wrote it in between
/// ```
public struct ItemVersion: Hashable, Sendable, CustomStringConvertible {
    /// The store's token for the version.
    public let rawValue: String

    /// Wraps a store's version token. Stores call this; applications compare what reads return.
    ///
    /// - Parameter rawValue: The store's token.
    public init(rawValue: String) { self.rawValue = rawValue }

    /// The version of a record that a store did not version (a record built by hand).
    public static let unversioned = ItemVersion(rawValue: "")

    /// The token.
    public var description: String { rawValue.isEmpty ? "unversioned" : rawValue }
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
    /// The store's version of the item, for conditional writes (``StoreOperation/update(_:secret:ifVersion:)``).
    /// Not part of the item's contents: ``SecureRecord/hasSameContents(as:)`` ignores it.
    public var version: ItemVersion

    /// Creates item information.
    ///
    /// - Parameters:
    ///   - attributes: The identity and metadata.
    ///   - created: When the item was first stored.
    ///   - modified: When it last changed.
    ///   - version: The store's version of the item; ``ItemVersion/unversioned`` if omitted.
    public init(attributes: ItemAttributes, created: Date, modified: Date, version: ItemVersion = .unversioned) {
        self.attributes = attributes
        self.created = created
        self.modified = modified
        self.version = version
    }

    /// The item's identity.
    public var key: ItemKey { attributes.key }
}

/// A stored item with its secret, as a store's ``SecureStore/read(_:)->SecureRecord?`` returns it.
///
/// `description`, `debugDescription` and `dump` never show the secret.
public struct SecureRecord: Hashable, Sendable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
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

    /// The same as ``description``: the secret stays out of debug output too.
    public var debugDescription: String { description }

    /// What `dump` and debuggers show: the attributes and dates, the secret as `<redacted>`.
    public var customMirror: Mirror { redactedMirror(info: info, secretSize: secret.count) }

    /// Whether two records hold the same item: the same attributes (as a store keeps them: a flag
    /// not given is `false`, an empty string none), dates and secret. The stores' versions are not
    /// compared (each store makes its own).
    ///
    /// - Parameter other: The other record.
    /// - Returns: `true` when only the versions may differ.
    public func hasSameContents(as other: SecureRecord) -> Bool {
        info.attributes.merged(over: nil) == other.info.attributes.merged(over: nil) && info.created == other.info.created
            && info.modified == other.info.modified && secret == other.secret
    }
}

/// A mirror that shows an item's metadata and hides its secret, for every type that holds one.
func redactedMirror(info: ItemInfo, secretSize: Int) -> Mirror {
    Mirror(
        SecureRecord.self,
        children: ["info": info, "secret": "<redacted: \(secretSize) bytes>"],
        displayStyle: .struct)
}
