/// The escapes of a JSON string (RFC 8259 §7), decoded into UTF-8: one copy for the package's
/// two JSON readers (the policy language's documents and a token response's fields).
package enum JSONEscape {
    /// What is wrong with an escape.
    package enum Failure: Error, Sendable {
        /// The text ends inside it.
        case cutShort
        /// A `\u` escape with a character that is not a hex digit.
        case notHex
        /// A high surrogate not followed by a low one, or a low one alone.
        case unpairedSurrogate
        /// A backslash before a character JSON gives no meaning.
        case unknown
    }

    /// Decodes the escape whose backslash is at `offset - 1` (`offset` is just past it),
    /// appending its UTF-8 to `utf8` and moving `offset` past the escape (a surrogate pair's two
    /// `\u` escapes are one).
    package static func decode(_ bytes: [UInt8], at offset: inout Int, into utf8: inout [UInt8]) throws(Failure) {
        guard offset < bytes.count else { throw .cutShort }
        let escape = bytes[offset]
        offset += 1
        switch escape {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): utf8.append(escape)
        case UInt8(ascii: "b"): utf8.append(0x08)
        case UInt8(ascii: "f"): utf8.append(0x0C)
        case UInt8(ascii: "n"): utf8.append(0x0A)
        case UInt8(ascii: "r"): utf8.append(0x0D)
        case UInt8(ascii: "t"): utf8.append(0x09)
        case UInt8(ascii: "u"):
            var code = try hex4(bytes, at: &offset)
            if (0xD800..<0xDC00).contains(code) {
                guard offset + 1 < bytes.count, bytes[offset] == UInt8(ascii: "\\"), bytes[offset + 1] == UInt8(ascii: "u") else {
                    throw .unpairedSurrogate
                }
                offset += 2
                let low = try hex4(bytes, at: &offset)
                guard (0xDC00..<0xE000).contains(low) else { throw .unpairedSurrogate }
                code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
            }
            guard let scalar = Unicode.Scalar(code) else { throw .unpairedSurrogate }
            utf8.append(contentsOf: UTF8.encode(scalar)!)
        default:
            throw .unknown
        }
    }

    /// Four hex digits at `offset`, moving past them.
    private static func hex4(_ bytes: [UInt8], at offset: inout Int) throws(Failure) -> UInt32 {
        guard offset + 4 <= bytes.count else { throw .cutShort }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[offset]
            let digit: UInt32
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
            default: throw .notHex
            }
            value = value << 4 | digit
            offset += 1
        }
        return value
    }
}
