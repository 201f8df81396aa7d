import Foundation
import Keysmith
import Testing

/// Migration between every pair of stores, each way.
@Suite("migration between stores")
struct MigrationTests {
    static var pairs: [(StoreFixture, StoreFixture)] {
        let stores = [StoreFixture.memory, StoreFixture.vault, StoreFixture.secretService, StoreFixture.postgres]
        return stores.flatMap { source in stores.filter { $0.name != source.name }.map { (source, $0) } }
    }

    static let items: [SecureRecord] = [
        SecureRecord(
            info: ItemInfo(
                attributes: ItemAttributes(key: .genericPassword(service: "mail", account: "bob"), label: "Bob", comment: "c",
                                           itemDescription: "d", creator: "t", type: "password", isInvisible: true, generic: Data([7])),
                created: Date(timeIntervalSinceReferenceDate: 700_000_000.25), modified: Date(timeIntervalSinceReferenceDate: 700_000_100.5)),
            secret: Data("bob-secret".utf8)),
        SecureRecord(
            info: ItemInfo(
                attributes: ItemAttributes(key: .internetPassword(InternetPasswordKey(
                    server: "example.com", port: 8443, internetProtocol: .https, authenticationType: .httpDigest,
                    securityDomain: "realm", path: "/x", account: "alice")), isNegative: true),
                created: Date(timeIntervalSinceReferenceDate: 700_000_000), modified: Date(timeIntervalSinceReferenceDate: 700_000_000)),
            secret: Data([0, 255, 1, 254])),
        SecureRecord(
            info: ItemInfo(attributes: ItemAttributes(key: .genericPassword(service: "邮件", account: "李雷")),
                           created: Date(timeIntervalSinceReferenceDate: 1), modified: Date(timeIntervalSinceReferenceDate: 2)),
            secret: Data()),
    ]

    @Test("every item moves with all its attributes and dates; a dry run writes nothing; removal only when asked",
          arguments: pairs.map { MigrationPair(source: $0.0, destination: $0.1) })
    func migrate(_ pair: MigrationPair) throws {
        let (source, cleanSource) = try pair.source.make()
        let (destination, cleanDestination) = try pair.destination.make()
        defer { cleanSource(); cleanDestination() }
        try source.perform(Self.items.map { .restore($0) })

        let dry = try StoreMigration.migrate(from: source, to: destination, removeFromSource: true, dryRun: true)
        #expect(dry.copied.count == 3)
        #expect(try destination.search(ItemQuery()).isEmpty)
        #expect(try source.search(ItemQuery()).count == 3)

        let kept = try StoreMigration.migrate(from: source, to: destination)
        #expect(kept.copied.count == 3 && kept.removedFromSource.isEmpty)
        for item in Self.items { #expect(try destination.read(item.key)?.hasSameContents(as: item) == true, "\(item.key)") }
        #expect(try source.search(ItemQuery()).count == 3)

        // Run again (as after an interruption): identical items count as done; then remove.
        let again = try StoreMigration.migrate(from: source, to: destination, removeFromSource: true)
        #expect(again.copied.isEmpty && again.alreadyPresent.count == 3 && again.removedFromSource.count == 3)
        #expect(try source.search(ItemQuery()).isEmpty)
        for item in Self.items { #expect(try destination.read(item.key)?.hasSameContents(as: item) == true) }
    }

    @Test("conflicts: fail writes nothing, skip keeps the destination's item and the source's, overwrite replaces")
    func conflicts() throws {
        for (source, destination) in [(MemoryStore(), MemoryStore())] {
            try source.perform(Self.items.map { .restore($0) })
            var changed = Self.items[0]
            changed.secret = Data("other".utf8)
            try destination.perform([.restore(changed)])

            let failure = #expect(throws: KeysmithError.self) { try StoreMigration.migrate(from: source, to: destination, conflicts: .fail) }
            #expect(failure?.code == .duplicateItem)
            #expect(try destination.search(ItemQuery()).count == 1)

            let skipped = try StoreMigration.migrate(from: source, to: destination, conflicts: .skip, removeFromSource: true)
            #expect(skipped.skipped == [Self.items[0].key])
            #expect(try destination.read(Self.items[0].key)?.secret == Data("other".utf8))
            #expect(try source.read(Self.items[0].key) != nil)  // a skipped item stays in the source

            let overwritten = try StoreMigration.migrate(from: source, to: destination, conflicts: .overwrite, removeFromSource: true)
            #expect(overwritten.overwritten == [Self.items[0].key])
            #expect(try destination.read(Self.items[0].key)?.hasSameContents(as: Self.items[0]) == true)
            #expect(try source.search(ItemQuery()).isEmpty)
        }
    }
}

struct MigrationPair: Sendable, CustomTestStringConvertible {
    var source: StoreFixture
    var destination: StoreFixture
    var testDescription: String { "\(source.name) → \(destination.name)" }
}
