import Foundation
import Keysmith
import KeysmithSecretService
import KeysmithVault
import Testing

/// A store under test: how to make a fresh one and how to clean up after it.
struct StoreFixture: Sendable, CustomTestStringConvertible {
    let name: String
    let make: @Sendable () throws -> (store: any SecureStore, cleanup: @Sendable () -> Void)

    var testDescription: String { name }

    static let memory = StoreFixture(name: "memory") { (MemoryStore(), {}) }

    /// A fresh file vault in a temporary directory, unlocked by a key (no KDF cost per test).
    static let vault = StoreFixture(name: "file vault") {
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("keysmith-conformance-\(UUID().uuidString)").path
        let vault = try FileVault.create(at: directory, credential: .key([UInt8](repeating: 7, count: 32)))
        return (vault, { try? FileManager.default.removeItem(atPath: directory) })
    }

    /// A file vault unlocked by a passphrase through scrypt, reopened from disk before use, so
    /// every test also reads what a fresh process would.
    static let reopenedVault = StoreFixture(name: "file vault (passphrase, reopened)") {
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("keysmith-conformance-\(UUID().uuidString)").path
        _ = try FileVault.create(at: directory, credential: .passphrase("conformance"), scrypt: .testing)
        let vault = try FileVault.open(at: directory, credential: .passphrase("conformance"))
        return (vault, { try? FileManager.default.removeItem(atPath: directory) })
    }

    /// The Secret Service (a private gnome-keyring-daemon that scripts/test.sh starts), each
    /// test in a namespace of its own, removed afterwards.
    static let secretService = StoreFixture(name: "Secret Service") {
        let store = try SecretServiceStore(namespace: "conformance-\(UUID().uuidString)", timeout: .seconds(10))
        return (store, {
            if let items = try? store.search(ItemQuery()) {
                try? store.perform(items.map { .delete($0.key) })
            }
        })
    }

    /// Whether this run has a Secret Service to test against (scripts/test.sh provides one).
    static let secretServiceProvided = ProcessInfo.processInfo.environment["KEYSMITH_TEST_SECRET_SERVICE"] == "1"

    /// Every store the suite runs against.
    static let all: [StoreFixture] = [memory, vault, reopenedVault] + (secretServiceProvided ? [secretService] : [])

    static let mebibyte = Data((0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) })

    func withStore(_ body: (any SecureStore) throws -> Void) throws {
        let (store, cleanup) = try make()
        defer { cleanup() }
        try body(store)
    }

    func withStoreAsync(_ body: (any SecureStore) async throws -> Void) async throws {
        let (store, cleanup) = try make()
        defer { cleanup() }
        try await body(store)
    }
}
