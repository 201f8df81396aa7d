import Keysmith
import KeysmithCrypto
import KeysmithSystem

/// One commit's log file read and authenticated by itself (docs/format.md, "A log"): its header
/// bounded, its table checked under the chain key of its epoch, and each frame's body located.
/// Whether it follows the commit before it is the log chain's question, not this one's: the
/// engine compares ``previousMAC`` with the chain value it holds.
///
/// ```swift
/// switch try CommitLog.read(fd, size: status.size, path: path, name: name, sequence: 7, vaultID: vaultID) { try keys(for: $0) } {
/// case .intact(let log): overlay(log.refs); lastMAC = log.mac
/// case .damaged(let reason): logDamaged(7, name, reason)
/// }
/// ```
struct CommitLog {
    /// What reading one log found.
    enum Reading {
        /// The log authenticated and its table describes its bodies exactly.
        case intact(CommitLog)
        /// Why the log cannot be used: which records it changed cannot be told.
        case damaged(String)
    }

    /// The header, bounded and authenticated with the table.
    let head: LogFile.Head
    /// The commit's MAC: the chain value of this commit, which the next commit's header names.
    let mac: [UInt8]
    /// Each frame, in table order, as a reference to its sealed body in this log's file.
    let refs: [SealedRef]

    /// The chain value the commit before this one must have had.
    var previousMAC: [UInt8] { head.previousMAC }

    /// Reads the log open at `fd` (its descriptor is only read, never closed here).
    ///
    /// - Parameters:
    ///   - size: The file's size when it was opened.
    ///   - path: The file, for the errors its reads report.
    ///   - name: The file relative to the vault, as its references and damage name it.
    ///   - sequence: The commit the file's name says it holds.
    ///   - vaultID: The vault it must belong to.
    ///   - keys: The keys of a key epoch, `nil` when the header does not hold it.
    /// - Throws: An I/O failure reading the file, or what `keys` throws (`storeLocked` when
    ///   another process re-keyed the vault under a new credential); damage is never thrown.
    static func read(_ fd: Descriptor, size: Int, path: String, name: String, sequence: UInt64, vaultID: [UInt8],
                     keys: (UInt32) throws -> EpochKeys?) throws -> Reading
    {
        let headBytes = try io { try System.read(fd, count: Format.logHeaderSize, at: 0, path: path) }
        let head: LogFile.Head
        do {
            head = try LogFile.parseHead(headBytes, fileSize: size)
        } catch .tooShort {
            return .damaged("the log is cut short inside its header")
        } catch .badMagic {
            return .damaged("the log's header is damaged (wrong magic)")
        } catch .outOfBounds(let why) {
            return .damaged("the log's header is damaged: \(why)")
        }
        guard head.vaultID == vaultID else {
            return .damaged("the log belongs to another vault (vault id \(head.vaultID.hexString))")
        }
        guard head.sequence == sequence else {
            return .damaged("the file holds commit \(head.sequence), not \(sequence): it was renamed or copied over")
        }
        guard let keys = try keys(head.epoch) else {
            return .damaged("the log is authenticated under key epoch \(head.epoch), which the header does not hold")
        }
        let tableSize = head.count * Format.tableEntrySize
        let rest = try io { try System.read(fd, count: tableSize + Format.macSize, at: Format.logHeaderSize, path: path) }
        guard rest.count == tableSize + Format.macSize else {
            return .damaged("the log is cut short inside its table")
        }
        let table = Array(rest[0..<tableSize])
        let mac = Array(rest[tableSize...])
        guard constantTimeEqual(LogFile.commitMAC(chainKey: keys.chain, headerAndTable: headBytes + table), mac) else {
            return .damaged("the commit fails authentication: its header or table is damaged or was altered")
        }
        let bodiesStart = Format.logHeaderSize + tableSize + Format.macSize
        let parsed = LogFile.parseTable(table, count: head.count, bodiesStart: bodiesStart, fileSize: size)
        if let problem = parsed.problem {
            // The table authenticated, so the records it names are known: each is damaged.
            return .damaged("the commit authenticated but \(problem): it was cut short or extended")
        }
        var refs: [SealedRef] = []
        refs.reserveCapacity(parsed.entries.count)
        var offset = bodiesStart
        for entry in parsed.entries {
            refs.append(SealedRef(recordID: entry.recordID, op: entry.op, version: sequence, epoch: head.epoch, fd: fd, file: name,
                                  offset: offset, length: entry.length, nonce: entry.nonce, tag: entry.tag))
            offset += entry.length
        }
        return .intact(CommitLog(head: head, mac: mac, refs: refs))
    }
}
