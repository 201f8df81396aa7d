import Keysmith

/// An entity's identity: its type and its id, written `Photo::"42"`.
///
/// Two entities with the same id and different types are different: `Photo::"42"` is not
/// `Album::"42"`. Types may be namespaced: `Drive::Folder::"f1"`.
///
/// ```swift
/// let photo = EntityUID(type: "Photo", id: "42")
/// print(photo)   // Photo::"42"
/// ```
public struct EntityUID: Hashable, Sendable, CustomStringConvertible, Comparable {
    /// The entity type, such as `Photo` or `Drive::Folder`.
    public var type: String { didSet { isASCII = Self.ascii(type) && Self.ascii(id) } }
    /// The entity's id within its type: any string.
    public var id: String { didSet { isASCII = Self.ascii(type) && Self.ascii(id) } }
    /// Whether type and id are ASCII only: then Swift's string equality (canonical
    /// equivalence) is byte equality, and comparing is fast.
    private var isASCII: Bool

    /// An entity reference by type and id.
    public init(type: String, id: String) {
        self.type = type
        self.id = id
        self.isASCII = Self.ascii(type) && Self.ascii(id)
    }

    /// The same, when the caller already knows whether both are ASCII (a reader that has
    /// their bytes).
    init(type: String, id: String, isASCII: Bool) {
        self.type = type
        self.id = id
        self.isASCII = isASCII
    }

    private static func ascii(_ text: String) -> Bool { text.utf8.allSatisfy { $0 < 0x80 } }

    /// The entity as policy text writes it: `Photo::"42"`.
    public var description: String { "\(type)::\(PolicyValue.quoted(id))" }

    /// Equal when the types and the ids are the same bytes, as in Cedar: `User::"é"` written
    /// with a precomposed é is not `User::"é"` written with a combining accent (Swift's `==`
    /// on strings would call them equal).
    public static func == (lhs: EntityUID, rhs: EntityUID) -> Bool {
        // Two ASCII strings are canonically equivalent only when they are the same bytes (no
        // ASCII character composes or decomposes), so Swift's equality is byte equality.
        if lhs.isASCII && rhs.isASCII { return lhs.id == rhs.id && lhs.type == rhs.type }
        return notASCIIEqual(lhs, rhs)
    }

    /// `==` when one side is not all ASCII (out of line: the common case stays small).
    @inline(never)
    private static func notASCIIEqual(_ lhs: EntityUID, _ rhs: EntityUID) -> Bool {
        guard lhs.id.utf8.count == rhs.id.utf8.count, lhs.type.utf8.count == rhs.type.utf8.count else { return false }
        // When one side is ASCII, equal lengths and Swift's equality mean the same bytes: a
        // string canonically equivalent to an ASCII one but not ASCII itself (a Kelvin sign for
        // K) is longer in UTF-8.
        if lhs.isASCII || rhs.isASCII { return lhs.id == rhs.id && lhs.type == rhs.type }
        return PolicyValue.sameBytes(lhs.id, rhs.id) && PolicyValue.sameBytes(lhs.type, rhs.type)
    }

    /// Hashes the type's and the id's bytes: hashing the id alone made every set or dictionary
    /// of entities that share one id under many types (`T1::"x"`, `T2::"x"`, …, which a request
    /// or an entity file may hold by the thousand) search in time growing with their square, and
    /// Swift's string hash (by canonical equivalence) did the same for ids spelled in equivalent
    /// ways (`a` + U+0323 + U+0301 and `a` + U+0301 + U+0323, …), which are different ids here.
    public func hash(into hasher: inout Hasher) {
        PolicyValue.hashBytes(type, into: &hasher)
        PolicyValue.hashBytes(id, into: &hasher)
    }

    /// Orders by type, then id, byte by byte (for stable output).
    public static func < (lhs: EntityUID, rhs: EntityUID) -> Bool {
        if !PolicyValue.sameBytes(lhs.type, rhs.type) { return lhs.type.utf8.lexicographicallyPrecedes(rhs.type.utf8) }
        return lhs.id.utf8.lexicographicallyPrecedes(rhs.id.utf8)
    }
}

/// A value in a policy, an entity's attribute, or a request's context.
///
/// The types are Cedar's: booleans, 64-bit integers (`Long`), strings, entity references, sets,
/// records, and the extension types `ipaddr`, `decimal`, `datetime` and `duration`.
public enum PolicyValue: Sendable, Hashable, CustomStringConvertible {
    /// `true` or `false`.
    case bool(Bool)
    /// A 64-bit signed integer; arithmetic that overflows is an error.
    case long(Int64)
    /// A string.
    case string(String)
    /// A reference to an entity.
    case entity(EntityUID)
    /// A set: no order, no duplicates (equality ignores order).
    case set(PolicyValueSet)
    /// A record: named fields.
    case record([String: PolicyValue])
    /// An IPv4 or IPv6 address or range, from `ip("10.0.0.0/8")`.
    case ip(IPAddress)
    /// A decimal with four digits after the point, from `decimal("1.2345")`, stored ×10,000.
    case decimal(Int64)
    /// An instant, from `datetime("2026-11-22T10:00:00Z")`: milliseconds since 1970 (UTC).
    case datetime(Int64)
    /// A length of time, from `duration("1h30m")`: milliseconds.
    case duration(Int64)

    /// Equal when of the same type and value, strings and ids compared byte by byte as Cedar
    /// compares them (not by Swift's canonical equivalence).
    public static func == (lhs: PolicyValue, rhs: PolicyValue) -> Bool {
        switch lhs {
        case .bool(let a): if case .bool(let b) = rhs { return a == b }
        case .long(let a): if case .long(let b) = rhs { return a == b }
        case .string(let a): if case .string(let b) = rhs { return sameBytes(a, b) }
        case .entity(let a): if case .entity(let b) = rhs { return a == b }
        case .set(let a): if case .set(let b) = rhs { return a == b }
        case .record(let a):
            if case .record(let b) = rhs { return a.count == b.count && a.allSatisfy { key, value in b[key].map { $0 == value } ?? false } }
        case .ip(let a): if case .ip(let b) = rhs { return a == b }
        case .decimal(let a): if case .decimal(let b) = rhs { return a == b }
        case .datetime(let a): if case .datetime(let b) = rhs { return a == b }
        case .duration(let a): if case .duration(let b) = rhs { return a == b }
        }
        return false
    }

    /// A string's UTF-8 bytes, eight at a time, then its length (strings are equal here when
    /// their bytes are, so their hash must not be Swift's, which is the same for every
    /// canonically equivalent spelling).
    static func hashBytes(_ text: String, into hasher: inout Hasher) {
        var word: UInt64 = 0, shift: UInt64 = 0
        for byte in text.utf8 {
            word |= UInt64(byte) << shift
            shift += 8
            if shift == 64 {
                hasher.combine(word)
                (word, shift) = (0, 0)
            }
        }
        hasher.combine(word)
        hasher.combine(text.utf8.count)
    }

    /// Hashes the kind and the value (consistent with `==`: values equal byte by byte hash alike).
    public func hash(into hasher: inout Hasher) {
        switch self {
        case .bool(let value): hasher.combine(0); hasher.combine(value)
        case .long(let value): hasher.combine(1); hasher.combine(value)
        case .string(let value): hasher.combine(2); Self.hashBytes(value, into: &hasher)
        case .entity(let value): hasher.combine(3); hasher.combine(value)
        case .set(let value): hasher.combine(4); hasher.combine(value)
        case .record(let value): hasher.combine(5); hasher.combine(value)
        case .ip(let value): hasher.combine(6); hasher.combine(value)
        case .decimal(let value): hasher.combine(7); hasher.combine(value)
        case .datetime(let value): hasher.combine(8); hasher.combine(value)
        case .duration(let value): hasher.combine(9); hasher.combine(value)
        }
    }

    /// Whether two strings are the same bytes (what Cedar's equality is).
    @inline(__always)
    static func sameBytes(_ a: String, _ b: String) -> Bool {
        // Strings of the same bytes are equal for Swift too, so Swift's (fast) answer rules
        // out most pairs; the bytes are compared only when it says equal.
        guard a.utf8.count == b.utf8.count, a == b else { return false }
        return equalStringsHaveSameBytes(a, b)
    }

    /// For two strings Swift calls equal, of the same length in UTF-8: whether their bytes are
    /// the same. Out of line: reading the strings' bytes in place would otherwise make every
    /// caller copy its strings first.
    @inline(never)
    private static func equalStringsHaveSameBytes(_ a: String, _ b: String) -> Bool {
        // Canonically equivalent, the same length in UTF-8, and one side known to be ASCII:
        // the same bytes (a string equivalent to an ASCII one but not ASCII itself, such as a
        // Kelvin sign for K, is longer in UTF-8).
        let left = a.utf8Span, right = b.utf8Span
        if left.isKnownASCII || right.isKnownASCII { return true }
        let leftBytes = left.span, rightBytes = right.span
        for index in leftBytes.indices where leftBytes[index] != rightBytes[index] { return false }
        return true
    }

    /// The type's name as schemas and errors write it.
    public var typeName: String {
        switch self {
        case .bool: "Bool"
        case .long: "Long"
        case .string: "String"
        case .entity(let uid): "entity of type \(uid.type)"
        case .set: "Set"
        case .record: "Record"
        case .ip: "ipaddr"
        case .decimal: "decimal"
        case .datetime: "datetime"
        case .duration: "duration"
        }
    }

    /// The value as policy text writes it.
    public var description: String {
        switch self {
        case .bool(let value): "\(value)"
        case .long(let value): "\(value)"
        case .string(let value): Self.quoted(value)
        case .entity(let uid): uid.description
        case .set(let set): "[" + set.elements.map(\.description).sorted().joined(separator: ", ") + "]"
        case .record(let fields):
            "{" + fields.sorted { $0.key < $1.key }.map { "\(Self.quoted($0.key)): \($0.value)" }.joined(separator: ", ") + "}"
        case .ip(let address): "ip(\(Self.quoted(address.description)))"
        case .decimal(let value): "decimal(\(Self.quoted(Self.decimalText(value))))"
        case .datetime(let value): "datetime(\(Self.quoted(DateTimeText.format(milliseconds: value))))"
        case .duration(let value): "duration(\(Self.quoted(DateTimeText.formatDuration(milliseconds: value))))"
        }
    }

    static func decimalText(_ value: Int64) -> String {
        let sign = value < 0 ? "-" : ""
        let magnitude = value.magnitude
        let fraction = String(magnitude % 10_000)
        return "\(sign)\(magnitude / 10_000)." + String(repeating: "0", count: 4 - fraction.count) + fraction
    }

    /// A string literal with Cedar's escapes.
    static func quoted(_ text: String) -> String { quoted(text, escapingNonASCII: false) }

    /// A string literal with Cedar's escapes, and every character outside ASCII escaped too
    /// (`"\u{212A}ey"`): for names that must be ASCII, so an error shows what is wrong with one
    /// that only looks right.
    static func quoted(_ text: String, escapingNonASCII: Bool) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\0": out += "\\0"
            default:
                if let escape = OneLine.escape(scalar, uppercase: escapingNonASCII) {
                    out += escape
                } else if escapingNonASCII && !scalar.isASCII {
                    out += OneLine.unicodeEscape(scalar, uppercase: true)
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out + "\""
    }
}

/// The elements of a set value: equal when they hold the same elements, in any order.
public struct PolicyValueSet: Sendable, Hashable {
    /// The elements, without duplicates, in the order first seen.
    public private(set) var elements: [PolicyValue]
    /// A hash table of the elements, for sets larger than ``linearLimit`` only: smaller ones
    /// (scopes of a token, a user's groups) are searched in order, which is faster than
    /// hashing an entity reference's two strings.
    private var members: Set<PolicyValue>?

    /// Whether every element that is a string is ASCII (then a string is found by length and
    /// Swift's equality, which for an ASCII side is byte equality).
    private var stringsAreASCII = true

    /// The largest set searched element by element.
    static let linearLimit = 16

    /// A set of these values (duplicates dropped).
    public init(_ values: some Sequence<PolicyValue>) {
        elements = []
        elements.reserveCapacity(values.underestimatedCount)
        var table: Set<PolicyValue> = []
        for value in values {
            if table.isEmpty {
                guard !elements.contains(value) else { continue }
                elements.append(value)
                if elements.count > Self.linearLimit { table = Set(elements) }
            } else if table.insert(value).inserted {
                elements.append(value)
            }
        }
        members = table.isEmpty ? nil : table
        stringsAreASCII = elements.allSatisfy { if case .string(let text) = $0 { text.utf8.allSatisfy { $0 < 0x80 } } else { true } }
    }

    /// Whether the set holds `value`.
    public func contains(_ value: PolicyValue) -> Bool {
        if let members { return members.contains(value) }
        if stringsAreASCII, case .string(let text) = value {
            let length = text.utf8.count
            return elements.contains { if case .string(let element) = $0 { element.utf8.count == length && element == text } else { false } }
        }
        return elements.contains(value)
    }

    /// The number of elements.
    public var count: Int { elements.count }

    /// Equal when they hold the same elements.
    public static func == (lhs: PolicyValueSet, rhs: PolicyValueSet) -> Bool {
        lhs.count == rhs.count && lhs.elements.allSatisfy(rhs.contains)
    }

    /// Hashes the members, ignoring order.
    public func hash(into hasher: inout Hasher) {
        var sum = 0
        for element in elements { sum = sum &+ element.hashValue }
        hasher.combine(elements.count)
        hasher.combine(sum)
    }
}

/// An IPv4 or IPv6 address with a prefix length (a single address has the full length).
public struct IPAddress: Sendable, Hashable, CustomStringConvertible {
    /// Whether it is IPv6.
    public var isV6: Bool
    /// The address bits, left-aligned in 128 bits (IPv4 uses the top 32).
    var high: UInt64
    var low: UInt64
    /// The prefix length: 32 or 128 for a single address.
    public var prefix: Int

    /// Parses `192.168.0.1`, `10.0.0.0/8`, `::1`, `2001:db8::/32` as Cedar's `ip()` does.
    public init?(_ text: String) {
        var addressText = Substring(text)
        var prefixText: Substring?
        if let slash = text.firstIndex(of: "/") {
            addressText = text[..<slash]
            prefixText = text[text.index(after: slash)...]
        }
        if addressText.contains(":") {
            guard let (high, low) = Self.parseV6(addressText) else { return nil }
            self.isV6 = true
            self.high = high
            self.low = low
            self.prefix = 128
        } else {
            let parts = addressText.split(separator: ".", omittingEmptySubsequences: false)
            guard parts.count == 4 else { return nil }
            var value: UInt64 = 0
            for part in parts {
                // ASCII digits only: `UInt64("+3")` is 3, and Cedar refuses `10.1.2.+3`.
                guard !part.isEmpty, part.count <= 3, part.utf8.allSatisfy({ (0x30...0x39).contains($0) }), let octet = UInt64(part), octet <= 255,
                      part.count == 1 || part.first != "0"
                else { return nil }
                value = value << 8 | octet
            }
            self.isV6 = false
            self.high = value << 32
            self.low = 0
            self.prefix = 32
        }
        if let prefixText {
            guard !prefixText.isEmpty, prefixText.count <= 3, prefixText.utf8.allSatisfy({ (0x30...0x39).contains($0) }),
                  prefixText.count == 1 || prefixText.first != "0",
                  let length = Int(prefixText), length <= (isV6 ? 128 : 32)
            else { return nil }
            prefix = length
        }
    }

    private static func parseV6(_ text: Substring) -> (UInt64, UInt64)? {
        guard text.allSatisfy({ $0.isHexDigit || $0 == ":" }) else { return nil }
        let halves = text.components(separatedBy: "::")
        guard halves.count <= 2 else { return nil }
        func groups(_ part: String) -> [UInt16]? {
            if part.isEmpty { return [] }
            var out: [UInt16] = []
            for group in part.split(separator: ":", omittingEmptySubsequences: false) {
                guard !group.isEmpty, group.count <= 4, let value = UInt16(group, radix: 16) else { return nil }
                out.append(value)
            }
            return out
        }
        guard let head = groups(halves[0]) else { return nil }
        var all = head
        if halves.count == 2 {
            guard let tail = groups(halves[1]), head.count + tail.count < 8 else { return nil }
            all += Array(repeating: 0, count: 8 - head.count - tail.count) + tail
        }
        guard all.count == 8 else { return nil }
        var high: UInt64 = 0, low: UInt64 = 0
        for group in all[0..<4] { high = high << 16 | UInt64(group) }
        for group in all[4..<8] { low = low << 16 | UInt64(group) }
        return (high, low)
    }

    private func masked(_ length: Int) -> (UInt64, UInt64) {
        func mask(_ bits: Int) -> UInt64 { bits <= 0 ? 0 : bits >= 64 ? ~0 : ~(~UInt64(0) >> bits) }
        return (high & mask(length), low & mask(length - 64))
    }

    /// Whether this address or range lies within `range` (same family only).
    public func isIn(_ range: IPAddress) -> Bool {
        guard isV6 == range.isV6, prefix >= range.prefix else { return false }
        return masked(range.prefix) == range.masked(range.prefix)
    }

    /// Whether it is a loopback address (127.0.0.0/8 or ::1).
    public var isLoopback: Bool {
        isV6 ? isIn(IPAddress("::1")!) : isIn(IPAddress("127.0.0.0/8")!)
    }

    /// Whether it is a multicast address (224.0.0.0/4 or ff00::/8).
    public var isMulticast: Bool {
        isV6 ? isIn(IPAddress("ff00::/8")!) : isIn(IPAddress("224.0.0.0/4")!)
    }

    /// The address as text, with its prefix when it is a range.
    public var description: String {
        var text: String
        if isV6 {
            var groups: [String] = []
            for index in 0..<8 {
                let word = index < 4 ? high >> (16 * (3 - index)) : low >> (16 * (7 - index))
                groups.append(String(UInt16(truncatingIfNeeded: word), radix: 16))
            }
            text = groups.joined(separator: ":")
        } else {
            let value = high >> 32
            text = (0..<4).map { String((value >> (8 * (3 - $0))) & 0xFF) }.joined(separator: ".")
        }
        if prefix != (isV6 ? 128 : 32) { text += "/\(prefix)" }
        return text
    }
}
