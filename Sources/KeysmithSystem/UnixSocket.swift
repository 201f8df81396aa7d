#if canImport(Glibc)
internal import Glibc
#endif
import Synchronization

/// A Unix stream socket: the listening side of `keysmith serve`'s agent, and the connection a
/// command makes to it. Requests and answers are lines; each connection carries one of each.
package final class UnixSocketListener: Sendable {
    private let fd: Mutex<Int32?>
    /// The socket's path.
    package let path: String

    /// Binds `path` (mode 0600: only this user may connect; the directory it is in must
    /// already be private) and listens. A file already at `path` is replaced: the caller holds
    /// the lock that makes it the only listener.
    package init(path: String) throws {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SystemError(call: "socket", path: path, errno: errno) }
        var address = try Self.address(path)
        _ = unlink(path)
        // The socket is made with no permission for others before it can be connected to.
        let previous = umask(0o177)
        let bound = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) == 0 }
        }
        umask(previous)
        guard bound, listen(fd, 64) == 0 else {
            let failure = errno
            Glibc.close(fd)
            throw SystemError(call: "bind", path: path, errno: failure)
        }
        self.fd = Mutex(fd)
        self.path = path
    }

    /// The `sockaddr_un` for `path`; a path longer than the kernel takes is refused.
    static func address(_ path: String) throws -> sockaddr_un {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard bytes.count < capacity, !bytes.contains(0) else { throw SystemError(call: "bind", path: path, errno: ENAMETOOLONG) }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in bytes.enumerated() { raw[index] = byte }
            raw[bytes.count] = 0
        }
        return address
    }

    /// Waits for the next connection (blocking the calling thread); `nil` once closed.
    package func accept() throws -> UnixConnection? {
        guard let listening = fd.withLock({ $0 }) else { return nil }
        while true {
            let accepted = Glibc.accept(listening, nil, nil)
            if accepted >= 0 {
                _ = fcntl(accepted, F_SETFD, FD_CLOEXEC)
                // A client that never reads its answer cannot hold the handler for ever.
                UnixConnection.setTimeout(accepted, SO_SNDTIMEO, seconds: 10)
                return UnixConnection(fd: accepted)
            }
            let failure = errno
            if failure == EINTR || failure == ECONNABORTED { continue }
            if fd.withLock({ $0 }) == nil { return nil }
            // Out of descriptors (a client holding many connections): wait, do not die.
            if failure == EMFILE || failure == ENFILE || failure == ENOBUFS || failure == ENOMEM {
                usleep(50_000)
                continue
            }
            throw SystemError(call: "accept", path: path, errno: failure)
        }
    }

    /// Stops listening and removes the socket's file.
    package func close() {
        fd.withLock { fd in
            guard let open = fd else { return }
            // shutdown wakes a thread blocked in accept on Linux.
            _ = shutdown(open, Int32(SHUT_RDWR))
            Glibc.close(open)
            _ = unlink(path)
            fd = nil
        }
    }

    deinit { close() }
}

/// One connection: a request line read with a bound, an answer line written.
package final class UnixConnection: Sendable {
    private let fd: Int32

    init(fd: Int32) { self.fd = fd }

    /// Connects to the socket at `path`; `nil` when nothing listens there (no file, or a file
    /// left by a process that is gone).
    package static func connect(_ path: String, timeout: Duration) throws -> UnixConnection? {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SystemError(call: "socket", path: path, errno: errno) }
        // A listener whose queue is full (stopped with its connections pending) makes connect
        // wait: bounded by the send timeout, which Linux applies to a Unix socket's connect.
        let (seconds, _) = timeout.components
        setTimeout(fd, SO_SNDTIMEO, seconds: Int(seconds))
        var address = try UnixSocketListener.address(path)
        let connected = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { generic in
                System.retrying { Glibc.connect(fd, generic, socklen_t(MemoryLayout<sockaddr_un>.size)) } == 0
            }
        }
        if connected { return UnixConnection(fd: fd) }
        let failure = errno
        Glibc.close(fd)
        if failure == ENOENT || failure == ECONNREFUSED || failure == ENOTSOCK { return nil }
        throw SystemError(call: "connect", path: path, errno: failure)
    }

    /// Sets a socket's send or receive timeout.
    static func setTimeout(_ fd: Int32, _ option: Int32, seconds: Int) {
        var value = timeval(tv_sec: seconds, tv_usec: 0)
        _ = setsockopt(fd, SOL_SOCKET, option, &value, socklen_t(MemoryLayout<timeval>.size))
    }

    /// The user and process at the other end, as the kernel saw them when it connected.
    package func peer() -> (uid: UInt32, pid: Int32)? {
        // Linux's `struct ucred` and `SO_PEERCRED` (17), which Glibc declares only for _GNU_SOURCE.
        struct Credentials { var pid: Int32 = 0; var uid: UInt32 = .max; var gid: UInt32 = .max }
        var credentials = Credentials()
        var length = socklen_t(MemoryLayout<Credentials>.size)
        guard getsockopt(fd, SOL_SOCKET, 17, &credentials, &length) == 0, length == socklen_t(MemoryLayout<Credentials>.size) else { return nil }
        return (credentials.uid, credentials.pid)
    }

    /// Reads one line (without its `\n`), at most `limit` bytes, within `timeout` in all;
    /// `nil` when none came whole.
    package func readLine(limit: Int, timeout: Duration) -> [UInt8]? {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        var line: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65_536)
        // The line may hold a secret: the buffer is overwritten before it is freed.
        defer { for index in chunk.indices { chunk[index] = 0 } }
        while line.count <= limit {
            let left = deadline - clock.now
            guard left > .zero else { return nil }
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let (seconds, attoseconds) = left.components
            let ready = poll(&poller, 1, Int32(clamping: seconds * 1000 + attoseconds / 1_000_000_000_000_000 + 1))
            if ready < 0 && errno == EINTR { continue }
            guard ready > 0 else { return nil }
            let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { return nil }
            if let end = chunk[0..<count].firstIndex(of: 10) {
                line += chunk[0..<end]
                return line.count <= limit ? line : nil
            }
            line += chunk[0..<count]
        }
        return nil
    }

    /// Writes `bytes` and a `\n`; `false` when the other end went away.
    @discardableResult
    package func writeLine(_ bytes: [UInt8]) -> Bool {
        var remaining = bytes + [10]
        var offset = 0
        while offset < remaining.count {
            let written = remaining.withUnsafeBytes { raw in
                send(fd, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
            }
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { return false }
            offset += written
        }
        // The line may hold a secret: overwritten before it is freed.
        for index in remaining.indices { remaining[index] = 0 }
        return true
    }

    deinit { Glibc.close(fd) }
}
