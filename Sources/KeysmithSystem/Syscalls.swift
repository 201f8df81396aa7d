#if canImport(Glibc)
internal import Glibc
#elseif canImport(Musl)
internal import Musl
#elseif canImport(Darwin)
internal import Darwin
#endif

/// A failed system call: which call, on which path, and the `errno` it set.
package struct SystemError: Error, Sendable, Equatable, CustomStringConvertible {
    package let call: String
    package let path: String
    /// The `errno` the call set: read through the predicates below (`isNotFound`, …), never compared
    /// as a number outside this module.
    let errno: Int32

    package var description: String {
        "\(call) \(path): \(String(cString: strerror(errno)))"
    }

    /// Whether the call failed because the path does not exist.
    package var isNotFound: Bool { errno == ENOENT }
    /// Whether the call failed because the path, or a directory on it, is not a directory.
    package var isNotDirectory: Bool { errno == ENOTDIR }
    /// Whether the path is a directory where a file was expected (`EISDIR`).
    package var isDirectory: Bool { errno == EISDIR }
    /// Whether the call failed for lack of permission.
    package var isPermissionDenied: Bool { errno == EACCES || errno == EPERM }
    /// Whether the target already exists.
    package var isAlreadyExists: Bool { errno == EEXIST }
    /// Whether a read found more than the limit it was given (``System/readAll(_:path:atMost:)``).
    package var isOverLimit: Bool { errno == EFBIG }
    /// Whether the file system is mounted read-only.
    package var isReadOnlyFileSystem: Bool { errno == EROFS }
    /// The file system is full, or the user's quota is.
    package var isOutOfSpace: Bool { errno == ENOSPC || errno == EDQUOT }
    /// A call that waited past its timeout (a socket's send or receive timeout).
    package var isTimedOut: Bool { errno == EAGAIN || errno == EWOULDBLOCK || errno == ETIMEDOUT || errno == EINPROGRESS }

    /// What a person can do about this error, when it is one the system set for a reason
    /// outside the data (permissions, a read-only mount, a full disk): `nil` otherwise.
    package var advice: String? {
        if isPermissionDenied {
            return "check the owner and mode of \(path) and of its directories (ls -ld); nothing is known to be damaged"
        }
        if isReadOnlyFileSystem { return "the file system holding \(path) is mounted read-only; remount it read-write, or use a copy elsewhere" }
        if isOutOfSpace { return "the file system holding \(path) is full (or the quota is used up); free some space and try again: nothing was changed" }
        return nil
    }
    /// Whether the path names something that is not a usable regular file (a symbolic link, a
    /// FIFO, a device, a directory, or a file too large): a property of that one file, not of
    /// the directory or the process.
    package var isUnusableFile: Bool { errno == ELOOP || errno == EINVAL || errno == EFBIG || errno == ENXIO || errno == EISDIR }
}

/// An open file descriptor: the number the kernel gave, typed so that it is never mistaken for
/// a count, an offset, a flag or an `errno`, nor passed where a path was meant. Only
/// KeysmithSystem makes one (``System/open(_:flags:mode:)``) or reads its number.
package struct Descriptor: Hashable, Sendable, CustomStringConvertible {
    /// The kernel's number.
    package let rawValue: Int32

    /// A descriptor the process already has open (standard input, a `--passphrase-fd N`), or
    /// one a C call returned.
    package init(_ rawValue: Int32) { self.rawValue = rawValue }

    /// Standard input, output and error.
    package static let standardInput = Descriptor(0)
    package static let standardOutput = Descriptor(1)
    package static let standardError = Descriptor(2)

    /// `fd N`, as errors name it.
    package var description: String { "fd \(rawValue)" }
}

/// Each system call goes through one function here, so `errno` handling lives in one place and
/// no pointer code leaks into the stores.
package enum System {
    /// Retries a call interrupted by a signal.
    static func retrying(_ body: () -> Int32) -> Int32 {
        while true {
            let result = body()
            if result == -1 && errno == EINTR { continue }
            return result
        }
    }

    /// Opens a file. The corresponding C function is `open`; `O_CLOEXEC` is always added.
    package static func open(_ path: String, flags: Int32, mode: UInt32 = 0o600) throws -> Descriptor {
        let fd = retrying { Glibc.open(path, flags | O_CLOEXEC, mode) }
        guard fd >= 0 else { throw SystemError(call: "open", path: path, errno: errno) }
        return Descriptor(fd)
    }

    /// Closes a descriptor, ignoring errors (nothing useful can be done about them here).
    package static func close(_ fd: Descriptor) {
        _ = Glibc.close(fd.rawValue)
    }

    /// Writes every byte. The corresponding C function is `write`.
    package static func writeAll(_ fd: Descriptor, _ bytes: [UInt8], path: String) throws {
        try bytes.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = Glibc.write(fd.rawValue, buffer.baseAddress! + offset, buffer.count - offset)
                if written < 0 {
                    if errno == EINTR { continue }
                    throw SystemError(call: "write", path: path, errno: errno)
                }
                offset += written
            }
        }
    }

    /// Reads a whole file, or returns `nil` if it does not exist.
    package static func readFile(_ path: String, atMost limit: Int = .max) throws -> [UInt8]? {
        let fd: Descriptor
        do {
            fd = try open(path, flags: O_RDONLY)
        } catch let error as SystemError where error.isNotFound {
            return nil
        }
        defer { close(fd) }
        return try readAll(fd, path: path, atMost: limit)
    }

    /// Reads a whole regular file of at most `maximumSize` bytes, or returns `nil` if it does not
    /// exist. It is opened without following a link and without waiting (`O_NOFOLLOW |
    /// O_NONBLOCK`): a link, FIFO, device or directory in its place is an error (its
    /// ``SystemError/isUnusableFile`` holds), never followed, waited on or read without end.
    package static func readRegularFile(_ path: String, maximumSize: Int) throws -> [UInt8]? {
        guard let (fd, _) = try openRegularFile(path, maximumSize: maximumSize) else { return nil }
        defer { close(fd) }
        return try readAll(fd, path: path, atMost: maximumSize)
    }

    /// Reads from a descriptor to its end. The corresponding C function is `read`. More than
    /// `limit` bytes (a device such as /dev/zero never ends) is an `EFBIG` error, found without
    /// reading more than `limit` + 1 bytes.
    package static func readAll(_ fd: Descriptor, path: String, atMost limit: Int = .max) throws -> [UInt8] {
        var status = stat()
        let size = fstat(fd.rawValue, &status) == 0 ? Int(status.st_size) : 0
        guard size <= limit else { throw SystemError(call: "read", path: path, errno: EFBIG) }
        var bytes = [UInt8](repeating: 0, count: max(size, 0) + 1)
        var filled = 0
        while true {
            guard filled <= limit else { throw SystemError(call: "read", path: path, errno: EFBIG) }
            if filled == bytes.count { bytes.append(contentsOf: [UInt8](repeating: 0, count: max(4096, bytes.count))) }
            // Never more than one byte past the limit, so that an endless file is found out
            // after reading `limit` + 1 bytes.
            let room = limit == .max ? bytes.count - filled : min(bytes.count - filled, limit - filled + 1)
            let count = bytes.withUnsafeMutableBytes { buffer in
                Glibc.read(fd.rawValue, buffer.baseAddress! + filled, room)
            }
            if count < 0 {
                if errno == EINTR { continue }
                throw SystemError(call: "read", path: path, errno: errno)
            }
            if count == 0 { break }
            filled += count
        }
        bytes.removeSubrange(filled...)
        return bytes
    }

    /// Flushes a descriptor's data and metadata to the disk. The corresponding C function is `fsync`.
    package static func fsync(_ fd: Descriptor, path: String) throws {
        guard retrying({ Glibc.fsync(fd.rawValue) }) == 0 else { throw SystemError(call: "fsync", path: path, errno: errno) }
    }

    /// Makes a directory's entries (creations, renames, removals) durable.
    package static func fsyncDirectory(_ path: String) throws {
        let fd = try open(path, flags: O_RDONLY | O_DIRECTORY)
        defer { close(fd) }
        try fsync(fd, path: path)
    }

    /// Atomically replaces `destination` with `source`. The corresponding C function is `rename`.
    package static func rename(_ source: String, _ destination: String) throws {
        guard Glibc.rename(source, destination) == 0 else {
            throw SystemError(call: "rename", path: "\(source) -> \(destination)", errno: errno)
        }
    }

    /// Creates a hard link; fails if `destination` exists. The corresponding C function is `link`.
    package static func link(_ source: String, _ destination: String) throws {
        guard Glibc.link(source, destination) == 0 else {
            throw SystemError(call: "link", path: destination, errno: errno)
        }
    }

    /// Removes a file; a missing file is not an error. The corresponding C function is `unlink`.
    package static func unlink(_ path: String) throws {
        guard Glibc.unlink(path) == 0 || errno == ENOENT else {
            throw SystemError(call: "unlink", path: path, errno: errno)
        }
    }

    /// Creates a directory with a mode; returns `false` if it already existed.
    /// The corresponding C function is `mkdir`.
    @discardableResult
    package static func mkdir(_ path: String, mode: UInt32 = 0o700) throws -> Bool {
        if Glibc.mkdir(path, mode) == 0 { return true }
        if errno == EEXIST { return false }
        throw SystemError(call: "mkdir", path: path, errno: errno)
    }

    /// What `stat` says of a path that matters to the stores.
    package struct FileStatus: Sendable, Equatable {
        package var inode: UInt64
        package var size: Int
        package var mode: UInt32
        package var isDirectory: Bool
        package var modifiedNanoseconds: Int64
        /// The owner's user id.
        package var owner: UInt32 = 0
    }

    /// The status of a path, or `nil` if it does not exist. The corresponding C function is `stat`.
    package static func status(_ path: String) throws -> FileStatus? {
        var status = stat()
        guard stat(path, &status) == 0 else {
            if errno == ENOENT || errno == ENOTDIR { return nil }
            throw SystemError(call: "stat", path: path, errno: errno)
        }
        return FileStatus(
            inode: UInt64(status.st_ino), size: Int(status.st_size), mode: UInt32(status.st_mode) & 0o7777,
            isDirectory: (status.st_mode & S_IFMT) == S_IFDIR,
            modifiedNanoseconds: Int64(status.st_mtim.tv_sec) * 1_000_000_000 + Int64(status.st_mtim.tv_nsec), owner: UInt32(status.st_uid))
    }

    /// Whether `path` is a directory itself, not a symbolic link to one. The corresponding C
    /// function is `lstat`.
    package static func isRealDirectory(_ path: String) -> Bool {
        var status = stat()
        guard lstat(path, &status) == 0 else { return false }
        return (status.st_mode & S_IFMT) == S_IFDIR
    }

    /// Whether anything is at `path` itself, a dangling symbolic link included. The
    /// corresponding C function is `lstat`.
    package static func entryExists(_ path: String) -> Bool {
        var status = stat()
        return lstat(path, &status) == 0
    }

    /// Removes a directory and everything in it. A symbolic link (to a directory or not) is
    /// removed itself, never followed, so nothing outside `path` is ever touched; a missing
    /// path is not an error, and a directory that cannot be removed at the end is left.
    package static func removeTree(_ path: String) throws {
        guard isRealDirectory(path) else {
            try unlink(path)
            return
        }
        for name in try listDirectory(path) {
            try removeTree(path + "/" + name)
        }
        rmdir(path)
    }

    /// The names in a directory, without `.` and `..`. The corresponding C function is `readdir`.
    package static func listDirectory(_ path: String) throws -> [String] {
        guard let directory = opendir(path) else { throw SystemError(call: "opendir", path: path, errno: errno) }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafePointer(to: entry.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: Int(NAME_MAX) + 1) { String(cString: $0) }
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    /// Takes an exclusive advisory lock, waiting for it. The corresponding C function is `flock`.
    package static func lockExclusive(_ fd: Descriptor, path: String) throws {
        guard retrying({ flock(fd.rawValue, LOCK_EX) }) == 0 else { throw SystemError(call: "flock", path: path, errno: errno) }
    }

    /// Takes an exclusive advisory lock, waiting for another holder at most `timeout` (`nil`:
    /// for ever), polling with growing pauses (2 ms to 100 ms). When the wait has lasted
    /// `noticeAfter`, `notice` is called once with the holder's process id where the kernel
    /// lists it (`/proc/locks`), so that a person or a log learns why nothing happens.
    ///
    /// - Returns: `false` when `timeout` passed with the lock still held elsewhere.
    package static func lockExclusive(_ fd: Descriptor, path: String, timeout: Duration?, noticeAfter: Duration,
                                      notice: (_ holder: Int32?) -> Void) throws -> Bool {
        // No bound: the kernel's own wait (first in, first served), as before there was a bound.
        if timeout == nil, noticeAfter >= .seconds(1 << 40) {
            try lockExclusive(fd, path: path)
            return true
        }
        let clock = ContinuousClock()
        let start = clock.now
        var pause: Duration = .milliseconds(2)
        var noticed = false
        while true {
            if try tryLockExclusive(fd, path: path) { return true }
            let waited = clock.now - start
            if !noticed, waited >= noticeAfter {
                noticed = true
                notice(lockHolder(fd))
            }
            if let timeout, waited >= timeout { return false }
            let (seconds, attoseconds) = pause.components
            sleep(microseconds: UInt32(clamping: seconds * 1_000_000 + attoseconds / 1_000_000_000_000))
            pause = min(pause * 2, .milliseconds(100))
        }
    }

    /// The process that holds a `flock` on the file `fd` is open on, as `/proc/locks` lists it
    /// (`nil` where it does not, or lists no holder for the file).
    package static func lockHolder(_ fd: Descriptor) -> Int32? {
        var status = stat()
        guard fstat(fd.rawValue, &status) == 0, let text = try? readFile("/proc/locks", atMost: 1 << 20) else { return nil }
        // "1: FLOCK  ADVISORY  WRITE 12345 08:01:1234 0 EOF": the device as major:minor in hex.
        // glibc's major() and minor() (macros, which Swift does not import).
        let dev = UInt64(status.st_dev)
        let major = ((dev & 0x0000_0000_000f_ff00) >> 8) | ((dev & 0xffff_f000_0000_0000) >> 32)
        let minor = (dev & 0x0000_0000_0000_00ff) | ((dev & 0x0000_0fff_fff0_0000) >> 12)
        let device = String(major, radix: 16).leftPadded(2) + ":" + String(minor, radix: 16).leftPadded(2) + ":" + String(status.st_ino)
        for line in String(decoding: text, as: UTF8.self).split(separator: "\n") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count >= 6, fields[1] == "FLOCK", fields[5] == device else { continue }
            // A holder in another pid namespace is listed as 0 or -1: unknown here.
            guard let pid = Int32(fields[4]), pid > 0 else { return nil }
            return pid
        }
        return nil
    }

    /// Tries to take an exclusive advisory lock without waiting; `false` if another open file
    /// description holds it. The corresponding C function is `flock` with `LOCK_NB`.
    package static func tryLockExclusive(_ fd: Descriptor, path: String) throws -> Bool {
        if retrying({ flock(fd.rawValue, LOCK_EX | LOCK_NB) }) == 0 { return true }
        if errno == EWOULDBLOCK { return false }
        throw SystemError(call: "flock", path: path, errno: errno)
    }

    /// Sleeps the calling thread. The corresponding C function is `usleep`.
    package static func sleep(microseconds: UInt32) {
        _ = usleep(microseconds)
    }

    /// Ignores a signal from now on (its dispatch source, if any, still sees it). The
    /// corresponding C function is `signal` with `SIG_IGN`.
    package static let interruptSignal = SIGINT
    package static let terminateSignal = SIGTERM

    package static func ignoreSignal(_ number: Int32) {
        _ = signal(number, SIG_IGN)
    }

    /// The real user id of the process. The corresponding C function is `getuid`.
    package static var userID: UInt32 { getuid() }

    /// Releases an advisory lock.
    package static func unlock(_ fd: Descriptor) {
        _ = flock(fd.rawValue, LOCK_UN)
    }

    /// The process's id.
    package static var processID: Int32 { getpid() }

    /// This host's name (`gethostname`), or `nil`.
    package static var hostName: String? {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return nil }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The effective user's login name (`getpwuid_r`), or `nil` when the user database has none.
    package static var userName: String? {
        var record = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 4096)
        // getpwuid_r fills `record` with pointers into `buffer`; the name is copied out before
        // either goes away.
        guard getpwuid_r(geteuid(), &record, &buffer, buffer.count, &result) == 0, result != nil, let name = record.pw_name else {
            return nil
        }
        return String(cString: name)
    }

    /// An environment variable, or `nil`.
    package static func environment(_ name: String) -> String? {
        guard let value = getenv(name) else { return nil }
        return String(cString: value)
    }

    /// Sets an environment variable of this process (and of the programs it runs).
    package static func setEnvironment(_ name: String, _ value: String) { setenv(name, value, 1) }

    /// Removes an environment variable of this process.
    package static func unsetEnvironment(_ name: String) { unsetenv(name) }

    /// Whether the variable `name` is set and its bytes are not UTF-8 (``environment(_:)``
    /// then holds U+FFFD in their place, so two different byte strings read the same).
    package static func environmentIsNotUTF8(_ name: String) -> Bool {
        guard let value = getenv(name) else { return false }
        return String(validatingCString: value) == nil
    }
}

/// Flags for ``System/open(_:flags:mode:)``, re-exported so callers need not import Glibc.
package enum OpenFlags {
    package static let readOnly = O_RDONLY
    package static let writeOnly = O_WRONLY
    package static let readWrite = O_RDWR
    package static let create = O_CREAT
    package static let exclusive = O_EXCL
    package static let truncate = O_TRUNC
    package static let directory = O_DIRECTORY
    package static let noFollow = O_NOFOLLOW
}

extension System {
    /// The status of an open descriptor. The corresponding C function is `fstat`.
    package static func status(fd: Descriptor, path: String) throws -> FileStatus {
        var status = stat()
        guard fstat(fd.rawValue, &status) == 0 else { throw SystemError(call: "fstat", path: path, errno: errno) }
        return FileStatus(
            inode: UInt64(status.st_ino), size: Int(status.st_size), mode: UInt32(status.st_mode) & 0o7777,
            isDirectory: (status.st_mode & S_IFMT) == S_IFDIR,
            modifiedNanoseconds: Int64(status.st_mtim.tv_sec) * 1_000_000_000 + Int64(status.st_mtim.tv_nsec), owner: UInt32(status.st_uid))
    }

    /// Opens a regular file for reading without following a symbolic link (unless
    /// `followingLinks`: for files such as CA bundles that are links by convention) and without
    /// blocking on a FIFO or a device, so a hostile name can neither hang nor redirect the
    /// reader. Returns `nil` when nothing is there.
    ///
    /// - Throws: ``SystemError`` with call `open` and `ELOOP` for a symbolic link, `EINVAL`
    ///   (call `open (not a regular file)`) for a FIFO, device, socket or directory, or
    ///   `EFBIG` when the file is larger than `maximumSize`.
    package static func openRegularFile(_ path: String, maximumSize: Int, followingLinks: Bool = false) throws -> (fd: Descriptor, status: FileStatus)? {
        let fd: Descriptor
        do {
            fd = try open(path, flags: O_RDONLY | O_NONBLOCK | (followingLinks ? 0 : O_NOFOLLOW))
        } catch let error as SystemError where error.isNotFound {
            return nil
        }
        do {
            var raw = stat()
            guard fstat(fd.rawValue, &raw) == 0 else { throw SystemError(call: "fstat", path: path, errno: errno) }
            guard (raw.st_mode & S_IFMT) == S_IFREG else {
                throw SystemError(call: "open (not a regular file)", path: path, errno: EINVAL)
            }
            guard Int(raw.st_size) <= maximumSize else { throw SystemError(call: "open (file too large)", path: path, errno: EFBIG) }
            return (fd, try status(fd: fd, path: path))
        } catch {
            close(fd)
            throw error
        }
    }

    /// Reads up to `count` bytes at `offset`; fewer only at the end of the file.
    /// The corresponding C function is `pread`.
    package static func read(_ fd: Descriptor, count: Int, at offset: Int, path: String) throws -> [UInt8] {
        guard count > 0 else { return [] }
        var bytes = [UInt8](repeating: 0, count: count)
        var filled = 0
        while filled < count {
            let got = bytes.withUnsafeMutableBytes { buffer in
                pread(fd.rawValue, buffer.baseAddress! + filled, count - filled, off_t(offset + filled))
            }
            if got < 0 {
                if errno == EINTR { continue }
                throw SystemError(call: "pread", path: path, errno: errno)
            }
            if got == 0 { break }
            filled += got
        }
        if filled < count { bytes.removeSubrange(filled...) }
        return bytes
    }

    /// Writes every byte at `offset`. The corresponding C function is `pwrite`.
    package static func write(_ fd: Descriptor, _ bytes: [UInt8], at offset: Int, path: String) throws {
        try bytes.withUnsafeBytes { buffer in
            var done = 0
            while done < buffer.count {
                let written = pwrite(fd.rawValue, buffer.baseAddress! + done, buffer.count - done, off_t(offset + done))
                if written < 0 {
                    if errno == EINTR { continue }
                    throw SystemError(call: "pwrite", path: path, errno: errno)
                }
                done += written
            }
        }
    }

    /// Ends the process at once with `code`, running no handlers: the fault-injection tests'
    /// stand-in for a crash. The corresponding C function is `_exit`.
    package static func exitImmediately(_ code: Int32) -> Never {
        _exit(code)
    }
}

extension System {
    /// Removes an empty directory, ignoring failure. The corresponding C function is `rmdir`.
    package static func rmdir(_ path: String) {
        _ = Glibc.rmdir(path)
    }

    /// Removes an empty directory. The corresponding C function is `rmdir`.
    package static func removeDirectory(_ path: String) throws {
        guard Glibc.rmdir(path) == 0 else { throw SystemError(call: "rmdir", path: path, errno: errno) }
    }

    /// The absolute path with every link resolved, or `nil` when it does not resolve. The
    /// corresponding C function is `realpath`.
    package static func canonicalPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// The running program's file, with every link resolved (`/proc/self/exe`).
    package static func executablePath() -> String? { canonicalPath("/proc/self/exe") }

    /// Whether `path` is a regular file this process may execute.
    package static func isExecutable(_ path: String) -> Bool {
        guard let found = (try? status(path)) ?? nil, !found.isDirectory else { return false }
        return access(path, X_OK) == 0
    }

    /// Replaces this process with `program`, found as a shell finds it (`execvp`: a name with a
    /// `/` is a path, else each directory of `PATH`), with this process's environment and
    /// `arguments` as its argument vector. Returns only when it failed, with why.
    package static func replaceProcess(searching program: String, arguments: [String]) -> SystemError {
        var vector: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) }
        vector.append(nil)
        defer { for pointer in vector { free(pointer) } }
        execvp(program, vector)
        return SystemError(call: "execvp", path: program, errno: errno)
    }

    /// Replaces this process with the program at `path` (`execv`): same process id, environment
    /// and open descriptors, `arguments` as its argument vector (its name first). Returns only
    /// when it failed, with why.
    package static func replaceProcess(path: String, arguments: [String]) -> SystemError {
        // The argument vector as C strings, ended by a null pointer; freed only if execv fails
        // (on success the process image, and this memory with it, is gone).
        var vector: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) }
        vector.append(nil)
        defer { for pointer in vector { free(pointer) } }
        execv(path, vector)
        return SystemError(call: "execv", path: path, errno: errno)
    }
}

extension String {
    /// The string with zeros in front up to `width` characters.
    fileprivate func leftPadded(_ width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
