import Foundation
import Keysmith
import Testing

/// A store under test: how to make a fresh one and how to clean up after it.
struct StoreFixture: Sendable, CustomTestStringConvertible {
    let name: String
    let make: @Sendable () throws -> (store: any SecureStore, cleanup: @Sendable () -> Void)

    var testDescription: String { name }

    static let memory = StoreFixture(name: "memory") { (MemoryStore(), {}) }

    /// Every store the suite runs against.
    static let all: [StoreFixture] = [memory]

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
