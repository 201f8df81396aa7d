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

    /// What a mark file holds.
    package enum Inspection: Equatable {
        /// There is no mark of that name.
        case absent
        /// A well-formed mark.
        case mark(sequence: UInt64, value: String)
        /// Something is there that is not a well-formed mark (not a regular file, too large,
        /// not exactly one `HEADER SEQUENCE VALUE` line): why.
        case damaged(String)
    }

    /// Reads a mark strictly: exactly `HEADER SEQUENCE VALUE` and a line feed, in a regular file
    /// of at most 4 KiB opened without following links or waiting (a FIFO, a device, a directory
    /// or a link in its place is damage, never read).
    package func inspect(_ name: String, header: String) -> Inspection {
        let opened: (fd: Descriptor, status: System.FileStatus)?
        do {
            opened = try System.openRegularFile(path(name), maximumSize: 4096)
        } catch let error as SystemError where error.isUnusableFile {
            return .damaged("it is not a regular file of at most 4 KiB (\(error))")
        } catch {
            return .damaged("it cannot be read (\(error))")
        }
        guard let (fd, _) = opened else { return .absent }
        defer { System.close(fd) }
        guard let bytes = try? System.readAll(fd, path: path(name), atMost: 4096) else { return .damaged("it cannot be read") }
        guard bytes.last == 0x0A, let text = String(validating: bytes.dropLast(), as: UTF8.self) else {
            return .damaged("it is not one line of text")
        }
        let parts = text.split(separator: " ", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0] == header else { return .damaged("it is not a `\(header) SEQUENCE VALUE` line") }
        guard let sequence = UInt64(parts[1]), String(sequence) == parts[1] else {
            return .damaged("its sequence is not a decimal number")
        }
        return .mark(sequence: sequence, value: String(parts[2]))
    }

    /// The mark, or `nil` when there is none or it is damaged (for marks that are a second line of
    /// defence only; the vault's anchor uses ``inspect(_:header:)`` and treats damage as damage).
    package func read(_ name: String, header: String) -> (sequence: UInt64, value: String)? {
        guard case .mark(let sequence, let value) = inspect(name, header: header) else { return nil }
        return (sequence, value)
    }

    /// Records a newer mark: only when `sequence` is above the one recorded.
    package func advance(_ name: String, header: String, sequence: UInt64, value: String) {
        do {
            let lock = try openLock()
            defer { System.close(lock) }
            // Never wait: a process stopped while holding the lock must not hang anything.
            guard try System.tryLockExclusive(lock, path: directory + "/.lock") else { return }
            try advanceLocked(name, header: header, sequence: sequence, value: value)
        } catch {
            // Not fatal: what the mark watches is intact; the next write tries again.
        }
    }

    /// The lock every writer of these marks takes, held: for a writer that must not skip its
    /// advance (a repair, whose new sequence the mark must learn). Polls for at most `timeout`
    /// seconds; `nil` when another process held it all that time. Release it with
    /// ``release(_:)`` after ``advance(_:header:sequence:value:holding:)``.
    package func lock(waitingUpTo timeout: Double) throws -> Descriptor? {
        let lock = try openLock()
        var waited = 0.0
        while true {
            if try System.tryLockExclusive(lock, path: directory + "/.lock") { return lock }
            guard waited < timeout else {
                System.close(lock)
                return nil
            }
            System.sleep(microseconds: 20_000)
            waited += 0.02
        }
    }

    /// Records a newer mark under the lock ``lock(waitingUpTo:)`` took; throws when it cannot be
    /// written (a damaged mark in its place is left alone, as always: that is not an error).
    package func advance(_ name: String, header: String, sequence: UInt64, value: String, holding lock: Descriptor) throws {
        try advanceLocked(name, header: header, sequence: sequence, value: value)
    }

    /// Lets go of a lock ``lock(waitingUpTo:)`` took.
    package func release(_ lock: Descriptor) {
        System.unlock(lock)
        System.close(lock)
    }

    private func openLock() throws -> Descriptor {
        var current = ""
        for component in directory.split(separator: "/") {
            current += "/" + component
            try System.mkdir(current, mode: 0o700)
        }
        return try System.open(directory + "/.lock", flags: OpenFlags.readWrite | OpenFlags.create | OpenFlags.noFollow, mode: 0o600)
    }

    private func advanceLocked(_ name: String, header: String, sequence: UInt64, value: String) throws {
        switch inspect(name, header: header) {
        case .mark(let existing, _) where existing >= sequence: return
        case .damaged: return  // never overwritten silently: the owner decides (remove)
        default: break
        }
        try replace(name, with: Array("\(header) \(sequence) \(value)\n".utf8))
    }

    /// Forgets a mark (after a deliberate restore from a backup), whatever is in its place: a
    /// file, a link, a FIFO, or an empty directory. Nothing there is not an error.
    package func remove(_ name: String) throws {
        do {
            try System.unlink(path(name))
        } catch let error as SystemError where error.isNotFound {
            return
        } catch let error as SystemError where error.isDirectory {
            try System.removeDirectory(path(name))
        }
    }

    /// The path of a mark, for messages.
    package func location(_ name: String) -> String { path(name) }

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
