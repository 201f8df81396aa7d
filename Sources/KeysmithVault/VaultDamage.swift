public import Keysmith

/// A problem that ``FileVault/verify()`` found in a vault's files.
///
/// Damage is confined: a damaged record makes reads of that record throw
/// `KeysmithError.Code.corruptData` while every other record stays readable; writing the
/// record again (update or delete) repairs it.
public struct VaultDamage: Sendable, Hashable, CustomStringConvertible {
    /// The file, relative to the vault directory, such as `log/0000000000000012`.
    public let file: String
    /// The byte offset in the file where the damage starts.
    public let offset: Int
    /// The damaged record's id (16 hex digits), when it could be told.
    public let recordID: String?
    /// The damaged record's identity, when it was known before the damage.
    public let key: ItemKey?
    /// What is wrong.
    public let reason: String
    /// Whether records may be hidden behind the damage: true when the damaged bytes cannot be
    /// tied to a record, so a record that seems absent may have been there.
    public let hidesRecords: Bool

    /// Whether the damage is only in an old version that a newer one replaced (the item was
    /// written again, which repairs it): nothing is lost, reads are unaffected, and the next
    /// compaction drops the damaged bytes. ``FileVault/verify()`` lists such damage; the vault
    /// counts as intact when all its damage is superseded. Also `true` for an ignored file
    /// (``isIgnored``): neither counts against the vault.
    public let isSuperseded: Bool

    /// Whether this is not damage to the vault but a file that is not one of its own, among
    /// its files (a stray name in `data/log`): reported, left alone (no compaction deletes it),
    /// and not counted.
    public let isIgnored: Bool

    /// Whether this is what a crash left of an interrupted write rather than damage (a header
    /// copy of another generation than the one in force, a format 1 file an upgrade did not
    /// remove): it does not count against the vault (``isSuperseded`` is `true` too), and the
    /// next open, `verify` or write finishes the job (a newer header copy: the next `passwd` or
    /// `rekey`).
    public let isLeftover: Bool

    init(file: String, offset: Int, recordID: String?, key: ItemKey?, reason: String, hidesRecords: Bool = false,
         isSuperseded: Bool = false, isIgnored: Bool = false, isLeftover: Bool = false) {
        self.isLeftover = isLeftover
        // A leftover does not count against the vault either (``isSuperseded``).
        self.isSuperseded = isSuperseded || isIgnored || isLeftover
        self.isIgnored = isIgnored
        self.file = file
        self.offset = offset
        self.recordID = recordID
        self.key = key
        self.reason = reason
        self.hidesRecords = hidesRecords
    }

    /// The damage `vault verify --expect-sequence` reports: the vault ends below a commit
    /// someone saw.
    ///
    /// - Parameters:
    ///   - sequence: The vault's newest commit.
    ///   - expected: The commit the caller saw.
    public static func rolledBack(sequence: UInt64, expected: UInt64) -> VaultDamage {
        VaultDamage(file: "data", offset: 0, recordID: nil, key: nil,
                    reason: "the vault was rolled back: it ends at commit \(sequence), below the expected \(expected)", hidesRecords: true)
    }

    var isHeaderCopy: Bool { file == "header" || file == "header.backup" }

    /// One line naming the file, the record and the reason.
    public var description: String {
        var text = "\(file) at byte \(offset)"
        if let key { text += ", \(key)" } else if let recordID { text += ", record \(recordID)" }
        return text + ": \(reason)"
    }
}
