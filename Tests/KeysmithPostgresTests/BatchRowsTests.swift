import Foundation
import Keysmith
import KeysmithCrypto
@testable import KeysmithPostgres
import Testing

/// The server-free half of a PostgreSQL batch (`BatchRows`): what it reads, what the batch
/// planner is told of each item, and the rows it sends, sealed, opened back here.
@Suite("a PostgreSQL batch's rows, planned without a server")
struct BatchRowsTests {
    static let keys = try! ChainLinkTests.keys()
    static let dataKey = keys.current

    static func record(_ service: String, _ account: String = "a", secret: String = "s", version: String = "") -> SecureRecord {
        let attributes = ItemAttributes(key: .genericPassword(service: service, account: account))
        return SecureRecord(info: ItemInfo(attributes: attributes, created: Date(timeIntervalSince1970: 1_000), modified: Date(timeIntervalSince1970: 1_000),
                                           version: ItemVersion(rawValue: version)), secret: Data(secret.utf8))
    }

    static let auditKey = ItemKey.keysmithRecord(KeysmithRecordKey(recordType: .auditEntry, service: "audit", account: "1"))

    /// A row as the server would hold it: the record sealed at `version`.
    static func row(_ record: SecureRecord, version: Int64) throws -> RecordRow {
        let index = keys.blindIndex(record.key)
        return RecordRow(blindIndex: index, version: version, keyID: dataKey.id,
                         sealed: try keys.seal(record, blindIndex: index, version: version, with: dataKey, ciphers: NamespaceKeys.Ciphers()))
    }

    @Test("the keys in first-seen order, once each; a trusting batch takes a replace's numeric version on the records table only; bodies are read only for update or upsert")
    func whatIsRead() throws {
        let a = Self.record("a", version: "7"), b = Self.record("b")
        let audit = SecureRecord(info: ItemInfo(attributes: ItemAttributes(key: Self.auditKey), created: Date(), modified: Date(),
                                                version: ItemVersion(rawValue: "3")), secret: Data("e".utf8))
        let operations: [StoreOperation] = [.replace(a), .delete(b.key), .replace(audit), .delete(a.key), .create(b.attributes, secret: Data())]
        let trusting = try BatchRows(operations, trusting: true, keys: Self.keys)
        #expect(trusting.distinct == [a.key, b.key, Self.auditKey])
        #expect(trusting.stated == [a.key: 7])
        #expect(trusting.toRead.map(\.0) == [b.key, Self.auditKey])
        #expect(trusting.toRead.map(\.1) == [Self.keys.blindIndex(b.key), Self.keys.blindIndex(Self.auditKey)])
        #expect(!trusting.readsRecords)
        let careful = try BatchRows(operations, trusting: false, keys: Self.keys)
        #expect(careful.stated.isEmpty && careful.toRead.count == 3)
        // A replace at a version that is not a number, or not first, is not trusted.
        let notNumeric = try BatchRows([.replace(Self.record("c", version: "x"))], trusting: true, keys: Self.keys)
        #expect(notNumeric.stated.isEmpty)
        let notFirst = try BatchRows([.delete(a.key), .replace(a)], trusting: true, keys: Self.keys)
        #expect(notFirst.stated.isEmpty)
        #expect(try BatchRows([.upsert(b.attributes, secret: Data("x".utf8))], trusting: false, keys: Self.keys).readsRecords)
        #expect(try BatchRows([.update(b.attributes, secret: Data("x".utf8))], trusting: false, keys: Self.keys).readsRecords)
    }

    @Test("what the planner is told: a stated version, nothing, a row's version, its metadata, damage for a row that does not open or opens as another item")
    func whatThePlannerIsTold() throws {
        let a = Self.record("a"), b = Self.record("b"), c = Self.record("c")
        let batch = try BatchRows([.replace(Self.record("s", version: "4")), .delete(a.key), .delete(b.key), .delete(c.key),
                                   .delete(.genericPassword(service: "none", account: "a"))], trusting: true, keys: Self.keys)
        var rows: [[UInt8]: RecordRow] = [:]
        rows[Self.keys.blindIndex(a.key)] = try Self.row(a, version: 5)
        var wrong = try Self.row(c, version: 6)  // another item's row put at b's index
        wrong.blindIndex = Self.keys.blindIndex(b.key)
        rows[Self.keys.blindIndex(b.key)] = wrong
        var garbage = try Self.row(c, version: 2)
        garbage.sealed[garbage.sealed.count - 1] ^= 1
        rows[Self.keys.blindIndex(c.key)] = garbage
        func told(_ key: ItemKey, _ metadata: Bool) -> String {
            switch batch.existing(key, needsMetadata: metadata, rows: rows) {
            case .absent: "absent"
            case .atVersion(let version): "at \(version.rawValue)"
            case .present(let info): "present \(info.version.rawValue) \(info.key == key)"
            case .damaged: "damaged"
            }
        }
        #expect(told(.genericPassword(service: "s", account: "a"), true) == "at 4")
        #expect(told(a.key, false) == "at 5")
        #expect(told(a.key, true) == "present 5 true")
        #expect(told(b.key, false) == "at 6")
        #expect(told(b.key, true) == "damaged")
        #expect(told(c.key, true) == "damaged")
        #expect(told(.genericPassword(service: "none", account: "a"), true) == "absent")
        #expect(batch.version(of: a.key, rows: rows) == 5)
        #expect(batch.version(of: .genericPassword(service: "s", account: "a"), rows: rows) == 4)
        #expect(batch.version(of: .genericPassword(service: "none", account: "a"), rows: rows) == nil)
    }

    @Test("sealed rows: a put opens back to its record at the batch's version, names the version it was read at, and its change's sealed key opens to its key; a removal carries its row's version; the audit log is append-only; a vanished row is a conflict")
    func whatIsSent() throws {
        let existing = Self.record("old"), fresh = Self.record("new", secret: "n3w")
        let batch = try BatchRows([.delete(existing.key), .create(fresh.attributes, secret: fresh.secret)], trusting: false, keys: Self.keys)
        let rows = [Self.keys.blindIndex(existing.key): try Self.row(existing, version: 9)]
        var updated = existing
        updated.secret = Data("rotated".utf8)
        let (puts, removals) = try batch.seal([.put(fresh), .put(updated), .remove(existing.key)][...], version: 12, dataKey: Self.dataKey, rows: rows)
        #expect(puts.map(\.existing) == [nil, 9])
        #expect(puts.allSatisfy { $0.table == .records })
        let opened = try Self.keys.open(RecordRow(blindIndex: puts[0].blindIndex, version: 12, keyID: Self.dataKey.id, sealed: puts[0].sealed), withSecret: true)
        #expect(opened.key == fresh.key && opened.secret == Data("n3w".utf8))
        // Sealed at the batch's version: opened at another, it does not open.
        #expect(throws: (any Error).self) {
            _ = try Self.keys.open(RecordRow(blindIndex: puts[0].blindIndex, version: 11, keyID: Self.dataKey.id, sealed: puts[0].sealed), withSecret: true)
        }
        #expect(try Self.keys.openKey(puts[1].sealedKey, blindIndex: puts[1].blindIndex, version: 12) == existing.key)
        #expect(removals.map(\.existing) == [9])
        #expect(try Self.keys.openKey(removals[0].sealedKey, blindIndex: removals[0].blindIndex, version: 12) == existing.key)
        // The audit log: a new entry is a put to its own table; one that exists is never rewritten or removed.
        let entry = SecureRecord(info: ItemInfo(attributes: ItemAttributes(key: Self.auditKey), created: Date(), modified: Date()), secret: Data("e".utf8))
        let audit = try BatchRows([.create(entry.attributes, secret: entry.secret)], trusting: false, keys: Self.keys)
        #expect(try audit.seal([.put(entry)][...], version: 12, dataKey: Self.dataKey, rows: [:]).puts.first?.table == .audit)
        let auditRows = [Self.keys.blindIndex(Self.auditKey): try Self.row(entry, version: 3)]
        for write in [ResolvedWrite.put(entry), .remove(Self.auditKey)] {
            #expect { _ = try audit.seal([write][...], version: 12, dataKey: Self.dataKey, rows: auditRows) } throws: { error in
                (error as? KeysmithError)?.code == .invalidArgument
            }
        }
        // A removal whose row is gone (deleted meanwhile): retried the careful way.
        #expect(throws: RetryableConflict.self) { _ = try batch.seal([.remove(existing.key)][...], version: 12, dataKey: Self.dataKey, rows: [:]) }
    }
}
