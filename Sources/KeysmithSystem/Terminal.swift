#if canImport(Glibc)
internal import Glibc
#elseif canImport(Musl)
internal import Musl
#endif

/// Terminal and standard-stream helpers for the command.
package enum Terminal {
    /// Whether a descriptor is a terminal. The corresponding C function is `isatty`.
    package static func isTerminal(_ fd: Descriptor) -> Bool { isatty(fd.rawValue) == 1 }

    /// Reads a line from the controlling terminal with echo turned off, after printing a prompt
    /// on it; `nil` when there is no terminal. The line's newline is dropped; the caller wipes
    /// the returned bytes.
    package static func readHidden(prompt: String) throws -> [UInt8]? {
        guard let fd = try? System.open("/dev/tty", flags: O_RDWR) else { return nil }
        defer { System.close(fd) }
        var saved = termios()
        guard tcgetattr(fd.rawValue, &saved) == 0 else { return nil }
        var silent = saved
        silent.c_lflag &= ~tcflag_t(ECHO)
        silent.c_lflag |= tcflag_t(ECHONL)
        try System.writeAll(fd, Array(prompt.utf8), path: "/dev/tty")
        guard tcsetattr(fd.rawValue, TCSAFLUSH, &silent) == 0 else { throw SystemError(call: "tcsetattr", path: "/dev/tty", errno: errno) }
        defer { _ = tcsetattr(fd.rawValue, TCSAFLUSH, &saved) }
        var line: [UInt8] = []
        var byte: UInt8 = 0
        while true {
            let count = Glibc.read(fd.rawValue, &byte, 1)
            if count < 0 && errno == EINTR { continue }
            if count <= 0 || byte == UInt8(ascii: "\n") { break }
            line.append(byte)
        }
        byte = 0
        return line
    }

    /// Asks a yes/no question on the controlling terminal; `true` only for `y` or `yes`
    /// (any case), `nil` when there is no terminal.
    package static func confirm(_ question: String) throws -> Bool? {
        guard let fd = try? System.open("/dev/tty", flags: O_RDWR) else { return nil }
        defer { System.close(fd) }
        try System.writeAll(fd, Array((question + " [y/N] ").utf8), path: "/dev/tty")
        var line: [UInt8] = []
        var byte: UInt8 = 0
        while line.count < 16 {
            let count = Glibc.read(fd.rawValue, &byte, 1)
            if count < 0 && errno == EINTR { continue }
            if count <= 0 || byte == UInt8(ascii: "\n") { break }
            line.append(byte)
        }
        let answer = String(decoding: line, as: UTF8.self).lowercased().filter { !$0.isWhitespace }
        return answer == "y" || answer == "yes"
    }

    /// Reads a descriptor to its end (standard input, or `--passphrase-fd N`), at most `limit`
    /// bytes: more is a ``SystemError`` whose ``SystemError/isOverLimit`` is true, found after
    /// reading `limit` + 1 bytes (an input that never ends is refused, not read until memory
    /// runs out).
    package static func readAll(fd: Descriptor, atMost limit: Int) throws -> [UInt8] {
        try System.readAll(fd, path: fd.description, atMost: limit)
    }

    /// The index (from 1) of the first command-line argument that is not valid UTF-8, or `nil`.
    /// Swift's `CommandLine.arguments` repairs such bytes into U+FFFD, so two different byte
    /// strings would read as one name; the command refuses them instead.
    package static func firstNonUTF8Argument() -> Int? {
        for index in 1..<Int(CommandLine.argc) {
            // argv[index] is a NUL-terminated C string owned by the process for its lifetime.
            guard let pointer = CommandLine.unsafeArgv[index] else { continue }
            let bytes = UnsafeBufferPointer(start: pointer, count: strlen(pointer)).map { UInt8(bitPattern: $0) }
            if String(validating: bytes, as: UTF8.self) == nil { return index }
        }
        return nil
    }

    /// Reads what is available from a descriptor into `buffer` (at most its size), waiting for
    /// at least one byte: the count, 0 at the end of input, or -1 on an error. Lets a command
    /// answer each line of a pipe as it arrives instead of after the writer closes it.
    package static func read(fd: Descriptor, into buffer: inout [UInt8]) -> Int {
        while true {
            // The buffer's storage is valid for the call; read(2) writes at most count bytes.
            let count = buffer.withUnsafeMutableBytes { bytes in
                #if canImport(Glibc)
                Glibc.read(fd.rawValue, bytes.baseAddress, bytes.count)
                #else
                Musl.read(fd.rawValue, bytes.baseAddress, bytes.count)
                #endif
            }
            if count < 0 && errno == EINTR { continue }
            return count
        }
    }

    /// Unblocks SIGTERM and SIGINT, which a process inherits blocked when its parent started it
    /// from a thread that blocks them (some test runners and thread pools do): a long-running
    /// command such as `keysmith watch` must stop when asked.
    package static func unblockTerminationSignals() {
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGTERM)
        sigaddset(&set, SIGINT)
        pthread_sigmask(SIG_UNBLOCK, &set, nil)
    }

    /// Writes bytes to standard output or standard error.
    package static func write(_ bytes: [UInt8], to fd: Descriptor) {
        try? System.writeAll(fd, bytes, path: fd.description)
    }
}
