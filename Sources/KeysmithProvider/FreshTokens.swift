import Keysmith
import KeysmithSystem
import KeysmithCrypto
public import KeysmithTokens
import Foundation
import Synchronization

/// Access tokens that are fresh when you ask for them, refreshed at their provider at most once
/// per grant however many callers ask at the same moment: in one process (callers wait for the
/// one refresh in flight) and across processes and machines (through the store's named lock,
/// `ExclusiveLocking`: the vault's lock file, the Secret Service's, a PostgreSQL advisory
/// lock).
///
/// A refresh goes: take the grant's lock; read the token again (another process may have just
/// refreshed it: then no request is made); send the refresh token; commit the new access token
/// and the rotated refresh token with their audit entry, durably; release the lock; return.
/// A provider that rotates refresh tokens with reuse detection therefore never sees one used
/// twice by Keysmith.
///
/// ```swift
/// let tokens = try ProviderTokens(keeper: TokenKeeper(store: vault))
/// let token = try await tokens.freshToken(service: "news", account: "alice", minValidity: .seconds(60))
/// request.setValue("Bearer \(token.accessToken)", forHTTPHeaderField: "Authorization")
/// ```
///
/// The one window no client can close: the provider has answered (the old refresh token is
/// spent) and the process dies before the commit. The new tokens are lost with it; the next
/// refresh sends the spent refresh token, the provider answers `invalid_grant` (and, with reuse
/// detection, ends the grant), and the token is marked dead: sign in again.
public final class ProviderTokens: Sendable {
    /// The tokens' keeper (its store must be `ExclusiveLocking`).
    public let keeper: TokenKeeper
    let locks: any ExclusiveLocking
    let registry: ProviderRegistry
    let timeout: Duration
    /// How long to wait for another holder of a grant's lock.
    let lockTimeout: Duration
    /// Refresh intents (``RefreshIntent``) waited out to their deadline, by record version:
    /// they fence nothing any more.
    let expiredIntents = Mutex<Set<ItemVersion>>([])

    /// Fresh tokens from `keeper`'s store, refreshed at the providers kept there.
    ///
    /// - Parameters:
    ///   - keeper: The tokens' keeper.
    ///   - timeout: Each request's whole time.
    ///   - lockTimeout: How long to wait for a refresh another process is making.
    /// - Throws: `KeysmithError.Code.invalidArgument` when the store cannot hold locks between
    ///   processes (every store Keysmith ships can).
    public init(keeper: TokenKeeper, timeout: Duration = .seconds(30), lockTimeout: Duration = .seconds(90)) throws {
        guard let locks = keeper.store as? any ExclusiveLocking else {
            throw KeysmithError.invalidArgument("\(keeper.store.storeDescription) cannot hold a lock between processes, so refreshes could race")
        }
        self.keeper = keeper
        self.locks = locks
        self.registry = ProviderRegistry(store: keeper.store)
        self.timeout = timeout
        self.lockTimeout = lockTimeout
    }

    /// The refreshes in flight in this process, by store, service and account: a caller that
    /// finds one waits for it instead of starting its own.
    private static let flights = Mutex<[String: Task<OAuthToken, any Error>]>([:])

    /// A token whose access token is valid for at least `minValidity` (or that has no expiry),
    /// refreshed at its provider if needed. A token that needs no refresh costs no request and
    /// takes no lock.
    ///
    /// - Parameters:
    ///   - service: The token's service: the provider's name.
    ///   - account: The token's account.
    ///   - minValidity: How long the access token must stay valid.
    /// - Returns: The token, fresh.
    /// - Throws: `KeysmithError.Code.itemNotFound` for no such token, or no provider of that
    ///   name; `KeysmithError.Code.invalidArgument` for a token logged out or without a refresh
    ///   token; ``ProviderError`` from the provider (`invalid_grant`: the grant is dead, and its
    ///   token is now revoked locally, audited); `KeysmithError.Code.timedOut` when another
    ///   process held the grant's lock past the lock timeout; a store failure.
    public func freshToken(service: String, account: String, minValidity: Duration = .seconds(60)) async throws -> OAuthToken {
        // Read without holding a thread where the store can be awaited (PostgreSQL): this is
        // every request's path, and most find the token fresh.
        let token = try await currentAwaiting(service: service, account: account)
        if isFresh(token, minValidity) { return token }
        // By the store handle itself, not its description: two stores that describe themselves
        // alike (two memory stores, two databases with one namespace name) share no refresh.
        // The task keeps the handle alive, so its identity is not reused while it runs.
        let flight = "\(ObjectIdentifier(keeper.store))\u{0}\(service)\u{0}\(account)"
        let task = Self.flights.withLock { flights -> Task<OAuthToken, any Error> in
            if let running = flights[flight] { return running }
            let task = Task { try await self.refreshOnce(service: service, account: account, need: .validity(minValidity)) }
            flights[flight] = task
            return task
        }
        defer { _ = Self.flights.withLock { flights in flights[flight] == task ? flights.removeValue(forKey: flight) : nil } }
        // A token refreshed just now is as fresh as the provider makes them, even if its
        // lifetime is shorter than `minValidity`: it is not refreshed again.
        return try await task.value
    }

    /// The token when it needs no refresh (valid for `minValidity`, or without an expiry), read
    /// synchronously: what ``freshToken(service:account:minValidity:)`` does first, for callers
    /// that would rather not start an async task when nothing needs the network.
    ///
    /// - Returns: The token, or `nil` when it needs a refresh (or is logged out).
    /// - Throws: `KeysmithError.Code.itemNotFound` for no such token; a store failure.
    public func tokenIfFresh(service: String, account: String, minValidity: Duration = .seconds(60)) throws -> OAuthToken? {
        let token = try current(service: service, account: account)
        return isFresh(token, minValidity) ? token : nil
    }

    func current(service: String, account: String) throws -> OAuthToken {
        guard let token = try keeper.token(service: service, account: account) else {
            throw KeysmithError(.itemNotFound, "there is no token for \(account) at \(service)")
        }
        return token
    }

    /// ``current(service:account:)``, read through the store's async API when it has one.
    func currentAwaiting(service: String, account: String) async throws -> OAuthToken {
        guard let token = try await keeper.versionedTokensAwaiting([(service, account)])[0]?.token else {
            throw KeysmithError(.itemNotFound, "there is no token for \(account) at \(service)")
        }
        return token
    }

    func isFresh(_ token: OAuthToken, _ minValidity: Duration) -> Bool {
        guard token.revokedAt == nil else { return false }
        guard let expiry = token.expiresAt else { return true }
        return expiry.timeIntervalSince(keeper.now) >= minValidity.inSeconds
    }

    /// The grant's lock was lost before the refresh token was sent (see ``refreshHoldingLock``).
    struct LockLost: Error {}

    /// Why a refresh is wanted, read again under the grant's lock to decide whether it still is.
    enum Need: Sendable {
        /// The access token must stay valid this long.
        case validity(Duration)
        /// A server rejected this access token: refresh unless the kept one is another already.
        case rejected(String)
    }

    /// A token whose access token a server rejected (HTTP 401 with it, as git reports with
    /// `erase`), refreshed once however many callers report the same rejection: under the
    /// grant's lock, a kept access token that is no longer `accessToken` (another caller
    /// refreshed it, or someone signed in again) is returned as it is, with no request.
    /// Otherwise the grant is refreshed at its provider, even if the token looks valid (a
    /// provider may end an access token before its expiry). The grant is never deleted; when the
    /// provider says it is over (`invalid_grant`), the token is logged out here, as
    /// ``freshToken(service:account:minValidity:)`` does.
    ///
    /// ```swift
    /// if response.status == .unauthorized {
    ///     token = try await tokens.refresh(service: "news", account: "alice", rejected: token.accessToken)
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - service: The token's service: the provider's name.
    ///   - account: The token's account.
    ///   - accessToken: The access token the server rejected.
    /// - Returns: The token to use now.
    /// - Throws: As ``freshToken(service:account:minValidity:)``.
    public func refresh(service: String, account: String, rejected accessToken: String) async throws -> OAuthToken {
        let token = try await currentAwaiting(service: service, account: account)
        if token.revokedAt == nil, !constantTimeEqual(Array(token.accessToken.utf8), Array(accessToken.utf8)) { return token }
        return try await refreshOnce(service: service, account: account, need: .rejected(accessToken))
    }

    /// Refreshes under the grant's lock, starting over (at most three times) when the lock is
    /// lost before the refresh token goes out.
    private func refreshOnce(service: String, account: String, need: Need) async throws -> OAuthToken {
        for _ in 0..<3 {
            do {
                return try await refreshHoldingLock(service: service, account: account, need: need)
            } catch is LockLost {
                continue
            }
        }
        throw KeysmithError(.storeUnavailable, "the refresh lock of the token for \(account) at \(service) was lost three times before the "
                            + "refresh could be sent (the store's connection keeps dropping); nothing was sent")
    }

    /// Takes the grant's lock (waiting for another holder, without holding a thread), reads the
    /// token again, and refreshes only if it still needs it. Just before the refresh token is
    /// sent, it asks whether the lock is still held (``HeldLock/isHeld()``: on PostgreSQL it
    /// rides on a connection that may have dropped, letting another machine take it and send
    /// the same refresh token, which a rotating provider takes for theft); if not, nothing is
    /// sent and ``LockLost`` starts it over.
    private func refreshHoldingLock(service: String, account: String, need: Need) async throws -> OAuthToken {
        let asked = keeper.now
        let lock = try await acquire("refresh \(service)\u{0}\(account)")
        do {
            let token = try await refresh(holding: lock, asked: asked, service: service, account: account, need: need)
            await lock.awaitRelease()
            return token
        } catch {
            await lock.awaitRelease()
            throw error
        }
    }

    /// The rest of ``refreshHoldingLock(service:account:need:)``, with the lock taken at `asked`.
    private func refresh(holding lock: any HeldLock, asked: Date, service: String, account: String, need: Need) async throws -> OAuthToken {
        while true {
            guard let read = try await keeper.versionedTokensAwaiting([(service, account)])[0] else {
                throw KeysmithError(.itemNotFound, "there is no token for \(account) at \(service)")
            }
            let token = read.token
            switch need {
            case .validity(let minValidity):
                // Another process may have refreshed while this one waited: then its token is used,
                // even when the provider's tokens live shorter than `minValidity` (refreshing again
                // would not make them live longer).
                if isFresh(token, minValidity) { return token }
                if token.revokedAt == nil, let refreshed = token.refreshedAt, refreshed >= asked { return token }
            case .rejected(let accessToken):
                // Refreshed (or signed in again) since the rejection: the kept token is the answer.
                if token.revokedAt == nil, !constantTimeEqual(Array(token.accessToken.utf8), Array(accessToken.utf8)) { return token }
            }
            guard token.revokedAt == nil else {
                throw KeysmithError.invalidArgument("the token for \(account) at \(service) was logged out (revoke-all); sign in again")
            }
            guard let refreshToken = token.refreshToken else {
                throw KeysmithError.invalidArgument("the token for \(account) at \(service) has no refresh token; sign in again")
            }
            guard let client = try await registry.clientAwaiting(named: service, timeout: timeout) else {
                throw KeysmithError(.itemNotFound, "there is no provider named \(service) to refresh the token at (add one with `keysmith provider add \(service) …`)")
            }
            // A lock that can pass to another holder while this one runs (PostgreSQL's, with its
            // connection) is backed by an intent in the store, recorded before "still held?" is
            // asked: a holder that took the lock after this one lost it finds the intent and
            // waits for its answer instead of sending the same refresh token.
            var holder: String? = nil
            if lock.isLosableWhileHeld {
                switch try await recordIntent(service: service, account: account, tokenVersion: read.version) {
                case .recorded(let recorded): holder = recorded
                case .waited, .contended: continue
                }
            }
            guard await lock.awaitIsHeld() else {
                if let holder { await clearIntent(holder: holder, service: service, account: account) }
                throw LockLost()
            }
            // From here the refresh token is sent, and a rotating provider spends it whatever
            // becomes of this task: the request and what follows from its answer run to their end
            // in a task of their own, which a cancellation of the caller's does not reach (a
            // dropped answer would lose the grant). SIGINT, SIGTERM and SIGHUP are held until the
            // answer is committed (SignalShield: the command installs it), for the same reason.
            let fenced = holder
            return try await SignalShield.holding {
                try await Task {
                    do {
                        let kept = try await send(refreshToken, with: client, service: service, account: account)
                        if let fenced { await clearIntent(holder: fenced, service: service, account: account) }
                        return kept
                    } catch {
                        if let fenced { await clearIntent(holder: fenced, service: service, account: account) }
                        throw error
                    }
                }.value
            }
        }
    }

    /// Sends the refresh token and keeps the answer (``keep(_:of:from:service:account:)``);
    /// when the provider says the grant is over, logs the token out here.
    private func send(_ refreshToken: String, with client: ProviderClient, service: String, account: String) async throws -> OAuthToken {
        let provider = client.provider
        let response: Data
        do {
            response = try await client.refresh(refreshToken: refreshToken)
        } catch let error as ProviderError where error.kind == .rejected && error.oauthError == "invalid_grant" {
            // Read again before calling the grant dead: a writer that does not take the lock
            // (an older Keysmith, a script) may have refreshed it meanwhile.
            let again = try await currentAwaiting(service: service, account: account)
            if again.refreshToken != refreshToken, again.revokedAt == nil { return again }
            try await keeper.awaiting.revokeAll(
                service: service, account: account,
                reason: "the provider \(provider.name) refused the refresh token (invalid_grant): the grant is over; sign in again")
            throw error
        }
        return try await keep(response, of: refreshToken, from: provider, service: service, account: account)
    }

    /// Keeps a refresh response: the token refreshed, or, when it was replaced, logged out or
    /// deleted while the provider answered, the response's tokens queued for revocation there.
    private func keep(_ response: Data, of refreshToken: String, from provider: OAuthProvider, service: String, account: String)
        async throws -> OAuthToken
    {
        let refreshed: OAuthToken
        // Should the token turn out logged out meanwhile, the tokens this refresh brings are
        // queued for revocation at the provider in the same commit that keeps them.
        let outbox = RevocationOutbox(keeper: keeper)
        let loggedOutReason = "the token was logged out while it was being refreshed"
        // Never allowed to fail the refresh: the provider has spent the old refresh token, so
        // its answer must be kept whatever happens to this (then the second commit below).
        var ifLoggedOut: (operations: [StoreOperation], event: String, detail: String)? = nil
        if provider.revocationEndpoint != nil, let parsed = try? TokenResponse.parse(response),
           let entry = try? outbox.newEntry(provider: provider.name, account: account, reason: loggedOutReason,
                                            refreshToken: parsed.refreshToken, accessToken: parsed.accessToken)
        {
            ifLoggedOut = ([entry.operation], "provider-revoke-queued", loggedOutReason)
        }
        do {
            refreshed = try await keeper.awaiting.refresh(response, service: service, account: account,
                                                          detail: "refreshed at provider \(provider.name)",
                                                          answering: refreshToken, ifLoggedOut: ifLoggedOut)
        } catch let error as KeysmithError where error.code == .writeConflict {
            // A sign-in or import that does not take the lock replaced the token meanwhile: it
            // stays; the tokens this refresh obtained are ended at the provider.
            if provider.revocationEndpoint != nil {
                try await outbox.queue(response: response, provider: provider.name, account: account,
                                 reason: "a newer token was kept while this one was being refreshed")
            }
            return try await currentAwaiting(service: service, account: account)
        } catch let error as KeysmithError where error.code == .itemNotFound {
            guard provider.revocationEndpoint != nil else { throw error }
            // Deleted while the provider answered: the new tokens live there; queue their end.
            try await outbox.queue(response: response, provider: provider.name, account: account,
                             reason: "the token was deleted while it was being refreshed")
            throw KeysmithError(.itemNotFound, "the token for \(account) at \(service) was deleted while it was being refreshed; "
                                + "the tokens the provider had just issued are queued for revocation there")
        }
        if refreshed.revokedAt != nil {
            // Logged out (perhaps at the provider too) while the provider answered: the queued
            // revocation names the old tokens, so the new ones were queued as well, in the
            // commit that kept them (`ifLoggedOut`; when that could not be made, now).
            if provider.revocationEndpoint != nil, ifLoggedOut == nil {
                try await outbox.queue(response: response, provider: provider.name, account: account, reason: loggedOutReason)
            }
            throw KeysmithError.invalidArgument("the token for \(account) at \(service) was logged out while it was being refreshed; "
                                                + "the tokens the provider had just issued are queued for revocation there")
        }
        return refreshed
    }

    /// The named lock, waited for with growing pauses (never a blocked thread).
    func acquire(_ name: String) async throws -> any HeldLock {
        let clock = ContinuousClock()
        let deadline = clock.now + lockTimeout
        var pause = Duration.milliseconds(2)
        while true {
            if let lock = try await locks.awaitLock(named: name) { return lock }
            guard clock.now < deadline else {
                throw KeysmithError(.timedOut, "another process held the refresh lock of this token for over \(lockTimeout); is a keysmith process hung?")
            }
            try await Task.sleep(for: pause)
            pause = min(pause * 2, .milliseconds(50))
        }
    }
}
