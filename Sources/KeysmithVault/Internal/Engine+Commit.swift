import Dispatch
import Keysmith
import KeysmithCredentials
import KeysmithCrypto
import KeysmithSystem
import Synchronization

// The committer: a batch of operations sealed and written as one log, chained to the commit
// before it, and a bulk commit folded into a new snapshot at once.
extension Engine {
    /// Seals a batch's net effect into one log and commits it durably (the caller holds the
    /// flock and called ``prepareWrite()``).
    ///
    /// A bulk batch (at least ``Format/compactAfterFrames`` records) is compacted at once: its
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
        guard snapshot.head != nil || uncertainBefore == nil else {
            throw KeysmithError(
                .corruptData,
                "the vault's snapshot is missing or damaged, so a write could hide what it held; restore the vault from a backup "
                    + "(run `keysmith vault verify` for details)")
        }
        let sequence = lastSequence + 1
        guard sequence < Format.maximumSequence else {
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
        -> (mac: [UInt8], epoch: UInt32, entries: [LogFile.TableEntry], bodiesStart: Int, bulk: Bool)?
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
        guard writes.count <= Format.maximumFramesPerCommit else {
            throw KeysmithError(.limitExceeded, "a batch may change at most \(Format.maximumFramesPerCommit) items; this one changes \(writes.count)")
        }
        guard let keys = unlocked.epochs[writeEpoch] else {
            throw KeysmithError(.corruptData, "the vault's current data key is missing from its header")
        }
        let recordIDs = writes.map { recordID(for: $0.key) }
        let bulk = writes.count >= Format.compactAfterFrames && !isDamaged && snapshot.head != nil
        var order = Array(writes.indices)
        if bulk { order.sort { recordIDs[$0] < recordIDs[$1] } }
        let head = LogFile.Head(vaultID: vaultID, sequence: sequence, epoch: keys.epoch, count: writes.count,
                                 previousMAC: lastMAC ?? Format.genesisMAC)
        let bodiesStart = Format.logHeaderSize + writes.count * Format.tableEntrySize + Format.macSize
        var entries: [LogFile.TableEntry] = []
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
                    entries.append(LogFile.TableEntry(recordID: recordIDs[index], op: frame.op, length: frame.ciphertext.count,
                                                       nonce: frame.nonce, tag: frame.tag))
                    buffer += frame.ciphertext
                }
                try System.write(fd, buffer, at: offset, path: temporary)
                offset += buffer.count
            }
            let front = LogFile.encodeFront(head: head, entries: entries, chainKey: keys.chain)
            precondition(front.bytes.count == bodiesStart, "a log's front has a fixed size")
            try System.write(fd, front.bytes, at: 0, path: temporary)
            mac = front.mac
        }
        return (mac, keys.epoch, entries, bodiesStart, bulk)
    }

    /// Compacts right after a bulk commit: the new log's frames (in record-id order) are merged
    /// with the snapshot and the earlier logs into a new snapshot through `sequence`.
    /// `entries` (the log's table) is emptied once its refs are made.
    private func compactBulk(sequence: UInt64, mac: [UInt8], epoch: UInt32, entries: inout [LogFile.TableEntry], bodiesStart: Int) throws {
        let name = paths.logName(sequence)
        guard let (fd, _) = try System.openRegularFile(paths.log(sequence), maximumSize: Format.maximumFileSize) else {
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
            let sealed = try keysmithCrypto {
                try context.seal(plaintext, associatedData: SealedRef.associatedData(
                    vaultID: vaultID, epoch: keys.epoch, version: sequence, op: op, recordID: recordIDs[index]))
            }
            return SealedFrame(op: op, nonce: InlineBytes(sealed.nonce), ciphertext: sealed.ciphertext, tag: InlineBytes(sealed.tag))
        }
        // One cipher context per chunk (contexts are not shared between threads).
        return try concurrentChunks(count: order.count) { range in
            let context = try keysmithCrypto { try AESGCM.Context(key: keys.record) }
            return try range.map { try sealOne($0, context) }
        }
    }
}
