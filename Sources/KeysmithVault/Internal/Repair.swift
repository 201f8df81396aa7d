import FoundationEssentials
import Keysmith
import KeysmithCredentials
import KeysmithCrypto
import KeysmithSystem

/// `vault repair` (docs/format.md, "Repair"): a new, consistent state built from every record
/// that authenticates. The scan trusts no structure: each snapshot index entry and each log table
/// entry is tried as it stands, and a record counts only when its AES-GCM tag holds under the
/// associated data that binds the vault id, its epoch, version, operation and record id (and, for
/// a put, when its identity hashes to its record id). What cannot be read is reported, by name
/// where a readable version names it.
extension Engine {
    /// What the scan found.
    struct RepairPlan {
        /// The newest authenticated version of every record id that is a put, sorted by record id.
        var keep: [SealedRef] = []
        var report: VaultRepairReport
        /// Every file the scan opened, closed when the plan is done with.
        var descriptors: [Descriptor] = []
        /// The names under `data/log` (not temporary files), moved aside by the repair.
        var logNames: [String] = []
        var logDirectoryUsable = true
        var snapshotPresent = false
        /// The MACs of the commits read whole and chained (and of the snapshot's through-sequence
        /// when it authenticated): the repaired snapshot's history reaches back through them, so
        /// an anchor at one of them still checks out.
        var chainMACs: [UInt64: [UInt8]] = [:]
    }

    /// Reads every file of the vault and works out what a repair keeps and loses. Changes nothing.
    /// The caller holds the flock (or, for a dry run, may not) and the engine is loaded;
    /// `headerCopies` are the header copies found damaged, missing or stale.
    func planRepair(headerCopies: [String]) throws -> RepairPlan {
        var descriptors: [Descriptor] = []
        var losses: [VaultRepairReport.Loss] = []
        var chainMACs: [UInt64: [UInt8]] = [:]
        /// The newest version of each record id that authenticates, with the item it names (nil for a delete).
        var best: [RecordID: (ref: SealedRef, key: ItemKey?)] = [:]
        /// The newest version of each record id that does not authenticate.
        var failed: [RecordID: UInt64] = [:]
        /// Sequences at or below which any record may have been changed by what was lost.
        var lostThrough: UInt64 = 0
        var absentMayBeLost = false
        var highest: UInt64 = 0
        var ciphers: [UInt32: AESGCM.Context] = [:]
        let idMAC = idMAC

        func cipher(_ epoch: UInt32) throws -> AESGCM.Context? {
            if let known = ciphers[epoch] { return known }
            guard let keys = unlocked.epochs[epoch] else { return nil }
            let made = try keysmithCrypto { try AESGCM.Context(key: keys.record) }
            ciphers[epoch] = made
            return made
        }
        /// Whether `ref` authenticates; records it either way.
        func consider(_ ref: SealedRef, fileSize: Int) throws -> Bool {
            var ok = false
            var key: ItemKey?
            if ref.offset >= 0, ref.length >= 0, ref.offset + ref.length <= fileSize, let cipher = try cipher(ref.epoch) {
                let path = paths.root + "/" + ref.file
                let body = ref.length == 0 ? [] : try io { try System.read(ref.fd, count: ref.length, at: ref.offset, path: path) }
                switch ref.op {
                case .put:
                    if case .record(let record) = Self.openDetached(ref, body: body, key: nil, withSecret: false, admitKind: nil,
                                                                      cipher: cipher, vaultID: vaultID, idMAC: idMAC) {
                        ok = true
                        key = record.key
                    }
                case .delete:
                    ok = body.isEmpty && (try? cipher.open(
                        ciphertext: [], tag: ref.tag.array, nonce: ref.nonce.array,
                        associatedData: SealedRef.associatedData(vaultID: vaultID, epoch: ref.epoch, version: ref.version, op: .delete,
                                                                 recordID: ref.recordID))) != nil
                }
            }
            if ok {
                if ref.version > (best[ref.recordID]?.ref.version ?? 0) { best[ref.recordID] = (ref, key) }
                highest = max(highest, ref.version)
            } else {
                failed[ref.recordID] = max(failed[ref.recordID] ?? 0, ref.version)
            }
            return ok
        }

        // The snapshot: its header read even with a damaged magic; every index entry tried.
        var snapshotThrough: UInt64?
        var snapshotThroughMAC: [UInt8]?
        var snapshotPresent = false
        do {
            if let (fd, status) = try System.openRegularFile(paths.snapshot, maximumSize: Format.maximumFileSize) {
                descriptors.append(fd)
                snapshotPresent = true
                var headBytes = try io { try System.read(fd, count: Format.snapshotHeaderSize, at: 0, path: paths.snapshot) }
                var problem: String?
                if headBytes.count == Format.snapshotHeaderSize, Array(headBytes[0..<8]) != Format.snapshotMagic {
                    problem = "its header is damaged (wrong magic)"
                    headBytes.replaceSubrange(0..<8, with: Format.snapshotMagic)
                }
                if let head = try? SnapshotFile.parseHead(headBytes, fileSize: status.size) {
                    var newestRecord: UInt64 = 0
                    if head.vaultID != vaultID { problem = problem ?? "it belongs to another vault" }
                    var directory: [UInt8] = []
                    if let keys = unlocked.epochs[head.epoch] {
                        directory = try io {
                            try System.read(fd, count: head.pageCount * Format.directoryEntrySize + Format.macSize, at: head.directoryStart,
                                            path: paths.snapshot)
                        }
                        if directory.count == head.pageCount * Format.directoryEntrySize + Format.macSize,
                           constantTimeEqual(SnapshotFile.snapshotMAC(chainKey: keys.chain, head: headBytes,
                                                                       directory: Array(directory.prefix(head.pageCount * Format.directoryEntrySize))),
                                             Array(directory.suffix(Format.macSize)))
                        {
                            if problem == nil {
                                snapshotThroughMAC = head.throughMAC
                                chainMACs[head.through] = head.throughMAC
                            }
                        } else {
                            problem = problem ?? "its header or directory fails authentication"
                        }
                    } else {
                        problem = problem ?? "it is authenticated under key epoch \(head.epoch), which the header does not hold"
                    }
                    var salvaged = 0, lostRecords = 0
                    for page in 0..<head.pageCount {
                        let count = head.entryCount(ofPage: page)
                        let start = head.pagesStart + page * head.entriesPerPage * Format.indexEntrySize
                        let bytes = try io { try System.read(fd, count: count * Format.indexEntrySize, at: start, path: paths.snapshot) }
                        if let keys = unlocked.epochs[head.epoch], directory.count >= (page + 1) * Format.directoryEntrySize,
                           !constantTimeEqual(
                               SnapshotFile.pageMAC(chainKey: keys.chain, vaultID: vaultID, through: head.through, page: page, bytes: bytes),
                               Array(directory[(page * Format.directoryEntrySize + 32)..<((page + 1) * Format.directoryEntrySize)]))
                        {
                            problem = problem ?? "index page \(page) fails authentication"
                        }
                        var reader = ByteReader(bytes)
                        while let id = reader.readRecordID(), let version = reader.readUInt64(), let epoch = reader.readUInt32(),
                              let offset = reader.readUInt64(), let length = reader.readUInt32(), let nonce = reader.readInline(12),
                              let tag = reader.readInline(16)
                        {
                            guard offset < UInt64(Int.max / 2), version >= 1, version < Format.maximumSequence else {
                                lostRecords += 1
                                failed[id] = max(failed[id] ?? 0, 1)
                                continue
                            }
                            let ref = SealedRef(recordID: id, op: .put, version: version, epoch: epoch, fd: fd, file: SnapshotIndex.name,
                                                offset: Int(offset), length: Int(length), nonce: nonce, tag: tag)
                            if try consider(ref, fileSize: status.size) {
                                salvaged += 1
                                newestRecord = max(newestRecord, version)
                            } else {
                                lostRecords += 1
                            }
                        }
                        if bytes.count < count * Format.indexEntrySize {
                            problem = problem ?? "it is cut short inside its index"
                            absentMayBeLost = true
                        }
                    }
                    if lostRecords > 0 { problem = problem ?? "\(lostRecords) of its records fail authentication" }
                    // Its through-sequence counts only when its header authenticated; else what it
                    // covered is known only as far as its newest record that authenticates.
                    let through = snapshotThroughMAC != nil ? head.through : newestRecord
                    snapshotThrough = through
                    highest = max(highest, through)
                    if let problem {
                        losses.append(.init(file: SnapshotIndex.name, sequence: nil, reason: "the snapshot: \(problem)", salvaged: salvaged))
                        lostThrough = max(lostThrough, through)
                        if lostRecords > 0 || snapshotThroughMAC == nil { absentMayBeLost = true }
                    }
                } else {
                    losses.append(.init(file: SnapshotIndex.name, sequence: nil,
                                        reason: "the snapshot's header is damaged: its records cannot be found", salvaged: 0))
                    absentMayBeLost = true
                }
            }
        } catch let error as SystemError where error.isUnusableFile {
            snapshotPresent = true
            losses.append(.init(file: SnapshotIndex.name, sequence: nil, reason: "the snapshot is not a regular file (\(error))", salvaged: 0))
            absentMayBeLost = true
        }

        // The logs: every numbered file, each table entry tried as it stands.
        var logNames: [String] = []
        var logDirectoryUsable = true
        var logs: [(number: UInt64, name: String)] = []
        do {
            for name in try System.listDirectory(paths.logDirectory) where !name.hasPrefix(Durable.temporaryPrefix) {
                logNames.append(name)
                if let number = LogName.sequence(name), number >= 1, number < Format.maximumSequence {
                    logs.append((number, name))
                }
            }
        } catch let error as SystemError where error.isNotFound || error.isNotDirectory {
            logDirectoryUsable = false
            losses.append(.init(file: Format.dataDirectory + "/log", sequence: nil,
                                reason: error.isNotFound ? "the log directory is missing" : "something that is not a directory is in the log directory's place",
                                salvaged: 0))
            lostThrough = .max
            absentMayBeLost = true
        }
        logs.sort { $0.number < $1.number }
        var historyBroken = false
        /// Set after a log that neither authenticates nor links: later logs link to it at best.
        var afterUntrusted = false
        let base = snapshotThrough ?? 0
        var expected = base + 1
        var chain: [UInt8]? = snapshotThroughMAC ?? (snapshotPresent ? nil : Format.genesisMAC)
        if !snapshotPresent, let first = logs.first(where: { $0.number > base })?.number, first > 1 {
            losses.append(.init(file: SnapshotIndex.name, sequence: nil,
                                reason: "the snapshot is missing: commits 1 to \(first - 1) it held are lost", salvaged: 0))
            lostThrough = max(lostThrough, first - 1)
            absentMayBeLost = true
            chain = nil
            afterUntrusted = true  // the logs cannot be linked to a history the snapshot held
        }
        /// A log none of whose records can be found: lost, and the chain cannot be followed past it.
        func unreadableLog(_ file: String, _ number: UInt64, _ reason: String) {
            losses.append(.init(file: file, sequence: number, reason: reason, salvaged: 0))
            lostThrough = max(lostThrough, number)
            absentMayBeLost = true
            chain = nil
            afterUntrusted = true
        }
        for (number, name) in logs where number > base {
            if number > expected {
                losses.append(.init(file: paths.logName(expected), sequence: expected,
                                    reason: number - expected == 1 ? "log \(expected) is missing" : "logs \(expected) to \(number - 1) are missing",
                                    salvaged: 0))
                lostThrough = max(lostThrough, number - 1)
                absentMayBeLost = true
                chain = nil
                afterUntrusted = true  // what follows a gap cannot be linked to the history before it
            }
            expected = number + 1
            let file = Format.dataDirectory + "/log/" + name
            let path = paths.root + "/" + file
            let opened: (fd: Descriptor, status: System.FileStatus)?
            do {
                opened = try System.openRegularFile(path, maximumSize: Format.maximumFileSize)
            } catch let error as SystemError where error.isUnusableFile {
                unreadableLog(file, number, "the log is not a regular file (\(error))")
                continue
            }
            guard let (fd, status) = opened else { continue }
            descriptors.append(fd)
            var headBytes = try io { try System.read(fd, count: Format.logHeaderSize, at: 0, path: path) }
            var problem: String?
            if headBytes.count == Format.logHeaderSize, Array(headBytes[0..<8]) != Format.logMagic {
                problem = "its header is damaged (wrong magic)"
                headBytes.replaceSubrange(0..<8, with: Format.logMagic)
            }
            guard let head = try? LogFile.parseHead(headBytes, fileSize: status.size) else {
                unreadableLog(file, number, "the log's header is damaged: its records cannot be found")
                continue
            }
            if head.vaultID != vaultID { problem = problem ?? "it belongs to another vault" }
            if head.sequence != number { problem = problem ?? "it holds commit \(head.sequence), not \(number)" }
            let tableSize = head.count * Format.tableEntrySize
            let rest = try io { try System.read(fd, count: tableSize + Format.macSize, at: Format.logHeaderSize, path: path) }
            // Authenticity and the link to the chain, told apart from damage: the commit MAC is
            // checked as the file stands, and again with the fields that are known beforehand put
            // back (magic, vault id, sequence = the name, previous MAC = the chain). A commit whose
            // MAC holds only that way is this vault's, linked, with damage in those fields alone.
            var macHolds = false, macHoldsNormalized = false
            if let keys = unlocked.epochs[head.epoch], rest.count == tableSize + Format.macSize {
                let stored = Array(rest.suffix(Format.macSize))
                let table = Array(rest.prefix(tableSize))
                macHolds = constantTimeEqual(LogFile.commitMAC(chainKey: keys.chain, headerAndTable: headBytes + table), stored)
                if !macHolds, let chain {
                    var normalized = headBytes
                    normalized.replaceSubrange(0..<8, with: Format.logMagic)
                    normalized.replaceSubrange(8..<24, with: vaultID)
                    normalized.replaceSubrange(24..<32, with: (0..<8).map { UInt8(truncatingIfNeeded: number >> (56 - 8 * $0)) })
                    normalized.replaceSubrange(40..<72, with: chain)
                    macHoldsNormalized = constantTimeEqual(LogFile.commitMAC(chainKey: keys.chain, headerAndTable: normalized + table), stored)
                }
                if !macHolds { problem = problem ?? "the commit fails authentication" }
            } else if unlocked.epochs[head.epoch] == nil {
                problem = problem ?? "it is authenticated under key epoch \(head.epoch), which the header does not hold"
            } else {
                problem = problem ?? "it is cut short inside its table"
            }
            // The link to the chain is checked whatever else is wrong with the log (a renamed or
            // re-headed old log must not slip in through another problem).
            var chainBroken = false
            let linked = macHoldsNormalized || (chain.map { constantTimeEqual(head.previousMAC, $0) } ?? false)
            if chain != nil, !linked, macHolds {
                // An authentic commit of this vault that follows another commit: another history.
                problem = "the commit does not follow the one before it (another history, such as an older copy's): its records are not kept"
                chainBroken = true
                historyBroken = true
            } else if !linked, chain != nil || afterUntrusted {
                // Neither authentic as it stands nor linked (or after such a log, or after a gap):
                // it cannot be told from an older copy's log with a byte changed to pass as damage;
                // it, and every log after it, are not kept (they stay in the damaged-* directory).
                problem = (problem ?? "it does not link to the commit before it")
                    + (afterUntrusted && chain == nil ? " (after a log that could not be linked)" : "")
                    + ": it cannot be told from another history's commit, so its records are not kept"
                chainBroken = true
                afterUntrusted = true
            } else if afterUntrusted {
                problem = (problem.map { $0 + "; " } ?? "")
                    + "it comes after a log that could not be linked to the history: its records are not kept"
                chainBroken = true
            } else if historyBroken {
                // After a break, what follows continues the other history (or cannot be told apart from it).
                problem = problem ?? "it comes after a break in the chain (another history): its records are not kept"
                chainBroken = true
            }
            let table = rest.prefix(tableSize)
            if problem == nil, LogFile.parseTable(Array(table), count: head.count, bodiesStart: Format.logHeaderSize + tableSize + Format.macSize,
                                                   fileSize: status.size).problem != nil
            {
                problem = "its records do not fill the file as its table says"
            }
            var reader = ByteReader(Array(table))
            var offset = Format.logHeaderSize + tableSize + Format.macSize
            var salvaged = 0, lostRecords = 0
            while let id = reader.readRecordID(), let opByte = reader.readUInt8(), let length = reader.readUInt32(),
                  let nonce = reader.readInline(12), let tag = reader.readInline(16)
            {
                defer { offset += Int(length) }
                guard let op = FrameOp(rawValue: opByte), Int(length) <= Format.maximumCiphertext else {
                    lostRecords += 1
                    failed[id] = max(failed[id] ?? 0, number)
                    continue
                }
                // A renamed log's records authenticate under the commit they were written in.
                let version = head.sequence == number || head.sequence >= Format.maximumSequence ? number : head.sequence
                let ref = SealedRef(recordID: id, op: op, version: version, epoch: head.epoch, fd: fd, file: file, offset: offset,
                                    length: Int(length), nonce: nonce, tag: tag)
                // Records of another history authenticate (the same keys sealed them) but are not
                // this vault's: never merged in.
                if chainBroken {
                    lostRecords += 1
                } else if try consider(ref, fileSize: status.size) {
                    salvaged += 1
                } else {
                    lostRecords += 1
                }
            }
            if reader.remaining > 0 || table.count < tableSize { problem = problem ?? "its table is cut short" }
            if lostRecords > 0 { problem = problem ?? "\(lostRecords) of its records fail authentication" }
            // Every table entry authenticates and the bodies fill the file exactly as the table
            // says: the damage is in fields that bind nothing of the records (its vault id, say),
            // and the whole commit is known. A break in the chain is never "complete": the
            // history before it is another one.
            let complete = problem != nil && lostRecords == 0 && reader.remaining == 0 && table.count == tableSize && !chainBroken && linked
                && LogFile.parseTable(Array(table), count: head.count, bodiesStart: Format.logHeaderSize + tableSize + Format.macSize,
                                       fileSize: status.size).problem == nil
            if let problem {
                losses.append(.init(file: file, sequence: number, reason: "commit \(number): \(problem)", salvaged: salvaged, complete: complete))
                if !complete {
                    lostThrough = max(lostThrough, number)
                    absentMayBeLost = true
                }
                // The next log must still link to this one: to the MAC bytes it holds, when its
                // table and MAC were read whole (a damaged field elsewhere does not unlink it).
                chain = rest.count == tableSize + Format.macSize ? Array(rest.suffix(Format.macSize)) : nil
            } else {
                chain = Array(rest.suffix(Format.macSize))
                chainMACs[number] = chain
                highest = max(highest, number)
            }
        }

        // What is kept: the newest authenticated version of each record id, when it is a put.
        var keep: [SealedRef] = []
        var stale: [ItemKey] = []
        for (id, found) in best where found.ref.op == .put {
            keep.append(found.ref)
            if let key = found.key, found.ref.version < lostThrough || (failed[id] ?? 0) > found.ref.version { stale.append(key) }
        }
        keep.sort { $0.recordID < $1.recordID }
        let unreadable = failed.keys.filter { best[$0] == nil }.map(\.description).sorted()
        if !unreadable.isEmpty { absentMayBeLost = true }
        let ignored = damage.contains(where: \.isIgnored)
        let needed = !losses.isEmpty || !unreadable.isEmpty || !headerCopies.isEmpty || ignored || isDamaged
            || failed.contains { id, version in version > (best[id]?.ref.version ?? 0) || best[id] == nil }
        let report = VaultRepairReport(
            needed: needed, dryRun: true, itemsKept: keep.count, losses: losses,
            itemsMaybeStale: stale.sorted { $0.description < $1.description }, unreadableRecords: unreadable,
            absentItemsMayBeLost: absentMayBeLost, headerCopies: headerCopies, movedAside: nil,
            sequence: max(highest, anchor?.mark(vaultID)?.sequence ?? 0) + 1)
        return RepairPlan(keep: keep, report: report, descriptors: descriptors, logNames: logNames,
                          logDirectoryUsable: logDirectoryUsable, snapshotPresent: snapshotPresent, chainMACs: chainMACs)
    }

    /// Carries out a plan: a new snapshot of every kept record, sealed as it is, through
    /// ``VaultRepairReport/sequence`` with a random through-MAC; every replaced file moved aside
    /// into `damaged-<time>/` first (hard links, so a crash at any step leaves them there); the
    /// anchor moved to the new sequence. The caller holds the flock and called `prepareWrite()`
    /// (both header copies are written from the copy in force).
    func carryOut(_ plan: RepairPlan, at now: Date) throws -> VaultRepairReport {
        guard let keys = unlocked.epochs[currentEpoch] else { throw KeysmithError(.corruptData, "the vault's current key is missing") }
        let sequence = plan.report.sequence
        guard sequence < Format.maximumSequence else {
            throw KeysmithError(.limitExceeded, "the vault has run out of commit numbers; nothing was changed")
        }
        let throughMAC = try keysmithCrypto { try Random.bytes(count: Format.macSize) }
        let head = SnapshotFile.Head(vaultID: vaultID, through: sequence, epoch: keys.epoch, recordCount: plan.keep.count,
                                      throughMAC: throughMAC)
        // 1. The new snapshot, complete and flushed, beside the old one.
        let temporary = paths.data + "/" + Durable.temporaryPrefix + "repair-\(System.processID)"
        defer { try? System.unlink(temporary) }
        for (path, name) in [(paths.data, Format.dataDirectory), (paths.logDirectory, Format.dataDirectory + "/log")]
            where !System.isRealDirectory(path) && System.isRealDirectory(path + "/.")
        {
            throw KeysmithError(.corruptData, "\(name) is a symbolic link to a directory; put the directory itself in its place "
                                + "(move what it points to there), then run the repair again; nothing was changed")
        }
        guard System.isRealDirectory(paths.data) else {
            throw KeysmithError(.corruptData, "the vault's data directory is missing or not a directory; restore the vault from a backup; nothing was changed")
        }
        try writeSnapshotFile(temporary, head: head, keys: keys, reseal: false, sequentialFD: nil) { copy in
            for ref in plan.keep {
                guard try copy(ref) else { break }
            }
        }
        // 2. Everything the new snapshot replaces is kept, under damaged-<time>/.
        let aside = try Durable.makeAsideDirectory(in: paths.root, at: now)
        try FaultInjection.step()
        let asidePath = paths.root + "/" + aside
        var linkedLogs: [String] = []
        var linkedHistories: [String] = []
        try io {
            if plan.snapshotPresent {
                if (try? System.link(paths.snapshot, asidePath + "/snapshot")) == nil {
                    try System.rename(paths.snapshot, asidePath + "/snapshot")  // a directory in its place
                }
            }
            if plan.logDirectoryUsable {
                _ = try System.mkdir(asidePath + "/log")
                for name in plan.logNames {
                    let from = paths.logDirectory + "/" + name
                    if let number = LogName.sequence(name), number <= sequence, (try? System.link(from, asidePath + "/log/" + name)) != nil {
                        linkedLogs.append(from)
                    } else {
                        // Not a log this snapshot covers (or not linkable): out of the vault now.
                        try System.rename(from, asidePath + "/log/" + name)
                    }
                }
                try System.fsyncDirectory(asidePath + "/log")
            } else {
                if try System.status(paths.logDirectory) != nil { try System.rename(paths.logDirectory, asidePath + "/log") }
                _ = try System.mkdir(paths.logDirectory)
                try System.fsyncDirectory(paths.logDirectory)
            }
            // The histories of the replaced snapshots: kept aside (linked now, removed after the
            // switch, so a crash before it leaves the old snapshot with its history).
            for name in try System.listDirectory(paths.data) where name.hasPrefix("history-") {
                if (try? System.link(paths.data + "/" + name, asidePath + "/" + name)) != nil {
                    linkedHistories.append(paths.data + "/" + name)
                }
            }
            try System.fsyncDirectory(asidePath)
            try System.fsyncDirectory(paths.data)
        }
        // The new snapshot's history: the commits read whole that lead up to it, so that an
        // anchor at one of them (this machine's, if a crash stops the repair before it moves
        // the anchor) checks out.
        var history = HistoryFile.Contents(through: sequence, epoch: keys.epoch, first: sequence, macs: [throughMAC])
        while history.first > 1, history.macs.count < HistoryFile.window, let mac = plan.chainMACs[history.first - 1] {
            history.macs.insert(mac, at: 0)
            history.first -= 1
        }
        try Durable.write(HistoryFile.encode(history, vaultID: vaultID, chainKey: keys.chain),
                          to: paths.data + "/" + HistoryFile.name(through: sequence), directory: paths.data)
        try FaultInjection.step()
        // 3. The switch.
        try io {
            try System.rename(temporary, paths.snapshot)
            try FaultInjection.step()
            try System.fsyncDirectory(paths.data)
        }
        try FaultInjection.step()
        // 4. The logs it covers leave the vault (their links stay aside); the anchor follows.
        try io {
            for path in linkedLogs { try System.unlink(path) }
            try System.fsyncDirectory(paths.logDirectory)
            for path in linkedHistories where path != paths.data + "/" + HistoryFile.name(through: sequence) { try System.unlink(path) }
            try System.fsyncDirectory(paths.data)
        }
        try FaultInjection.step()
        anchor?.write(vaultID, AnchorStore.Mark(sequence: sequence, mac: throughMAC))
        try reloadAll()
        return VaultRepairReport(
            needed: true, dryRun: false, itemsKept: plan.report.itemsKept, losses: plan.report.losses,
            itemsMaybeStale: plan.report.itemsMaybeStale, unreadableRecords: plan.report.unreadableRecords,
            absentItemsMayBeLost: plan.report.absentItemsMayBeLost, headerCopies: plan.report.headerCopies, movedAside: aside,
            sequence: sequence)
    }
}
