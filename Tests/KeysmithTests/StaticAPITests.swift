import Foundation
import Keysmith
import Testing

@Suite("static API", .serialized)
struct StaticAPITests {
    @Test("create, load, update and delete in one line each, against an explicit store")
    func oneLiners() throws {
        let store = MemoryStore()
        try Keysmith.create(Data("one".utf8), forAccount: "bob", inService: "mail", in: store)
        let duplicate = #expect(throws: KeysmithError.self) {
            try Keysmith.create(Data("again".utf8), forAccount: "bob", inService: "mail", in: store)
        }
        #expect(duplicate?.code == .duplicateItem)
        #expect(try Keysmith.load(forAccount: "bob", inService: "mail", from: store) == Data("one".utf8))
        try Keysmith.update(Data("two".utf8), forAccount: "bob", inService: "mail", in: store)
        #expect(try Keysmith.load(forAccount: "bob", inService: "mail", from: store) == Data("two".utf8))
        try Keysmith.delete(forAccount: "bob", inService: "mail", from: store)
        #expect(try Keysmith.load(forAccount: "bob", inService: "mail", from: store) == nil)
    }

    @Test("update keeps the item's metadata and creation date")
    func updateKeepsMetadata() throws {
        let clock = TestClock()
        let store = MemoryStore(clock: clock.now)
        let key = ItemKey.genericPassword(service: "mail", account: "bob")
        try store.create(ItemAttributes(key: key, label: "Bob", comment: "c"), secret: Data("1".utf8))
        clock.advance(60)
        try Keysmith.update(Data("2".utf8), forAccount: "bob", inService: "mail", in: store)
        let record = try #require(try store.read(key))
        #expect(record.attributes.label == "Bob")
        #expect(record.attributes.comment == "c")
        #expect(record.info.modified.timeIntervalSince(record.info.created) == 60)
    }

    @available(*, deprecated, message: "exercises the deprecated save")
    @Test("set creates or replaces, keeping the metadata; the deprecated save does the same as set")
    func setUpserts() throws {
        let store = MemoryStore()
        let key = ItemKey.genericPassword(service: "s", account: "a")
        try Keysmith.set(Data("1".utf8), forAccount: "a", inService: "s", in: store)
        try store.update(ItemAttributes(key: key, label: "L", isInvisible: true), secret: Data("1".utf8))
        try Keysmith.set(Data("2".utf8), forAccount: "a", inService: "s", in: store)
        #expect(try Keysmith.load(forAccount: "a", inService: "s", from: store) == Data("2".utf8))
        #expect(try store.read(key)?.attributes.label == "L")
        #expect(try store.read(key)?.attributes.isInvisible == true)
        try deprecatedSave(Data("3".utf8), store)
        try deprecatedSave(Data("4".utf8), store)  // a second save replaces, as the guide always said
        #expect(try Keysmith.load(forAccount: "a", inService: "s", from: store) == Data("4".utf8))
        #expect(try store.read(key)?.attributes.label == "L")
    }

    @available(*, deprecated)
    private func deprecatedSave(_ secret: Data, _ store: MemoryStore) throws {
        try Keysmith.save(secret, forAccount: "a", inService: "s", in: store)
    }

    struct Settings: Codable, Equatable { var theme: String; var size: Int }

    @available(*, deprecated)
    private func deprecatedCodableSave(_ value: Settings, _ store: MemoryStore) throws {
        try Keysmith.save(value, forAccount: "a", inService: "prefs", in: store)
    }

    @available(*, deprecated, message: "exercises the deprecated save")
    @Test("0.1's Codable save is back, deprecated: it stores what set stores, and replaces")
    func deprecatedCodableSaveForwardsToSet() throws {
        let store = MemoryStore()
        try deprecatedCodableSave(Settings(theme: "dark", size: 3), store)
        #expect(try Keysmith.load(Settings.self, forAccount: "a", inService: "prefs", from: store) == Settings(theme: "dark", size: 3))
        let viaSave = try #require(try store.read(.genericPassword(service: "prefs", account: "a"))?.secret)
        try Keysmith.set(Settings(theme: "dark", size: 3), forAccount: "b", inService: "prefs", in: store)
        #expect(try store.read(.genericPassword(service: "prefs", account: "b"))?.secret == viaSave, "the same bytes as set")
        try deprecatedCodableSave(Settings(theme: "light", size: 4), store)
        #expect(try Keysmith.load(Settings.self, forAccount: "a", inService: "prefs", from: store) == Settings(theme: "light", size: 4))
    }

    @Test("a Codable value saved by the static API loads back")
    func codable() throws {
        let store = MemoryStore()
        try Keysmith.set(["k": 1, "j": 2], forAccount: "a", inService: "s", in: store)
        #expect(try Keysmith.load([String: Int].self, forAccount: "a", inService: "s", from: store) == ["k": 1, "j": 2])
        #expect(try Keysmith.load([String: Int].self, forAccount: "b", inService: "s", from: store) == nil)
    }

    @Test("the default store is used when none is given, and its absence is a clear error")
    func defaultStore() throws {
        Keysmith.resetDefaultStore()
        let missing = #expect(throws: KeysmithError.self) {
            _ = try Keysmith.load(forAccount: "a", inService: "s")
        }
        #expect(missing?.code == .storeUnavailable)
        #expect(missing?.message.contains("setDefaultStore") == true)

        let store = MemoryStore()
        let opened = Counter()
        Keysmith.setDefaultStoreProvider {
            opened.increment()
            return store
        }
        try Keysmith.set(Data("x".utf8), forAccount: "a", inService: "s")
        #expect(try Keysmith.load(forAccount: "a", inService: "s") == Data("x".utf8))
        #expect(try store.read(.genericPassword(service: "s", account: "a")) != nil)
        #expect(opened.value == 1)
        Keysmith.resetDefaultStore()
    }
}

final class TestClock: @unchecked Sendable {
    private let lock = NSLock()
    private var current = Date(timeIntervalSince1970: 1_800_000_000)
    func now() -> Date { lock.withLock { current } }
    func advance(_ seconds: TimeInterval) { lock.withLock { current += seconds } }
}

final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func increment() { lock.withLock { count += 1 } }
    var value: Int { lock.withLock { count } }
}
