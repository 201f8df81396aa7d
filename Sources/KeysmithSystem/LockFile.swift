import Synchronization

#if canImport(Glibc)
internal import Glibc
#endif

/// An exclusive lock on one byte of a directory's `named.lock` file, held until ``release()``
/// or the process's end: the named locks of the file vault and the Secret Service
/// (`ExclusiveLocking`).
///
/// The lock is an open file description lock (`fcntl` `F_OFD_SETLK`) on the byte at an offset
/// taken from a 62-bit digest of the name: two holders in one process contend as two
/// processes do (unlike classic `fcntl` locks), and every name shares one file (a lock file
/// per name would leave one file behind for each: one per queued revocation).
package final class LockFile: Sendable {
    private let fd: Mutex<Descriptor?>
    package let path: String

    private init(fd: Descriptor, path: String) {
        self.fd = Mutex(fd)
        self.path = path
    }

    /// Linux's `F_OFD_SETLK` (Glibc defines it only for `_GNU_SOURCE`).
    private static let setOpenFileDescriptionLock: Int32 = 37

    /// Takes the lock for `name` in `directory` (made 0700 when missing), without waiting.
    ///
    /// - Returns: The lock, or `nil` when another open file description holds it.
    package static func tryAcquire(directory: String, name: String) throws -> LockFile? {
        _ = try System.mkdir(directory, mode: 0o700)
        let path = directory + "/named.lock"
        let fd = try System.open(path, flags: OpenFlags.readWrite | OpenFlags.create | OpenFlags.noFollow, mode: 0o600)
        // One byte at the name's offset; l_pid must be 0 for an OFD lock.
        var request = flock()
        request.l_type = Int16(F_WRLCK)
        request.l_whence = Int16(SEEK_SET)
        request.l_start = off_t(offset(name))
        request.l_len = 1
        request.l_pid = 0
        let result = withUnsafeMutablePointer(to: &request) { pointer in
            System.retrying { fcntl(fd.rawValue, setOpenFileDescriptionLock, pointer) }
        }
        if result == 0 { return LockFile(fd: fd, path: path) }
        let failure = errno
        System.close(fd)
        if failure == EAGAIN || failure == EACCES { return nil }
        throw SystemError(call: "fcntl(F_OFD_SETLK)", path: path, errno: failure)
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

    /// Whether this lock was not released yet (the process holds it while its descriptor is open).
    package var isHeld: Bool { fd.withLock { $0 != nil } }

    deinit { release() }

    /// The byte to lock for a name: FNV-1a (64-bit) of its bytes, mixed, kept to 62 bits so
    /// the offset is positive. Two names sharing it would only share a lock.
    static func offset(_ name: String) -> Int64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in name.utf8 { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
        hash ^= hash >> 33
        hash = hash &* 0xff51_afd7_ed55_8ccd
        hash ^= hash >> 33
        return Int64(hash & 0x3fff_ffff_ffff_ffff)
    }
}
