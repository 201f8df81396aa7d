import FoundationEssentials
public import Keysmith

/// One credential description of git's credential protocol (git-credential(1)): `key=value`
/// lines, ended by an empty line or the end of the input. Keysmith keeps a git credential as an
/// internet password keyed by protocol, host and port, path (when git sends one, with
/// `credential.useHttpPath`) and username: the same item `keysmith secret`, the library and, on
/// the Secret Service, `secret-tool` see.
///
/// ```swift
/// let request = try GitCredential(parsing: Array("protocol=https\nhost=example.com\n\n".utf8))
/// if let found = try GitCredential.get(request, in: store) {
///     print(String(decoding: found.encoded(), as: UTF8.self))   // username=…\npassword=…\n
/// }
/// ```
public struct GitCredential: Sendable, Hashable {
    /// `protocol`: `https`, `http`, … (others are kept, but only protocols Keysmith can name
    /// are stored or answered).
    public var `protocol`: String?
    /// `host`, with `:port` when git gives one (`[::1]:8080` for IPv6).
    public var host: String?
    /// `path`, sent only with `credential.useHttpPath`.
    public var path: String?
    /// `username`.
    public var username: String?
    /// `password`: a secret; never printed but in the answer to `get`.
    public var password: String?
    /// `password_expiry_utc` (git 2.41 and later): seconds since 1970 after which the password is no good.
    public var passwordExpiry: Int64?
    /// `oauth_refresh_token` (git 2.41 and later): the refresh token an OAuth helper before this
    /// one obtained with the password; a secret, kept beside the password and given back with it.
    public var oauthRefreshToken: String?

    /// Makes a description from its fields.
    public init(protocol: String? = nil, host: String? = nil, path: String? = nil, username: String? = nil,
                password: String? = nil, passwordExpiry: Int64? = nil) {
        self.protocol = `protocol`
        self.host = host
        self.path = path
        self.username = username
        self.password = password
        self.passwordExpiry = passwordExpiry
    }

    /// The most a description may hold: git's own lines are short; 1 MiB leaves room for a
    /// long token as the password.
    public static let maximumSize = 1 << 20

    /// Reads a description as git writes it: `key=value` lines up to an empty line or the end;
    /// unknown keys (`url`, `wwwauth[]`, `capability[]`, `quit`, …) are ignored, as git requires;
    /// for a key given twice the last counts, as in git.
    ///
    /// - Throws: `KeysmithError.Code.malformedData` for input that is not UTF-8, holds a NUL,
    ///   a line without `=`, or is larger than ``maximumSize`` (never repeating a value).
    public init(parsing bytes: [UInt8]) throws {
        guard bytes.count <= Self.maximumSize else {
            throw KeysmithError(.malformedData, "the credential description is larger than \(Self.maximumSize) bytes")
        }
        guard !bytes.contains(0), let text = String(validating: bytes, as: UTF8.self) else {
            throw KeysmithError(.malformedData, "the credential description is not UTF-8 text without NUL bytes")
        }
        self.init()
        // Split on the scalar: Swift reads "\r\n" as one Character, which a split on "\n" misses.
        for raw in text.unicodeScalars.split(separator: "\n", omittingEmptySubsequences: false) {
            var scalars = raw
            if scalars.last == "\r" { scalars = scalars.dropLast() }
            let line = Substring(String(String.UnicodeScalarView(scalars)))
            if line.isEmpty { break }
            guard let equals = line.firstIndex(of: "=") else {
                throw KeysmithError(.malformedData, "a line of the credential description has no '=' (key=value)")
            }
            let key = line[..<equals], value = String(line[line.index(after: equals)...])
            switch key {
            case "protocol": self.protocol = value
            case "host": host = value
            case "path": path = value
            case "username": username = value
            case "password": password = value
            case "password_expiry_utc": passwordExpiry = Int64(value)
            case "oauth_refresh_token": oauthRefreshToken = value
            default: break  // git requires unknown keys to be ignored
            }
        }
    }

    /// The answer to `get`: `username=` and `password=` lines (and `password_expiry_utc=` when
    /// known), each value on one line.
    public func encoded() -> [UInt8] {
        var lines: [String] = []
        if let username { lines.append("username=" + username) }
        if let password { lines.append("password=" + password) }
        if let passwordExpiry { lines.append("password_expiry_utc=\(passwordExpiry)") }
        if let oauthRefreshToken { lines.append("oauth_refresh_token=" + oauthRefreshToken) }
        return Array(lines.map { $0 + "\n" }.joined().utf8)
    }

    /// The item's protocol, server and port (`0` when the host has none), or `nil` when Keysmith
    /// cannot name them (no host, an unknown protocol, a port that is not a number from 1 to 65535).
    var place: (internetProtocol: InternetProtocol, server: String, port: Int)? {
        guard let name = self.protocol, let internetProtocol = InternetProtocol(rawValue: name), let host, !host.isEmpty else { return nil }
        var server = host
        var port = 0
        if host.hasPrefix("[") {
            // [IPv6] or [IPv6]:port
            guard let close = host.firstIndex(of: "]") else { return nil }
            server = String(host[host.index(after: host.startIndex)..<close])
            let rest = host[host.index(after: close)...]
            if !rest.isEmpty {
                guard rest.hasPrefix(":"), let number = Int(rest.dropFirst()) else { return nil }
                port = number
            }
        } else if let colon = host.lastIndex(of: ":") {
            server = String(host[..<colon])
            guard let number = Int(host[host.index(after: colon)...]) else { return nil }
            port = number
        }
        guard !server.isEmpty, port == 0 || (1...65535).contains(port) else { return nil }
        // No port given: 0, "unspecified", as `keysmith secret set --server` without --port stores it.
        return (internetProtocol, server, port)
    }

    /// Whether Keysmith can keep a credential for this description: a host and a protocol it can
    /// name (`https`, `http`, …). Git also asks helpers about others (`cert`); those are not ours.
    public var isKeepable: Bool { place != nil }

    /// The item this credential is, when it names a username.
    public var itemKey: ItemKey? {
        guard let place, let username, !username.isEmpty else { return nil }
        return .internetPassword(InternetPasswordKey(server: place.server, port: place.port, internetProtocol: place.internetProtocol,
                                                     path: path ?? "", account: username))
    }

    /// The security domain of the item that keeps a credential's `oauth_refresh_token`: an
    /// internet password like the credential's own, with this domain (`keysmith secret get …
    /// --security-domain git-oauth-refresh-token` shows it).
    public static let refreshTokenDomain = "git-oauth-refresh-token"

    /// The item that keeps the refresh token of the credential item `key`.
    static func refreshTokenKey(_ key: ItemKey) -> ItemKey? {
        guard case .internetPassword(var internet) = key else { return nil }
        internet.securityDomain = refreshTokenDomain
        return .internetPassword(internet)
    }

    /// Whether `text` holds CR, LF or NUL: git's `key=value` lines cannot carry it back.
    static func holdsLineBreak(_ text: String) -> Bool {
        text.unicodeScalars.contains(where: { $0 == "\n" || $0 == "\r" || $0 == "\0" })
    }

    /// The type every git credential item carries (`ItemAttributes.type`).
    public static let itemType = "git-credential"

    // MARK: The helper's three operations

    /// `get`: the stored credential for this description, username and password filled in; `nil`
    /// when there is none (git then asks its next helper, or the user). With a username, that
    /// user's item; without, the item of the host (and path) written most recently. A password
    /// whose `password_expiry_utc` has passed is not returned.
    public static func get(_ request: GitCredential, in store: any SecureStore, now: Int64) throws -> GitCredential? {
        guard let place = request.place else { return nil }
        var candidates: [ItemInfo]
        if let key = request.itemKey {
            candidates = try store.read(key).map { [$0.info] } ?? []
        } else {
            candidates = try store.search(ItemQuery(kind: .internetPassword, server: place.server, port: place.port,
                                                    internetProtocol: place.internetProtocol, path: request.path ?? ""))
        }
        candidates.sort { $0.modified > $1.modified }
        for info in candidates {
            // An item git could not be given back whole (a line break in its password or account,
            // from `keysmith secret set`, would add fields to the answer) is passed over.
            guard let record = try store.read(info.key), case .internetPassword(let key) = record.key,
                  key.securityDomain != refreshTokenDomain,
                  let password = String(validating: record.secret, as: UTF8.self),
                  !holdsLineBreak(password), !holdsLineBreak(key.account)
            else { continue }
            let expiry = record.attributes.comment.flatMap(Self.expiry(fromComment:))
            if let expiry, expiry <= now { continue }
            var answer = request
            answer.username = key.account
            answer.password = password
            answer.passwordExpiry = expiry
            answer.oauthRefreshToken = try refreshTokenKey(record.key).flatMap { try store.read($0) }
                .flatMap { String(validating: $0.secret, as: UTF8.self) }.flatMap { holdsLineBreak($0) ? nil : $0 }
            return answer
        }
        return nil
    }

    /// `store`: keeps the credential git approved, creating or replacing that user's item for the
    /// host (and path); another user's item is never touched. A description without a username
    /// or a password, or one Keysmith cannot name, stores nothing (returns `false`).
    ///
    /// - Throws: `KeysmithError.Code.malformedData` for a password with a line break (git's
    ///   protocol cannot carry it back); a store failure.
    @discardableResult
    public static func store(_ request: GitCredential, in store: any SecureStore) throws -> Bool {
        guard let key = request.itemKey, let password = request.password, !password.isEmpty, let place = request.place else { return false }
        guard !password.contains("\n"), !password.contains("\r") else {
            throw KeysmithError(.malformedData, "the password holds a line break, which git's credential protocol cannot give back")
        }
        let expiry = request.passwordExpiry.map { "password_expiry_utc=\($0)" }
        var operations: [StoreOperation] = []
        if let existing = try store.read(key) {
            // An item that exists (made by git or by hand): its secret is replaced; its label and
            // type are kept (nil keeps a field); its comment carries the expiry git gave, and an
            // old expiry is cleared when git gives none (another comment is kept).
            let stale = existing.attributes.comment.map { Self.expiry(fromComment: $0) != nil } ?? false
            operations.append(.upsert(ItemAttributes(key: key, comment: expiry ?? (stale ? "" : nil)), secret: Data(password.utf8)))
        } else {
            let place = "\(place.internetProtocol.rawValue)://\(place.server)" + (request.path.map { "/" + $0 } ?? "")
            operations.append(.upsert(ItemAttributes(key: key, label: "git: \(place)", comment: expiry, type: itemType), secret: Data(password.utf8)))
        }
        // The refresh token git gave goes with this password, in the same commit; one kept for
        // an earlier password does not (it is removed when git gives none).
        if let refreshKey = refreshTokenKey(key) {
            if let refresh = request.oauthRefreshToken, !refresh.isEmpty, !holdsLineBreak(refresh) {
                operations.append(.upsert(ItemAttributes(key: refreshKey, label: "git OAuth refresh token", type: itemType), secret: Data(refresh.utf8)))
            } else if try store.read(refreshKey) != nil {
                operations.append(.delete(refreshKey))
            }
        }
        try store.perform(operations)
        return true
    }

    /// `erase`: removes the credential git names after the server rejected it: that user's item
    /// for the host (and path), and only when it still holds the rejected password (a password
    /// changed since by another process is kept). Returns whether an item was removed.
    @discardableResult
    public static func erase(_ request: GitCredential, in store: any SecureStore) throws -> Bool {
        guard let key = request.itemKey, let record = try store.read(key) else { return false }
        if let password = request.password, record.secret != Data(password.utf8) { return false }
        var removals: [StoreOperation] = [.delete(key, ifVersion: record.info.version)]
        if let refreshKey = refreshTokenKey(key), try store.read(refreshKey) != nil { removals.append(.delete(refreshKey)) }
        do {
            try store.perform(removals)
        } catch let error as KeysmithError where error.code == .writeConflict || error.code == .itemNotFound {
            return false  // changed or removed meanwhile: not the credential git named
        }
        return true
    }

    static func expiry(fromComment comment: String) -> Int64? {
        guard comment.hasPrefix("password_expiry_utc=") else { return nil }
        return Int64(comment.dropFirst("password_expiry_utc=".count))
    }
}
