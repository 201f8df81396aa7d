import FoundationEssentials
import Dispatch
import Keysmith
import KeysmithCrypto
import KeysmithSystem
import Synchronization

/// The files of a format-2 vault under its directory.
struct Paths: Sendable {
    let root: String
    var header: String { root + "/" + HeaderFormat.primaryName }
    var headerBackup: String { root + "/" + HeaderFormat.backupName }
    var lock: String { root + "/lock" }
    var data: String { root + "/" + Format.dataDirectory }
    var snapshot: String { data + "/snapshot" }
    var logDirectory: String { data + "/log" }
    func logName(_ sequence: UInt64) -> String { Format.dataDirectory + "/log/" + LogName.hex16(sequence) }
    func log(_ sequence: UInt64) -> String { root + "/" + logName(sequence) }
}

/// An open format-2 vault. Only `FileVault` touches it, under its mutex; writes also hold the
/// vault's `flock`. Opening reads the header, the snapshot's header and directory and the
/// logs' tables: never the records. A read costs one page and one record.
final class Engine {
    let paths: Paths
    let vaultID: [UInt8]
    var unlocked: UnlockedHeader
    let clock: @Sendable () -> Date
    let anchor: AnchorStore?
    /// A keyfile or key credential, kept so that a header re-wrapped by another process (a new
    /// salt, the same keyfile) can be followed. A passphrase is never kept: after another
    /// process changes it, this handle must be opened again.
    let rederivable: VaultCredential?
    private var lockDescriptor: Descriptor?

    /// The snapshot index: replaced on every reload; its damage is in `fileDamage`.
    var snapshot = SnapshotIndex()
    /// Whether `data/log` is gone: commits after the snapshot may have been lost with it.
    var logDirectoryMissing = false

    // The logs since the snapshot.
    var logFDs: [UInt64: Descriptor] = [:]
    var logMACs: [UInt64: [UInt8]] = [:]
    var lastSequence: UInt64 = 0
    /// The chain value of the newest commit, `nil` when that commit is damaged.
    var lastMAC: [UInt8]? = Format.genesisMAC
    var logsSinceSnapshot = 0
    /// Frames in the logs since the snapshot, damaged logs excepted.
    var framesSinceSnapshot = 0
    var overlay: [RecordID: SealedRef] = [:]
    var idMACCache: (key: SecretBytes, mac: HMACSHA256Key)?
    var cipherCache: [UInt32: (key: SecretBytes, context: AESGCM.Context)] = [:]

    // What is wrong.
    var recordDamage: [RecordID: (version: UInt64, damage: VaultDamage)] = [:]
    var fileDamage: [VaultDamage] = []
    /// Records older than this sequence (and absent ones) cannot be trusted: a commit that may
    /// have changed them is missing or damaged.
    var uncertainBefore: (sequence: UInt64, damage: VaultDamage)?
    var rollback: VaultDamage?

    /// Whether the last ``reloadAll()`` failed part-way: the next ``refresh()`` reloads.
    var needsReload = false

    /// Set by ``checkAnchor()`` when the anchor is ahead of the files read and the snapshot
    /// changed meanwhile: another process compacted, so the view must be read again.
    var anchorAhead = false

    /// The epoch the header on disk names as current, checked at the start of every write.
    var writeEpoch: UInt32 = 0

    convenience init(paths: Paths, unlocked: UnlockedHeader, clock: @escaping @Sendable () -> Date, anchor: AnchorStore?,
                     credential: VaultCredential) {
        self.init(paths: paths, unlocked: unlocked, clock: clock, anchor: anchor, rederivable: credential.isPassphrase ? nil : credential)
    }

    /// - Parameter rederivable: A keyfile or key credential, kept to follow another process's
    ///   credential change; never a passphrase.
    init(paths: Paths, unlocked: UnlockedHeader, clock: @escaping @Sendable () -> Date, anchor: AnchorStore?,
         rederivable: VaultCredential?) {
        precondition(rederivable?.isPassphrase != true, "a passphrase is never kept")
        self.rederivable = rederivable
        self.paths = paths
        self.vaultID = unlocked.copy.header.vaultIDBytes
        self.unlocked = unlocked
        self.clock = clock
        self.anchor = anchor
    }

    deinit {
        closeFiles()
        if let lockDescriptor { System.close(lockDescriptor) }
    }

    func closeFiles() {
        snapshot.close()
        for fd in logFDs.values { System.close(fd) }
        logFDs = [:]
    }

    /// The lock file, opened on the first write, so a read-only vault can still be read.
    func lockFD() throws -> Descriptor {
        if let lockDescriptor { return lockDescriptor }
        let opened = try io { try System.open(paths.lock, flags: OpenFlags.readWrite | OpenFlags.create | OpenFlags.noFollow, mode: 0o600) }
        lockDescriptor = opened
        return opened
    }

    /// The chain key of the snapshot's key epoch, `nil` when the header no longer holds it (or
    /// no snapshot counts).
    var snapshotChainKey: SecretBytes? { snapshot.head.flatMap { unlocked.epochs[$0.epoch]?.chain } }

    var currentEpoch: UInt32 { unlocked.copy.header.currentEpoch }
}
