public import Keysmith
public import KeysmithTokens
import Foundation

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
        return try keep(response, account: account, requested: authorization.scopes, replacing: replacing)
    }

    /// Signs the client itself in (client credentials, for services) and keeps the token.
    public func clientCredentials(account: String, scopes: Set<Scope>, replacing: Bool = false) async throws -> OAuthToken {
        let response = try await client.clientCredentials(scopes: scopes)
        return try keep(response, account: account, requested: scopes, replacing: replacing)
    }

    /// Keeps a token response: a new token, or an update (an incremental grant) of the one kept.
    func keep(_ response: Data, account: String, requested: Set<Scope>, replacing: Bool) throws -> OAuthToken {
        let provider = client.provider
        if !replacing, try keeper.token(service: provider.name, account: account) != nil {
            return try keeper.update(with: response, requested: requested, allowRegrant: true, service: provider.name, account: account).token
        }
        return try keeper.importResponse(response, service: provider.name, account: account, requested: requested, clientID: provider.clientID,
                                         issuer: provider.issuer, replacing: replacing)
    }
}
