public import Keysmith
public import Logging
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
    private let engine: Mutex<VaultEngine>
    /// Where the vault reports what it does: commits and compactions at `debug`, damage at
    /// `warning`. Messages never contain a secret, and name items only at `trace`.
    public let logger: Logger

    private init(path: String, engine: consuming VaultEngine, logger: Logger) {
        self.path = path
        self.engine = Mutex(engine)
        self.logger = logger
    }

    /// The logger a vault uses when given none: label `keysmith.vault`, through the process's
    /// `LoggingSystem`.
    public static func defaultLogger() -> Logger { Logger(label: "keysmith.vault") }

    // MARK: Creating and opening

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

    /// Creates a new, empty vault.
    ///
    /// The directory is created with mode 0700 (and its parents, 0700, if missing); every file
    /// in it is created with mode 0600.
    ///
    /// - Parameters:
    ///   - path: The vault's directory. It must not exist, or be empty.
    ///   - credential: What will unlock it.
    ///   - scrypt: scrypt's cost for a passphrase; ignored for a keyfile.
    ///   - clock: The source of created and modified dates; the system clock if omitted.
    ///   - logger: Where the vault reports what it does (``defaultLogger()`` if omitted).
    /// - Returns: The open vault.
    /// - Throws: ``KeysmithError/Code/duplicateItem`` if a vault or other files are already
    ///   there; ``KeysmithError/Code/ioFailure`` if the directory cannot be made.
    public static func create(
        at path: String, credential: VaultCredential, scrypt: ScryptParameters = .default,
        clock: @escaping @Sendable () -> Date = { Date() }, logger: Logger = FileVault.defaultLogger()
    ) throws -> FileVault {
        let paths = VaultPaths(root: path)
        try io {
            try makeDirectories(path)
            let existing = try System.listDirectory(path)
            if !existing.isEmpty {
                throw KeysmithError(
                    .duplicateItem,
                    existing.contains(VaultHeader.primaryName)
                        ? "a vault already exists at \(path)" : "\(path) is not empty; choose an empty or new directory")
            }
            try System.mkdir(paths.logDirectory)
        }
        let vaultID = try vaultCrypto { try Random.bytes(count: Format.vaultIDSize) }
        let kdf = try HeaderStore.newKDF(for: credential, scrypt: scrypt)
        let kek = try HeaderStore.deriveKEK(kdf, credential: credential)
        let idKey = try vaultCrypto { try SecretBytes.random(count: 32) }
        let dataKey = try vaultCrypto { try SecretBytes.random(count: 32) }
        let header = VaultHeader(
            format: VaultHeader.formatName, version: Int(Format.version), vaultId: vaultID.hexString,
            created: iso8601(clock()), kdf: kdf,
            idKey: try vaultCrypto { try VaultHeader.wrap(idKey, with: kek, vaultID: vaultID, purpose: KeyPurpose.id, epoch: 0) },
            dataKeys: [try vaultCrypto { try VaultHeader.wrap(dataKey, with: kek, vaultID: vaultID, purpose: KeyPurpose.data, epoch: 1) }])
        try HeaderStore.write(header, paths)
        let unlocked = UnlockedHeader(header: header, kek: kek, idKey: idKey, dataKeys: [1: dataKey])
        logger.debug("created a vault", metadata: ["path": "\(path)"])
        return try open(paths: paths, unlocked: unlocked, clock: clock, logger: logger)
    }

    /// Opens and unlocks an existing vault.
    ///
    /// - Parameters:
    ///   - path: The vault's directory.
    ///   - credential: Its passphrase or keyfile.
    ///   - clock: The source of created and modified dates; the system clock if omitted.
    ///   - logger: Where the vault reports what it does (``defaultLogger()`` if omitted).
    /// - Returns: The open vault. Damaged records do not stop it from opening; reads of them
    ///   throw, and ``verify()`` lists them.
    /// - Throws: ``KeysmithError/Code/storeUnavailable`` if there is no vault there;
    ///   ``KeysmithError/Code/authenticationFailed`` for a wrong passphrase or keyfile;
    ///   ``KeysmithError/Code/corruptData`` if both copies of the header are damaged or the
    ///   header belongs to another vault's records.
    public static func open(
        at path: String, credential: VaultCredential, clock: @escaping @Sendable () -> Date = { Date() },
        logger: Logger = FileVault.defaultLogger()
    ) throws -> FileVault {
        let paths = VaultPaths(root: path)
        guard let status = try io({ try System.status(path) }), status.isDirectory else {
            throw KeysmithError(.storeUnavailable, "there is no vault at \(path); create one with `keysmith init`")
        }
        let headers = HeaderStore.intactCopies(paths)
        var unlocked: UnlockedHeader?
        var firstError: (any Error)?
        for header in headers {
            do {
                unlocked = try HeaderStore.unlock(header, credential: credential)
                break
            } catch {
                firstError = firstError ?? error
            }
        }
        guard let unlocked else {
            if let firstError { throw firstError }
            _ = try HeaderStore.read(paths)  // throws the precise "no header" / "damaged" error
            throw KeysmithError(.corruptData, "the vault header cannot be read")
        }
        return try open(paths: paths, unlocked: unlocked, clock: clock, logger: logger)
    }

    private static func open(
        paths: VaultPaths, unlocked: UnlockedHeader, clock: @escaping @Sendable () -> Date, logger: Logger
    ) throws -> FileVault {
        let lockFD = try io {
            try System.open(paths.lock, flags: OpenFlags.readWrite | OpenFlags.create, mode: 0o600)
        }
        var engine = VaultEngine(paths: paths, unlocked: unlocked, lockFD: lockFD, clock: clock)
        try engine.reloadAll()
        if engine.filesSeen > 0, engine.foreignFiles == engine.filesSeen {
            throw KeysmithError(
                .corruptData,
                "the vault header belongs to another vault than its records (header from another vault?); restore the header from a backup")
        }
        logger.debug("opened the vault", metadata: [
            "path": "\(paths.root)", "items": "\(engine.entries.count)", "logs": "\(engine.logsSinceSnapshot)",
        ])
        let damage = engine.damage.filter { !$0.isSuperseded }
        if !damage.isEmpty {
            logger.warning("the vault has damage; run `keysmith vault verify`", metadata: [
                "path": "\(paths.root)", "problems": "\(damage.count)",
            ])
        }
        return FileVault(path: paths.root, engine: engine, logger: logger)
    }

    private static func makeDirectories(_ path: String) throws {
        var current = path.hasPrefix("/") ? "" : "."
        for component in path.split(separator: "/") {
            current += "/" + component
            try System.mkdir(current, mode: 0o700)
        }
    }

    // MARK: SecureStore

    /// `file vault at PATH`.
    public var storeDescription: String { "file vault at \(path)" }

    /// ``StoreIsolation/serializable``: every batch is one commit file written under the vault's
    /// exclusive `flock`, across handles and processes.
    public var isolation: StoreIsolation { .serializable }

    /// ``StoreLimits/standard``: secrets up to 32 MiB, names and metadata up to 64 KiB each, so
    /// that every sealed record stays under the 64 MiB a frame may hold.
    public var limits: StoreLimits { .standard }

    /// Reads one item, decrypting its secret.
    ///
    /// - Throws: ``KeysmithError/Code/corruptData`` naming the record and the file if the
    ///   item's latest version is damaged. A missing item returns `nil`.
    public func read(_ key: ItemKey) throws -> SecureRecord? {
        try engine.withLock { engine in
            try engine.refresh()
            return try engine.read(key)
        }
    }

    /// Reads many items after catching up with other processes once.
    public func read(_ keys: [ItemKey]) throws -> [SecureRecord?] {
        try engine.withLock { engine in
            try engine.refresh()
            return try keys.map { try engine.read($0) }
        }
    }

    /// Lists matching items from the decrypted metadata; secrets stay encrypted.
    public func search(_ query: ItemQuery) throws -> [ItemInfo] {
        try engine.withLock { engine in
            try engine.refresh()
            return engine.entries.values.lazy.filter { query.matches($0.info.attributes) }.map(\.info)
        }
    }

    /// Commits a batch as one durable log file: all of it survives a crash, or none of it.
    public func perform(_ operations: [StoreOperation]) throws {
        try withWriteLock { engine in
            let before = engine.lastSequence
            try engine.commit(operations)
            if engine.lastSequence != before {
                logger.debug("committed", metadata: ["sequence": "\(engine.lastSequence)", "operations": "\(operations.count)"])
                if logger.logLevel <= .trace {
                    logger.trace("committed items", metadata: ["keys": "\(operations.map(\.key.description))"])
                }
            }
            if engine.wantsCompaction {
                try engine.compact()
                logger.debug("compacted", metadata: ["through": "\(engine.lastSequence)", "items": "\(engine.entries.count)"])
            }
        }
    }

    // MARK: Maintenance

    /// Changes what unlocks the vault: re-wraps the keys under a new passphrase or keyfile.
    /// Records are not touched. Crash-safe: the header is replaced atomically.
    ///
    /// - Parameters:
    ///   - credential: The new passphrase or keyfile.
    ///   - scrypt: scrypt's cost for a new passphrase.
    /// - Throws: ``KeysmithError/Code/ioFailure`` if the header cannot be written.
    public func changeCredential(to credential: VaultCredential, scrypt: ScryptParameters = .default) throws {
        try withWriteLock { engine in
            let kdf = try HeaderStore.newKDF(for: credential, scrypt: scrypt)
            let kek = try HeaderStore.deriveKEK(kdf, credential: credential)
            var header = try engine.currentHeaderWithAllKeys()
            header.kdf = kdf
            header.idKey = try vaultCrypto {
                try VaultHeader.wrap(engine.idKey, with: kek, vaultID: engine.vaultID, purpose: KeyPurpose.id, epoch: 0)
            }
            header.dataKeys = try header.dataKeys.map { wrapped in
                // currentHeaderWithAllKeys() unwrapped every epoch the header holds, or threw.
                guard let dataKey = engine.dataKeys[wrapped.epoch] else {
                    throw KeysmithError(.corruptData, "the vault's data key of epoch \(wrapped.epoch) could not be unwrapped")
                }
                return try vaultCrypto {
                    try VaultHeader.wrap(dataKey, with: kek, vaultID: engine.vaultID, purpose: KeyPurpose.data, epoch: wrapped.epoch)
                }
            }
            try HeaderStore.write(header, engine.paths)
            engine.header = header
            engine.kek = kek
        }
    }

    /// Re-encrypts every record under a new random data key and retires the old one.
    ///
    /// Crash-safe in three atomic steps: the new key is added to the header, every record is
    /// written into a new snapshot under it, the old key is removed. A crash between steps
    /// leaves a vault that opens with every record.
    ///
    /// - Throws: ``KeysmithError/Code/corruptData`` if the vault has damage (repair it first).
    public func rekey() throws {
        try withWriteLock { engine in
            try engine.requireUndamaged()
            var header = try engine.currentHeaderWithAllKeys()
            let newEpoch = (engine.dataKeys.keys.max() ?? 0) + 1
            let newKey = try vaultCrypto { try SecretBytes.random(count: 32) }
            header.dataKeys.append(try vaultCrypto {
                try VaultHeader.wrap(newKey, with: engine.kek, vaultID: engine.vaultID, purpose: KeyPurpose.data, epoch: newEpoch)
            })
            try HeaderStore.write(header, engine.paths)
            engine.header = header
            engine.dataKeys[newEpoch] = newKey
            engine.currentEpoch = newEpoch

            try engine.compact(reseal: true)

            header.dataKeys.removeAll { $0.epoch != newEpoch }
            try HeaderStore.write(header, engine.paths)
            engine.header = header
            engine.dataKeys = [newEpoch: newKey]
        }
    }

    /// Writes every record into one snapshot and removes the logs it covers. Writes do this by
    /// themselves when logs pile up; call it to do it now.
    ///
    /// - Throws: ``KeysmithError/Code/corruptData`` if the vault has damage.
    public func compact() throws {
        try withWriteLock { engine in try engine.compact() }
    }

    /// Checks every file and lists what is damaged; an empty list means the vault is intact.
    ///
    /// - Returns: The damage found, by file and record.
    /// - Throws: ``KeysmithError/Code/ioFailure`` if the files cannot be read.
    public func verify() throws -> [VaultDamage] {
        try engine.withLock { engine in
            try engine.reloadAll()
            return engine.damage
        }
    }

    /// How many items the vault holds and how many log files await compaction.
    public var statistics: (items: Int, logFiles: Int) {
        get throws {
            try engine.withLock { engine in
                try engine.refresh()
                return (engine.entries.count, engine.logsSinceSnapshot)
            }
        }
    }

    /// Runs `body` holding the in-process mutex and the vault's exclusive `flock`, after
    /// catching up with every commit other processes made.
    private func withWriteLock<T>(_ body: (inout VaultEngine) throws -> T) throws -> T {
        try engine.withLock { engine in
            let fd = engine.lockFD
            try io { try System.lockExclusive(fd, path: engine.paths.lock) }
            defer { System.unlock(fd) }
            try engine.refresh()
            try engine.healHeaderCopies()
            return try body(&engine)
        }
    }
}
