import FoundationEssentials

/// Big-endian byte building and parsing (the vault format, docs/format.md, and record encodings).
package struct ByteWriter {
    package var bytes: [UInt8] = []

    package init(capacity: Int = 0) { bytes.reserveCapacity(capacity) }

    package mutating func append(_ value: UInt8) { bytes.append(value) }
    package mutating func append(_ value: [UInt8]) { bytes.append(contentsOf: value) }
    package mutating func append(_ value: some Collection<UInt8>) { bytes.append(contentsOf: value) }
    package mutating func append(_ value: UInt16) { appendInteger(value) }
    package mutating func append(_ value: UInt32) { appendInteger(value) }
    package mutating func append(_ value: UInt64) { appendInteger(value) }

    private mutating func appendInteger<T: FixedWidthInteger>(_ value: T) {
        var big = value.bigEndian
        withUnsafeBytes(of: &big) { bytes.append(contentsOf: $0) }
    }

    /// A length-prefixed field: u32 length, then the bytes.
    package mutating func appendField(_ value: some Collection<UInt8>) {
        append(UInt32(value.count))
        append(value)
    }
}

/// Reads big-endian values; every read checks the bounds and reports `nil` past the end.
package struct ByteReader {
    package let bytes: [UInt8]
    package var offset: Int

    package init(_ bytes: [UInt8], offset: Int = 0) {
        self.bytes = bytes
        self.offset = offset
    }

    package var remaining: Int { bytes.count - offset }

    package mutating func read(count: Int) -> ArraySlice<UInt8>? {
        guard count >= 0, remaining >= count else { return nil }
        defer { offset += count }
        return bytes[offset..<offset + count]
    }

    package mutating func readBytes(_ count: Int) -> [UInt8]? { read(count: count).map(Array.init) }
    package mutating func readUInt8() -> UInt8? { read(count: 1)?.first }
    package mutating func readUInt16() -> UInt16? { readInteger() }
    package mutating func readUInt32() -> UInt32? { readInteger() }
    package mutating func readUInt64() -> UInt64? { readInteger() }

    private mutating func readInteger<T: FixedWidthInteger>() -> T? {
        guard let slice = read(count: MemoryLayout<T>.size) else { return nil }
        return slice.reduce(T(0)) { ($0 << 8) | T($1) }
    }
}


/// A record's plaintext encoding: an item's attributes, dates and secret (the vault's put
/// frames, docs/format.md, and the PostgreSQL store's sealed rows, docs/postgres.md).
package enum RecordCodec {
    private enum Tag: UInt8 {
        case service = 1, account, server, port, internetProtocol, authenticationType, securityDomain, path
        case label, comment, itemDescription, creator, type, generic, secret
        /// The record type of a Keysmith record (kind 3).
        case recordType
    }

    /// The text fields of a record being decoded, one optional per tag.
    private struct StringFields {
        private var service, account, server, internetProtocol, authenticationType, securityDomain, path: String?
        private var label, comment, itemDescription, creator, type, recordType: String?

        subscript(tag: Tag) -> String? {
            get {
                switch tag {
                case .service: service
                case .account: account
                case .server: server
                case .internetProtocol: internetProtocol
                case .authenticationType: authenticationType
                case .securityDomain: securityDomain
                case .path: path
                case .label: label
                case .comment: comment
                case .itemDescription: itemDescription
                case .creator: creator
                case .type: type
                case .recordType: recordType
                case .port, .generic, .secret: nil
                }
            }
            set {
                switch tag {
                case .service: service = newValue
                case .account: account = newValue
                case .server: server = newValue
                case .internetProtocol: internetProtocol = newValue
                case .authenticationType: authenticationType = newValue
                case .securityDomain: securityDomain = newValue
                case .path: path = newValue
                case .label: label = newValue
                case .comment: comment = newValue
                case .itemDescription: itemDescription = newValue
                case .creator: creator = newValue
                case .type: type = newValue
                case .recordType: recordType = newValue
                case .port, .generic, .secret: break
                }
            }
        }
    }

    /// The canonical identity bytes of an item key, after `label`: what a record id or a blind
    /// index is the HMAC of.
    package static func identity(_ key: ItemKey, label: [UInt8]) -> [UInt8] {
        var writer = ByteWriter(capacity: 64)
        writer.append(label)
        switch key {
        case .genericPassword(let service, let account):
            writer.append(UInt8(1))
            writer.appendField(service.utf8)
            writer.appendField(account.utf8)
        case .internetPassword(let internet):
            writer.append(UInt8(2))
            writer.appendField(internet.server.utf8)
            writer.appendField(String(internet.port).utf8)
            writer.appendField(internet.internetProtocol.rawValue.utf8)
            writer.appendField(internet.authenticationType.rawValue.utf8)
            writer.appendField(internet.securityDomain.utf8)
            writer.appendField(internet.path.utf8)
            writer.appendField(internet.account.utf8)
        case .keysmithRecord(let record):
            writer.append(UInt8(3))
            writer.appendField(record.recordType.rawValue.utf8)
            writer.appendField(record.service.utf8)
            writer.appendField(record.account.utf8)
        }
        return writer.bytes
    }

    package static func encode(_ record: SecureRecord) -> [UInt8] {
        let attributes = record.attributes
        var writer = ByteWriter(capacity: 64 + record.secret.count)
        func field(_ tag: Tag, _ value: some Collection<UInt8>) {
            writer.append(tag.rawValue)
            writer.appendField(value)
        }
        func optional(_ tag: Tag, _ value: String?) {
            if let value { field(tag, value.utf8) }
        }
        switch attributes.key {
        case .genericPassword: writer.append(UInt8(1))
        case .internetPassword: writer.append(UInt8(2))
        case .keysmithRecord: writer.append(UInt8(3))
        }
        writer.append(record.info.created.timeIntervalSinceReferenceDate.bitPattern)
        writer.append(record.info.modified.timeIntervalSinceReferenceDate.bitPattern)
        writer.append(UInt8((attributes.isInvisible == true ? 1 : 0) | (attributes.isNegative == true ? 2 : 0)))
        switch attributes.key {
        case .genericPassword(let service, let account):
            field(.service, service.utf8)
            field(.account, account.utf8)
        case .keysmithRecord(let key):
            field(.recordType, key.recordType.rawValue.utf8)
            field(.service, key.service.utf8)
            field(.account, key.account.utf8)
        case .internetPassword(let internet):
            field(.account, internet.account.utf8)
            field(.server, internet.server.utf8)
            var port = ByteWriter()
            port.append(UInt16(internet.port))
            field(.port, port.bytes)
            field(.internetProtocol, internet.internetProtocol.rawValue.utf8)
            field(.authenticationType, internet.authenticationType.rawValue.utf8)
            field(.securityDomain, internet.securityDomain.utf8)
            field(.path, internet.path.utf8)
        }
        optional(.label, attributes.label)
        optional(.comment, attributes.comment)
        optional(.itemDescription, attributes.itemDescription)
        optional(.creator, attributes.creator)
        optional(.type, attributes.type)
        if let generic = attributes.generic { field(.generic, generic) }
        field(.secret, record.secret)
        return writer.bytes
    }

    package struct DecodeError: Error { package let reason: String }

    /// Decodes a record's plaintext. With `withSecret: false` the secret is skipped, not copied.
    package static func decode(_ bytes: [UInt8], withSecret: Bool) throws -> SecureRecord {
        var reader = ByteReader(bytes)
        guard let kind = reader.readUInt8(), let created = reader.readUInt64(), let modified = reader.readUInt64(),
              let flags = reader.readUInt8()
        else { throw DecodeError(reason: "the record is shorter than its fixed fields") }
        // One slot per tag and a bit per tag seen: no collection is allocated per record (a
        // bulk job decodes 100,000).
        var strings = StringFields()
        var port: Int?
        var generic: Data?
        var secret = Data()
        var seen: UInt32 = 0
        while reader.remaining > 0 {
            guard let tagByte = reader.readUInt8(), let length = reader.readUInt32(),
                  let value = reader.read(count: Int(length))
            else { throw DecodeError(reason: "a field runs past the end of the record") }
            guard let tag = Tag(rawValue: tagByte) else { throw DecodeError(reason: "unknown field \(tagByte)") }
            guard seen & (1 << tagByte) == 0 else { throw DecodeError(reason: "field \(tagByte) appears twice") }
            seen |= 1 << tagByte
            switch tag {
            case .port:
                guard value.count == 2 else { throw DecodeError(reason: "the port field is not 2 bytes") }
                port = Int(value.first!) << 8 | Int(value.last!)
            case .generic: generic = Data(value)
            case .secret: if withSecret { secret = Data(value) }
            default:
                guard let text = String(validating: value, as: UTF8.self) else {
                    throw DecodeError(reason: "field \(tagByte) is not UTF-8")
                }
                strings[tag] = text
            }
        }
        guard seen & (1 << Tag.secret.rawValue) != 0 else { throw DecodeError(reason: "the record has no secret field") }
        guard let account = strings[.account] else { throw DecodeError(reason: "the record has no account") }
        let key: ItemKey
        switch kind {
        case 1:
            guard let service = strings[.service] else { throw DecodeError(reason: "a generic password without a service") }
            key = .genericPassword(service: service, account: account)
        case 2:
            guard let server = strings[.server], let port,
                  let internetProtocol = strings[.internetProtocol].flatMap(InternetProtocol.init(rawValue:)),
                  let authenticationType = strings[.authenticationType].flatMap(InternetAuthenticationType.init(rawValue:))
            else { throw DecodeError(reason: "an internet password with missing or unknown fields") }
            key = .internetPassword(InternetPasswordKey(
                server: server, port: port, internetProtocol: internetProtocol,
                authenticationType: authenticationType, securityDomain: strings[.securityDomain] ?? "",
                path: strings[.path] ?? "", account: account))
        case 3:
            guard let service = strings[.service], let recordType = strings[.recordType] else {
                throw DecodeError(reason: "a Keysmith record without a record type or a service")
            }
            key = .keysmithRecord(KeysmithRecordKey(
                recordType: KeysmithRecordType(rawValue: recordType), service: service, account: account))
        default:
            throw DecodeError(reason: "unknown item kind \(kind)")
        }
        let attributes = ItemAttributes(
            key: key, label: strings[.label], comment: strings[.comment], itemDescription: strings[.itemDescription],
            creator: strings[.creator], type: strings[.type], isInvisible: flags & 1 != 0,
            isNegative: flags & 2 != 0, generic: generic)
        let info = ItemInfo(
            attributes: attributes, created: Date(timeIntervalSinceReferenceDate: Double(bitPattern: created)),
            modified: Date(timeIntervalSinceReferenceDate: Double(bitPattern: modified)))
        return SecureRecord(info: info, secret: secret)
    }
}
