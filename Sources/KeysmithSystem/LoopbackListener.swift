#if canImport(Glibc)
internal import Glibc
#endif
import Synchronization

/// A TCP listener on 127.0.0.1 at a port the kernel picks, for the loopback redirect of a
/// browser sign-in (RFC 8252 §7.3). It takes one connection, reads one request head, answers,
/// and closes; waiting never blocks (``tryAccept()`` polls).
package final class LoopbackListener: Sendable {
    private let fd: Mutex<Int32?>
    /// The port it listens on.
    package let port: Int

    /// Binds 127.0.0.1 at a port of the kernel's choosing (backlog 1).
    package init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { throw SystemError(call: "socket", path: "127.0.0.1", errno: errno) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian  // 127.0.0.1
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        // bind and getsockname take the address as a generic sockaddr of the given length.
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, length) == 0 && listen(fd, 1) == 0 && getsockname(fd, $0, &length) == 0
            }
        }
        guard bound else {
            let failure = errno
            Glibc.close(fd)
            throw SystemError(call: "bind", path: "127.0.0.1", errno: failure)
        }
        self.fd = Mutex(fd)
        self.port = Int(UInt16(bigEndian: address.sin_port))
    }

    /// A connection when one is waiting, else `nil` (never waits).
    package func tryAccept() throws -> LoopbackConnection? {
        try fd.withLock { fd -> LoopbackConnection? in
            guard let listening = fd else { return nil }
            let accepted = accept(listening, nil, nil)
            if accepted >= 0 {
                _ = fcntl(accepted, F_SETFD, FD_CLOEXEC)
                return LoopbackConnection(fd: accepted)
            }
            // Nothing waiting, or a connection that went away before it was taken.
            if errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED { return nil }
            throw SystemError(call: "accept", path: "127.0.0.1:\(port)", errno: errno)
        }
    }

    /// Stops listening: later connections are refused.
    package func close() {
        fd.withLock { fd in
            if let open = fd { Glibc.close(open) }
            fd = nil
        }
    }

    deinit { close() }
}

/// One accepted connection: its request head read with a bound, an answer written, closed.
package final class LoopbackConnection: Sendable {
    private let fd: Int32

    init(fd: Int32) { self.fd = fd }

    /// Reads until the end of the request head (`\r\n\r\n`), at most `limit` bytes and at
    /// most `timeout` in all (a client trickling bytes is cut off too); `nil` when no whole
    /// head came.
    package func readHead(limit: Int = 8192, timeout: Duration = .seconds(3)) -> [UInt8]? {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        var head: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1024)
        while head.count < limit {
            let left = deadline - clock.now
            guard left > .zero else { return nil }
            let milliseconds = Int32(min(Int64(left.components.seconds) * 1000 + left.components.attoseconds / 1_000_000_000_000_000 + 1, 60_000))
            var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&descriptor, 1, milliseconds) == 1 else { continue }
            let count = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count <= 0 { return nil }
            head += chunk[..<count]
            if containsEnd(head) { return head }
        }
        return nil
    }

    private func containsEnd(_ bytes: [UInt8]) -> Bool {
        guard bytes.count >= 4 else { return false }
        for index in 0...(bytes.count - 4) where bytes[index] == 13 && bytes[index + 1] == 10 && bytes[index + 2] == 13 && bytes[index + 3] == 10 {
            return true
        }
        return false
    }

    /// Writes the whole answer (best effort) and closes.
    package func answer(_ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            if written <= 0 { break }
            offset += written
        }
        Glibc.close(fd)
    }
}
