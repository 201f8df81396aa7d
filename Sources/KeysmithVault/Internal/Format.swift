import Keysmith

/// Constants and byte layouts of vault format version 1. docs/format.md is the specification;
/// this file is its implementation, and the two change together.
enum Format {
    static let version: UInt16 = 1
    static let vaultIDSize = 16
    static let recordIDSize = 32

    static let logMagic = Array("KSMVLOG1".utf8)
    static let snapshotMagic = Array("KSMVSNP1".utf8)
    /// magic (8) ‖ vault id (16) ‖ sequence (8) ‖ frame count (4) ‖ CRC-32 of those 36 bytes (4).
    static let fileHeaderSize = 40

    static let frameMagic = Array("KSRF".utf8)
    /// magic 4 ‖ op 1 ‖ epoch 4 ‖ version 8 ‖ record id 32 ‖ nonce 12 ‖ length 4.
    static let frameHeaderBodySize = 65
    /// The header body and its CRC-32.
    static let frameHeaderSize = 69
    /// record id 32 ‖ version 8 ‖ CRC-32 4.
    static let frameTrailerSize = 44

    static let recordADLabel = Array("keysmith-vault-v1 record".utf8)
    static let keyWrapADLabel = Array("keysmith-vault-v1 key-wrap".utf8)
    static let identityLabel = Array("keysmith-vault-v1 identity".utf8)
    static let keyfileKEKLabel = Array("keysmith-vault-v1 keyfile-kek".utf8)

    /// The largest record a frame may claim, so a damaged length can never make us allocate
    /// gigabytes: 64 MiB.
    static let maximumCiphertext = 64 << 20
}

/// A record's stable, keyed name: HMAC-SHA-256 of its identity under the vault's id key.
///
/// Kept as four big-endian words, inline: comparing the words compares the bytes in order, and
/// an index of 100,000 records holds no array per record.
struct RecordID: Hashable, Comparable, Sendable, CustomStringConvertible {
    private let words: (UInt64, UInt64, UInt64, UInt64)

    init?(_ bytes: [UInt8]) {
        self.init(bytes[...])
    }

    init?(_ bytes: ArraySlice<UInt8>) {
        guard bytes.count == Format.recordIDSize else { return nil }
        let start = bytes.startIndex
        words = (bigEndianWord(bytes, start, 8), bigEndianWord(bytes, start + 8, 8), bigEndianWord(bytes, start + 16, 8),
                 bigEndianWord(bytes, start + 24, 8))
    }

    /// The 32 bytes.
    var bytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(Format.recordIDSize)
        for word in [words.0, words.1, words.2, words.3] {
            for shift in stride(from: 56, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: word >> UInt64(shift))) }
        }
        return out
    }

    static func == (a: RecordID, b: RecordID) -> Bool { a.words == b.words }

    /// Byte order (the order of a snapshot's index).
    static func < (a: RecordID, b: RecordID) -> Bool {
        if a.words.0 != b.words.0 { return a.words.0 < b.words.0 }
        if a.words.1 != b.words.1 { return a.words.1 < b.words.1 }
        if a.words.2 != b.words.2 { return a.words.2 < b.words.2 }
        return a.words.3 < b.words.3
    }

    /// The first word: a keyed hash's bytes are uniform, and only someone holding the vault's
    /// id key could choose them.
    func hash(into hasher: inout Hasher) { hasher.combine(words.0) }

    /// The first 16 hex digits, enough to name a record in a message.
    var description: String { Array(bytes.prefix(8)).hexString }
}

/// `length` (≤ 8) bytes from `start` as a big-endian number.
@inline(__always)
private func bigEndianWord(_ bytes: ArraySlice<UInt8>, _ start: Int, _ length: Int) -> UInt64 {
    var word: UInt64 = 0
    for index in start..<(start + length) { word = word << 8 | UInt64(bytes[index]) }
    return word
}

/// Up to 16 bytes kept inline (a GCM nonce or tag), so that an index of 100,000 records holds
/// no array per record.
struct InlineBytes: Hashable, Sendable {
    private let high: UInt64
    private let low: UInt64
    let count: Int

    init(_ bytes: [UInt8]) {
        self.init(bytes[...])
    }

    init(_ bytes: ArraySlice<UInt8>) {
        precondition(bytes.count <= 16, "at most 16 bytes inline")
        let start = bytes.startIndex, count = bytes.count
        // Left-aligned: byte i of the value is byte i of high‖low.
        high = bigEndianWord(bytes, start, min(count, 8)) << UInt64(8 * (8 - min(count, 8)))
        low = count > 8 ? bigEndianWord(bytes, start + 8, count - 8) << UInt64(8 * (16 - count)) : 0
        self.count = count
    }

    /// The bytes.
    var array: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(count)
        for index in 0..<count {
            let word = index < 8 ? high : low
            out.append(UInt8(truncatingIfNeeded: word >> UInt64(56 - 8 * (index % 8))))
        }
        return out
    }
}

enum FrameOp: UInt8, Sendable {
    case put = 1
    case delete = 2
}

/// One sealed record as it sits in a log or snapshot file.
struct Frame: Sendable {
    var op: FrameOp
    var epoch: UInt32
    var version: UInt64
    var recordID: RecordID
    var nonce: [UInt8]
    var ciphertext: [UInt8]
    var tag: [UInt8]

    func associatedData(vaultID: [UInt8]) -> [UInt8] {
        var writer = ByteWriter(capacity: 96)
        writer.append(Format.recordADLabel)
        writer.append(Format.version)
        writer.append(vaultID)
        writer.append(op.rawValue)
        writer.append(epoch)
        writer.append(version)
        writer.append(recordID.bytes)
        return writer.bytes
    }

    func encode(into writer: inout ByteWriter) {
        let start = writer.bytes.count
        writer.append(Format.frameMagic)
        writer.append(op.rawValue)
        writer.append(epoch)
        writer.append(version)
        writer.append(recordID.bytes)
        writer.append(nonce)
        writer.append(UInt32(ciphertext.count))
        writer.append(CRC32.checksum(writer.bytes[start...]))
        writer.append(ciphertext)
        writer.append(tag)
        let trailerStart = writer.bytes.count
        writer.append(recordID.bytes)
        writer.append(version)
        writer.append(CRC32.checksum(writer.bytes[trailerStart...]))
    }
}

/// A file of frames: a log (one commit) or the snapshot.
struct FrameFile {
    enum Kind { case log, snapshot }

    /// What parsing found: intact frames, and damage with whatever could be attributed.
    struct Parsed {
        var frames: [(frame: Frame, offset: Int)] = []
        var damage: [ParseDamage] = []
    }

    struct ParseDamage {
        var offset: Int
        /// The record the damaged bytes belonged to, when the frame's header or trailer survived.
        var recordID: RecordID?
        var version: UInt64?
        var reason: String
        /// Whether the damage runs to the end of the file, so frames after it may be lost.
        var endsFile = false
        /// Whether only the frame's trailer is damaged: its record verified and was counted as a frame.
        var inTrailer = false
    }

    static func encode(kind: Kind, vaultID: [UInt8], sequence: UInt64, frames: [Frame]) -> [UInt8] {
        let size = frames.reduce(Format.fileHeaderSize) { $0 + Format.frameHeaderSize + $1.ciphertext.count + 16 + Format.frameTrailerSize }
        var writer = ByteWriter(capacity: size)
        writer.append(kind == .log ? Format.logMagic : Format.snapshotMagic)
        writer.append(vaultID)
        writer.append(sequence)
        writer.append(UInt32(frames.count))
        writer.append(CRC32.checksum(writer.bytes))
        for frame in frames { frame.encode(into: &writer) }
        return writer.bytes
    }

    /// Reads the file header: `nil` if it is damaged (wrong magic, bad CRC, too short).
    static func parseHeader(_ bytes: [UInt8], kind: Kind) -> (vaultID: [UInt8], sequence: UInt64, count: Int)? {
        var reader = ByteReader(bytes)
        guard let magic = reader.readBytes(8), let vaultID = reader.readBytes(Format.vaultIDSize),
              let sequence = reader.readUInt64(), let count = reader.readUInt32(), let crc = reader.readUInt32(),
              magic == (kind == .log ? Format.logMagic : Format.snapshotMagic),
              crc == CRC32.checksum(bytes[0..<36])
        else { return nil }
        return (vaultID, sequence, Int(count))
    }

    /// Parses every frame after the file header. Never traps: damage is reported, and parsing
    /// resumes at the next intact frame header.
    static func parseFrames(_ bytes: [UInt8]) -> Parsed {
        var parsed = Parsed()
        var offset = min(Format.fileHeaderSize, bytes.count)
        while offset < bytes.count {
            switch parseFrame(bytes, at: offset) {
            case .frame(let frame, let end, let trailerDamage):
                parsed.frames.append((frame, offset))
                if let trailerDamage { parsed.damage.append(trailerDamage) }
                offset = end
            case .truncated(let recordID, let version):
                parsed.damage.append(ParseDamage(
                    offset: offset, recordID: recordID, version: version,
                    reason: "the file ends in the middle of this record (truncated)", endsFile: true))
                offset = bytes.count
            case .badHeader:
                // Find the next intact frame header; the bytes between are this frame's.
                let next = nextFrameStart(bytes, after: offset)
                let trailer = attributeByTrailer(bytes, end: next, start: offset)
                parsed.damage.append(ParseDamage(
                    offset: offset, recordID: trailer?.0, version: trailer?.1,
                    reason: "the record's header is damaged", endsFile: next == bytes.count))
                offset = next
            }
        }
        return parsed
    }

    private enum FrameResult {
        case frame(Frame, end: Int, trailerDamage: ParseDamage?)
        case truncated(RecordID, UInt64)
        case badHeader
    }

    private static func parseFrame(_ bytes: [UInt8], at offset: Int) -> FrameResult {
        var reader = ByteReader(bytes, offset: offset)
        guard let magic = reader.readBytes(4), magic == Format.frameMagic,
              let opByte = reader.readUInt8(), let epoch = reader.readUInt32(), let version = reader.readUInt64(),
              let idBytes = reader.readBytes(Format.recordIDSize), let nonce = reader.readBytes(12),
              let length = reader.readUInt32(), let crc = reader.readUInt32(),
              crc == CRC32.checksum(bytes[offset..<offset + Format.frameHeaderBodySize]),
              let op = FrameOp(rawValue: opByte), let recordID = RecordID(idBytes),
              Int(length) <= Format.maximumCiphertext
        else { return .badHeader }
        guard let ciphertext = reader.readBytes(Int(length)), let tag = reader.readBytes(16) else {
            return .truncated(recordID, version)
        }
        let frame = Frame(op: op, epoch: epoch, version: version, recordID: recordID, nonce: nonce,
                          ciphertext: ciphertext, tag: tag)
        let trailerStart = reader.offset
        guard let trailerID = reader.readBytes(Format.recordIDSize), let trailerVersion = reader.readUInt64(),
              let trailerCRC = reader.readUInt32()
        else {
            // The sealed record is whole; only its trailer is cut off. The record is intact (its
            // tag says so), but the file is not.
            return .frame(frame, end: bytes.count, trailerDamage: ParseDamage(
                offset: trailerStart, recordID: recordID, version: version,
                reason: "the record's trailer is truncated (the record itself verified)", endsFile: true, inTrailer: true))
        }
        let trailerOK = trailerCRC == CRC32.checksum(bytes[trailerStart..<trailerStart + 40])
            && trailerID == idBytes && trailerVersion == version
        return .frame(frame, end: reader.offset, trailerDamage: trailerOK ? nil : ParseDamage(
            offset: trailerStart, recordID: recordID, version: version,
            reason: "the record's trailer is damaged (the record itself verified)", inTrailer: true))
    }

    private static func nextFrameStart(_ bytes: [UInt8], after offset: Int) -> Int {
        var candidate = offset + 1
        while candidate + Format.frameHeaderSize <= bytes.count {
            if bytes[candidate] == Format.frameMagic[0], bytes[candidate + 1] == Format.frameMagic[1],
               bytes[candidate + 2] == Format.frameMagic[2], bytes[candidate + 3] == Format.frameMagic[3]
            {
                var reader = ByteReader(bytes, offset: candidate + Format.frameHeaderBodySize)
                if let crc = reader.readUInt32(),
                   crc == CRC32.checksum(bytes[candidate..<candidate + Format.frameHeaderBodySize])
                {
                    return candidate
                }
            }
            candidate += 1
        }
        return bytes.count
    }

    private static func attributeByTrailer(_ bytes: [UInt8], end: Int, start: Int) -> (RecordID, UInt64)? {
        let trailerStart = end - Format.frameTrailerSize
        guard trailerStart >= start else { return nil }
        var reader = ByteReader(bytes, offset: trailerStart)
        guard let idBytes = reader.readBytes(Format.recordIDSize), let version = reader.readUInt64(),
              let crc = reader.readUInt32(), crc == CRC32.checksum(bytes[trailerStart..<trailerStart + 40]),
              let recordID = RecordID(idBytes)
        else { return nil }
        return (recordID, version)
    }
}

extension RecordCodec {
    /// The canonical identity bytes that a vault record id is the HMAC of.
    static func identity(_ key: ItemKey) -> [UInt8] { identity(key, label: Format.identityLabel) }
}
