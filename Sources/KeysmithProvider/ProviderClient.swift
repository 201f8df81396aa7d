import Keysmith
public import KeysmithTokens
public import Foundation

/// The requests Keysmith makes of one provider: token requests (refresh, client credentials,
/// the device flow, an authorization code), revocation (RFC 7009) and introspection (RFC 7662).
/// Every call is async and bounded in time; none follows a redirect.
///
/// ```swift
/// let client = try ProviderClient(provider: provider, registry: ProviderRegistry(store: vault))
/// let response = try await client.clientCredentials(scopes: [try Scope("reports:read")])
/// ```
public struct ProviderClient: Sendable {
    /// The provider.
    public let provider: OAuthProvider
    let clientSecret: [UInt8]?
    let http: ProviderHTTP

    /// A client for `provider`, with its secret read from the registry it is kept in.
    ///
    /// - Parameters:
    ///   - provider: The provider.
    ///   - registry: Where its client secret is kept.
    ///   - timeout: Each request's whole time.
    /// - Throws: `KeysmithError.Code.itemNotFound` when the provider needs a secret the store
    ///   does not hold; a store failure.
    public init(provider: OAuthProvider, registry: ProviderRegistry, timeout: Duration = .seconds(30)) throws {
        let kept = provider.clientAuthentication == .none ? nil : try registry.clientSecret(for: provider.name)
        try self.init(provider: provider, keptSecret: kept, timeout: timeout)
    }

    /// A client for `provider` with the secret its registry keeps (`nil`: none is kept).
    ///
    /// - Throws: `KeysmithError.Code.itemNotFound` when the provider needs a secret and none is kept.
    init(provider: OAuthProvider, keptSecret kept: [UInt8]?, timeout: Duration) throws {
        guard provider.clientAuthentication == .none || kept != nil else {
            throw KeysmithError(.itemNotFound, "provider \(provider.name) authenticates with \(provider.clientAuthentication.rawValue), "
                                + "but its client secret is not kept; add the provider again with --client-secret-fd")
        }
        self.init(provider: provider, clientSecret: provider.clientAuthentication == .none ? nil : kept, timeout: timeout)
    }

    /// A client for `provider` with the secret given here.
    public init(provider: OAuthProvider, clientSecret: [UInt8]?, timeout: Duration = .seconds(30)) {
        self.provider = provider
        self.clientSecret = clientSecret
        self.http = ProviderHTTP(timeout: timeout, trustedRoots: provider.trustedRoots)
    }

    // MARK: Token requests

    /// Refreshes a grant (RFC 6749 §6).
    ///
    /// - Returns: The token response's JSON, checked to be one.
    /// - Throws: ``ProviderError``: ``ProviderError/Kind/rejected`` with `invalid_grant` when the
    ///   refresh token is no longer good.
    public func refresh(refreshToken: String) async throws -> Data {
        try await tokenRequest([("grant_type", "refresh_token"), ("refresh_token", refreshToken)])
    }

    /// Asks for a token for the client itself (RFC 6749 §4.4), for services.
    public func clientCredentials(scopes: Set<Scope>) async throws -> Data {
        var fields = [("grant_type", "client_credentials")]
        if !scopes.isEmpty { fields.append(("scope", scopeText(scopes))) }
        return try await tokenRequest(fields)
    }

    /// Exchanges an authorization code (RFC 6749 §4.1.3) with its PKCE verifier (RFC 7636).
    public func exchange(code: String, redirectURI: String, verifier: String) async throws -> Data {
        try await tokenRequest([("grant_type", "authorization_code"), ("code", code), ("redirect_uri", redirectURI), ("code_verifier", verifier)])
    }

    func scopeText(_ scopes: Set<Scope>) -> String {
        scopes.map(\.rawValue).sorted().joined(separator: provider.scopeSeparator)
    }

    /// A POST to the token endpoint with the client's authentication; the answer checked to be
    /// a token response (RFC 6749 §5.1) or an error (§5.2).
    func tokenRequest(_ fields: [(String, String)]) async throws -> Data {
        let url = try EndpointURL(provider.tokenEndpoint, role: "token endpoint")
        let response = try await post(url, fields)
        guard response.status == 200 else {
            // A server that quotes what it was sent (a refresh token, a code, its verifier, the
            // client secret) in its error text must not put it into a message or a log.
            var failure = error(from: response, at: "token endpoint")
            let secrets = fields.filter { ["refresh_token", "code", "code_verifier", "device_code"].contains($0.0) }.map(\.1)
                + [String(decoding: clientSecret ?? [], as: UTF8.self)]
            for secret in secrets where secret.count >= 4 {
                failure.message = failure.message.replacingOccurrences(of: secret, with: "[token]")
            }
            throw failure
        }
        try TokenResponseCheck.check(response.body, provider: provider.name)
        return Data(response.body)
    }

    /// A POST with the client's authentication as the provider wants it.
    func post(_ url: EndpointURL, _ fields: [(String, String)]) async throws -> ProviderHTTP.Response {
        var fields = fields
        switch provider.clientAuthentication {
        case .none:
            fields.append(("client_id", provider.clientID))
            return try await http.post(url, form: fields)
        case .clientSecretPost:
            fields.append(("client_id", provider.clientID))
            fields.append(("client_secret", String(decoding: clientSecret ?? [], as: UTF8.self)))
            return try await http.post(url, form: fields)
        case .clientSecretBasic:
            return try await http.post(url, form: fields, basic: (provider.clientID, clientSecret ?? []))
        }
    }

    /// The provider's error answer as a ``ProviderError``: its `error` and `error_description`
    /// escaped onto one line; a status the endpoint should not send as a bad response.
    func error(from response: ProviderHTTP.Response, at role: String) -> ProviderError {
        let name = OneLine.escaped(provider.name)
        if (300..<400).contains(response.status) {
            return ProviderError(.badResponse, "the \(role) of \(name) answered with a redirect (HTTP \(response.status)); redirects are not followed")
        }
        // Only a client error is a refusal (RFC 6749 §5.2: 400, or 401 for the client's
        // authentication): a server that fails (5xx) or sheds load (429) did not refuse, whatever
        // its body says, and an `invalid_grant` in a 500 never ends a grant.
        let oauthCode = JSONValue.object(response.body).flatMap { object -> (String, String)? in
            guard let code = object["error"]?.string, !code.isEmpty, code.utf8.count <= 128 else { return nil }
            return (code, object["error_description"]?.string.map { ": " + OneLine.escaped(String($0.prefix(300))) } ?? "")
        }
        if let (code, description) = oauthCode, (400..<500).contains(response.status), response.status != 429 {
            return ProviderError(.rejected, "\(name) refused: \(OneLine.escaped(code))\(description)", oauthError: code,
                                 retryAfter: response.retryAfter)
        }
        if response.status >= 500, let (code, _) = oauthCode, response.status != 503 {
            return ProviderError(.unreachable, "the \(role) of \(name) failed (HTTP \(response.status), error \(OneLine.escaped(code))): a server "
                                 + "error, not a refusal; try again later", retryAfter: response.retryAfter ?? 5)
        }
        if response.status == 503 || response.status == 429 {
            return ProviderError(.unreachable, "the \(role) of \(name) is unavailable for now (HTTP \(response.status))",
                                 retryAfter: response.retryAfter ?? 5)
        }
        return ProviderError(.badResponse, "the \(role) of \(name) answered HTTP \(response.status) without an OAuth error",
                             retryAfter: response.status >= 500 ? (response.retryAfter ?? 5) : nil)
    }

    // MARK: Revocation and introspection

    /// Revokes a token at the provider (RFC 7009). A token the provider no longer knows counts
    /// as revoked (§2.2: the server answers 200 for it).
    ///
    /// - Parameters:
    ///   - token: The refresh or access token.
    ///   - hint: `refresh_token` or `access_token`.
    /// - Throws: ``ProviderError``: ``ProviderError/Kind/unsupported`` when the provider has no
    ///   revocation endpoint (nothing is sent); the server's error otherwise.
    public func revoke(_ token: String, hint: String) async throws {
        guard let endpoint = provider.revocationEndpoint else {
            throw ProviderError(.unsupported, "provider \(OneLine.escaped(provider.name)) has no revocation endpoint: a token cannot be revoked there "
                                + "(add it with --revocation-endpoint, or revoke in the provider's own console)")
        }
        let response = try await post(try EndpointURL(endpoint, role: "revocation endpoint"), [("token", token), ("token_type_hint", hint)])
        guard response.status == 200 else { throw error(from: response, at: "revocation endpoint") }
    }

    /// What the provider says of a token (RFC 7662).
    public struct Introspection: Sendable, Hashable {
        /// Whether the token is active there.
        public var active: Bool
        /// Its scopes, when the provider says.
        public var scope: String?
        /// When it expires, when the provider says.
        public var expiresAt: Date?
        /// The client it was issued to, when the provider says.
        public var clientID: String?
    }

    /// Asks the provider whether a token is active (RFC 7662).
    ///
    /// - Throws: ``ProviderError``: ``ProviderError/Kind/unsupported`` without an introspection
    ///   endpoint; ``ProviderError/Kind/badResponse`` when the answer has no boolean `active`.
    public func introspect(_ token: String, hint: String = "access_token") async throws -> Introspection {
        guard let endpoint = provider.introspectionEndpoint else {
            throw ProviderError(.unsupported, "provider \(OneLine.escaped(provider.name)) has no introspection endpoint")
        }
        let response = try await post(try EndpointURL(endpoint, role: "introspection endpoint"), [("token", token), ("token_type_hint", hint)])
        guard response.status == 200 else { throw error(from: response, at: "introspection endpoint") }
        guard let object = JSONValue.object(response.body), let active = object["active"]?.bool else {
            throw ProviderError(.badResponse, "the introspection answer of \(OneLine.escaped(provider.name)) has no boolean \"active\"")
        }
        return Introspection(active: active, scope: object["scope"]?.string,
                             expiresAt: object["exp"]?.number.map { Date(timeIntervalSince1970: $0) },
                             clientID: object["client_id"]?.string)
    }
}

/// The checks a token response gets before anything of it is kept: the token rules' own parser
/// (the one `TokenKeeper` applies), so nothing it would refuse is accepted here, and nothing it
/// takes is refused (a refresh token the provider spent for this answer is never thrown away
/// for a check the keeper would not have made).
enum TokenResponseCheck {
    static func check(_ body: [UInt8], provider: String) throws {
        let name = OneLine.escaped(provider)
        // Read leniently: an extra field that cannot be kept is dropped by the parse below,
        // never the answer (it may have spent the refresh token it replaces).
        guard CompactJSON.lenientMembers(of: body) != nil else {
            throw ProviderError(.badResponse, "the token endpoint of \(name) answered with something that is not a JSON object; nothing was kept")
        }
        do {
            _ = try TokenResponse.parse(Data(body))
        } catch let error as KeysmithError {
            throw ProviderError(.badResponse, "the token response of \(name) is not one Keysmith can keep (\(error.message)); nothing was kept")
        }
    }
}
