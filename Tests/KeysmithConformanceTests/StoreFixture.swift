import Foundation
import Keysmith
import KeysmithPostgres
import KeysmithSecretService
import KeysmithVault
import Testing

/// A store under test, opened: the store, how to open a second, independent handle on the same
/// data (a fresh process would read what that handle reads), the arguments with which a
/// `store-race` process opens it too, and how to clean up.
struct OpenedStore: Sendable {
    let store: any SecureStore
    /// Opens another handle on the same data: the vault from disk, a new Secret Service
    /// connection; the memory store can only hand back itself.
    let reopen: @Sendable () throws -> any SecureStore
    /// `store-race` arguments (backend and location) for stores that other processes can open.
    let processArguments: [String]?
    let cleanup: @Sendable () -> Void
}

/// A store under test: how to make a fresh one. The conformance suite is the definition of a
/// store: a new backend joins by adding one fixture to ``all``.
struct StoreFixture: Sendable, CustomTestStringConvertible {
    let name: String
    let open: @Sendable () throws -> OpenedStore

    var testDescription: String { name }

    /// The store and its cleanup, for tests that need no second handle.
    func make() throws -> (store: any SecureStore, cleanup: @Sendable () -> Void) {
        let opened = try open()
        return (opened.store, opened.cleanup)
    }

    static let memory = StoreFixture(name: "memory") {
        let store = MemoryStore()
        return OpenedStore(store: store, reopen: { store }, processArguments: nil, cleanup: {})
    }

    /// The key every test vault opens with (the `store-race` helper uses the same).
    static let vaultKey = [UInt8](repeating: 7, count: 32)

    /// A fresh file vault in a temporary directory, unlocked by a key (no KDF cost per test).
    static let vault = StoreFixture(name: "file vault") {
        let directory = temporaryVaultPath()
        let vault = try FileVault.create(at: directory, credential: .key(vaultKey))
        return OpenedStore(
            store: vault, reopen: { try FileVault.open(at: directory, credential: .key(vaultKey)) },
            processArguments: ["vault", directory], cleanup: { try? FileManager.default.removeItem(atPath: directory) })
    }

    /// A file vault unlocked by a passphrase through scrypt, each handle opened from disk.
    static let passphraseVault = StoreFixture(name: "file vault (passphrase)") {
        let directory = temporaryVaultPath()
        _ = try FileVault.create(at: directory, credential: .passphrase("conformance"), scrypt: .testing)
        let vault = try FileVault.open(at: directory, credential: .passphrase("conformance"))
        return OpenedStore(
            store: vault, reopen: { try FileVault.open(at: directory, credential: .passphrase("conformance")) },
            processArguments: nil, cleanup: { try? FileManager.default.removeItem(atPath: directory) })
    }

    /// The Secret Service (a private gnome-keyring-daemon that scripts/test.sh starts), each
    /// test in a namespace of its own, removed afterwards.
    static let secretService = StoreFixture(name: "Secret Service") {
        guard secretServiceProvided else { throw MissingPart("no private Secret Service: run the tests through scripts/test.sh (scripts/with-secret-service.sh)") }
        let namespace = "conformance-\(UUID().uuidString)"
        let store = try SecretServiceStore(namespace: namespace, timeout: .seconds(20))
        return OpenedStore(
            store: store, reopen: { try SecretServiceStore(namespace: namespace, timeout: .seconds(20)) },
            processArguments: ["secret-service", namespace],
            cleanup: {
                if let items = try? store.search(ItemQuery(namespace: .any)), !items.isEmpty {
                    try? store.perform(items.map { .delete($0.key) })
                }
            })
    }

    /// Whether this run has a Secret Service to test against (scripts/test.sh provides one).
    static let secretServiceProvided = ProcessInfo.processInfo.environment["KEYSMITH_TEST_SECRET_SERVICE"] == "1"

    /// The PostgreSQL server that scripts/test.sh starts (scripts/with-postgres.sh), if any.
    static let databaseURL = ProcessInfo.processInfo.environment["KEYSMITH_TEST_DATABASE_URL"]
    /// The master key every test namespace opens with (the `store-race` helper uses the same).
    static let postgresKey = [UInt8](repeating: 9, count: 32)

    /// A PostgreSQL store, each test in a namespace of its own, emptied afterwards.
    static let postgres = StoreFixture(name: "PostgreSQL") {
        guard let databaseURL else { throw MissingPart("no PostgreSQL server: run the tests through scripts/test.sh (scripts/with-postgres.sh)") }
        let settings = try PostgresConnectionSettings(url: databaseURL)
        try PostgresStore.initialize(settings, masterKey: .key(postgresKey))
        let namespace = "conformance-\(UUID().uuidString)"
        let store = try PostgresStore(settings, namespace: namespace, masterKey: .key(postgresKey))
        return OpenedStore(
            store: store, reopen: { try PostgresStore(settings, namespace: namespace, masterKey: .key(postgresKey)) },
            processArguments: ["postgres", namespace],
            cleanup: {
                if let items = try? store.search(ItemQuery(namespace: .any)), !items.isEmpty {
                    try? store.perform(items.map { .delete($0.key) })
                }
            })
    }

    /// Every store the suite runs against: always all five. A store whose real part this run
    /// lacks fails each of its cases, naming the part, rather than leaving the suite smaller
    /// without a word.
    static let all: [StoreFixture] = [memory, vault, passphraseVault, secretService, postgres]

    /// The stores that several processes can share.
    static let shared: [StoreFixture] = [vault, secretService, postgres]

    static let mebibyte = Data((0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) })

    func withStore(_ body: (any SecureStore) throws -> Void) throws {
        let opened = try open()
        defer { opened.cleanup() }
        try body(opened.store)
    }

    func withOpened(_ body: (OpenedStore) throws -> Void) throws {
        let opened = try open()
        defer { opened.cleanup() }
        try body(opened)
    }

    func withStoreAsync(_ body: (any SecureStore) async throws -> Void) async throws {
        let opened = try open()
        defer { opened.cleanup() }
        try await body(opened.store)
    }
}

/// A real part a fixture needs is not there (the test then fails, naming it).
struct MissingPart: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

func temporaryVaultPath() -> String {
    FileManager.default.temporaryDirectory.appendingPathComponent("keysmith-conformance-\(UUID().uuidString)").path
}

/// The directory of the built products (the test runner sits beside `store-race`).
let productsDirectory: String = {
    let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    var url = URL(fileURLWithPath: executable).deletingLastPathComponent()
    if url.pathExtension == "xctest" { url.deleteLastPathComponent() }
    return url.path
}()

/// Runs several `store-race` processes that start together, and returns each one's output lines.
///
/// - Parameter argumentLists: One argument list per process (after the store's arguments).
/// - Returns: Each process's stdout lines, in order.
func race(_ opened: OpenedStore, _ argumentLists: [[String]]) throws -> [[String]] {
    let storeArguments = try #require(opened.processArguments)
    let start = FileManager.default.temporaryDirectory.appendingPathComponent("race-start-\(UUID().uuidString)").path
    defer { try? FileManager.default.removeItem(atPath: start) }
    var processes: [(Process, Pipe, String)] = []
    for arguments in argumentLists {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: productsDirectory + "/store-race")
        process.arguments = storeArguments + arguments
        var environment = ProcessInfo.processInfo.environment
        environment["STORE_RACE_START"] = start
        process.environment = environment
        let output = Pipe()
        process.standardOutput = output
        // Standard error goes to a file, shown when the process fails.
        let errors = start + "-\(processes.count).err"
        guard FileManager.default.createFile(atPath: errors, contents: nil) else { throw CocoaError(.fileWriteUnknown) }
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: errors))
        try process.run()
        processes.append((process, output, errors))
    }
    // The racers start when this file appears: one that cannot be made would leave them waiting.
    guard FileManager.default.createFile(atPath: start, contents: Data()) else { throw CocoaError(.fileWriteUnknown) }
    return processes.map { process, pipe, errors in
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let lines = String(decoding: data, as: UTF8.self).split(separator: "\n").map(String.init)
        let stderr = (try? String(contentsOfFile: errors, encoding: .utf8)) ?? ""
        try? FileManager.default.removeItem(atPath: errors)
        #expect(process.terminationStatus == 0, "store-race failed: \(lines.last ?? "") \(stderr)")
        return lines
    }
}
