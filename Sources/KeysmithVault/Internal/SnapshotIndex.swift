import Keysmith
import KeysmithCrypto
import KeysmithSystem

/// The snapshot index of an open format-2 vault (docs/format.md, "The snapshot"): the snapshot's
/// header and directory, loaded and authenticated once, and a record found through the directory
/// and one authenticated index page. It knows one file; the engine owns it beside the log chain
/// and decides what its damage means for the rest of the vault.
///
/// ```swift
/// let loaded = try SnapshotIndex.load(path: paths.snapshot, vaultID: vaultID) { try keys(for: $0) }
/// if let damage = loaded.damage { fileDamage.append(damage) }
/// snapshot = loaded.index
/// let ref = try snapshot.lookup(recordID, key: key, chainKey: snapshotChainKey)
/// ```
///
/// A value: the engine keeps one in a `var`, replaces it on every reload and closes its
/// descriptor through ``close()`` (the index never closes it by itself).
struct SnapshotIndex {
    /// The snapshot's name in the vault, as damage and sealed references report it.
    static let name = Format.dataDirectory + "/snapshot"
    /// Verified index pages kept, as their raw bytes (searched in place).
    static let cachedPages = 1024

    /// The snapshot file's path, for the errors its reads report.
    private(set) var path = ""
    /// The snapshot file, open whenever it could be opened (also when it did not verify).
    private(set) var descriptor: Descriptor?
    /// The file's status when it was opened: a different status on disk means another process
    /// compacted, and the engine reloads.
    private(set) var status: System.FileStatus?
    /// The snapshot's header, only when its header and directory authenticated. `nil` means the
    /// snapshot does not count: only logs chained from the genesis do.
    private(set) var head: SnapshotFile.Head?
    /// Each index page's first record id and MAC, authenticated with the header.
    private(set) var directory: [(first: RecordID, mac: [UInt8])] = []
    /// Index pages found damaged so far, by page number (each hides up to a page of records).
    private(set) var damagedPages: [Int: VaultDamage] = [:]
    /// Whether the snapshot names another vault: the header and the records do not belong together.
    private(set) var isForeign = false
    private var pageCache: [Int: [UInt8]] = [:]

    /// No snapshot: what an engine holds before its first load.
    init() {}

    /// Opens the snapshot at `path` and authenticates its header and directory. Never throws
    /// for damage, which comes back as `damage` with an index that does not count (`head` is
    /// `nil`); throws `storeLocked` when `keys` does (another process re-keyed the vault under
    /// a new credential), and closes what it opened first.
    ///
    /// - Parameters:
    ///   - path: The snapshot file.
    ///   - vaultID: The vault the snapshot must belong to.
    ///   - keys: The keys of a key epoch, `nil` when the header does not hold it.
    static func load(path: String, vaultID: [UInt8], keys: (UInt32) throws -> EpochKeys?) throws
        -> (index: SnapshotIndex, damage: VaultDamage?)
    {
        var index = SnapshotIndex()
        index.path = path
        do {
            guard let (fd, status) = try System.openRegularFile(path, maximumSize: Format.maximumFileSize) else {
                return (index, damage("the snapshot is missing"))
            }
            index.descriptor = fd
            index.status = status
        } catch {
            return (index, damage("the snapshot cannot be opened (\(error)); it must be a regular file"))
        }
        do {
            let problem = try index.authenticate(vaultID: vaultID, keys: keys)
            return (index, problem.map(damage))
        } catch let error as KeysmithError where error.code == .storeLocked {
            index.close()
            throw error
        } catch {
            return (index, damage("the snapshot cannot be read: \(error)"))
        }
    }

    /// Reads the header and directory through the open descriptor; the reason the snapshot does
    /// not count, or `nil` when it does (and `head` and `directory` are set).
    private mutating func authenticate(vaultID: [UInt8], keys: (UInt32) throws -> EpochKeys?) throws -> String? {
        let fd = try openDescriptor()
        let size = status?.size ?? 0
        let headBytes = try System.read(fd, count: Format.snapshotHeaderSize, at: 0, path: path)
        let head: SnapshotFile.Head
        do {
            head = try SnapshotFile.parseHead(headBytes, fileSize: size)
        } catch .tooShort {
            return "the snapshot is cut short inside its header"
        } catch .badMagic {
            return "the snapshot's header is damaged (wrong magic)"
        } catch .outOfBounds(let why) {
            return "the snapshot's header is damaged: \(why)"
        }
        let directorySize = head.pageCount * Format.directoryEntrySize
        guard head.vaultID == vaultID else {
            // This vault's own snapshot with its vault id damaged still authenticates with the
            // right id put back: damage to repair, not a header of another vault.
            var patched = headBytes
            patched.replaceSubrange(8..<24, with: vaultID)
            if let keys = try keys(head.epoch),
               let directoryBytes = try? System.read(fd, count: directorySize + Format.macSize, at: head.directoryStart, path: path),
               directoryBytes.count == directorySize + Format.macSize,
               constantTimeEqual(SnapshotFile.snapshotMAC(chainKey: keys.chain, head: patched, directory: Array(directoryBytes.prefix(directorySize))),
                                 Array(directoryBytes.suffix(Format.macSize)))
            {
                return "the snapshot's vault id is damaged (it reads \(head.vaultID.hexString)); its records cannot be "
                    + "vouched for as they stand (`keysmith vault repair` keeps every one that authenticates)"
            }
            isForeign = true
            return "the snapshot belongs to another vault (vault id \(head.vaultID.hexString))"
        }
        guard let keys = try keys(head.epoch) else {
            return "the snapshot is authenticated under key epoch \(head.epoch), which the header does not hold"
        }
        let directoryBytes = try System.read(fd, count: directorySize + Format.macSize, at: head.directoryStart, path: path)
        guard directoryBytes.count == directorySize + Format.macSize else {
            return "the snapshot is cut short inside its directory"
        }
        let directoryPart = Array(directoryBytes[0..<directorySize])
        let mac = Array(directoryBytes[directorySize...])
        guard constantTimeEqual(SnapshotFile.snapshotMAC(chainKey: keys.chain, head: headBytes, directory: directoryPart), mac) else {
            return "the snapshot's header or directory fails authentication: it is damaged or was altered"
        }
        var entries: [(first: RecordID, mac: [UInt8])] = []
        entries.reserveCapacity(head.pageCount)
        for page in 0..<head.pageCount {
            let start = page * Format.directoryEntrySize
            entries.append((RecordID(Array(directoryPart[start..<(start + 32)]))!, Array(directoryPart[(start + 32)..<(start + 64)])))
        }
        for page in entries.indices.dropFirst() where !(entries[page - 1].first < entries[page].first) {
            return "the snapshot's directory is not in record-id order"
        }
        directory = entries
        self.head = head
        return nil
    }

    private static func damage(_ reason: String) -> VaultDamage {
        VaultDamage(file: name, offset: 0, recordID: nil, key: nil, reason: reason, hidesRecords: true)
    }

    /// Closes the snapshot's descriptor; the index then finds nothing.
    mutating func close() {
        if let descriptor { System.close(descriptor) }
        self = SnapshotIndex()
    }

    /// The snapshot's descriptor, for a record found through it (open whenever `head` is set).
    func openDescriptor() throws -> Descriptor {
        guard let descriptor else { throw KeysmithError(.ioFailure, "the vault's snapshot is not open") }
        return descriptor
    }

    /// The page that would hold `recordID`: the last whose first id is not after it; `nil` when
    /// the id comes before every page.
    func pageIndex(holding recordID: RecordID) -> Int? {
        var low = 0, high = directory.count
        while low < high {
            let middle = (low + high) / 2
            if recordID < directory[middle].first { high = middle } else { low = middle + 1 }
        }
        return low > 0 ? low - 1 : nil
    }

    /// Where the snapshot holds `recordID`, found through one authenticated page (cached); `nil`
    /// when it holds no such record.
    ///
    /// - Parameters:
    ///   - key: The item's key, named in the error when the page is damaged.
    ///   - chainKey: The chain key of the snapshot's epoch, `nil` when the header no longer holds it.
    /// - Throws: `corruptData` when the page that would hold it is damaged.
    mutating func lookup(_ recordID: RecordID, key: ItemKey?, chainKey: SecretBytes?) throws -> SealedRef? {
        guard let head, let pageNumber = pageIndex(holding: recordID) else { return nil }
        guard let raw = try verifiedPage(pageNumber, head: head, chainKey: chainKey, cache: true) else {
            throw KeysmithError(
                .corruptData,
                "\(key.map { "\($0)" } ?? "record \(recordID)") is in a damaged part of the snapshot's index "
                    + "(\(damagedPages[pageNumber].map { "\($0)" } ?? "index page \(pageNumber)")); "
                    + "run `keysmith vault repair` (it keeps every record that authenticates and names what may be lost), or restore the vault from a backup")
        }
        // Binary search over the page's raw entries: no entry is built but the one found.
        let size = Format.indexEntrySize
        let sought = recordID.bytes
        func order(_ entry: Int) -> Int {
            let base = entry * size
            for index in 0..<32 where raw[base + index] != sought[index] {
                return raw[base + index] < sought[index] ? -1 : 1
            }
            return 0
        }
        var found: Int?
        var low = 0, high = raw.count / size
        while low < high {
            let middle = (low + high) / 2
            let comparison = order(middle)
            if comparison == 0 {
                found = middle
                break
            }
            if comparison < 0 { low = middle + 1 } else { high = middle }
        }
        guard let found else { return nil }
        var reader = ByteReader(raw, offset: found * size + 32)
        guard let version = reader.readUInt64(), let epoch = reader.readUInt32(), let offset = reader.readUInt64(),
              let length = reader.readUInt32(), let nonce = reader.readInline(12), let tag = reader.readInline(16)
        else { return nil }
        return SealedRef(recordID: recordID, op: .put, version: version, epoch: epoch, fd: try openDescriptor(),
                         file: Self.name, offset: Int(offset), length: Int(length), nonce: nonce, tag: tag)
    }

    /// One index page's entries, verified; `nil` when it is damaged (and recorded in
    /// `damagedPages`). A scan passes `cache: false`, so that it does not evict the pages
    /// lookups keep.
    mutating func page(_ index: Int, chainKey: SecretBytes?, cache: Bool) throws -> [SnapshotFile.IndexEntry]? {
        guard let head, let raw = try verifiedPage(index, head: head, chainKey: chainKey, cache: cache) else { return nil }
        return SnapshotFile.parsePage(raw, count: head.entryCount(ofPage: index), head: head, fileSize: status?.size ?? 0,
                                       first: directory[index].first).entries
    }

    /// A sealed reference to the record an index entry names.
    func ref(_ entry: SnapshotFile.IndexEntry) throws -> SealedRef {
        SealedRef(recordID: entry.recordID, op: .put, version: entry.version, epoch: entry.epoch, fd: try openDescriptor(),
                  file: Self.name, offset: entry.offset, length: entry.length, nonce: entry.nonce, tag: entry.tag)
    }

    /// One index page's bytes, after its MAC and every check of its entries held once; `nil`
    /// when it is damaged (and recorded).
    private mutating func verifiedPage(_ index: Int, head: SnapshotFile.Head, chainKey: SecretBytes?, cache: Bool) throws -> [UInt8]? {
        if let cached = pageCache[index] { return cached }
        if damagedPages[index] != nil { return nil }
        let count = head.entryCount(ofPage: index)
        let offset = head.pagesStart + index * head.entriesPerPage * Format.indexEntrySize
        let fd = try openDescriptor()
        let bytes = try io { try System.read(fd, count: count * Format.indexEntrySize, at: offset, path: path) }
        var problem: String?
        if chainKey == nil {
            problem = "the snapshot's key epoch \(head.epoch) is no longer held"
        } else if bytes.count != count * Format.indexEntrySize {
            problem = "the snapshot is cut short inside index page \(index)"
        } else if let chainKey, !constantTimeEqual(
            SnapshotFile.pageMAC(chainKey: chainKey, vaultID: head.vaultID, through: head.through, page: index, bytes: bytes), directory[index].mac)
        {
            problem = "index page \(index) fails authentication: it is damaged or was altered"
        }
        if problem == nil {
            let parsed = SnapshotFile.parsePage(bytes, count: count, head: head, fileSize: status?.size ?? 0, first: directory[index].first)
            problem = parsed.problem.map { "index page \(index) authenticated but \($0)" }
            if problem == nil, index + 1 < directory.count, let last = parsed.entries.last, !(last.recordID < directory[index + 1].first) {
                problem = "index page \(index) overlaps the next one"
            }
        }
        if let problem {
            damagedPages[index] = VaultDamage(file: Self.name, offset: offset, recordID: nil, key: nil,
                                              reason: problem + "; the up to \(head.entriesPerPage) records it indexes cannot be read",
                                              hidesRecords: true)
            return nil
        }
        if cache {
            if pageCache.count >= Self.cachedPages { pageCache.removeAll(keepingCapacity: true) }
            pageCache[index] = bytes
        }
        return bytes
    }
}
