import FoundationEssentials
import Keysmith
import KeysmithCredentials
import KeysmithCrypto
import KeysmithSystem

/// What a repair of a format 1 vault keeps, and what it reports.
struct Format1SalvagePlan {
    /// Every record that authenticates, with the commit that last wrote it.
    var keep: [(record: SecureRecord, version: UInt64)]
    var report: VaultRepairReport
}

extension Format1Backend {
    /// Plans the repair of a format 1 vault: every intact record is opened (a record that does
    /// not authenticate is unreadable); the damaged parts are grouped by file as losses; a kept
    /// record older than a commit whose damage cannot be tied to records may be stale. Reads
    /// only: the caller verified the vault first (so every file was read).
    func planSalvage() -> Format1SalvagePlan {
        let uncertain = engine.uncertainBefore
        var keep: [(record: SecureRecord, version: UInt64)] = []
        var stale: [ItemKey] = []
        var unreadable = Set(engine.damagedByID.keys.map(\.description))
        var keptPerFile: [String: Int] = [:]
        for entry in engine.entries.values {
            guard let record = try? engine.open(entry) else {
                unreadable.insert(entry.frame.recordID.description)
                continue
            }
            keep.append((record, entry.frame.version))
            keptPerFile[entry.file, default: 0] += 1
            if let uncertain, entry.frame.version < uncertain.sequence { stale.append(entry.info.key) }
        }
        let damage = engine.damage.filter { !$0.isSuperseded && !$0.isHeaderCopy }
        var byFile: [String: [VaultDamage]] = [:]
        for part in damage { byFile[part.file, default: []].append(part) }
        let losses = byFile.keys.sorted().map { file -> VaultRepairReport.Loss in
            let parts = byFile[file]!.sorted { $0.offset < $1.offset }
            let reason = parts[0].reason + (parts.count > 1 ? " (and \(parts.count - 1) more damaged part(s) in the file)" : "")
            return VaultRepairReport.Loss(file: file, sequence: Self.logSequence(file), reason: reason, salvaged: keptPerFile[file] ?? 0)
        }
        let headerCopies = engine.fileDamage.filter(\.isHeaderCopy).map { "\($0.file): \($0.reason)" }
        let highestDamaged = losses.compactMap(\.sequence).max() ?? 0
        let report = VaultRepairReport(
            needed: !losses.isEmpty || !unreadable.isEmpty || !headerCopies.isEmpty,
            dryRun: true, itemsKept: keep.count, losses: losses,
            itemsMaybeStale: stale.sorted { $0.description < $1.description }, unreadableRecords: unreadable.sorted(),
            absentItemsMayBeLost: uncertain != nil || damage.contains(where: \.hidesRecords) || !unreadable.isEmpty,
            headerCopies: headerCopies, movedAside: nil, sequence: max(engine.lastSequence, highestDamaged) + 1)
        return Format1SalvagePlan(keep: keep, report: report)
    }

    /// The commit a format 1 log's name gives (`log/0000000000000003`); `nil` for the snapshot.
    private static func logSequence(_ file: String) -> UInt64? {
        guard file.hasPrefix("log/") else { return nil }
        return LogName.sequence(String(file.dropFirst(4)))
    }

    /// Carries out a plan: the format 1 files are linked into `damaged-<time>/` first (so a
    /// crash at any step leaves them there, and before the switch leaves the format 1 vault as
    /// it was), a format 2 vault of every kept record is written beside them, the new header's
    /// rename is the switch, and the format 1 files leave the vault (moved aside when they could
    /// not be linked). The caller holds the flock.
    func carryOut(_ plan: Format1SalvagePlan, path: String, credential: VaultCredential, scrypt: ScryptParameters,
                  at now: Date) throws -> VaultRepairReport
    {
        let aside = try Durable.makeAsideDirectory(in: path, at: now)
        let asidePath = path + "/" + aside
        var linked: [String] = []
        var unlinked: [(from: String, to: String)] = []
        try io {
            func keep(_ name: String) throws {
                let from = path + "/" + name, to = asidePath + "/" + name
                guard try System.status(from) != nil else { return }
                if (try? System.link(from, to)) != nil { linked.append(from) } else { unlinked.append((from, to)) }
            }
            for name in [HeaderFormat.primaryName, HeaderFormat.backupName, "snapshot"] { try keep(name) }
            if System.isRealDirectory(path + "/log") {
                _ = try System.mkdir(asidePath + "/log")
                for name in try System.listDirectory(path + "/log") { try keep("log/" + name) }
                try System.fsyncDirectory(asidePath + "/log")
            } else if try System.status(path + "/log") != nil {
                unlinked.append((path + "/log", asidePath + "/log"))
            }
            try System.fsyncDirectory(asidePath)
        }
        // A header copy that cannot be linked (not a regular file) leaves now: the other copy
        // still opens the format 1 vault, and the switch below could not rename over it.
        let headers = [path + "/" + HeaderFormat.primaryName, path + "/" + HeaderFormat.backupName]
        try io {
            for (from, to) in unlinked where headers.contains(from) { try System.rename(from, to) }
            try System.fsyncDirectory(path)
        }
        try FaultInjection.step()
        let paths = Paths(root: path)
        try io { try System.removeTree(paths.data) }
        let created = try VaultCreation.create(
            paths: paths, credential: credential, scrypt: scrypt, created: now, idKey: engine.idKey,
            through: plan.report.sequence, records: plan.keep, writeHeader: false)
        // The switch: the primary header's rename. The backup follows.
        try Durable.write(created.header, to: paths.header, directory: path)
        try FaultInjection.step()
        try Durable.write(created.header, to: paths.headerBackup, directory: path)
        try io {
            for (from, to) in unlinked where from != paths.header && from != paths.headerBackup {
                try System.rename(from, to)
            }
            for from in linked where from != paths.header && from != paths.headerBackup {
                try System.unlink(from)
            }
            if System.isRealDirectory(path + "/log") { try System.removeTree(path + "/log") }
            try System.fsyncDirectory(path)
        }
        return VaultRepairReport(
            needed: true, dryRun: false, itemsKept: plan.report.itemsKept, losses: plan.report.losses,
            itemsMaybeStale: plan.report.itemsMaybeStale, unreadableRecords: plan.report.unreadableRecords,
            absentItemsMayBeLost: plan.report.absentItemsMayBeLost, headerCopies: plan.report.headerCopies,
            movedAside: aside, sequence: plan.report.sequence)
    }
}
