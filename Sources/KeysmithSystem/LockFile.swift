import Synchronization

/// An exclusive `flock` on a file of a directory, held until ``release()`` or the process's
/// end: the named locks of the file vault and the Secret Service (`ExclusiveLocking`).
///
/// `flock` locks belong to an open file description, so two holders in one process contend as
/// two processes do. The file is never removed (removing it while another process waits on
/// its descriptor would let a third lock a new file of the same name).
package final class LockFile: Sendable {
    private let fd: Mutex<Int32?>
    package let path: String

    private init(fd: Int32, path: String) {
        self.fd = Mutex(fd)
        self.path = path
    }

    /// Takes the lock for `name` in `directory` (made 0700 when missing), without waiting.
    /// The file's name is a 128-bit digest of `name` (any text), so names of any length or
    /// content are safe; two names sharing a digest would only share a lock.
    ///
    /// - Returns: The lock, or `nil` when another open file description holds it.
    package static func tryAcquire(directory: String, name: String) throws -> LockFile? {
        _ = try System.mkdir(directory, mode: 0o700)
        let path = directory + "/" + digest(name) + ".lock"
        let fd = try System.open(path, flags: OpenFlags.readWrite | OpenFlags.create | OpenFlags.noFollow, mode: 0o600)
        do {
            guard try System.tryLockExclusive(fd, path: path) else {
                System.close(fd)
                return nil
            }
        } catch {
            System.close(fd)
            throw error
        }
        return LockFile(fd: fd, path: path)
    }

    /// Releases the lock (closing its descriptor); again, does nothing.
    package func release() {
        fd.withLock { fd in
            guard let held = fd else { return }
            System.unlock(held)
            System.close(held)
            fd = nil
        }
    }

    deinit { release() }

    /// Two FNV-1a 64-bit hashes of the name's bytes with different offsets, in hex: a file name.
    static func digest(_ name: String) -> String {
        var first: UInt64 = 0xcbf2_9ce4_8422_2325, second: UInt64 = 0x84222325_cbf29ce4
        for byte in name.utf8 {
            first = (first ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
            second = (second ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
            second = second &+ first >> 29
        }
        func hex(_ value: UInt64) -> String {
            let text = String(value, radix: 16)
            return String(repeating: "0", count: 16 - text.count) + text
        }
        return hex(first) + hex(second)
    }
}
