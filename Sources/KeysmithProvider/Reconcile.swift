import Keysmith
public import KeysmithTokens
import Foundation

/// What the provider says of the tokens kept here (RFC 7662), and what follows from it: a token
/// the provider reports inactive while it is valid here was revoked there, so it is revoked
/// here too, with the reason "inactive at the provider", audited, and policy decisions follow.
///
/// Only tokens whose access token is still valid here are asked about: an expired access token
/// is inactive at any provider, and says nothing about its grant.
///
/// ```swift
/// let reconcile = ProviderIntrospection(keeper: keeper)
/// let report = try await reconcile.reconcile(service: "news")
/// print("\(report.checked) checked, \(report.revoked.count) revoked here")
/// ```
public struct ProviderIntrospection: Sendable {
    /// The tokens' keeper.
    public let keeper: TokenKeeper
    /// Requests in flight at once.
    public var concurrency: Int
    /// Each request's whole time.
    public var timeout: Duration

    /// Introspection of `keeper`'s tokens at their providers.
    public init(keeper: TokenKeeper, concurrency: Int = 8, timeout: Duration = .seconds(30)) {
        self.keeper = keeper
        self.concurrency = max(1, concurrency)
        self.timeout = timeout
    }

    /// Asks the token's provider about its access token; when the provider says inactive and the
    /// token is valid here, revokes it here ("inactive at the provider").
    ///
    /// - Returns: What the provider said, and whether the token was revoked here because of it.
    /// - Throws: `KeysmithError.Code.itemNotFound` for no such token or provider;
    ///   ``ProviderError`` (``ProviderError/Kind/unsupported`` without an introspection endpoint).
    public func introspect(service: String, account: String) async throws -> (answer: ProviderClient.Introspection, revokedHere: Bool) {
        let registry = ProviderRegistry(store: keeper.store)
        guard let provider = try await registry.providerAwaiting(named: service) else {
            throw KeysmithError(.itemNotFound, "there is no provider named \(service) (see `keysmith provider list`)")
        }
        guard let token = try await keeper.awaiting.token(service: service, account: account) else {
            throw KeysmithError(.itemNotFound, "there is no token for \(account) at \(service)")
        }
        let client = try await registry.clientAwaiting(for: provider, timeout: timeout)
        let answer = try await client.introspect(token.accessToken)
        return (answer, try await follow(answer, token: token, service: service, account: account))
    }

    /// What ``reconcile(service:)`` did.
    public struct Report: Sendable, Hashable {
        /// Tokens asked about.
        public var checked = 0
        /// Tokens the provider said were inactive, now revoked here (their accounts).
        public var revoked: [String] = []
        /// Tokens whose question failed, with why (their accounts).
        public var failed: [String: String] = [:]
    }

    /// Asks the provider about every token of `service` that is valid here, `concurrency` at a
    /// time, and revokes here those it reports inactive.
    public func reconcile(service: String) async throws -> Report {
        guard let client = try await ProviderRegistry(store: keeper.store).clientAwaiting(named: service, timeout: timeout) else {
            throw KeysmithError(.itemNotFound, "there is no provider named \(service) (see `keysmith provider list`)")
        }
        guard client.provider.introspectionEndpoint != nil else {
            throw ProviderError(.unsupported, "provider \(OneLine.escaped(service)) has no introspection endpoint")
        }
        let now = keeper.now
        let candidates = try keeper.tokens(matching: TokenFilter(service: service)).filter { $0.token.isActive(at: now) }
        var report = Report()
        var next = candidates.makeIterator()
        try await withThrowingTaskGroup(of: (String, OAuthToken, Result<ProviderClient.Introspection, ProviderError>).self) { group in
            func add() {
                guard let (reference, token) = next.next() else { return }
                group.addTask {
                    do { return (reference.account, token, .success(try await client.introspect(token.accessToken))) }
                    catch let error as ProviderError { return (reference.account, token, .failure(error)) }
                }
            }
            for _ in 0..<concurrency { add() }
            while let (account, token, result) = try await group.next() {
                report.checked += 1
                switch result {
                case .success(let answer):
                    if try await follow(answer, token: token, service: service, account: account) { report.revoked.append(account) }
                case .failure(let error):
                    report.failed[account] = error.message
                }
                add()
            }
        }
        report.revoked.sort()
        return report
    }

    /// Revokes the token here when the provider says inactive and it is valid here.
    private func follow(_ answer: ProviderClient.Introspection, token: OAuthToken, service: String, account: String) async throws -> Bool {
        guard !answer.active, token.isActive(at: keeper.now) else { return false }
        try await keeper.awaiting.revokeAll(service: service, account: account, reason: "inactive at the provider")
        return true
    }
}
