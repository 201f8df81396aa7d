import Keysmith

// The record names and the inline bytes both vault formats share.

/// A record's stable, keyed name: HMAC-SHA-256 of its identity under the vault's id key.
///
/// Kept as four big-endian words, inline: comparing the words compares the bytes in order, and
/// an index of 100,000 records holds no array per record.
struct RecordID: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// A record id's length in bytes (both formats).
    static let size = 32

    private let words: (UInt64, UInt64, UInt64, UInt64)

    init?(_ bytes: [UInt8]) {
        self.init(bytes[...])
    }

    init?(_ bytes: ArraySlice<UInt8>) {
        guard bytes.count == Self.size else { return nil }
        let start = bytes.startIndex
        words = (bigEndianWord(bytes, start, 8), bigEndianWord(bytes, start + 8, 8), bigEndianWord(bytes, start + 16, 8),
                 bigEndianWord(bytes, start + 24, 8))
    }

    /// The 32 bytes.
    var bytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(Self.size)
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

extension RecordCodec {
    /// The label of a vault record's identity. Both formats keep the label format 1 gave it: a
    /// record's id is the same in either, so an upgrade moves records without renaming them.
    static let identityLabel = Array("keysmith-vault-v1 identity".utf8)

    /// The canonical identity bytes that a vault record id is the HMAC of.
    static func identity(_ key: ItemKey) -> [UInt8] { identity(key, label: identityLabel) }
}
