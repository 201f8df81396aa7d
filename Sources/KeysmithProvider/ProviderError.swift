import Keysmith

/// A failure talking to an authorization server. Branch on ``kind`` and ``oauthError``, never on
/// the message; the message never holds a token, a secret, a code or a verifier, and what the
/// server wrote is escaped onto one line.
public struct ProviderError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What went wrong.
    public enum Kind: String, Sendable, Hashable {
        /// The server answered with an OAuth error (``ProviderError/oauthError`` names it:
        /// `invalid_grant`, `access_denied`, `expired_token`, `invalid_client`, …).
        case rejected
        /// The server could not be reached (refused, no such host, connection lost).
        case unreachable
        /// No answer within the request's timeout.
        case timedOut
        /// TLS failed: a certificate that does not verify or does not name the host.
        case tls
        /// An answer that is not what the protocol says: not JSON, too large, fields missing or
        /// of the wrong type, an HTTP status the endpoint may not send, a redirect.
        case badResponse
        /// The provider has no endpoint for this (no revocation endpoint, say).
        case unsupported
        /// The sign-in was given up: its code expired, or the loopback redirect did not come.
        case abandoned
    }

    /// What went wrong.
    public var kind: Kind
    /// The OAuth `error` code the server sent, for ``Kind/rejected``.
    public var oauthError: String?
    /// What happened, for people.
    public var message: String
    /// The `Retry-After` the server sent with a 503 or 429, in seconds.
    public var retryAfter: Int?

    /// Describes a failure.
    public init(_ kind: Kind, _ message: String, oauthError: String? = nil, retryAfter: Int? = nil) {
        self.kind = kind
        self.message = message
        self.oauthError = oauthError
        self.retryAfter = retryAfter
    }

    /// The message.
    public var description: String { message }

    /// Whether trying the same request later may succeed (the server was away, slow, or said
    /// to come back): what the revocation outbox retries.
    public var isTransient: Bool {
        switch kind {
        case .unreachable, .timedOut, .abandoned: true  // abandoned: a request cancelled, not refused
        case .badResponse: retryAfter != nil
        case .rejected: oauthError == "temporarily_unavailable" || oauthError == "server_error" || oauthError == "slow_down"
        case .tls, .unsupported: false
        }
    }
}
