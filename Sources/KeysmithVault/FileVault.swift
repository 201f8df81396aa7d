public import FoundationEssentials
public import Keysmith
public import Logging
import KeysmithCredentials
import KeysmithCrypto
import KeysmithSystem
internal import Synchronization

/// The encrypted file vault: Keysmith's default store, on disk, with no daemon.
///
/// Records are sealed one by one with AES-256-GCM under a random data key; the data key is
/// wrapped by a key derived from a passphrase (scrypt) or a 256-bit keyfile. Every write is one
/// durable, atomic commit taken under an exclusive `flock`, so several processes can share a
/// vault and a crash at any instant loses no acknowledged write. docs/format.md specifies the
/// files; docs/threat-model.md says what the vault does and does not protect against.
///
/// ```swift
/// let vault = try FileVault.create(at: "/tmp/demo-vault", credential: .passphrase("correct horse"))
/// try Keysmith.set(Data("s3cret".utf8), forAccount: "bob", inService: "mail", in: vault)
///
/// let again = try FileVault.open(at: "/tmp/demo-vault", credential: .passphrase("correct horse"))
/// let secret = try Keysmith.load(forAccount: "bob", inService: "mail", from: again)
/// ```
///
/// A `FileVault` is safe to use from many threads and tasks at once; several `FileVault`s (in
/// one process or many) can open the same directory.
public final class FileVault: SecureStore {
    /// The vault's directory.
    public let path: String
    private let backend: Mutex<any VaultBackend>
    /// Where the vault reports what it does: commits and compactions at `debug`, damage at
    /// `warning`. Messages never contain a secret, and name items only at `trace`.
    public let logger: Logger
    /// The format version of the vault's files: 2 for vaults made by this Keysmith, 1 for older
    /// ones until ``upgrade(at:credential:scrypt:logger:)`` converts them.
    public let formatVersion: Int

    /// What a format 1 handle needs to follow an upgrade another process makes (the upgraded
    /// vault opened in its place, without asking for the credential again): the keyfile or key
    /// it was opened with (a passphrase is never kept: such a handle is opened again, as after a
    /// credential change), the clock and the anchors' directory.
    private struct UpgradeFollow: Sendable {
        let rederivable: VaultCredential?
        let clock: @Sendable () -> Date
        let anchorDirectory: String?
    }
    private let follow: UpgradeFollow?
    private let waiting = Mutex(VaultLockWait.forever)

    /// How this handle's writers wait for the vault's lock while another process holds it (a
    /// long write, a compaction, a hung process). By default they wait for ever, saying nothing;
    /// the `keysmith` command waits 30 s and says so after 1 s.
    ///
    /// ```swift
    /// vault.lockWait = VaultLockWait(timeout: .seconds(10)) { message in logger.notice("\(message)") }
    /// try vault.perform(operations)   // KeysmithError.Code.timedOut after 10 s of waiting
    /// ```
    public var lockWait: VaultLockWait {
        get { waiting.withLock { $0 } }
        set { waiting.withLock { $0 = newValue } }
    }

    /// Takes the vault's exclusive lock on `fd` as ``lockWait`` says.
    private func lockExclusive(_ fd: Descriptor) throws {
        let wait = lockWait
        let file = path + "/lock"
        let taken = try io {
            try System.lockExclusive(fd, path: file, timeout: wait.timeout, noticeAfter: wait.noticeAfter) { holder in
                wait.notice?("waiting for the vault's lock (\(file)), held by " + (holder.map { "process \($0)" } ?? "another process")
                             + (wait.timeout.map { "; giving up after \(Self.seconds($0))" } ?? ""))
            }
        }
        guard taken else {
            let holder = System.lockHolder(fd).map { "process \($0)" } ?? "another process"
            throw KeysmithError(.timedOut, "the vault's lock (\(file)) was still held by \(holder) after \(Self.seconds(wait.timeout ?? .zero)); "
                                + "nothing was changed: try again, or find what holds it (a long import, a hung process)")
        }
    }

    private static func seconds(_ duration: Duration) -> String {
        let (seconds, attoseconds) = duration.components
        let tenths = attoseconds / 100_000_000_000_000_000
        return tenths == 0 ? "\(seconds) s" : "\(seconds).\(tenths) s"
    }

    private init(path: String, backend: sending any VaultBackend, formatVersion: Int, logger: Logger, follow: UpgradeFollow? = nil) {
        self.path = path
        self.formatVersion = formatVersion
        self.backend = Mutex(backend)
        self.logger = logger
        self.follow = follow
    }

    /// Catches up with the files. A format 1 handle whose vault another process upgraded to
    /// format 2 meanwhile continues on the upgraded vault when it was opened with a keyfile or
    /// key (its reads and writes then go to format 2); with a passphrase it throws
    /// `storeLocked` ("open it again"), as after another process changes the credential.
    private func refreshed(_ backend: inout any VaultBackend) throws {
        do {
            try backend.refresh()
        } catch let error as KeysmithError {
            guard let old = backend as? Format1Backend, old.isUpgradedAway, let follow, let credential = follow.rederivable,
                  case .version2(let copy) = HeaderFormat.inForce(path).probe
            else { throw error }
            let kek = try HeaderFormat.deriveKEK(copy.header.kdf, credential: credential)
            let unlocked = try UnlockedHeader.unlock(copy, kek: kek, credential: credential)
            // The upgrade keeps the vault's id key: another vault the same key opens, put in its
            // place, is not followed.
            guard unlocked.idKey == old.idKey else { throw error }
            let engine = Engine(paths: Paths(root: path), unlocked: unlocked, clock: follow.clock,
                                anchor: follow.anchorDirectory.map { AnchorStore(directory: $0, vaultPath: path) }, rederivable: credential)
            try engine.reloadAll()
            guard !engine.snapshot.isForeign else { throw error }
            logger.debug("followed an upgrade to format 2 made by another process", metadata: ["path": "\(path)"])
            backend = engine
        }
    }

    /// The logger a vault uses when given none: label `keysmith.vault`, through the process's
    /// `LoggingSystem`.
    public static func defaultLogger() -> Logger { Logger(label: "keysmith.vault") }

    /// Where a vault's rollback anchor lives unless told otherwise: `$KEYSMITH_ANCHOR_DIR`,
    /// else `$XDG_STATE_HOME/keysmith/anchors`, else `~/.local/state/keysmith/anchors`. One
    /// small file per vault id holds the newest commit this machine saw (docs/format.md, "The anchor").
    public static var defaultAnchorDirectory: String { AnchorStore.defaultDirectory }

    // MARK: Creating and opening

    /// The format version of the vault at `path`, read from its header in force without
    /// opening the vault (nothing is unlocked, written or finished); `nil` when no header copy
    /// can be read. A damaged format 1 vault may fail to open, and is repaired by
    /// ``repairFormat1(at:credential:scrypt:dryRun:logger:)``: this says which repair to call.
    ///
    /// ```swift
    /// let report = try FileVault.formatVersion(at: path) == 1
    ///     ? FileVault.repairFormat1(at: path, credential: credential)
    ///     : FileVault.open(at: path, credential: credential).repair()
    /// ```
    public static func formatVersion(at path: String) -> Int? {
        switch HeaderFormat.inForce(path).probe {
        case .version1: 1
        case .version2: 2
        case .unsupported(let version): version
        case .damaged, nil: nil
        }
    }

    /// The default vault directory: `$KEYSMITH_VAULT`, else `$XDG_DATA_HOME/keysmith`, else
    /// `~/.local/share/keysmith`.
    public static var defaultPath: String {
        if let explicit = System.environment("KEYSMITH_VAULT"), !explicit.isEmpty { return explicit }
        if let data = System.environment("XDG_DATA_HOME"), data.hasPrefix("/") { return data + "/keysmith" }
        return (System.environment("HOME") ?? "") + "/.local/share/keysmith"
    }

    /// Makes the vault at ``defaultPath`` the process-wide default store, opened on first use.
    ///
    /// - Parameter credential: What unlocks it; ``VaultCredential/fromEnvironment()`` if `nil`
    ///   (`KEYSMITH_KEYFILE` or `KEYSMITH_PASSPHRASE`).
    public static func bootstrapDefault(credential: VaultCredential? = nil) {
        Keysmith.setDefaultStoreProvider {
            try FileVault.open(at: defaultPath, credential: credential ?? .fromEnvironment())
        }
    }

    /// Creates a new, empty vault (format version 2).
    ///
    /// The directory is created with mode 0700 (and its parents, 0700, if missing); every file
    /// in it is created with mode 0600.
    ///
    /// - Parameters:
    ///   - path: The vault's directory. It must not exist, or be empty.
    ///   - credential: What will unlock it.
    ///   - scrypt: scrypt's cost for a passphrase (within ``ScryptParameters``' bounds);
    ///     ignored for a keyfile.
    ///   - clock: The source of created and modified dates; the system clock if omitted.
    ///   - anchorDirectory: Where the rollback anchor is kept (``defaultAnchorDirectory`` if
    ///     omitted); `nil` keeps none.
    ///   - logger: Where the vault reports what it does (``defaultLogger()`` if omitted).
    /// - Returns: The open vault.
    /// - Throws: `KeysmithError.Code.duplicateItem` if a vault or other files are already
    ///   there, or `path` is a file; `KeysmithError.Code.invalidArgument` for scrypt
    ///   parameters out of bounds or an empty passphrase;
    ///   `KeysmithError.Code.ioFailure` if the directory cannot be made.
    public static func create(
        at path: String, credential: VaultCredential, scrypt: ScryptParameters = .default,
        clock: @escaping @Sendable () -> Date = { Date() }, anchorDirectory: String? = FileVault.defaultAnchorDirectory,
        logger: Logger = FileVault.defaultLogger()
    ) throws -> FileVault {
        guard !credential.isEmptyPassphrase else {
            throw KeysmithError.invalidArgument("the passphrase is empty, which protects nothing; nothing was created")
        }
        try io {
            if let status = try System.status(path), !status.isDirectory {
                throw KeysmithError(.duplicateItem, "\(path) exists and is not a directory; choose an empty or new directory")
            }
            try makeDirectories(path)
            let existing = try System.listDirectory(path)
            if !existing.isEmpty {
                throw KeysmithError(
                    .duplicateItem,
                    existing.contains(HeaderFormat.primaryName)
                        ? "a vault already exists at \(path)" : "\(path) is not empty; choose an empty or new directory")
            }
        }
        _ = try VaultCreation.create(paths: Paths(root: path), credential: credential, scrypt: scrypt, created: clock())
        logger.debug("created a vault", metadata: ["path": "\(path)"])
        return try open(at: path, credential: credential, clock: clock, anchorDirectory: anchorDirectory, logger: logger)
    }

    /// Opens and unlocks an existing vault of either format version.
    ///
    /// - Parameters:
    ///   - path: The vault's directory.
    ///   - credential: Its passphrase or keyfile.
    ///   - clock: The source of created and modified dates; the system clock if omitted.
    ///   - anchorDirectory: Where the rollback anchor is kept (``defaultAnchorDirectory`` if
    ///     omitted); `nil` keeps none. Format 1 vaults have no anchor.
    ///   - logger: Where the vault reports what it does (``defaultLogger()`` if omitted).
    /// - Returns: The open vault. Damaged records do not stop it from opening; reads of them
    ///   throw, and ``verify()`` lists them.
    /// - Throws: `KeysmithError.Code.storeUnavailable` if there is no vault there;
    ///   `KeysmithError.Code.authenticationFailed` for a wrong passphrase or keyfile (or a
    ///   header altered by someone without it); `KeysmithError.Code.corruptData` if both
    ///   copies of the header are damaged, or its KDF parameters are out of bounds.
    public static func open(
        at path: String, credential: VaultCredential, clock: @escaping @Sendable () -> Date = { Date() },
        anchorDirectory: String? = FileVault.defaultAnchorDirectory, logger: Logger = FileVault.defaultLogger()
    ) throws -> FileVault {
        try open(at: path, credential: credential, clock: clock, anchorDirectory: anchorDirectory, logger: logger, healing: true)
    }

    /// ``open(at:credential:clock:anchorDirectory:logger:)``, with or without finishing what a
    /// crash interrupted (a header copy left older than the one in force is written again): a
    /// dry run (`keysmith vault repair --dry-run`) opens without, and so changes nothing.
    package static func open(
        at path: String, credential: VaultCredential, clock: @escaping @Sendable () -> Date = { Date() },
        anchorDirectory: String? = FileVault.defaultAnchorDirectory, logger: Logger = FileVault.defaultLogger(), healing: Bool
    ) throws -> FileVault {
        guard let status = try io({ try System.status(path) }), status.isDirectory else {
            throw KeysmithError(.storeUnavailable, "there is no vault at \(path); create one with `keysmith init`")
        }
        let paths = Paths(root: path)
        let inForce = HeaderFormat.inForce(path)
        switch inForce.probe {
        case .version2(let copy):
            let kek = try HeaderFormat.deriveKEK(copy.header.kdf, credential: credential)
            let unlocked = try UnlockedHeader.unlock(copy, kek: kek, credential: credential)
            let engine = Engine(paths: paths, unlocked: unlocked, clock: clock, anchor: anchorDirectory.map { AnchorStore(directory: $0, vaultPath: path) },
                                 credential: credential)
            try engine.reloadAll()
            if healing { engine.finishInterruptedWrites() }
            if engine.snapshot.isForeign {
                throw KeysmithError(
                    .corruptData,
                    "the vault header belongs to another vault than its records (header from another vault?); restore the header from a backup")
            }
            return opened(engine, version: 2, path: path, logger: logger)
        case .version1:
            do {
                return try openFormat1(path: path, credential: credential, clock: clock, anchorDirectory: anchorDirectory, logger: logger)
            } catch {
                // Upgraded by another process between the probe and the read (its files went
                // away, or the header is now format 2): the format 2 vault it made is complete.
                if case .version2 = HeaderFormat.inForce(path).probe {
                    return try open(at: path, credential: credential, clock: clock, anchorDirectory: anchorDirectory, logger: logger,
                                    healing: healing)
                }
                throw error
            }
        case .unsupported(let version):
            throw KeysmithError(.corruptData, "the vault is format version \(version); this Keysmith reads versions 1 and 2; upgrade Keysmith")
        case .damaged, nil:
            break
        }
        guard inForce.found else {
            throw KeysmithError(.storeUnavailable, "\(path) is not a Keysmith vault (it has no header); create one with `keysmith init`")
        }
        // A copy the system would not let be read is not a damaged copy: say what it is.
        if let refused = inForce.unreadable.first {
            throw KeysmithError(.ioFailure, "cannot read the vault's header: \(refused)" + (refused.advice.map { "; \($0)" } ?? ""))
        }
        throw KeysmithError(
            .corruptData, "both copies of the vault header are damaged (\(inForce.problems.joined(separator: "; "))); restore the vault from a backup")
    }

    private static func opened(_ backend: sending any VaultBackend, version: Int, path: String, logger: Logger,
                               follow: UpgradeFollow? = nil) -> FileVault {
        let damage = backend.damage.filter { !$0.isSuperseded }
        logger.debug("opened the vault", metadata: ["path": "\(path)", "format": "\(version)", "sequence": "\(backend.lastSequence)"])
        if !damage.isEmpty {
            logger.warning("the vault has damage; run `keysmith vault verify`", metadata: [
                "path": "\(path)", "problems": "\(damage.count)",
            ])
        }
        return FileVault(path: path, backend: backend, formatVersion: version, logger: logger, follow: follow)
    }

    private static func openFormat1(
        path: String, credential: VaultCredential, clock: @escaping @Sendable () -> Date, anchorDirectory: String?, logger: Logger
    ) throws -> FileVault {
        let paths = Paths1(root: path)
        let unlocked = try Format1Salvage.unlock(paths, credential: credential)
        var engine = Format1Engine(paths: paths, unlocked: unlocked, clock: clock)
        try engine.reloadAll()
        if engine.filesSeen > 0, engine.foreignFiles == engine.filesSeen {
            throw KeysmithError(
                .corruptData,
                "the vault header belongs to another vault than its records (header from another vault?); restore the header from a backup")
        }
        return opened(Format1Backend(engine), version: 1, path: path, logger: logger,
                      follow: UpgradeFollow(rederivable: credential.isPassphrase ? nil : credential, clock: clock, anchorDirectory: anchorDirectory))
    }

    fileprivate static func makeDirectories(_ path: String) throws {
        var current = path.hasPrefix("/") ? "" : "."
        for component in path.split(separator: "/") {
            current += "/" + component
            try System.mkdir(current, mode: 0o700)
        }
    }

    // MARK: SecureStore

    /// `file vault at PATH`.
    public var storeDescription: String { "file vault at \(path)" }

    /// `StoreIsolation.serializable`: every batch is one commit file written under the vault's
    /// exclusive `flock`, across handles and processes.
    public var isolation: StoreIsolation { .serializable }

    /// `StoreLimits.standard`: secrets up to 32 MiB, names and metadata up to 64 KiB each, so
    /// that every sealed record stays under the 64 MiB a frame may hold.
    public var limits: StoreLimits { .standard }

    /// Reads one item, decrypting its secret. In a format 2 vault this reads one index page and
    /// one record, whatever the vault's size.
    ///
    /// - Throws: `KeysmithError.Code.corruptData` naming the record and the file if the
    ///   item's latest version is damaged, or if the vault is damaged where a newer version of
    ///   it may have been (a missing or damaged commit, a rollback). A missing item returns `nil`.
    public func read(_ key: ItemKey) throws -> SecureRecord? {
        try backend.withLock { backend in
            try refreshed(&backend)
            return try backend.read(key)
        }
    }

    /// Reads many items after catching up with other processes once.
    public func read(_ keys: [ItemKey]) throws -> [SecureRecord?] {
        try backend.withLock { backend in
            try refreshed(&backend)
            return try keys.map { try backend.read($0) }
        }
    }

    /// Lists matching items; secrets are decrypted only to be dropped. A format 2 vault streams
    /// its records, so memory follows the matches, not the vault.
    ///
    /// - Throws: `KeysmithError.Code.corruptData` when the vault has damage, known when it
    ///   was opened or found while listing (a missing or damaged file, a damaged record, a
    ///   rollback): a listing that left out what it cannot read would look whole. Superseded
    ///   damage (a record written again since) and a damaged header copy do not count.
    ///   ``verify()`` lists the damage; writing a damaged item again repairs it.
    public func search(_ query: ItemQuery) throws -> [ItemInfo] {
        try backend.withLock { backend in
            try refreshed(&backend)
            try Self.requireWhole(backend)
            let found = try backend.search(query)
            try Self.requireWhole(backend)
            return found
        }
    }

    /// Throws when the vault has damage that could hide or change records (what a listing
    /// must not leave out silently).
    private static func requireWhole(_ backend: any VaultBackend) throws {
        guard backend.isDamaged else { return }
        throw KeysmithError(.corruptData, "the vault has damage, so a listing could be missing items; run `keysmith vault verify`")
    }

    /// Reads every matching item a chunk at a time, each record decrypted once. A format 2
    /// vault walks its index in record-id order, catching up with other processes before each
    /// chunk; memory follows the chunk, not the vault.
    ///
    /// - Throws: `KeysmithError.Code.corruptData` when the vault has damage (as
    ///   ``search(_:)``): before the first chunk when it is known, else after the walk that
    ///   found it, so a caller that applies what it read only once this returns (a bulk
    ///   revocation) applies nothing.
    public func forEachRecord(
        matching query: ItemQuery, chunkSize: Int, _ body: (_ records: [SecureRecord], _ progress: ScanProgress) throws -> Void
    ) throws {
        var after: RecordID?
        var examined = 0
        repeat {
            let chunk = try backend.withLock { backend in
                try refreshed(&backend)
                try Self.requireWhole(backend)
                let chunk = try backend.records(matching: query, after: after, limit: chunkSize)
                try Self.requireWhole(backend)
                return chunk
            }
            examined += chunk.examined
            // The total is an estimate (the overlay may replace snapshot records) until the end.
            let total = chunk.next == nil ? examined : chunk.total
            if !chunk.records.isEmpty { try body(chunk.records, ScanProgress(examined: examined, total: total)) }
            after = chunk.next
        } while after != nil
    }

    /// Commits a batch as one durable log file: all of it survives a crash, or none of it.
    ///
    /// Once the log is durable the batch is committed, and `perform` returns normally: the
    /// compaction that may follow (at once for a batch of 4,096 items or more) is
    /// housekeeping, and if it fails (a full disk) it is logged as a warning and tried again
    /// by the next write.
    public func perform(_ operations: [StoreOperation]) throws {
        try checkBatchLimits(operations, limits: limits, store: "the file vault")
        try withWriteLock { backend in
            let outcome = try backend.commit(operations)
            if case .unchanged = outcome { return }
            logger.debug("committed", metadata: ["sequence": "\(backend.lastSequence)", "operations": "\(operations.count)"])
            if logger.logLevel <= .trace {
                logger.trace("committed items", metadata: ["keys": "\(operations.map(\.key.description))"])
            }
            switch outcome {
            case .committedAndCompacted:
                logger.debug("compacted", metadata: ["through": "\(backend.lastSequence)"])
            case .committedCompactionFailed(let error):
                logger.warning("the batch is committed, but compacting the vault failed; the next write tries again",
                               metadata: ["error": "\(error)"])
            case .committed where backend.wantsCompaction:
                do {
                    try backend.compact(reseal: false)
                    logger.debug("compacted", metadata: ["through": "\(backend.lastSequence)"])
                } catch {
                    logger.warning("the batch is committed, but compacting the vault failed; the next write tries again",
                                   metadata: ["error": "\(error)"])
                }
            case .unchanged, .committed:
                break
            }
        }
    }

    // MARK: Maintenance

    /// Changes what unlocks the vault: re-wraps the keys under a new passphrase or keyfile.
    /// Records are not touched. One atomic switch: after a crash at any instant exactly one of
    /// the old and the new credential opens the vault.
    ///
    /// - Parameters:
    ///   - credential: The new passphrase or keyfile.
    ///   - scrypt: scrypt's cost for a new passphrase.
    /// - Throws: `KeysmithError.Code.invalidArgument` for an empty passphrase;
    ///   `KeysmithError.Code.storeLocked` if another process changed the credential
    ///   since this handle opened the vault; `KeysmithError.Code.ioFailure` if the header
    ///   cannot be written.
    public func changeCredential(to credential: VaultCredential, scrypt: ScryptParameters = .default) throws {
        guard !credential.isEmptyPassphrase else {
            throw KeysmithError.invalidArgument("the new passphrase is empty, which protects nothing; nothing was changed")
        }
        try withWriteLock { backend in try backend.changeCredential(to: credential, scrypt: scrypt) }
        logger.debug("changed the credential", metadata: ["path": "\(path)"])
    }

    /// Re-encrypts every record under a new random data key and retires the old one.
    ///
    /// Crash-safe in three atomic steps: the new key is added to the header, every record is
    /// written into a new snapshot under it, the old key is removed. A crash between steps
    /// leaves a vault that opens with every record.
    ///
    /// Every record is read and authenticated first (as ``verify()`` does): a vault with damage
    /// is refused before the header changes.
    ///
    /// - Throws: `KeysmithError.Code.corruptData` if the vault has damage (repair it first);
    ///   nothing changes then. `KeysmithError.Code.storeLocked` if another process changed
    ///   the credential since this handle opened the vault.
    public func rekey() throws {
        try withWriteLock { backend in
            try Self.requireVerified(backend)
            try backend.rekey()
        }
        logger.debug("re-keyed", metadata: ["path": "\(path)"])
    }

    /// Writes every record into one snapshot and removes the logs it covers. Writes do this by
    /// themselves when logs pile up; call it to do it now. It first reads and authenticates
    /// every record (as ``verify()`` does), so it never folds a damaged record into the
    /// snapshot and removes the log that showed where the damage was.
    ///
    /// - Throws: `KeysmithError.Code.corruptData` if the vault has damage; nothing changes then.
    public func compact() throws {
        try withWriteLock { backend in
            try Self.requireVerified(backend)
            try backend.compact(reseal: false)
        }
    }

    /// Reads and authenticates every file and record, under the write lock, before maintenance
    /// changes anything: damage a read has not met yet (a byte flipped in a record nobody asked
    /// for) is then known, and the backend's own check at the start of compaction and rekey
    /// (`requireUndamaged`) refuses it, not half-way through.
    private static func requireVerified(_ backend: any VaultBackend) throws {
        _ = try backend.verify()
    }

    /// Checks every file and every record and lists what is damaged; an empty list (or one of
    /// superseded damage only) means the vault is intact.
    ///
    /// - Returns: The damage found, by file and record.
    /// - Throws: `KeysmithError.Code.ioFailure` if the files cannot be read.
    public func verify() throws -> [VaultDamage] {
        try backend.withLock { backend in try backend.verify() }
    }

    /// The newest commit the vault holds: scripts record it and check it later with
    /// `keysmith vault verify --expect-sequence N` to notice a rollback on any machine.
    public var sequence: UInt64 {
        get throws {
            try backend.withLock { backend in
                try refreshed(&backend)
                return backend.lastSequence
            }
        }
    }

    /// Accepts the vault as it is after a deliberate restore from a backup: forgets this
    /// machine's anchor, so the rollback it reported no longer fails reads.
    public func acceptRollback() throws {
        try backend.withLock { backend in
            try backend.acceptRollback()
            try backend.refresh()
        }
    }

    /// Repairs a damaged vault: writes a new, consistent state from every record that
    /// authenticates, and says exactly what may be lost (docs/format.md, "Repair").
    ///
    /// Under the vault's lock, every file is read and every index and table entry tried as it
    /// stands; the newest version of each record whose tag and identity hold is kept. A new
    /// snapshot of those records (sealed as they are, nothing re-encrypted) replaces the
    /// snapshot and every log in one atomic rename, one sequence past every commit the vault
    /// held; both header copies are written from the copy in force; the rollback anchor is
    /// moved to the new sequence. The files it replaces are never deleted: they are moved into
    /// `damaged-<UTC time>/` under the vault (``VaultRepairReport/movedAside``). A crash at any
    /// step leaves either the damaged vault as it was (run the repair again) or the repaired one.
    ///
    /// ```swift
    /// let preview = try vault.repair(dryRun: true)        // changes nothing
    /// print(preview.losses, preview.itemsMaybeStale)
    /// let done = try vault.repair()
    /// print("kept \(done.itemsKept) item(s); the damaged files are in \(done.movedAside ?? "-")")
    /// ```
    ///
    /// An intact vault is left as it is (``VaultRepairReport/needed`` is `false`).
    ///
    /// - Parameter dryRun: Report what a repair would do and change nothing (not even the lock
    ///   file is created).
    /// - Returns: What was found, kept and possibly lost.
    /// - Throws: `KeysmithError.Code.corruptData` when the vault was rolled back (a repair
    ///   never accepts a rollback: that is ``acceptRollback()``'s deliberate step);
    ///   `KeysmithError.Code.invalidArgument` for a format 1 vault (its repair is
    ///   ``repairFormat1(at:credential:scrypt:dryRun:logger:)``);
    ///   `KeysmithError.Code.ioFailure` when the files cannot be read or written.
    @discardableResult
    public func repair(dryRun: Bool = false) throws -> VaultRepairReport {
        let report = try backend.withLock { backend -> VaultRepairReport in
            guard let engine = backend as? Engine else {
                throw KeysmithError.invalidArgument(
                    "this vault is format 1: repair it with `keysmith vault repair` (FileVault.repairFormat1(at:credential:)), which upgrades it; "
                        + "an intact one is converted by `keysmith vault upgrade`")
            }
            var locked: Descriptor?
            if !dryRun {
                let fd = try engine.lockFD()
                try lockExclusive(fd)
                locked = fd
            }
            defer { if let locked { System.unlock(locked) } }
            // Every file and record read first: damage no read met yet is known too, and so
            // are header copies that the write below heals.
            let headerCopies = try engine.verify(heal: !dryRun).filter { $0.isHeaderCopy && !$0.isLeftover }.map { "\($0.file): \($0.reason)" }
            if let rollback = engine.rollback {
                throw KeysmithError(.corruptData, "\(rollback.reason); a repair never accepts a rollback, nothing was changed")
            }
            if !dryRun { try engine.prepareWrite() }
            let plan = try engine.planRepair(headerCopies: headerCopies)
            defer { for fd in plan.descriptors { System.close(fd) } }
            guard !dryRun, plan.report.needed else { return plan.report }
            return try engine.carryOut(plan, at: Date())
        }
        if report.needed && !dryRun { Self.logRepair(report, "repaired the vault", path: path, logger: logger) }
        return report
    }

    /// A repair that changed the vault, as a warning: counts and places, never a name.
    static func logRepair(_ report: VaultRepairReport, _ message: Logger.Message, path: String, logger: Logger) {
        logger.warning(message, metadata: [
            "path": "\(path)", "kept": "\(report.itemsKept)", "losses": "\(report.losses.count)",
            "maybe-stale": "\(report.itemsMaybeStale.count)", "unreadable": "\(report.unreadableRecords.count)",
            "moved-aside": "\(report.movedAside ?? "")",
        ])
    }

    /// How many items the vault holds and how many log files await compaction.
    public var statistics: (items: Int, logFiles: Int) {
        get throws {
            try backend.withLock { backend in
                try refreshed(&backend)
                return try backend.statistics()
            }
        }
    }

    /// Runs `body` holding the in-process mutex and the vault's exclusive `flock`, after
    /// catching up with every commit other processes made and with the header on disk.
    private func withWriteLock<T>(_ body: (any VaultBackend) throws -> T) throws -> T {
        try backend.withLock { backend in
            // A format 1 handle follows an upgrade made meanwhile (then writes format 2);
            // format 1 itself is read-only: refused before the lock file is touched.
            if backend is Format1Backend { try refreshed(&backend) }
            if backend is Format1Backend { throw Format1Backend.readOnlyError(path) }
            let fd = try backend.lockFD()
            try lockExclusive(fd)
            defer { System.unlock(fd) }
            try backend.prepareWrite()
            return try body(backend)
        }
    }
}

extension FileVault {
    /// Converts a format 1 vault to format 2 in place, atomically: the new files are written
    /// beside the old ones under the vault's lock, and the new header's rename is the one
    /// instant the vault changes format. A crash before it leaves the format 1 vault as it was
    /// (the next upgrade starts over); after it, the format 2 vault with every record. Records
    /// keep their versions; the credential stays the same (a passphrase gets a fresh salt and
    /// `scrypt`'s cost, since format 2 refuses the lower costs format 1 allowed).
    ///
    /// ```swift
    /// if try FileVault.upgrade(at: path, credential: .keyfile(at: keyfile)) {
    ///     print("upgraded to format 2")
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - path: The vault's directory.
    ///   - credential: What unlocks it.
    ///   - scrypt: scrypt's cost for a passphrase in the new header.
    ///   - logger: Where the upgrade is reported.
    /// - Returns: `true` if the vault was upgraded, `false` if it already was format 2.
    /// - Throws: `KeysmithError.Code.corruptData` if the format 1 vault has damage (an
    ///   upgrade never drops a record silently: repair or restore it first), and what
    ///   ``open(at:credential:clock:anchorDirectory:logger:)`` throws.
    @discardableResult
    public static func upgrade(
        at path: String, credential: VaultCredential, scrypt: ScryptParameters = .default, logger: Logger = FileVault.defaultLogger()
    ) throws -> Bool {
        let vault = try open(at: path, credential: credential, logger: logger)
        guard vault.formatVersion == 1 else { return false }
        let upgraded = try vault.backend.withLock { backend -> Bool in
            guard let format1 = backend as? Format1Backend else { return false }
            let fd = try format1.lockFD()
            try vault.lockExclusive(fd)
            defer { System.unlock(fd) }
            // Another upgrade finished while this one waited for the lock: nothing to do.
            if case .version2 = HeaderFormat.inForce(path).probe { return false }
            try format1.prepareWrite()
            // A log after a gap is a commit format 1 never reads: the one before it is lost.
            let after = (try? System.listDirectory(path + "/log"))?.compactMap(LogName.sequence).filter { $0 > format1.lastSequence }
            if let first = after?.min() {
                throw KeysmithError(
                    .corruptData,
                    "log \(LogName.hex16(first)) follows the missing commit \(format1.lastSequence + 1): the vault has damage; "
                        + "`keysmith vault repair` upgrades it and says what may be lost; nothing was changed")
            }
            let records = try format1.allRecords()
            // A data/ already there (an interrupted upgrade's, or a format 2 vault whose header
            // was put back to a format 1 one) is moved aside, never deleted.
            try VaultCreation.replaceFormat1(
                root: path, credential: credential, scrypt: scrypt, created: Date(), idKey: format1.idKey,
                through: format1.lastSequence, records: records
            ) {
                let aside = try Durable.makeAsideDirectory(in: path, at: Date())
                logger.warning("moved a data directory the format 1 vault does not use aside", metadata: ["path": "\(path)", "moved-aside": "\(aside)"])
                return aside
            }
            try io { try System.removeTree(path + "/log") }
            try io { try System.unlink(path + "/snapshot") }
            logger.info("upgraded the vault to format 2", metadata: ["path": "\(path)", "items": "\(records.count)"])
            return true
        }
        return upgraded
    }
}

extension FileVault {
    /// Repairs a damaged format 1 vault (Keysmith 0.1, 0.2) the one way left for it: it is
    /// upgraded to format 2 with every record that authenticates, at the version it has, and
    /// the report says exactly what may be lost (the files that could not be read whole, the
    /// items kept at a version that may not be their newest, the records that could not be
    /// read at all). Nothing is deleted: the format 1 files are moved into `damaged-<time>/`
    /// under the vault. Atomic as ``upgrade(at:credential:scrypt:logger:)`` is: killed at any
    /// instant it leaves the damaged format 1 vault as it was (run it again) or the repaired
    /// format 2 one. An intact format 1 vault is left as it is (``VaultRepairReport/needed`` is
    /// `false`): ``upgrade(at:credential:scrypt:logger:)`` converts it.
    ///
    /// ```swift
    /// let preview = try FileVault.repairFormat1(at: path, credential: .keyfile(at: keyfile), dryRun: true)
    /// for loss in preview.losses { print("lost:", loss.file, loss.reason) }
    /// if preview.needed { try FileVault.repairFormat1(at: path, credential: .keyfile(at: keyfile)) }
    /// ```
    ///
    /// - Parameters:
    ///   - path: The vault's directory.
    ///   - credential: What unlocks it (the repaired vault keeps it).
    ///   - scrypt: scrypt's cost for a passphrase in the new header.
    ///   - dryRun: Report what a repair would do and change nothing.
    ///   - logger: Where the repair is reported.
    /// - Returns: What was found, kept and possibly lost.
    /// - Throws: `KeysmithError.Code.invalidArgument` for a format 2 vault (its repair is
    ///   ``repair(dryRun:)``) or an empty passphrase;
    ///   `KeysmithError.Code.authenticationFailed` when `credential` does not unlock the header;
    ///   `KeysmithError.Code.corruptData` when no header copy is intact (restore one from a
    ///   backup); `KeysmithError.Code.ioFailure` when the files cannot be read or written.
    @discardableResult
    public static func repairFormat1(
        at path: String, credential: VaultCredential, scrypt: ScryptParameters = .default, dryRun: Bool = false,
        logger: Logger = FileVault.defaultLogger()
    ) throws -> VaultRepairReport {
        guard !credential.isEmptyPassphrase else {
            throw KeysmithError.invalidArgument("the passphrase is empty; nothing was changed")
        }
        if credential.isPassphrase { try scrypt.validate() }
        // Which format, without opening the vault (an open of a format 2 vault finishes
        // interrupted writes, which a dry run must not do).
        func refuseFormat2() throws {
            if case .version2 = HeaderFormat.inForce(path).probe {
                throw KeysmithError.invalidArgument(
                    "the vault at \(path) is format 2: repair it with `keysmith vault repair` (FileVault.repair(dryRun:)); nothing was changed")
            }
        }
        try refuseFormat2()
        let report: VaultRepairReport
        if dryRun {
            report = try Format1Salvage(root: path, credential: credential).plan().report  // reads only; no lock file is made
        } else {
            let lock = try io {
                try System.open(path + "/lock", flags: OpenFlags.readWrite | OpenFlags.create | OpenFlags.noFollow, mode: 0o600)
            }
            defer { System.close(lock) }
            try io { try System.lockExclusive(lock, path: path + "/lock") }
            defer { System.unlock(lock) }
            if case .version2 = HeaderFormat.inForce(path).probe {
                throw KeysmithError(
                    .storeLocked,
                    "another process upgraded or repaired the vault to format 2 while this repair waited for its lock; nothing was changed: "
                        + "run the repair again (it repairs it as format 2 if it is damaged)")
            }
            let locked = try Format1Salvage(root: path, credential: credential)
            let plan = try locked.plan()
            report = plan.report.needed ? try locked.carryOut(plan, credential: credential, scrypt: scrypt, at: Date()) : plan.report
        }
        if report.needed && !dryRun { logRepair(report, "repaired the format 1 vault into format 2", path: path, logger: logger) }
        return report
    }
}

extension FileVault: ExclusiveLocking {
    /// An open-file-description lock on one byte of `locks/named.lock` in the vault's directory (made 0700 when missing), shared by
    /// every process that opens this vault on this machine; released by the holder's end too.
    ///
    /// A format 1 vault is read-only: its lock is refused (`invalidArgument`, as its writes are),
    /// before anything is done under it, such as spending a refresh token whose answer could not
    /// be kept.
    public func tryExclusiveLock(named name: String) throws -> (any HeldLock)? {
        try backend.withLock { backend in
            // A format 1 handle follows an upgrade made meanwhile; format 1 itself is read-only.
            if backend is Format1Backend { try refreshed(&backend) }
            if backend is Format1Backend { throw Format1Backend.readOnlyError(path) }
        }
        do {
            return try LockFile.tryAcquire(directory: path + "/locks", name: name).map(FileLock.init)
        } catch let error as SystemError {
            throw KeysmithError(.ioFailure, "cannot take the vault's lock \"\(OneLine.escaped(String(name.prefix(64))))\": \(error)")
        }
    }
}

/// A held `LockFile`, as the core's ``HeldLock``.
final class FileLock: HeldLock {
    let file: LockFile
    init(_ file: LockFile) { self.file = file }
    func release() { file.release() }
    func isHeld() -> Bool { file.isHeld }
}

/// How a writer waits for a file vault's lock that another process holds
/// (``FileVault/lockWait``).
public struct VaultLockWait: Sendable {
    /// How long to wait before giving up with `KeysmithError.Code.timedOut` (nothing changed);
    /// `nil` waits for ever, `.zero` fails at once.
    public var timeout: Duration?
    /// How long to wait before ``notice`` is called (once per wait).
    public var noticeAfter: Duration
    /// Told, once a wait has lasted ``noticeAfter``, which lock is waited for and which process
    /// holds it (when the kernel says): one line, no secret, no item name.
    public var notice: (@Sendable (String) -> Void)?

    /// A wait of at most `timeout` (`nil`: for ever), saying so to `notice` after `noticeAfter`.
    public init(timeout: Duration? = nil, noticeAfter: Duration = .seconds(1), notice: (@Sendable (String) -> Void)? = nil) {
        self.timeout = timeout
        self.noticeAfter = noticeAfter
        self.notice = notice
    }

    /// Waits for ever, saying nothing, in the kernel's queue: what a handle does unless told
    /// otherwise.
    public static let forever = VaultLockWait(timeout: nil, noticeAfter: .seconds(1 << 40))
}
