import Dispatch
import Keysmith
import KeysmithCrypto
import KeysmithSystem
import Synchronization

// The verifier: every record and file checked, damage reported (and healed where a newer
// version replaces it), and the figures `vault verify` prints.
extension Engine {
    /// Reads every file and every record again and lists everything wrong. Streams: memory
    /// follows the damage found, not the vault.
    func verify() throws -> [VaultDamage] { try verify(heal: true) }

    /// ``verify()``, finishing what a crash interrupted first only with `heal` (a dry run does not).
    func verify(heal: Bool) throws -> [VaultDamage] {
        try reloadAll()
        if heal { finishInterruptedWrites() }
        if let head = snapshot.head {
            var recordBytes = 0
            let chainKey = snapshotChainKey
            for index in 0..<head.pageCount {
                guard let entries = try snapshot.page(index, chainKey: chainKey, cache: false) else { continue }
                for entry in entries {
                    recordBytes += entry.length
                    checkRecord(try snapshot.ref(entry), superseded: overlay[entry.recordID] != nil)
                }
            }
            // The records fill the file exactly: nothing was cut off or added at the end.
            let size = snapshot.status?.size ?? 0
            if snapshot.damagedPages.isEmpty, head.bodiesStart + recordBytes != size {
                fileDamage.append(VaultDamage(
                    file: SnapshotIndex.name, offset: min(size, head.bodiesStart + recordBytes), recordID: nil, key: nil,
                    reason: "the snapshot's records should end at byte \(head.bodiesStart + recordBytes) but the file is \(size) bytes long"))
            }
        }
        // The snapshot's history (what the anchor checks a folded commit against), when present.
        if let head = snapshot.head {
            let name = Format.dataDirectory + "/" + HistoryFile.name(through: head.through)
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

    private func overlayRefs(ofLog sequence: UInt64, fd: Descriptor) -> [SealedRef] {
        let path = paths.log(sequence)
        guard let size = try? System.status(fd: fd, path: path).size,
              let headBytes = try? System.read(fd, count: Format.logHeaderSize, at: 0, path: path),
              let head = try? LogFile.parseHead(headBytes, fileSize: size),
              let table = try? System.read(fd, count: head.count * Format.tableEntrySize, at: Format.logHeaderSize, path: path)
        else { return [] }
        let bodiesStart = Format.logHeaderSize + head.count * Format.tableEntrySize + Format.macSize
        var offset = bodiesStart
        return LogFile.parseTable(table, count: head.count, bodiesStart: bodiesStart, fileSize: size).entries.map { entry in
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
        var all = fileDamage + snapshot.damagedPages.values.sorted { $0.offset < $1.offset }
        all += recordDamage.values.map(\.damage).sorted { ($0.file, $0.offset) < ($1.file, $1.offset) }
        if let rollback { all.insert(rollback, at: 0) }
        return all
    }

    /// How many items the vault holds (counted by streaming the index) and how many logs
    /// await compaction.
    func statistics() throws -> (items: Int, logFiles: Int) {
        var items = 0
        if let head = snapshot.head {
            let chainKey = snapshotChainKey
            for index in 0..<head.pageCount {
                for entry in try snapshot.page(index, chainKey: chainKey, cache: false) ?? [] where overlay[entry.recordID] == nil { items += 1 }
            }
        }
        items += overlay.values.filter { $0.op == .put }.count
        return (items, logsSinceSnapshot)
    }
}

extension VaultDamage {
    func superseded() -> VaultDamage {
        VaultDamage(file: file, offset: offset, recordID: recordID, key: key,
                    reason: reason + " (a newer version of the record replaces it)", isSuperseded: true)
    }
}
