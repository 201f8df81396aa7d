import Keysmith
import KeysmithCrypto
import KeysmithSystem

/// Constants and byte layouts of vault format version 2 (docs/format.md, "Format version 2").
/// Every number read from disk is checked against the bounds here before it is used.
enum Format {
    static let version = 2
    static let dataDirectory = "data"

    static let logMagic = Array("KSMVLOG2".utf8)
    static let snapshotMagic = Array("KSMVSNP2".utf8)

    /// magic 8 ‖ vault id 16 ‖ sequence 8 ‖ epoch 4 ‖ frame count 4 ‖ previous commit MAC 32.
    static let logHeaderSize = 72
    /// record id 32 ‖ op 1 ‖ ciphertext length 4 ‖ nonce 12 ‖ tag 16.
    static let tableEntrySize = 65
    static let macSize = 32
    /// magic 8 ‖ vault id 16 ‖ through-sequence 8 ‖ epoch 4 ‖ record count 8 ‖ page count 4 ‖
    /// entries per page 4 ‖ through-MAC 32.
    static let snapshotHeaderSize = 84
    /// first record id 32 ‖ page MAC 32.
    static let directoryEntrySize = 64
    /// record id 32 ‖ version 8 ‖ epoch 4 ‖ offset 8 ‖ length 4 ‖ nonce 12 ‖ tag 16.
    static let indexEntrySize = 84
    /// Records per index page: a damaged page costs at most this many records.
    static let entriesPerPage = 64
    static let maximumEntriesPerPage = 4096
    /// The most index pages a snapshot may have: its directory, read at open, is at most 64 MiB
    /// however large the file claims to be (a sparse file can claim anything).
    static let maximumPages = 1 << 20

    /// The largest sealed record: 64 MiB (the store's limits keep records well under it).
    static let maximumCiphertext = 64 << 20
    /// The most frames one commit may hold.
    static let maximumFramesPerCommit = 1 << 20
    /// The most records a snapshot may hold.
    static let maximumRecords: UInt64 = 1 << 32
    /// Sequences and versions are below 2⁶²; epochs below 2²⁰.
    static let maximumSequence: UInt64 = 1 << 62
    static let maximumEpoch: UInt32 = 1 << 20
    /// The header is at most 64 KiB and holds at most 16 data keys.
    static let maximumHeaderSize = 64 << 10
    static let maximumDataKeys = 16
    /// A log file: its table and bodies (2⁶⁰ bytes is a bound on arithmetic, not a goal).
    static let maximumFileSize = 1 << 60

    /// Logs since the snapshot before a write compacts: the bound on what an open replays.
    static let compactAfterLogs = 32
    /// Frames in the logs since the snapshot before a write compacts: what an open reads of
    /// the logs is bounded by this, whatever the vault's size.
    static let compactAfterFrames = 4096

    static let recordADLabel = Array("keysmith-vault-v2 record".utf8)
    static let commitLabel = Array("keysmith-vault-v2 commit".utf8)
    static let snapshotLabel = Array("keysmith-vault-v2 snapshot".utf8)
    static let pageLabel = Array("keysmith-vault-v2 page".utf8)
    static let recordKeyLabel = Array("keysmith-vault-v2 record-key".utf8)
    static let chainKeyLabel = Array("keysmith-vault-v2 chain-key".utf8)
    static let headerMACLabel = Array("keysmith-vault-v2 header-mac".utf8)
    static let keyWrapLabel = Array("keysmith-vault-v2 key-wrap".utf8)
    static let keyfileKEKLabel = Array("keysmith-vault-v2 keyfile-kek".utf8)

    /// The chain value before the first commit.
    static let genesisMAC = [UInt8](repeating: 0, count: 32)

    /// scrypt bounds for format 2, checked before any work: N a power of two from 2¹⁴ to 2²⁰,
    /// r = 8, p from 1 to 4 (at most 1 GiB of memory and 4 passes); salts are 32 bytes.
    static let scryptMinimumN: UInt64 = 1 << 14
    static let scryptMaximumN: UInt64 = 1 << 20
    static let scryptR: UInt64 = 8
    static let scryptMaximumP: UInt64 = 4
    static let saltSize = 32
}

/// The two keys of one epoch, derived from its data key.
struct EpochKeys: Sendable {
    let epoch: UInt32
    /// AES-256-GCM key of the records sealed under this epoch.
    let record: SecretBytes
    /// HMAC-SHA-256 key of the commits, snapshots and pages written under this epoch.
    let chain: SecretBytes

    init(epoch: UInt32, dataKey: SecretBytes) {
        self.epoch = epoch
        record = SecretBytes(copying: SHA256.hmac(key: dataKey, Format.recordKeyLabel))
        chain = SecretBytes(copying: SHA256.hmac(key: dataKey, Format.chainKeyLabel))
    }
}

/// Where one sealed record sits: its table or index entry, resolved to a file and an offset.
struct SealedRef: Sendable {
    var recordID: RecordID
    var op: FrameOp
    var version: UInt64
    var epoch: UInt32
    /// The descriptor of the file that holds the body (the engine keeps it open).
    var fd: Descriptor
    var file: String
    var offset: Int
    var length: Int
    var nonce: InlineBytes
    var tag: InlineBytes

    static func associatedData(vaultID: [UInt8], epoch: UInt32, version: UInt64, op: FrameOp, recordID: RecordID) -> [UInt8] {
        var writer = ByteWriter(capacity: 96)
        writer.append(Format.recordADLabel)
        writer.append(vaultID)
        writer.append(epoch)
        writer.append(version)
        writer.append(op.rawValue)
        writer.append(recordID.bytes)
        return writer.bytes
    }
}

/// A commit log file of format 2: header, table, commit MAC, then the bodies.
enum LogFile {
    struct Head {
        var vaultID: [UInt8]
        var sequence: UInt64
        var epoch: UInt32
        var count: Int
        var previousMAC: [UInt8]
    }

    struct TableEntry {
        var recordID: RecordID
        var op: FrameOp
        var length: Int
        var nonce: InlineBytes
        var tag: InlineBytes
    }

    /// HMAC(chain key, label ‖ header ‖ table), without joining the parts (a bulk commit's
    /// table is megabytes).
    static func commitMAC(chainKey: SecretBytes, headerAndTable: [UInt8]) -> [UInt8] {
        guard let key = try? HMACSHA256Key(chainKey) else { return SHA256.hmac(key: chainKey, Format.commitLabel + headerAndTable) }
        return key.mac(Format.commitLabel, headerAndTable)
    }

    static func encodeHead(_ head: Head) -> [UInt8] {
        var writer = ByteWriter(capacity: Format.logHeaderSize)
        writer.append(Format.logMagic)
        writer.append(head.vaultID)
        writer.append(head.sequence)
        writer.append(head.epoch)
        writer.append(UInt32(head.count))
        writer.append(head.previousMAC)
        return writer.bytes
    }

    /// A commit's file up to its bodies (header, table, commit MAC), and the commit MAC; the
    /// bodies follow in table order.
    static func encodeFront(head: Head, entries: [TableEntry], chainKey: SecretBytes) -> (bytes: [UInt8], mac: [UInt8]) {
        var writer = ByteWriter(capacity: Format.logHeaderSize + entries.count * Format.tableEntrySize + 32)
        writer.append(encodeHead(head))
        for entry in entries {
            writer.append(entry.recordID.bytes)
            writer.append(entry.op.rawValue)
            writer.append(UInt32(entry.length))
            writer.append(entry.nonce)
            writer.append(entry.tag)
        }
        let mac = commitMAC(chainKey: chainKey, headerAndTable: writer.bytes)
        writer.append(mac)
        return (writer.bytes, mac)
    }

    enum HeadProblem: Error { case tooShort, badMagic, outOfBounds(String) }

    /// Parses and bounds the fixed header of a log of `fileSize` bytes.
    static func parseHead(_ bytes: [UInt8], fileSize: Int) throws(HeadProblem) -> Head {
        var reader = ByteReader(bytes)
        guard let magic = reader.readBytes(8), let vaultID = reader.readBytes(16), let sequence = reader.readUInt64(),
              let epoch = reader.readUInt32(), let count = reader.readUInt32(), let previous = reader.readBytes(32)
        else { throw .tooShort }
        guard magic == Format.logMagic else { throw .badMagic }
        guard sequence >= 1, sequence < Format.maximumSequence else { throw .outOfBounds("its sequence \(sequence) is out of range") }
        guard epoch >= 1, epoch < Format.maximumEpoch else { throw .outOfBounds("its key epoch \(epoch) is out of range") }
        guard count >= 1, Int(count) <= Format.maximumFramesPerCommit else {
            throw .outOfBounds("its frame count \(count) is out of range")
        }
        let fixed = Format.logHeaderSize + Int(count) * Format.tableEntrySize + Format.macSize
        guard fixed <= fileSize else { throw .outOfBounds("it claims \(count) frames but is only \(fileSize) bytes long") }
        return Head(vaultID: vaultID, sequence: sequence, epoch: epoch, count: Int(count), previousMAC: previous)
    }

    /// Parses the table (already authenticated by the caller) and checks that the bodies it
    /// describes fill the rest of the file exactly.
    static func parseTable(_ bytes: [UInt8], count: Int, bodiesStart: Int, fileSize: Int) -> (entries: [TableEntry], problem: String?) {
        var reader = ByteReader(bytes)
        var entries: [TableEntry] = []
        entries.reserveCapacity(count)
        var total = 0
        for _ in 0..<count {
            guard let id = reader.readRecordID(), let opByte = reader.readUInt8(),
                  let length = reader.readUInt32(), let nonce = reader.readInline(12), let tag = reader.readInline(16)
            else { return (entries, "its table is cut short") }
            guard let op = FrameOp(rawValue: opByte) else { return (entries, "its table names an unknown operation \(opByte)") }
            guard Int(length) <= Format.maximumCiphertext, op == .put || length == 0 else {
                return (entries, "its table gives a record a length of \(length) bytes")
            }
            total += Int(length)
            entries.append(TableEntry(recordID: id, op: op, length: Int(length), nonce: nonce, tag: tag))
        }
        guard bodiesStart + total == fileSize else {
            return (entries, "its records should end at byte \(bodiesStart + total) but the file is \(fileSize) bytes long")
        }
        return (entries, nil)
    }
}

/// The snapshot of format 2: every live record, sorted by record id, with a paged index.
enum SnapshotFile {
    struct Head {
        var vaultID: [UInt8]
        var through: UInt64
        var epoch: UInt32
        var recordCount: Int
        var pageCount: Int
        var entriesPerPage: Int
        var throughMAC: [UInt8]

        /// The head of a snapshot Keysmith writes: `Format.entriesPerPage` records per page.
        init(vaultID: [UInt8], through: UInt64, epoch: UInt32, recordCount: Int, throughMAC: [UInt8]) {
            let perPage = Format.entriesPerPage
            self.init(vaultID: vaultID, through: through, epoch: epoch, recordCount: recordCount,
                      pageCount: (recordCount + perPage - 1) / perPage, entriesPerPage: perPage, throughMAC: throughMAC)
        }

        init(vaultID: [UInt8], through: UInt64, epoch: UInt32, recordCount: Int, pageCount: Int, entriesPerPage: Int, throughMAC: [UInt8]) {
            self.vaultID = vaultID
            self.through = through
            self.epoch = epoch
            self.recordCount = recordCount
            self.pageCount = pageCount
            self.entriesPerPage = entriesPerPage
            self.throughMAC = throughMAC
        }

        var directoryStart: Int { Format.snapshotHeaderSize }
        var macStart: Int { directoryStart + pageCount * Format.directoryEntrySize }
        var pagesStart: Int { macStart + Format.macSize }
        var bodiesStart: Int { pagesStart + recordCount * Format.indexEntrySize }

        func entryCount(ofPage page: Int) -> Int {
            page == pageCount - 1 ? recordCount - page * entriesPerPage : entriesPerPage
        }
    }

    struct IndexEntry {
        var recordID: RecordID
        var version: UInt64
        var epoch: UInt32
        var offset: Int
        var length: Int
        var nonce: InlineBytes
        var tag: InlineBytes
    }

    static func encodeHead(_ head: Head) -> [UInt8] {
        var writer = ByteWriter(capacity: Format.snapshotHeaderSize)
        writer.append(Format.snapshotMagic)
        writer.append(head.vaultID)
        writer.append(head.through)
        writer.append(head.epoch)
        writer.append(UInt64(head.recordCount))
        writer.append(UInt32(head.pageCount))
        writer.append(UInt32(head.entriesPerPage))
        writer.append(head.throughMAC)
        return writer.bytes
    }

    static func encode(_ entry: IndexEntry, into writer: inout ByteWriter) {
        writer.append(entry.recordID.bytes)
        writer.append(entry.version)
        writer.append(entry.epoch)
        writer.append(UInt64(entry.offset))
        writer.append(UInt32(entry.length))
        writer.append(entry.nonce)
        writer.append(entry.tag)
    }

    static func pageMAC(chainKey: SecretBytes, vaultID: [UInt8], through: UInt64, page: Int, bytes: [UInt8]) -> [UInt8] {
        var writer = ByteWriter(capacity: 64 + bytes.count)
        writer.append(Format.pageLabel)
        writer.append(vaultID)
        writer.append(through)
        writer.append(UInt32(page))
        writer.append(bytes)
        return SHA256.hmac(key: chainKey, writer.bytes)
    }

    /// Builds a snapshot's index an entry at a time, in record-id order: each page is handed
    /// back (with where it goes) as it fills, so only the directory is kept; ``finish()``
    /// gives the last page and the front (header, directory, snapshot MAC, written at offset 0).
    struct IndexWriter {
        let head: Head
        let chainKey: SecretBytes
        private var page = ByteWriter(capacity: 0)
        private var pageNumber = 0
        private var entries = 0
        private var directory: ByteWriter

        init(head: Head, chainKey: SecretBytes) {
            self.head = head
            self.chainKey = chainKey
            directory = ByteWriter(capacity: head.pageCount * Format.directoryEntrySize)
            page = ByteWriter(capacity: head.entriesPerPage * Format.indexEntrySize)
        }

        /// Adds the next entry; returns a page when this entry filled it.
        mutating func add(_ entry: IndexEntry) -> (offset: Int, bytes: [UInt8])? {
            precondition(entries < head.recordCount, "more entries than the head counts")
            encode(entry, into: &page)
            entries += 1
            return page.bytes.count == head.entriesPerPage * Format.indexEntrySize ? closePage() : nil
        }

        /// The last page (if it is not full) and the front.
        mutating func finish() -> (lastPage: (offset: Int, bytes: [UInt8])?, front: [UInt8]) {
            precondition(entries == head.recordCount, "fewer entries than the head counts")
            let last = page.bytes.isEmpty ? nil : closePage()
            let headBytes = encodeHead(head)
            let mac = snapshotMAC(chainKey: chainKey, head: headBytes, directory: directory.bytes)
            return (last, headBytes + directory.bytes + mac)
        }

        private mutating func closePage() -> (offset: Int, bytes: [UInt8]) {
            let bytes = page.bytes
            directory.append(bytes[0..<32])
            directory.append(pageMAC(chainKey: chainKey, vaultID: head.vaultID, through: head.through, page: pageNumber, bytes: bytes))
            let offset = head.pagesStart + pageNumber * head.entriesPerPage * Format.indexEntrySize
            pageNumber += 1
            page.bytes.removeAll(keepingCapacity: true)
            return (offset, bytes)
        }
    }

    /// Everything of a snapshot before its ciphertexts, for `entries` sorted by record id:
    /// the front (header, directory with each page's MAC, snapshot MAC; written at offset 0)
    /// and the index pages (written at `head.pagesStart`).
    static func encodeIndex(_ entries: [IndexEntry], head: Head, chainKey: SecretBytes) -> (front: [UInt8], pages: [UInt8]) {
        var writer = IndexWriter(head: head, chainKey: chainKey)
        var pages: [UInt8] = []
        for entry in entries {
            if let page = writer.add(entry) { pages += page.bytes }
        }
        let (last, front) = writer.finish()
        if let last { pages += last.bytes }
        return (front, pages)
    }

    static func snapshotMAC(chainKey: SecretBytes, head: [UInt8], directory: [UInt8]) -> [UInt8] {
        SHA256.hmac(key: chainKey, Format.snapshotLabel + head + directory)
    }

    enum HeadProblem: Error { case tooShort, badMagic, outOfBounds(String) }

    static func parseHead(_ bytes: [UInt8], fileSize: Int) throws(HeadProblem) -> Head {
        var reader = ByteReader(bytes)
        guard let magic = reader.readBytes(8), let vaultID = reader.readBytes(16), let through = reader.readUInt64(),
              let epoch = reader.readUInt32(), let count = reader.readUInt64(), let pages = reader.readUInt32(),
              let perPage = reader.readUInt32(), let throughMAC = reader.readBytes(32)
        else { throw .tooShort }
        guard magic == Format.snapshotMagic else { throw .badMagic }
        guard through < Format.maximumSequence else { throw .outOfBounds("its through-sequence \(through) is out of range") }
        guard epoch >= 1, epoch < Format.maximumEpoch else { throw .outOfBounds("its key epoch \(epoch) is out of range") }
        guard count <= Format.maximumRecords else { throw .outOfBounds("its record count \(count) is out of range") }
        guard perPage >= 1, Int(perPage) <= Format.maximumEntriesPerPage else {
            throw .outOfBounds("it claims \(perPage) records per index page")
        }
        let recordCount = Int(count), perPageInt = Int(perPage)
        guard Int(pages) == (recordCount + perPageInt - 1) / perPageInt else {
            throw .outOfBounds("its page count \(pages) does not fit its \(count) records")
        }
        guard Int(pages) <= Format.maximumPages else { throw .outOfBounds("it claims \(pages) index pages") }
        let head = Head(vaultID: vaultID, through: through, epoch: epoch, recordCount: recordCount, pageCount: Int(pages),
                        entriesPerPage: perPageInt, throughMAC: throughMAC)
        // Every region must fit inside the file before anything is allocated for it.
        guard recordCount <= fileSize / Format.indexEntrySize, head.bodiesStart <= fileSize else {
            throw .outOfBounds("it claims \(count) records but is only \(fileSize) bytes long")
        }
        return head
    }

    /// Parses one authenticated page and checks its order and that each body lies in the
    /// bodies region. `after` is the last record id of the page before (strict order).
    static func parsePage(_ bytes: [UInt8], count: Int, head: Head, fileSize: Int, first: RecordID) -> (entries: [IndexEntry], problem: String?) {
        var reader = ByteReader(bytes)
        var entries: [IndexEntry] = []
        entries.reserveCapacity(count)
        for index in 0..<count {
            guard let id = reader.readRecordID(), let version = reader.readUInt64(),
                  let epoch = reader.readUInt32(), let offset = reader.readUInt64(), let length = reader.readUInt32(),
                  let nonce = reader.readInline(12), let tag = reader.readInline(16)
            else { return (entries, "the page is cut short") }
            guard version >= 1, version <= head.through, epoch >= 1, epoch < Format.maximumEpoch else {
                return (entries, "an entry's version or epoch is out of range")
            }
            guard offset >= UInt64(head.bodiesStart), offset <= UInt64(fileSize), Int(length) <= Format.maximumCiphertext,
                  Int(offset) + Int(length) <= fileSize
            else { return (entries, "an entry points outside the file's records") }
            if index == 0 {
                guard id == first else { return (entries, "the page does not start where the directory says") }
            } else if let previous = entries.last, !(previous.recordID < id) {
                return (entries, "the page is not in record-id order")
            }
            entries.append(IndexEntry(recordID: id, version: version, epoch: epoch, offset: Int(offset), length: Int(length),
                                      nonce: nonce, tag: tag))
        }
        return (entries, nil)
    }
}

/// The history beside a snapshot (docs/format.md, "The history"): the MACs of the newest
/// commits it folded in, so that the anchor can tell this vault's own history from a fork
/// after a compaction removed the logs that would have shown it.
///
/// `data/history-<S as 16 hex digits>`: magic "KSMVHIS2" 8 ‖ vault id 16 ‖ through-sequence S 8 ‖
/// epoch 4 ‖ first sequence F 8 ‖ count c 4 ‖ c commit MACs (commits F … F+c−1 = S) ‖
/// HMAC(chain key of the epoch, "keysmith-vault-v2 history" ‖ everything before).
enum HistoryFile {
    static let magic = Array("KSMVHIS2".utf8)
    static let label = Array("keysmith-vault-v2 history".utf8)
    static let headerSize = 48
    /// How many commits a history keeps: an anchor older than that many commits before the
    /// snapshot cannot be checked (and is refused until the rollback is accepted).
    static let window = 1024

    static func name(through: UInt64) -> String { "history-" + LogName.hex16(through) }

    struct Contents: Equatable {
        var through: UInt64
        var epoch: UInt32
        var first: UInt64
        var macs: [[UInt8]]

        /// The MAC of commit `sequence`, when the history holds it.
        func mac(of sequence: UInt64) -> [UInt8]? {
            guard sequence >= first, sequence <= through else { return nil }
            return macs[Int(sequence - first)]
        }
    }

    static func encode(_ contents: Contents, vaultID: [UInt8], chainKey: SecretBytes) -> [UInt8] {
        var writer = ByteWriter(capacity: headerSize + contents.macs.count * 32 + 32)
        writer.append(magic)
        writer.append(vaultID)
        writer.append(contents.through)
        writer.append(contents.epoch)
        writer.append(contents.first)
        writer.append(UInt32(contents.macs.count))
        for mac in contents.macs { writer.append(mac) }
        let mac = SHA256.hmac(key: chainKey, label + writer.bytes)
        writer.append(mac)
        return writer.bytes
    }

    /// Parses and authenticates a history; `nil` when it is not one this vault wrote through `through`.
    static func parse(_ bytes: [UInt8], vaultID: [UInt8], through expected: UInt64, keys: (UInt32) -> EpochKeys?) -> Contents? {
        var reader = ByteReader(bytes)
        guard let magic = reader.readBytes(8), magic == Self.magic, let id = reader.readBytes(16), id == vaultID,
              let through = reader.readUInt64(), through == expected, let epoch = reader.readUInt32(), let first = reader.readUInt64(),
              let count = reader.readUInt32(), count >= 1, Int(count) <= window, first >= 1,
              first <= through, through - first == UInt64(count) - 1, bytes.count == headerSize + Int(count) * 32 + 32,
              let keys = keys(epoch)
        else { return nil }
        let body = Array(bytes[0..<(bytes.count - 32)])
        guard constantTimeEqual(SHA256.hmac(key: keys.chain, label + body), Array(bytes.suffix(32))) else { return nil }
        var macs: [[UInt8]] = []
        for _ in 0..<count {
            guard let mac = reader.readBytes(32) else { return nil }
            macs.append(mac)
        }
        return Contents(through: through, epoch: epoch, first: first, macs: macs)
    }
}
