import Foundation
import Keysmith
@testable import KeysmithPostgres
import Testing

/// docs/postgres.md, "Connecting": how a database URL is read. Needs no server, so it always runs.
@Suite("PostgreSQL connection settings: database URLs")
struct ConnectionSettingsTests {
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
            // verify-ca against the system's public roots, with no name check: any public certificate.
            "postgresql://u:pw@db.internal/k?sslmode=verify-ca",
        ] {
            let error = #expect(throws: KeysmithError.self, "\(url)") { try PostgresConnectionSettings(url: url) }
            #expect(error?.code == .invalidArgument, "\(url)")
            #expect(error?.message.contains("pw") == false)
        }
    }

    @Test("URL text that would be cut or read differently is refused without repeating it: a ? or # in a password, a NUL, a malformed escape in the host, an unbracketed IPv6 address, a signed port, a path of more than one name", arguments: [
        "postgresql://u:se?cret=1@127.0.0.1/db",
        "postgresql://u:se#cret@127.0.0.1/db",
        "postgresql://u:pw@127.0.0.1/db#frag",
        "postgresql://u:pw@127.0.0.1/d%00b",
        "postgresql://u:p%00w@127.0.0.1/db",
        "postgresql://u:pw@/db?host=127.0.0.1%00.evil.example",
        "postgresql://u:pw@ho%zzst/db",
        "postgresql://u:pw@::1/db",
        "postgresql://u:pw@[::1/db",
        "postgresql://u:pw@127.0.0.1:+1/db",
        "postgresql://u:pw@127.0.0.1: 5432/db",
        "postgresql://u:pw@/db?host=/run/pg&port=-1",
        "postgresql://u:pw@127.0.0.1/db/extra",
        // A / in a password: the rest read as the database's name and was printed.
        "postgresql://keysmith:12345/topsecret@localhost",
        // Control characters in names that messages print.
        "postgresql://u:pw@local%0Ahost/db",
        "postgresql://u:pw@/key%0Aallow:%20smith?host=/run/pg",
        "postgresql://%1B%5B31mevil:pw@/db?host=/run/pg",
        "postgresql://u:pw@/db?host=/run/pg%0A",
        // An unbracketed IPv6 address however written, and libpq's lists of hosts.
        "postgresql://u:pw@%3A%3A1/db",
        "postgresql://u:pw@h1:1,h2:2/db",
        "postgresql://u:pw@h1,h2/db",
        "postgresql://u:pw@/db?host=h1,h2",
        "postgresql://u:pw@/db?host=/run/one,/run/two",
        "postgresql://u:pw@/db?host=h1%2Ch2",
    ])
    func ambiguousURLs(url: String) {
        let error = #expect(throws: KeysmithError.self, "\(url)") { try PostgresConnectionSettings(url: url) }
        #expect(error?.code == .invalidArgument, "\(url)")
        for secret in ["cret", "pw", "p%00w", "topsecret", "12345"] { #expect(error?.message.contains(secret) == false, "\(url): \(error?.message ?? "")") }
    }

    @Test("a host written with escapes is decoded, as the other parts are: a %-encoded directory is a socket (libpq's form), a bracketed address keeps its zone; an @ in a parameter's value is no password")
    func escapedHosts() throws {
        let socket = try PostgresConnectionSettings(url: "postgresql://u@%2Frun%2Fpostgresql/db")
        #expect(socket.socketPath == "/run/postgresql/.s.PGSQL.5432" && socket.host == nil && socket.tls == .disable)
        #expect(try PostgresConnectionSettings(url: "postgresql://u@[fe80::1%25eth0]:5433/db").host == "fe80::1%eth0")
        #expect(try PostgresConnectionSettings(url: "postgresql://u@db.internal/db?sslrootcert=/etc/ssl/a@b.pem").trustedRoots == "/etc/ssl/a@b.pem")
        #expect(try PostgresConnectionSettings(url: "postgresql://u@%31%32%37.0.0.1/db").host == "127.0.0.1")
        #expect(try PostgresConnectionSettings(url: "postgresql://u@db%2Dprimary.internal:5433/my%2Fdb").database == "my/db")
    }

    @Test("settings built in Swift are held to the same rules when connecting: roots with disable or require, verify-ca without roots")
    func librarySettingsAreChecked() throws {
        for (mode, roots) in [(PostgresConnectionSettings.TLSMode.require, "/etc/ca.pem" as String?), (.disable, "/etc/ca.pem"), (.verifyCA, nil)] {
            let settings = PostgresConnectionSettings(host: "127.0.0.1", port: 1, user: "u", database: "d", tls: mode, trustedRoots: roots)
            let error = #expect(throws: KeysmithError.self, "\(mode)") { _ = try Session.connect(settings, logger: .init(label: "t")) }
            #expect(error?.code == .invalidArgument, "\(mode): \(String(describing: error))")
        }
        // Over a socket, TLS settings would be ignored: refused too.
        var socket = PostgresConnectionSettings(socketDirectory: "/nonexistent", user: "u", database: "d")
        socket.tls = .verifyFull
        let error = #expect(throws: KeysmithError.self) { _ = try Session.connect(socket, logger: .init(label: "t")) }
        #expect(error?.code == .invalidArgument, "\(String(describing: error))")
    }
}
