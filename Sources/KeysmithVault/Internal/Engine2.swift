import Dispatch
import Keysmith
import KeysmithCrypto
import KeysmithSystem
import Synchronization

/// The files of a format-2 vault under its directory.
struct Paths2: Sendable {
    let root: String
    var header: String { root + "/" + VaultHeader.primaryName }
    var headerBackup: String { root + "/" + VaultHeader.backupName }
    var lock: String { root + "/lock" }
    var data: String { root + "/" + Format2.dataDirectory }
    var snapshot: String { data + "/snapshot" }
    var logDirectory: String { data + "/log" }
    func logName(_ sequence: UInt64) -> String { Format2.dataDirectory + "/log/" + VaultPaths.hex16(sequence) }
    func log(_ sequence: UInt64) -> String { root + "/" + logName(sequence) }
    static let snapshotName = Format2.dataDirectory + "/snapshot"
}

/// An open format-2 vault. Only `FileVault` touches it, under its mutex; writes also hold the
/// vault's `flock`. Opening reads the header, the snapshot's header and directory and the
/// logs' tables: never the records. A read costs one page and one record.
final class Engine2 {
    let paths: Paths2
    let vaultID: [UInt8]
    var unlocked: UnlockedHeader2
    let clock: @Sendable () -> Date
    let anchor: AnchorStore?
    /// A keyfile or key credential, kept so that a header re-wrapped by another process (a new
    /// salt, the same keyfile) can be followed. A passphrase is never kept: after another
    /// process changes it, this handle must be opened again.
    private let rederivable: VaultCredential?
    private var lockDescriptor: Int32 = -1

    // The snapshot.
    private var snapshotFD: Int32 = -1
    private var snapshotStatus: System.FileStatus?
    private(set) var snapshotHead: SnapshotFile2.Head?
    private var directory: [(first: RecordID, mac: [UInt8])] = []
    /// Verified index pages, as their raw bytes (searched in place), at most 1,024 of them.
    private var pageCache: [Int: [UInt8]] = [:]
    private var damagedPages: [Int: VaultDamage] = [:]
    /// Whether the snapshot verified; when it did not, only logs chained from the genesis count.
    private(set) var snapshotUsable = false
    /// Whether `data/log` is gone: commits after the snapshot may have been lost with it.
    private var logDirectoryMissing = false
    /// Whether the snapshot names another vault: the header and the records do not belong together.
    private(set) var foreignSnapshot = false

    // The logs since the snapshot.
    private var logFDs: [UInt64: Int32] = [:]
    private var logMACs: [UInt64: [UInt8]] = [:]
    private(set) var lastSequence: UInt64 = 0
    /// The chain value of the newest commit, `nil` when that commit is damaged.
    private var lastMAC: [UInt8]? = Format2.genesisMAC
    private(set) var logsSinceSnapshot = 0
    /// Frames in the logs since the snapshot, damaged logs excepted.
    private var framesSinceSnapshot = 0
    private var overlay: [RecordID: SealedRef] = [:]
    private var idMACCache: (key: SecretBytes, mac: HMACSHA256Key)?
    private var cipherCache: [UInt32: (key: SecretBytes, context: AESGCM.Context)] = [:]

    // What is wrong.
    private var recordDamage: [RecordID: (version: UInt64, damage: VaultDamage)] = [:]
    private var fileDamage: [VaultDamage] = []
    /// Records older than this sequence (and absent ones) cannot be trusted: a commit that may
    /// have changed them is missing or damaged.
    private var uncertainBefore: (sequence: UInt64, damage: VaultDamage)?
    private(set) var rollback: VaultDamage?

    init(paths: Paths2, unlocked: UnlockedHeader2, clock: @escaping @Sendable () -> Date, anchor: AnchorStore?,
         credential: VaultCredential) {
        self.rederivable = credential.isPassphrase ? nil : credential
        self.paths = paths
        self.vaultID = unlocked.copy.header.vaultIDBytes
        self.unlocked = unlocked
        self.clock = clock
        self.anchor = anchor
    }

    deinit {
        closeFiles()
        if lockDescriptor >= 0 { System.close(lockDescriptor) }
    }

    private func closeFiles() {
        if snapshotFD >= 0 { System.close(snapshotFD) }
        snapshotFD = -1
        for fd in logFDs.values { System.close(fd) }
        logFDs = [:]
    }

    /// The lock file, opened on the first write, so a read-only vault can still be read.
    func lockFD() throws -> Int32 {
        if lockDescriptor < 0 {
            lockDescriptor = try io { try System.open(paths.lock, flags: OpenFlags.readWrite | OpenFlags.create | OpenFlags.noFollow, mode: 0o600) }
        }
        return lockDescriptor
    }

    var currentEpoch: UInt32 { unlocked.copy.header.currentEpoch }

    // MARK: Loading

    /// Brings the state up to date with the files: two system calls when nothing changed (a
    /// `stat` of the snapshot and an `open` of the next log).
    func refresh() throws {
        let status = try io { try System.status(paths.snapshot) }
        if status != snapshotStatus || needsReload {
            try reloadAll()
            return
        }
        while try loadLog(lastSequence + 1) {}
        // A compaction renames its snapshot in before it removes the logs it covers: if a log
        // vanished before the probe above, the new snapshot is visible now.
        if try io({ try System.status(paths.snapshot) }) != snapshotStatus { try reloadAll() }
    }

    /// Reads everything but the records again: the header copies, the snapshot's directory,
    /// every log's table, the chain and the anchor.
    func reloadAll() throws {
        // Until a reload completes: a failed one leaves half-reset state, read again next time.
        needsReload = true
        // Another process may commit or compact while this one reads the files without the
        // lock: a view that the anchor says is behind is read again before it counts as a rollback.
        for _ in 0..<8 {
            try reloadOnce()
            // The same for a compaction between opening the snapshot and listing the logs.
            let moved = try io { try System.status(paths.snapshot) } != snapshotStatus
            if !anchorAhead && !moved { break }
        }
        needsReload = false
    }

    /// Whether the last ``reloadAll()`` failed part-way: the next ``refresh()`` reloads.
    private var needsReload = false

    /// Set by ``checkAnchor()`` when the anchor is ahead of the files read and the snapshot
    /// changed meanwhile: another process compacted, so the view must be read again.
    private var anchorAhead = false

    private func reloadOnce() throws {
        anchorAhead = false
        closeFiles()
        snapshotStatus = nil
        snapshotHead = nil
        directory = []
        pageCache = [:]
        damagedPages = [:]
        snapshotUsable = false
        logDirectoryMissing = false
        foreignSnapshot = false
        logMACs = [:]
        lastSequence = 0
        lastMAC = Format2.genesisMAC
        logsSinceSnapshot = 0
        framesSinceSnapshot = 0
        overlay = [:]
        recordDamage = [:]
        fileDamage = []
        uncertainBefore = nil
        rollback = nil

        checkHeaderCopies()
        noteFormat1Leftovers()
        // The format never follows a link inside the vault; a linked data/ or data/log/ works
        // (the files in it are still checked) but is damage, reported, never accepted silently.
        for (path, name) in [(paths.data, Format2.dataDirectory), (paths.logDirectory, Format2.dataDirectory + "/log")]
            where !System.isRealDirectory(path) && System.isRealDirectory(path + "/.")
        {
            fileDamage.append(VaultDamage(
                file: name, offset: 0, recordID: nil, key: nil,
                reason: "\(name) is a symbolic link to a directory: Keysmith does not follow links inside a vault; put the directory itself in its place"))
        }
        try loadSnapshot()
        var base: UInt64 = 0
        if snapshotUsable, let head = snapshotHead {
            base = head.through
            lastSequence = head.through
            lastMAC = head.throughMAC
        }
        var present: [UInt64] = []
        let names: [String]
        do {
            names = try System.listDirectory(paths.logDirectory)
        } catch let error as SystemError where error.isNotFound || error.isNotDirectory {
            names = []
            logDirectoryMissing = true
            let damage = VaultDamage(file: Format2.dataDirectory + "/log", offset: 0, recordID: nil, key: nil,
                                     reason: error.isNotFound ? "the log directory is missing" : "the log directory is missing: something that is not a directory is in its place",
                                     hidesRecords: true)
            fileDamage.append(damage)
            // Commits after the snapshot may have been lost with it: which records they
            // changed or created cannot be told, so every record, and every absent one, is in
            // doubt.
            markUncertain(before: base + 1, damage)
        } catch let error as SystemError {
            throw KeysmithError(.ioFailure, "cannot list the vault's logs: \(error)")
        }
        for name in names {
            if name.hasPrefix(Durable.temporaryPrefix) { continue }
            guard let number = VaultPaths.logSequence(name), number < Format2.maximumSequence
            else {
                fileDamage.append(VaultDamage(file: Format2.dataDirectory + "/log/" + name, offset: 0, recordID: nil, key: nil,
                                              reason: "a file that is not a log sits among the logs (ignored)", isIgnored: true))
                continue
            }
            if number > base { present.append(number) }
        }
        present.sort()
        if !snapshotUsable, present.first != 1 {
            // Nothing proves what the snapshot held: every record older than the first
            // surviving log, and every absent one, is in doubt.
            markUncertain(before: present.first ?? 1, fileDamage.last(where: { $0.file == Paths2.snapshotName })
                          ?? VaultDamage(file: Paths2.snapshotName, offset: 0, recordID: nil, key: nil, reason: "the snapshot is unusable", hidesRecords: true))
        }
        var expected = base + 1
        for number in present {
            if number != expected {
                let damage = VaultDamage(
                    file: paths.logName(expected), offset: 0, recordID: nil, key: nil,
                    reason: number - expected == 1
                        ? "log \(expected) is missing: the commit it held is lost"
                        : "logs \(expected) to \(number - 1) are missing: the commits they held are lost",
                    hidesRecords: true)
                fileDamage.append(damage)
                markUncertain(before: number, damage)
                lastMAC = nil
            }
            _ = try loadLog(number)
            expected = number + 1
        }
        try checkAnchor()
    }

    private func markUncertain(before sequence: UInt64, _ damage: VaultDamage) {
        if sequence > (uncertainBefore?.sequence ?? 0) { uncertainBefore = (sequence, damage) }
    }

    /// Reports damaged, missing or stale copies of the header (the copy in force keeps the
    /// vault open; the next write heals the other).
    private func checkHeaderCopies() {
        let primary = try? HeaderFormat.readCopy(paths.header)
        let backup = try? HeaderFormat.readCopy(paths.headerBackup)
        if let primary, let backup, primary == backup { return }
        var inForce: HeaderCopy2?
        for (bytes, name) in [(primary, VaultHeader.primaryName), (backup, VaultHeader.backupName)] {
            var reason: String?
            var stale = false
            if let bytes = bytes ?? nil {
                switch HeaderFormat.probe(bytes) {
                case .version2(let copy):
                    if copy.header.vaultIDBytes != vaultID {
                        reason = "the header copy belongs to another vault"
                    } else if let inForce, inForce.bytes != copy.bytes {
                        stale = copy.header.generation != inForce.header.generation
                        reason = copy.header.generation > inForce.header.generation
                            ? "the header copy is of generation \(copy.header.generation), newer than the one in force "
                                + "(\(inForce.header.generation)): a header change was interrupted before it took effect; the next "
                                + "`vault passwd` or `vault rekey` writes both copies"
                            : stale
                                ? "the header copy is of generation \(copy.header.generation), older than the one in force "
                                    + "(\(inForce.header.generation)): left behind by an interrupted header change (the next open, "
                                    + "verify or write heals it)"
                                : "the header copy differs from the primary"
                    } else {
                        inForce = copy
                    }
                case .damaged(let why): reason = "the header copy is damaged: \(why)"
                case .version1:
                    stale = true
                    reason = "the header copy is older than the one in force: it is the format 1 header an upgrade replaced"
                case .unsupported: reason = "the header copy is of another format version"
                }
            } else {
                reason = "the header copy is missing or unreadable"
            }
            if let reason { fileDamage.append(VaultDamage(file: name, offset: 0, recordID: nil, key: nil, reason: reason, isLeftover: stale)) }
        }
    }

    /// Format 1 files that an upgrade interrupted after its switch left beside the format 2
    /// vault (`snapshot`, `log/` at the top): still sealed under keys a rekey retires.
    private var format1Leftovers: [String] {
        ["snapshot", "log"].filter { (try? System.status(paths.root + "/" + $0)) != nil }
    }

    /// Finishes what a crash interrupted, when it can without waiting: a header copy left older
    /// than the one in force (a kill between the two renames of `passwd`, `rekey` or `upgrade`)
    /// is written again from it, so a retired credential never stays usable through the backup;
    /// format 1 files an upgrade left after its switch are removed. Under the vault's lock taken
    /// without waiting (a writer holding it heals the same); skipped when the vault cannot be
    /// written. Damaged copies are left for `vault verify` to report and the next write to heal.
    func finishInterruptedWrites() {
        guard fileDamage.contains(where: \.isLeftover) else { return }
        // A descriptor of its own: flock locks belong to an open file description, so when this
        // process already holds the vault's lock (a write, a repair) this try fails and nothing
        // here runs, instead of taking the caller's lock and releasing it at the end.
        guard let fd = try? System.open(paths.lock, flags: OpenFlags.readWrite | OpenFlags.noFollow) else { return }
        defer { System.close(fd) }
        guard (try? System.tryLockExclusive(fd, path: paths.lock)) == true else { return }
        defer { System.unlock(fd) }
        // Only a copy in force that this handle's credential authenticates is spread, and only
        // over an older copy (never over a newer one, which may hold the only wrap of a key).
        guard let copy = try? headerInForce(), copy.header.vaultIDBytes == vaultID,
              constantTimeEqual(VaultHeader2.mac(copy.body, kek: unlocked.kek), copy.mac)
        else { return }
        for path in [paths.header, paths.headerBackup] {
            let bytes = (try? HeaderFormat.readCopy(path)) ?? nil
            guard let bytes, bytes != copy.bytes else { continue }
            switch HeaderFormat.probe(bytes) {
            case .version2(let other) where other.header.generation < copy.header.generation: break  // left behind
            case .version1: break  // the format 1 header an upgrade replaced
            default: continue  // damaged, newer or unsupported: reported (a newer one is not counted)
            }
            try? Durable.write(copy.bytes, to: path, directory: paths.root)
        }
        removeFormat1Leftovers()
        fileDamage.removeAll { $0.isHeaderCopy || $0.isLeftover }
        checkHeaderCopies()
        noteFormat1Leftovers()
    }

    /// Removes the format 1 files an interrupted upgrade left (the caller holds the lock and the
    /// header in force is format 2). `removeTree` never follows a link out of the vault.
    func removeFormat1Leftovers() {
        for name in format1Leftovers {
            if name == "log" { try? System.removeTree(paths.root + "/log") } else { try? System.unlink(paths.root + "/" + name) }
        }
        try? System.fsyncDirectory(paths.root)
    }

    /// Reports format 1 files left beside the vault (they hide nothing: the format 2 files are complete).
    private func noteFormat1Leftovers() {
        for name in format1Leftovers {
            fileDamage.append(VaultDamage(file: name, offset: 0, recordID: nil, key: nil,
                                          reason: "a format 1 file left by an interrupted upgrade; the next write removes it", isLeftover: true))
        }
    }

    private func snapshotDamage(_ reason: String) {
        let damage = VaultDamage(file: Paths2.snapshotName, offset: 0, recordID: nil, key: nil, reason: reason, hidesRecords: true)
        fileDamage.append(damage)
    }

    private func loadSnapshot() throws {
        let opened: (fd: Int32, status: System.FileStatus)?
        do {
            opened = try System.openRegularFile(paths.snapshot, maximumSize: Format2.maximumFileSize)
        } catch {
            snapshotDamage("the snapshot cannot be opened (\(error)); it must be a regular file")
            return
        }
        guard let (fd, status) = opened else {
            snapshotDamage("the snapshot is missing")
            return
        }
        snapshotFD = fd
        snapshotStatus = status
        do {
            let headBytes = try System.read(fd, count: Format2.snapshotHeaderSize, at: 0, path: paths.snapshot)
            let head: SnapshotFile2.Head
            do {
                head = try SnapshotFile2.parseHead(headBytes, fileSize: status.size)
            } catch .tooShort {
                return snapshotDamage("the snapshot is cut short inside its header")
            } catch .badMagic {
                return snapshotDamage("the snapshot's header is damaged (wrong magic)")
            } catch .outOfBounds(let why) {
                return snapshotDamage("the snapshot's header is damaged: \(why)")
            }
            guard head.vaultID == vaultID else {
                // This vault's own snapshot with its vault id damaged still authenticates with
                // the right id put back: damage to repair, not a header of another vault.
                var patched = headBytes
                patched.replaceSubrange(8..<24, with: vaultID)
                if let keys = try keys(for: head.epoch),
                   let directoryBytes = try? System.read(fd, count: head.pageCount * Format2.directoryEntrySize + Format2.macSize,
                                                         at: head.directoryStart, path: paths.snapshot),
                   directoryBytes.count == head.pageCount * Format2.directoryEntrySize + Format2.macSize,
                   constantTimeEqual(SnapshotFile2.snapshotMAC(chainKey: keys.chain, head: patched,
                                                               directory: Array(directoryBytes.prefix(head.pageCount * Format2.directoryEntrySize))),
                                     Array(directoryBytes.suffix(Format2.macSize)))
                {
                    return snapshotDamage("the snapshot's vault id is damaged (it reads \(head.vaultID.hexString)); its records cannot be "
                                          + "vouched for as they stand (`keysmith vault repair` keeps every one that authenticates)")
                }
                foreignSnapshot = true
                return snapshotDamage("the snapshot belongs to another vault (vault id \(head.vaultID.hexString))")
            }
            guard let keys = try keys(for: head.epoch) else {
                return snapshotDamage("the snapshot is authenticated under key epoch \(head.epoch), which the header does not hold")
            }
            let directoryBytes = try System.read(fd, count: head.pageCount * Format2.directoryEntrySize + Format2.macSize,
                                                 at: head.directoryStart, path: paths.snapshot)
            guard directoryBytes.count == head.pageCount * Format2.directoryEntrySize + Format2.macSize else {
                return snapshotDamage("the snapshot is cut short inside its directory")
            }
            let directoryPart = Array(directoryBytes[0..<(head.pageCount * Format2.directoryEntrySize)])
            let mac = Array(directoryBytes[(head.pageCount * Format2.directoryEntrySize)...])
            guard constantTimeEqual(SnapshotFile2.snapshotMAC(chainKey: keys.chain, head: headBytes, directory: directoryPart), mac) else {
                return snapshotDamage("the snapshot's header or directory fails authentication: it is damaged or was altered")
            }
            var entries: [(first: RecordID, mac: [UInt8])] = []
            entries.reserveCapacity(head.pageCount)
            for page in 0..<head.pageCount {
                let start = page * Format2.directoryEntrySize
                entries.append((RecordID(Array(directoryPart[start..<(start + 32)]))!, Array(directoryPart[(start + 32)..<(start + 64)])))
            }
            for page in entries.indices.dropFirst() where !(entries[page - 1].first < entries[page].first) {
                return snapshotDamage("the snapshot's directory is not in record-id order")
            }
            directory = entries
            snapshotHead = head
            snapshotUsable = true
        } catch let error as KeysmithError where error.code == .storeLocked {
            throw error
        } catch {
            snapshotDamage("the snapshot cannot be read: \(error)")
        }
    }

    /// Loads log `sequence` if it exists; `false` when there is no such file.
    @discardableResult
    private func loadLog(_ sequence: UInt64) throws -> Bool {
        let path = paths.log(sequence)
        let name = paths.logName(sequence)
        let opened: (fd: Int32, status: System.FileStatus)?
        do {
            opened = try System.openRegularFile(path, maximumSize: Format2.maximumFileSize)
        } catch let error as SystemError where error.isUnusableFile {
            lastSequence = max(lastSequence, sequence)
            logDamaged(sequence, name, "the log cannot be used (\(error)); it must be a regular file")
            return true
        } catch let error as SystemError where error.isNotDirectory && logDirectoryMissing {
            return false  // no log directory (a file in its place): already damage, no log here
        } catch let error as SystemError {
            // Not this one file's fault (permissions, the log directory gone or not a
            // directory): an error, never a loop over the next numbers.
            throw KeysmithError(.ioFailure, "cannot read the vault's log \(name): \(error)")
        }
        guard let (fd, status) = opened else { return false }
        var keep = false
        defer { if !keep { System.close(fd) } }
        lastSequence = max(lastSequence, sequence)
        logsSinceSnapshot += 1

        let headBytes = try io { try System.read(fd, count: Format2.logHeaderSize, at: 0, path: path) }
        let head: LogFile2.Head
        do {
            head = try LogFile2.parseHead(headBytes, fileSize: status.size)
        } catch .tooShort {
            logDamaged(sequence, name, "the log is cut short inside its header")
            return true
        } catch .badMagic {
            logDamaged(sequence, name, "the log's header is damaged (wrong magic)")
            return true
        } catch .outOfBounds(let why) {
            logDamaged(sequence, name, "the log's header is damaged: \(why)")
            return true
        }
        guard head.vaultID == vaultID else {
            logDamaged(sequence, name, "the log belongs to another vault (vault id \(head.vaultID.hexString))")
            return true
        }
        guard head.sequence == sequence else {
            logDamaged(sequence, name, "the file holds commit \(head.sequence), not \(sequence): it was renamed or copied over")
            return true
        }
        guard let keys = try keys(for: head.epoch) else {
            logDamaged(sequence, name, "the log is authenticated under key epoch \(head.epoch), which the header does not hold")
            return true
        }
        let tableSize = head.count * Format2.tableEntrySize
        let rest = try io { try System.read(fd, count: tableSize + Format2.macSize, at: Format2.logHeaderSize, path: path) }
        guard rest.count == tableSize + Format2.macSize else {
            logDamaged(sequence, name, "the log is cut short inside its table")
            return true
        }
        let table = Array(rest[0..<tableSize])
        let mac = Array(rest[tableSize...])
        guard constantTimeEqual(LogFile2.commitMAC(chainKey: keys.chain, headerAndTable: headBytes + table), mac) else {
            logDamaged(sequence, name, "the commit fails authentication: its header or table is damaged or was altered")
            return true
        }
        let bodiesStart = Format2.logHeaderSize + tableSize + Format2.macSize
        let parsed = LogFile2.parseTable(table, count: head.count, bodiesStart: bodiesStart, fileSize: status.size)
        if let problem = parsed.problem {
            // The table authenticated, so the records it names are known: each is damaged.
            logDamaged(sequence, name, "the commit authenticated but \(problem): it was cut short or extended")
            return true
        }
        if let previous = lastMAC, !constantTimeEqual(head.previousMAC, previous) {
            let damage = VaultDamage(
                file: name, offset: 40, recordID: nil, key: nil,
                reason: "the commit does not follow the one before it: a log or the snapshot was replaced, or comes from another history",
                hidesRecords: true)
            fileDamage.append(damage)
            markUncertain(before: sequence, damage)
        }
        framesSinceSnapshot += parsed.entries.count
        var offset = bodiesStart
        for entry in parsed.entries {
            let ref = SealedRef(recordID: entry.recordID, op: entry.op, version: sequence, epoch: head.epoch, fd: fd, file: name,
                                offset: offset, length: entry.length, nonce: entry.nonce, tag: entry.tag)
            offset += entry.length
            if let old = recordDamage.removeValue(forKey: entry.recordID) {
                fileDamage.append(old.damage.superseded())
            }
            overlay[entry.recordID] = ref
        }
        logFDs[sequence] = fd
        logMACs[sequence] = mac
        keep = true
        lastMAC = mac
        return true
    }

    private func logDamaged(_ sequence: UInt64, _ name: String, _ reason: String) {
        let damage = VaultDamage(file: name, offset: 0, recordID: nil, key: nil, reason: reason + "; which records it changed cannot be told",
                                 hidesRecords: true)
        fileDamage.append(damage)
        markUncertain(before: sequence + 1, damage)
        lastMAC = nil
    }

    private func checkAnchor() throws {
        guard let anchor else { return }
        let mark: AnchorStore.Mark
        switch anchor.read(vaultID) {
        case .absent:
            updateAnchor()
            return
        case .damaged(let reason, let path):
            // A damaged anchor cannot vouch for anything: the vault is refused as a missing
            // anchor could not (which would serve a rolled-back copy), until the owner decides.
            rollback = VaultDamage(
                file: Paths2.snapshotName, offset: 0, recordID: nil, key: nil,
                reason: "the rollback anchor \(path) is damaged (\(reason)), so whether this vault was rolled back cannot be told; "
                    + "if the vault is as it should be, accept it with `keysmith vault verify --accept-rollback` (a new anchor is written)",
                hidesRecords: true)
            return
        case .mark(let read):
            mark = read
        }
        if mark.sequence > lastSequence {
            // Commits made since the logs were listed: catch up, or read everything again if a
            // compaction replaced the snapshot meanwhile.
            while try loadLog(lastSequence + 1) {}
            if mark.sequence > lastSequence, try io({ try System.status(paths.snapshot) }) != snapshotStatus {
                anchorAhead = true
                return
            }
        }
        var known: [UInt8]?
        // Commit 0 is the vault's creation, which every history of this vault passes through
        // (a snapshot's history starts at commit 1): an anchor that saw only the creation (its
        // first advance skipped while another process held the anchors' lock) is verified by it.
        if mark.sequence == 0 { known = Format2.genesisMAC }
        if let mac = logMACs[mark.sequence] { known = mac }
        if snapshotUsable, let head = snapshotHead, head.through == mark.sequence { known = head.throughMAC }
        var unverifiable = false
        if known == nil, snapshotUsable, let head = snapshotHead, mark.sequence < head.through {
            // The anchor's commit was folded into the snapshot: its history says whether the
            // vault passed through it (a fork compacted past the anchor does not).
            if let mac = snapshotHistory()?.mac(of: mark.sequence) { known = mac } else { unverifiable = true }
        }
        if unverifiable {
            rollback = VaultDamage(
                file: Paths2.snapshotName, offset: 0, recordID: nil, key: nil,
                reason: "this machine last saw commit \(mark.sequence), which the vault has folded into its snapshot through commit "
                    + "\(snapshotHead?.through ?? 0) without a history reaching back that far, so whether the vault's history passes "
                    + "through it cannot be told (an older copy that was written to and compacted would look the same); if the vault "
                    + "is as it should be, accept it with `keysmith vault verify --accept-rollback`",
                hidesRecords: true)
        } else if mark.sequence > lastSequence {
            rollback = VaultDamage(
                file: Paths2.snapshotName, offset: 0, recordID: nil, key: nil,
                reason: "the vault was rolled back: this machine saw commit \(mark.sequence), the vault now ends at commit \(lastSequence) "
                    + "(its newest commits were removed or an older copy was put back); if you restored it on purpose, accept the rollback "
                    + "with `keysmith vault verify --accept-rollback`", hidesRecords: true)
        } else if let known, !constantTimeEqual(known, mark.mac) {
            rollback = VaultDamage(
                file: Paths2.snapshotName, offset: 0, recordID: nil, key: nil,
                reason: "the vault's history forked: commit \(mark.sequence) is not the one this machine saw (an older copy was put back "
                    + "and written to); if you restored it on purpose, accept it with `keysmith vault verify --accept-rollback`",
                hidesRecords: true)
        } else {
            updateAnchor(over: mark)
        }
    }

    /// The history beside the snapshot in force, when there is one and it authenticates.
    func snapshotHistory() -> HistoryFile2.Contents? {
        guard snapshotUsable, let head = snapshotHead,
              let bytes = (try? System.readRegularFile(paths.data + "/" + HistoryFile2.name(through: head.through),
                                                       maximumSize: HistoryFile2.headerSize + HistoryFile2.window * 32 + 32)) ?? nil
        else { return nil }
        return HistoryFile2.parse(bytes, vaultID: vaultID, through: head.through) { epoch in (try? self.keys(for: epoch)) ?? nil }
    }

    /// The MACs a new snapshot through `through` (whose MAC is `throughMAC`) records: the old
    /// snapshot's history and through-MAC, then every commit since, the newest
    /// ``HistoryFile2/window`` of them; a commit whose MAC is not known starts the list again after it.
    private func history(through: UInt64, throughMAC: [UInt8], epoch: UInt32) -> HistoryFile2.Contents {
        var first: UInt64 = 1
        var macs: [[UInt8]] = []
        var next: UInt64 = 1
        if snapshotUsable, let head = snapshotHead, head.through > 0 {
            if let old = snapshotHistory() {
                first = old.first
                macs = old.macs
            } else {
                first = head.through
                macs = [head.throughMAC]
            }
            next = head.through + 1
        }
        if next <= through {
            for sequence in next...through {
                guard let mac = sequence == through ? throughMAC : logMACs[sequence] else {
                    first = sequence + 1
                    macs = []
                    continue
                }
                if macs.isEmpty { first = sequence }
                macs.append(mac)
            }
        }
        if macs.count > HistoryFile2.window {
            first += UInt64(macs.count - HistoryFile2.window)
            macs.removeFirst(macs.count - HistoryFile2.window)
        }
        return HistoryFile2.Contents(through: through, epoch: epoch, first: first, macs: macs)
    }

    private func updateAnchor(over mark: AnchorStore.Mark? = nil) {
        // A mark read from the legacy name is written under this place's name at once.
        guard let anchor, let mac = lastMAC, lastSequence > (mark?.sequence ?? 0) || mark == nil || mark?.legacy == true else { return }
        anchor.write(vaultID, AnchorStore.Mark(sequence: lastSequence, mac: mac))
    }

    /// Forgets this machine's anchor and takes the vault as it is now.
    func acceptRollback() throws {
        try anchor?.remove(vaultID)
        rollback = nil
        updateAnchor()
    }

    // MARK: Keys

    /// The keys of an epoch, re-reading the header once if another process re-keyed.
    ///
    /// - Throws: `.storeLocked` when the header on disk is one this handle's credential no
    ///   longer opens (another process changed the credential and re-keyed): the records are
    ///   not damaged, this handle is out of date.
    func keys(for epoch: UInt32) throws -> EpochKeys? {
        if let keys = unlocked.epochs[epoch] { return keys }
        let copy = try? adoptHeaderOnDisk(requireSameCredential: false)
        if let keys = unlocked.epochs[epoch] { return keys }
        if let copy, copy.bytes != unlocked.copy.bytes {
            throw KeysmithError(
                .storeLocked,
                "another process changed this vault's passphrase or keyfile and re-keyed it since it was opened; open it again with the new credential")
        }
        return nil
    }

    /// The copy of the header in force (docs/format.md, "Which copy").
    func headerInForce() throws -> HeaderCopy2 {
        let inForce = HeaderFormat.inForce(paths.root)
        guard case .version2(let copy) = inForce.probe else {
            throw KeysmithError(
                .corruptData,
                "the vault header in force is not an intact format 2 header (\(inForce.problems.joined(separator: "; ")))")
        }
        return copy
    }

    /// Takes the header as it is on disk if it changed and this handle's credential opens it.
    /// Returns the copy in force.
    @discardableResult
    func adoptHeaderOnDisk(requireSameCredential: Bool) throws -> HeaderCopy2 {
        let copy = try headerInForce()
        if copy.bytes == unlocked.copy.bytes { return copy }
        guard copy.header.generation > unlocked.copy.header.generation else {
            throw KeysmithError(
                .corruptData,
                "the vault header was put back to an older version (generation \(copy.header.generation), this handle has seen "
                    + "\(unlocked.copy.header.generation)); restore the newer header from a backup")
        }
        guard copy.header.vaultIDBytes == vaultID else {
            throw KeysmithError(.corruptData, "the vault header now belongs to another vault; open the vault again")
        }
        var kek = unlocked.kek
        if !constantTimeEqual(VaultHeader2.mac(copy.body, kek: kek), copy.mac), let rederivable,
           let derived = try? HeaderFormat.deriveKEK(copy.header.kdf, credential: rederivable)
        {
            kek = derived
        }
        guard constantTimeEqual(VaultHeader2.mac(copy.body, kek: kek), copy.mac) else {
            if requireSameCredential {
                throw KeysmithError(
                    .storeLocked,
                    "another process changed this vault's passphrase or keyfile since it was opened; open it again with the new one")
            }
            return copy
        }
        let fresh = try UnlockedHeader2.unlock(copy, kek: kek, credential: .key([]))
        guard fresh.idKey == unlocked.idKey else {
            throw KeysmithError(.corruptData, "the vault header's id key changed; open the vault again")
        }
        unlocked = fresh
        return copy
    }

    /// The epoch the header on disk names as current, checked at the start of every write.
    private var writeEpoch: UInt32 = 0

    /// Writes both header copies, the backup first: the primary's rename is the one instant the
    /// change takes effect, and by then the backup already holds the new header, so a retired
    /// credential never survives in it (a crash before the switch leaves the backup one
    /// generation ahead, which the next open, verify or write puts back to the copy in force).
    /// The caller holds the flock and the header in force is this handle's (``requireCurrentHeader()``).
    func writeHeader(_ header: VaultHeader2, kek: SecretBytes) throws {
        var header = header
        header.generation = unlocked.copy.header.generation + 1
        let bytes = try vaultCrypto { try header.encode(kek: kek) }
        guard case .version2(let copy) = HeaderFormat.probe(bytes) else {
            throw KeysmithError(.corruptData, "the new vault header does not parse back")
        }
        let fresh = try UnlockedHeader2.unlock(copy, kek: kek, credential: .key([]))
        try Durable.write(bytes, to: paths.headerBackup, directory: paths.root)
        try Durable.write(bytes, to: paths.header, directory: paths.root)
        unlocked = fresh
        writeEpoch = fresh.copy.header.currentEpoch
    }

    /// For `passwd` and `rekey`, which rewrite the header: the header in force must be one this
    /// handle's credential opens, or the change would undo another process's.
    private func requireCurrentHeader() throws {
        let copy = try adoptHeaderOnDisk(requireSameCredential: true)
        guard copy.bytes == unlocked.copy.bytes else {
            throw KeysmithError(.storeLocked, "the vault header changed while it was being read; try again")
        }
    }

    /// Under the lock before a write: the header as it is on disk now, both copies healed from
    /// the copy in force (never from memory), every commit of other processes loaded.
    ///
    /// A handle whose credential was changed by another process may still write, as long as
    /// the header's current epoch is one whose data key it holds: that key did not change
    /// (a credential change re-wraps keys, it does not replace them). After a re-key it may
    /// not: the write is refused, never sealed under a retired key.
    func prepareWrite() throws {
        let copy = try adoptHeaderOnDisk(requireSameCredential: false)
        guard copy.header.vaultIDBytes == vaultID, unlocked.epochs[copy.header.currentEpoch] != nil else {
            throw KeysmithError(
                .storeLocked,
                "another process changed this vault's passphrase or keyfile and re-keyed it since it was opened; open it again with the new credential")
        }
        writeEpoch = copy.header.currentEpoch
        // Heal the other copy from the one in force, unless it is a newer intact header: never
        // spread an older header over a newer one (a header put back could otherwise destroy the
        // only wrap of a newer key). A newer backup is what a header write killed before its
        // switch leaves; the next header write replaces both.
        for path in [paths.header, paths.headerBackup] {
            let bytes = (try? HeaderFormat.readCopy(path)) ?? nil
            guard bytes != copy.bytes else { continue }
            if let bytes, case .version2(let other) = HeaderFormat.probe(bytes), other.header.generation > copy.header.generation {
                continue
            }
            try Durable.write(copy.bytes, to: path, directory: paths.root)
        }
        removeFormat1Leftovers()
        try refresh()
        fileDamage.removeAll { $0.isHeaderCopy || $0.isLeftover }
    }

    // MARK: Reading

    func recordID(for key: ItemKey) -> RecordID {
        RecordID(idMAC.mac(RecordCodec.identity(key)))!
    }

    /// The id key set up once for HMAC (a bulk job names 100,000 records); rebuilt if the
    /// unlocked header's key object changes.
    var idMAC: HMACSHA256Key {
        if let cached = idMACCache, cached.key === unlocked.idKey { return cached.mac }
        // Setting up a key fails only when OpenSSL is out of memory.
        guard let made = try? HMACSHA256Key(unlocked.idKey) else { preconditionFailure("OpenSSL cannot set up an HMAC key") }
        idMACCache = (unlocked.idKey, made)
        return made
    }

    /// A GCM context per key epoch, keyed once (reads open records one after another); only
    /// under the engine's mutex. Rebuilt if the epoch's key object changes.
    private func cipher(for keys: EpochKeys) throws -> AESGCM.Context {
        if let cached = cipherCache[keys.epoch], cached.key === keys.record { return cached.context }
        let context = try vaultCrypto { try AESGCM.Context(key: keys.record) }
        // Keys the header no longer holds (a rekey retired them) are not kept in memory.
        cipherCache = cipherCache.filter { unlocked.epochs[$0.key]?.record === $0.value.key }
        cipherCache[keys.epoch] = (keys.record, context)
        return context
    }

    private enum Lookup {
        case found(SealedRef)
        case absent
    }

    private func lookup(_ recordID: RecordID, key: ItemKey?) throws -> Lookup {
        if let rollback { throw KeysmithError(.corruptData, "\(rollback.reason)") }
        if let damage = recordDamage[recordID] { throw Self.damagedError(key, damage.damage) }
        var found: SealedRef?
        if let ref = overlay[recordID] {
            found = ref
        } else if snapshotUsable, let head = snapshotHead {
            found = try snapshotLookup(recordID, head: head, key: key)
        }
        if let uncertain = uncertainBefore, (found?.version ?? 0) < uncertain.sequence {
            let what = key.map { "\($0)" } ?? "record \(recordID)"
            throw KeysmithError(
                .corruptData,
                (found == nil ? "\(what) was not found, but" : "\(what) may be out of date:")
                    + " the vault is damaged where a newer version may have been (\(uncertain.damage)); "
                    + "run `keysmith vault repair` (it keeps every record that authenticates and names what may be lost), or restore the vault from a backup")
        }
        guard let found, found.op == .put else { return .absent }
        return .found(found)
    }

    private func snapshotLookup(_ recordID: RecordID, head: SnapshotFile2.Head, key: ItemKey?) throws -> SealedRef? {
        // The last page whose first id is not after the one sought.
        var low = 0, high = directory.count
        while low < high {
            let middle = (low + high) / 2
            if recordID < directory[middle].first { high = middle } else { low = middle + 1 }
        }
        guard low > 0 else { return nil }
        guard let raw = try verifiedPage(low - 1, head: head, cache: true) else {
            throw KeysmithError(
                .corruptData,
                "\(key.map { "\($0)" } ?? "record \(recordID)") is in a damaged part of the snapshot's index "
                    + "(\(damagedPages[low - 1].map { "\($0)" } ?? "index page \(low - 1)")); "
                    + "run `keysmith vault repair` (it keeps every record that authenticates and names what may be lost), or restore the vault from a backup")
        }
        // Binary search over the page's raw entries: no entry is built but the one found.
        let size = Format2.indexEntrySize
        let sought = recordID.bytes
        func order(_ entry: Int) -> Int {
            let base = entry * size
            for index in 0..<32 where raw[base + index] != sought[index] {
                return raw[base + index] < sought[index] ? -1 : 1
            }
            return 0
        }
        var found: Int?
        var lo = 0, hi = raw.count / size
        while lo < hi {
            let middle = (lo + hi) / 2
            let comparison = order(middle)
            if comparison == 0 {
                found = middle
                break
            }
            if comparison < 0 { lo = middle + 1 } else { hi = middle }
        }
        guard let found else { return nil }
        var reader = ByteReader(raw, offset: found * size + 32)
        guard let version = reader.readUInt64(), let epoch = reader.readUInt32(), let offset = reader.readUInt64(),
              let length = reader.readUInt32(), let nonce = reader.readInline(12), let tag = reader.readInline(16)
        else { return nil }
        return SealedRef(recordID: recordID, op: .put, version: version, epoch: epoch, fd: snapshotFD,
                         file: Paths2.snapshotName, offset: Int(offset), length: Int(length), nonce: nonce, tag: tag)
    }

    /// One index page's entries, verified; `nil` when it is damaged (and recorded).
    private func page(_ index: Int, head: SnapshotFile2.Head, cache: Bool) throws -> [SnapshotFile2.IndexEntry]? {
        guard let raw = try verifiedPage(index, head: head, cache: cache) else { return nil }
        return SnapshotFile2.parsePage(raw, count: head.entryCount(ofPage: index), head: head, fileSize: snapshotStatus?.size ?? 0,
                                       first: directory[index].first).entries
    }

    /// One index page's bytes, after its MAC and every check of its entries held once; `nil`
    /// when it is damaged (and recorded).
    private func verifiedPage(_ index: Int, head: SnapshotFile2.Head, cache: Bool) throws -> [UInt8]? {
        if let cached = pageCache[index] { return cached }
        if damagedPages[index] != nil { return nil }
        let count = head.entryCount(ofPage: index)
        let offset = head.pagesStart + index * head.entriesPerPage * Format2.indexEntrySize
        let bytes = try io { try System.read(snapshotFD, count: count * Format2.indexEntrySize, at: offset, path: paths.snapshot) }
        var problem: String?
        let keys = unlocked.epochs[head.epoch]
        if keys == nil {
            problem = "the snapshot's key epoch \(head.epoch) is no longer held"
        } else if bytes.count != count * Format2.indexEntrySize {
            problem = "the snapshot is cut short inside index page \(index)"
        } else if let keys, !constantTimeEqual(
            SnapshotFile2.pageMAC(chainKey: keys.chain, vaultID: vaultID, through: head.through, page: index, bytes: bytes), directory[index].mac)
        {
            problem = "index page \(index) fails authentication: it is damaged or was altered"
        }
        var entries: [SnapshotFile2.IndexEntry] = []
        if problem == nil {
            let parsed = SnapshotFile2.parsePage(bytes, count: count, head: head, fileSize: snapshotStatus?.size ?? 0,
                                                 first: directory[index].first)
            entries = parsed.entries
            problem = parsed.problem.map { "index page \(index) authenticated but \($0)" }
            if problem == nil, index + 1 < directory.count, let last = entries.last,
               !(last.recordID < directory[index + 1].first)
            {
                problem = "index page \(index) overlaps the next one"
            }
        }
        if let problem {
            damagedPages[index] = VaultDamage(file: Paths2.snapshotName, offset: offset, recordID: nil, key: nil,
                                              reason: problem + "; the up to \(head.entriesPerPage) records it indexes cannot be read",
                                              hidesRecords: true)
            return nil
        }
        if cache {
            if pageCache.count >= 1024 { pageCache.removeAll(keepingCapacity: true) }
            pageCache[index] = bytes
        }
        return bytes
    }

    /// Opens a sealed record: reads its body, checks it, decodes it, and checks it is `key`'s.
    private func open(_ ref: SealedRef, key: ItemKey?, withSecret: Bool) throws -> SecureRecord {
        guard let record = try open(ref, key: key, withSecret: withSecret, body: nil, admitKind: nil) else {
            throw KeysmithError(.corruptData, "record \(ref.recordID) could not be opened")
        }
        return record
    }

    /// Opens a sealed record whose body the caller may already have read; `nil` when
    /// `admitKind` turns its kind byte down (a search for other kinds skips decoding it).
    private func open(_ ref: SealedRef, key: ItemKey?, withSecret: Bool, body: [UInt8]?, admitKind: ((UInt8) -> Bool)?) throws -> SecureRecord? {
        let path = paths.root + "/" + ref.file
        let body = try body ?? io { try System.read(ref.fd, count: ref.length, at: ref.offset, path: path) }
        guard let keys = try keys(for: ref.epoch) else {
            throw markDamaged(ref, key: key, Self.missingEpochReason(ref.epoch))
        }
        switch Self.openDetached(ref, body: body, key: key, withSecret: withSecret, admitKind: admitKind, cipher: try cipher(for: keys),
                                 vaultID: vaultID, idMAC: idMAC) {
        case .record(let record): return record
        case .otherKind: return nil
        case .damaged(let reason): throw markDamaged(ref, key: key, reason)
        }
    }

    static func missingEpochReason(_ epoch: UInt32) -> String {
        "the record is sealed under key epoch \(epoch), which the header does not hold"
    }

    /// What opening one record gave.
    enum Opened {
        case record(SecureRecord)
        /// Its kind byte was turned down (not decoded).
        case otherKind
        /// Why it cannot be read.
        case damaged(String)
    }

    /// Decrypts, decodes and checks one record whose body was read, touching nothing of the
    /// engine: records can be opened on several threads, each with its own `cipher`.
    static func openDetached(
        _ ref: SealedRef, body: [UInt8], key: ItemKey?, withSecret: Bool, admitKind: ((UInt8) -> Bool)?, cipher: AESGCM.Context,
        vaultID: [UInt8], idMAC: HMACSHA256Key
    ) -> Opened {
        guard body.count == ref.length else { return .damaged("the file ends inside the record (truncated)") }
        var plaintext: [UInt8]
        do {
            plaintext = try cipher.open(
                ciphertext: body, tag: ref.tag.array, nonce: ref.nonce.array,
                associatedData: SealedRef.associatedData(vaultID: vaultID, epoch: ref.epoch, version: ref.version, op: ref.op,
                                                         recordID: ref.recordID))
        } catch {
            return .damaged("the record fails authentication: it is damaged or was altered")
        }
        defer { cleanse(&plaintext) }
        if let admitKind, let kind = plaintext.first, !admitKind(kind) { return .otherKind }
        var record: SecureRecord
        do {
            record = try RecordCodec.decode(plaintext, withSecret: withSecret)
        } catch {
            return .damaged("the record authenticated but does not decode: \((error as? RecordCodec.DecodeError)?.reason ?? "\(error)")")
        }
        if let key, record.key != key {
            return .damaged("the record's identity does not match its record id: it was renamed")
        }
        if key == nil, RecordID(idMAC.mac(RecordCodec.identity(record.key))) != ref.recordID {
            return .damaged("the record's identity does not match its record id: it was renamed")
        }
        record.info.version = ItemVersion(rawValue: "c" + String(ref.version))
        return .record(record)
    }

    /// Opens a batch of records whose bodies were read, on two threads when there are enough
    /// of them (decrypting and decoding is most of a scan's work); results in order. Keys are
    /// looked up first, on this thread (a missing one may mean the header changed).
    private func openBatch(_ batch: [(ref: SealedRef, body: [UInt8])], withSecret: Bool,
                           admitKind: @escaping @Sendable (UInt8) -> Bool) throws -> [Opened] {
        var keysByEpoch: [UInt32: EpochKeys] = [:]
        for (ref, _) in batch where keysByEpoch[ref.epoch] == nil {
            if let keys = try keys(for: ref.epoch) { keysByEpoch[ref.epoch] = keys }
        }
        let idMAC = idMAC, vaultID = vaultID
        let parts = batch.count >= 256 && ProcessInfo.processInfo.activeProcessorCount > 1 ? 2 : 1
        // One GCM context per thread and epoch, made here: a failure to set one up is an error,
        // never taken for damage in the records.
        var contexts: [[UInt32: AESGCM.Context]] = []
        for _ in 0..<parts {
            var ciphers: [UInt32: AESGCM.Context] = [:]
            for (epoch, keys) in keysByEpoch { ciphers[epoch] = try vaultCrypto { try AESGCM.Context(key: keys.record) } }
            contexts.append(ciphers)
        }
        let prepared = UncheckedContexts(contexts)
        @Sendable func run(_ part: Int, _ range: Range<Int>) -> [Opened] {
            range.map { index in
                let (ref, body) = batch[index]
                guard let cipher = prepared.contexts[part][ref.epoch] else { return .damaged(Self.missingEpochReason(ref.epoch)) }
                return Self.openDetached(ref, body: body, key: nil, withSecret: withSecret, admitKind: admitKind, cipher: cipher,
                                         vaultID: vaultID, idMAC: idMAC)
            }
        }
        guard parts == 2 else { return run(0, 0..<batch.count) }
        let half = batch.count / 2
        let results = Mutex<[Int: [Opened]]>([:])
        DispatchQueue.concurrentPerform(iterations: 2) { part in
            let opened = run(part, part == 0 ? 0..<half : half..<batch.count)
            results.withLock { $0[part] = opened }
        }
        return results.withLock { ($0[0] ?? []) + ($0[1] ?? []) }
    }

    /// GCM contexts handed to the threads of ``openBatch(_:withSecret:admitKind:)``: thread
    /// `i` uses only `contexts[i]`, so no context is shared (hence unchecked).
    private struct UncheckedContexts: @unchecked Sendable {
        let contexts: [[UInt32: AESGCM.Context]]
        init(_ contexts: [[UInt32: AESGCM.Context]]) { self.contexts = contexts }
    }

    private func markDamaged(_ ref: SealedRef, key: ItemKey?, _ reason: String) -> KeysmithError {
        let damage = VaultDamage(file: ref.file, offset: ref.offset, recordID: ref.recordID.description, key: key, reason: reason)
        recordDamage[ref.recordID] = (ref.version, damage)
        return Self.damagedError(key, damage)
    }

    static func damagedError(_ key: ItemKey?, _ damage: VaultDamage) -> KeysmithError {
        KeysmithError(
            .corruptData,
            "\(key.map { "\($0)" } ?? "a record") (record \(damage.recordID ?? "?")) is damaged in \(damage.file) at byte \(damage.offset): "
                + "\(damage.reason); other records are unaffected; write or delete this item to replace it, or run `keysmith vault repair`")
    }

    func read(_ key: ItemKey) throws -> SecureRecord? {
        switch try lookup(recordID(for: key), key: key) {
        case .absent: return nil
        case .found(let ref): return try open(ref, key: key, withSecret: true)
        }
    }

    /// Every live record's metadata, streamed page by page; damaged records are skipped (and
    /// recorded), so memory follows the matches, not the vault.
    func search(_ query: ItemQuery) throws -> [ItemInfo] {
        var results: [ItemInfo] = []
        var window = BodyWindow()
        let admit = Self.kindFilter(query)
        try forEachLive { ref in
            let body = try window.body(of: ref, sequentialIn: snapshotFD, root: paths.root)  // an I/O error fails the search
            if let record = try? open(ref, key: nil, withSecret: false, body: body, admitKind: admit),
               query.matches(record.info.attributes)
            {
                results.append(record.info)
            }
            return true
        }
        return results
    }

    /// The kind byte comes first in a record: records of kinds the query cannot match are
    /// authenticated but not decoded.
    private static func kindFilter(_ query: ItemQuery) -> @Sendable (UInt8) -> Bool {
        { kind in
            let itemKind: ItemKind? = switch kind {
            case 1: .genericPassword
            case 2: .internetPassword
            case 3: .keysmithRecord
            default: nil
            }
            guard let itemKind else { return true }  // let decoding report it
            if let wanted = query.kind, wanted != itemKind { return false }
            return query.namespace.contains(itemKind == .keysmithRecord ? .keysmith : .user)
        }
    }

    /// One chunk of a scan: up to `limit` matching records, secrets included, in record-id
    /// order after `after`, and the record id to continue after (`nil`: the scan is done).
    /// Each record is decrypted once. Damaged records and pages are skipped (as
    /// ``search(_:)`` skips them).
    func records(matching query: ItemQuery, after: RecordID?, limit: Int) throws
        -> (records: [SecureRecord], next: RecordID?, examined: Int, total: Int)
    {
        let admit = Self.kindFilter(query)
        var found: [SecureRecord] = []
        var window = BodyWindow()
        var last: RecordID?
        var examined = 0
        let limit = max(1, limit)
        let total = (snapshotHead?.recordCount ?? 0) + overlay.count
        // Bodies are read in walk order and opened a batch at a time (on two threads); a batch
        // that fills the chunk part-way leaves the rest for the next call.
        var batch: [(ref: SealedRef, body: [UInt8])] = []
        var full = false
        func flush() throws {
            let opened = try openBatch(batch, withSecret: true, admitKind: admit)
            for ((ref, _), result) in zip(batch, opened) where !full {
                last = ref.recordID
                examined += 1
                switch result {
                case .record(let record):
                    if query.matches(record.info.attributes) { found.append(record) }
                    full = found.count >= limit
                case .otherKind:
                    break
                case .damaged(let reason):
                    _ = markDamaged(ref, key: nil, reason)  // skipped, as search skips it
                }
            }
            batch.removeAll(keepingCapacity: true)
        }
        try forEachLive(after: after) { ref in
            let body = try window.body(of: ref, sequentialIn: snapshotFD, root: paths.root)  // an I/O error fails the scan
            batch.append((ref, body))
            if batch.count >= min(limit, 1024) { try flush() }
            return !full
        }
        if !full, !batch.isEmpty { try flush() }
        return (found, full ? last : nil, examined, total)
    }

    /// Calls `body` for every live (put) record the vault can vouch for, in record-id order
    /// (newer versions merged over the snapshot's: `newer`, sorted by record id, over the
    /// overlay's), starting after `after`; `body` returns `false` to stop. Returns whether the
    /// walk reached the end. With `strict` (compaction, rekey), a damaged index page is an
    /// error instead of being skipped: a snapshot is never rewritten without records it could
    /// not read.
    @discardableResult
    private func forEachLive(after: RecordID? = nil, strict: Bool = false, newer: [SealedRef] = [],
                             _ body: (SealedRef) throws -> Bool) throws -> Bool {
        if let rollback { throw KeysmithError(.corruptData, "\(rollback.reason)") }
        let floor = uncertainBefore?.sequence ?? 0
        func isAfter(_ id: RecordID) -> Bool { after.map { $0 < id } ?? true }
        func visit(_ ref: SealedRef) throws -> Bool {
            guard ref.op == .put, ref.version >= floor, recordDamage[ref.recordID] == nil else { return true }
            return try body(ref)
        }
        var pending = PendingRefs(older: overlay.values.filter { isAfter($0.recordID) }.sorted { $0.recordID < $1.recordID },
                                  newer: newer, after: after)
        if snapshotUsable, let head = snapshotHead {
            var first = 0
            if let after {
                // The last page whose first id is not after `after`.
                var low = 0, high = directory.count
                while low < high {
                    let middle = (low + high) / 2
                    if after < directory[middle].first { high = middle } else { low = middle + 1 }
                }
                first = max(0, low - 1)
            }
            for index in first..<head.pageCount {
                guard let entries = try page(index, head: head, cache: false) else {
                    if strict {
                        throw KeysmithError(
                            .corruptData,
                            "the snapshot's index is damaged (\(damagedPages[index].map { "\($0)" } ?? "index page \(index)")); "
                                + "run `keysmith vault verify`, and repair it before compacting or re-keying")
                    }
                    continue
                }
                for entry in entries where isAfter(entry.recordID) {
                    while let id = pending.nextID, id < entry.recordID {
                        if try !visit(pending.pop()) { return false }
                    }
                    if pending.nextID == entry.recordID { continue }  // a newer version follows
                    let ref = SealedRef(recordID: entry.recordID, op: .put, version: entry.version, epoch: entry.epoch, fd: snapshotFD,
                                        file: Paths2.snapshotName, offset: entry.offset, length: entry.length,
                                        nonce: entry.nonce, tag: entry.tag)
                    if try !visit(ref) { return false }
                }
            }
        }
        while pending.nextID != nil {
            if try !visit(pending.pop()) { return false }
        }
        return true
    }

    // MARK: Writing

    /// Seals a batch's net effect into one log and commits it durably (the caller holds the
    /// flock and called ``prepareWrite()``).
    ///
    /// A bulk batch (at least ``Format2/compactAfterFrames`` records) is compacted at once: its
    /// log holds the frames in record-id order, and the compaction reads them back from it in
    /// one pass beside the snapshot, instead of indexing them in memory first. The log is the
    /// commit either way: a crash during the compaction leaves the batch committed.
    func commit(_ operations: [StoreOperation]) throws -> CommitOutcome {
        if let rollback { throw KeysmithError(.corruptData, "\(rollback.reason)") }
        guard !logDirectoryMissing else {
            throw KeysmithError(
                .corruptData,
                "the vault's log directory is missing, so commits may have been lost with it; restore the vault from a backup "
                    + "(run `keysmith vault verify` for details)")
        }
        guard snapshotUsable || uncertainBefore == nil else {
            throw KeysmithError(
                .corruptData,
                "the vault's snapshot is missing or damaged, so a write could hide what it held; restore the vault from a backup "
                    + "(run `keysmith vault verify` for details)")
        }
        let sequence = lastSequence + 1
        guard sequence < Format2.maximumSequence else {
            // A damaged log with the last number (planted, say) is damage, not a full vault.
            if isDamaged {
                throw KeysmithError(.corruptData, "the vault has damage at its newest commit number (run `keysmith vault verify`); "
                                    + "`keysmith vault repair` rebuilds it")
            }
            throw KeysmithError(.limitExceeded, "the vault has run out of commit numbers")
        }
        guard var written = try writeLog(operations, sequence: sequence) else { return .unchanged }
        if let anchor { anchor.write(vaultID, AnchorStore.Mark(sequence: sequence, mac: written.mac)) }
        guard written.bulk else {
            try loadLog(sequence)
            return .committed
        }
        do {
            try compactBulk(sequence: sequence, mac: written.mac, epoch: written.epoch, entries: &written.entries,
                            bodiesStart: written.bodiesStart)
            return .committedAndCompacted
        } catch {
            // The commit stands whatever the compaction did: read the vault as it is on disk
            // (if even that fails, the next refresh reads it; the commit is acknowledged).
            try? reloadAll()
            return .committedCompactionFailed(error)
        }
    }

    /// Resolves, seals and writes a batch as log `sequence`; `nil` when it changes nothing.
    /// Only the table is returned: the records and their ciphertexts are freed on return.
    private func writeLog(_ operations: [StoreOperation], sequence: UInt64) throws
        -> (mac: [UInt8], epoch: UInt32, entries: [LogFile2.TableEntry], bodiesStart: Int, bulk: Bool)?
    {
        let writes = try resolveBatch(
            operations, now: clock(), version: ItemVersion(rawValue: "c" + String(sequence)), limits: StoreLimits.standard,
            store: "the file vault"
        ) { key, needsMetadata in
            do {
                switch try lookup(recordID(for: key), key: key) {
                case .absent: return .absent
                // The index gives the version without decrypting the record.
                case .found(let ref) where !needsMetadata: return .atVersion(ItemVersion(rawValue: "c" + String(ref.version)))
                case .found(let ref): return .present(try open(ref, key: key, withSecret: false).info)
                }
            } catch let error as KeysmithError where error.code == .corruptData {
                return .damaged
            }
        }
        guard !writes.isEmpty else { return nil }
        guard writes.count <= Format2.maximumFramesPerCommit else {
            throw KeysmithError(.limitExceeded, "a batch may change at most \(Format2.maximumFramesPerCommit) items; this one changes \(writes.count)")
        }
        guard let keys = unlocked.epochs[writeEpoch] else {
            throw KeysmithError(.corruptData, "the vault's current data key is missing from its header")
        }
        let recordIDs = writes.map { recordID(for: $0.key) }
        let bulk = writes.count >= Format2.compactAfterFrames && !isDamaged && snapshotUsable
        var order = Array(writes.indices)
        if bulk { order.sort { recordIDs[$0] < recordIDs[$1] } }
        let head = LogFile2.Head(vaultID: vaultID, sequence: sequence, epoch: keys.epoch, count: writes.count,
                                 previousMAC: lastMAC ?? Format2.genesisMAC)
        let bodiesStart = Format2.logHeaderSize + writes.count * Format2.tableEntrySize + Format2.macSize
        var entries: [LogFile2.TableEntry] = []
        entries.reserveCapacity(writes.count)
        var mac: [UInt8] = []
        try Durable.create(at: paths.log(sequence), directory: paths.logDirectory) { fd, temporary in
            // The bodies first, sealed 8,192 at a time (on every core) and written as they
            // come, so the ciphertexts are never all in memory; then the front, whose table
            // gives each body's length, nonce and tag (its size is fixed by the frame count).
            var offset = bodiesStart
            for start in stride(from: 0, to: writes.count, by: 8192) {
                let positions = Array(order[start..<min(writes.count, start + 8192)])
                let sealed = try sealAll(writes, order: positions, recordIDs: recordIDs, sequence: sequence, keys: keys)
                var buffer: [UInt8] = []
                buffer.reserveCapacity(sealed.reduce(0) { $0 + $1.ciphertext.count })
                for (index, frame) in zip(positions, sealed) {
                    entries.append(LogFile2.TableEntry(recordID: recordIDs[index], op: frame.op, length: frame.ciphertext.count,
                                                       nonce: frame.nonce, tag: frame.tag))
                    buffer += frame.ciphertext
                }
                try System.write(fd, buffer, at: offset, path: temporary)
                offset += buffer.count
            }
            let front = LogFile2.encodeFront(head: head, entries: entries, chainKey: keys.chain)
            precondition(front.bytes.count == bodiesStart, "a log's front has a fixed size")
            try System.write(fd, front.bytes, at: 0, path: temporary)
            mac = front.mac
        }
        return (mac, keys.epoch, entries, bodiesStart, bulk)
    }

    /// Compacts right after a bulk commit: the new log's frames (in record-id order) are merged
    /// with the snapshot and the earlier logs into a new snapshot through `sequence`.
    /// `entries` (the log's table) is emptied once its refs are made.
    private func compactBulk(sequence: UInt64, mac: [UInt8], epoch: UInt32, entries: inout [LogFile2.TableEntry], bodiesStart: Int) throws {
        let name = paths.logName(sequence)
        guard let (fd, _) = try System.openRegularFile(paths.log(sequence), maximumSize: Format2.maximumFileSize) else {
            throw KeysmithError(.ioFailure, "the vault's log \(name) vanished right after it was written")
        }
        defer { System.close(fd) }
        var offset = bodiesStart
        let refs = entries.map { entry in
            defer { offset += entry.length }
            return SealedRef(recordID: entry.recordID, op: entry.op, version: sequence, epoch: epoch, fd: fd, file: name,
                             offset: offset, length: entry.length, nonce: entry.nonce, tag: entry.tag)
        }
        entries = []
        try compact(reseal: false, newer: refs, through: (sequence, mac))
    }

    private struct SealedFrame: Sendable {
        var op: FrameOp
        var nonce: InlineBytes
        var ciphertext: [UInt8]
        var tag: InlineBytes
    }

    /// Seals a batch's writes in the given order, on every core for large batches (each
    /// record is independent).
    private func sealAll(_ writes: [ResolvedWrite], order: [Int], recordIDs: [RecordID], sequence: UInt64, keys: EpochKeys) throws
        -> [SealedFrame]
    {
        let vaultID = vaultID
        @Sendable func sealOne(_ position: Int, _ context: AESGCM.Context) throws -> SealedFrame {
            let index = order[position]
            var plaintext: [UInt8] = []
            let op: FrameOp
            switch writes[index] {
            case .put(let record):
                plaintext = RecordCodec.encode(record)
                op = .put
            case .remove:
                op = .delete
            }
            defer { cleanse(&plaintext) }
            let sealed = try vaultCrypto {
                try context.seal(plaintext, associatedData: SealedRef.associatedData(
                    vaultID: vaultID, epoch: keys.epoch, version: sequence, op: op, recordID: recordIDs[index]))
            }
            return SealedFrame(op: op, nonce: InlineBytes(sealed.nonce), ciphertext: sealed.ciphertext, tag: InlineBytes(sealed.tag))
        }
        // One cipher context per chunk (contexts are not shared between threads).
        return try concurrentChunks(count: order.count) { range in
            let context = try vaultCrypto { try AESGCM.Context(key: keys.record) }
            return try range.map { try sealOne($0, context) }
        }
    }

    // MARK: Maintenance

    var isDamaged: Bool {
        rollback != nil || uncertainBefore != nil || !recordDamage.isEmpty || !damagedPages.isEmpty
            || fileDamage.contains { !$0.isHeaderCopy && !$0.isSuperseded }
    }

    func requireUndamaged() throws {
        guard !isDamaged else {
            let first = damage.first { !$0.isSuperseded && !$0.isHeaderCopy }.map { ": \($0.reason)" } ?? ""
            throw KeysmithError(
                .corruptData,
                "the vault has damage\(first) (run `keysmith vault verify`); repair it (`keysmith vault repair`) before compacting or re-keying")
        }
    }

    /// Whether logs piled up past the bound an open replays.
    var wantsCompaction: Bool {
        guard !isDamaged, let head = snapshotHead else { return false }
        _ = head
        return logsSinceSnapshot >= Format2.compactAfterLogs || framesSinceSnapshot >= Format2.compactAfterFrames
    }

    /// Writes every live record into a new snapshot and removes the logs it covers. Records
    /// are copied sealed as they are; with `reseal` they are re-encrypted under the current epoch.
    func compact(reseal: Bool = false) throws {
        try compact(reseal: reseal, newer: [], through: nil)
    }

    /// Compaction, with the records of a commit not indexed in memory (`newer`, sorted by
    /// record id, in its log) and that commit's sequence and MAC (`through`).
    private func compact(reseal: Bool, newer: [SealedRef], through: (sequence: UInt64, mac: [UInt8])?) throws {
        try requireUndamaged()
        guard let keys = unlocked.epochs[reseal ? currentEpoch : writeEpoch], let throughMAC = through?.mac ?? lastMAC else {
            throw KeysmithError(.corruptData, "the vault's current key or chain is missing")
        }
        // Two walks in record-id order (the index pages are read twice, the records once):
        // the count places the bodies, then each record is copied; nothing is kept per record
        // but its 84-byte index entry.
        var count = 0
        try forEachLive(strict: true, newer: newer) { _ in
            count += 1
            return true
        }
        let head = SnapshotFile2.Head(vaultID: vaultID, through: through?.sequence ?? lastSequence, epoch: keys.epoch,
                                      recordCount: count, throughMAC: throughMAC)
        let temporary = paths.data + "/" + Durable.temporaryPrefix + "snapshot-\(System.processID)"
        defer { try? System.unlink(temporary) }
        // The old snapshot's records come in file order (both are sorted by record id).
        try writeSnapshotFile(temporary, head: head, keys: keys, reseal: reseal, sequentialFD: snapshotFD) { copy in
            try forEachLive(strict: true, newer: newer, copy)
        }
        // Its history first (named by its through-sequence, so a crash leaves the old pair in force).
        let history = history(through: head.through, throughMAC: throughMAC, epoch: keys.epoch)
        if !history.macs.isEmpty {
            try Durable.write(HistoryFile2.encode(history, vaultID: vaultID, chainKey: keys.chain),
                              to: paths.data + "/" + HistoryFile2.name(through: head.through), directory: paths.data)
        }
        try io {
            try System.rename(temporary, paths.snapshot)
            try FaultInjection.step()
            try System.fsyncDirectory(paths.data)
        }
        try removeCoveredLogs(through: head.through)
        try reloadAll()
    }

    /// Writes a complete snapshot of `head.recordCount` records to `temporary` (in `data/`),
    /// flushed and closed; the caller renames it into place (the switch) and removes it on
    /// failure. `walk` hands the records over in record-id order, calling its argument until it
    /// returns `false`; bodies in `sequentialFD` are read a megabyte at a time. With `reseal`,
    /// records of other epochs are re-encrypted under `keys`. Records are otherwise copied
    /// sealed, as they are: nothing is decrypted.
    func writeSnapshotFile(_ temporary: String, head: SnapshotFile2.Head, keys: EpochKeys, reseal: Bool, sequentialFD: Int32,
                           walk: ((SealedRef) throws -> Bool) throws -> Void) throws {
        let count = head.recordCount
        try? System.unlink(temporary)
        let fd = try io {
            try System.open(temporary, flags: OpenFlags.readWrite | OpenFlags.create | OpenFlags.exclusive, mode: 0o600)
        }
        var closed = false
        defer { if !closed { System.close(fd) } }
        // Bodies first (their nonces and tags go into the index), then pages, directory, header.
        // Index pages are written as they fill; only the directory (64 bytes a page) is kept.
        var index = SnapshotFile2.IndexWriter(head: head, chainKey: keys.chain)
        var copied = 0
        var offset = head.bodiesStart
        var buffer = ByteWriter(capacity: 1 << 20)
        var bufferStart = offset
        func flush() throws {
            try io { try System.write(fd, buffer.bytes, at: bufferStart, path: temporary) }
            bufferStart += buffer.bytes.count
            buffer.bytes.removeAll(keepingCapacity: true)
        }
        var window = BodyWindow()
        try walk { ref in
            copied += 1
            guard copied <= count else { return false }
            var body = try window.body(of: ref, sequentialIn: sequentialFD, root: paths.root)
            var entry = SnapshotFile2.IndexEntry(recordID: ref.recordID, version: ref.version, epoch: ref.epoch, offset: offset,
                                                 length: ref.length, nonce: ref.nonce, tag: ref.tag)
            if reseal && ref.epoch != keys.epoch {
                guard let old = try self.keys(for: ref.epoch) else {
                    throw KeysmithError(.corruptData, "record \(ref.recordID) is sealed under a key this vault no longer holds")
                }
                var plaintext = try vaultCrypto {
                    try AESGCM.open(ciphertext: body, tag: ref.tag.array, key: old.record, nonce: ref.nonce.array, associatedData: SealedRef.associatedData(
                        vaultID: vaultID, epoch: ref.epoch, version: ref.version, op: .put, recordID: ref.recordID))
                }
                defer { cleanse(&plaintext) }
                let sealed = try vaultCrypto {
                    try AESGCM.seal(plaintext, key: keys.record, associatedData: SealedRef.associatedData(
                        vaultID: vaultID, epoch: keys.epoch, version: ref.version, op: .put, recordID: ref.recordID))
                }
                body = sealed.ciphertext
                entry.epoch = keys.epoch
                entry.nonce = InlineBytes(sealed.nonce)
                entry.tag = InlineBytes(sealed.tag)
            }
            guard body.count == ref.length else { throw KeysmithError(.corruptData, "record \(ref.recordID) is cut short") }
            buffer.append(body)
            if buffer.bytes.count >= 1 << 20 { try flush() }
            offset += ref.length
            if let page = index.add(entry) { try io { try System.write(fd, page.bytes, at: page.offset, path: temporary) } }
            return true
        }
        // Nothing can change between the walks (this process holds the flock and the mutex).
        guard copied == count else { throw KeysmithError(.corruptData, "the vault changed while it was being compacted") }
        try flush()
        let (lastPage, front) = index.finish()
        try io {
            if let lastPage { try System.write(fd, lastPage.bytes, at: lastPage.offset, path: temporary) }
            try System.write(fd, front, at: 0, path: temporary)
            try FaultInjection.step()
            try System.fsync(fd, path: temporary)
            System.close(fd)
            closed = true
            try FaultInjection.step()
        }
    }

    /// Deletes logs the snapshot covers and temporary files that crashed writers left. Only
    /// under the flock, so no writer's temporary file is in use.
    private func removeCoveredLogs(through sequence: UInt64) throws {
        for name in try io({ try System.listDirectory(paths.logDirectory) }) {
            if name.hasPrefix(Durable.temporaryPrefix) {
                try io { try System.unlink(paths.logDirectory + "/" + name) }
            } else if let number = VaultPaths.logSequence(name), number <= sequence {
                try FaultInjection.step()
                try io { try System.unlink(paths.logDirectory + "/" + name) }
            }
        }
        for directory in [paths.root, paths.data] {
            for name in try io({ try System.listDirectory(directory) }) where name.hasPrefix(Durable.temporaryPrefix) {
                try io { try System.unlink(directory + "/" + name) }
            }
        }
        // The histories of older snapshots.
        for name in try io({ try System.listDirectory(paths.data) })
            where name.hasPrefix("history-") && name != HistoryFile2.name(through: sequence)
        {
            try io { try System.unlink(paths.data + "/" + name) }
        }
        try io { try System.fsyncDirectory(paths.logDirectory) }
    }

    /// Changes the credential: one new header, written primary first (the primary's rename is
    /// the switch). The caller holds the flock and called ``prepareWrite()``.
    func changeCredential(to credential: VaultCredential, scrypt: ScryptParameters) throws {
        try requireCurrentHeader()
        let kdf = try Vault2.newKDF(for: credential, scrypt: scrypt)
        let kek = try HeaderFormat.deriveKEK(kdf, credential: credential)
        var header = unlocked.copy.header
        header.kdf = kdf
        header.idKey = try VaultHeader2.wrap(unlocked.idKey, kek: kek, vaultID: vaultID, kdf: kdf, purpose: KeyPurpose.id, epoch: 0)
        header.dataKeys = try header.dataKeys.map { wrapped in
            guard let key = unlocked.dataKeys[wrapped.epoch] else {
                throw KeysmithError(.corruptData, "the vault's data key of epoch \(wrapped.epoch) could not be unwrapped")
            }
            return try VaultHeader2.wrap(key, kek: kek, vaultID: vaultID, kdf: kdf, purpose: KeyPurpose.data, epoch: wrapped.epoch)
        }
        try writeHeader(header, kek: kek)
    }

    /// Re-encrypts every record under a new data key and retires the others, in three atomic
    /// steps (key added and made current; snapshot resealed; old keys removed).
    func rekey() throws {
        try requireCurrentHeader()
        try requireUndamaged()
        if unlocked.copy.header.dataKeys.count > 1 {
            // An earlier rekey was interrupted after its first step: finish it (every record
            // resealed under the current epoch, then the others retired), so that the header
            // never holds more than two keys and no key is retired while a record needs it.
            try compact(reseal: true)
            var finished = unlocked.copy.header
            finished.dataKeys.removeAll { $0.epoch != finished.currentEpoch }
            try writeHeader(finished, kek: unlocked.kek)
        }
        var header = unlocked.copy.header
        let newEpoch = (header.dataKeys.map(\.epoch).max() ?? 0) + 1
        guard newEpoch < Format2.maximumEpoch else { throw KeysmithError(.limitExceeded, "the vault has run out of key epochs") }
        let newKey = try vaultCrypto { try SecretBytes.random(count: 32) }
        header.dataKeys.append(try VaultHeader2.wrap(newKey, kek: unlocked.kek, vaultID: vaultID, kdf: header.kdf,
                                                     purpose: KeyPurpose.data, epoch: newEpoch))
        header.currentEpoch = newEpoch
        try writeHeader(header, kek: unlocked.kek)
        try compact(reseal: true)
        header = unlocked.copy.header
        header.dataKeys.removeAll { $0.epoch != newEpoch }
        try writeHeader(header, kek: unlocked.kek)
    }

    // MARK: Verification and figures

    /// Reads every file and every record again and lists everything wrong. Streams: memory
    /// follows the damage found, not the vault.
    func verify() throws -> [VaultDamage] { try verify(heal: true) }

    /// ``verify()``, finishing what a crash interrupted first only with `heal` (a dry run does not).
    func verify(heal: Bool) throws -> [VaultDamage] {
        try reloadAll()
        if heal { finishInterruptedWrites() }
        if let head = snapshotHead, snapshotUsable {
            var recordBytes = 0
            for index in 0..<head.pageCount {
                guard let entries = try page(index, head: head, cache: false) else { continue }
                for entry in entries {
                    recordBytes += entry.length
                    let ref = SealedRef(recordID: entry.recordID, op: .put, version: entry.version, epoch: entry.epoch, fd: snapshotFD,
                                        file: Paths2.snapshotName, offset: entry.offset, length: entry.length, nonce: entry.nonce, tag: entry.tag)
                    checkRecord(ref, superseded: overlay[entry.recordID] != nil)
                }
            }
            // The records fill the file exactly: nothing was cut off or added at the end.
            let size = snapshotStatus?.size ?? 0
            if damagedPages.isEmpty, head.bodiesStart + recordBytes != size {
                fileDamage.append(VaultDamage(
                    file: Paths2.snapshotName, offset: min(size, head.bodiesStart + recordBytes), recordID: nil, key: nil,
                    reason: "the snapshot's records should end at byte \(head.bodiesStart + recordBytes) but the file is \(size) bytes long"))
            }
        }
        // The snapshot's history (what the anchor checks a folded commit against), when present.
        if let head = snapshotHead, snapshotUsable {
            let name = Format2.dataDirectory + "/" + HistoryFile2.name(through: head.through)
            if (try? System.status(paths.root + "/" + name)) ?? nil != nil, snapshotHistory() == nil {
                fileDamage.append(VaultDamage(
                    file: name, offset: 0, recordID: nil, key: nil,
                    reason: "the snapshot's history is damaged or altered: an anchor older than the snapshot cannot be checked against it"))
            }
        }
        // Every log's records, not only the newest version of each: damage in an old version
        // is reported as superseded.
        for (sequence, fd) in logFDs.sorted(by: { $0.key < $1.key }) {
            for ref in overlayRefs(ofLog: sequence, fd: fd) where ref.op == .put {
                checkRecord(ref, superseded: (overlay[ref.recordID]?.version ?? 0) > sequence)
            }
        }
        return damage
    }

    private func overlayRefs(ofLog sequence: UInt64, fd: Int32) -> [SealedRef] {
        let path = paths.log(sequence)
        guard let size = try? System.status(fd: fd, path: path).size,
              let headBytes = try? System.read(fd, count: Format2.logHeaderSize, at: 0, path: path),
              let head = try? LogFile2.parseHead(headBytes, fileSize: size),
              let table = try? System.read(fd, count: head.count * Format2.tableEntrySize, at: Format2.logHeaderSize, path: path)
        else { return [] }
        let bodiesStart = Format2.logHeaderSize + head.count * Format2.tableEntrySize + Format2.macSize
        var offset = bodiesStart
        return LogFile2.parseTable(table, count: head.count, bodiesStart: bodiesStart, fileSize: size).entries.map { entry in
            defer { offset += entry.length }
            return SealedRef(recordID: entry.recordID, op: entry.op, version: sequence, epoch: head.epoch, fd: fd,
                             file: paths.logName(sequence), offset: offset, length: entry.length, nonce: entry.nonce, tag: entry.tag)
        }
    }

    private func checkRecord(_ ref: SealedRef, superseded: Bool) {
        let before = recordDamage[ref.recordID]
        do {
            _ = try open(ref, key: nil, withSecret: false)
        } catch {
            if superseded, let damage = recordDamage[ref.recordID]?.damage {
                fileDamage.append(damage.superseded())
                recordDamage[ref.recordID] = before
            }
        }
    }

    var damage: [VaultDamage] {
        var all = fileDamage + damagedPages.values.sorted { $0.offset < $1.offset }
        all += recordDamage.values.map(\.damage).sorted { ($0.file, $0.offset) < ($1.file, $1.offset) }
        if let rollback { all.insert(rollback, at: 0) }
        return all
    }

    /// How many items the vault holds (counted by streaming the index) and how many logs
    /// await compaction.
    func statistics() throws -> (items: Int, logFiles: Int) {
        var items = 0
        if snapshotUsable, let head = snapshotHead {
            for index in 0..<head.pageCount {
                for entry in try page(index, head: head, cache: false) ?? [] where overlay[entry.recordID] == nil { items += 1 }
            }
        }
        items += overlay.values.filter { $0.op == .put }.count
        return (items, logsSinceSnapshot)
    }
}

/// Reads records that come in file order from one file a megabyte at a time, instead of one
/// system call per record; records of other files are read one by one.
/// Two lists of refs sorted by record id merged into one, the newer list's ref winning when
/// both hold a record (the overlay under the records of a bulk commit).
struct PendingRefs {
    private let older: [SealedRef]
    private let newer: [SealedRef]
    private var olderIndex = 0
    private var newerIndex = 0

    init(older: [SealedRef], newer: [SealedRef], after: RecordID?) {
        self.older = older
        self.newer = newer
        if let after {
            var low = 0, high = newer.count
            while low < high {
                let middle = (low + high) / 2
                if after < newer[middle].recordID { high = middle } else { low = middle + 1 }
            }
            newerIndex = low
        }
        skipSuperseded()
    }

    /// The record id `pop()` returns next, `nil` at the end.
    var nextID: RecordID? {
        let olderID = olderIndex < older.count ? older[olderIndex].recordID : nil
        let newerID = newerIndex < newer.count ? newer[newerIndex].recordID : nil
        guard let olderID else { return newerID }
        guard let newerID else { return olderID }
        return min(olderID, newerID)
    }

    /// The next ref in record-id order (call only when `nextID` is not `nil`).
    mutating func pop() -> SealedRef {
        defer { skipSuperseded() }
        if newerIndex < newer.count, olderIndex >= older.count || newer[newerIndex].recordID < older[olderIndex].recordID {
            newerIndex += 1
            return newer[newerIndex - 1]
        }
        olderIndex += 1
        return older[olderIndex - 1]
    }

    private mutating func skipSuperseded() {
        while olderIndex < older.count, newerIndex < newer.count, older[olderIndex].recordID == newer[newerIndex].recordID {
            olderIndex += 1
        }
    }
}

/// Reads record bodies for a walk in record-id order: the snapshot's bodies are in that order,
/// so they are read a megabyte at a time; a log's bodies are read in windows too while the
/// walk reads them one after another (a bulk commit of records in id order), one at a time
/// otherwise.
struct BodyWindow {
    private var start = 0
    private var bytes: [UInt8] = []
    private var logFD: Int32 = -1
    private var logStart = 0
    private var logBytes: [UInt8] = []
    private var logEnd = -1

    mutating func body(of ref: SealedRef, sequentialIn fd: Int32, root: String) throws -> [UInt8] {
        let path = root + "/" + ref.file
        guard ref.fd == fd else {
            defer { logEnd = ref.offset + ref.length }
            if ref.fd == logFD, ref.offset >= logStart, ref.offset + ref.length <= logStart + logBytes.count {
                return Array(logBytes[(ref.offset - logStart)..<(ref.offset - logStart + ref.length)])
            }
            guard ref.fd == logFD, ref.offset == logEnd else {
                logFD = ref.fd
                logBytes = []
                return try io { try System.read(ref.fd, count: ref.length, at: ref.offset, path: path) }
            }
            logStart = ref.offset
            logBytes = try io { try System.read(ref.fd, count: max(ref.length, 1 << 18), at: ref.offset, path: path) }
            return Array(logBytes[0..<min(logBytes.count, ref.length)])
        }
        if ref.offset < start || ref.offset + ref.length > start + bytes.count {
            start = ref.offset
            bytes = try io { try System.read(fd, count: max(ref.length, 1 << 20), at: ref.offset, path: path) }
        }
        let from = ref.offset - start
        return Array(bytes[from..<min(bytes.count, from + ref.length)])
    }
}

extension VaultDamage {
    func superseded() -> VaultDamage {
        VaultDamage(file: file, offset: offset, recordID: recordID, key: key,
                    reason: reason + " (a newer version of the record replaces it)", isSuperseded: true)
    }
}

/// Creating format-2 vaults.
enum Vault2 {
    static func newKDF(for credential: VaultCredential, scrypt: ScryptParameters) throws -> VaultHeader.KDF {
        let salt = try vaultCrypto { try Random.bytes(count: Format2.saltSize) }
        let encoded = Data(salt).base64EncodedString()
        if credential.isPassphrase {
            try scrypt.validate()
            return VaultHeader.KDF(type: "scrypt", n: scrypt.n, r: scrypt.r, p: scrypt.p, salt: encoded)
        }
        _ = try credential.keyMaterial()
        return VaultHeader.KDF(type: "keyfile", n: nil, r: nil, p: nil, salt: encoded)
    }

    /// Writes a new vault's files into `root` (which exists and is empty apart from what the
    /// caller allows): the data directory, an empty snapshot (or `records`, sealed), then the
    /// header last. Returns the header bytes.
    static func create(
        paths: Paths2, credential: VaultCredential, scrypt: ScryptParameters, created: Date, idKey: SecretBytes? = nil,
        through: UInt64 = 0, records: [(record: SecureRecord, version: UInt64)] = [], writeHeader: Bool = true
    ) throws -> (header: [UInt8], kek: SecretBytes) {
        let vaultID = try vaultCrypto { try Random.bytes(count: Format.vaultIDSize) }
        let kdf = try newKDF(for: credential, scrypt: scrypt)
        let kek = try HeaderFormat.deriveKEK(kdf, credential: credential)
        let idKey = try idKey ?? vaultCrypto { try SecretBytes.random(count: 32) }
        let dataKey = try vaultCrypto { try SecretBytes.random(count: 32) }
        let header = VaultHeader2(
            format: VaultHeader.formatName, version: Format2.version, vaultId: vaultID.hexString, created: iso8601(created),
            generation: 1, kdf: kdf,
            idKey: try VaultHeader2.wrap(idKey, kek: kek, vaultID: vaultID, kdf: kdf, purpose: KeyPurpose.id, epoch: 0),
            dataKeys: [try VaultHeader2.wrap(dataKey, kek: kek, vaultID: vaultID, kdf: kdf, purpose: KeyPurpose.data, epoch: 1)],
            currentEpoch: 1)
        let keys = EpochKeys(epoch: 1, dataKey: dataKey)
        try io {
            try System.mkdir(paths.data, mode: 0o700)
            try System.mkdir(paths.logDirectory, mode: 0o700)
        }
        // The first snapshot: what `records` hold, sorted by record id, chained from the genesis.
        var sealed: [(id: RecordID, version: UInt64, nonce: [UInt8], ciphertext: [UInt8], tag: [UInt8])] = []
        for (record, version) in records {
            let id = RecordID(SHA256.hmac(key: idKey, RecordCodec.identity(record.key)))!
            var plaintext = RecordCodec.encode(record)
            defer { cleanse(&plaintext) }
            let box = try vaultCrypto {
                try AESGCM.seal(plaintext, key: keys.record, associatedData: SealedRef.associatedData(
                    vaultID: vaultID, epoch: 1, version: version, op: .put, recordID: id))
            }
            sealed.append((id, version, box.nonce, box.ciphertext, box.tag))
        }
        sealed.sort { $0.id < $1.id }
        let head = SnapshotFile2.Head(vaultID: vaultID, through: through, epoch: 1, recordCount: sealed.count,
                                      throughMAC: Format2.genesisMAC)
        var index: [SnapshotFile2.IndexEntry] = []
        var bodies = ByteWriter()
        var offset = head.bodiesStart
        for item in sealed {
            index.append(SnapshotFile2.IndexEntry(recordID: item.id, version: item.version, epoch: 1, offset: offset,
                                                  length: item.ciphertext.count, nonce: InlineBytes(item.nonce), tag: InlineBytes(item.tag)))
            offset += item.ciphertext.count
            bodies.append(item.ciphertext)
        }
        let encoded = SnapshotFile2.encodeIndex(index, head: head, chainKey: keys.chain)
        try Durable.write(encoded.front + encoded.pages + bodies.bytes, to: paths.snapshot, directory: paths.data)
        let bytes = try vaultCrypto { try header.encode(kek: kek) }
        if writeHeader {
            try Durable.write(bytes, to: paths.header, directory: paths.root)
            try Durable.write(bytes, to: paths.headerBackup, directory: paths.root)
        }
        return (bytes, kek)
    }
}
