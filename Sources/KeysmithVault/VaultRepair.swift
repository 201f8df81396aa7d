public import Keysmith

/// What ``FileVault/repair(dryRun:)`` found, and what it did or would do (docs/cli.md,
/// `keysmith vault repair`; docs/format.md, "Repair").
///
/// A repair keeps every record that authenticates (the newest version of each that does) and
/// says exactly what may be lost: the parts of the vault it could not read whole, the items it
/// kept at a version that may not be their newest, and the records none of whose versions
/// authenticate.
///
/// ```swift
/// let report = try vault.repair(dryRun: true)
/// for loss in report.losses { print(loss.file, loss.reason) }
/// for item in report.itemsMaybeStale { print("may be out of date:", item) }
/// if report.needed { try vault.repair(dryRun: false) }
/// ```
public struct VaultRepairReport: Sendable, Hashable {
    /// A part of the vault that the repair could not read whole.
    public struct Loss: Sendable, Hashable {
        /// The file, relative to the vault's directory: a log (`data/log/0000000000000003`), the
        /// snapshot (`data/snapshot`) or the log directory (`data/log`).
        public let file: String
        /// The commit a log held (its sequence); `nil` for the snapshot and the log directory.
        public let sequence: UInt64?
        /// What is wrong with it.
        public let reason: String
        /// How many of its records authenticate anyway (they are kept when they are the newest).
        public let salvaged: Int
        /// Whether every record it held was recovered: the damage is in fields that bind none of
        /// them (a log's vault id, say), so nothing of it is lost and nothing is in doubt for it.
        public let complete: Bool

        /// Makes a loss; the repair reports them, and tests compare with them.
        public init(file: String, sequence: UInt64?, reason: String, salvaged: Int, complete: Bool = false) {
            self.file = file
            self.sequence = sequence
            self.reason = reason
            self.salvaged = salvaged
            self.complete = complete
        }
    }

    /// Whether the vault needed a repair: `false` when it was intact (then nothing was changed).
    public let needed: Bool
    /// Whether this was a dry run: nothing was changed.
    public let dryRun: Bool
    /// How many items (user items and Keysmith's own records) the repaired vault holds.
    public let itemsKept: Int
    /// The parts of the vault that could not be read whole, in file order.
    public let losses: [Loss]
    /// Items kept at a version that may not be their newest: a lost commit or snapshot could
    /// have changed them, or a newer version of them does not authenticate. Sorted.
    public let itemsMaybeStale: [ItemKey]
    /// Record ids (hex) of records none of whose versions authenticate. Their names are sealed
    /// inside them, so they cannot be named; they are not in the repaired vault.
    public let unreadableRecords: [String]
    /// Whether items that the repaired vault does not hold at all may be lost: a part that was
    /// lost could have created items, and their names cannot be known.
    public let absentItemsMayBeLost: Bool
    /// Header copies that were damaged, missing or stale (the repair writes both again).
    public let headerCopies: [String]
    /// Where the files the repair replaced were moved, relative to the vault's directory
    /// (`damaged-20261127T153000Z`); `nil` for a dry run or when nothing was needed.
    public let movedAside: String?
    /// The sequence of the repaired vault's snapshot, one past every commit the vault held
    /// (the rollback anchor is moved to it); for a dry run, the one a repair would write.
    public let sequence: UInt64

    /// Makes a report; ``FileVault/repair(dryRun:)`` does.
    public init(needed: Bool, dryRun: Bool, itemsKept: Int, losses: [Loss], itemsMaybeStale: [ItemKey], unreadableRecords: [String],
                absentItemsMayBeLost: Bool, headerCopies: [String], movedAside: String?, sequence: UInt64) {
        self.needed = needed
        self.dryRun = dryRun
        self.itemsKept = itemsKept
        self.losses = losses
        self.itemsMaybeStale = itemsMaybeStale
        self.unreadableRecords = unreadableRecords
        self.absentItemsMayBeLost = absentItemsMayBeLost
        self.headerCopies = headerCopies
        self.movedAside = movedAside
        self.sequence = sequence
    }
}
