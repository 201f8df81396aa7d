import Foundation
import Keysmith

extension OAuthProvider {
    /// Describes a provider from its issuer's metadata: RFC 8414's
    /// `/.well-known/oauth-authorization-server` (inserted before the issuer's path), else
    /// OpenID Connect's `/.well-known/openid-configuration`. The metadata's `issuer` must be the
    /// issuer asked for (RFC 8414 §3.3), and every endpoint it names passes the same checks as
    /// one given by hand.
    ///
    /// ```swift
    /// var provider = try await OAuthProvider.discover(name: "news", issuer: "https://auth.example", clientID: "cli")
    /// provider.clientAuthentication = .none
    /// ```
    ///
    /// - Throws: ``ProviderError`` when the metadata cannot be fetched or is not what RFC 8414
    ///   says; `KeysmithError.Code.invalidArgument` for a bad issuer URL or endpoint.
    public static func discover(name: String, issuer: String, clientID: String, trustedRoots: String? = nil,
                                timeout: Duration = .seconds(30)) async throws -> OAuthProvider {
        let issuerURL = try EndpointURL(issuer, role: "issuer")
        guard var components = URLComponents(string: issuer), components.query == nil else {
            throw KeysmithError.invalidArgument("the issuer has a query (RFC 8414 §2: an issuer has none)")
        }
        let path = components.path.hasSuffix("/") ? String(components.path.dropLast()) : components.path
        let http = ProviderHTTP(timeout: timeout, trustedRoots: trustedRoots)
        var candidates: [String] = []
        components.path = "/.well-known/oauth-authorization-server" + path
        candidates.append(components.string ?? "")
        components.path = path + "/.well-known/openid-configuration"
        candidates.append(components.string ?? "")
        var lastStatus = 0
        for candidate in candidates {
            let response = try await http.get(try EndpointURL(candidate, role: "metadata URL"))
            guard response.status == 200 else {
                lastStatus = response.status
                continue
            }
            guard let object = JSONValue.object(response.body) else {
                throw ProviderError(.badResponse, "the metadata of \(OneLine.escaped(issuerURL.host)) is not a JSON object")
            }
            // RFC 8414 §3.3: identical, not "the same but for a trailing slash" (tokens name their
            // issuer, and a near miss is how a mix-up starts).
            guard let stated = object["issuer"]?.string, stated == issuer else {
                if let stated = object["issuer"]?.string, stated == issuer + "/" || stated + "/" == issuer {
                    throw KeysmithError.invalidArgument("the provider's issuer is \(OneLine.escaped(stated)), which must be given exactly "
                                                        + "(RFC 8414 §3.3: identical, trailing slash included); nothing was added")
                }
                throw ProviderError(.badResponse, "the metadata at \(OneLine.escaped(issuerURL.host)) names another issuer "
                                    + "(\(OneLine.escaped(String((object["issuer"]?.string ?? "none").prefix(200))))); refused (RFC 8414 §3.3)")
            }
            guard let token = object["token_endpoint"]?.string else {
                throw ProviderError(.badResponse, "the metadata of \(OneLine.escaped(issuerURL.host)) has no token_endpoint")
            }
            let methods = object["token_endpoint_auth_methods_supported"].flatMap { value -> [String]? in
                if case .array(let items) = value { return items.compactMap(\.string) } else { return nil }
            } ?? ["client_secret_basic"]
            let provider = OAuthProvider(
                name: name, issuer: issuer, tokenEndpoint: token, authorizationEndpoint: object["authorization_endpoint"]?.string,
                deviceAuthorizationEndpoint: object["device_authorization_endpoint"]?.string, revocationEndpoint: object["revocation_endpoint"]?.string,
                introspectionEndpoint: object["introspection_endpoint"]?.string, clientID: clientID,
                clientAuthentication: methods.contains("none") ? .none : .clientSecretBasic, trustedRoots: trustedRoots)
            try provider.validate()
            return provider
        }
        throw ProviderError(.badResponse, "\(OneLine.escaped(issuerURL.host)) publishes no authorization server metadata (HTTP \(lastStatus) at both well-known addresses)")
    }
}
