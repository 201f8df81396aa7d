import Keysmith

/// Where the database is: a Unix socket directory or a host, a user and a database, and how a
/// TCP connection is protected.
///
/// ```swift
/// let local = try PostgresConnectionSettings(url: "postgresql://keysmith@/keysmith?host=/run/postgresql")
/// let remote = try PostgresConnectionSettings(url: "postgresql://app@db.internal/keysmith?sslrootcert=/etc/keysmith/db-ca.pem")
/// // remote.tls == .verifyFull: TLS, the certificate chaining to that root and naming db.internal
/// ```
public struct PostgresConnectionSettings: Sendable, Hashable {
    /// How a TCP connection is protected: libpq's `sslmode` values that an attacker on the
    /// network cannot quietly turn into plain text (`prefer` and `allow` fall back to it, so they
    /// are refused).
    public enum TLSMode: String, Sendable, Hashable, CaseIterable {
        /// Plain text: for a loopback address, or a network you trust with everything the
        /// connection carries (ciphertext, the password exchange, which rows change when).
        case disable
        /// TLS, with no check of the server's certificate: hides the traffic from a listener,
        /// not from an impostor who answers in the server's place.
        case require
        /// TLS, the server's certificate chaining to a trusted root; its name is not checked.
        case verifyCA = "verify-ca"
        /// TLS, the certificate chaining to a trusted root and naming the host (a DNS name, or
        /// the IP address connected to).
        case verifyFull = "verify-full"
    }

    /// The socket file (`/run/postgresql/.s.PGSQL.5432`), when connecting over a Unix socket.
    public var socketPath: String?
    /// The host, when connecting over TCP.
    public var host: String?
    /// The TCP port.
    public var port: Int
    /// The database user.
    public var user: String
    /// The user's password, if the server asks for one (never logged or printed).
    public var password: String?
    /// The database.
    public var database: String
    /// How the TCP connection is protected; always ``TLSMode/disable`` over a Unix socket
    /// (the server offers no TLS there, and nothing crosses a network).
    public var tls: TLSMode
    /// A PEM file of the certificates trusted as roots when verifying the server
    /// (`sslrootcert`); `nil`: the system's roots.
    public var trustedRoots: String?

    /// Settings for a Unix socket (`directory` is the socket's directory, as libpq's `host=/dir`).
    public init(socketDirectory directory: String, port: Int = 5432, user: String, password: String? = nil, database: String) {
        self.socketPath = directory + "/.s.PGSQL.\(port)"
        self.host = nil
        self.port = port
        self.user = user
        self.password = password
        self.database = database
        self.tls = .disable
        self.trustedRoots = nil
    }

    /// Settings for TCP. `tls` `nil` is the default for the host: ``TLSMode/disable`` for a
    /// loopback address (`localhost`, `127.x.x.x`, `::1`), ``TLSMode/verifyFull`` for any other.
    /// The default is chosen here, once: setting ``host`` later does not change ``tls``.
    /// Connecting refuses (`KeysmithError.Code.invalidArgument`) `trustedRoots` with
    /// `disable` or `require` (they would be ignored) and `verifyCA` without them.
    public init(host: String, port: Int = 5432, user: String, password: String? = nil, database: String,
                tls: TLSMode? = nil, trustedRoots: String? = nil) {
        self.socketPath = nil
        self.host = host
        self.port = port
        self.user = user
        self.password = password
        self.database = database
        self.tls = tls ?? (Self.isLoopback(host) ? .disable : .verifyFull)
        self.trustedRoots = trustedRoots
    }

    /// Whether `host` names this machine's loopback interface: `localhost`, an IPv4 address in
    /// 127.0.0.0/8, or `::1`.
    static func isLoopback(_ host: String) -> Bool {
        let name = host.lowercased()
        if name == "localhost" || name == "::1" { return true }
        let octets = name.split(separator: ".", omittingEmptySubsequences: false)
        return octets.count == 4 && octets[0] == "127" && octets.allSatisfy { UInt8($0) != nil }
    }

    /// Parses `postgresql://user[:password]@[host][:port]/database[?parameters]` (also
    /// `postgres://`). Parameters, each at most once: `host` (one that starts with `/` is a
    /// socket directory, as for libpq), `port`, `sslmode` (``TLSMode``; by default
    /// `verify-full`, or `disable` for a loopback host) and `sslrootcert` (a PEM file of
    /// trusted roots, for `verify-ca` and `verify-full`). Throws
    /// `KeysmithError.Code.invalidArgument` for anything else, TLS asked for over a socket
    /// included; the message never repeats a password.
    public init(url: String) throws {
        let scheme = url.hasPrefix("postgresql://") ? "postgresql://" : url.hasPrefix("postgres://") ? "postgres://" : nil
        guard let scheme else { throw KeysmithError.invalidArgument("a database URL starts with postgresql://") }
        // Nothing of the URL's text is repeated while it may still be a password's: a `#` or a
        // `?` written unescaped in a password would cut it at the wrong place.
        guard !url.contains("#") else {
            throw KeysmithError.invalidArgument("the database URL holds a #: write # in a user, a password or a name as %23")
        }
        var rest = Substring(url.dropFirst(scheme.count))
        // The path (`/DATABASE`) is required, so a `?` before any `/` can only be inside the
        // user or the password; a `/` inside them puts the path's `/` in the wrong place, and
        // the rest (with the `@`) would read as the database's name.
        let beforeQuery = rest.firstIndex(of: "?").map { rest[..<$0] } ?? rest
        if !beforeQuery.contains("/"), rest[beforeQuery.endIndex...].contains("@") {
            throw KeysmithError.invalidArgument("the database URL has a ? before its @: write ? in a user or a password as %3F")
        }
        if let slash = beforeQuery.firstIndex(of: "/"), beforeQuery[slash...].contains("@") {
            throw KeysmithError.invalidArgument("the database URL's path holds an @: write / and @ in a user, a password or a name as %2F and %40")
        }
        var queryHost: String?
        var queryPort: Int?
        var mode: TLSMode?
        var roots: String?
        if let question = rest.firstIndex(of: "?") {
            var seen: Set<String> = []
            for pair in rest[rest.index(after: question)...].split(separator: "&") {
                let parts = pair.split(separator: "=", maxSplits: 1).map(String.init)
                guard parts.count == 2 else { throw KeysmithError.invalidArgument("the database URL has a malformed parameter") }
                guard seen.insert(parts[0]).inserted else {
                    throw KeysmithError.invalidArgument("the database URL gives the parameter \(parts[0]) twice")
                }
                switch parts[0] {
                case "host": queryHost = try Self.decoded(parts[1], "host parameter")
                case "port":
                    queryPort = try Self.port(parts[1])
                case "sslmode":
                    guard let given = TLSMode(rawValue: parts[1]) else {
                        let fallsBack = parts[1] == "prefer" || parts[1] == "allow"
                        throw KeysmithError.invalidArgument(
                            "the database URL's sslmode is disable, require, verify-ca or verify-full"
                                + (fallsBack ? " (\(parts[1]) falls back to plain text, which anyone on the network can force)" : ""))
                    }
                    mode = given
                case "sslrootcert":
                    roots = try Self.decoded(parts[1], "sslrootcert")
                    guard roots?.isEmpty == false else { throw KeysmithError.invalidArgument("the database URL's sslrootcert names no file") }
                default:
                    throw KeysmithError.invalidArgument(
                        "the database URL has an unknown parameter \(parts[0]) (host, port, sslmode and sslrootcert are known)")
                }
            }
            rest = rest[..<question]
        }
        guard let slash = rest.firstIndex(of: "/") else { throw KeysmithError.invalidArgument("the database URL names no database (…/DATABASE)") }
        let databaseText = rest[rest.index(after: slash)...]
        guard !databaseText.contains("/") else {
            throw KeysmithError.invalidArgument("the database URL's path is one database name (write / in a name as %2F)")
        }
        let database = try Self.decoded(databaseText, "database name")
        guard !database.isEmpty else { throw KeysmithError.invalidArgument("the database URL names no database (…/DATABASE)") }
        var authority = rest[..<slash]
        var user = "keysmith"
        var password: String?
        if let at = authority.lastIndex(of: "@") {
            let credentials = authority[..<at]
            authority = authority[authority.index(after: at)...]
            if let colon = credentials.firstIndex(of: ":") {
                user = try Self.decoded(credentials[..<colon], "user")
                password = try Self.decoded(credentials[credentials.index(after: colon)...], "password")
            } else {
                user = try Self.decoded(credentials, "user")
            }
        }
        guard !user.isEmpty else { throw KeysmithError.invalidArgument("the database URL names an empty user") }
        var host = String(authority)
        var port = queryPort ?? 5432
        if let colon = host.lastIndex(of: ":"), !host.hasPrefix("[") || host[..<colon].hasSuffix("]") {
            port = try Self.port(host[host.index(after: colon)...])
            host = String(host[..<colon])
        }
        // An IPv6 literal is written in brackets in a URL (`[::1]:5432`); the address is inside
        // (with a zone, `[fe80::1%25eth0]`, decoded as every part is).
        if host.hasPrefix("[") && host.hasSuffix("]") && host.count > 2 {
            host = try Self.decoded(host.dropFirst().dropLast(), "host")
        } else {
            guard !host.contains("[") && !host.contains("]") else {
                throw KeysmithError.invalidArgument("the database URL's host is malformed (an IPv6 address is written in brackets: [::1]:5432)")
            }
            host = try Self.decoded(host, "host")
            guard !host.contains(":") else {
                throw KeysmithError.invalidArgument(
                    "the database URL's host is malformed (an IPv6 address is written in brackets, [::1]:5432; one host only)")
            }
        }
        for (part, text) in [("user", user), ("database name", database), ("host", host), ("host parameter", queryHost ?? "")]
        where text.unicodeScalars.contains(where: OneLine.needsEscape) {
            // Names are printed in messages and `keysmith backend`: none may hold a line break,
            // a terminal escape or a bidirectional control.
            throw KeysmithError.invalidArgument("the database URL's \(part) holds a control character")
        }
        // libpq's lists of hosts (host=h1,h2, or h1,h2 before the path): Keysmith connects to one.
        if host.contains(",") || (queryHost?.contains(",") ?? false) {
            throw KeysmithError.invalidArgument("the database URL names several hosts (a comma-separated list); Keysmith connects to one: name one host")
        }
        // libpq's form of a socket: the directory, %-encoded, as the host.
        if queryHost == nil, host.hasPrefix("/") { queryHost = host }
        if let queryHost, queryHost.hasPrefix("/") {
            self.init(socketDirectory: queryHost, port: port, user: user, password: password, database: database)
            // Kept as given, so the one check below refuses TLS asked for over the socket.
            tls = mode ?? .disable
            trustedRoots = roots
        } else {
            let name = queryHost ?? host
            guard !name.isEmpty else { throw KeysmithError.invalidArgument("the database URL names no host (add ?host=/socket/directory for a socket)") }
            self.init(host: name, port: port, user: user, password: password, database: database,
                      tls: mode ?? (roots != nil ? .verifyFull : nil), trustedRoots: roots)
        }
        if let problem = tlsProblem { throw KeysmithError.invalidArgument(problem) }
    }

    /// `text` with its %-escapes decoded; a `%` not followed by two hexadecimal digits, or
    /// escapes that decode to bytes that are not UTF-8, are refused (they were dropped: a
    /// password would have been silently left out). The message names the part, never its text.
    private static func decoded(_ text: some StringProtocol, _ part: String) throws -> String {
        guard let decoded = String(text).removingPercentEncoding else {
            throw KeysmithError.invalidArgument("the database URL's \(part) has a malformed %-escape (write % itself as %25)")
        }
        // A NUL would end the name where the server reads it, not where it was written.
        guard !decoded.utf8.contains(0) else { throw KeysmithError.invalidArgument("the database URL's \(part) holds a NUL (%00)") }
        return decoded
    }

    /// A port: decimal digits only (no sign, no space), 1 to 65535.
    private static func port(_ text: some StringProtocol) throws -> Int {
        guard !text.isEmpty, text.count <= 5, text.utf8.allSatisfy({ (0x30...0x39).contains($0) }), let port = Int(text), (1...65535).contains(port) else {
            throw KeysmithError.invalidArgument("the database URL's port is not a port (1 to 65535)")
        }
        return port
    }

    /// `database D as U on /socket` or `… on host:port`, never the password. It names the
    /// database, not how it is reached (the TLS mode is not part of it): stores are known by it
    /// (the anchors of the audit log and of the change feed), and changing `sslmode` must not
    /// make a store look new.
    public var description: String {
        "database \(database) as \(user) on \(socketPath ?? "\(host ?? "?"):\(port)")"
    }

    /// Why `tls` and `trustedRoots` do not go together, if they do not: roots that would be
    /// ignored (with `disable` or `require`), or `verify-ca` without roots (against the
    /// system's public roots, with no name check, any certificate any public CA issued for any
    /// name would pass: no better than `require`).
    var tlsProblem: String? {
        if socketPath != nil, tls != .disable || trustedRoots != nil {
            return "TLS is not used over a Unix socket (host=/…): remove sslmode and sslrootcert, or connect to a host"
        }
        if trustedRoots != nil, tls == .disable || tls == .require {
            return "sslrootcert is used to verify the server: give it with sslmode=verify-ca or verify-full"
        }
        if tls == .verifyCA, trustedRoots == nil {
            return "sslmode=verify-ca needs sslrootcert (your CA): against the system's public roots, without a name check, any publicly issued certificate would pass"
        }
        return nil
    }

    /// How the connection is protected, for messages: `Unix socket`, `no TLS`, `TLS verify-full`.
    public var protection: String {
        socketPath != nil ? "Unix socket" : tls == .disable ? "no TLS" : "TLS \(tls.rawValue)"
    }
}
