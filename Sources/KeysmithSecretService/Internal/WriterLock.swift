import Keysmith
import KeysmithSystem

/// The lock every Keysmith process takes before writing to a Secret Service: the service checks
/// nothing and replaces items blindly, so create-only-if-absent and conditional updates hold
/// across processes only if their check and their write happen under one lock.
///
/// A `flock` on `$XDG_RUNTIME_DIR/keysmith/secret-service.lock` (or, without a runtime
/// directory, `/tmp/keysmith-UID/secret-service.lock`), created 0600 in a 0700 directory. A
/// crashed holder releases it with its process.
final class WriterLock: Sendable {
    let path: String

    init(path: String) { self.path = path }

    /// The lock for this user's Secret Service.
    ///
    /// - Throws: `KeysmithError.Code.ioFailure` if the lock's directory cannot be made.
    static func forSecretService() throws -> WriterLock {
        let base: String
        if let runtime = System.environment("XDG_RUNTIME_DIR"), runtime.hasPrefix("/") {
            base = runtime + "/keysmith"
        } else {
            base = "/tmp/keysmith-\(System.userID)"
        }
        do {
            try System.mkdir(base, mode: 0o700)
        } catch let error as SystemError {
            throw KeysmithError(.ioFailure, "cannot make the Secret Service writer lock's directory: \(error)")
        }
        return WriterLock(path: base + "/secret-service.lock")
    }

    /// Runs `body` holding the lock, waiting for it at most `timeout`.
    ///
    /// - Throws: `KeysmithError.Code.timedOut` when another process holds it past the
    ///   deadline; `KeysmithError.Code.ioFailure` when the lock file cannot be opened; what
    ///   `body` throws.
    func withExclusive<T>(timeout: Duration, _ body: () throws -> T) throws -> T {
        let fd: Descriptor
        do {
            fd = try System.open(path, flags: OpenFlags.readWrite | OpenFlags.create | OpenFlags.noFollow, mode: 0o600)
        } catch let error as SystemError {
            throw KeysmithError(.ioFailure, "cannot open the Secret Service writer lock: \(error)")
        }
        defer { System.close(fd) }
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        do {
            while try !System.tryLockExclusive(fd, path: path) {
                guard clock.now < deadline else {
                    throw KeysmithError(
                        .timedOut,
                        "another process held the Secret Service writer lock (\(path)) for longer than the timeout; is a keysmith process hung?")
                }
                System.sleep(microseconds: 2_000)
            }
        } catch let error as SystemError {
            throw KeysmithError(.ioFailure, "cannot take the Secret Service writer lock: \(error)")
        }
        defer { System.unlock(fd) }
        return try body()
    }
}
