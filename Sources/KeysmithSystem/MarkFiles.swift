/// Small forward-only marks kept outside a store: the newest position (a sequence and a value
/// such as a MAC or a hash) this machine saw of something, one file per name, one line each,
/// `HEADER SEQUENCE VALUE`. The vault's rollback anchor and the audit log's anchor use them.
///
/// Writes are best effort, atomic (temporary file and rename) and not flushed: a crash can only
/// set a mark back, which weakens it and never breaks what it watches. They only go forward,
/// under a lock every process of the user shares, never waited for.
package struct MarkFiles: Sendable {
    package let directory: String

    package init(directory: String) {
        self.directory = directory
    }

    /// `$KEYSMITH_ANCHOR_DIR`, else `$XDG_STATE_HOME/keysmith/anchors`, else
    /// `~/.local/state/keysmith/anchors`.
    package static var defaultDirectory: String {
        if let explicit = System.environment("KEYSMITH_ANCHOR_DIR"), explicit.hasPrefix("/") { return explicit }
        if let state = System.environment("XDG_STATE_HOME"), state.hasPrefix("/") { return state + "/keysmith/anchors" }
        return (System.environment("HOME") ?? "/tmp") + "/.local/state/keysmith/anchors"
    }

    private func path(_ name: String) -> String { directory + "/" + name }

    /// The mark, or `nil` when there is none or it cannot be read (a mark is a second line of
    /// defence: it never stops anything by being missing or damaged).
    package func read(_ name: String, header: String) -> (sequence: UInt64, value: String)? {
        guard let opened = try? System.openRegularFile(path(name), maximumSize: 4096) else { return nil }
        let fd = opened.fd
        defer { System.close(fd) }
        guard let bytes = try? System.readAll(fd, path: path(name)) else { return nil }
        let parts = String(decoding: bytes, as: UTF8.self).split(whereSeparator: \.isWhitespace)
        guard parts.count == 3, parts[0] == header, let sequence = UInt64(parts[1]) else { return nil }
        return (sequence, String(parts[2]))
    }

    /// Records a newer mark: only when `sequence` is above the one recorded.
    package func advance(_ name: String, header: String, sequence: UInt64, value: String) {
        do {
            var current = ""
            for component in directory.split(separator: "/") {
                current += "/" + component
                try System.mkdir(current, mode: 0o700)
            }
            let lock = try System.open(directory + "/.lock", flags: OpenFlags.readWrite | OpenFlags.create | OpenFlags.noFollow, mode: 0o600)
            defer { System.close(lock) }
            // Never wait: a process stopped while holding the lock must not hang anything.
            guard try System.tryLockExclusive(lock, path: directory + "/.lock") else { return }
            if let existing = read(name, header: header), existing.sequence >= sequence { return }
            try replace(name, with: Array("\(header) \(sequence) \(value)\n".utf8))
        } catch {
            // Not fatal: what the mark watches is intact; the next write tries again.
        }
    }

    /// Forgets a mark (after a deliberate restore from a backup).
    package func remove(_ name: String) throws {
        try System.unlink(path(name))
    }

    /// Writes the file through a temporary one renamed over it (under the lock: one writer).
    private func replace(_ name: String, with bytes: [UInt8]) throws {
        let temporary = directory + "/.tmp-" + name + "-" + String(System.processID)
        try? System.unlink(temporary)
        let fd = try System.open(temporary, flags: OpenFlags.writeOnly | OpenFlags.create | OpenFlags.exclusive | OpenFlags.noFollow, mode: 0o600)
        do {
            defer { System.close(fd) }
            try System.writeAll(fd, bytes, path: temporary)
        } catch {
            try? System.unlink(temporary)
            throw error
        }
        do {
            try System.rename(temporary, path(name))
        } catch {
            try? System.unlink(temporary)
            throw error
        }
    }
}
