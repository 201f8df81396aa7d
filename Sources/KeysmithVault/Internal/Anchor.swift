import KeysmithCrypto
import KeysmithSystem

/// The rollback anchor: the newest commit (sequence and chain MAC) this machine saw of a vault,
/// kept outside the vault directory so that putting the whole directory back to an earlier
/// state, or removing its newest commits, is noticed (docs/format.md, "The anchor").
struct AnchorStore: Sendable {
    let directory: String

    struct Mark: Equatable {
        var sequence: UInt64
        var mac: [UInt8]
    }

    private func path(_ vaultID: [UInt8]) -> String { directory + "/" + vaultID.hexString }

    /// The mark for a vault, or `nil` when there is none (or it cannot be read: the anchor is
    /// a second line of defence and never stops a vault from opening by itself).
    func read(_ vaultID: [UInt8]) -> Mark? {
        guard let bytes = try? HeaderFormat.readCopy(path(vaultID)) else { return nil }
        let parts = String(decoding: bytes, as: UTF8.self).split(whereSeparator: \.isWhitespace)
        guard parts.count == 3, parts[0] == "keysmith-anchor-1", let sequence = UInt64(parts[1]),
              sequence < Format2.maximumSequence, let mac = [UInt8](hex: String(parts[2])), mac.count == 32
        else { return nil }
        return Mark(sequence: sequence, mac: mac)
    }

    /// Records a newer mark; best effort (a read-only home must not stop a read), atomic but
    /// not flushed: a crash can only set the anchor back, which weakens it and never breaks a vault.
    func write(_ vaultID: [UInt8], _ mark: Mark) {
        do {
            var current = ""
            for component in directory.split(separator: "/") {
                current += "/" + component
                try System.mkdir(current, mode: 0o700)
            }
            // Only forward: a reader that saw less must not lower what a writer recorded. The
            // check and the write happen under a lock shared by every process of this user.
            let lock = try System.open(directory + "/.lock", flags: OpenFlags.readWrite | OpenFlags.create | OpenFlags.noFollow, mode: 0o600)
            defer { System.close(lock) }
            // Never wait: a process stopped while holding the lock must not hang a read.
            guard try System.tryLockExclusive(lock, path: directory + "/.lock") else { return }
            if let existing = read(vaultID), existing.sequence >= mark.sequence { return }
            let text = Array("keysmith-anchor-1 \(mark.sequence) \(mark.mac.hexString)\n".utf8)
            try Durable.write(text, to: path(vaultID), directory: directory, sync: false)
        } catch {
            // Not fatal: the vault itself is intact; the next open tries again.
        }
    }

    /// Forgets the mark (after a deliberate restore from a backup).
    func remove(_ vaultID: [UInt8]) throws {
        try io { try System.unlink(path(vaultID)) }
    }

    /// `$KEYSMITH_ANCHOR_DIR`, else `$XDG_STATE_HOME/keysmith/anchors`, else
    /// `~/.local/state/keysmith/anchors`.
    static var defaultDirectory: String {
        if let explicit = System.environment("KEYSMITH_ANCHOR_DIR"), explicit.hasPrefix("/") { return explicit }
        if let state = System.environment("XDG_STATE_HOME"), state.hasPrefix("/") { return state + "/keysmith/anchors" }
        return (System.environment("HOME") ?? "/tmp") + "/.local/state/keysmith/anchors"
    }
}
