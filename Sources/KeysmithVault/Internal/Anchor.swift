import KeysmithCrypto
import KeysmithSystem

/// The rollback anchor: the newest commit (sequence and chain MAC) this machine saw of a vault
/// at one place, kept outside the vault directory so that putting the whole directory back to
/// an earlier state, or removing its newest commits, is noticed (docs/format.md, "The anchor").
/// One ``MarkFiles`` mark per vault and place, named by the vault id and a digest of the
/// vault's canonical path: a copy of the same vault elsewhere (a backup) has its own, so
/// accepting a rollback there never sets back the anchor of the vault in use.
struct AnchorStore: Sendable {
    let directory: String
    /// The mark's name for this vault's place: `<vault id>-<16 hex digits of SHA-256(path)>`.
    private let place: String
    private var marks: MarkFiles { MarkFiles(directory: directory) }
    private static let header = "keysmith-anchor-1"

    /// - Parameters:
    ///   - directory: Where the marks are kept.
    ///   - vaultPath: The vault's directory; its canonical form (links resolved) names the place.
    init(directory: String, vaultPath: String) {
        self.directory = directory
        let canonical = System.canonicalPath(vaultPath) ?? vaultPath
        place = String(SHA256.hash(Array(canonical.utf8)).hexString.prefix(16))
    }

    struct Mark: Equatable {
        var sequence: UInt64
        var mac: [UInt8]
        /// Read from the mark named by the vault id alone (written before anchors were per place).
        var legacy = false
    }

    /// What the anchor says of a vault.
    enum Reading: Equatable {
        /// No mark: this machine never saw the vault at this place.
        case absent
        case mark(Mark)
        /// A file is there that is not a well-formed mark: why, and where it is.
        case damaged(reason: String, path: String)
    }

    private func name(_ vaultID: [UInt8]) -> String { vaultID.hexString + "-" + place }

    /// The mark for a vault at this place. Before anchors were kept per place (Keysmith 0.3 and
    /// earlier) the mark was named by the vault id alone: that one is read when there is no mark
    /// for the place yet, and never written again.
    func read(_ vaultID: [UInt8]) -> Reading {
        let current = interpret(marks.inspect(name(vaultID), header: Self.header), path: marks.location(name(vaultID)))
        guard current == .absent else { return current }
        let legacy = interpret(marks.inspect(vaultID.hexString, header: Self.header), path: marks.location(vaultID.hexString))
        guard case .mark(var mark) = legacy else { return legacy }
        mark.legacy = true
        return .mark(mark)
    }

    private func interpret(_ inspection: MarkFiles.Inspection, path: String) -> Reading {
        switch inspection {
        case .absent:
            return .absent
        case .damaged(let why):
            return .damaged(reason: why, path: path)
        case .mark(let sequence, let value):
            guard sequence < Format.maximumSequence else {
                return .damaged(reason: "its sequence \(sequence) is out of range", path: path)
            }
            guard value.count == 64, value.allSatisfy(\.isHexDigit), value == value.lowercased(), let mac = [UInt8](hex: value) else {
                return .damaged(reason: "its MAC is not 64 lower-case hexadecimal digits", path: path)
            }
            return .mark(Mark(sequence: sequence, mac: mac))
        }
    }

    /// The newest mark, when it is well-formed: `nil` for none or a damaged one.
    func mark(_ vaultID: [UInt8]) -> Mark? {
        if case .mark(let mark) = read(vaultID) { return mark }
        return nil
    }

    /// Records a newer mark; best effort (a read-only home must not stop a read), atomic but
    /// not flushed: a crash can only set the anchor back, which weakens it and never breaks a
    /// vault. A damaged mark is never overwritten: it stays until the rollback is accepted.
    func write(_ vaultID: [UInt8], _ mark: Mark) {
        marks.advance(name(vaultID), header: Self.header, sequence: mark.sequence, value: mark.mac.hexString)
    }

    /// The anchors' lock, taken waiting at most `timeout` seconds (`nil` when another process
    /// held it all that time), for a writer that must move the anchor (a repair).
    func lock(waitingUpTo timeout: Double) throws -> Descriptor? {
        try io { try marks.lock(waitingUpTo: timeout) }
    }

    /// Records a newer mark under the lock ``lock(waitingUpTo:)`` took, then lets go of it.
    func write(_ vaultID: [UInt8], _ mark: Mark, releasing lock: Descriptor) throws {
        defer { marks.release(lock) }
        try io { try marks.advance(name(vaultID), header: Self.header, sequence: mark.sequence, value: mark.mac.hexString, holding: lock) }
    }

    /// Forgets the mark of this place (after a deliberate restore from a backup), and the mark
    /// named by the vault id alone if it is damaged (it would otherwise be read again).
    func remove(_ vaultID: [UInt8]) throws {
        try io { try marks.remove(name(vaultID)) }
        if case .damaged = interpret(marks.inspect(vaultID.hexString, header: Self.header), path: "") {
            try io { try marks.remove(vaultID.hexString) }
        }
    }

    /// `$KEYSMITH_ANCHOR_DIR`, else `$XDG_STATE_HOME/keysmith/anchors`, else
    /// `~/.local/state/keysmith/anchors`.
    static var defaultDirectory: String { MarkFiles.defaultDirectory }
}
