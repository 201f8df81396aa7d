import ArgumentParser
import Dispatch
import Foundation
import Keysmith
import KeysmithCommandLine
import KeysmithCredentials
import KeysmithCrypto
import KeysmithProvider
import KeysmithSystem
import KeysmithTokens

/// Runs async work from a synchronous command, on the calling thread (``Blocking/run(_:)``, the
/// one sync/async bridge of the package).
func runAsync<T>(_ body: () async throws -> T) throws -> T {
    try Blocking.run(body)
}

import Synchronization

extension KeysmithCommand {
    /// The authorization servers that issue the tokens kept here.
    struct Provider: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "provider",
            abstract: "Describe the OAuth authorization servers (providers) whose tokens are kept here.",
            discussion: """
                A provider's tokens are the tokens kept under its name as their service: `token login \
                --provider NAME` stores there, and a token imported with `token import --service NAME` is \
                refreshed (`token get --fresh`) and revoked (`--at-provider`) through it. A client secret \
                is kept in the store beside the provider, never in a file or on the command line.
                """,
            subcommands: [Add.self, List.self, Show.self, Remove.self]
        )

        struct Add: ParsableCommand {
            static let configuration = CommandConfiguration(
                commandName: "add",
                abstract: "Keep a provider: from its issuer's metadata (RFC 8414), or its endpoints given one by one.")

            @OptionGroup var store: StoreOptions

            @Argument(help: "The provider's name: the service its tokens are kept under.")
            var name: String

            @Option(help: ArgumentHelp("The issuer: its metadata fills the endpoints.", valueName: "url"))
            var issuer: String?

            @Option(name: .customLong("token-endpoint"), help: ArgumentHelp("The token endpoint (without --issuer).", valueName: "url"))
            var tokenEndpoint: String?

            @Option(name: .customLong("authorization-endpoint"), help: ArgumentHelp("The authorization endpoint (sign-in with --browser).", valueName: "url"))
            var authorizationEndpoint: String?

            @Option(name: .customLong("device-endpoint"), help: ArgumentHelp("The device authorization endpoint (RFC 8628).", valueName: "url"))
            var deviceEndpoint: String?

            @Option(name: .customLong("revocation-endpoint"), help: ArgumentHelp("The revocation endpoint (RFC 7009).", valueName: "url"))
            var revocationEndpoint: String?

            @Option(name: .customLong("introspection-endpoint"), help: ArgumentHelp("The introspection endpoint (RFC 7662).", valueName: "url"))
            var introspectionEndpoint: String?

            @Option(name: .customLong("client-id"), help: "This client's id at the provider.")
            var clientID: String

            @Option(name: .customLong("client-auth"),
                    help: ArgumentHelp("How the client authenticates: none (a public client), client_secret_basic or client_secret_post.", valueName: "method"))
            var clientAuth: String?

            @Option(name: .customLong("client-secret-fd"), help: ArgumentHelp("Read the client secret from this file descriptor (its first line).", valueName: "n"))
            var clientSecretFD: Int32?

            @Option(name: .customLong("trusted-roots"), help: ArgumentHelp("A PEM file of roots to trust for this provider's TLS instead of the system's.", valueName: "file"))
            var trustedRoots: String?

            @Flag(name: .customLong("no-rotation"), help: "The provider keeps a refresh token across refreshes (shown only; refreshes are single-flight either way).")
            var noRotation = false

            @Option(name: .customLong("git-host"), help: ArgumentHelp(
                "A git host (host or host:port) whose credential is this provider's token: git-credential gives a fresh access token as the password. Repeatable.",
                valueName: "host"))
            var gitHosts: [String] = []

            @Option(name: .customLong("git-scope"), help: ArgumentHelp("The scopes a sign-in started by git asks for (default: the provider's).", valueName: "scopes"))
            var gitScope: String?

            @Flag(help: "Replace a provider of that name.")
            var replace = false

            @Flag(help: "Print the provider as JSON.")
            var json = false

            func validate() throws {
                guard (issuer == nil) != (tokenEndpoint == nil) else {
                    throw ValidationError("give --issuer (its metadata names the endpoints) or --token-endpoint, one of them")
                }
                if let clientAuth, ClientAuthentication(rawValue: clientAuth) == nil {
                    throw ValidationError("--client-auth is none, client_secret_basic or client_secret_post")
                }
                if clientSecretFD != nil, clientAuth == "none" { throw ValidationError("a public client (--client-auth none) has no client secret") }
            }

            func run() throws {
                var secret: [UInt8]? = nil
                if let clientSecretFD {
                    secret = try KeySources.readPassphrase(descriptor: clientSecretFD)
                    guard secret?.isEmpty == false else { throw KeysmithError.invalidArgument("the client secret on descriptor \(clientSecretFD) is empty") }
                }
                defer { if secret != nil { cleanse(&secret!) } }
                var provider: OAuthProvider
                if let issuer {
                    let (name, clientID, trustedRoots) = (name, clientID, trustedRoots)
                    provider = try runAsync { try await OAuthProvider.discover(name: name, issuer: issuer, clientID: clientID, trustedRoots: trustedRoots) }
                    provider.authorizationEndpoint = authorizationEndpoint ?? provider.authorizationEndpoint
                    provider.deviceAuthorizationEndpoint = deviceEndpoint ?? provider.deviceAuthorizationEndpoint
                    provider.revocationEndpoint = revocationEndpoint ?? provider.revocationEndpoint
                    provider.introspectionEndpoint = introspectionEndpoint ?? provider.introspectionEndpoint
                } else {
                    provider = OAuthProvider(name: name, tokenEndpoint: tokenEndpoint!, authorizationEndpoint: authorizationEndpoint,
                                             deviceAuthorizationEndpoint: deviceEndpoint, revocationEndpoint: revocationEndpoint,
                                             introspectionEndpoint: introspectionEndpoint, clientID: clientID, trustedRoots: trustedRoots)
                }
                provider.clientAuthentication = clientAuth.flatMap(ClientAuthentication.init(rawValue:))
                    ?? (secret != nil ? .clientSecretBasic : .none)
                provider.rotatesRefreshTokens = !noRotation
                provider.gitHosts = gitHosts
                provider.gitScope = gitScope
                try ProviderRegistry(store: try store.openStore()).add(provider, clientSecret: secret, replacing: replace)
                if json { return print(try jsonLine(ProviderJSON(provider))) }
                print("Kept provider \(OneLine.unicodeEscaped(provider.name)) (token endpoint \(OneLine.unicodeEscaped(provider.tokenEndpoint)))."
                      + (provider.revocationEndpoint == nil ? " It has no revocation endpoint: tokens cannot be revoked at it." : ""))
            }
        }

        struct List: ParsableCommand {
            static let configuration = CommandConfiguration(commandName: "list", abstract: "List the providers kept here.")
            @OptionGroup var store: StoreOptions
            @Flag(help: "Print one JSON array.") var json = false

            func run() throws {
                let providers = try ProviderRegistry(store: try store.openStore()).providers()
                if json { return print(try jsonLine(providers.map(ProviderJSON.init))) }
                for provider in providers { print("\(OneLine.unicodeEscaped(provider.name))\t\(OneLine.unicodeEscaped(provider.tokenEndpoint))") }
                // Said on standard error: standard output stays the list (empty) for scripts.
                if providers.isEmpty {
                    Terminal.write(Array("keysmith: no provider is kept here; add one with `keysmith provider add NAME --issuer URL --client-id ID`\n".utf8),
                                   to: .standardError)
                }
            }
        }

        struct Show: ParsableCommand {
            static let configuration = CommandConfiguration(commandName: "show", abstract: "Show a provider (never its client secret).")
            @OptionGroup var store: StoreOptions
            @Argument(help: "The provider's name.") var name: String
            @Flag(help: "Print JSON.") var json = false

            func run() throws {
                guard let provider = try ProviderRegistry(store: try store.openStore()).provider(named: name) else {
                    throw CommandFailure.notFound("there is no provider named \(OneLine.unicodeEscaped(name))")
                }
                if json { return print(try jsonLine(ProviderJSON(provider))) }
                let rows: [(String, String?)] = [
                    ("name", provider.name), ("issuer", provider.issuer), ("token endpoint", provider.tokenEndpoint),
                    ("authorization endpoint", provider.authorizationEndpoint), ("device endpoint", provider.deviceAuthorizationEndpoint),
                    ("revocation endpoint", provider.revocationEndpoint ?? "none: tokens cannot be revoked at this provider"),
                    ("introspection endpoint", provider.introspectionEndpoint), ("client id", provider.clientID),
                    ("client authentication", provider.clientAuthentication.rawValue),
                    ("rotates refresh tokens", provider.rotatesRefreshTokens ? "yes" : "no"), ("trusted roots", provider.trustedRoots),
                    ("git hosts", provider.gitHosts.isEmpty ? nil : provider.gitHosts.joined(separator: " ")), ("git scope", provider.gitScope),
                ]
                for (label, value) in rows { if let value { print("\(label): \(OneLine.unicodeEscaped(value))") } }
            }
        }

        struct Remove: ParsableCommand {
            static let configuration = CommandConfiguration(
                commandName: "remove", abstract: "Remove a provider and its client secret (its tokens stay, no longer refreshed or revoked at it).")
            @OptionGroup var store: StoreOptions
            @Argument(help: "The provider's name.") var name: String

            func run() throws {
                guard try ProviderRegistry(store: try store.openStore()).remove(named: name) else {
                    throw CommandFailure.notFound("there is no provider named \(OneLine.unicodeEscaped(name))")
                }
                print("Removed provider \(OneLine.unicodeEscaped(name)).")
            }
        }
    }
}

/// A provider as `provider show --json` prints it (never the client secret).
struct ProviderJSON: Encodable {
    var name: String
    var issuer: String?
    var tokenEndpoint: String
    var authorizationEndpoint: String?
    var deviceAuthorizationEndpoint: String?
    var revocationEndpoint: String?
    var introspectionEndpoint: String?
    var clientID: String
    var clientAuthentication: String
    var rotatesRefreshTokens: Bool
    var trustedRoots: String?
    var gitHosts: [String]
    var gitScope: String?

    init(_ provider: OAuthProvider) {
        name = provider.name
        issuer = provider.issuer
        tokenEndpoint = provider.tokenEndpoint
        authorizationEndpoint = provider.authorizationEndpoint
        deviceAuthorizationEndpoint = provider.deviceAuthorizationEndpoint
        revocationEndpoint = provider.revocationEndpoint
        introspectionEndpoint = provider.introspectionEndpoint
        clientID = provider.clientID
        clientAuthentication = provider.clientAuthentication.rawValue
        rotatesRefreshTokens = provider.rotatesRefreshTokens
        trustedRoots = provider.trustedRoots
        gitHosts = provider.gitHosts
        gitScope = provider.gitScope
    }

    enum CodingKeys: String, CodingKey {
        case name, issuer
        case tokenEndpoint = "token_endpoint", authorizationEndpoint = "authorization_endpoint"
        case deviceAuthorizationEndpoint = "device_authorization_endpoint", revocationEndpoint = "revocation_endpoint"
        case introspectionEndpoint = "introspection_endpoint", clientID = "client_id", clientAuthentication = "client_auth"
        case rotatesRefreshTokens = "rotates_refresh_tokens", trustedRoots = "trusted_roots", gitHosts = "git_hosts", gitScope = "git_scope"
    }
}

extension KeysmithCommand.Token {
    /// Signs in at a provider and keeps the token.
    struct Login: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "login",
            abstract: "Sign in at a provider (device flow, a browser with PKCE, or client credentials for a service) and keep the token under the provider's name.",
            discussion: """
                --device (the default) prints a code and where to enter it, on standard error, and waits \
                for the approval (polling at the provider's interval; slow_down is honoured). --browser \
                prints an address to open, and waits for the browser's redirect to a listener on \
                127.0.0.1 at an ephemeral port, which answers that one request and closes; the state and \
                the PKCE verifier (S256) are checked and never shown. \
                --client-credentials signs the client itself in. The token is kept at service PROVIDER, \
                account ACCOUNT, through the usual rules (requested and granted scopes, history, audit); a \
                token kept there already is updated. Nothing is kept when the sign-in fails.
                """)

        @OptionGroup var store: StoreOptions

        @Option(help: "The provider to sign in at (`keysmith provider list`).")
        var provider: String

        @Option(help: "The account to keep the token under.")
        var account: String

        @Option(help: "The scopes to ask for (a list separated by spaces, or repeated).")
        var scope: [String] = []

        @Flag(help: "The device authorization grant (RFC 8628): the default.")
        var device = false

        @Flag(name: .customLong("client-credentials"), help: "The client credentials grant, for a service (no person, no refresh token).")
        var clientCredentials = false

        @Flag(help: "Authorization code with PKCE in a browser, redirected to a listener on 127.0.0.1 (RFC 8252).")
        var browser = false

        @Option(name: .customLong("browser-timeout"), help: ArgumentHelp("With --browser: how long to wait for the redirect (default 5m).", valueName: "duration"))
        var browserTimeout: String?

        @Flag(help: "Replace a token kept there (its history goes with it) instead of updating it.")
        var replace = false

        @Flag(help: "Print the token's summary as JSON (never the token itself).")
        var json = false

        func validate() throws {
            guard [device, clientCredentials, browser].filter({ $0 }).count <= 1 else {
                throw ValidationError("give one of --device, --browser and --client-credentials")
            }
            if browserTimeout != nil && !browser { throw ValidationError("--browser-timeout goes with --browser") }
            if let browserTimeout { _ = try parseDuration(browserTimeout) }
        }

        func run() throws {
            let scopes = Set(try parseScopes(scope))
            let keeper = makeKeeper(try store.openStore())
            let signIn = try ProviderSignIn(keeper: keeper, provider: provider)
            let (account, replace) = (account, replace)
            let token: OAuthToken
            if clientCredentials {
                token = try runAsync { try await signIn.clientCredentials(account: account, scopes: scopes, replacing: replace) }
            } else if browser {
                let started = try signIn.startBrowser(scopes: scopes)
                let seconds = try browserTimeout.map(parseDuration) ?? 300
                Terminal.write(Array("To sign in at \(OneLine.unicodeEscaped(signIn.client.provider.name)), open this address in a browser on this machine:\n\(OneLine.unicodeEscaped(started.url))\nWaiting for the browser to come back to \(started.redirectURI)…\n".utf8), to: .standardError)
                token = try runAsync { try await signIn.completeBrowser(started, account: account, replacing: replace, timeout: .seconds(seconds)) }
            } else {
                let started = try runAsync { try await signIn.startDevice(scopes: scopes) }
                var prompt = "To sign in at \(OneLine.unicodeEscaped(signIn.client.provider.name)), open \(OneLine.unicodeEscaped(started.verificationURI)) and enter the code "
                    + "\(OneLine.unicodeEscaped(started.userCode))"
                if let complete = started.verificationURIComplete { prompt += " (or open \(OneLine.unicodeEscaped(complete)))" }
                Terminal.write(Array((prompt + ". Waiting for the approval…\n").utf8), to: .standardError)
                token = try runAsync { try await signIn.completeDevice(started, account: account, replacing: replace) }
            }
            let granted = token.scopes.filter { $0.value.state == .granted }.map(\.key.rawValue).sorted()
            if json {
                struct Report: Encodable { var service: String; var account: String; var granted: [String]; var expires: String? }
                return print(try jsonLine(Report(service: provider, account: account, granted: granted, expires: token.expiresAt.map(iso8601))))
            }
            print("Signed in: the token for \(shownToken(service: provider, account: account)) is kept"
                  + (granted.isEmpty ? "." : ", granting \(granted.joined(separator: " ")).")
                  + (token.refreshToken == nil ? "" : " It refreshes with `keysmith token get --fresh`."))
        }
    }
}

/// Ends a token here and at its provider: the local change and the queued revocation in one
/// commit, then one attempt to send that entry. A provider that cannot be reached leaves it
/// queued (`keysmith token outbox --send` sends it again; exit 0, the reason on standard
/// error); a provider that refuses it for good is exit 10.
func revokeTokenAtProvider(_ keeper: TokenKeeper, _ location: TokenLocation, scopes: [Scope]?, deleting: Bool = false, reason: String, json: Bool) throws {
    let outbox = RevocationOutbox(keeper: keeper)
    let queued = try outbox.revoke(service: location.service, account: location.account, scopes: scopes, deleting: deleting, reason: reason)
    var state = "nothing to revoke"
    if let queued {
        let report = try runAsync { try await outbox.send(only: [queued]) }
        state = report.outcomes[queued] == "gone" ? "confirmed" : report.outcomes[queued] ?? "pending"
    }
    if json {
        struct Document: Encodable { var service: String; var account: String; var provider: String }
        print(try jsonLine(Document(service: location.service, account: location.account, provider: state)))
    } else {
        let here = deleting ? "Deleted the token for \(location.shown)" : "Revoked every scope of the token for \(location.shown)"
        switch state {
        case "confirmed": print("\(here); the provider confirmed the revocation.")
        case "nothing to revoke": print("\(here); it held no token to revoke at the provider.")
        default: print("\(here); the revocation at the provider is queued (\(state)): see `keysmith token outbox`.")
        }
    }
    guard let queued, state != "confirmed", let entry = try outbox.entries().first(where: { $0.id == queued }) else { return }
    let why = entry.lastError.map(OneLine.unicodeEscaped) ?? "not sent yet"
    if state == "failed" {
        throw CommandFailure(message: "the provider refused the revocation for good: \(why) (it stays listed in `keysmith token outbox`)",
                             exitCode: ExitCode(10))
    }
    Terminal.write(Array("keysmith: the provider has not confirmed yet: \(why); it stays queued and is sent again by `keysmith token outbox --send`\n".utf8), to: .standardError)
}

extension KeysmithCommand.Token {
    /// The revocations queued for providers.
    struct Outbox: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "outbox",
            abstract: "Show the revocations queued for providers (pending or failed, and why); --send sends them now.",
            discussion: """
                A revocation with --at-provider is queued in the store in the same commit as the local \
                change, and stays until the provider confirms it. With --send, every pending entry is sent \
                now (refresh token first), at most 8 at a time per provider. Exit 0 when nothing is left \
                pending or failed; 11 when some are still pending (the provider was unreachable: they are \
                sent again later); 10 when some failed for good (named, with why).
                """)

        @OptionGroup var store: StoreOptions

        @Flag(help: "Send every pending revocation now.")
        var send = false

        @Flag(name: .customLong("retry-failed"), help: "Make the failed revocations pending again (after mending their cause), then send them.")
        var retryFailed = false

        @Option(help: ArgumentHelp("Give up this queued revocation, unsent (its provider is gone for good); the audit log records it.", valueName: "id"))
        var drop: String?

        func validate() throws {
            if drop != nil && (send || retryFailed) { throw ValidationError("--drop goes alone") }
        }

        @Flag(help: "Print one JSON document.")
        var json = false

        func run() throws {
            let outbox = RevocationOutbox(keeper: makeKeeper(try store.openStore()))
            if let drop {
                try outbox.drop(id: drop, reason: "dropped with keysmith token outbox --drop")
                print("Dropped the queued revocation \(OneLine.unicodeEscaped(drop)); the token may still work at its provider.")
                return
            }
            var confirmed = 0
            if retryFailed { _ = try outbox.retryFailed() }
            if send || retryFailed { confirmed = try runAsync { try await outbox.send(force: true) }.confirmed }
            let entries = try outbox.entries()
            if json {
                struct Entry: Encodable {
                    var id: String; var provider: String; var account: String; var state: String; var attempts: Int
                    var queued: String; var next_attempt: String; var last_error: String?; var reason: String
                }
                struct Document: Encodable { var confirmed: Int; var entries: [Entry] }
                print(try jsonLine(Document(confirmed: confirmed, entries: entries.map {
                    Entry(id: $0.id, provider: $0.provider, account: $0.account, state: $0.state, attempts: $0.attempts, queued: iso8601($0.queuedAt),
                          next_attempt: iso8601($0.nextAttemptAt), last_error: $0.lastError, reason: $0.reason)
                })))
            } else {
                if send || retryFailed { print("Confirmed \(confirmed) revocation(s).") }
                for entry in entries {
                    print("\(entry.state)\t\(entry.id)\t\(OneLine.unicodeEscaped(entry.account)) at \(OneLine.unicodeEscaped(entry.provider))\tattempts \(entry.attempts)"
                          + (entry.lastError.map { "\t\(OneLine.unicodeEscaped($0))" } ?? ""))
                }
                if entries.isEmpty && !send { print("No revocation is queued.") }
            }
            if entries.contains(where: { $0.state == "failed" || $0.state == "damaged" }) { throw CommandFailure.silent(ExitCode(10)) }
            if !entries.isEmpty { throw CommandFailure.silent(ExitCode(11)) }
        }
    }
}
