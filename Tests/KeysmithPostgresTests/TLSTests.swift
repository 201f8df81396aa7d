import Foundation
import Keysmith
@testable import KeysmithPostgres
import Testing

/// docs/postgres.md, "Connecting": over TCP the connection is TLS, verified, unless asked
/// otherwise or to a loopback address; against a server of its own that takes TCP over TLS only.
@Suite("PostgreSQL store: TLS to a server over TCP", .enabled(if: ProcessInfo.processInfo.environment["KEYSMITH_TEST_POSTGRES_BIN"] != nil))
struct TLSTests {
    static let key = [UInt8](repeating: 4, count: 32)

    /// Whether the server sees this connection as TLS (`pg_stat_ssl`).
    static func isTLS(_ settings: PostgresConnectionSettings) throws -> Bool {
        let session = try Session.connect(settings, logger: .init(label: "tls-test"))
        defer { session.close() }
        let rows = try session.transaction { try $0.execute(PostgresQueryText.raw("SELECT ssl::text FROM pg_stat_ssl WHERE pid = pg_backend_pid()")) }
        return rows.first?.first.flatMap { $0.bytes.map { String(decoding: $0.readableBytesView, as: UTF8.self) } } == "true"
    }

    static func refusal(_ url: String) -> KeysmithError? {
        let error = #expect(throws: KeysmithError.self, "\(url)") {
            try PostgresStore(try PostgresConnectionSettings(url: url), namespace: "tls", masterKey: .key(Self.key))
        }
        print("TLS: \(url.split(separator: "@").last ?? ""): \(error.map { "\($0.code): \($0.message)" } ?? "connected")")
        return error
    }

    @Test("every sslmode against a server that takes TLS only: verified connections work, a wrong root, a wrong name, no TLS and a missing roots file are refused, each saying why")
    func modes() throws {
        let server = try PrivatePostgres(tls: true)
        defer { server.destroy() }
        let base = "postgresql://keysmith@localhost:\(server.port)/keysmith"
        let ip = "postgresql://keysmith@127.0.0.1:\(server.port)/keysmith"

        // verify-full (the default once a root is given) with the server's CA: the whole store works.
        let verified = try PostgresConnectionSettings(url: base + "?sslrootcert=\(server.certificateAuthority)")
        #expect(verified.tls == .verifyFull)
        #expect(verified.protection == "TLS verify-full")
        // The mode is not part of the store's name (the anchors know a store by it).
        #expect(verified.description == "database keysmith as keysmith on localhost:\(server.port)")
        try PostgresStore.initialize(verified, masterKey: .key(Self.key), scrypt: .testing)
        let store = try PostgresStore(verified, namespace: "tls", masterKey: .key(Self.key))
        let item = ItemKey.genericPassword(service: "s", account: "over-tls")
        try store.perform([.create(ItemAttributes(key: item), secret: Data("sealed and encrypted".utf8))])
        #expect(try store.read(item)?.secret == Data("sealed and encrypted".utf8))
        #expect(try Self.isTLS(verified))

        // verify-ca checks the chain, not the name: 127.0.0.1 is not in the certificate, and is accepted.
        #expect(try Self.isTLS(try PostgresConnectionSettings(url: ip + "?sslmode=verify-ca&sslrootcert=\(server.certificateAuthority)")))
        // require encrypts without verifying anything.
        #expect(try Self.isTLS(try PostgresConnectionSettings(url: base + "?sslmode=require")))

        // verify-full to an address the certificate does not name.
        let wrongName = Self.refusal(ip + "?sslmode=verify-full&sslrootcert=\(server.certificateAuthority)")
        #expect(wrongName?.code == .storeUnavailable && wrongName?.message.contains("does not name the host") == true, "\(String(describing: wrongName))")
        // A certificate from another CA, and the system's roots (which do not hold this CA).
        for url in [base + "?sslrootcert=\(server.otherCertificateAuthority)", base + "?sslmode=verify-full"] {
            let untrusted = Self.refusal(url)
            #expect(untrusted?.code == .storeUnavailable && untrusted?.message.contains("did not verify") == true, "\(url): \(String(describing: untrusted))")
        }
        // Plain text: the default for localhost, and disable; this server refuses both (what a
        // server that requires TLS answers a client that does not use it).
        for url in [base, base + "?sslmode=disable"] {
            let plain = Self.refusal(url)
            #expect(plain?.code == .storeUnavailable && plain?.message.contains("no encryption") == true, "\(url): \(String(describing: plain))")
            #expect(plain?.message.contains(", no TLS)") == true, "the error names the mode: \(String(describing: plain))")
        }
        // A roots file that is not there, not certificates, or a FIFO (never waited on): named
        // before any connection. A symbolic link to the roots is followed (CA bundles often are).
        let fifo = server.directory + "/tls/fifo.pem"
        #expect(mkfifo(fifo, 0o600) == 0)
        for roots in [server.directory + "/tls/missing.pem", server.directory + "/tls/server.ext", fifo] {
            let unreadable = Self.refusal(base + "?sslrootcert=\(roots)")
            #expect(unreadable?.code == .invalidArgument && unreadable?.message.contains(roots) == true, "\(String(describing: unreadable))")
        }
        let link = server.directory + "/tls/link.pem"
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: server.certificateAuthority)
        #expect(try Self.isTLS(try PostgresConnectionSettings(url: base + "?sslrootcert=\(link)")))
        // Nothing of the item crossed in the clear or stayed on the server unsealed: it reads back
        // through a verified connection only.
        #expect(try PostgresStore(verified, namespace: "tls", masterKey: .key(Self.key)).read(item)?.secret == Data("sealed and encrypted".utf8))
    }

    @Test("a server that offers no TLS: sslmode=require is refused, saying so, never carried on in plain text; the loopback default is plain text")
    func serverWithoutTLS() throws {
        let server = try PrivatePostgres(tcp: true)
        defer { server.destroy() }
        let base = "postgresql://keysmith@localhost:\(server.port)/keysmith"
        for url in [base + "?sslmode=require", base + "?sslmode=verify-full"] {
            let refused = Self.refusal(url)
            #expect(refused?.code == .storeUnavailable && refused?.message.contains("the server does not offer TLS") == true, "\(String(describing: refused))")
        }
        #expect(try Self.isTLS(try PostgresConnectionSettings(url: base)) == false)
    }

    @Test("whoever answers the request for TLS with an error cannot forge output: its words stay on the error's line, line breaks and terminal escapes escaped")
    func preTLSRefusalIsEscaped() throws {
        // A listener that answers the first message (the request for TLS) with an ErrorResponse.
        let script = #"""
            import socket, struct
            s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1); print(s.getsockname()[1], flush=True)
            c, _ = s.accept(); c.recv(8)
            body = b"SFATAL\0C08P01\0Mhello\nkeysmith: forged line \x1b[31mred\0\0"
            c.sendall(b"E" + struct.pack("!I", len(body) + 4) + body); c.close()
            """#
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", script]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        defer { process.terminate(); process.waitUntilExit() }
        var line = Data()
        while !line.contains(10) {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            line += chunk
        }
        let port = try #require(Int(String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)))
        let refused = Self.refusal("postgresql://keysmith@localhost:\(port)/keysmith?sslmode=require")
        let message = try #require(refused?.message)
        #expect(message.contains(#"hello\nkeysmith: forged line \u{1B}[31mred"#), "\(message)")
        #expect(!message.contains("\n") && !message.contains("\u{1B}"), "\(message)")
    }
}
