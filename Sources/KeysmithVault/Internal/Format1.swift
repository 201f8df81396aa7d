import Keysmith
import KeysmithCrypto

/// Constants and byte layouts of vault format version 1. docs/format.md is the specification;
/// this file is its implementation, and the two change together.
enum Format1 {
    static let version: UInt16 = 1
    static let vaultIDSize = HeaderFormat.vaultIDSize
    static let recordIDSize = RecordID.size

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
    static let keyfileKEKLabel = Array("keysmith-vault-v1 keyfile-kek".utf8)

    /// The largest record a frame may claim, so a damaged length can never make us allocate
    /// gigabytes: 64 MiB.
    static let maximumCiphertext = 64 << 20
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
        writer.append(Format1.recordADLabel)
        writer.append(Format1.version)
        writer.append(vaultID)
        writer.append(op.rawValue)
        writer.append(epoch)
        writer.append(version)
        writer.append(recordID.bytes)
        return writer.bytes
    }

    /// Why a frame does not hold; the text names the check, never a secret or a name.
    struct Failure: Error {
        let reason: String
    }

    /// The frame decrypted and checked as a read checks it (docs/format.md, "Reading a vault
    /// (version 1)"): its tag under `key` (its epoch's data key, `nil` when the header does
    /// not hold it), a deletion that carries no data, a put that decodes and whose identity is
    /// its record id. The record (`nil` for a deletion; its version set from the frame) or why
    /// it does not hold. The reader and the repair both check frames here.
    func open(key: SecretBytes?, vaultID: [UInt8], idKey: SecretBytes, withSecret: Bool) -> Result<SecureRecord?, Failure> {
        guard let key else {
            return .failure(Failure(reason: "the record is sealed under key epoch \(epoch), which the header does not hold"))
        }
        guard var plaintext = try? AESGCM.open(ciphertext: ciphertext, tag: tag, key: key, nonce: nonce,
                                               associatedData: associatedData(vaultID: vaultID))
        else { return .failure(Failure(reason: "the record failed authentication: it is corrupt, was tampered with, or comes from another vault")) }
        defer { cleanse(&plaintext) }
        switch op {
        case .delete:
            return plaintext.isEmpty ? .success(nil) : .failure(Failure(reason: "a deletion record carries data"))
        case .put:
            var record: SecureRecord
            do {
                record = try RecordCodec.decode(plaintext, withSecret: withSecret)
            } catch let error as RecordCodec.DecodeError {
                return .failure(Failure(reason: "the record authenticated but does not decode: \(error.reason)"))
            } catch {
                return .failure(Failure(reason: "the record authenticated but does not decode"))
            }
            guard SHA256.hmac(key: idKey, RecordCodec.identity(record.key)) == recordID.bytes else {
                return .failure(Failure(reason: "the record's identity does not match its record id: it was renamed"))
            }
            record.info.version = Format1Engine.version(of: self)
            return .success(record)
        }
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

    /// Reads the file header: `nil` if it is damaged (wrong magic, bad CRC, too short).
    static func parseHeader(_ bytes: [UInt8], kind: Kind) -> (vaultID: [UInt8], sequence: UInt64, count: Int)? {
        var reader = ByteReader(bytes)
        guard let magic = reader.readBytes(8), let vaultID = reader.readBytes(Format1.vaultIDSize),
              let sequence = reader.readUInt64(), let count = reader.readUInt32(), let crc = reader.readUInt32(),
              magic == (kind == .log ? Format1.logMagic : Format1.snapshotMagic),
              crc == CRC32.checksum(bytes[0..<36])
        else { return nil }
        return (vaultID, sequence, Int(count))
    }

    /// Parses every frame after the file header. Never traps: damage is reported, and parsing
    /// resumes at the next intact frame header.
    static func parseFrames(_ bytes: [UInt8]) -> Parsed {
        var parsed = Parsed()
        var offset = min(Format1.fileHeaderSize, bytes.count)
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
        guard let magic = reader.readBytes(4), magic == Format1.frameMagic,
              let opByte = reader.readUInt8(), let epoch = reader.readUInt32(), let version = reader.readUInt64(),
              let idBytes = reader.readBytes(Format1.recordIDSize), let nonce = reader.readBytes(12),
              let length = reader.readUInt32(), let crc = reader.readUInt32(),
              crc == CRC32.checksum(bytes[offset..<offset + Format1.frameHeaderBodySize]),
              let op = FrameOp(rawValue: opByte), let recordID = RecordID(idBytes),
              Int(length) <= Format1.maximumCiphertext
        else { return .badHeader }
        guard let ciphertext = reader.readBytes(Int(length)), let tag = reader.readBytes(16) else {
            return .truncated(recordID, version)
        }
        let frame = Frame(op: op, epoch: epoch, version: version, recordID: recordID, nonce: nonce,
                          ciphertext: ciphertext, tag: tag)
        let trailerStart = reader.offset
        guard let trailerID = reader.readBytes(Format1.recordIDSize), let trailerVersion = reader.readUInt64(),
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
        while candidate + Format1.frameHeaderSize <= bytes.count {
            if bytes[candidate] == Format1.frameMagic[0], bytes[candidate + 1] == Format1.frameMagic[1],
               bytes[candidate + 2] == Format1.frameMagic[2], bytes[candidate + 3] == Format1.frameMagic[3]
            {
                var reader = ByteReader(bytes, offset: candidate + Format1.frameHeaderBodySize)
                if let crc = reader.readUInt32(),
                   crc == CRC32.checksum(bytes[candidate..<candidate + Format1.frameHeaderBodySize])
                {
                    return candidate
                }
            }
            candidate += 1
        }
        return bytes.count
    }

    private static func attributeByTrailer(_ bytes: [UInt8], end: Int, start: Int) -> (RecordID, UInt64)? {
        let trailerStart = end - Format1.frameTrailerSize
        guard trailerStart >= start else { return nil }
        var reader = ByteReader(bytes, offset: trailerStart)
        guard let idBytes = reader.readBytes(Format1.recordIDSize), let version = reader.readUInt64(),
              let crc = reader.readUInt32(), crc == CRC32.checksum(bytes[trailerStart..<trailerStart + 40]),
              let recordID = RecordID(idBytes)
        else { return nil }
        return (recordID, version)
    }
}
