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

    /// Whether the lock is still this holder's, asked of whatever keeps it: `false` once it
    /// was released, or when what held it is gone (for PostgreSQL, its connection dropped, so
    /// the server let another holder take it). Ask before an action the lock exists to keep
    /// single, such as sending a refresh token.
    ///
    /// ```swift
    /// guard lock.isHeld else { /* take the lock again and start over */ }
    /// ```
    ///
    /// - Throws: ``KeysmithError`` when the store cannot tell now; treat it as not held.
    func isHeld() throws -> Bool
}

extension HeldLock {
    /// `true`: what a lock that its holder cannot lose answers (Keysmith's own locks each say
    /// whether they were released; this default is for other conformers, which existed
    /// before this requirement).
    public func isHeld() throws -> Bool { true }
}

/// A store whose locks can be taken from async code without holding a thread while the store
/// answers (the PostgreSQL store: its lock is a question to the server). For Keysmith's own
/// async code, through ``ExclusiveLocking/awaitLock(named:)``.
package protocol AwaitableLocking: ExclusiveLocking {
    /// ``ExclusiveLocking/tryExclusiveLock(named:)``, awaited.
    func tryExclusiveLockAwaiting(named name: String) async throws -> (any HeldLock)?
}

/// A held lock whose questions to its store can be awaited (``HeldLock/awaitIsHeld()``,
/// ``HeldLock/awaitRelease()``).
package protocol AwaitableHeldLock: HeldLock {
    /// ``HeldLock/isHeld()``, awaited; `false` when the store cannot tell.
    func isHeldAwaiting() async -> Bool
    /// ``HeldLock/release()``, awaited.
    func releaseAwaiting() async
    /// Whether the lock can pass to another holder while this one still runs (PostgreSQL: its
    /// connection dropped, by failover, `idle_session_timeout` or a pooler). A holder of such a
    /// lock fences what must stay single with a record in the store as well (the refresh intent
    /// of KeysmithProvider), since "still held?" can turn false a moment after it answered.
    var canBeLostWhileHolderRuns: Bool { get }
}

extension AwaitableHeldLock {
    /// `false`: a lock that only its release or its holder's end gives up.
    package var canBeLostWhileHolderRuns: Bool { false }
}

extension ExclusiveLocking {
    /// Takes the lock if nobody holds it: awaited without blocking a thread when the store is
    /// ``AwaitableLocking``, synchronously otherwise (a file lock: no network).
    package func awaitLock(named name: String) async throws -> (any HeldLock)? {
        if let awaitable = self as? any AwaitableLocking { return try await awaitable.tryExclusiveLockAwaiting(named: name) }
        return try tryExclusiveLock(named: name)
    }
}

extension HeldLock {
    /// Whether the lock is still held (``isHeld()``), awaited when the lock can be; `false`
    /// when the store cannot tell.
    package func awaitIsHeld() async -> Bool {
        if let awaitable = self as? any AwaitableHeldLock { return await awaitable.isHeldAwaiting() }
        return (try? isHeld()) ?? false
    }

    /// Whether another holder may take this lock while this holder still runs
    /// (``AwaitableHeldLock/canBeLostWhileHolderRuns``; `false` for every lock that is not
    /// awaitable).
    package var isLosableWhileHeld: Bool {
        (self as? any AwaitableHeldLock)?.canBeLostWhileHolderRuns ?? false
    }

    /// Releases the lock (``release()``), awaited when the lock can be.
    package func awaitRelease() async {
        if let awaitable = self as? any AwaitableHeldLock { return await awaitable.releaseAwaiting() }
        release()
    }
}
