import Foundation
import Keysmith
import KeysmithSecretService
import Testing

@Suite("Secret Service: batches that fail midway", .enabled(if: secretServiceProvided, "run through scripts/test.sh, which starts a private Secret Service"))
struct RollbackTests {
    static let keys = (0..<3).map { ItemKey.genericPassword(service: "rollback", account: "a\($0)") }

    func store() throws -> SecretServiceStore {
        try SecretServiceStore(namespace: "rollback-\(UUID().uuidString)", timeout: .seconds(20))
    }

    func cleanup(_ store: SecretServiceStore) {
        if let items = try? store.search(ItemQuery(namespace: .any)), !items.isEmpty {
            try? store.perform(items.map { .delete($0.key) })
        }
    }

    @Test("a write failing midway is rolled back: the items changed before it hold their old values again")
    func rolledBack() throws {
        let store = try store()
        defer { cleanup(store) }
        try store.create(ItemAttributes(key: Self.keys[0], label: "old"), secret: Data("old".utf8))
        store.injectFaults(.init(failWrite: 2))
        let error = #expect(throws: KeysmithError.self) {
            try store.perform([
                .update(ItemAttributes(key: Self.keys[0], label: "new"), secret: Data("new".utf8)),
                .create(ItemAttributes(key: Self.keys[1]), secret: Data("created".utf8)),
                .create(ItemAttributes(key: Self.keys[2]), secret: Data("never".utf8)),
            ])
        }
        #expect(error?.code == .storeUnavailable)
        let old = try #require(try store.read(Self.keys[0]))
        #expect(old.secret == Data("old".utf8))
        #expect(old.attributes.label == "old")
        #expect(try store.read(Self.keys[1]) == nil)
        #expect(try store.read(Self.keys[2]) == nil)
        #expect(try store.search(ItemQuery()).count == 1)
    }

    @Test("a rollback that fails too throws partially applied, naming every key left changed")
    func rollbackFails() throws {
        let store = try store()
        defer { cleanup(store) }
        try store.create(ItemAttributes(key: Self.keys[0]), secret: Data("old".utf8))
        store.injectFaults(.init(failWrite: 2, failRollback: true))
        let error = #expect(throws: KeysmithError.self) {
            try store.perform([
                .update(ItemAttributes(key: Self.keys[0]), secret: Data("new".utf8)),
                .create(ItemAttributes(key: Self.keys[1]), secret: Data("created".utf8)),
                .create(ItemAttributes(key: Self.keys[2]), secret: Data("never".utf8)),
            ])
        }
        #expect(error?.code == .partiallyApplied)
        #expect(error?.message.contains(Self.keys[0].description) == true)
        #expect(error?.message.contains(Self.keys[1].description) == true)
        #expect(error?.message.contains(Self.keys[2].description) == false)
        // What the message says is what the store holds.
        #expect(try store.read(Self.keys[0])?.secret == Data("new".utf8))
        #expect(try store.read(Self.keys[1])?.secret == Data("created".utf8))
    }
}
