import Keysmith

/// JSON read strictly and written back as compact text, without Foundation: what a token
/// response's additional fields are kept as (docs/format.md, `KSTOKEN2`).
///
/// The text written has no white space; an object's members are sorted by the UTF-8 bytes of
/// their names (the same order on every machine, whatever its locale); a number is kept as the
/// provider wrote it (no digit is lost or changed); a string is written with only the escapes
/// JSON requires (a quote, a backslash, control characters), everything else as UTF-8.
///
/// ```swift
/// try CompactJSON.members(of: Array(#"{"team": {"name": "Acme", "id": 1.50}}"#.utf8)).first?.text
/// // {"id":1.50,"name":"Acme"}
/// ```
package enum CompactJSON {
    /// How deep arrays and objects may nest.
    static let maximumDepth = 512

    /// Why ``members(of:limit:unlimited:)`` read no members.
    package enum Failure: Error, Equatable {
        /// The bytes are not one JSON object as RFC 8259 writes it (malformed, a trailing
        /// comma, a lone surrogate escape, not UTF-8, nested too deeply, or anything after it).
        case notJSON
        /// The value of this member, written compactly, would be longer than the limit.
        case tooLarge(String)
    }

    /// The members of the JSON object `bytes` holds, in the order written, each value as
    /// compact text of at most `limit` bytes (reading stops at the first that would be longer),
    /// except the members named in `unlimited`. A leading byte order mark is skipped, as
    /// RFC 8259 §8.1 allows.
    package static func members(of bytes: [UInt8], limit: Int = .max, unlimited: Set<String> = []) throws(Failure) -> [(name: String, text: String)] {
        var reader = Reader(bytes: bytes, limit: limit, unlimited: unlimited)
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { reader.offset = 3 }
        guard let members = reader.topLevelObject() else { throw reader.tooLarge.map(Failure.tooLarge) ?? .notJSON }
        return members.map { ($0.name, String(decoding: $0.text, as: UTF8.self)) }
    }

    /// ``members(of:limit:unlimited:)`` for an answer that must be kept whatever its extra
    /// members hold (a token response whose refresh token the provider has already spent): a
    /// top-level member whose value cannot be kept (longer than `limit`, a string holding a lone
    /// surrogate escape or bytes that are not UTF-8) is skipped and named in `dropped`; `nil` only
    /// when the bytes are not one JSON object at all.
    ///
    /// ```swift
    /// let read = CompactJSON.lenientMembers(of: Array(#"{"a":1,"b":"\ud800"}"#.utf8))
    /// // read?.members: [("a", "1")], read?.dropped: ["b"]
    /// ```
    package static func lenientMembers(of bytes: [UInt8], limit: Int = .max, unlimited: Set<String> = [])
        -> (members: [(name: String, text: String)], dropped: [String])?
    {
        var reader = Reader(bytes: bytes, limit: limit, unlimited: unlimited)
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { reader.offset = 3 }
        var members: [(name: String, text: String)] = []
        var dropped: [String] = []
        guard reader.take(UInt8(ascii: "{")) else { return nil }
        if !reader.take(UInt8(ascii: "}")) {
            repeat {
                reader.skipSpace()
                guard let name = reader.string(), reader.take(UInt8(ascii: ":")) else { return nil }
                reader.member = name
                reader.memberLimit = unlimited.contains(name) ? .max : limit
                reader.tooLarge = nil
                let start = reader.offset
                var text: [UInt8] = []
                if reader.value(into: &text, depth: 1), reader.fits(text.count) {
                    members.append((name, String(decoding: text, as: UTF8.self)))
                } else {
                    reader.offset = start
                    guard reader.skipValue(depth: 1) else { return nil }
                    dropped.append(name)
                }
            } while reader.take(UInt8(ascii: ","))
            guard reader.take(UInt8(ascii: "}")) else { return nil }
        }
        guard reader.atEnd else { return nil }
        return (members, dropped)
    }

    /// The string a JSON string literal (quotes included) stands for, its escapes decoded;
    /// `nil` when it is not one.
    package static func string(literal bytes: some Collection<UInt8>) -> String? {
        var reader = Reader(bytes: Array(bytes), limit: .max, unlimited: [])
        guard let text = reader.string(), reader.atEnd else { return nil }
        return text
    }

    private struct Reader {
        let bytes: [UInt8]
        /// The longest compact text a member's value may have, and the members it does not bind.
        let limit: Int
        let unlimited: Set<String>
        var offset = 0
        /// The member whose value passed `limit`, when reading stopped for that.
        var tooLarge: String?
        /// The member being read, and its limit.
        var member = ""
        var memberLimit = Int.max

        init(bytes: [UInt8], limit: Int, unlimited: Set<String>) {
            self.bytes = bytes
            self.limit = limit
            self.unlimited = unlimited
        }

        /// Whether `count` bytes of compact text are within the member's limit (noting the
        /// member when they are not): checked as text grows, so a deep or long value stops early.
        mutating func fits(_ count: Int) -> Bool {
            guard count > memberLimit else { return true }
            tooLarge = member
            return false
        }

        var atEnd: Bool {
            mutating get {
                skipSpace()
                return offset == bytes.count
            }
        }

        mutating func skipSpace() {
            while offset < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[offset]) { offset += 1 }
        }

        mutating func take(_ byte: UInt8) -> Bool {
            skipSpace()
            guard offset < bytes.count, bytes[offset] == byte else { return false }
            offset += 1
            return true
        }

        /// The object's members, each value as compact text, and nothing after the object.
        mutating func topLevelObject() -> [(name: String, text: [UInt8])]? {
            guard let members = objectMembers(depth: 0, written: nil), atEnd else { return nil }
            return members
        }

        /// The members of the object at `offset`, in the order written, each value as compact
        /// text. At the top level (`written` nil) each member is held to its own limit; inside a
        /// value, the object's text with the `written` bytes before it is held to the limit of
        /// the member it is in.
        mutating func objectMembers(depth: Int, written: Int?) -> [(name: String, text: [UInt8])]? {
            guard take(UInt8(ascii: "{")) else { return nil }
            var members: [(name: String, text: [UInt8])] = []
            if take(UInt8(ascii: "}")) { return members }
            var length = 2  // the braces, and each member's quotes, colon and comma as added
            repeat {
                skipSpace()
                guard let name = string(), take(UInt8(ascii: ":")) else { return nil }
                if written == nil {
                    member = name
                    memberLimit = unlimited.contains(name) ? .max : limit
                }
                var text: [UInt8] = []
                guard value(into: &text, depth: depth + 1) else { return nil }
                members.append((name, text))
                length += name.utf8.count + text.count + 4
                guard fits(written.map { $0 + length } ?? text.count) else { return nil }
            } while take(UInt8(ascii: ","))
            guard take(UInt8(ascii: "}")) else { return nil }
            return members
        }

        /// Steps over one value by its structure alone (any escape in a string is stepped
        /// over, a lone surrogate included): how a member that cannot be kept is skipped.
        mutating func skipValue(depth: Int) -> Bool {
            skipSpace()
            guard offset < bytes.count, depth <= CompactJSON.maximumDepth else { return false }
            switch bytes[offset] {
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                let close = bytes[offset] == UInt8(ascii: "{") ? UInt8(ascii: "}") : UInt8(ascii: "]")
                let isObject = close == UInt8(ascii: "}")
                offset += 1
                if take(close) { return true }
                repeat {
                    if isObject {
                        skipSpace()
                        guard skipString(), take(UInt8(ascii: ":")) else { return false }
                    }
                    guard skipValue(depth: depth + 1) else { return false }
                } while take(UInt8(ascii: ","))
                return take(close)
            case UInt8(ascii: "\""):
                return skipString()
            case UInt8(ascii: "t"):
                var ignored: [UInt8] = []
                return word("true", into: &ignored)
            case UInt8(ascii: "f"):
                var ignored: [UInt8] = []
                return word("false", into: &ignored)
            case UInt8(ascii: "n"):
                var ignored: [UInt8] = []
                return word("null", into: &ignored)
            default:
                var ignored: [UInt8] = []
                return number(into: &ignored)
            }
        }

        /// Steps over a string literal without decoding it.
        mutating func skipString() -> Bool {
            guard offset < bytes.count, bytes[offset] == UInt8(ascii: "\"") else { return false }
            offset += 1
            while offset < bytes.count {
                let byte = bytes[offset]
                offset += 1
                if byte == UInt8(ascii: "\"") { return true }
                if byte == UInt8(ascii: "\\") { offset += 1 } else if byte < 0x20 { return false }
            }
            return false
        }

        /// Reads one value, appending its compact text to `out`.
        mutating func value(into out: inout [UInt8], depth: Int) -> Bool {
            skipSpace()
            guard offset < bytes.count, depth <= CompactJSON.maximumDepth else { return false }
            switch bytes[offset] {
            case UInt8(ascii: "{"):
                guard let members = objectMembers(depth: depth, written: out.count) else { return false }
                out.append(UInt8(ascii: "{"))
                for (index, member) in members.sorted(by: { $0.name.utf8.lexicographicallyPrecedes($1.name.utf8) }).enumerated() {
                    if index > 0 { out.append(UInt8(ascii: ",")) }
                    CompactJSON.append(member.name, to: &out)
                    out.append(UInt8(ascii: ":"))
                    out += member.text
                }
                out.append(UInt8(ascii: "}"))
                return true
            case UInt8(ascii: "["):
                offset += 1
                out.append(UInt8(ascii: "["))
                if !take(UInt8(ascii: "]")) {
                    var first = true
                    repeat {
                        if !first { out.append(UInt8(ascii: ",")) }
                        first = false
                        guard value(into: &out, depth: depth + 1), fits(out.count) else { return false }
                    } while take(UInt8(ascii: ","))
                    guard take(UInt8(ascii: "]")) else { return false }
                }
                out.append(UInt8(ascii: "]"))
                return true
            case UInt8(ascii: "\""):
                guard let text = string(), fits(out.count + text.utf8.count) else { return false }
                CompactJSON.append(text, to: &out)
                return fits(out.count)
            case UInt8(ascii: "t"): return word("true", into: &out)
            case UInt8(ascii: "f"): return word("false", into: &out)
            case UInt8(ascii: "n"): return word("null", into: &out)
            default: return number(into: &out)
            }
        }

        mutating func word(_ word: String, into out: inout [UInt8]) -> Bool {
            let expected = Array(word.utf8)
            guard bytes.count - offset >= expected.count, Array(bytes[offset..<(offset + expected.count)]) == expected else { return false }
            offset += expected.count
            out += expected
            return true
        }

        /// A number as JSON writes one (`-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`),
        /// copied as written.
        mutating func number(into out: inout [UInt8]) -> Bool {
            let start = offset
            func digits() -> Int {
                let first = offset
                while offset < bytes.count, (0x30...0x39).contains(bytes[offset]) { offset += 1 }
                return offset - first
            }
            if offset < bytes.count, bytes[offset] == UInt8(ascii: "-") { offset += 1 }
            guard offset < bytes.count else { return false }
            if bytes[offset] == UInt8(ascii: "0") {
                offset += 1
            } else {
                guard digits() > 0 else { return false }
            }
            if offset < bytes.count, bytes[offset] == UInt8(ascii: ".") {
                offset += 1
                guard digits() > 0 else { return false }
            }
            if offset < bytes.count, bytes[offset] == UInt8(ascii: "e") || bytes[offset] == UInt8(ascii: "E") {
                offset += 1
                if offset < bytes.count, bytes[offset] == UInt8(ascii: "+") || bytes[offset] == UInt8(ascii: "-") { offset += 1 }
                guard digits() > 0 else { return false }
            }
            out += bytes[start..<offset]
            return true
        }

        /// A string literal at `offset`, its escapes decoded; `nil` when malformed, not UTF-8,
        /// or holding a lone surrogate.
        mutating func string() -> String? {
            guard offset < bytes.count, bytes[offset] == UInt8(ascii: "\"") else { return nil }
            offset += 1
            var utf8: [UInt8] = []
            while offset < bytes.count {
                let byte = bytes[offset]
                offset += 1
                switch byte {
                case UInt8(ascii: "\""):
                    return String(validating: utf8, as: UTF8.self)
                case UInt8(ascii: "\\"):
                    do {
                        try JSONEscape.decode(bytes, at: &offset, into: &utf8)
                    } catch {
                        return nil
                    }
                default:
                    guard byte >= 0x20 else { return nil }
                    utf8.append(byte)
                }
            }
            return nil
        }
    }

    /// Appends `text` as a JSON string literal: a quote, a backslash and control characters
    /// escaped (`\b \f \n \r \t`, else `\u00XX`), everything else as UTF-8.
    static func append(_ text: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out += Array(#"\""#.utf8)
            case UInt8(ascii: "\\"): out += Array(#"\\"#.utf8)
            case 0x08: out += Array(#"\b"#.utf8)
            case 0x0C: out += Array(#"\f"#.utf8)
            case 0x0A: out += Array(#"\n"#.utf8)
            case 0x0D: out += Array(#"\r"#.utf8)
            case 0x09: out += Array(#"\t"#.utf8)
            case 0..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                out += Array(#"\u00"#.utf8) + [hex[Int(byte >> 4)], hex[Int(byte & 0x0F)]]
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}
