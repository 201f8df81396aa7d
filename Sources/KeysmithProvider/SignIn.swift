import Keysmith
public import KeysmithTokens
public import Foundation
import KeysmithCrypto
import KeysmithSystem

/// What the device authorization endpoint answered (RFC 8628 §3.2): what the person must see.
/// The device code itself is kept inside and never shown.
public struct DeviceAuthorization: Sendable {
    /// The code the person types at ``verificationURI``.
    public var userCode: String
    /// Where the person goes to approve.
    public var verificationURI: String
    /// The same with the code in it, when the provider gives one.
    public var verificationURIComplete: String?
    /// When the device code expires.
    public var expiresAt: Date
    /// How long to wait between polls, at first.
    public var interval: Duration
    let deviceCode: String
    let scopes: Set<Scope>
}

extension ProviderClient {
    /// Starts the device authorization grant (RFC 8628 §3.1).
    ///
    /// - Throws: ``ProviderError``: ``ProviderError/Kind/unsupported`` without a device
    ///   endpoint; the server's error; ``ProviderError/Kind/badResponse`` for an answer without
    ///   its required fields.
    public func startDeviceAuthorization(scopes: Set<Scope>) async throws -> DeviceAuthorization {
        guard let endpoint = provider.deviceAuthorizationEndpoint else {
            throw ProviderError(.unsupported, "provider \(OneLine.escaped(provider.name)) has no device authorization endpoint "
                                + "(add it with --device-endpoint, or sign in with --browser)")
        }
        var fields: [(String, String)] = []
        if !scopes.isEmpty { fields.append(("scope", scopeText(scopes))) }
        let response = try await post(try EndpointURL(endpoint, role: "device endpoint"), fields)
        guard response.status == 200 else { throw error(from: response, at: "device endpoint") }
        let name = OneLine.escaped(provider.name)
        guard let object = JSONValue.object(response.body), let deviceCode = object["device_code"]?.string, !deviceCode.isEmpty,
              let userCode = object["user_code"]?.string, !userCode.isEmpty, userCode.utf8.count <= 64,
              let uri = object["verification_uri"]?.string, let expires = object["expires_in"]?.number, expires > 0, expires < 86_400
        else {
            throw ProviderError(.badResponse, "the device authorization answer of \(name) lacks device_code, user_code, verification_uri or expires_in")
        }
        let interval = object["interval"]?.number.map { max(1, min($0, 60)) } ?? 5
        return DeviceAuthorization(userCode: userCode, verificationURI: uri, verificationURIComplete: object["verification_uri_complete"]?.string,
                                   expiresAt: Date().addingTimeInterval(expires), interval: .seconds(interval), deviceCode: deviceCode, scopes: scopes)
    }

    /// Polls the token endpoint until the person approves, denies, or the code expires
    /// (RFC 8628 §3.4–3.5): `authorization_pending` waits the interval, `slow_down` adds 5 s to it.
    ///
    /// - Returns: The token response's JSON.
    /// - Throws: ``ProviderError``: ``ProviderError/Kind/rejected`` with `access_denied` or
    ///   `expired_token`; ``ProviderError/Kind/abandoned`` when the code's time ran out here
    ///   first; cancellation.
    public func completeDeviceAuthorization(_ authorization: DeviceAuthorization) async throws -> Data {
        var interval = authorization.interval
        while true {
            guard Date() < authorization.expiresAt else {
                throw ProviderError(.abandoned, "the device code expired before it was approved; nothing was stored (sign in again)")
            }
            try await Task.sleep(for: interval)
            do {
                return try await tokenRequest([("grant_type", "urn:ietf:params:oauth:grant-type:device_code"), ("device_code", authorization.deviceCode)])
            } catch let error as ProviderError where error.kind == .rejected && error.oauthError == "authorization_pending" {
                continue
            } catch let error as ProviderError where error.kind == .rejected && error.oauthError == "slow_down" {
                interval += .seconds(5)
            }
        }
    }
}

/// Signing in at a provider and keeping what it grants, through the token rules (requested and
/// granted scopes, history, audit).
///
/// ```swift
/// let signIn = try ProviderSignIn(keeper: keeper, provider: "news")
/// let started = try await signIn.startDevice(scopes: [try Scope("posts:read")])
/// print("Go to \(started.verificationURI) and enter \(started.userCode)")
/// let token = try await signIn.completeDevice(started, account: "alice")
/// ```
public struct ProviderSignIn: Sendable {
    /// The keeper that stores what is granted.
    public let keeper: TokenKeeper
    /// The provider.
    public let client: ProviderClient

    /// Sign-in at the provider named `provider`, kept in `keeper`'s store.
    ///
    /// - Throws: `KeysmithError.Code.itemNotFound` when no such provider is kept.
    public init(keeper: TokenKeeper, provider name: String, timeout: Duration = .seconds(30)) throws {
        let registry = ProviderRegistry(store: keeper.store)
        guard let provider = try registry.provider(named: name) else {
            throw KeysmithError(.itemNotFound, "there is no provider named \(name) (see `keysmith provider list`)")
        }
        self.keeper = keeper
        self.client = try ProviderClient(provider: provider, registry: registry, timeout: timeout)
    }

    /// Starts the device flow; show the result to the person.
    public func startDevice(scopes: Set<Scope>) async throws -> DeviceAuthorization {
        try await client.startDeviceAuthorization(scopes: scopes)
    }

    /// Waits for the person's approval and keeps the token at the provider's name and `account`.
    ///
    /// - Parameter replacing: Whether a token kept there may be replaced (else it is updated:
    ///   its history and revocations are kept).
    public func completeDevice(_ authorization: DeviceAuthorization, account: String, replacing: Bool = false) async throws -> OAuthToken {
        let response = try await client.completeDeviceAuthorization(authorization)
        return try await keep(response, account: account, requested: authorization.scopes, replacing: replacing)
    }

    /// Signs the client itself in (client credentials, for services) and keeps the token.
    public func clientCredentials(account: String, scopes: Set<Scope>, replacing: Bool = false) async throws -> OAuthToken {
        let response = try await client.clientCredentials(scopes: scopes)
        return try await keep(response, account: account, requested: scopes, replacing: replacing)
    }

    /// Keeps a token response: a new token, or an update (an incremental grant) of the one kept.
    func keep(_ response: Data, account: String, requested: Set<Scope>, replacing: Bool) async throws -> OAuthToken {
        let provider = client.provider
        // Kept even when the caller's task is cancelled now, or the process is asked to stop
        // (SignalShield): the provider has issued the tokens.
        return try await SignalShield.holding {
            try await Task {
                try await keepNow(response, provider: provider, account: account, requested: requested, replacing: replacing)
            }.value
        }
    }

    private func keepNow(_ response: Data, provider: OAuthProvider, account: String, requested: Set<Scope>, replacing: Bool)
        async throws -> OAuthToken
    {
        if !replacing, try await keeper.awaiting.token(service: provider.name, account: account) != nil {
            return try await keeper.awaiting.update(with: response, requested: requested, allowRegrant: true, service: provider.name,
                                                    account: account).token
        }
        return try await keeper.awaiting.importResponse(response, service: provider.name, account: account, requested: requested, clientID: provider.clientID,
                                         issuer: provider.issuer, replacing: replacing)
    }
}

/// A browser sign-in in progress (authorization code with PKCE S256, RFC 7636, and a loopback
/// redirect, RFC 8252): the URL to open, and the listener waiting on 127.0.0.1 for the one
/// redirect that ends it. The `state` and the PKCE verifier never leave this value.
public struct BrowserAuthorization: Sendable, CustomStringConvertible, CustomReflectable {
    /// The URL (it carries the state and the challenge, never the verifier).
    public var description: String { url }
    /// The URL and the redirect only.
    public var customMirror: Mirror { Mirror(self, children: ["url": url, "redirectURI": redirectURI]) }

    /// The URL the person opens in a browser.
    public var url: String
    /// Where the provider sends the browser back: `http://127.0.0.1:PORT/callback`.
    public var redirectURI: String
    let state: String
    let verifier: String
    let listener: LoopbackListener
    let scopes: Set<Scope>
}

extension ProviderSignIn {
    /// Starts a browser sign-in: a listener on 127.0.0.1 at an ephemeral port, a fresh `state`
    /// and PKCE verifier (32 random bytes each), and the authorization URL with the S256
    /// challenge.
    ///
    /// - Throws: ``ProviderError`` (``ProviderError/Kind/unsupported``) without an
    ///   authorization endpoint; `KeysmithError.Code.ioFailure` when no port can be bound.
    public func startBrowser(scopes: Set<Scope>) throws -> BrowserAuthorization {
        let provider = client.provider
        guard let endpoint = provider.authorizationEndpoint else {
            throw ProviderError(.unsupported, "provider \(OneLine.escaped(provider.name)) has no authorization endpoint "
                                + "(add it with --authorization-endpoint, or sign in with --device)")
        }
        _ = try EndpointURL(endpoint, role: "authorization endpoint")
        let listener: LoopbackListener
        do {
            listener = try LoopbackListener()
        } catch {
            throw KeysmithError(.ioFailure, "cannot listen on 127.0.0.1 for the sign-in's redirect: \(error)")
        }
        let state = PKCE.randomText(), verifier = PKCE.randomText()
        let redirect = "http://127.0.0.1:\(listener.port)/callback"
        var components = URLComponents(string: endpoint)!
        var query = components.queryItems ?? []
        query += [URLQueryItem(name: "response_type", value: "code"), URLQueryItem(name: "client_id", value: provider.clientID),
                  URLQueryItem(name: "redirect_uri", value: redirect), URLQueryItem(name: "state", value: state),
                  URLQueryItem(name: "code_challenge", value: PKCE.challenge(verifier)), URLQueryItem(name: "code_challenge_method", value: "S256")]
        if !scopes.isEmpty { query.append(URLQueryItem(name: "scope", value: client.scopeText(scopes))) }
        components.percentEncodedQuery = query.map { FormEncoding.encode($0.name) + "=" + FormEncoding.encode($0.value ?? "") }.joined(separator: "&")
        return BrowserAuthorization(url: components.string ?? endpoint, redirectURI: redirect, state: state, verifier: verifier,
                                    listener: listener, scopes: scopes)
    }

    /// Waits for the one redirect to the listener (it answers that request and stops listening),
    /// checks its `state`, exchanges the code with the PKCE verifier, and keeps the token.
    ///
    /// - Throws: ``ProviderError``: ``ProviderError/Kind/rejected`` for an `error` in the
    ///   redirect (`access_denied`, …) or a refused exchange; ``ProviderError/Kind/badResponse``
    ///   for a redirect with a wrong `state` or no code; ``ProviderError/Kind/abandoned`` when
    ///   none came within `timeout`. Nothing is kept then.
    public func completeBrowser(_ authorization: BrowserAuthorization, account: String, replacing: Bool = false,
                                timeout: Duration = .seconds(300)) async throws -> OAuthToken {
        defer { authorization.listener.close() }
        let deadline = ContinuousClock.now + timeout
        func answer(_ connection: LoopbackConnection, _ status: String, _ text: String) {
            let body = Array("<!doctype html><title>Keysmith</title><p>\(text)</p>\n".utf8)
            connection.answer(Array("HTTP/1.1 \(status)\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n".utf8) + body)
        }
        // Connections that send no request (a browser's speculative connection) or not a GET
        // (a preflight) are closed and the wait goes on; the first GET is the one request
        // answered, and then nothing more is accepted.
        var request: (connection: LoopbackConnection, target: Substring)?
        while request == nil {
            guard ContinuousClock.now < deadline else {
                throw ProviderError(.abandoned, "no redirect came back from the browser within \(timeout); nothing was stored (sign in again)")
            }
            try Task.checkCancellation()
            guard let connection = try authorization.listener.tryAccept() else {
                try await Task.sleep(for: .milliseconds(50))
                continue
            }
            guard let head = connection.readHead(), let line = String(decoding: head, as: UTF8.self).split(separator: "\r\n").first,
                  line.hasPrefix("GET "), let target = line.split(separator: " ").dropFirst().first
            else {
                answer(connection, "400 Bad Request", "Keysmith is waiting for the sign-in's redirect.")
                continue
            }
            request = (connection, target)
        }
        authorization.listener.close()
        let (connection, target) = request!
        guard let components = URLComponents(string: "http://127.0.0.1" + target), components.path == "/callback" else {
            answer(connection, "400 Bad Request", "This is not the sign-in's redirect. Sign in again from the terminal.")
            throw ProviderError(.badResponse, "the request to the sign-in's listener was not its redirect; nothing was stored (sign in again)")
        }
        let items = components.queryItems ?? []
        func value(_ name: String) -> String? { items.first { $0.name == name }?.value }
        guard let state = value("state"), constantTimeEqual(Array(state.utf8), Array(authorization.state.utf8)) else {
            answer(connection, "400 Bad Request", "The sign-in's state does not match. Sign in again from the terminal.")
            throw ProviderError(.badResponse, "the redirect's state does not match the sign-in's (a forged or stale redirect); nothing was stored")
        }
        if let error = value("error") {
            answer(connection, "200 OK", "The sign-in was refused. You can close this window.")
            let description = value("error_description").map { ": " + OneLine.escaped(String($0.prefix(300))) } ?? ""
            throw ProviderError(.rejected, "\(OneLine.escaped(client.provider.name)) refused the sign-in: \(OneLine.escaped(String(error.prefix(128))))\(description)",
                                oauthError: error)
        }
        guard let code = value("code"), !code.isEmpty else {
            answer(connection, "400 Bad Request", "The redirect has no code. Sign in again from the terminal.")
            throw ProviderError(.badResponse, "the redirect has no authorization code; nothing was stored")
        }
        // The browser hears how it ended only once the code is exchanged and the token kept.
        do {
            let response = try await client.exchange(code: code, redirectURI: authorization.redirectURI, verifier: authorization.verifier)
            let token = try await keep(response, account: account, requested: authorization.scopes, replacing: replacing)
            answer(connection, "200 OK", "Signed in to Keysmith. You can close this window.")
            return token
        } catch {
            answer(connection, "200 OK", "The sign-in failed; the terminal says why.")
            throw error
        }
    }
}

/// PKCE (RFC 7636) and `state` values.
enum PKCE {
    /// 32 random bytes, base64url without padding (43 characters).
    static func randomText() -> String {
        base64URL((try? Random.bytes(count: 32)) ?? (0..<32).map { _ in UInt8.random(in: 0...255) })
    }

    /// The S256 challenge of a verifier.
    static func challenge(_ verifier: String) -> String { base64URL(SHA256.hash(Array(verifier.utf8))) }

    static func base64URL(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
