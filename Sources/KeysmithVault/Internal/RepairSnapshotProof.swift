import Keysmith
import KeysmithCrypto
import KeysmithSystem

/// The snapshot as `vault repair` reads it: its header and directory, and the question the
/// repair asks of them: **can the snapshot MAC be proven** (docs/format.md, "Repair")?
///
/// The snapshot MAC binds the header (vault id, through-sequence, key epoch, layout and the
/// through-MAC, which chains the snapshot to the commits after it) and the directory (each
/// index page's first record id and page MAC). Only a proven snapshot's index entries are kept,
/// and only from pages whose page MAC holds: an entry of an unproven snapshot could point at any
/// record this vault's key ever sealed (a fork's, or a version older than a delete).
///
/// The MAC is proven when it holds over the header as it stands, or once the fields whose values
/// can be known are put back: magic, vault id, key epoch (one the header holds), the layout
/// (Keysmith writes 64 entries per page; a record count or page count is found again from the
/// other), the through-sequence and through-MAC (from a history that authenticates and that the
/// next log links to), or the directory rebuilt from the pages themselves (each page's first
/// record id and page MAC, recomputed).
///
/// ```swift
/// let front = try RepairSnapshotFront.read(fd, size: size, path: path)
/// if let proof = try front?.prove(vaultID: vaultID, epochs: epochs, throughs: [(stored, [storedMAC])]) { … }
/// ```
struct RepairSnapshotFront {
    let fd: Descriptor
    let size: Int
    let path: String
    /// The header as it stands (``Format/snapshotHeaderSize`` bytes).
    let header: [UInt8]

    /// A proven snapshot: the header as it must be and the directory (without its MAC).
    struct Proof {
        enum Source: Equatable {
            case asItStands
            case knownFields
            case rebuiltDirectory
        }
        let head: SnapshotFile.Head
        let directory: [UInt8]
        let source: Source
    }

    static func read(_ fd: Descriptor, size: Int, path: String) throws -> RepairSnapshotFront? {
        let header = try io { try System.read(fd, count: Format.snapshotHeaderSize, at: 0, path: path) }
        guard header.count == Format.snapshotHeaderSize else { return nil }
        return RepairSnapshotFront(fd: fd, size: size, path: path, header: header)
    }

    var storedThrough: UInt64 { ByteReader.uint64(header, at: 24) }
    var storedEpoch: UInt32 { ByteReader.uint32(header, at: 32) }
    var storedCount: UInt64 { ByteReader.uint64(header, at: 36) }
    var storedPages: UInt64 { UInt64(ByteReader.uint32(header, at: 44)) }
    var storedPerPage: UInt64 { UInt64(ByteReader.uint32(header, at: 48)) }
    var storedThroughMAC: [UInt8] { Array(header[52..<84]) }

    /// Record count, page count and entries per page worth trying: the stored ones when they
    /// fit together and in the file, then Keysmith's 64 per page with the stored page count
    /// (every record count it allows) or the stored record count.
    func layouts() -> [(count: Int, pages: Int, perPage: Int)] {
        var result: [(count: Int, pages: Int, perPage: Int)] = []
        func add(_ count: UInt64, _ pages: UInt64, _ perPage: UInt64) {
            guard perPage >= 1, perPage <= UInt64(Format.maximumEntriesPerPage), pages <= UInt64(Format.maximumPages),
                  count <= Format.maximumRecords, count <= UInt64(size / Format.indexEntrySize),
                  pages == (count + perPage - 1) / perPage
            else { return }
            let candidate = (count: Int(count), pages: Int(pages), perPage: Int(perPage))
            let head = SnapshotFile.Head(vaultID: [], through: 0, epoch: 1, recordCount: candidate.count, pageCount: candidate.pages,
                                         entriesPerPage: candidate.perPage, throughMAC: [])
            guard head.bodiesStart <= size, !result.contains(where: { $0 == candidate }) else { return }
            result.append(candidate)
        }
        add(storedCount, storedPages, storedPerPage)
        let perPage = UInt64(Format.entriesPerPage)
        if storedPages <= UInt64(Format.maximumPages) {
            if storedPages == 0 { add(0, 0, perPage) }
            if storedPages >= 1 {
                for count in ((storedPages - 1) * perPage + 1)...(storedPages * perPage) { add(count, storedPages, perPage) }
            }
        }
        if storedCount <= Format.maximumRecords { add(storedCount, (storedCount + perPage - 1) / perPage, perPage) }
        return result
    }

    /// The proven snapshot, or `nil` when nothing proves its MAC.
    ///
    /// - Parameters:
    ///   - throughs: Through-sequences worth trying, each with the through-MACs worth trying
    ///     (the stored ones first; then those a history and the next log's link prove).
    func prove(vaultID: [UInt8], epochs: [UInt32: EpochKeys], throughs: [(through: UInt64, macs: [[UInt8]])]) throws -> Proof? {
        var epochCandidates = [storedEpoch].filter { epochs[$0] != nil }
        epochCandidates += epochs.keys.sorted().filter { $0 != storedEpoch }
        let layouts = layouts()
        guard let storedLayout = layouts.first else { return nil }
        var directories: [Int: [UInt8]] = [:]
        var budget = Self.searchBudget
        /// Spends `bytes` of the budget; false once it is gone.
        func spend(_ bytes: Int) -> Bool {
            budget -= bytes
            return budget >= 0
        }
        func storedDirectory(_ pages: Int) throws -> [UInt8]? {
            if let known = directories[pages] { return known }
            let bytes = try io { try System.read(fd, count: pages * Format.directoryEntrySize + Format.macSize, at: Format.snapshotHeaderSize, path: path) }
            guard bytes.count == pages * Format.directoryEntrySize + Format.macSize else { return nil }
            directories[pages] = bytes
            return bytes
        }
        func attempt(_ layout: (count: Int, pages: Int, perPage: Int), rebuild: Bool) throws -> Proof? {
            guard spend(layout.pages * Format.directoryEntrySize), let stored = try storedDirectory(layout.pages) else { return nil }
            let storedMAC = Array(stored.suffix(Format.macSize))
            for (through, macs) in throughs where through < Format.maximumSequence {
                for epoch in epochCandidates {
                    guard let keys = epochs[epoch] else { continue }
                    var directory = Array(stored.prefix(layout.pages * Format.directoryEntrySize))
                    if rebuild {
                        guard spend(layout.count * Format.indexEntrySize) else { return nil }
                        let head = SnapshotFile.Head(vaultID: vaultID, through: through, epoch: epoch, recordCount: layout.count,
                                                     pageCount: layout.pages, entriesPerPage: layout.perPage, throughMAC: [])
                        guard let rebuilt = try rebuiltDirectory(head, keys: keys) else { continue }
                        directory = rebuilt
                    }
                    for mac in macs {
                        guard spend(directory.count) else { return nil }
                        let head = SnapshotFile.Head(vaultID: vaultID, through: through, epoch: epoch, recordCount: layout.count,
                                                     pageCount: layout.pages, entriesPerPage: layout.perPage, throughMAC: mac)
                        let front = SnapshotFile.encodeHead(head)
                        guard constantTimeEqual(SnapshotFile.snapshotMAC(chainKey: keys.chain, head: front, directory: directory), storedMAC)
                        else { continue }
                        let source: Proof.Source = rebuild ? .rebuiltDirectory : front == header ? .asItStands : .knownFields
                        return Proof(head: head, directory: directory, source: source)
                    }
                }
            }
            return nil
        }
        if let proof = try attempt(storedLayout, rebuild: false) { return proof }
        for layout in layouts.dropFirst() {
            if let proof = try attempt(layout, rebuild: false) { return proof }
        }
        return try attempt(storedLayout, rebuild: true)
    }

    /// How many bytes the search may authenticate or read before it gives up (the snapshot is then
    /// unproven): a hostile header (a million pages over a sparse file) costs a bounded amount.
    static let searchBudget = 512 << 20

    /// The directory a snapshot with `head` would have over the pages in the file.
    private func rebuiltDirectory(_ head: SnapshotFile.Head, keys: EpochKeys) throws -> [UInt8]? {
        var directory: [UInt8] = []
        directory.reserveCapacity(head.pageCount * Format.directoryEntrySize)
        for page in 0..<head.pageCount {
            guard let bytes = try pageBytes(head, page) else { return nil }
            directory += bytes.prefix(32)
            directory += SnapshotFile.pageMAC(chainKey: keys.chain, vaultID: head.vaultID, through: head.through, page: page, bytes: bytes)
        }
        return directory
    }

    /// The bytes of index page `page`, or `nil` when the file ends inside it.
    func pageBytes(_ head: SnapshotFile.Head, _ page: Int) throws -> [UInt8]? {
        let count = head.entryCount(ofPage: page)
        let start = head.pagesStart + page * head.entriesPerPage * Format.indexEntrySize
        let bytes = try io { try System.read(fd, count: count * Format.indexEntrySize, at: start, path: path) }
        return bytes.count == count * Format.indexEntrySize ? bytes : nil
    }

    /// The header fields whose stored value differs from the proven header's, by name.
    func fieldsDiffering(from head: SnapshotFile.Head) -> [String] {
        differingFields(header, SnapshotFile.encodeHead(head), [
            ("magic", 0..<8), ("vault id", 8..<24), ("through-sequence", 24..<32), ("key epoch", 32..<36), ("record count", 36..<44),
            ("page count", 44..<48), ("entries per page", 48..<52), ("through-MAC", 52..<84),
        ])
    }
}
