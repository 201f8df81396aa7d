public import Keysmith
import Foundation

/// How a client proves who it is to the provider's token, revocation and introspection
/// endpoints (RFC 6749 §2.3, RFC 8414's `token_endpoint_auth_methods_supported` names).
public enum ClientAuthentication: String, Sendable, Codable, CaseIterable, Hashable {
    /// A public client: it sends its `client_id` only (and proves possession with PKCE).
    case none
    /// HTTP Basic authentication with the client id and secret (RFC 6749 §2.3.1).
    case clientSecretBasic = "client_secret_basic"
    /// The client id and secret as form fields of the request body.
    case clientSecretPost = "client_secret_post"
}

/// An OAuth authorization server as Keysmith knows it: where its endpoints are, who this client
/// is there, and how it treats refresh tokens. Kept in the store (``ProviderRegistry``); a
/// provider's tokens are the tokens kept under its ``name`` as their service.
///
/// ```swift
/// let github = OAuthProvider(name: "news", tokenEndpoint: "https://auth.example/token",
///                            clientID: "keysmith-cli", revocationEndpoint: "https://auth.example/revoke")
/// try ProviderRegistry(store: vault).add(github)
/// ```
public struct OAuthProvider: Sendable, Hashable, Codable {
    /// The provider's name, which is also the service its tokens are kept under.
    public var name: String
    /// The issuer identifier, when the endpoints came from its metadata (RFC 8414).
    public var issuer: String?
    /// The token endpoint (required).
    public var tokenEndpoint: String
    /// The authorization endpoint (authorization code with PKCE).
    public var authorizationEndpoint: String?
    /// The device authorization endpoint (RFC 8628).
    public var deviceAuthorizationEndpoint: String?
    /// The revocation endpoint (RFC 7009). Without it, revoking at the provider is refused.
    public var revocationEndpoint: String?
    /// The introspection endpoint (RFC 7662).
    public var introspectionEndpoint: String?
    /// This client's id at the provider.
    public var clientID: String
    /// How this client authenticates. A secret, when one is needed, is kept in the store beside
    /// the provider (``ProviderRegistry/add(_:clientSecret:replacing:)``), never here.
    public var clientAuthentication: ClientAuthentication
    /// What separates scopes in requests and responses (a space, RFC 6749 §3.3).
    public var scopeSeparator: String
    /// Whether the provider issues a new refresh token with each refresh (and may treat the
    /// reuse of an old one as theft, RFC 9700 §4.14). Keysmith keeps refreshes single-flight
    /// either way; this is shown to people and kept for their scripts.
    public var rotatesRefreshTokens: Bool
    /// A PEM file of the roots to trust for this provider's TLS, instead of the system's.
    public var trustedRoots: String?
    /// The git hosts (`host` or `host:port`, as git names them, compared without case) whose
    /// credentials are this provider's tokens: for them `keysmith git-credential get` gives a
    /// fresh access token as the password (``GitTokenCredentials``). Empty: none.
    public var gitHosts: [String] = []
    /// The scopes (separated as ``scopeSeparator`` says) asked for when git starts a sign-in
    /// at this provider (the device flow, on git's terminal); `nil`: the provider's default.
    public var gitScope: String?

    /// Describes a provider.
    public init(name: String, issuer: String? = nil, tokenEndpoint: String, authorizationEndpoint: String? = nil,
                deviceAuthorizationEndpoint: String? = nil, revocationEndpoint: String? = nil, introspectionEndpoint: String? = nil,
                clientID: String, clientAuthentication: ClientAuthentication = .none, scopeSeparator: String = " ",
                rotatesRefreshTokens: Bool = true, trustedRoots: String? = nil) {
        self.name = name
        self.issuer = issuer
        self.tokenEndpoint = tokenEndpoint
        self.authorizationEndpoint = authorizationEndpoint
        self.deviceAuthorizationEndpoint = deviceAuthorizationEndpoint
        self.revocationEndpoint = revocationEndpoint
        self.introspectionEndpoint = introspectionEndpoint
        self.clientID = clientID
        self.clientAuthentication = clientAuthentication
        self.scopeSeparator = scopeSeparator
        self.rotatesRefreshTokens = rotatesRefreshTokens
        self.trustedRoots = trustedRoots
    }

    enum CodingKeys: String, CodingKey {
        case name, issuer, tokenEndpoint, authorizationEndpoint, deviceAuthorizationEndpoint, revocationEndpoint, introspectionEndpoint
        case clientID, clientAuthentication, scopeSeparator, rotatesRefreshTokens, trustedRoots, gitHosts, gitScope
    }

    /// Reads a description, including one kept before git hosts existed (it has none).
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        name = try container.decode(String.self, forKey: .name)
        issuer = try container.decodeIfPresent(String.self, forKey: .issuer)
        tokenEndpoint = try container.decode(String.self, forKey: .tokenEndpoint)
        authorizationEndpoint = try container.decodeIfPresent(String.self, forKey: .authorizationEndpoint)
        deviceAuthorizationEndpoint = try container.decodeIfPresent(String.self, forKey: .deviceAuthorizationEndpoint)
        revocationEndpoint = try container.decodeIfPresent(String.self, forKey: .revocationEndpoint)
        introspectionEndpoint = try container.decodeIfPresent(String.self, forKey: .introspectionEndpoint)
        clientID = try container.decode(String.self, forKey: .clientID)
        clientAuthentication = try container.decode(ClientAuthentication.self, forKey: .clientAuthentication)
        scopeSeparator = try container.decode(String.self, forKey: .scopeSeparator)
        rotatesRefreshTokens = try container.decode(Bool.self, forKey: .rotatesRefreshTokens)
        trustedRoots = try container.decodeIfPresent(String.self, forKey: .trustedRoots)
        gitHosts = try container.decodeIfPresent([String].self, forKey: .gitHosts) ?? []
        gitScope = try container.decodeIfPresent(String.self, forKey: .gitScope)
    }

    /// Whether `host` (as git sends it: `host` or `host:port`) is one of ``gitHosts``.
    public func servesGit(host: String) -> Bool {
        gitHosts.contains { Self.asciiLowercased($0) == Self.asciiLowercased(host) }
    }

    /// Host names compare without ASCII case only (no Unicode case folding: `K` and the Kelvin
    /// sign are different hosts).
    static func asciiLowercased(_ text: String) -> String {
        String(decoding: text.utf8.map { (65...90).contains($0) ? $0 + 32 : $0 }, as: UTF8.self)
    }

    /// Every endpoint set, with the name of its role.
    var endpoints: [(role: String, url: String)] {
        [("token endpoint", tokenEndpoint), ("authorization endpoint", authorizationEndpoint), ("device endpoint", deviceAuthorizationEndpoint),
         ("revocation endpoint", revocationEndpoint), ("introspection endpoint", introspectionEndpoint), ("issuer", issuer)]
            .compactMap { role, url in url.map { (role, $0) } }
    }

    /// Checks the description: a name and client id of printable text; every endpoint an
    /// `https://` URL, or `http://` on a loopback address (RFC 8252 §8.3), without a fragment
    /// or credentials; a scope separator of one space or comma.
    ///
    /// - Throws: `KeysmithError.Code.invalidArgument` naming the first problem.
    public func validate() throws {
        try ProviderText.check(name, "the provider's name", maximum: 128)
        try ProviderText.check(clientID, "the client id", maximum: 512)
        for (role, url) in endpoints { _ = try EndpointURL(url, role: role) }
        guard scopeSeparator == " " || scopeSeparator == "," else {
            throw KeysmithError.invalidArgument("the scope separator is a space or a comma")
        }
        if let trustedRoots, trustedRoots.isEmpty { throw KeysmithError.invalidArgument("the trusted roots file's path is empty") }
        for host in gitHosts {
            try ProviderText.check(host, "a git host", maximum: 255)
            guard !host.contains(where: { "/@?#\\ ".contains($0) }), !host.contains("://") else {
                throw KeysmithError.invalidArgument("the git host \(OneLine.escaped(host)) is not a host or host:port (no scheme, user or path)")
            }
        }
        if let gitScope { try ProviderText.check(gitScope, "the git sign-in's scope", maximum: 4096) }
    }
}

/// Checks on text that goes into records, messages and requests.
enum ProviderText {
    static func check(_ text: String, _ what: String, maximum: Int) throws {
        guard !text.isEmpty else { throw KeysmithError.invalidArgument("\(what) is empty") }
        guard text.utf8.count <= maximum else { throw KeysmithError.invalidArgument("\(what) is over \(maximum) bytes") }
        guard !text.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw KeysmithError.invalidArgument("\(what) holds a control character")
        }
    }
}

/// An endpoint's URL, checked: `https`, or `http` only to a loopback address.
struct EndpointURL: Sendable, Hashable {
    let text: String
    let host: String
    let isLoopback: Bool

    init(_ text: String, role: String) throws {
        guard text.utf8.count <= 2048, let components = URLComponents(string: text), let scheme = components.scheme?.lowercased(),
              let host = components.host, !host.isEmpty
        else {
            throw KeysmithError.invalidArgument("the \(role) is not an absolute URL")
        }
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        // An IPv4 literal in 127.0.0.0/8 (four numbers 0–255, the first 127), `::1` or
        // `localhost`: never a name that merely starts with "127." (127.0.0.attacker.example).
        let octets = bare.split(separator: ".", omittingEmptySubsequences: false)
        let isIPv4Loopback = octets.count == 4 && octets[0] == "127"
            && octets.allSatisfy { $0.count <= 3 && !$0.isEmpty && $0.allSatisfy(\.isASCII) && UInt8($0) != nil }
        let loopback = bare.lowercased() == "localhost" || bare == "::1" || isIPv4Loopback
        guard components.user == nil, components.password == nil else {
            throw KeysmithError.invalidArgument("the \(role) holds a user or password; give a client secret with --client-secret-fd instead")
        }
        guard components.fragment == nil else { throw KeysmithError.invalidArgument("the \(role) has a fragment (#…)") }
        switch scheme {
        case "https": break
        case "http" where loopback: break
        case "http": throw KeysmithError.invalidArgument("the \(role) is http:// to a host other than this machine; use https:// (http is for loopback addresses only)")
        default: throw KeysmithError.invalidArgument("the \(role) is not an http(s) URL")
        }
        self.text = text
        self.host = bare
        self.isLoopback = loopback
    }
}

extension KeysmithRecordType {
    /// A provider's description (``OAuthProvider``), kept as JSON.
    public static let oauthProvider = KeysmithRecordType(rawValue: "oauth-provider")
    /// A provider's client secret, kept apart from its description.
    public static let oauthClientSecret = KeysmithRecordType(rawValue: "oauth-client-secret")
}

/// The providers kept in a store.
///
/// ```swift
/// let registry = ProviderRegistry(store: vault)
/// try registry.add(provider, clientSecret: Array(secret.utf8))
/// for provider in try registry.providers() { print(provider.name, provider.tokenEndpoint) }
/// ```
public struct ProviderRegistry: Sendable {
    /// The store the providers are kept in.
    public let store: any SecureStore

    /// The providers of `store`.
    public init(store: any SecureStore) { self.store = store }

    static func key(_ name: String) -> ItemKey {
        .keysmithRecord(KeysmithRecordKey(recordType: .oauthProvider, service: name, account: "provider"))
    }

    static func secretKey(_ name: String) -> ItemKey {
        .keysmithRecord(KeysmithRecordKey(recordType: .oauthClientSecret, service: name, account: "client"))
    }

    /// Keeps a provider, with its client secret when it has one, in one commit.
    ///
    /// - Parameters:
    ///   - provider: The description (checked with ``OAuthProvider/validate()``).
    ///   - clientSecret: The client secret, for `client_secret_basic` and `client_secret_post`
    ///     (required by them, refused with `none`).
    ///   - replacing: Whether a provider of that name may be replaced.
    /// - Throws: `KeysmithError.Code.invalidArgument` for a bad description or secret;
    ///   `KeysmithError.Code.duplicateItem` when one of that name is kept and `replacing` is
    ///   `false`; a store failure.
    public func add(_ provider: OAuthProvider, clientSecret: [UInt8]? = nil, replacing: Bool = false) throws {
        try provider.validate()
        switch (provider.clientAuthentication, clientSecret) {
        case (.none, .some): throw KeysmithError.invalidArgument("a public client (client authentication none) has no client secret")
        case (.clientSecretBasic, nil), (.clientSecretPost, nil):
            throw KeysmithError.invalidArgument("\(provider.clientAuthentication.rawValue) needs the client secret (--client-secret-fd)")
        case (_, let secret?) where secret.isEmpty: throw KeysmithError.invalidArgument("the client secret is empty")
        default: break
        }
        // A git host is one provider's: git's credential for it must not depend on which is found first.
        for host in provider.gitHosts {
            if let other = try providers().first(where: { $0.name != provider.name && $0.servesGit(host: host) }) {
                throw KeysmithError(.duplicateItem, "the git host \(OneLine.escaped(host)) is already the provider \(OneLine.escaped(other.name))'s")
            }
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let attributes = ItemAttributes(key: Self.key(provider.name), label: "OAuth provider \(provider.name)")
        var operations: [StoreOperation] = [replacing ? .upsert(attributes, secret: try encoder.encode(provider))
                                                      : .create(attributes, secret: try encoder.encode(provider))]
        if let clientSecret {
            operations.append(.upsert(ItemAttributes(key: Self.secretKey(provider.name), label: "OAuth client secret for \(provider.name)"),
                                      secret: Data(clientSecret)))
        } else if try store.read(Self.secretKey(provider.name)) != nil {
            operations.append(.delete(Self.secretKey(provider.name)))
        }
        do {
            try store.perform(operations)
        } catch let error as KeysmithError where error.code == .duplicateItem {
            throw KeysmithError(.duplicateItem, "a provider named \(provider.name) is already kept; remove it first, or replace it")
        }
    }

    /// The provider of that name, or `nil`.
    ///
    /// - Throws: `KeysmithError.Code.corruptData` when its record does not decode; a store failure.
    public func provider(named name: String) throws -> OAuthProvider? {
        guard let record = try store.read(Self.key(name)) else { return nil }
        return try Self.decode(record.secret, name: name)
    }

    /// The provider whose tokens are the credentials of a git host (``OAuthProvider/gitHosts``),
    /// or `nil`.
    ///
    /// A provider record that does not decode is passed over here (it cannot serve a host it
    /// cannot say), so that one damaged record does not stop git's plain credentials for
    /// every host.
    ///
    /// - Parameter host: The host as git sends it: `host` or `host:port`.
    /// - Throws: A store failure.
    public func provider(forGitHost host: String) throws -> OAuthProvider? {
        for name in try names() {
            if let provider = try? provider(named: name), provider.servesGit(host: host) { return provider }
        }
        return nil
    }

    /// The names of the providers kept, sorted.
    func names() throws -> [String] {
        try store.search(ItemQuery(recordType: .oauthProvider)).compactMap(Self.name).sorted()
    }

    /// The name of the provider a listed record keeps, or `nil` for any other record.
    static func name(_ info: ItemInfo) -> String? {
        guard case .keysmithRecord(let key) = info.key, key.recordType == .oauthProvider else { return nil }
        return key.service
    }

    /// Every provider, sorted by name.
    public func providers() throws -> [OAuthProvider] {
        try names().compactMap { try provider(named: $0) }
    }

    /// Removes a provider and its client secret. Its tokens stay (they are tokens kept under
    /// its name; without the provider they are no longer refreshed or revoked at it).
    ///
    /// - Returns: Whether there was one.
    @discardableResult
    public func remove(named name: String) throws -> Bool {
        guard try store.read(Self.key(name)) != nil else { return false }
        var operations: [StoreOperation] = [.delete(Self.key(name))]
        if try store.read(Self.secretKey(name)) != nil { operations.append(.delete(Self.secretKey(name))) }
        try store.perform(operations)
        return true
    }

    /// A client for the provider of that name, with its client secret when it uses one, read
    /// through the store's async API when it has one (for async code: a refresh); `nil` when
    /// there is no such provider.
    ///
    /// - Throws: As ``provider(named:)`` and ``ProviderClient/init(provider:registry:timeout:)``.
    func clientAwaiting(named name: String, timeout: Duration) async throws -> ProviderClient? {
        guard let provider = try await providerAwaiting(named: name) else { return nil }
        return try await clientAwaiting(for: provider, timeout: timeout)
    }

    /// Every provider kept, by name, each as it reads (a record that does not decode is its
    /// error, for the caller to meet only if it needs that provider): the names listed and the
    /// records read through the store's async API when it has one.
    func everyProviderAwaiting() async throws -> [String: Result<OAuthProvider, any Error>] {
        let names = try await store.searchAwaiting(ItemQuery(recordType: .oauthProvider)).compactMap(Self.name)
        let records = try await store.readAwaiting(names.map(Self.key))
        var providers: [String: Result<OAuthProvider, any Error>] = [:]
        for (name, record) in zip(names, records) {
            guard let record else { continue }
            providers[name] = Result { try Self.decode(record.secret, name: name) }
        }
        return providers
    }

    /// ``provider(named:)``, read through the store's async API when it has one.
    func providerAwaiting(named name: String) async throws -> OAuthProvider? {
        guard let record = try await store.readAwaiting([Self.key(name)])[0] else { return nil }
        return try Self.decode(record.secret, name: name)
    }

    /// ``ProviderClient/init(provider:registry:timeout:)``, the secret read through the store's
    /// async API when it has one. The secret is read only for a provider that uses one: a
    /// leftover record of a public client's is never decrypted, and never fails its requests.
    func clientAwaiting(for provider: OAuthProvider, timeout: Duration) async throws -> ProviderClient {
        let kept = provider.clientAuthentication == .none ? nil : try await store.readAwaiting([Self.secretKey(provider.name)])[0].map { Array($0.secret) }
        return try ProviderClient(provider: provider, keptSecret: kept, timeout: timeout)
    }

    /// The provider's client secret, or `nil` when it keeps none.
    func clientSecret(for name: String) throws -> [UInt8]? {
        try store.read(Self.secretKey(name)).map { Array($0.secret) }
    }

    static func decode(_ data: Data, name: String) throws -> OAuthProvider {
        do {
            let provider = try JSONDecoder().decode(OAuthProvider.self, from: data)
            try provider.validate()
            return provider
        } catch {
            throw KeysmithError(.corruptData, "the description of provider \(OneLine.escaped(name)) does not decode")
        }
    }
}
