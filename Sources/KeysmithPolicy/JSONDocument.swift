/// A small JSON reader that remembers the line of every value, so that policy-file errors can
/// name their line. Strict RFC 8259: no comments, no trailing commas.
indirect enum JSONValue: Sendable {
    case object([(key: String, value: Located)])
    case array([Located])
    case string(String)
    case number(Double)
    case bool(Bool)
    case null

    var typeName: String {
        switch self {
        case .object: "an object"
        case .array: "an array"
        case .string: "a string"
        case .number: "a number"
        case .bool: "true or false"
        case .null: "null"
        }
    }
}

/// A JSON value and the line it starts on.
struct Located: Sendable {
    var value: JSONValue
    var line: Int

    subscript(key: String) -> Located? {
        if case .object(let members) = value { return members.first { $0.key == key }?.value }
        return nil
    }
}

struct JSONSyntaxError: Error, Sendable {
    var line: Int
    var message: String
}

struct JSONReader {
    private let bytes: [UInt8]
    private var offset = 0
    private var line = 1
    private var depth = 0

    static func parse(_ bytes: [UInt8]) throws(JSONSyntaxError) -> Located {
        var reader = JSONReader(bytes: bytes)
        reader.skipSpace()
        let value = try reader.value()
        reader.skipSpace()
        guard reader.offset == bytes.count else { throw reader.error("unexpected text after the JSON value") }
        return value
    }

    private init(bytes: [UInt8]) { self.bytes = bytes }

    private func error(_ message: String) -> JSONSyntaxError { JSONSyntaxError(line: line, message: message) }

    private mutating func skipSpace() {
        while offset < bytes.count {
            switch bytes[offset] {
            case UInt8(ascii: "\n"): line += 1
            case UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\r"): break
            default: return
            }
            offset += 1
        }
    }

    private mutating func expect(_ literal: String) throws(JSONSyntaxError) {
        for byte in literal.utf8 {
            guard offset < bytes.count, bytes[offset] == byte else { throw error("expected \(literal)") }
            offset += 1
        }
    }

    private mutating func value() throws(JSONSyntaxError) -> Located {
        guard offset < bytes.count else { throw error("the document ends where a value was expected") }
        let start = line
        depth += 1
        defer { depth -= 1 }
        guard depth < 256 else { throw error("nesting is deeper than 256 levels") }
        switch bytes[offset] {
        case UInt8(ascii: "{"):
            offset += 1
            var members: [(key: String, value: Located)] = []
            skipSpace()
            if offset < bytes.count, bytes[offset] == UInt8(ascii: "}") {
                offset += 1
                return Located(value: .object(members), line: start)
            }
            while true {
                skipSpace()
                guard offset < bytes.count, bytes[offset] == UInt8(ascii: "\"") else { throw error("expected a quoted key") }
                let key = try string()
                skipSpace()
                try expect(":")
                skipSpace()
                members.append((key, try value()))
                skipSpace()
                guard offset < bytes.count else { throw error("the object is not closed") }
                if bytes[offset] == UInt8(ascii: ",") { offset += 1; continue }
                if bytes[offset] == UInt8(ascii: "}") { offset += 1; break }
                throw error("expected ',' or '}' in an object")
            }
            return Located(value: .object(members), line: start)
        case UInt8(ascii: "["):
            offset += 1
            var items: [Located] = []
            skipSpace()
            if offset < bytes.count, bytes[offset] == UInt8(ascii: "]") {
                offset += 1
                return Located(value: .array(items), line: start)
            }
            while true {
                skipSpace()
                items.append(try value())
                skipSpace()
                guard offset < bytes.count else { throw error("the array is not closed") }
                if bytes[offset] == UInt8(ascii: ",") { offset += 1; continue }
                if bytes[offset] == UInt8(ascii: "]") { offset += 1; break }
                throw error("expected ',' or ']' in an array")
            }
            return Located(value: .array(items), line: start)
        case UInt8(ascii: "\""):
            return Located(value: .string(try string()), line: start)
        case UInt8(ascii: "t"):
            try expect("true")
            return Located(value: .bool(true), line: start)
        case UInt8(ascii: "f"):
            try expect("false")
            return Located(value: .bool(false), line: start)
        case UInt8(ascii: "n"):
            try expect("null")
            return Located(value: .null, line: start)
        default:
            return Located(value: .number(try number()), line: start)
        }
    }

    private mutating func number() throws(JSONSyntaxError) -> Double {
        let start = offset
        while offset < bytes.count, "+-0123456789.eE".utf8.contains(bytes[offset]) { offset += 1 }
        guard offset > start, let text = String(validating: bytes[start..<offset], as: UTF8.self),
              let value = Double(text), value.isFinite
        else { throw error("expected a value") }
        return value
    }

    private mutating func string() throws(JSONSyntaxError) -> String {
        offset += 1  // the opening quote
        var scalars = String.UnicodeScalarView()
        var chunkStart = offset
        func flush(_ end: Int) throws(JSONSyntaxError) {
            guard let text = String(validating: bytes[chunkStart..<end], as: UTF8.self) else { throw error("a string is not UTF-8") }
            scalars.append(contentsOf: text.unicodeScalars)
        }
        while offset < bytes.count {
            let byte = bytes[offset]
            if byte == UInt8(ascii: "\"") {
                try flush(offset)
                offset += 1
                return String(scalars)
            }
            if byte < 0x20 { throw error("a control character inside a string") }
            if byte == UInt8(ascii: "\\") {
                try flush(offset)
                offset += 1
                guard offset < bytes.count else { break }
                let escape = bytes[offset]
                offset += 1
                switch escape {
                case UInt8(ascii: "\""): scalars.append("\"")
                case UInt8(ascii: "\\"): scalars.append("\\")
                case UInt8(ascii: "/"): scalars.append("/")
                case UInt8(ascii: "b"): scalars.append("\u{08}")
                case UInt8(ascii: "f"): scalars.append("\u{0C}")
                case UInt8(ascii: "n"): scalars.append("\n")
                case UInt8(ascii: "r"): scalars.append("\r")
                case UInt8(ascii: "t"): scalars.append("\t")
                case UInt8(ascii: "u"):
                    var code = try hex4()
                    if (0xD800..<0xDC00).contains(code) {
                        guard offset + 1 < bytes.count, bytes[offset] == UInt8(ascii: "\\"), bytes[offset + 1] == UInt8(ascii: "u") else {
                            throw error("an unpaired surrogate in a \\u escape")
                        }
                        offset += 2
                        let low = try hex4()
                        guard (0xDC00..<0xE000).contains(low) else { throw error("an unpaired surrogate in a \\u escape") }
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                    }
                    guard let scalar = Unicode.Scalar(code) else { throw error("an invalid \\u escape") }
                    scalars.append(scalar)
                default: throw error("an invalid escape in a string")
                }
                chunkStart = offset
                continue
            }
            offset += 1
        }
        throw error("a string is not closed")
    }

    private mutating func hex4() throws(JSONSyntaxError) -> UInt32 {
        guard offset + 4 <= bytes.count else { throw error("a \\u escape is cut short") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[offset]
            let digit: UInt32
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
            default: throw error("a \\u escape has a non-hex digit")
            }
            value = value << 4 | digit
            offset += 1
        }
        return value
    }
}
