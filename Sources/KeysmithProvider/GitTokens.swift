public import Foundation
import Keysmith
import KeysmithCrypto
import KeysmithTokens

/// git's credentials for the hosts bound to a provider (``OAuthProvider/gitHosts``): a fresh
/// access token as the password, refreshed single-flight however many git processes ask at
/// once (through ``ProviderTokens``), and one refresh when a server rejects it. What
/// `keysmith git-credential` does for such a host; the host's plain credentials stay the
/// internet-password items of `GitCredential` (module KeysmithStores).
///
/// ```swift
/// let git = try GitTokenCredentials(tokens: ProviderTokens(keeper: TokenKeeper(store: vault)))
/// if let answer = try await git.credential(protocol: "https", host: "git.example", username: nil) {
///     print("username=\(answer.username)\npassword=\(answer.password)")
/// }
/// ```
public struct GitTokenCredentials: Sendable {
    /// The tokens, and the store their providers are kept in.
    public let tokens: ProviderTokens

    /// git's credentials from `tokens`' store.
    public init(tokens: ProviderTokens) { self.tokens = tokens }

    /// What git is given for a host: the token's account as the username and its access token
    /// as the password. Its description never shows the password.
    public struct Answer: Sendable, CustomStringConvertible, CustomReflectable {
        /// The token's account.
        public var username: String
        /// The access token.
        public var password: String
        /// When the access token expires, if the provider said (git 2.41+ reads it as
        /// `password_expiry_utc`).
        public var expiry: Date?
        /// The provider's name (the token's service).
        public var provider: String

        /// `git credential for alice at news (password redacted)`.
        public var description: String { "git credential for \(username) at \(provider) (password redacted)" }
        /// What `dump` and debuggers show: never the password.
        public var customMirror: Mirror {
            Mirror(self, children: ["username": username, "expiry": expiry as Any, "provider": provider, "password": "<redacted>"])
        }
    }

    /// The provider bound to a git host, after checking the protocol: a token is given to
    /// `https`, or to `http` on this machine only (never sent in the clear over a network).
    ///
    /// - Parameters:
    ///   - protocol: git's `protocol` (`https`, `http`, …).
    ///   - host: git's `host`: `host` or `host:port`.
    /// - Returns: The provider, or `nil` when no provider is bound to the host (its
    ///   credentials are plain ones).
    /// - Throws: `KeysmithError.Code.invalidArgument` when the host is bound but the protocol
    ///   would send the token in the clear; a store failure.
    public func provider(protocol: String?, host: String) throws -> OAuthProvider? {
        guard let provider = try tokens.registry.provider(forGitHost: host) else { return nil }
        let scheme = (`protocol` ?? "").lowercased()
        let bare = host.hasPrefix("[") ? String(host.dropFirst().prefix { $0 != "]" }) : String(host.prefix { $0 != ":" })
        let loopback = (try? EndpointURL("http://" + (bare.contains(":") ? "[\(bare)]" : bare) + "/", role: "git host"))?.isLoopback ?? false
        guard scheme == "https" || (scheme == "http" && loopback) else {
            throw KeysmithError.invalidArgument("the git host \(OneLine.escaped(host)) is the provider \(OneLine.escaped(provider.name))'s, "
                                                + "but git asks for \(OneLine.escaped(scheme.isEmpty ? "no protocol" : scheme)): an OAuth token "
                                                + "is given to https (or http on this machine) only")
        }
        return provider
    }

    /// The account whose token answers for the provider: git's `username` when it sent one, or
    /// else the provider's only token.
    ///
    /// - Returns: The account, or `nil` when the provider has no token (for that username).
    /// - Throws: `KeysmithError.Code.invalidArgument` when git sent no username and the provider
    ///   has several tokens; a store failure.
    public func account(at provider: OAuthProvider, username: String?) throws -> String? {
        if let username, !username.isEmpty {
            return try tokens.keeper.token(service: provider.name, account: username) == nil ? nil : username
        }
        let accounts = try tokens.keeper.tokenKeys(service: provider.name).map(\.account)
        guard accounts.count <= 1 else {
            throw KeysmithError.invalidArgument("the provider \(OneLine.escaped(provider.name)) keeps \(accounts.count) tokens; put the account in the "
                                                + "remote's URL (https://ACCOUNT@host/…) or set credential.username")
        }
        return accounts.first
    }

    /// The credential for a host: a token valid for at least a minute (or half its lifetime, if
    /// the provider's tokens live shorter than two minutes), refreshed if needed.
    ///
    /// Other git processes may be using the token this one is about to replace, and a provider
    /// may end the previous access token at each refresh (django-oauth-toolkit does): a refresh
    /// the moment the token runs short would cut their fetches off. So a token handed out is
    /// left alone for a guard time after it could last have been handed out: once it has less
    /// than the minimum validity left, callers wait (without holding a thread) until it has
    /// run down by the guard time, and then one of them refreshes. The guard is 10 s, or the
    /// whole minimum validity when that is shorter (the token's end, for short-lived tokens):
    /// every git process gets at least that long with its token, and waits at most that long.
    ///
    /// - Returns: The answer, or `nil` when no provider is bound to the host or it keeps no
    ///   token for the username (sign in with `keysmith token login`).
    /// - Throws: As ``provider(protocol:host:)``, ``account(at:username:)`` and
    ///   ``ProviderTokens/freshToken(service:account:minValidity:)``.
    public func credential(protocol: String?, host: String, username: String?) async throws -> Answer? {
        guard let provider = try provider(protocol: `protocol`, host: host),
              let account = try account(at: provider, username: username)
        else { return nil }
        let kept = try await tokens.currentAwaiting(service: provider.name, account: account)
        let minimum = Self.minValidity(kept)
        if let wait = Self.guardWait(kept, minimum: minimum, now: tokens.keeper.now) { try await Task.sleep(for: wait) }
        let token = try await tokens.freshToken(service: provider.name, account: account, minValidity: minimum)
        // git reads `key=value` lines: a line break or NUL in what it is given would add lines
        // of the provider's choosing (another host, `quit`). Tokens never hold them (RFC 6749
        // A.12: printable ASCII); one that does is refused, not passed on.
        guard !(token.accessToken + account).unicodeScalars.contains(where: { $0 == "\n" || $0 == "\r" || $0 == "\0" }) else {
            throw KeysmithError(.malformedData, "the token for \(OneLine.escaped(account)) at \(OneLine.escaped(provider.name)) holds a line break "
                                + "or NUL, which git's credential protocol cannot carry; it is not given to git")
        }
        // git sends the password as HTTP Basic, which a server takes as a bearer token; a token
        // of another type (`mac`, `DPoP`) would be used without its proof.
        guard token.isBearer else {
            throw KeysmithError(.invalidArgument, "the token for \(OneLine.escaped(account)) at \(OneLine.escaped(provider.name)) is of type "
                                + "\(OneLine.unicodeEscaped(String(token.tokenType.prefix(64)))), not Bearer (RFC 6750); it is not given to git")
        }
        return Answer(username: account, password: token.accessToken, expiry: token.expiresAt, provider: provider.name)
    }

    /// A server rejected `password` for the host (git's `erase`): the grant is refreshed once,
    /// however many git processes report the same rejection (``ProviderTokens/refresh(service:account:rejected:)``),
    /// and never deleted.
    ///
    /// - Returns: Whether the host is a provider's (`false`: a plain credential, for the caller
    ///   to erase); for a provider's host, `true` once the rejection is dealt with (refreshed, or
    ///   the rejected password was not the kept access token, so nothing was done).
    /// - Throws: As ``credential(protocol:host:username:)``.
    @discardableResult
    public func rejected(protocol: String?, host: String, username: String?, password: String?) async throws -> Bool {
        guard let provider = try provider(protocol: `protocol`, host: host) else { return false }
        guard let password, let account = try account(at: provider, username: username) else { return true }
        let kept = try await tokens.currentAwaiting(service: provider.name, account: account)
        // Only the kept access token's rejection is news: any other password is not Keysmith's.
        guard constantTimeEqual(Array(kept.accessToken.utf8), Array(password.utf8)) else { return true }
        _ = try await tokens.refresh(service: provider.name, account: account, rejected: password)
        return true
    }

    /// How long to wait before the token may be refreshed: `nil` when it is fresh, expired, or
    /// past its guard time (see ``credential(protocol:host:username:)``).
    static func guardWait(_ token: OAuthToken, minimum: Duration, now: Date) -> Duration? {
        guard token.revokedAt == nil, let expiry = token.expiresAt else { return nil }
        let left = expiry.timeIntervalSince(now), minimumSeconds = minimum.inSeconds
        let refreshAt = minimumSeconds - min(10, minimumSeconds)  // time left when the refresh may happen
        guard left < minimumSeconds, left > refreshAt else { return nil }
        return .milliseconds(Int64(((left - refreshAt) * 1000).rounded(.up)))
    }

    /// One minute, or half the token's lifetime when that is shorter (a provider whose tokens
    /// live 2 s would otherwise be asked for a refresh on every call).
    static func minValidity(_ token: OAuthToken) -> Duration {
        guard let expiry = token.expiresAt else { return .seconds(60) }
        let lifetime = expiry.timeIntervalSince(token.refreshedAt ?? token.issuedAt)
        return .milliseconds(Int64(max(0, min(60, lifetime / 2)) * 1000))
    }
}
