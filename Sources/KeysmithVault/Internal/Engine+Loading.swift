import Dispatch
import Keysmith
import KeysmithCrypto
import KeysmithSystem
import Synchronization

// Loading: the engine's view of the files brought up to date (the header copies, the snapshot,
// every log since it, the anchor), and what an interrupted write left behind finished.
extension Engine {
    /// Brings the state up to date with the files: two system calls when nothing changed (a
    /// `stat` of the snapshot and an `open` of the next log).
    func refresh() throws {
        let status = try io { try System.status(paths.snapshot) }
        if status != snapshot.status || needsReload {
            try reloadAll()
            return
        }
        while try loadLog(lastSequence + 1) {}
        // A compaction renames its snapshot in before it removes the logs it covers: if a log
        // vanished before the probe above, the new snapshot is visible now.
        if try io({ try System.status(paths.snapshot) }) != snapshot.status { try reloadAll() }
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
            let moved = try io { try System.status(paths.snapshot) } != snapshot.status
            if !anchorAhead && !moved { break }
        }
        needsReload = false
    }

    private func reloadOnce() throws {
        anchorAhead = false
        closeFiles()
        logDirectoryMissing = false
        logMACs = [:]
        lastSequence = 0
        lastMAC = Format.genesisMAC
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
        for (path, name) in [(paths.data, Format.dataDirectory), (paths.logDirectory, Format.dataDirectory + "/log")]
            where !System.isRealDirectory(path) && System.isRealDirectory(path + "/.")
        {
            fileDamage.append(VaultDamage(
                file: name, offset: 0, recordID: nil, key: nil,
                reason: "\(name) is a symbolic link to a directory: Keysmith does not follow links inside a vault; put the directory itself in its place"))
        }
        let loaded = try SnapshotIndex.load(path: paths.snapshot, vaultID: vaultID) { try keys(for: $0) }
        snapshot = loaded.index
        if let damage = loaded.damage { fileDamage.append(damage) }
        var base: UInt64 = 0
        if let head = snapshot.head {
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
            let damage = VaultDamage(file: Format.dataDirectory + "/log", offset: 0, recordID: nil, key: nil,
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
            guard let number = LogName.sequence(name), number < Format.maximumSequence
            else {
                fileDamage.append(VaultDamage(file: Format.dataDirectory + "/log/" + name, offset: 0, recordID: nil, key: nil,
                                              reason: "a file that is not a log sits among the logs (ignored)", isIgnored: true))
                continue
            }
            if number > base { present.append(number) }
        }
        present.sort()
        if snapshot.head == nil, present.first != 1 {
            // Nothing proves what the snapshot held: every record older than the first
            // surviving log, and every absent one, is in doubt.
            markUncertain(before: present.first ?? 1, fileDamage.last(where: { $0.file == SnapshotIndex.name })
                          ?? VaultDamage(file: SnapshotIndex.name, offset: 0, recordID: nil, key: nil, reason: "the snapshot is unusable", hidesRecords: true))
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

    func markUncertain(before sequence: UInt64, _ damage: VaultDamage) {
        if sequence > (uncertainBefore?.sequence ?? 0) { uncertainBefore = (sequence, damage) }
    }

    /// Reports damaged, missing or stale copies of the header (the copy in force keeps the
    /// vault open; the next write heals the other).
    private func checkHeaderCopies() {
        let primary = try? HeaderFormat.readCopy(paths.header)
        let backup = try? HeaderFormat.readCopy(paths.headerBackup)
        if let primary, let backup, primary == backup { return }
        var inForce: HeaderCopy?
        for (bytes, name) in [(primary, HeaderFormat.primaryName), (backup, HeaderFormat.backupName)] {
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
              constantTimeEqual(VaultHeader.mac(copy.body, kek: unlocked.kek), copy.mac)
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
}
