import Keysmith
import KeysmithCrypto
import KeysmithSystem

/// One log file as `vault repair` reads it: its front (header, table, commit MAC) taken as it
/// stands, and the question the repair asks of it: **which commit MAC can be proven for it**
/// (docs/format.md, "Repair").
///
/// A repair never accepts content that could not have been accepted without it, so a log's
/// records are kept only when the commit that holds them is proven: its HMAC, recomputed over
/// its header and table, equals a value that only the key could have produced for commit
/// `number` of this vault:
///
/// - the commit MAC stored in the file (the log is authentic as it stands, or once the fields
///   that are known beforehand are put back: magic, vault id, sequence = the file's number,
///   previous MAC = the chain, key epoch = one the header holds, frame count = the one whose
///   table fills the file), or
/// - a *witness*: the previous-MAC of the next commit when that commit authenticates by itself
///   (a damaged stored MAC is proven by the link that names it), or the rollback anchor's MAC
///   when the anchor saw this very commit.
///
/// A commit missing a record, a fork's commit with a MAC pasted in, or a log with damage in its
/// table proves nothing: its records are never kept, and what follows it cannot be linked.
///
/// ```swift
/// let front = try RepairLogFront.read(fd, size: size, path: path, number: 5)
/// if let proof = try front?.prove(vaultID: vaultID, chain: chain, witnesses: [nextPrevious], epochs: epochs) { … }
/// ```
struct RepairLogFront {
    /// The commit the file's name says it holds.
    let number: UInt64
    let fileSize: Int
    let fd: Descriptor
    let path: String
    /// The header as it stands (``Format/logHeaderSize`` bytes).
    let header: [UInt8]

    /// A proven commit: the header as it must be, the table, and the commit's MAC.
    struct Proof {
        /// How the MAC was proven.
        enum Source: Equatable {
            /// The stored MAC holds over the file as it stands.
            case asItStands
            /// The stored MAC holds once the fields known beforehand are put back.
            case knownFields
            /// The next commit, which authenticates by itself, names this MAC as its previous one.
            case nextCommit
            /// The rollback anchor saw this commit with this MAC.
            case anchor
        }
        let head: LogFile.Head
        let table: [UInt8]
        let mac: [UInt8]
        let source: Source
        /// Whether the header's previous MAC was taken from the chain (the file's was damaged).
        let previousFromChain: Bool
    }

    /// The front of the log open at `fd`; `nil` when the file is shorter than a header.
    static func read(_ fd: Descriptor, size: Int, path: String, number: UInt64) throws -> RepairLogFront? {
        let header = try io { try System.read(fd, count: Format.logHeaderSize, at: 0, path: path) }
        guard header.count == Format.logHeaderSize else { return nil }
        return RepairLogFront(number: number, fileSize: size, fd: fd, path: path, header: header)
    }

    /// The fields as they stand (their ranges unchecked).
    var storedSequence: UInt64 { ByteReader.uint64(header, at: 24) }
    var storedEpoch: UInt32 { ByteReader.uint32(header, at: 32) }
    var storedCount: Int { Int(ByteReader.uint32(header, at: 36)) }
    var storedPrevious: [UInt8] { Array(header[40..<72]) }
    var magicIntact: Bool { Array(header[0..<8]) == Format.logMagic }
    func belongs(to vaultID: [UInt8]) -> Bool { Array(header[8..<24]) == vaultID }

    /// The frame counts worth trying: the stored one when the file can hold it, then every count
    /// whose table and bodies fill the file exactly (a damaged count field is found again).
    func candidateCounts(searching: Bool) throws -> [Int] {
        var counts: [Int] = []
        let stored = storedCount
        if stored >= 1, stored <= Format.maximumFramesPerCommit,
           Format.logHeaderSize + stored * Format.tableEntrySize + Format.macSize <= fileSize
        {
            counts.append(stored)
        }
        guard searching else { return counts }
        let most = min(Format.maximumFramesPerCommit, (fileSize - Format.logHeaderSize - Format.macSize) / Format.tableEntrySize)
        guard most >= 1 else { return counts }
        let table = try io { try System.read(fd, count: most * Format.tableEntrySize, at: Format.logHeaderSize, path: path) }
        // With c frames the file is header + c entries + MAC + the c bodies: one pass over the
        // entries, each length field read where entry i would hold it.
        var bodies = 0
        var frames = 0
        while (frames + 1) * Format.tableEntrySize <= table.count {
            let at = frames * Format.tableEntrySize + 33
            let length = Int(ByteReader.uint32(table, at: at))
            bodies += length
            frames += 1
            if Format.logHeaderSize + frames * Format.tableEntrySize + Format.macSize + bodies == fileSize, frames != stored {
                counts.append(frames)
            }
            if bodies > fileSize { break }
        }
        return counts
    }

    /// The proven commit, or `nil` when no MAC can be proven for it.
    ///
    /// - Parameters:
    ///   - vaultID: The vault the log must belong to.
    ///   - chain: The MAC of the commit before, when it is known (tried as the previous MAC).
    ///   - witnesses: MACs that only the key could have produced for this commit (the next
    ///     authentic commit's previous MAC, the anchor's MAC of this commit).
    ///   - anchorWitness: Which of `witnesses` is the anchor's, to say so.
    ///   - epochs: The key epochs the header holds, with their keys.
    ///   - searchCount: Whether to search the frame count when the stored one proves nothing.
    func prove(vaultID: [UInt8], chain: [UInt8]?, witnesses: [[UInt8]], anchorWitness: [UInt8]? = nil,
               epochs: [UInt32: EpochKeys], searchCount: Bool = true) throws -> Proof?
    {
        var epochCandidates = [storedEpoch].filter { epochs[$0] != nil }
        epochCandidates += epochs.keys.sorted().filter { $0 != storedEpoch }
        var previousCandidates = [storedPrevious]
        if let chain, chain != storedPrevious { previousCandidates.append(chain) }
        for searching in searchCount ? [false, true] : [false] {
            let counts = try searching ? candidateCounts(searching: true).filter { $0 != storedCount } : candidateCounts(searching: false)
            for count in counts {
                let tableSize = count * Format.tableEntrySize
                let rest = try io { try System.read(fd, count: tableSize + Format.macSize, at: Format.logHeaderSize, path: path) }
                guard rest.count == tableSize + Format.macSize else { continue }
                let table = Array(rest[0..<tableSize])
                let stored = Array(rest[tableSize...])
                for epoch in epochCandidates {
                    guard let keys = epochs[epoch] else { continue }
                    for previous in previousCandidates {
                        let head = LogFile.Head(vaultID: vaultID, sequence: number, epoch: epoch, count: count, previousMAC: previous)
                        let front = LogFile.encodeHead(head)
                        let mac = LogFile.commitMAC(chainKey: keys.chain, headerAndTable: front + table)
                        let source: Proof.Source
                        if constantTimeEqual(mac, stored) {
                            source = front == header ? .asItStands : .knownFields
                        } else if let witness = witnesses.first(where: { constantTimeEqual(mac, $0) }) {
                            source = anchorWitness.map { constantTimeEqual($0, witness) } == true ? .anchor : .nextCommit
                        } else {
                            continue
                        }
                        return Proof(head: head, table: table, mac: mac, source: source, previousFromChain: previous != storedPrevious)
                    }
                }
            }
        }
        return nil
    }

    /// Whether the file is, as it stands, an authentic commit of this vault under another
    /// number (an older log renamed or copied over this one).
    func authenticElsewhere(vaultID: [UInt8], epochs: [UInt32: EpochKeys]) throws -> UInt64? {
        let sequence = storedSequence
        guard sequence != number, magicIntact, belongs(to: vaultID), let keys = epochs[storedEpoch],
              let count = try candidateCounts(searching: false).first
        else { return nil }
        let rest = try io { try System.read(fd, count: count * Format.tableEntrySize + Format.macSize, at: Format.logHeaderSize, path: path) }
        guard rest.count == count * Format.tableEntrySize + Format.macSize else { return nil }
        let mac = LogFile.commitMAC(chainKey: keys.chain, headerAndTable: header + rest.prefix(count * Format.tableEntrySize))
        return constantTimeEqual(mac, Array(rest.suffix(Format.macSize))) ? sequence : nil
    }

    /// The header fields whose stored value differs from the proven header's, by name.
    func fieldsDiffering(from head: LogFile.Head) -> [String] {
        differingFields(header, LogFile.encodeHead(head), [("magic", 0..<8), ("vault id", 8..<24), ("sequence", 24..<32),
                                                           ("key epoch", 32..<36), ("frame count", 36..<40), ("previous MAC", 40..<72)])
    }
}
