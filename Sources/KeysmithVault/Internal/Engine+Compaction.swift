import Dispatch
import Keysmith
import KeysmithCredentials
import KeysmithCrypto
import KeysmithSystem
import Synchronization

// The compactor and key changes: the snapshot written again with every live record (and the
// logs it covers removed), a credential changed, the records re-sealed under a new key.
extension Engine {
    var isDamaged: Bool {
        rollback != nil || uncertainBefore != nil || !recordDamage.isEmpty || !snapshot.damagedPages.isEmpty
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
        guard !isDamaged, let head = snapshot.head else { return false }
        _ = head
        return logsSinceSnapshot >= Format.compactAfterLogs || framesSinceSnapshot >= Format.compactAfterFrames
    }

    /// Writes every live record into a new snapshot and removes the logs it covers. Records
    /// are copied sealed as they are; with `reseal` they are re-encrypted under the current epoch.
    func compact(reseal: Bool = false) throws {
        try compact(reseal: reseal, newer: [], through: nil)
    }

    /// Compaction, with the records of a commit not indexed in memory (`newer`, sorted by
    /// record id, in its log) and that commit's sequence and MAC (`through`).
    func compact(reseal: Bool, newer: [SealedRef], through: (sequence: UInt64, mac: [UInt8])?) throws {
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
        let head = SnapshotFile.Head(vaultID: vaultID, through: through?.sequence ?? lastSequence, epoch: keys.epoch,
                                      recordCount: count, throughMAC: throughMAC)
        let temporary = paths.data + "/" + Durable.temporaryPrefix + "snapshot-\(System.processID)"
        defer { try? System.unlink(temporary) }
        // The old snapshot's records come in file order (both are sorted by record id).
        try writeSnapshotFile(temporary, head: head, keys: keys, reseal: reseal, sequentialFD: snapshot.descriptor) { copy in
            try forEachLive(strict: true, newer: newer, copy)
        }
        // Its history first (named by its through-sequence, so a crash leaves the old pair in force).
        let history = history(through: head.through, throughMAC: throughMAC, epoch: keys.epoch)
        if !history.macs.isEmpty {
            try Durable.write(HistoryFile.encode(history, vaultID: vaultID, chainKey: keys.chain),
                              to: paths.data + "/" + HistoryFile.name(through: head.through), directory: paths.data)
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
    func writeSnapshotFile(_ temporary: String, head: SnapshotFile.Head, keys: EpochKeys, reseal: Bool, sequentialFD: Descriptor?,
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
        var index = SnapshotFile.IndexWriter(head: head, chainKey: keys.chain)
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
            var entry = SnapshotFile.IndexEntry(recordID: ref.recordID, version: ref.version, epoch: ref.epoch, offset: offset,
                                                 length: ref.length, nonce: ref.nonce, tag: ref.tag)
            if reseal && ref.epoch != keys.epoch {
                guard let old = try self.keys(for: ref.epoch) else {
                    throw KeysmithError(.corruptData, "record \(ref.recordID) is sealed under a key this vault no longer holds")
                }
                var plaintext = try keysmithCrypto {
                    try AESGCM.open(ciphertext: body, tag: ref.tag.array, key: old.record, nonce: ref.nonce.array, associatedData: SealedRef.associatedData(
                        vaultID: vaultID, epoch: ref.epoch, version: ref.version, op: .put, recordID: ref.recordID))
                }
                defer { cleanse(&plaintext) }
                let sealed = try keysmithCrypto {
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
            } else if let number = LogName.sequence(name), number <= sequence {
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
            where name.hasPrefix("history-") && name != HistoryFile.name(through: sequence)
        {
            try io { try System.unlink(paths.data + "/" + name) }
        }
        try io { try System.fsyncDirectory(paths.logDirectory) }
    }

    /// Changes the credential: one new header, written primary first (the primary's rename is
    /// the switch). The caller holds the flock and called ``prepareWrite()``.
    func changeCredential(to credential: VaultCredential, scrypt: ScryptParameters) throws {
        try requireCurrentHeader()
        let kdf = try VaultCreation.newKDF(for: credential, scrypt: scrypt)
        let kek = try HeaderFormat.deriveKEK(kdf, credential: credential)
        var header = unlocked.copy.header
        header.kdf = kdf
        header.idKey = try VaultHeader.wrap(unlocked.idKey, kek: kek, vaultID: vaultID, kdf: kdf, purpose: KeyPurpose.id, epoch: 0)
        header.dataKeys = try header.dataKeys.map { wrapped in
            guard let key = unlocked.dataKeys[wrapped.epoch] else {
                throw KeysmithError(.corruptData, "the vault's data key of epoch \(wrapped.epoch) could not be unwrapped")
            }
            return try VaultHeader.wrap(key, kek: kek, vaultID: vaultID, kdf: kdf, purpose: KeyPurpose.data, epoch: wrapped.epoch)
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
        guard newEpoch < Format.maximumEpoch else { throw KeysmithError(.limitExceeded, "the vault has run out of key epochs") }
        let newKey = try keysmithCrypto { try SecretBytes.random(count: 32) }
        header.dataKeys.append(try VaultHeader.wrap(newKey, kek: unlocked.kek, vaultID: vaultID, kdf: header.kdf,
                                                     purpose: KeyPurpose.data, epoch: newEpoch))
        header.currentEpoch = newEpoch
        try writeHeader(header, kek: unlocked.kek)
        try compact(reseal: true)
        header = unlocked.copy.header
        header.dataKeys.removeAll { $0.epoch != newEpoch }
        try writeHeader(header, kek: unlocked.kek)
    }
}
