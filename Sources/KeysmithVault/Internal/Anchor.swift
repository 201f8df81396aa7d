import KeysmithCrypto
import KeysmithSystem

/// The rollback anchor: the newest commit (sequence and chain MAC) this machine saw of a vault,
/// kept outside the vault directory so that putting the whole directory back to an earlier
/// state, or removing its newest commits, is noticed (docs/format.md, "The anchor"). One
/// ``MarkFiles`` mark per vault, named by the vault id.
struct AnchorStore: Sendable {
    let directory: String
    private var marks: MarkFiles { MarkFiles(directory: directory) }
    private static let header = "keysmith-anchor-1"

    struct Mark: Equatable {
        var sequence: UInt64
        var mac: [UInt8]
    }

    /// The mark for a vault, or `nil` when there is none (or it cannot be read: the anchor is
    /// a second line of defence and never stops a vault from opening by itself).
    func read(_ vaultID: [UInt8]) -> Mark? {
        guard let (sequence, value) = marks.read(vaultID.hexString, header: Self.header), sequence < Format2.maximumSequence,
              let mac = [UInt8](hex: value), mac.count == 32
        else { return nil }
        return Mark(sequence: sequence, mac: mac)
    }

    /// Records a newer mark; best effort (a read-only home must not stop a read), atomic but
    /// not flushed: a crash can only set the anchor back, which weakens it and never breaks a vault.
    func write(_ vaultID: [UInt8], _ mark: Mark) {
        marks.advance(vaultID.hexString, header: Self.header, sequence: mark.sequence, value: mark.mac.hexString)
    }

    /// Forgets the mark (after a deliberate restore from a backup).
    func remove(_ vaultID: [UInt8]) throws {
        try io { try marks.remove(vaultID.hexString) }
    }

    /// `$KEYSMITH_ANCHOR_DIR`, else `$XDG_STATE_HOME/keysmith/anchors`, else
    /// `~/.local/state/keysmith/anchors`.
    static var defaultDirectory: String { MarkFiles.defaultDirectory }
}
