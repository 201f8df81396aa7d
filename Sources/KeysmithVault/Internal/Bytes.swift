import Keysmith

/// The vault's own pieces of the byte writer and reader (which live in Keysmith, shared with
/// the PostgreSQL store's record encoding).
extension ByteWriter {
    mutating func append(_ value: InlineBytes) { bytes.append(contentsOf: value.array) }
}

extension ByteReader {
    mutating func readInline(_ count: Int) -> InlineBytes? { read(count: count).map(InlineBytes.init) }
    mutating func readRecordID() -> RecordID? { read(count: RecordID.size).flatMap(RecordID.init) }

    /// The big-endian number at `offset` of `bytes`, for a field read by its place: 0 when the
    /// bytes end before it.
    static func uint64(_ bytes: [UInt8], at offset: Int) -> UInt64 {
        var reader = ByteReader(bytes, offset: offset)
        return reader.readUInt64() ?? 0
    }

    /// ``uint64(_:at:)`` for a 32-bit field.
    static func uint32(_ bytes: [UInt8], at offset: Int) -> UInt32 {
        var reader = ByteReader(bytes, offset: offset)
        return reader.readUInt32() ?? 0
    }
}

/// The names of the `fields` (name, byte range) in which `stored` differs from `expected`: what a
/// repair reports of a header it proved with some fields put back.
func differingFields(_ stored: [UInt8], _ expected: [UInt8], _ fields: [(String, Range<Int>)]) -> [String] {
    fields.filter { stored[$0.1] != expected[$0.1] }.map(\.0)
}

/// CRC-32 (IEEE 802.3, the polynomial of zlib and PNG), used to find frame boundaries after
/// damage. It is not a security check: AES-GCM tags are.
enum CRC32 {
    private static let table: [UInt32] = (0..<256).map { index in
        var value = UInt32(index)
        for _ in 0..<8 { value = (value & 1) != 0 ? (value >> 1) ^ 0xEDB8_8320 : value >> 1 }
        return value
    }

    static func checksum(_ bytes: some Collection<UInt8>) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes { crc = table[Int((crc ^ UInt32(byte)) & 0xFF)] ^ (crc >> 8) }
        return crc ^ 0xFFFF_FFFF
    }
}

