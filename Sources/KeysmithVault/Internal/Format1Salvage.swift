import FoundationEssentials
import Keysmith
import KeysmithCredentials
import KeysmithCrypto
import KeysmithSystem

/// The repair of a damaged format 1 vault (docs/format.md, "Repairing a version 1 vault"): its
/// files read by themselves, every frame tried as it stands, and a format 2 vault written from the
/// newest version of each record that authenticates. It does not read through `Format1Engine`,
/// whose rules serve reads (a damaged newest version hides an older intact one; a log after a
/// gap is never looked at; a snapshot that is not a regular file fails the open): a repair must
/// see everything that can still be vouched for, and report the rest.
///
/// ```swift
/// let salvage = try Format1Salvage(root: path, credential: credential)
/// let plan = try salvage.plan()
/// if plan.report.needed { try salvage.carryOut(plan, credential: credential, scrypt: .default, at: Date()) }
/// ```
struct Format1Salvage {
    /// What a repair keeps and reports.
    struct Plan {
        /// Every record kept, with the commit that wrote it.
        var keep: [(record: SecureRecord, version: UInt64)]
        var report: VaultRepairReport
    }

    let paths: Paths1
    let unlocked: UnlockedHeader1
    var vaultID: [UInt8] { unlocked.header.vaultIDBytes }

    /// Unlocks the vault's header (either intact copy) with `credential`.
    ///
    /// - Throws: What opening the vault throws for its header: `authenticationFailed` for a
    ///   wrong credential, `corruptData` when no copy is intact.
    init(root: String, credential: VaultCredential) throws {
        paths = Paths1(root: root)
        unlocked = try Self.unlock(paths, credential: credential)
    }

    /// The intact header copy that `credential` unlocks, preferring the one whose vault id is
    /// the files' (two copies of different vaults, one keyfile opening both, would otherwise
    /// write the records off as another vault's); the first failure when none unlocks.
    static func unlock(_ paths: Paths1, credential: VaultCredential) throws -> UnlockedHeader1 {
        var firstError: (any Error)?
        var unlocked: [UnlockedHeader1] = []
        for header in HeaderStore1.intactCopies(paths) {
            do {
                unlocked.append(try HeaderStore1.unlock(header, credential: credential))
            } catch {
                firstError = firstError ?? error
            }
        }
        if Set(unlocked.map(\.header.vaultId)).count > 1, let filesVaultID = filesVaultID(paths),
           let matching = unlocked.first(where: { $0.header.vaultIDBytes == filesVaultID })
        {
            return matching
        }
        if let first = unlocked.first { return first }
        if let firstError { throw firstError }
        _ = try HeaderStore1.read(paths)  // throws the precise "no header" / "damaged" error
        throw KeysmithError(.corruptData, "the vault header cannot be read")
    }

    /// The vault id the snapshot's file header names, else the lowest log's; `nil` when neither
    /// can be read.
    private static func filesVaultID(_ paths: Paths1) -> [UInt8]? {
        func vaultID(_ path: String, _ kind: FrameFile.Kind) -> [UInt8]? {
            guard let opened = try? System.openRegularFile(path, maximumSize: Format.maximumFileSize) else { return nil }
            let fd = opened.fd
            defer { System.close(fd) }
            guard let bytes = try? System.read(fd, count: Format1.fileHeaderSize, at: 0, path: path) else { return nil }
            return FrameFile.parseHeader(bytes, kind: kind)?.vaultID
        }
        if let id = vaultID(paths.snapshot, .snapshot) { return id }
        let lowest = ((try? System.listDirectory(paths.logDirectory)) ?? []).compactMap(LogName.sequence).min()
        return lowest.flatMap { vaultID(paths.log($0), .log) }
    }

    // MARK: Planning

    /// What the scan found so far.
    private struct Findings {
        /// The newest version of each record id that authenticates.
        var best: [RecordID: (version: UInt64, record: SecureRecord?, file: String)] = [:]
        /// The newest version of each record id that does not.
        var failed: [RecordID: UInt64] = [:]
        /// Each damaged file's reasons, and whether a record may be lost with it.
        var damage: [String: (reasons: [String], lossy: Bool)] = [:]
        /// Records older than this may be stale: damage that cannot be tied to records is in
        /// this commit (the newest such; `.max` when the snapshot itself is lost).
        var hiddenThrough: UInt64 = 0
        var hides = false
        var highest: UInt64 = 0
        /// Files whose header was read, and those of them that are another vault's.
        var filesRead = 0
        var foreignFiles = 0

        mutating func lose(_ file: String, _ reason: String, lossy: Bool = true) {
            damage[file, default: ([], false)].reasons.append(reason)
            if lossy { damage[file]!.lossy = true }
        }

        mutating func hide(_ file: String, _ reason: String, through sequence: UInt64) {
            lose(file, reason)
            hides = true
            hiddenThrough = max(hiddenThrough, sequence)
        }

        mutating func fail(_ id: RecordID, _ version: UInt64) { failed[id] = max(failed[id] ?? 0, version) }
    }

    /// Reads every file and tries every frame; changes nothing.
    func plan() throws -> Plan {
        var found = Findings()
        let headerCopies = headerCopyProblems()
        let limit = Format.maximumSequence

        // The logs present, by number (a name beyond any commit is reported, not read).
        var numbers: [(number: UInt64, name: String)] = []
        if System.isRealDirectory(paths.logDirectory) {
            for name in try io({ try System.listDirectory(paths.logDirectory) }) {
                guard let number = LogName.sequence(name) else { continue }
                if number < limit {
                    numbers.append((number, name))
                } else {
                    found.lose("log/" + name, "the file is named as commit \(number), beyond any a vault reaches; not read", lossy: false)
                }
            }
        } else if System.entryExists(paths.logDirectory) {
            found.hide("log", "the log directory is not a directory (a link or a file is in its place); its commits were not read",
                       through: .max)
        }
        numbers.sort { $0.number < $1.number }

        // The snapshot: its through-sequence S decides which logs follow it (those at or below
        // S are a compaction's leftovers, never read). Without a trusted S, the logs are read
        // from the lowest present above what is known.
        var start: UInt64 = 1
        do {
            if let bytes = try System.readRegularFile(paths.snapshot, maximumSize: Format.maximumFileSize) {
                let scanned = scan(bytes, name: "snapshot", expected: nil, into: &found)
                switch scanned.through {
                case .trusted(let through): start = through + 1
                case .estimated(let through): start = numbers.first { $0.number > through }?.number ?? through + 1
                case .lost: start = numbers.first?.number ?? 1
                }
                found.highest = max(found.highest, scanned.highest)
            } else if let first = numbers.first?.number, first > 1 {
                found.hide("snapshot", "the snapshot is missing, though the logs start at commit \(first): the commits before it are lost",
                           through: .max)
                start = first
            }
        } catch let error as SystemError where error.isUnusableFile {
            found.hide("snapshot", "the snapshot is not a regular file (\(error))", through: .max)
            start = numbers.first?.number ?? 1
        } catch let error as SystemError {
            throw KeysmithError(.ioFailure, "cannot read the vault's snapshot: \(error)")
        }

        // The logs from there; a missing number is a lost commit, and the logs after it are
        // still this vault's commits (each authenticates under its vault id and number).
        var next = start
        for (number, name) in numbers {
            found.highest = max(found.highest, number)
            let file = "log/" + name
            if number < start { continue }  // folded into the snapshot: a compaction's leftover
            if number > next {
                let missing = number - next == 1 ? "commit \(next) is missing" : "commits \(next) to \(number - 1) are missing"
                found.hide("log/" + LogName.hex16(next), missing + ": what they changed is lost", through: number - 1)
            }
            next = number + 1
            do {
                guard let bytes = try System.readRegularFile(paths.log(number), maximumSize: Format.maximumFileSize) else {
                    found.hide(file, "the log vanished while it was read", through: number)
                    continue
                }
                _ = scan(bytes, name: file, expected: number, into: &found)
            } catch let error as SystemError where error.isUnusableFile {
                found.hide(file, "the log is not a regular file (\(error))", through: number)
            } catch let error as SystemError {
                throw KeysmithError(.ioFailure, "cannot read the vault's \(file): \(error)")
            }
        }
        if found.filesRead > 0, found.foreignFiles == found.filesRead {
            throw KeysmithError(
                .corruptData,
                "every file of the vault belongs to another vault than the header that opened it (a header from another vault?); "
                    + "restore the header from a backup; nothing was changed")
        }

        // What is kept: the newest version of each record that authenticates, when it is a put.
        var keep: [(record: SecureRecord, version: UInt64)] = []
        var stale: [ItemKey] = []
        var keptPerFile: [String: Int] = [:]
        for (id, best) in found.best {
            guard let record = best.record else { continue }
            keep.append((record, best.version))
            keptPerFile[best.file, default: 0] += 1
            // A newer version fails, or a commit after this version holds damage that cannot
            // be tied to records (it may have changed this one).
            if (found.failed[id] ?? 0) > best.version || found.hides && best.version < found.hiddenThrough {
                stale.append(record.key)
            }
        }
        // No version authenticates, or the newest that does is a deletion older than one that fails.
        let unreadable = found.failed.compactMap { id, version -> String? in
            guard let best = found.best[id] else { return id.description }
            return best.record == nil && version > best.version ? id.description : nil
        }.sorted()
        let losses = found.damage.keys.sorted().map { file -> VaultRepairReport.Loss in
            let (reasons, lossy) = found.damage[file]!
            let reason = reasons[0] + (reasons.count > 1 ? " (and \(reasons.count - 1) more damaged part(s) in the file)" : "")
            return VaultRepairReport.Loss(file: file, sequence: file.hasPrefix("log/") ? LogName.sequence(String(file.dropFirst(4))) : nil,
                                          reason: reason, salvaged: keptPerFile[file] ?? 0, complete: !lossy)
        }
        let report = VaultRepairReport(
            needed: !losses.isEmpty || !unreadable.isEmpty || !headerCopies.isEmpty, dryRun: true, itemsKept: keep.count,
            losses: losses, itemsMaybeStale: stale.sorted { $0.description < $1.description }, unreadableRecords: unreadable,
            absentItemsMayBeLost: found.hides || !unreadable.isEmpty, headerCopies: headerCopies, movedAside: nil,
            sequence: max(found.highest, next - 1) + 1)
        return Plan(keep: keep, report: report)
    }

    /// The header copies that are missing, damaged or another vault's (`name: reason`).
    private func headerCopyProblems() -> [String] {
        [HeaderFormat.primaryName, HeaderFormat.backupName].compactMap { name in
            let bytes: [UInt8]?
            do {
                bytes = try System.readRegularFile(paths.root + "/" + name, maximumSize: Format.maximumHeaderSize)
            } catch {
                return "\(name): the header copy is not a regular file (\(error))"
            }
            guard let bytes else { return "\(name): the header copy is missing" }
            guard let parsed = try? VaultHeader1.parse(bytes) else { return "\(name): the header copy is damaged (checksum or syntax)" }
            return parsed.vaultIDBytes == vaultID ? nil : "\(name): the header copy belongs to another vault"
        }
    }

    /// What a file's header says of the commit it reaches.
    private enum Through {
        /// Its header, intact and this vault's, names it.
        case trusted(UInt64)
        /// Its header is damaged: its highest frame version, which may be below the truth.
        case estimated(UInt64)
        /// Another vault's file, or out of range: nothing of it counts.
        case lost
    }

    /// Tries every frame of one file (`expected`: a log's number; `nil` for the snapshot). A file
    /// of another vault is damage as a whole: its frames are not tried (they could not
    /// authenticate, and their ids are not this vault's).
    private func scan(_ bytes: [UInt8], name: String, expected: UInt64?, into found: inout Findings) -> (through: Through, highest: UInt64) {
        let limit = Format.maximumSequence
        found.filesRead += 1
        let header = FrameFile.parseHeader(bytes, kind: expected == nil ? .snapshot : .log)
        let parsed = FrameFile.parseFrames(bytes)
        let highestFrame = parsed.frames.map(\.frame.version).filter { $0 < limit }.max() ?? 0
        let through: Through
        if let header {
            guard header.vaultID == vaultID else {
                found.foreignFiles += 1
                found.hide(name, "the file belongs to another vault (vault id \(header.vaultID.hexString)); none of its records was read",
                           through: expected ?? .max)
                return (.lost, 0)
            }
            if expected == nil, header.sequence >= limit {
                found.hide(name, "the snapshot's header claims commit \(header.sequence), beyond any a vault reaches", through: .max)
                return (.lost, 0)
            }
            through = .trusted(expected ?? header.sequence)
            if let expected, header.sequence != expected {
                found.lose(name, "the file says it is log \(header.sequence): it was renamed or copied", lossy: false)
            }
        } else {
            // Without its header the file's record count is unknown: records may be missing
            // without a trace.
            let short = bytes.count < Format1.fileHeaderSize
            found.hide(name, short ? "the file is cut short inside its header" : "the file header is damaged",
                       through: expected ?? highestFrame)
            if bytes.count < Format1.fileHeaderSize + Format1.frameHeaderSize { return (expected == nil ? .lost : .trusted(expected!), 0) }
            through = expected.map(Through.trusted) ?? .estimated(highestFrame)
        }
        let sequence: UInt64
        switch through {
        case .trusted(let value), .estimated(let value): sequence = value
        case .lost: sequence = 0
        }
        let counted = parsed.frames.count + parsed.damage.filter { $0.recordID != nil && !$0.inTrailer }.count
        if let header, counted < header.count {
            found.hide(name, "the file holds \(counted) of its \(header.count) records: it was truncated", through: sequence)
        } else if header == nil, parsed.damage.contains(where: \.endsFile) {
            found.hide(name, "the file is cut short and its header, which counts its records, is damaged", through: sequence)
        }
        for damage in parsed.damage {
            if let id = damage.recordID {
                if damage.inTrailer {
                    found.lose(name, damage.reason, lossy: false)  // the record itself verified
                } else {
                    found.lose(name, damage.reason)
                    found.fail(id, min(damage.version ?? sequence, limit))
                }
            } else {
                found.hide(name, damage.reason + ", and which record it held cannot be told", through: sequence)
            }
        }
        for (frame, _) in parsed.frames {
            if let expected, frame.version != expected {
                found.lose(name, "a record says it was written by commit \(frame.version) but sits in \(name): it was moved")
                found.fail(frame.recordID, min(frame.version, limit))
                continue
            }
            if expected == nil, frame.version > sequence || frame.version >= limit {
                found.lose(name, "a record is newer than the snapshot that holds it: it was moved")
                found.fail(frame.recordID, min(frame.version, limit))
                continue
            }
            switch frame.open(key: unlocked.dataKeys[frame.epoch], vaultID: vaultID, idKey: unlocked.idKey, withSecret: true) {
            case .failure(let failure):
                found.lose(name, failure.reason)
                found.fail(frame.recordID, frame.version)
            case .success(let record):
                if frame.version > found.best[frame.recordID]?.version ?? 0 {
                    found.best[frame.recordID] = (frame.version, record, name)
                }
            }
        }
        return (through, expected ?? highestFrame)
    }

    // MARK: Carrying out

    /// Carries out a plan under the vault's lock: the format 1 files are kept in
    /// `damaged-<time>/` first (hard links, or copies where the file system has none; a file
    /// that is not a regular one is moved there after the switch, a header copy before it), a
    /// format 2 vault of every kept record is written beside them, the new header's rename is
    /// the switch, and the format 1 files leave the vault. Killed before the switch it leaves
    /// the format 1 files as they were; after it, the format 2 vault complete.
    func carryOut(_ plan: Plan, credential: VaultCredential, scrypt: ScryptParameters, at now: Date) throws -> VaultRepairReport {
        let root = paths.root
        let aside = try Durable.makeAsideDirectory(in: root, at: now)
        let asidePath = root + "/" + aside
        var kept: [String] = []  // linked or copied: unlinked after the switch
        var moveLater: [String] = []  // not regular files: moved aside after the switch
        var names = [HeaderFormat.primaryName, HeaderFormat.backupName, "snapshot"]
        let logIsDirectory = System.isRealDirectory(paths.logDirectory)
        if logIsDirectory {
            try io { _ = try System.mkdir(asidePath + "/log") }
            names += try io { try System.listDirectory(paths.logDirectory) }.map { "log/" + $0 }
        } else if System.entryExists(paths.logDirectory) {
            moveLater.append("log")
        }
        try io {
            for name in names {
                switch try keepAside(root + "/" + name, at: asidePath + "/" + name, directory: asidePath + (name.hasPrefix("log/") ? "/log" : "")) {
                case .kept: kept.append(name)
                case .notRegular: moveLater.append(name)
                case .absent: break
                }
            }
            if logIsDirectory { try System.fsyncDirectory(asidePath + "/log") }
            try System.fsyncDirectory(asidePath)
            // A header copy that is not a regular file is no header: out of the way of the
            // switch now (the intact copy that opened the vault stays).
            for name in moveLater where name == HeaderFormat.primaryName || name == HeaderFormat.backupName {
                try System.rename(root + "/" + name, asidePath + "/" + name)
            }
            try System.fsyncDirectory(root)
        }
        try FaultInjection.step()
        try VaultCreation.replaceFormat1(
            root: root, credential: credential, scrypt: scrypt, created: now, idKey: unlocked.idKey,
            through: plan.report.sequence, records: plan.keep, aside: { aside })
        try io {
            for name in moveLater where name != HeaderFormat.primaryName && name != HeaderFormat.backupName {
                try System.rename(root + "/" + name, asidePath + "/" + name)
            }
            for name in kept where name != HeaderFormat.primaryName && name != HeaderFormat.backupName {
                try System.unlink(root + "/" + name)
            }
            if logIsDirectory { try System.removeTree(paths.logDirectory) }
            try System.fsyncDirectory(root)
        }
        try FaultInjection.step()
        var report = plan.report
        report = VaultRepairReport(
            needed: true, dryRun: false, itemsKept: report.itemsKept, losses: report.losses, itemsMaybeStale: report.itemsMaybeStale,
            unreadableRecords: report.unreadableRecords, absentItemsMayBeLost: report.absentItemsMayBeLost,
            headerCopies: report.headerCopies, movedAside: aside, sequence: report.sequence)
        return report
    }

    private enum Kept { case kept, notRegular, absent }

    /// Keeps the file at `path` at `destination`: a hard link, or a copy of its bytes (synced)
    /// where the file system has no hard links. Never follows a link.
    private func keepAside(_ path: String, at destination: String, directory: String) throws -> Kept {
        let opened: (fd: Descriptor, status: System.FileStatus)?
        do {
            opened = try System.openRegularFile(path, maximumSize: Format.maximumFileSize)
        } catch let error as SystemError where error.isUnusableFile {
            return .notRegular
        }
        guard let (fd, _) = opened else { return .absent }
        defer { System.close(fd) }
        if (try? System.link(path, destination)) != nil { return .kept }
        let bytes = try System.readAll(fd, path: path)
        try Durable.write(bytes, to: destination, directory: directory)
        return .kept
    }
}
