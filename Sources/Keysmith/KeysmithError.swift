
/// The one error type that every Keysmith operation throws.
///
/// A `KeysmithError` carries a ``Code`` (what kind of failure it is, for programs to branch on)
/// and a message (what went wrong and what to do, for people). Messages name items by their
/// identity (service, account, server…) but never contain a secret.
///
/// "Not found" is a value, not a failure: every *read* that finds nothing returns `nil`.
/// Only operations that need an existing item (update, delete) throw ``Code/itemNotFound``.
///
/// ```swift
/// do {
///     try Keysmith.update(Data("new".utf8), forAccount: "bob", inService: "mail")
/// } catch let error as KeysmithError where error.code == .itemNotFound {
///     print("nothing to update:", error.message)
/// }
/// ```
///
/// The code is a struct with static members rather than an enum, so new codes can be added
/// without breaking `switch` statements in your code.
public struct KeysmithError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What kind of failure an error is.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: String, Hashable, Sendable {
            case duplicateItem = "duplicate item"
            case itemNotFound = "item not found"
            case authenticationFailed = "authentication failed"
            case corruptData = "corrupt or tampered data"
            case storeLocked = "store locked"
            case storeUnavailable = "store unavailable"
            case invalidArgument = "invalid argument"
            case ioFailure = "input/output failure"
            case timedOut = "timed out"
            case invalidScope = "invalid scope"
            case malformedData = "malformed data"
            case writeConflict = "write conflict"
            case limitExceeded = "limit exceeded"
            case partiallyApplied = "partially applied"
        }

        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// An item with the same identity already exists (create refuses to overwrite).
        public static let duplicateItem = Code(.duplicateItem)
        /// An operation that needs an existing item found none. Reads return `nil` instead.
        public static let itemNotFound = Code(.itemNotFound)
        /// The passphrase or key was wrong.
        public static let authenticationFailed = Code(.authenticationFailed)
        /// Stored data failed its integrity check: it is corrupt or was tampered with.
        public static let corruptData = Code(.corruptData)
        /// The store exists but is locked and must be unlocked first.
        public static let storeLocked = Code(.storeLocked)
        /// The store cannot be reached or does not exist.
        public static let storeUnavailable = Code(.storeUnavailable)
        /// An argument was malformed: an empty account, an out-of-range port, a bad name.
        public static let invalidArgument = Code(.invalidArgument)
        /// The operating system refused a file operation (permissions, disk full…).
        public static let ioFailure = Code(.ioFailure)
        /// The store did not answer in time.
        public static let timedOut = Code(.timedOut)
        /// A scope token breaks RFC 6749 §3.3 (a forbidden character), or a refresh named a scope
        /// that was not granted before (RFC 6749 §6, `invalid_scope`).
        public static let invalidScope = Code(.invalidScope)
        /// Input to be parsed (a token response, a policy file, a JSON line) is malformed.
        public static let malformedData = Code(.malformedData)
        /// A conditional write found the item changed since it was read (another handle or
        /// process wrote it): read it again and retry.
        public static let writeConflict = Code(.writeConflict)
        /// An item is larger than the store can keep (``StoreLimits``); nothing was written.
        public static let limitExceeded = Code(.limitExceeded)
        /// A batch failed midway in a store without transactions and could not be fully rolled
        /// back; the message names the keys left changed.
        public static let partiallyApplied = Code(.partiallyApplied)

        /// A short lower-case name of the code, such as `item not found`.
        public var description: String { base.rawValue }
    }

    /// What kind of failure this is.
    public let code: Code
    /// What went wrong and what to do about it. Never contains a secret.
    public let message: String

    /// Creates an error with a code and a message.
    ///
    /// - Parameters:
    ///   - code: What kind of failure it is.
    ///   - message: What went wrong and what to do. Must not contain a secret.
    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// The code and the message on one line.
    public var description: String { "\(code): \(message)" }

    /// An item with this identity already exists.
    public static func duplicateItem(_ key: ItemKey) -> KeysmithError {
        KeysmithError(.duplicateItem, "\(key) already exists; update it instead of creating it")
    }

    /// The item was written since the version a conditional write expected.
    public static func writeConflict(_ key: ItemKey) -> KeysmithError {
        KeysmithError(.writeConflict, "\(key) was changed by another writer since it was read; read it again and retry")
    }

    /// No item with this identity exists.
    public static func itemNotFound(_ key: ItemKey) -> KeysmithError {
        KeysmithError(.itemNotFound, "\(key) does not exist")
    }

    /// An argument was malformed.
    public static func invalidArgument(_ message: String) -> KeysmithError {
        KeysmithError(.invalidArgument, message)
    }
}
