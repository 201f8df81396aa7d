import FoundationEssentials
import Dispatch
import Keysmith
import KeysmithCredentials
import KeysmithCrypto
import KeysmithSystem
import Synchronization

/// One intact record in memory: its sealed frame (the secret stays encrypted until read) and
/// its decrypted attributes (for search). A class, so the index hands out one reference instead
/// of copying a dozen arrays and strings.
final class Entry: Sendable {
    let frame: Frame
    let info: ItemInfo
    let file: String

    init(frame: Frame, info: ItemInfo, file: String) {
        self.frame = frame
        self.info = info
        self.file = file
    }
}

/// An open format 1 vault, read only: the state of its files in memory. Only `FileVault`
/// touches it, always under its mutex; an upgrade or a repair also holds the vault's `flock`.
struct Format1Engine: ~Copyable {
    let paths: Paths1
    let vaultID: [UInt8]
    var header: VaultHeader1
    /// The key-encryption key of the header, to unwrap a data key another process added.
    let kek: SecretBytes
    let idKey: SecretBytes
    var dataKeys: [UInt32: SecretBytes]
    /// The lock file, opened by the first upgrade (a format 1 vault on a read-only file system
    /// still opens and reads: nothing is created to read it).
    private var lockDescriptor: Descriptor?
    let clock: @Sendable () -> Date

    /// The snapshot we loaded, held open so its inode cannot be reused while we compare it.
    var snapshotFD: Descriptor?
    var snapshotInode: UInt64?
    var lastSequence: UInt64 = 0
    var logsSinceSnapshot = 0

    var entries: [ItemKey: Entry] = [:]
    var keyByID: [RecordID: ItemKey] = [:]
    var damagedByID: [RecordID: (version: UInt64, damage: VaultDamage)] = [:]
    var fileDamage: [VaultDamage] = []
    /// The newest commit whose damage cannot be tied to records: any record older than it may
    /// have been changed by the lost bytes, so reading it would risk an out-of-date secret.
    var uncertainBefore: (sequence: UInt64, damage: VaultDamage)?
    var foreignFiles = 0
    var filesSeen = 0

    init(paths: Paths1, unlocked: UnlockedHeader1, clock: @escaping @Sendable () -> Date) {
        self.paths = paths
        self.vaultID = unlocked.header.vaultIDBytes
        self.header = unlocked.header
        self.kek = unlocked.kek
        self.idKey = unlocked.idKey
        self.dataKeys = unlocked.dataKeys
        self.clock = clock
    }

    deinit {
        if let snapshotFD { System.close(snapshotFD) }
        if let lockDescriptor { System.close(lockDescriptor) }
    }

    /// The lock file's descriptor, opened (made when missing, never through a link) on first use.
    mutating func lockFD() throws -> Descriptor {
        if let lockDescriptor { return lockDescriptor }
        let opened = try io {
            try System.open(paths.lock, flags: OpenFlags.readWrite | OpenFlags.create | OpenFlags.noFollow, mode: 0o600)
        }
        lockDescriptor = opened
        return opened
    }

    // MARK: Loading

    /// Brings the in-memory state up to date with the files: a new snapshot means a full
    /// reload, then every log after it is applied in order. Costs two system calls when
    /// nothing changed.
    mutating func refresh() throws {
        let status = try io { try System.status(paths.snapshot) }
        if status?.inode != snapshotInode {
            try reloadAll()
            return
        }
        try applyLogs()
    }

    mutating func reloadAll() throws {
        defer { checkHeaderCopies() }
        entries = [:]
        keyByID = [:]
        damagedByID = [:]
        fileDamage = []
        uncertainBefore = nil
        foreignFiles = 0
        filesSeen = 0
        logsSinceSnapshot = 0
        lastSequence = 0
        if let snapshotFD { System.close(snapshotFD) }
        snapshotFD = nil
        snapshotInode = nil

        let fd: Descriptor
        do {
            guard let opened = try System.openRegularFile(paths.snapshot, maximumSize: Format.maximumFileSize) else {
                try applyLogs()
                return
            }
            fd = opened.fd
        } catch let error as SystemError where error.isUnusableFile {
            throw KeysmithError(.corruptData, "the vault's snapshot is not a regular file (\(error)): it is damaged; "
                                + "run `keysmith vault repair` (it upgrades the vault, keeping every record that authenticates), or restore the vault from a backup")
        } catch let error as SystemError {
            throw KeysmithError(.ioFailure, "cannot open the vault's snapshot: \(error)")
        }
        snapshotFD = fd
        snapshotInode = try io { try System.status(paths.snapshot)?.inode }
        let bytes = try io { try System.readAll(fd, path: paths.snapshot) }
        let through = try applyFile(bytes, name: "snapshot", kind: .snapshot, expectedSequence: nil)
        guard through < Format.maximumSequence else {
            throw KeysmithError(.corruptData, "the vault's snapshot claims commit \(through), beyond any a vault reaches: it is damaged; "
                                + "run `keysmith vault repair` (it upgrades the vault, keeping every record that authenticates)")
        }
        lastSequence = through
        try applyLogs()
    }

    /// Reports a damaged or missing copy of the header (the other copy keeps the vault open).
    /// Two identical copies that parse are the common case and cost one parse.
    mutating func checkHeaderCopies() {
        let primary = try? System.readRegularFile(paths.header, maximumSize: Format.maximumHeaderSize)
        let backup = try? System.readRegularFile(paths.headerBackup, maximumSize: Format.maximumHeaderSize)
        if let primary, let backup, primary == backup, let parsed = try? VaultHeader1.parse(primary), parsed.vaultIDBytes == vaultID {
            return
        }
        for (bytes, name) in [(primary, HeaderFormat.primaryName), (backup, HeaderFormat.backupName)] {
            let reason: String?
            if let bytes = bytes ?? nil {
                if let parsed = try? VaultHeader1.parse(bytes) {
                    reason = parsed.vaultIDBytes == vaultID ? nil : "the header copy belongs to another vault"
                } else {
                    reason = "the header copy is damaged (checksum or syntax)"
                }
            } else {
                reason = "the header copy is missing or unreadable"
            }
            if let reason { fileDamage.append(VaultDamage(file: name, offset: 0, recordID: nil, key: nil, reason: reason)) }
        }
    }

    mutating func applyLogs() throws {
        while true {
            let sequence = lastSequence + 1
            let path = paths.log(sequence)
            let read: [UInt8]?
            do {
                read = try System.readRegularFile(path, maximumSize: Format.maximumFileSize)
            } catch let error as SystemError where error.isUnusableFile {
                throw KeysmithError(.corruptData, "the vault's log \(paths.logName(sequence)) is not a regular file (\(error)): it is damaged; "
                                    + "run `keysmith vault repair` (it upgrades the vault, keeping every record that authenticates), or restore the vault from a backup")
            }
            guard let bytes = read else { return }
            _ = try applyFile(bytes, name: paths.logName(sequence), kind: .log, expectedSequence: sequence)
            lastSequence = sequence
            logsSinceSnapshot += 1
        }
    }

    /// Applies one file's frames; returns the sequence its header names (for a snapshot, the
    /// last log it covers).
    mutating func applyFile(_ bytes: [UInt8], name: String, kind: FrameFile.Kind, expectedSequence: UInt64?) throws -> UInt64 {
        let damageBefore = fileDamage.count
        let sequence = try applyFileFrames(bytes, name: name, kind: kind, expectedSequence: expectedSequence)
        if let hiding = fileDamage[damageBefore...].first(where: \.hidesRecords) {
            uncertainBefore = (max(sequence, uncertainBefore?.sequence ?? 0), hiding)
        }
        return sequence
    }

    private mutating func applyFileFrames(_ bytes: [UInt8], name: String, kind: FrameFile.Kind, expectedSequence: UInt64?) throws -> UInt64 {
        filesSeen += 1
        var sequence = expectedSequence ?? 0
        if let header = FrameFile.parseHeader(bytes, kind: kind) {
            if header.vaultID != vaultID {
                foreignFiles += 1
                fileDamage.append(VaultDamage(
                    file: name, offset: 0, recordID: nil, key: nil,
                    reason: "the file belongs to another vault (vault id \(header.vaultID.hexString), this vault is \(vaultID.hexString))",
                    hidesRecords: true))
            }
            if let expectedSequence, header.sequence != expectedSequence {
                fileDamage.append(VaultDamage(
                    file: name, offset: 0, recordID: nil, key: nil,
                    reason: "the file says it is log \(header.sequence): it was renamed or copied"))
            }
            if expectedSequence == nil { sequence = header.sequence }
        } else {
            fileDamage.append(VaultDamage(
                file: name, offset: 0, recordID: nil, key: nil,
                reason: bytes.count < Format1.fileHeaderSize ? "the file is truncated inside its header" : "the file header is damaged",
                hidesRecords: bytes.count < Format1.fileHeaderSize + Format1.frameHeaderSize))
            if bytes.count < Format1.fileHeaderSize + Format1.frameHeaderSize { return expectedSequence ?? 0 }
            if expectedSequence == nil {
                // A snapshot whose header is lost: it covers at least its newest record.
                // Replaying older logs again is harmless (see docs/format.md, "Recovery").
                sequence = FrameFile.parseFrames(bytes).frames.map(\.frame.version).max() ?? 0
            }
        }

        let parsed = FrameFile.parseFrames(bytes)
        let header = FrameFile.parseHeader(bytes, kind: kind)
        // Frames may be missing without a trace (a cut at a frame boundary): the header's count
        // tells. Damage that runs to the end of the file may have swallowed frames too.
        let found = parsed.frames.count + parsed.damage.filter { $0.recordID != nil && !$0.inTrailer }.count
        if let header, found < header.count {
            fileDamage.append(VaultDamage(
                file: name, offset: bytes.count, recordID: nil, key: nil,
                reason: "the file holds \(found) of its \(header.count) records: it was truncated", hidesRecords: true))
        } else if header == nil, parsed.damage.contains(where: \.endsFile) {
            fileDamage.append(VaultDamage(
                file: name, offset: bytes.count, recordID: nil, key: nil,
                reason: "the file is cut short and its header, which counts its records, is damaged", hidesRecords: true))
        }
        for (frame, offset) in parsed.frames {
            if let expectedSequence, frame.version != expectedSequence {
                markDamaged(frame.recordID, version: frame.version, file: name, offset: offset,
                            reason: "the record says it was written by commit \(frame.version) but sits in \(name): it was moved")
                continue
            }
            if expectedSequence == nil, frame.version > sequence, header != nil {
                markDamaged(frame.recordID, version: frame.version, file: name, offset: offset,
                            reason: "the record is newer than the snapshot that holds it: it was moved")
                continue
            }
            try apply(frame, file: name, offset: offset)
        }
        for damage in parsed.damage {
            if let recordID = damage.recordID {
                markDamaged(recordID, version: damage.version ?? sequence, file: name, offset: damage.offset, reason: damage.reason)
            } else {
                fileDamage.append(VaultDamage(file: name, offset: damage.offset, recordID: nil, key: nil,
                                              reason: damage.reason + ", and which record it held cannot be told",
                                              hidesRecords: true))
            }
        }
        return sequence
    }

    private func currentVersion(of recordID: RecordID) -> UInt64? {
        if let key = keyByID[recordID], let entry = entries[key] { return entry.frame.version }
        return damagedByID[recordID]?.version
    }

    /// A newer intact version replaces a damaged one: the damage stays on the report, marked as
    /// replaced, and no longer makes reads of the record fail.
    mutating func supersedeDamage(of recordID: RecordID) {
        guard let old = damagedByID.removeValue(forKey: recordID)?.damage else { return }
        fileDamage.append(VaultDamage(file: old.file, offset: old.offset, recordID: old.recordID, key: old.key,
                                      reason: old.reason + " (a newer version of the record replaces it)", isSuperseded: true))
    }

    mutating func apply(_ frame: Frame, file: String, offset: Int) throws {
        if let version = currentVersion(of: frame.recordID), frame.version <= version { return }
        switch frame.open(key: try dataKey(for: frame.epoch), vaultID: vaultID, idKey: idKey, withSecret: false) {
        case .failure(let failure):
            markDamaged(frame.recordID, version: frame.version, file: file, offset: offset, reason: failure.reason)
        case .success(nil):  // a deletion
            if let key = keyByID.removeValue(forKey: frame.recordID) { entries[key] = nil }
            supersedeDamage(of: frame.recordID)
        case .success(let record?):
            if let previous = keyByID[frame.recordID], previous != record.key { entries[previous] = nil }
            keyByID[frame.recordID] = record.key
            entries[record.key] = Entry(frame: frame, info: record.info, file: file)
            supersedeDamage(of: frame.recordID)
        }
    }

    mutating func markDamaged(_ recordID: RecordID, version: UInt64, file: String, offset: Int, reason: String) {
        if let current = currentVersion(of: recordID), version < current { 
            // An older version is damaged, but a newer one supersedes it: report, don't block.
            fileDamage.append(VaultDamage(file: file, offset: offset, recordID: recordID.description, key: keyByID[recordID],
                                          reason: reason + " (a newer version of the record replaces it)", isSuperseded: true))
            return
        }
        let key = keyByID.removeValue(forKey: recordID)
        if let key { entries[key] = nil }
        let known = key ?? damagedByID[recordID]?.damage.key
        damagedByID[recordID] = (version, VaultDamage(file: file, offset: offset, recordID: recordID.description, key: known, reason: reason))
    }

    /// The data key of an epoch, re-reading the header once if another process re-keyed.
    mutating func dataKey(for epoch: UInt32) throws -> SecretBytes? {
        if let key = dataKeys[epoch] { return key }
        guard let fresh = try? HeaderStore1.read(paths), fresh.vaultIDBytes == vaultID else { return nil }
        for wrapped in fresh.dataKeys where dataKeys[wrapped.epoch] == nil {
            if let key = try? VaultHeader1.unwrap(wrapped, with: kek, vaultID: vaultID, purpose: KeyPurpose.data) {
                dataKeys[wrapped.epoch] = key
            }
        }
        header = fresh
        return dataKeys[epoch]
    }

    // MARK: Reading

    func recordID(for key: ItemKey) -> RecordID {
        if let entry = entries[key] { return entry.frame.recordID }
        return RecordID(SHA256.hmac(key: idKey, RecordCodec.identity(key)))!
    }

    func damage(for key: ItemKey) -> VaultDamage? {
        guard !damagedByID.isEmpty else { return nil }
        return damagedByID[recordID(for: key)]?.damage
    }

    func read(_ key: ItemKey) throws -> SecureRecord? {
        guard let entry = entries[key] else {
            if let damage = damage(for: key) { throw Self.damagedError(key, damage) }
            // Damage that cannot be tied to a record (a file from another vault, a file cut
            // inside its header) may have held this one: say so rather than answer "none".
            if let uncertain = uncertainBefore {
                throw KeysmithError(
                    .corruptData,
                    "\(key) was not found, but the vault is damaged where it may have been (\(uncertain.damage)); "
                        + "restore the vault from a backup, or run `keysmith vault repair` (it upgrades the vault, keeping every record that authenticates)")
            }
            return nil
        }
        if let uncertain = uncertainBefore, entry.frame.version < uncertain.sequence {
            throw KeysmithError(
                .corruptData,
                "\(key) may be out of date: a later commit that may have changed it is damaged (\(uncertain.damage)); "
                    + "restore the vault from a backup, or run `keysmith vault repair` (it upgrades the vault and names what may be stale)")
        }
        return try open(entry)
    }

    /// An intact record's secret and attributes, decrypted and authenticated, whatever damage
    /// elsewhere says about how current it is (a repair keeps it and says it may be stale).
    func open(_ entry: Entry) throws -> SecureRecord {
        let key = entry.info.key
        guard let dataKey = dataKeys[entry.frame.epoch] else {
            throw KeysmithError(.corruptData, "\(key) is sealed under a key this vault no longer holds")
        }
        var plaintext = try keysmithCrypto {
            try AESGCM.open(
                ciphertext: entry.frame.ciphertext, tag: entry.frame.tag, key: dataKey, nonce: entry.frame.nonce,
                associatedData: entry.frame.associatedData(vaultID: vaultID))
        }
        defer { cleanse(&plaintext) }
        var record: SecureRecord
        do {
            record = try RecordCodec.decode(plaintext, withSecret: true)
        } catch {
            throw KeysmithError(.corruptData, "\(key) in \(entry.file) does not decode")
        }
        record.info.version = entry.info.version
        return record
    }

    /// A record's version: the commit that last wrote it. Compaction and rekey keep it.
    static func version(of frame: Frame) -> ItemVersion {
        ItemVersion(rawValue: "c" + String(frame.version))
    }

    static func damagedError(_ key: ItemKey, _ damage: VaultDamage) -> KeysmithError {
        KeysmithError(
            .corruptData,
            "\(key) (record \(damage.recordID ?? "?")) is damaged in \(damage.file) at byte \(damage.offset): \(damage.reason); "
                + "other records are unaffected; `keysmith vault repair` upgrades the vault, keeping every record that authenticates")
    }

    var damage: [VaultDamage] {
        fileDamage + damagedByID.values.map(\.damage).sorted { ($0.file, $0.offset) < ($1.file, $1.offset) }
    }

    var isDamaged: Bool { !damagedByID.isEmpty || fileDamage.contains { !$0.isHeaderCopy && !$0.isSuperseded } }

    /// Throws when the vault has damage that an upgrade would silently drop.
    func requireUndamaged() throws {
        guard !isDamaged else {
            throw KeysmithError(
                .corruptData,
                "the vault has damage (\(damage.count) problem(s); run `keysmith vault verify`); `keysmith vault repair` upgrades it keeping every record that authenticates")
        }
    }
}

/// Key purposes in the key-wrap associated data.
enum KeyPurpose {
    static let id: UInt8 = 1
    static let data: UInt8 = 2
}

/// Runs file code and turns its failures into Keysmith errors.
func io<T>(_ body: () throws -> T) throws -> T {
    do {
        return try body()
    } catch let error as SystemError {
        throw KeysmithError(.ioFailure, error.advice.map { "\(error): \($0)" } ?? "\(error)")
    }
}
