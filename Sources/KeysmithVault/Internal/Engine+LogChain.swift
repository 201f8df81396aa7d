import Dispatch
import Keysmith
import KeysmithCrypto
import KeysmithSystem
import Synchronization

// The log chain: each log since the snapshot loaded, checked against the commit before it, and
// its records laid over the snapshot; the anchor that says whether the chain was rolled back or
// forked, and the history a new snapshot keeps.
extension Engine {
    /// Loads log `sequence` if it exists; `false` when there is no such file.
    @discardableResult
    func loadLog(_ sequence: UInt64) throws -> Bool {
        let path = paths.log(sequence)
        let name = paths.logName(sequence)
        let opened: (fd: Descriptor, status: System.FileStatus)?
        do {
            opened = try System.openRegularFile(path, maximumSize: Format.maximumFileSize)
        } catch let error as SystemError where error.isUnusableFile {
            lastSequence = max(lastSequence, sequence)
            logDamaged(sequence, name, "the log cannot be used (\(error)); it must be a regular file")
            return true
        } catch let error as SystemError where error.isNotDirectory && logDirectoryMissing {
            return false  // no log directory (a file in its place): already damage, no log here
        } catch let error as SystemError {
            // Not this one file's fault (permissions, the log directory gone or not a
            // directory): an error, never a loop over the next numbers.
            throw KeysmithError(.ioFailure, "cannot read the vault's log \(name): \(error)" + (error.advice.map { "; \($0)" } ?? ""))
        }
        guard let (fd, status) = opened else { return false }
        var keep = false
        defer { if !keep { System.close(fd) } }
        lastSequence = max(lastSequence, sequence)
        logsSinceSnapshot += 1

        let log: CommitLog
        switch try CommitLog.read(fd, size: status.size, path: path, name: name, sequence: sequence, vaultID: vaultID, keys: { try keys(for: $0) }) {
        case .damaged(let reason):
            logDamaged(sequence, name, reason)
            return true
        case .intact(let intact):
            log = intact
        }
        if let previous = lastMAC, !constantTimeEqual(log.previousMAC, previous) {
            let damage = VaultDamage(
                file: name, offset: 40, recordID: nil, key: nil,
                reason: "the commit does not follow the one before it: a log or the snapshot was replaced, or comes from another history",
                hidesRecords: true)
            fileDamage.append(damage)
            markUncertain(before: sequence, damage)
        }
        framesSinceSnapshot += log.refs.count
        for ref in log.refs {
            if let old = recordDamage.removeValue(forKey: ref.recordID) {
                fileDamage.append(old.damage.superseded())
            }
            overlay[ref.recordID] = ref
        }
        logFDs[sequence] = fd
        logMACs[sequence] = log.mac
        keep = true
        lastMAC = log.mac
        return true
    }

    private func logDamaged(_ sequence: UInt64, _ name: String, _ reason: String) {
        let damage = VaultDamage(file: name, offset: 0, recordID: nil, key: nil, reason: reason + "; which records it changed cannot be told",
                                 hidesRecords: true)
        fileDamage.append(damage)
        markUncertain(before: sequence + 1, damage)
        lastMAC = nil
    }

    func checkAnchor() throws {
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
                file: SnapshotIndex.name, offset: 0, recordID: nil, key: nil,
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
            if mark.sequence > lastSequence, try io({ try System.status(paths.snapshot) }) != snapshot.status {
                anchorAhead = true
                return
            }
        }
        var known: [UInt8]?
        // Commit 0 is the vault's creation, which every history of this vault passes through
        // (a snapshot's history starts at commit 1): an anchor that saw only the creation (its
        // first advance skipped while another process held the anchors' lock) is verified by it.
        if mark.sequence == 0 { known = Format.genesisMAC }
        if let mac = logMACs[mark.sequence] { known = mac }
        if let head = snapshot.head, head.through == mark.sequence { known = head.throughMAC }
        var unverifiable = false
        if known == nil, let head = snapshot.head, mark.sequence < head.through {
            // The anchor's commit was folded into the snapshot: its history says whether the
            // vault passed through it (a fork compacted past the anchor does not).
            if let mac = snapshotHistory()?.mac(of: mark.sequence) { known = mac } else { unverifiable = true }
        }
        if unverifiable {
            rollback = VaultDamage(
                file: SnapshotIndex.name, offset: 0, recordID: nil, key: nil,
                reason: "this machine last saw commit \(mark.sequence), which the vault has folded into its snapshot through commit "
                    + "\(snapshot.head?.through ?? 0) without a history reaching back that far, so whether the vault's history passes "
                    + "through it cannot be told (an older copy that was written to and compacted would look the same); if the vault "
                    + "is as it should be, accept it with `keysmith vault verify --accept-rollback`",
                hidesRecords: true)
        } else if mark.sequence > lastSequence {
            rollback = VaultDamage(
                file: SnapshotIndex.name, offset: 0, recordID: nil, key: nil,
                reason: "the vault was rolled back: this machine saw commit \(mark.sequence), the vault now ends at commit \(lastSequence) "
                    + "(its newest commits were removed or an older copy was put back); if you restored it on purpose, accept the rollback "
                    + "with `keysmith vault verify --accept-rollback`", hidesRecords: true)
        } else if let known, !constantTimeEqual(known, mark.mac) {
            rollback = VaultDamage(
                file: SnapshotIndex.name, offset: 0, recordID: nil, key: nil,
                reason: "the vault's history forked: commit \(mark.sequence) is not the one this machine saw (an older copy was put back "
                    + "and written to); if you restored it on purpose, accept it with `keysmith vault verify --accept-rollback`",
                hidesRecords: true)
        } else {
            updateAnchor(over: mark)
        }
    }

    /// The history beside the snapshot in force, when there is one, it authenticates and it is
    /// that snapshot's: it ends with the snapshot's through-MAC (a history copied from another
    /// snapshot through the same commit, a fork's, is not).
    func snapshotHistory() -> HistoryFile.Contents? {
        guard let head = snapshot.head else { return nil }
        return verifiedHistory(through: head.through, throughMAC: head.throughMAC)
    }

    /// The history `history-<through>` when it authenticates and, when `throughMAC` is given,
    /// ends with it.
    func verifiedHistory(through: UInt64, throughMAC: [UInt8]?) -> HistoryFile.Contents? {
        guard let bytes = (try? System.readRegularFile(paths.data + "/" + HistoryFile.name(through: through),
                                                       maximumSize: HistoryFile.headerSize + HistoryFile.window * 32 + 32)) ?? nil,
              let contents = HistoryFile.parse(bytes, vaultID: vaultID, through: through, keys: { epoch in (try? self.keys(for: epoch)) ?? nil }),
              let last = contents.macs.last
        else { return nil }
        if let throughMAC, !constantTimeEqual(last, throughMAC) { return nil }
        return contents
    }

    /// The MACs a new snapshot through `through` (whose MAC is `throughMAC`) records: the old
    /// snapshot's history and through-MAC, then every commit since, the newest
    /// ``HistoryFile/window`` of them; a commit whose MAC is not known starts the list again after it.
    func history(through: UInt64, throughMAC: [UInt8], epoch: UInt32) -> HistoryFile.Contents {
        var first: UInt64 = 1
        var macs: [[UInt8]] = []
        var next: UInt64 = 1
        if let head = snapshot.head, head.through > 0 {
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
        if macs.count > HistoryFile.window {
            first += UInt64(macs.count - HistoryFile.window)
            macs.removeFirst(macs.count - HistoryFile.window)
        }
        return HistoryFile.Contents(through: through, epoch: epoch, first: first, macs: macs)
    }

    private func updateAnchor(over mark: AnchorStore.Mark? = nil) {
        // A mark read from the legacy name is written under this place's name at once. A
        // damaged vault is never vouched for: a mark over a gap or a damaged log would name a
        // commit that a repair cannot link, and refuse it.
        guard !isDamaged, let anchor, let mac = lastMAC, lastSequence > (mark?.sequence ?? 0) || mark == nil || mark?.legacy == true else { return }
        anchor.write(vaultID, AnchorStore.Mark(sequence: lastSequence, mac: mac))
    }

    /// Forgets this machine's anchor and takes the vault as it is now.
    func acceptRollback() throws {
        try anchor?.remove(vaultID)
        rollback = nil
        updateAnchor()
    }
}
