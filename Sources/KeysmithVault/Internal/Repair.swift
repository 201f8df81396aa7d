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

        // The logs: every numbered file (other names in data/log are left alone, as every command leaves them).
        var logNames: [String] = []
        var logDirectoryUsable = true
        var logs: [(number: UInt64, name: String)] = []
        do {
            for name in try System.listDirectory(paths.logDirectory) where !name.hasPrefix(Durable.temporaryPrefix) {
                guard let number = LogName.sequence(name) else { continue }
                logNames.append(name)
                if number >= 1, number < Format.maximumSequence { logs.append((number, name)) }
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
        let anchorMark = anchor?.mark(vaultID)
        // The previous-MAC of every log that authenticates by itself (as it stands, or once the
        // fields known beforehand are put back): the witness of the commit before it.
        var authenticPrevious: [UInt64: [UInt8]] = [:]
        for (number, name) in logs {
            let path = paths.logDirectory + "/" + name
            guard let (fd, status) = (try? System.openRegularFile(path, maximumSize: Format.maximumFileSize)) ?? nil else { continue }
            defer { System.close(fd) }
            if let front = try RepairLogFront.read(fd, size: status.size, path: path, number: number),
               let proof = try front.prove(vaultID: vaultID, chain: nil, witnesses: [], epochs: unlocked.epochs, searchCount: false)
            {
                authenticPrevious[number] = proof.head.previousMAC
            }
        }

        // Where a history proves the snapshot ended: `history-<S>` that authenticates and whose
        // last MAC the next log (S + 1), authentic by itself, names as its previous one; or the
        // vault's creation, when log 1 names it.
        var historyProofs: [(through: UInt64, mac: [UInt8], history: HistoryFile.Contents?)] = []
        if let first = authenticPrevious[1], constantTimeEqual(first, Format.genesisMAC) { historyProofs.append((0, Format.genesisMAC, nil)) }
        for name in (try? System.listDirectory(paths.data)) ?? [] where name.hasPrefix("history-") {
            guard let through = UInt64(name.dropFirst("history-".count), radix: 16), through < Format.maximumSequence - 1,
                  let next = authenticPrevious[through + 1],
                  let history = verifiedHistory(through: through, throughMAC: nil), let last = history.macs.last, constantTimeEqual(last, next)
            else { continue }
            historyProofs.append((through, last, history))
        }
        // Only the history the first log present follows: a history of another snapshot (a
        // fork's, planted with its next log) must not make the repair skip this vault's logs.
        historyProofs = historyProofs.filter { $0.through + 1 == logs.first?.number }

        // The snapshot: its records count only when its MAC is proven (RepairSnapshotFront), and
        // then only those of index pages whose page MAC holds.
        var snapshotThrough: UInt64?
        var snapshotThroughMAC: [UInt8]?
        var provenHistory: HistoryFile.Contents?
        var snapshotPresent = false
        /// An unproven or unusable snapshot: none of its records are kept; a history may still
        /// prove where it ended, and the logs after it link to that.
        func snapshotLost(_ reason: String) {
            var why = reason
            if let proof = historyProofs.first {
                snapshotThrough = proof.through
                snapshotThroughMAC = proof.mac
                chainMACs[proof.through] = proof.mac
                provenHistory = proof.history
                highest = max(highest, proof.through)
                why += "; its history proves it ended at commit \(proof.through), and the logs after it are linked to that"
            }
            losses.append(.init(file: SnapshotIndex.name, sequence: nil, reason: why, salvaged: 0))
            lostThrough = max(lostThrough, snapshotThrough ?? 0)
            absentMayBeLost = true
        }
        do {
            let opened = try System.openRegularFile(paths.snapshot, maximumSize: Format.maximumFileSize)
            if opened == nil, let first = logs.first?.number, first > 1 {
                snapshotLost("the snapshot is missing: commits 1 to \(first - 1) it held are lost")
            }
            if let (fd, status) = opened {
                descriptors.append(fd)
                snapshotPresent = true
                let front = try RepairSnapshotFront.read(fd, size: status.size, path: paths.snapshot)
                var proof: RepairSnapshotFront.Proof?
                if let front {
                    var storedMACs = [front.storedThroughMAC]
                    if front.storedThrough < Format.maximumSequence - 1, let next = authenticPrevious[front.storedThrough + 1] { storedMACs.append(next) }
                    var throughs: [(through: UInt64, macs: [[UInt8]])] = [(front.storedThrough, storedMACs)]
                    for history in historyProofs {
                        if history.through == front.storedThrough { throughs[0].macs.append(history.mac) } else { throughs.append((history.through, [history.mac])) }
                    }
                    proof = try front.prove(vaultID: vaultID, epochs: unlocked.epochs, throughs: throughs)
                }
                if let front, let proof {
                    let head = proof.head
                    snapshotThrough = head.through
                    snapshotThroughMAC = head.throughMAC
                    chainMACs[head.through] = head.throughMAC
                    provenHistory = verifiedHistory(through: head.through, throughMAC: head.throughMAC)
                    highest = max(highest, head.through)
                    var problems: [String] = []
                    switch proof.source {
                    case .asItStands: break
                    case .knownFields:
                        problems.append("its header is damaged (\(front.fieldsDiffering(from: head).joined(separator: ", "))); it authenticates once "
                                        + "the values it must have are put back")
                    case .rebuiltDirectory:
                        problems.append("its directory is damaged; it authenticates with the directory rebuilt from its index pages")
                    }
                    var salvaged = 0, lostRecords = 0, lostPages = 0
                    let keys = unlocked.epochs[head.epoch]
                    for page in 0..<head.pageCount {
                        let slot = page * Format.directoryEntrySize
                        guard let keys, let bytes = try front.pageBytes(head, page),
                              Array(bytes.prefix(32)) == Array(proof.directory[slot..<(slot + 32)]),
                              constantTimeEqual(SnapshotFile.pageMAC(chainKey: keys.chain, vaultID: vaultID, through: head.through, page: page, bytes: bytes),
                                                Array(proof.directory[(slot + 32)..<(slot + Format.directoryEntrySize)]))
                        else {
                            // Its entries could point at any record the key ever sealed: not kept.
                            lostPages += 1
                            lostRecords += head.entryCount(ofPage: page)
                            continue
                        }
                        var reader = ByteReader(bytes)
                        while let id = reader.readRecordID(), let version = reader.readUInt64(), let epoch = reader.readUInt32(),
                              let offset = reader.readUInt64(), let length = reader.readUInt32(), let nonce = reader.readInline(12),
                              let tag = reader.readInline(16)
                        {
                            guard version >= 1, version <= head.through, offset >= UInt64(head.bodiesStart), Int(length) <= Format.maximumCiphertext,
                                  offset <= UInt64(status.size), Int(offset) + Int(length) <= status.size
                            else {
                                lostRecords += 1
                                failed[id] = max(failed[id] ?? 0, 1)
                                continue
                            }
                            let ref = SealedRef(recordID: id, op: .put, version: version, epoch: epoch, fd: fd, file: SnapshotIndex.name,
                                                offset: Int(offset), length: Int(length), nonce: nonce, tag: tag)
                            if try consider(ref, fileSize: status.size) { salvaged += 1 } else { lostRecords += 1 }
                        }
                    }
                    if lostPages > 0 { problems.append("\(lostPages) of its index pages fail authentication: their records are not kept") }
                    if lostRecords > 0 { problems.append("\(lostRecords) of its records are lost") }
                    if !problems.isEmpty {
                        let complete = lostRecords == 0
                        losses.append(.init(file: SnapshotIndex.name, sequence: nil, reason: "the snapshot: " + problems.joined(separator: "; "),
                                            salvaged: salvaged, complete: complete))
                        if !complete {
                            lostThrough = max(lostThrough, head.through)
                            absentMayBeLost = true
                        }
                    }
                } else {
                    snapshotLost(front == nil
                        ? "the snapshot is cut short inside its header: its records cannot be found"
                        : "the snapshot's header or directory cannot be proven (damaged, or another history's snapshot): none of its records are kept")
                }
            }
        } catch let error as SystemError where error.isUnusableFile {
            snapshotPresent = true
            snapshotLost("the snapshot is not a regular file (\(error))")
        }

        var historyBroken = false
        /// Set after a log that cannot be proven or linked: later logs link to it at best.
        var afterUntrusted = false
        let base = snapshotThrough ?? 0
        var expected = base + 1
        var chain: [UInt8]? = snapshotThroughMAC ?? (snapshotPresent ? nil : Format.genesisMAC)
        // A snapshot that nothing proves: the logs after it cannot be linked to a known history.
        if snapshotPresent, chain == nil { afterUntrusted = true }
        if !snapshotPresent, snapshotThroughMAC == nil, let first = logs.first(where: { $0.number > base })?.number, first > 1 {
            lostThrough = max(lostThrough, first - 1)
            chain = nil
            afterUntrusted = true  // the logs cannot be linked to a history the snapshot held
        }
        /// A log none of whose records can be kept: lost, and the chain cannot be followed past it.
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
            guard let front = try RepairLogFront.read(fd, size: status.size, path: path, number: number) else {
                unreadableLog(file, number, "commit \(number): the log is cut short inside its header: its records cannot be found")
                continue
            }
            // What only the key could have produced for this commit: the next commit's link,
            // when that commit authenticates by itself, and the anchor's MAC of this commit.
            var witnesses: [[UInt8]] = []
            if let next = authenticPrevious[number + 1] { witnesses.append(next) }
            let anchorWitness = anchorMark.flatMap { $0.sequence == number ? $0.mac : nil }
            if let anchorWitness { witnesses.append(anchorWitness) }
            guard let proof = try front.prove(vaultID: vaultID, chain: chain, witnesses: witnesses, anchorWitness: anchorWitness,
                                              epochs: unlocked.epochs)
            else {
                // A commit whose MAC nothing proves is never kept, even when its records
                // authenticate one by one: a commit missing a record, a fork's commit with a
                // byte changed, and plain damage to its table all look the same.
                let why: String
                if let other = try front.authenticElsewhere(vaultID: vaultID, epochs: unlocked.epochs) {
                    why = "the file holds commit \(other), not \(number) (an older log renamed or copied over it)"
                } else if !front.belongs(to: vaultID) && front.magicIntact {
                    why = "it belongs to another vault, or its header and table are damaged"
                } else {
                    why = "the commit fails authentication and nothing proves it (its header or table is damaged or was altered, "
                        + "or it is another history's commit)"
                }
                unreadableLog(file, number, "commit \(number): \(why): its records are not kept, and the logs after it cannot be linked")
                continue
            }
            var problems: [String] = []
            let damagedFields = front.fieldsDiffering(from: proof.head)
            switch proof.source {
            case .asItStands:
                break
            case .knownFields:
                problems.append("its header is damaged (\(damagedFields.joined(separator: ", "))); the commit authenticates once the "
                                + "values it must have are put back")
            case .nextCommit, .anchor:
                problems.append((damagedFields.isEmpty ? "" : "its header is damaged (\(damagedFields.joined(separator: ", "))) and ")
                                + "its stored commit MAC is damaged; "
                                + (proof.source == .anchor ? "this machine's rollback anchor, which saw this commit, proves it"
                                                           : "the next commit, which authenticates, proves it by its link"))
            }
            let linked = chain.map { constantTimeEqual(proof.head.previousMAC, $0) } ?? false
            var chainBroken = false
            if chain != nil, !linked {
                // An authentic commit of this vault that follows another commit: another history.
                problems = ["the commit does not follow the one before it (another history, such as an older copy's): its records are not kept"]
                chainBroken = true
                historyBroken = true
            } else if afterUntrusted {
                problems.append("it comes after a log that could not be linked to the history: its records are not kept")
                chainBroken = true
            } else if historyBroken {
                problems.append("it comes after a break in the chain (another history): its records are not kept")
                chainBroken = true
            }
            let bodiesStart = Format.logHeaderSize + proof.table.count + Format.macSize
            let fills = LogFile.parseTable(proof.table, count: proof.head.count, bodiesStart: bodiesStart, fileSize: status.size).problem == nil
            if !fills, !chainBroken { problems.append("its records do not fill the file as its table says") }
            var reader = ByteReader(proof.table)
            var offset = bodiesStart
            var salvaged = 0, lostRecords = 0
            while let id = reader.readRecordID(), let opByte = reader.readUInt8(), let length = reader.readUInt32(),
                  let nonce = reader.readInline(12), let tag = reader.readInline(16)
            {
                defer { offset += Int(length) }
                guard !chainBroken else {
                    lostRecords += 1
                    continue
                }
                guard let op = FrameOp(rawValue: opByte), Int(length) <= Format.maximumCiphertext else {
                    lostRecords += 1
                    failed[id] = max(failed[id] ?? 0, number)
                    continue
                }
                let ref = SealedRef(recordID: id, op: op, version: number, epoch: proof.head.epoch, fd: fd, file: file, offset: offset,
                                    length: Int(length), nonce: nonce, tag: tag)
                if try consider(ref, fileSize: status.size) { salvaged += 1 } else { lostRecords += 1 }
            }
            if lostRecords > 0, !chainBroken { problems.append("\(lostRecords) of its records fail authentication") }
            // A proven commit, linked, every record of it authenticated and filling the file as
            // its table says: the damage is in bytes that bind nothing (the stored MAC, or header
            // fields whose values are known), and the whole commit is known.
            let complete = !problems.isEmpty && !chainBroken && linked && fills && lostRecords == 0
            if !problems.isEmpty {
                losses.append(.init(file: file, sequence: number, reason: "commit \(number): " + problems.joined(separator: "; "),
                                    salvaged: salvaged, complete: complete))
                if !complete {
                    lostThrough = max(lostThrough, number)
                    absentMayBeLost = true
                }
            }
            if !chainBroken {
                chainMACs[number] = proof.mac
                highest = max(highest, number)
            }
            chain = proof.mac
        }

        // The repaired vault must pass through the commit this machine's anchor saw, as the
        // vault must without a repair: a repair never turns a rollback or a fork into "recovered".
        if let mark = anchorMark, mark.sequence > 0 {
            var proven = chainMACs[mark.sequence].map { constantTimeEqual($0, mark.mac) } ?? false
            if !proven, let history = provenHistory, let mac = history.mac(of: mark.sequence) {
                proven = constantTimeEqual(mac, mark.mac)
            }
            if !proven {
                throw KeysmithError(
                    .corruptData,
                    "this machine last saw commit \(mark.sequence) of the vault, and what the repair could keep does not pass through it "
                        + "(that commit is damaged, missing or another history's, so the vault cannot be told from a rolled-back or forked "
                        + "copy); a repair never accepts a rollback, nothing was changed; if the vault is the one you expect, accept it "
                        + "with `keysmith vault verify --accept-rollback`, then repair it")
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
        // Files that are not logs among the logs are left alone, as every command leaves them.
        let needed = !losses.isEmpty || !unreadable.isEmpty || !headerCopies.isEmpty || isDamaged
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
    /// The text of `damaged-*/report`: the repaired sequence, counts, and each loss by file
    /// and reason (reasons name files and commits, never an item).
    static func reportText(_ report: VaultRepairReport, sequence: UInt64) -> String {
        var lines = ["keysmith vault repair: the vault was rebuilt at commit \(sequence) with \(report.itemsKept) item(s) kept"]
        for loss in report.losses {
            lines.append((loss.complete ? "damaged, every record recovered: " : "lost: ") + "\(loss.file): \(loss.reason)"
                         + (loss.complete ? "" : " (\(loss.salvaged) of its records kept)"))
        }
        for copy in report.headerCopies { lines.append("header copy rewritten: \(copy)") }
        if !report.itemsMaybeStale.isEmpty {
            lines.append("\(report.itemsMaybeStale.count) item(s) may be out of date (names are sealed in the vault: the repair's own output named them)")
        }
        if !report.unreadableRecords.isEmpty { lines.append("\(report.unreadableRecords.count) record(s) unreadable, not kept") }
        if report.absentItemsMayBeLost { lines.append("items the vault does not hold may be lost too") }
        return lines.joined(separator: "\n") + "\n"
    }

    /// How long a repair waits for the rollback anchors' lock (another keysmith writing a mark
    /// holds it for milliseconds; one stopped while holding it makes the repair fail instead).
    static let anchorLockWait = 10.0

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
        var unlinkableLogs: [String] = []
        var linkedHistories: [String] = []
        // Nothing leaves the vault before the switch: a repair killed before it must leave the
        // damaged vault exactly as it was (a log moved out early would vanish unreported).
        try io {
            if plan.snapshotPresent, (try? System.link(paths.snapshot, asidePath + "/snapshot")) == nil {
                if System.isRealDirectory(paths.snapshot) {
                    // A directory in its place: no snapshot to lose, and the switch could not
                    // rename over it.
                    try System.rename(paths.snapshot, asidePath + "/snapshot")
                } else if let bytes = try System.readRegularFile(paths.snapshot, maximumSize: Format.maximumFileSize) {
                    // A file system without hard links: a copy, so the snapshot stays until the
                    // switch (a read that fails stops the repair here, having changed nothing).
                    try Durable.write(bytes, to: asidePath + "/snapshot", directory: asidePath)
                }
            }
            if plan.logDirectoryUsable {
                _ = try System.mkdir(asidePath + "/log")
                for name in plan.logNames {
                    let from = paths.logDirectory + "/" + name
                    if (try? System.link(from, asidePath + "/log/" + name)) != nil {
                        linkedLogs.append(from)
                    } else {
                        unlinkableLogs.append(name)  // moved after the switch
                    }
                }
                try System.fsyncDirectory(asidePath + "/log")
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
        // What this repair found, beside the files it replaces, before the switch: a repair
        // killed after the switch leaves the vault intact and this the only account of what
        // was lost (files and counts; never a name, which the vault keeps sealed).
        try Durable.write(Array(Self.reportText(plan.report, sequence: sequence).utf8), to: asidePath + "/report", directory: asidePath)
        // The new snapshot's history: the commits read whole that lead up to it, so that an
        // anchor at one of them (this machine's, if a crash stops the repair before it moves
        // the anchor) checks out.
        var history = HistoryFile.Contents(through: sequence, epoch: keys.epoch, first: sequence, macs: [throughMAC])
        while history.first > 1, history.macs.count < HistoryFile.window, let mac = plan.chainMACs[history.first - 1] {
            history.macs.insert(mac, at: 0)
            history.first -= 1
        }
        let historyPath = paths.data + "/" + HistoryFile.name(through: sequence)
        try Durable.write(HistoryFile.encode(history, vaultID: vaultID, chainKey: keys.chain), to: historyPath, directory: paths.data)
        try FaultInjection.step()
        // The anchor must learn the new sequence: its lock is taken before the switch (waiting
        // for another keysmith that holds it), or the repair stops here, having changed nothing
        // that the vault reads.
        var anchorLock: Descriptor?
        if let anchor {
            guard let taken = try anchor.lock(waitingUpTo: Self.anchorLockWait) else {
                try? System.unlink(historyPath)
                throw KeysmithError(.timedOut, "another process has held the rollback anchors' lock (\(anchor.directory)/.lock) for "
                                    + "\(Int(Self.anchorLockWait)) s, and a repair must move this vault's anchor; nothing was changed, "
                                    + "run the repair again")
            }
            anchorLock = taken
        }
        defer { if let anchorLock, let anchor { MarkFiles(directory: anchor.directory).release(anchorLock) } }
        // 3. The switch.
        try io {
            try System.rename(temporary, paths.snapshot)
            try FaultInjection.step()
            try System.fsyncDirectory(paths.data)
        }
        try FaultInjection.step()
        // 4. The logs it replaces leave the vault (their links stay aside); what could not be
        // linked is moved aside now; a log directory that was missing or not one is made again.
        try io {
            if plan.logDirectoryUsable {
                for path in linkedLogs { try System.unlink(path) }
                for name in unlinkableLogs { try System.rename(paths.logDirectory + "/" + name, asidePath + "/log/" + name) }
                try System.fsyncDirectory(asidePath + "/log")
            } else {
                if try System.status(paths.logDirectory) != nil { try System.rename(paths.logDirectory, asidePath + "/log") }
                _ = try System.mkdir(paths.logDirectory)
                try System.fsyncDirectory(asidePath)
            }
            try System.fsyncDirectory(paths.logDirectory)
            for path in linkedHistories where path != historyPath { try System.unlink(path) }
            try System.fsyncDirectory(paths.data)
        }
        try FaultInjection.step()
        if let anchor, let lock = anchorLock {
            anchorLock = nil
            do {
                try anchor.write(vaultID, AnchorStore.Mark(sequence: sequence, mac: throughMAC), releasing: lock)
            } catch {
                throw KeysmithError(.ioFailure, "the vault was repaired (the replaced files are in \(aside)), but this machine's rollback "
                                    + "anchor could not be moved to its new commit \(sequence) (\(error)): the vault will be refused as "
                                    + "rolled back until you accept it with `keysmith vault verify --accept-rollback`")
            }
        }
        try reloadAll()
        return VaultRepairReport(
            needed: true, dryRun: false, itemsKept: plan.report.itemsKept, losses: plan.report.losses,
            itemsMaybeStale: plan.report.itemsMaybeStale, unreadableRecords: plan.report.unreadableRecords,
            absentItemsMayBeLost: plan.report.absentItemsMayBeLost, headerCopies: plan.report.headerCopies, movedAside: aside,
            sequence: sequence)
    }
}
