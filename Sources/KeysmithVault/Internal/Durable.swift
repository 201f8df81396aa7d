import FoundationEssentials
import Keysmith
import KeysmithCredentials
import KeysmithCrypto
import KeysmithSystem
import Synchronization

/// How both formats number their logs (and a history names the commit it reaches).
enum LogName {
    /// `value` as 16 lower-case hex digits, zero-padded: a log's file name.
    static func hex16(_ value: UInt64) -> String {
        let digits = String(value, radix: 16)
        return String(repeating: "0", count: max(0, 16 - digits.count)) + digits
    }

    /// The sequence number a log's file name gives, when the name is exactly how ``hex16(_:)``
    /// writes one and the number is one a log can have (1 or more): `UInt64(_:radix:)` alone
    /// also reads `+00000000000000a` and upper-case digits, and no log is numbered 0 — names no
    /// writer makes (a stray file, kept for `verify` to report, never taken for a log).
    static func sequence(_ name: String) -> UInt64? {
        guard name.utf8.count == 16, let number = UInt64(name, radix: 16), number >= 1, hex16(number) == name else { return nil }
        return number
    }
}

/// Atomic, durable file replacement: temporary file (mode 0600, created exclusively), write,
/// fsync, rename over the target, fsync of the directory. Readers see the old file or the new
/// one, never a mix; after `write` returns, the new file survives a crash.
enum Durable {
    /// `damaged-<UTC time>` under `root` (with `-2`, `-3`, … when it exists), made 0700 and
    /// flushed: where a repair moves the files it replaces. Returns its name.
    static func makeAsideDirectory(in root: String, at now: Date) throws -> String {
        let stamp = String(iso8601(now).filter { $0 != "-" && $0 != ":" })
        for attempt in 1...1000 {
            let name = "damaged-" + stamp + (attempt == 1 ? "" : "-\(attempt)")
            if try io({ try System.mkdir(root + "/" + name) }) {
                try io { try System.fsyncDirectory(root) }
                return name
            }
        }
        throw KeysmithError(.ioFailure, "cannot make a directory for the damaged files under \(root)")
    }

    static let temporaryPrefix = ".tmp-"

    /// Replaces `path` atomically and durably.
    /// With `sync: false` nothing is flushed: atomic but not durable (the rollback anchor,
    /// which a crash may only set back).
    static func write(_ bytes: [UInt8], to path: String, directory: String, sync: Bool = true) throws {
        let temporary = try writeTemporary(bytes, directory: directory, sync: sync)
        try io {
            try FaultInjection.step()
            do {
                try System.rename(temporary, path)
            } catch {
                try? System.unlink(temporary)
                throw error
            }
            if sync {
                try FaultInjection.step()
                try System.fsyncDirectory(directory)
            }
        }
    }

    /// Creates `path` atomically and durably; fails with `EEXIST` if it exists (a hard link,
    /// unlike a rename, never replaces a file another writer made).
    static func create(_ bytes: [UInt8], at path: String, directory: String) throws {
        try create(at: path, directory: directory) { fd, temporary in try System.writeAll(fd, bytes, path: temporary) }
    }

    /// The same, for a file that `fill` writes into the temporary file's descriptor, in any
    /// order (a large commit is written in pieces rather than built whole in memory); the file
    /// is synced and linked only after `fill` returns.
    static func create(at path: String, directory: String, _ fill: (_ fd: Descriptor, _ temporary: String) throws -> Void) throws {
        let temporary = try writeTemporary(directory: directory, sync: true, fill)
        defer { try? System.unlink(temporary) }
        try io {
            try FaultInjection.step()
            try System.link(temporary, path)
            try FaultInjection.step()
            try System.fsyncDirectory(directory)
        }
    }

    /// A new temporary file in `directory` (mode 0600, created exclusively) holding `bytes`, synced.
    static func writeTemporary(_ bytes: [UInt8], directory: String, sync: Bool = true) throws -> String {
        try writeTemporary(directory: directory, sync: sync) { fd, temporary in try System.writeAll(fd, bytes, path: temporary) }
    }

    private static func writeTemporary(
        directory: String, sync: Bool, _ fill: (_ fd: Descriptor, _ temporary: String) throws -> Void
    ) throws -> String {
        let random = (try? Random.bytes(count: 6).hexString) ?? "000000000000"
        let temporary = directory + "/" + temporaryPrefix + "\(System.processID)-" + random
        try io {
            try FaultInjection.step()
            let fd = try System.open(temporary, flags: OpenFlags.writeOnly | OpenFlags.create | OpenFlags.exclusive, mode: 0o600)
            do {
                try FaultInjection.step()
                try fill(fd, temporary)
                if sync {
                    try FaultInjection.step()
                    try System.fsync(fd, path: temporary)
                }
                System.close(fd)
            } catch {
                System.close(fd)
                try? System.unlink(temporary)
                throw error
            }
        }
        return temporary
    }
}

/// Crash injection for the fault tests: once armed (by the `vault-stress` test helper, from its
/// `KEYSMITH_FAULT_EXIT_AT=N`), the process ends (exit status 86, no clean-up, as a SIGKILL
/// would) just before the Nth file-system step of the vault's durable writes. Package-only and
/// never armed by the library itself: no environment variable can make a program that embeds
/// the vault exit.
package enum FaultInjection {
    /// The step to exit at, and the steps taken so far.
    private static let state = Mutex<(exitAt: Int?, count: Int)>((nil, 0))

    /// Arms the crash at step `exitAt` (counting from 1), or disarms it with `nil`.
    package static func arm(exitAt: Int?) {
        state.withLock { $0 = (exitAt, 0) }
    }

    static func step() throws {
        let reached = state.withLock { state -> Bool in
            guard let exitAt = state.exitAt else { return false }
            state.count += 1
            return state.count >= exitAt
        }
        if reached { System.exitImmediately(86) }
    }
}
