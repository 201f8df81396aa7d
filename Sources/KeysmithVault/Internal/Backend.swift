import Keysmith
import KeysmithCredentials
import KeysmithCrypto
import KeysmithSystem

/// What `FileVault` needs of an open vault, whichever its format version. Only `FileVault`
/// calls it, under its mutex (hence `@unchecked Sendable`: the mutex is what makes sharing
/// safe); the write methods also under the vault's `flock`.
protocol VaultBackend: AnyObject, Sendable {
    func lockFD() throws -> Descriptor
    func refresh() throws
    func read(_ key: ItemKey) throws -> SecureRecord?
    func search(_ query: ItemQuery) throws -> [ItemInfo]
    /// One chunk of a scan (see `Engine.records(matching:after:limit:)`).
    func records(matching query: ItemQuery, after: RecordID?, limit: Int) throws
        -> (records: [SecureRecord], next: RecordID?, examined: Int, total: Int)
    /// Under the lock, before a write: catch up with other processes and the header on disk.
    func prepareWrite() throws
    func commit(_ operations: [StoreOperation]) throws -> CommitOutcome
    var lastSequence: UInt64 { get }
    var wantsCompaction: Bool { get }
    func compact(reseal: Bool) throws
    func changeCredential(to credential: VaultCredential, scrypt: ScryptParameters) throws
    func rekey() throws
    func verify() throws -> [VaultDamage]
    func statistics() throws -> (items: Int, logFiles: Int)
    func acceptRollback() throws
    var damage: [VaultDamage] { get }
    /// Whether damage is known that could hide or change records (superseded damage and
    /// header copies do not count): then a listing could be missing items.
    var isDamaged: Bool { get }
}

/// What a commit did.
enum CommitOutcome {
    /// The batch changed nothing: no commit was written.
    case unchanged
    /// The batch is committed.
    case committed
    /// The batch is committed, and was large enough to be compacted into a new snapshot at once.
    case committedAndCompacted
    /// The batch is committed, but compacting it failed (the next write tries again).
    case committedCompactionFailed(any Error)
}

extension Engine: VaultBackend, @unchecked Sendable {}

/// A format 1 vault: read as before format 2 existed, never written (docs/format.md, "Format
/// version 1"). It is kept to be upgraded (``FileVault/upgrade(at:credential:scrypt:logger:)``)
/// or, damaged, repaired into format 2 (``FileVault/repairFormat1(at:credential:scrypt:dryRun:logger:)``);
/// every write method throws ``readOnlyError``.
final class Format1Backend: VaultBackend, @unchecked Sendable {
    var engine: Format1Engine

    init(_ engine: consuming Format1Engine) {
        self.engine = engine
    }

    /// Set once another process upgraded the vault to format 2: this handle's view is gone.
    private var upgradedAway = false
    /// Whether another process upgraded the vault to format 2 since this handle read it.
    var isUpgradedAway: Bool { upgradedAway }

    func lockFD() throws -> Descriptor { try engine.lockFD() }

    func refresh() throws {
        if upgradedAway { throw Self.upgradedError }
        try engine.refresh()
        // An upgrade removes the format 1 snapshot: a vault without one is checked once more.
        if engine.snapshotInode == nil, let bytes = try? HeaderFormat.readCopy(engine.paths.header),
           case .version2 = HeaderFormat.probe(bytes)
        {
            upgradedAway = true
            throw Self.upgradedError
        }
    }

    static let upgradedError = KeysmithError(.storeLocked, "the vault was upgraded to format 2 by another process; open it again")
    func read(_ key: ItemKey) throws -> SecureRecord? { try engine.read(key) }
    func search(_ query: ItemQuery) throws -> [ItemInfo] {
        engine.entries.values.lazy.filter { query.matches($0.info.attributes) }.map(\.info)
    }

    /// Format 1 holds every record's metadata in memory already: the matches in record-id
    /// order, `limit` after `after`.
    func records(matching query: ItemQuery, after: RecordID?, limit: Int) throws
        -> (records: [SecureRecord], next: RecordID?, examined: Int, total: Int)
    {
        let matches = try search(query).map { (id: engine.recordID(for: $0.key), key: $0.key) }.sorted { $0.id < $1.id }
        let rest = matches.drop { match in after.map { !($0 < match.id) } ?? false }  // ids after `after`
        let chunk = rest.prefix(max(1, limit))
        let records = try chunk.compactMap { try engine.read($0.key) }
        let more = rest.count > chunk.count
        return (records, more ? chunk.last?.id : nil, chunk.count, matches.count)
    }

    /// Under the lock, before an upgrade or a repair: catch up, and make sure no other process
    /// upgraded the vault meanwhile (a format 1 handle must never write into a format 2 vault).
    func prepareWrite() throws {
        if let bytes = try HeaderFormat.readCopy(engine.paths.header), case .version2 = HeaderFormat.probe(bytes) {
            upgradedAway = true
            throw Self.upgradedError
        }
        try refresh()
    }

    /// What every write to a format 1 vault throws: Keysmith reads format 1 but no longer writes it.
    static func readOnlyError(_ path: String) -> KeysmithError {
        KeysmithError.invalidArgument(
            "the vault at \(path) is format 1 (Keysmith 0.1, 0.2), which this Keysmith reads but no longer writes; "
                + "convert it with `keysmith vault upgrade` (a damaged one: `keysmith vault repair`), after which Keysmith 0.1 and 0.2 "
                + "cannot open it; nothing was changed")
    }

    func commit(_ operations: [StoreOperation]) throws -> CommitOutcome { throw Self.readOnlyError(engine.paths.root) }
    var lastSequence: UInt64 { engine.lastSequence }
    var wantsCompaction: Bool { false }
    func compact(reseal: Bool) throws { throw Self.readOnlyError(engine.paths.root) }
    func changeCredential(to credential: VaultCredential, scrypt: ScryptParameters) throws { throw Self.readOnlyError(engine.paths.root) }
    func rekey() throws { throw Self.readOnlyError(engine.paths.root) }

    func verify() throws -> [VaultDamage] {
        try engine.reloadAll()
        return engine.damage
    }

    func statistics() throws -> (items: Int, logFiles: Int) { (engine.entries.count, engine.logsSinceSnapshot) }
    func acceptRollback() throws {}
    var damage: [VaultDamage] { engine.damage }
    var isDamaged: Bool { engine.isDamaged }

    /// Every record with the commit that last wrote it, decrypted: the input of an upgrade.
    func allRecords() throws -> [(record: SecureRecord, version: UInt64)] {
        try engine.requireUndamaged()
        return try engine.entries.values.map { entry in
            guard let record = try engine.read(entry.info.key) else {
                throw KeysmithError(.corruptData, "\(entry.info.key) vanished while upgrading")
            }
            return (record, entry.frame.version)
        }
    }

    var idKey: SecretBytes { engine.idKey }
}
