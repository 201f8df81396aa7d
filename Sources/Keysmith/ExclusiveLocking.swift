/// A store whose users can hold a named lock between them: in one process, across the
/// processes of a machine, and for a shared store across machines. It is what makes a token's
/// refresh happen once however many callers need it at the same moment (the KeysmithProvider
/// module takes the lock, reads the token again, and refreshes only if it still needs it).
///
/// The lock is advisory: it orders the callers that take it and guards nothing else. It is
/// released by ``HeldLock/release()``, and by the end of the process (or, for PostgreSQL, of
/// its connection) that held it: a killed holder never leaves it taken.
///
/// ```swift
/// if let lock = try store.tryExclusiveLock(named: "refresh news/alice") {
///     defer { lock.release() }
///     // … only one holder at a time runs this …
/// }
/// ```
public protocol ExclusiveLocking: SecureStore {
    /// Takes the lock `name` if nobody holds it, without waiting.
    ///
    /// - Parameter name: Any text; two callers naming the same text contend.
    /// - Returns: The held lock, or `nil` when another holder has it (in this process or another).
    /// - Throws: ``KeysmithError`` when the store cannot take locks now (unavailable, or the
    ///   lock's file cannot be made).
    func tryExclusiveLock(named name: String) throws -> (any HeldLock)?
}

/// A lock taken with ``ExclusiveLocking/tryExclusiveLock(named:)``.
public protocol HeldLock: AnyObject, Sendable {
    /// Releases the lock; calling it again does nothing.
    func release()
}
