import ArgumentParser
import FoundationEssentials
import Keysmith
import KeysmithCommandLine
import KeysmithCredentials
import KeysmithPostgres
import KeysmithProvider
import KeysmithSystem
import KeysmithTokens

extension NetworkParts {
    /// What `keysmith-net` adds to the command: PostgreSQL and providers.
    static var live: NetworkParts { NetworkParts(
        commands: [
            ("token", KeysmithCommand.Provider.self), ("migrate", KeysmithCommand.PostgresCommand.self),
            ("postgres", KeysmithCommand.Watch.self), ("watch", KeysmithCommand.GitCredentialCommand.self),
        ],
        tokenCommands: [
            ("import", KeysmithCommand.Token.Login.self), ("login", KeysmithCommand.Token.Outbox.self),
            ("outbox", KeysmithCommand.Token.Reconcile.self),
        ],
        openPostgres: { try $0.openPostgresStore() },
        revokeAtProvider: { keeper, location, scopes, deleting, reason, json in
            try revokeTokenAtProvider(keeper, location, scopes: scopes, deleting: deleting, reason: reason, json: json)
        },
        introspectAtProvider: { keeper, location in
            let introspection = ProviderIntrospection(keeper: keeper)
            let (service, account) = (location.service, location.account)
            let (answer, revokedHere) = try runAsync { try await introspection.introspect(service: service, account: account) }
            struct Document: Encodable {
                var active: Bool; var scope: String?; var exp: Int?; var client_id: String?; var revoked_here: Bool
            }
            print(try jsonLine(Document(active: answer.active, scope: answer.scope, exp: answer.expiresAt.map { Int($0.timeIntervalSince1970) },
                                        client_id: answer.clientID, revoked_here: revokedHere)))
            if !answer.active { throw CommandFailure.silent(ExitCode(3)) }
        },
        freshToken: { keeper, location, seconds in
            let tokens = try ProviderTokens(keeper: keeper)
            let (service, account) = (location.service, location.account)
            // No task and no network when the token needs no refresh.
            if let current = try tokens.tokenIfFresh(service: service, account: account, minValidity: .seconds(seconds)) {
                return current
            }
            return try runAsync { try await tokens.freshToken(service: service, account: account, minValidity: .seconds(seconds)) }
        },
        bulkRevokeAtProvider: { keeper, scopes, filter, reason in
            let outbox = RevocationOutbox(keeper: keeper)
            let (revoked, queued) = try outbox.revoke(scopes: scopes, matching: filter, reason: reason)
            let sent = try runAsync { try await outbox.send(only: Set(queued)) }
            return (revoked, sent.confirmed, sent.pending, sent.failed)
        },
        waitForWatchers: { store, timeout in
            guard let postgres = store as? PostgresStore else { return nil }
            guard postgres.lastCommittedSequence > 0 else { return [] }
            return try postgres.waitForWatchers(through: postgres.lastCommittedSequence, timeout: .milliseconds(Int(timeout * 1000))).map(\.name)
        },
        isPostgres: { $0 is PostgresStore },
        failure: { error in
            guard let error = error as? ProviderError else { return nil }
            return (error.message, exitCode(for: error))
        }
    ) }
}

/// The exit code of a provider's error: 10 it refused, 11 it could not be reached or answered
/// badly, 64 it does not support what was asked.
func exitCode(for error: ProviderError) -> Int32 {
    switch error.kind {
    case .rejected, .abandoned: 10
    case .unreachable, .timedOut, .tls, .badResponse: 11
    case .unsupported: 64
    }
}

extension StoreOptions {
    /// The PostgreSQL master key, from the same sources as the vault's credential. A master
    /// passphrase is text (its bytes are read as UTF-8); with `making` (a key that may be created
    /// now, `postgres init`), one whose bytes are not UTF-8 is refused from any source, since
    /// reading it as text would change it (two different byte strings would be one key).
    func postgresMasterKey(making: Bool = false) throws -> PostgresMasterKey {
        guard var source = try keySources(prompt: "PostgreSQL master passphrase: ").resolve() else {
            throw KeysmithError(.storeLocked, "the PostgreSQL store needs its master key: use --keyfile, --passphrase-fd or KEYSMITH_PASSPHRASE")
        }
        defer { source.wipe() }
        return try PostgresMasterKey(source, making: making)
    }

    func openPostgresStore() throws -> PostgresStore {
        let settings = try PostgresConnectionSettings(url: try databaseURL())
        return try PostgresStore(settings, namespace: try postgresNamespace(), masterKey: try postgresMasterKey())
    }

}

extension KeysmithCommand.Token {
    /// Asks a provider about every token kept for it.
    struct Reconcile: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "reconcile",
            abstract: "Ask a provider about every token of its service that is valid here (RFC 7662); revoke here those it reports inactive.",
            discussion: """
                Tokens whose access token has expired here are not asked about (an expired access token \
                is inactive everywhere and says nothing of its grant). A token the provider reports \
                inactive is revoked here with the reason "inactive at the provider", audited. 8 requests \
                at a time. Exit 0 when every question was answered; 11 when some failed (named).
                """)

        @OptionGroup var store: StoreOptions

        @Option(help: "The provider (the tokens' service).")
        var service: String

        @Flag(help: "Print one JSON document: {checked, revoked: [accounts], failed: {account: why}}.")
        var json = false

        func run() throws {
            let introspection = ProviderIntrospection(keeper: makeKeeper(try store.openStore()))
            let service = service
            let report = try runAsync { try await introspection.reconcile(service: service) }
            if json {
                struct Document: Encodable { var checked: Int; var revoked: [String]; var failed: [String: String] }
                print(try jsonLine(Document(checked: report.checked, revoked: report.revoked, failed: report.failed)))
            } else {
                print("Asked \(OneLine.unicodeEscaped(service)) about \(report.checked) token(s): \(report.revoked.count) inactive there, now revoked here"
                      + (report.revoked.isEmpty ? "." : " (\(report.revoked.map(OneLine.unicodeEscaped).joined(separator: ", "))).")
                      + (report.failed.isEmpty ? "" : " \(report.failed.count) question(s) failed."))
                for (account, why) in report.failed.sorted(by: { $0.key < $1.key }) {
                    Terminal.write(Array("keysmith: \(OneLine.unicodeEscaped(account)): \(OneLine.unicodeEscaped(why))\n".utf8), to: .standardError)
                }
            }
            if !report.failed.isEmpty { throw CommandFailure.silent(ExitCode(11)) }
        }
    }
}
