import FoundationEssentials

/// Any JSON value, decoded strictly (a boolean is never a number, nor a number a boolean) and
/// encoded back as it came: what the command carries through a batch line unchanged, and what
/// the provider module reads answers with. One copy for the package.
package enum JSONValue: Codable, Sendable, Hashable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    package init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() { self = .null }
        else if let value = try? container.decode(Bool.self) { self = .bool(value) }
        else if let value = try? container.decode(Double.self) { self = .number(value) }
        else if let value = try? container.decode(String.self) { self = .string(value) }
        else if let value = try? container.decode([JSONValue].self) { self = .array(value) }
        else { self = .object(try container.decode([String: JSONValue].self)) }
    }

    package func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .number(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }

    /// The bytes as a JSON object, or `nil` when they are not one.
    package static func object(_ bytes: [UInt8]) -> [String: JSONValue]? {
        guard case .object(let object)? = try? JSONDecoder().decode(JSONValue.self, from: Data(bytes)) else { return nil }
        return object
    }

    /// The string, when it is one.
    package var string: String? { if case .string(let value) = self { value } else { nil } }
    /// The number, when it is one.
    package var number: Double? { if case .number(let value) = self { value } else { nil } }
    /// The boolean, when it is one.
    package var bool: Bool? { if case .bool(let value) = self { value } else { nil } }
}
