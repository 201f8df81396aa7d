public import FoundationEssentials
internal import Synchronization

/// The base of every item type: something that can live in a secure store.
///
/// You rarely adopt `SecureStorable` directly. Adopt an item kind
/// (``GenericPasswordSecureStorable`` or ``InternetPasswordSecureStorable``), the attribute
/// protocols for the metadata you want, and the capabilities your type needs
/// (``CreateableSecureStorable``, ``ReadableSecureStorable``, ``DeleteableSecureStorable``).
/// The type then writes no method bodies: only its attributes and its secret.
///
/// ```swift
/// struct MailAccount: GenericPasswordSecureStorable, CreateableSecureStorable,
///                     ReadableSecureStorable, DeleteableSecureStorable {
///     let service = "mail"
///     let account: String
///     var secret: Data
/// }
/// try MailAccount(account: "bob", secret: Data("s3cret".utf8)).createInSecureStore()
/// ```
public protocol SecureStorable: Sendable {
    /// The type a read returns: ``GenericPasswordResult`` or ``InternetPasswordResult``,
    /// fixed by the item kind.
    associatedtype Result: SecureStorableResult

    /// The store the item lives in. Defaults to ``Keysmith/defaultStore``; implement it to use
    /// another store (a test's ``MemoryStore``, say).
    var secureStore: any SecureStore { get throws }

    /// The item's identity and metadata, assembled by the item kind from the attribute
    /// protocols the type adopts. You do not implement this.
    var secureStoreAttributes: ItemAttributes { get }
}

extension SecureStorable {
    /// The process-wide default store, ``Keysmith/defaultStore``.
    public var secureStore: any SecureStore {
        get throws { try Keysmith.defaultStore }
    }

    /// The item's identity: ``secureStoreAttributes``' key.
    public var secureStoreKey: ItemKey { secureStoreAttributes.key }
}

/// An item that belongs to an account.
public protocol AccountBasedSecureStorable: SecureStorable {
    /// The account, such as a user name or an e-mail address. Case-sensitive.
    var account: String { get }
}

/// An item with a description of its kind ("Mail password").
public protocol DescribableSecureStorable: SecureStorable {
    /// A description of the kind of item. Locksmith calls it `description`; here it is
    /// `itemDescription` so it cannot collide with `CustomStringConvertible`.
    var itemDescription: String { get }
}

/// An item with a free-form comment.
public protocol CommentableSecureStorable: SecureStorable {
    /// The comment.
    var comment: String { get }
}

/// An item that records which program created it.
public protocol CreatorDesignatableSecureStorable: SecureStorable {
    /// The creating program's name.
    var creator: String { get }
}

/// An item with a label a person can read.
public protocol LabellableSecureStorable: SecureStorable {
    /// The label, shown by tools such as `secret-tool` and Seahorse.
    var label: String { get }
}

/// An item with an application-defined type.
public protocol TypeDesignatableSecureStorable: SecureStorable {
    /// The type name.
    var type: String { get }
}

/// An item that tools may hide from people.
public protocol IsInvisibleAssignableSecureStorable: SecureStorable {
    /// Whether to hide the item.
    var isInvisible: Bool { get }
}

/// An item that may record that no password should be stored ("never for this site").
public protocol IsNegativeAssignableSecureStorable: SecureStorable {
    /// Whether the item is a negative entry.
    var isNegative: Bool { get }
}

extension SecureStorable {
    /// Checks that the type declares no attribute it does not deliver: a stored property named
    /// like an attribute (`label`, `comment`, `type`, `generic`…) in a type that does not adopt
    /// the protocol that reads it, or of another type than the protocol requires, would be
    /// silently ignored. The capability methods call this before touching the store; the
    /// answer is worked out once per type.
    ///
    /// - Throws: ``KeysmithError/Code/invalidArgument`` naming the property and the protocol to adopt.
    public func checkDeclaredAttributes() throws {
        if let problem = AttributeDeclarationCheck.problem(in: self) {
            throw KeysmithError.invalidArgument(problem)
        }
    }

    /// Builds attributes for a key from every attribute protocol the type adopts.
    ///
    /// The item kinds call this; it is public so that a new item kind can too.
    ///
    /// - Parameters:
    ///   - key: The identity.
    ///   - generic: A generic password's application data.
    /// - Returns: The key with the metadata the type declares.
    public func makeSecureStoreAttributes(key: ItemKey, generic: Data? = nil) -> ItemAttributes {
        var attributes = ItemAttributes(key: key, generic: generic)
        if let item = self as? any LabellableSecureStorable { attributes.label = item.label }
        if let item = self as? any CommentableSecureStorable { attributes.comment = item.comment }
        if let item = self as? any DescribableSecureStorable { attributes.itemDescription = item.itemDescription }
        if let item = self as? any CreatorDesignatableSecureStorable { attributes.creator = item.creator }
        if let item = self as? any TypeDesignatableSecureStorable { attributes.type = item.type }
        if let item = self as? any IsInvisibleAssignableSecureStorable { attributes.isInvisible = item.isInvisible }
        if let item = self as? any IsNegativeAssignableSecureStorable { attributes.isNegative = item.isNegative }
        return attributes
    }
}

/// Finds properties that look like attributes but would be ignored; one answer per type.
enum AttributeDeclarationCheck {
    private static let cache = Mutex<[ObjectIdentifier: String?]>([:])

    /// Attribute name → (the protocol that reads it, whether the value adopts it, the type it must have).
    private static func expectations(for value: any SecureStorable) -> [String: (protocolName: String, adopted: Bool, type: Any.Type)] {
        [
            "label": ("LabellableSecureStorable", value is any LabellableSecureStorable, String.self),
            "comment": ("CommentableSecureStorable", value is any CommentableSecureStorable, String.self),
            "itemDescription": ("DescribableSecureStorable", value is any DescribableSecureStorable, String.self),
            "creator": ("CreatorDesignatableSecureStorable", value is any CreatorDesignatableSecureStorable, String.self),
            "type": ("TypeDesignatableSecureStorable", value is any TypeDesignatableSecureStorable, String.self),
            "isInvisible": ("IsInvisibleAssignableSecureStorable", value is any IsInvisibleAssignableSecureStorable, Bool.self),
            "isNegative": ("IsNegativeAssignableSecureStorable", value is any IsNegativeAssignableSecureStorable, Bool.self),
            "generic": ("GenericPasswordSecureStorable", value is any GenericPasswordSecureStorable, Optional<Data>.self),
        ]
    }

    static func problem(in value: some SecureStorable) -> String? {
        let id = ObjectIdentifier(type(of: value))
        if let known = cache.withLock({ $0[id] }) { return known }
        let found = examine(value)
        cache.withLock { $0[id] = found }
        return found
    }

    private static func examine(_ value: some SecureStorable) -> String? {
        let expected = expectations(for: value)
        let typeName = String(describing: type(of: value))
        let folded = Dictionary(uniqueKeysWithValues: expected.keys.map { ($0.lowercased(), $0) })
        for child in Mirror(reflecting: value).children {
            guard var name = child.label else { continue }
            if name.hasPrefix("_") { name.removeFirst() }  // property wrappers' storage
            let valueType = Swift.type(of: child.value)
            if let rule = expected[name] {
                if !rule.adopted {
                    return "\(typeName) declares `\(name)` but does not adopt \(rule.protocolName), so it would be ignored; adopt the protocol or rename the property"
                }
                if valueType != rule.type {
                    return "\(typeName) declares `\(name)` as \(valueType), but \(rule.protocolName) reads a \(rule.type), so it would be ignored; declare it as \(rule.type)"
                }
            } else if let intended = folded[String(name.lowercased().filter { $0 != "_" })] {
                return "\(typeName) declares `\(name)`, which Keysmith does not read; did you mean `\(intended)`?"
            }
        }
        return nil
    }
}
