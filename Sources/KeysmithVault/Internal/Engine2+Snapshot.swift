import Dispatch
import Keysmith
import KeysmithCrypto
import KeysmithSystem
import Synchronization

// The snapshot index: the snapshot's header and directory loaded and authenticated, and a
// record found through the directory and one authenticated index page (cached, at most 1,024).
extension Engine2 {
    private func snapshotDamage(_ reason: String) {
        let damage = VaultDamage(file: Paths2.snapshotName, offset: 0, recordID: nil, key: nil, reason: reason, hidesRecords: true)
        fileDamage.append(damage)
    }

    func loadSnapshot() throws {
        let opened: (fd: Descriptor, status: System.FileStatus)?
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

    func snapshotLookup(_ recordID: RecordID, head: SnapshotFile2.Head, key: ItemKey?) throws -> SealedRef? {
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
        return SealedRef(recordID: recordID, op: .put, version: version, epoch: epoch, fd: try openSnapshot(),
                         file: Paths2.snapshotName, offset: Int(offset), length: Int(length), nonce: nonce, tag: tag)
    }

    /// One index page's entries, verified; `nil` when it is damaged (and recorded).
    func page(_ index: Int, head: SnapshotFile2.Head, cache: Bool) throws -> [SnapshotFile2.IndexEntry]? {
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
        let bytes = try io { try System.read(try openSnapshot(), count: count * Format2.indexEntrySize, at: offset, path: paths.snapshot) }
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
}
