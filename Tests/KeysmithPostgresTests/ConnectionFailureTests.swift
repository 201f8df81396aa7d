import Foundation
import Keysmith
@testable import KeysmithPostgres
import Testing

/// A connection that cannot be made says what failed (refused, no socket, a password needed),
/// not the client library's code name (`connectionError`, `authMechanismRequiresPassword`).
@Suite("PostgreSQL store: why a connection failed", .enabled(if: ProcessInfo.processInfo.environment["KEYSMITH_TEST_POSTGRES_BIN"] != nil))
struct ConnectionFailureTests {
    static let master = PostgresMasterKey.key([UInt8](repeating: 3, count: 32))

    /// The error opening the store with these settings.
    func failure(_ settings: PostgresConnectionSettings) -> KeysmithError? {
        #expect(throws: KeysmithError.self) { _ = try PostgresStore(settings, masterKey: Self.master) }
    }

    @Test("a port where nothing listens: the connection was refused")
    func refused() throws {
        // A server's own port, after the server stopped: nothing listens there now.
        let server = try PrivatePostgres(tcp: true)
        defer { server.destroy() }
        try server.stop(mode: "fast")
        let error = failure(PostgresConnectionSettings(host: "127.0.0.1", port: server.port, user: "keysmith", database: "keysmith"))
        #expect(error?.code == .storeUnavailable)
        #expect(error?.message.contains("the connection was refused") == true, "\(String(describing: error))")
        #expect(error?.message.contains("connectionError") == false)
    }

    @Test("a socket directory with no server in it: no server socket at that path")
    func missingSocket() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("keysmith-no-server-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let error = failure(PostgresConnectionSettings(socketDirectory: directory, user: "keysmith", database: "keysmith"))
        #expect(error?.code == .storeUnavailable)
        #expect(error?.message.contains("no server socket at that path") == true, "\(String(describing: error))")
    }

    @Test("a server that asks for a password the URL does not give: says so, in words; with the password it opens")
    func passwordRequired() throws {
        let server = try PrivatePostgres()
        defer { server.destroy() }
        // The role gets a password; then every socket connection must give it (SCRAM).
        try PrivatePostgres.run(["\(server.bin)/psql", "-h", server.directory, "-p", "\(server.port)", "-U", "keysmith", "-d", "keysmith",
                                 "-v", "ON_ERROR_STOP=1", "-c", "alter role keysmith password 'correct horse'"])
        try server.requirePasswords()
        let error = failure(server.settings)
        #expect(error?.code == .storeUnavailable)
        #expect(error?.message.contains("the server asks for a password and the URL gives none") == true, "\(String(describing: error))")
        #expect(error?.message.contains("authMechanismRequiresPassword") == false)

        var withPassword = server.settings
        withPassword.password = "wrong"
        let wrong = failure(withPassword)
        #expect(wrong?.message.contains("wrong") == false, "a password never appears in a message: \(String(describing: wrong))")
        withPassword.password = "correct horse"
        try PostgresStore.initialize(withPassword, masterKey: Self.master)
        let store = try PostgresStore(withPassword, masterKey: Self.master)
        try store.upsert(ItemAttributes(key: .genericPassword(service: "s", account: "a")), secret: Data("x".utf8))
        #expect(try store.read(.genericPassword(service: "s", account: "a"))?.secret == Data("x".utf8))
    }
}
