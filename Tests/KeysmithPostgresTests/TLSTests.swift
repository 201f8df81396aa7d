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

    @Test("TLS settings in URLs: verify-full by default off this machine, plain text on loopback; modes that fall back to plain text, TLS over a socket, roots without verification and a parameter given twice are refused")
    func urls() throws {
        for (url, mode) in [
            ("postgresql://u@db.internal/k", PostgresConnectionSettings.TLSMode.verifyFull),
            ("postgresql://u@10.0.0.5:6543/k", .verifyFull),
            ("postgresql://u@localhost/k", .disable),
            ("postgresql://u@127.0.0.1/k", .disable),
            ("postgresql://u@127.1.2.3/k", .disable),
            ("postgresql://u@/k?host=::1", .disable),
            ("postgresql://u@[::1]:5433/k", .disable),
            ("postgresql://u@[2001:db8::7]/k", .verifyFull),
            ("postgresql://u@localhost/k?sslrootcert=/etc/ca.pem", .verifyFull),
            ("postgresql://u@db.internal/k?sslmode=disable", .disable),
            ("postgresql://u@db.internal/k?sslmode=require", .require),
            ("postgresql://u@db.internal/k?sslmode=verify-ca&sslrootcert=/etc/ca.pem", .verifyCA),
            ("postgresql://u@/k?host=/run/postgresql", .disable),
            ("postgresql://u@/k?host=/run/postgresql&sslmode=disable", .disable),
        ] {
            let settings = try PostgresConnectionSettings(url: url)
            #expect(settings.tls == mode, "\(url)")
        }
        let bracketed = try PostgresConnectionSettings(url: "postgresql://u@[::1]:5433/k")
        #expect(bracketed.host == "::1" && bracketed.port == 5433, "an IPv6 literal is used without its brackets")
        #expect(try PostgresConnectionSettings(url: "postgresql://u@localhost.evil.example/k").tls == .verifyFull)
        #expect(try PostgresConnectionSettings(url: "postgresql://u@127.0.0.1.example/k").tls == .verifyFull)
        for url in [
            "postgresql://u:pw@db.internal/k?sslmode=prefer",
            "postgresql://u:pw@db.internal/k?sslmode=allow",
            "postgresql://u:pw@db.internal/k?sslmode=VERIFY-FULL",
            "postgresql://u:pw@/k?host=/run/postgresql&sslmode=require",
            "postgresql://u:pw@/k?host=/run/postgresql&sslrootcert=/etc/ca.pem",
            "postgresql://u:pw@db.internal/k?sslmode=require&sslrootcert=/etc/ca.pem",
            "postgresql://u:pw@db.internal/k?sslmode=disable&sslrootcert=/etc/ca.pem",
            "postgresql://u:pw@db.internal/k?sslrootcert=",
            "postgresql://u:pw@db.internal/k?sslmode=verify-full&sslmode=disable",
        ] {
            let error = #expect(throws: KeysmithError.self, "\(url)") { try PostgresConnectionSettings(url: url) }
            #expect(error?.code == .invalidArgument, "\(url)")
            #expect(error?.message.contains("pw") == false)
        }
    }
}
