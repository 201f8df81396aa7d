import Keysmith

/// A small JSON reader that remembers the line and column of every value, so that errors can
/// name where they are. Strict RFC 8259: no comments, no trailing commas, numbers by the RFC's
/// grammar only (no `+1`, `01`, `1.`), and a key repeated in one object is an error (readers
/// disagree on which copy wins, so a policy could mean one thing to `jq` and another here).
indirect enum JSONValue: Sendable {
    case object([(key: String, value: Located)])
    case array([Located])
    case string(String)
    /// A number written without fraction or exponent that fits in 64 bits.
    case integer(Int64)
    /// Any other number.
    case number(Double)
    case bool(Bool)
    case null

    var typeName: String {
        switch self {
        case .object: "an object"
        case .array: "an array"
        case .string: "a string"
        case .integer, .number: "a number"
        case .bool: "true or false"
        case .null: "null"
        }
    }
}

/// A JSON value and the line (and column, counted in characters from 1) it starts on.
struct Located: Sendable {
    var value: JSONValue
    var line: Int
    var column: Int = 1

    subscript(key: String) -> Located? {
        if case .object(let members) = value { return members.first { $0.key == key }?.value }
        return nil
    }
}

struct JSONSyntaxError: Error, Sendable {
    var line: Int
    var column: Int = 1
    var message: String
}

struct JSONReader {
    private let bytes: [UInt8]
    private var offset = 0
    private var line = 1
    private var lineStart = 0
    private var counted = (offset: 0, column: 1)
    private var depth = 0
    private let maximumDepth: Int

    /// How deep a document nests at most (values inside values), unless a reader is told
    /// otherwise.
    static let maximumDepth = 256

    /// The document's value; an error for anything else, or for values nested more than
    /// `maximumDepth` levels (a top-level scalar is one level).
    static func parse(_ bytes: [UInt8], maximumDepth: Int = JSONReader.maximumDepth) throws(JSONSyntaxError) -> Located {
        var reader = JSONReader(bytes: bytes, maximumDepth: maximumDepth)
        reader.skipSpace()
        let value = try reader.value()
        reader.skipSpace()
        guard reader.offset == bytes.count else { throw reader.error("unexpected text after the JSON value") }
        return value
    }

    private init(bytes: [UInt8], maximumDepth: Int) {
        self.bytes = bytes
        self.maximumDepth = maximumDepth
    }

    private mutating func error(_ message: String) -> JSONSyntaxError { JSONSyntaxError(line: line, column: column, message: message) }

    /// The column of `offset`, counting characters (not bytes) from the start of the line. The
    /// reader only moves forward, so the count continues from the last column asked for.
    private var column: Int {
        mutating get {
            if counted.offset < lineStart { counted = (lineStart, 1) }
            let end = min(offset, bytes.count)
            for byte in bytes[counted.offset..<max(end, counted.offset)] where byte & 0xC0 != 0x80 { counted.column += 1 }
            counted.offset = max(end, counted.offset)
            return counted.column
        }
    }

    private mutating func skipSpace() {
        while offset < bytes.count {
            switch bytes[offset] {
            case UInt8(ascii: "\n"):
                line += 1
                lineStart = offset + 1
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
        let startColumn = column
        depth += 1
        defer { depth -= 1 }
        guard depth <= maximumDepth else { throw error("nesting is deeper than \(maximumDepth) levels") }
        switch bytes[offset] {
        case UInt8(ascii: "{"):
            offset += 1
            var members: [(key: String, value: Located)] = []
            // A repeated key is looked for in place while the object is small, then in a set
            // (a scan per key made 20,000 attributes take 12 s).
            var keys: Set<String>?
            skipSpace()
            if offset < bytes.count, bytes[offset] == UInt8(ascii: "}") {
                offset += 1
                return Located(value: .object(members), line: start, column: startColumn)
            }
            while true {
                skipSpace()
                guard offset < bytes.count, bytes[offset] == UInt8(ascii: "\"") else { throw error("expected a quoted key") }
                let keyLine = line, keyColumn = column
                let key = try string()
                let repeated: Bool
                if members.count < 16 {
                    repeated = members.contains { $0.key == key }
                } else {
                    if keys == nil { keys = Set(members.map(\.key)) }
                    repeated = !keys!.insert(key).inserted
                }
                if repeated {
                    throw JSONSyntaxError(line: keyLine, column: keyColumn, message: "the key \(PolicyValue.quoted(key)) appears twice in one object")
                }
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
            return Located(value: .object(members), line: start, column: startColumn)
        case UInt8(ascii: "["):
            offset += 1
            var items: [Located] = []
            skipSpace()
            if offset < bytes.count, bytes[offset] == UInt8(ascii: "]") {
                offset += 1
                return Located(value: .array(items), line: start, column: startColumn)
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
            return Located(value: .array(items), line: start, column: startColumn)
        case UInt8(ascii: "\""):
            return Located(value: .string(try string()), line: start, column: startColumn)
        case UInt8(ascii: "t"):
            try expect("true")
            return Located(value: .bool(true), line: start, column: startColumn)
        case UInt8(ascii: "f"):
            try expect("false")
            return Located(value: .bool(false), line: start, column: startColumn)
        case UInt8(ascii: "n"):
            try expect("null")
            return Located(value: .null, line: start, column: startColumn)
        default:
            return Located(value: try number(), line: start, column: startColumn)
        }
    }

    /// A number by RFC 8259's grammar: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
    private mutating func number() throws(JSONSyntaxError) -> JSONValue {
        let start = offset
        func digits() -> Int {
            let first = offset
            while offset < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[offset]) { offset += 1 }
            return offset - first
        }
        if offset < bytes.count, bytes[offset] == UInt8(ascii: "-") { offset += 1 }
        let integerStart = offset
        let integerDigits = digits()
        guard integerDigits > 0 else { throw error("expected a value") }
        guard integerDigits == 1 || bytes[integerStart] != UInt8(ascii: "0") else { throw error("a number has a leading zero") }
        var isInteger = true
        if offset < bytes.count, bytes[offset] == UInt8(ascii: ".") {
            offset += 1
            isInteger = false
            guard digits() > 0 else { throw error("a number has no digits after its decimal point") }
        }
        if offset < bytes.count, bytes[offset] == UInt8(ascii: "e") || bytes[offset] == UInt8(ascii: "E") {
            offset += 1
            isInteger = false
            if offset < bytes.count, bytes[offset] == UInt8(ascii: "+") || bytes[offset] == UInt8(ascii: "-") { offset += 1 }
            guard digits() > 0 else { throw error("a number has no digits in its exponent") }
        }
        let text = String(decoding: bytes[start..<offset], as: UTF8.self)
        // `-0` is the float -0.0, not the integer 0, as Cedar's reader (serde) takes it: a Long
        // written `-0` is refused there.
        if isInteger, text != "-0", let value = Int64(text) { return .integer(value) }
        guard let value = Double(text), value.isFinite else { throw error("a number is out of range") }
        return .number(value)
    }

    private mutating func string() throws(JSONSyntaxError) -> String {
        offset += 1  // the opening quote
        // The string's UTF-8, checked once at the end: raw bytes are copied as they are and
        // escapes added encoded (an escape never completes a raw sequence cut short, since an
        // encoded scalar never starts with a continuation byte, so one check finds every
        // malformed sequence).
        var utf8: [UInt8] = []
        let start = offset
        var chunkStart = offset
        var ascii = true
        while offset < bytes.count {
            let byte = bytes[offset]
            if byte == UInt8(ascii: "\"") {
                defer { offset += 1 }
                // No escape before it (the usual case): the bytes are the string; ASCII bytes
                // need no check.
                if chunkStart == start {
                    if ascii { return String(decoding: bytes[start..<offset], as: UTF8.self) }
                    guard let text = String(validating: bytes[start..<offset], as: UTF8.self) else { throw error("a string is not UTF-8") }
                    return text
                }
                utf8.append(contentsOf: bytes[chunkStart..<offset])
                // Escapes always add well-formed UTF-8, so raw bytes that are all ASCII need
                // no check either.
                if ascii { return String(decoding: utf8, as: UTF8.self) }
                guard let text = String(validating: utf8, as: UTF8.self) else { throw error("a string is not UTF-8") }
                return text
            }
            if byte < 0x20 { throw error("a control character inside a string") }
            if byte == UInt8(ascii: "\\") {
                utf8.append(contentsOf: bytes[chunkStart..<offset])
                offset += 1
                guard offset < bytes.count else { break }
                do {
                    try JSONEscape.decode(bytes, at: &offset, into: &utf8)
                } catch {
                    switch error {
                    case .cutShort: throw self.error("a \\u escape is cut short")
                    case .notHex: throw self.error("a \\u escape has a non-hex digit")
                    case .unpairedSurrogate: throw self.error("an unpaired surrogate in a \\u escape")
                    case .unknown: throw self.error("an invalid escape in a string")
                    }
                }
                chunkStart = offset
                continue
            }
            if byte >= 0x80 { ascii = false }
            offset += 1
        }
        throw error("a string is not closed")
    }
}
