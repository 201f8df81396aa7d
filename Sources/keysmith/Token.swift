import ArgumentParser
import Keysmith
import KeysmithSystem
import KeysmithTokens
import KeysmithVault

/// Where a token is kept: --service and --account.
struct TokenLocation: ParsableArguments {
    @Option(help: "The service the token is kept under.")
    var service: String

    @Option(help: "The account the token is kept under.")
    var account: String
}

/// Parses scope arguments, each possibly a space-separated list.
func parseScopes(_ arguments: [String]) throws -> [Scope] {
    var scopes: [Scope] = []
    for argument in arguments {
        scopes += try Scope.parseList(argument).sorted()
    }
    return scopes
}

extension KeysmithCommand {
    /// OAuth tokens and their scopes.
    struct Token: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Import OAuth tokens and inspect, check and revoke their scopes.",
            subcommands: [Import.self, Scopes.self, Revoke.self, RevokeAll.self, Check.self, Introspect.self]
        )
    }
}

extension KeysmithCommand.Token {
    /// Imports an RFC 6749 token response from stdin.
    struct Import: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Import an RFC 6749 token response read from standard input.",
            discussion: "The granted scopes are the response's `scope`, else --requested; requested scopes not granted are declined."
        )

        @OptionGroup var store: StoreOptions
        @OptionGroup var location: TokenLocation

        @Option(help: "The scopes that were requested, separated by spaces or commas.")
        var requested: String = ""

        @Option(help: "The client the token was issued to.")
        var client: String?

        @Option(help: "The user the token acts for.")
        var subject: String?

        @Option(help: "The issuer.")
        var issuer: String?

        func run() throws {
            let requestedScopes = try Scope.parseList(requested)
            let body = Data(try Terminal.readAll(fd: 0))
            let keeper = TokenKeeper(store: try store.openStore())
            let token = try keeper.importResponse(
                body, service: location.service, account: location.account, requested: requestedScopes,
                clientID: client, subject: subject, issuer: issuer)
            let granted = token.scopes(in: .granted, at: keeper.now)
            let declined = token.scopes(in: .declined, at: keeper.now)
            print("Imported a \(token.tokenType) token for \(location.account) at \(location.service): granted \(Scope.formatList(granted).isEmpty ? "nothing" : Scope.formatList(granted))"
                  + (declined.isEmpty ? "" : "; declined \(Scope.formatList(declined))") + ".")
        }
    }

    /// Shows every scope with its state.
    struct Scopes: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show every scope of a token with its state and when and why it changed.")

        @OptionGroup var store: StoreOptions
        @OptionGroup var location: TokenLocation

        @Flag(help: "Print one JSON object per scope, one per line.")
        var json = false

        func run() throws {
            let keeper = TokenKeeper(store: try store.openStore())
            let token = try loadToken(keeper, location)
            let now = keeper.now
            let statuses = token.statuses(at: now).sorted { $0.key < $1.key }
            if json {
                struct Line: Encodable { var scope: String; var state: String; var changed: String; var reason: String }
                for (scope, status) in statuses {
                    print(try jsonLine(Line(scope: scope.rawValue, state: status.state.rawValue, changed: iso8601(status.changedAt), reason: status.reason)))
                }
                return
            }
            let active = token.isActive(at: now) ? "active" : (token.revokedAt != nil ? "revoked (logged out)" : "expired")
            print("Token for \(location.account) at \(location.service): \(active)" + (token.expiresAt.map { ", expires \(iso8601($0))" } ?? ""))
            let width = statuses.map { $0.key.rawValue.count }.max() ?? 0
            for (scope, status) in statuses {
                let padded = scope.rawValue + String(repeating: " ", count: width - scope.rawValue.count)
                let state = status.state.rawValue + String(repeating: " ", count: 8 - status.state.rawValue.count)
                print("  \(padded)  \(state)  \(iso8601(status.changedAt))  \(status.reason)")
            }
        }
    }

    /// Revokes scopes of one token.
    struct Revoke: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Revoke scopes of one token.")

        @OptionGroup var store: StoreOptions
        @OptionGroup var location: TokenLocation

        @Option(help: "Why, for the audit log.")
        var reason: String = "revoked with keysmith"

        @Argument(help: "The scopes to revoke.")
        var scopes: [String]

        func run() throws {
            let revoking = try parseScopes(scopes)
            guard !revoking.isEmpty else { throw ValidationError("name at least one scope to revoke") }
            let keeper = TokenKeeper(store: try store.openStore())
            _ = try keeper.revoke(revoking, service: location.service, account: location.account, reason: reason)
            print("Revoked \(Scope.formatList(revoking)) for \(location.account) at \(location.service).")
        }
    }

    /// Logs out: revokes every scope.
    struct RevokeAll: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "revoke-all", abstract: "Revoke every scope of a token and make it inactive (log out).")

        @OptionGroup var store: StoreOptions
        @OptionGroup var location: TokenLocation

        @Option(help: "Why, for the audit log.")
        var reason: String = "logged out with keysmith"

        func run() throws {
            let keeper = TokenKeeper(store: try store.openStore())
            _ = try keeper.revokeAll(service: location.service, account: location.account, reason: reason)
            print("Revoked every scope of the token for \(location.account) at \(location.service).")
        }
    }

    /// Exit 0 only when every named scope is granted and the token active.
    struct Check: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Exit 0 when the token is active and every named scope granted; exit 3 otherwise.")

        @OptionGroup var store: StoreOptions
        @OptionGroup var location: TokenLocation

        @Flag(help: "Say nothing; only the exit code answers.")
        var quiet = false

        @Argument(help: "The scopes that must be granted.")
        var scopes: [String]

        func run() throws {
            let needed = try parseScopes(scopes)
            guard !needed.isEmpty else { throw ValidationError("name at least one scope to check") }
            let keeper = TokenKeeper(store: try store.openStore())
            let token = try loadToken(keeper, location)
            let now = keeper.now
            let missing = needed.filter { !token.hasGranted($0, at: now) }
            if missing.isEmpty {
                if !quiet { print("granted: \(Scope.formatList(needed))") }
                return
            }
            let why = missing.map { scope in "\(scope) is \(token.state(of: scope, at: now)?.rawValue ?? "unknown to the token")" }
            let inactive = token.isActive(at: now) ? "" : " (the token is not active)"
            throw CommandFailure.denied("not granted: \(why.joined(separator: ", "))\(inactive)")
        }
    }

    /// Prints RFC 7662 introspection JSON.
    struct Introspect: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print the token as RFC 7662 introspection JSON.")

        @OptionGroup var store: StoreOptions
        @OptionGroup var location: TokenLocation

        func run() throws {
            let keeper = TokenKeeper(store: try store.openStore())
            print(try jsonLine(try loadToken(keeper, location).introspection(at: keeper.now)))
        }
    }
}

func loadToken(_ keeper: TokenKeeper, _ location: TokenLocation) throws -> OAuthToken {
    guard let token = try keeper.token(service: location.service, account: location.account) else {
        throw KeysmithError(.itemNotFound, "there is no token for \(location.account) at \(location.service); import one with `keysmith token import`")
    }
    return token
}

extension KeysmithCommand {
    /// Bulk revocation of one scope across every matching token.
    struct BulkRevoke: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "revoke",
            abstract: "Revoke scopes across every matching token, as one all-or-nothing commit.",
            discussion: """
                Repeat --scope to revoke several scopes in the same commit. Only scopes a token holds as \
                granted change (on expired tokens too); declined and already revoked scopes keep their \
                state, and only tokens that changed are counted. \
                Idempotent: tokens where the scope is already revoked, or that never had it, are left alone. \
                Every changed token gets an audit entry. A progress bar goes to standard error when it \
                is a terminal and the job is long.
                """
        )

        @OptionGroup var store: StoreOptions

        @Option(help: "A scope to revoke; repeat it (or give a space-separated list) to revoke several in one commit.")
        var scope: [String] = []

        @Option(help: "Only tokens kept under this service.")
        var service: String?

        @Option(help: "Only tokens issued to this client.")
        var client: String?

        @Option(help: "Only tokens acting for this subject.")
        var subject: String?

        @Option(help: "Why, for the audit log.")
        var reason: String = "bulk revocation with keysmith"

        @Flag(name: .customLong("dry-run"), help: "Report what would change without changing anything.")
        var dryRun = false

        @Flag(help: "Print the report as JSON.")
        var json = false

        func run() throws {
            let revoking = try parseScopes(scope)
            guard !revoking.isEmpty else { throw ValidationError("name at least one scope with --scope") }
            let keeper = TokenKeeper(store: try store.openStore())
            let bar = ProgressBar(enabled: Terminal.isTerminal(2))
            let report = try keeper.revoke(
                scopes: revoking, matching: TokenFilter(service: service, clientID: client, subject: subject),
                reason: reason, dryRun: dryRun, progress: bar.update)
            bar.finish()
            let names = Scope.formatList(revoking)
            if json {
                struct Report: Encodable {
                    var scopes: [String]
                    var matched: Int
                    var changed: Int
                    var dryRun: Bool
                    var tokens: [TokenReference]
                    enum CodingKeys: String, CodingKey {
                        case scopes, matched, changed, tokens
                        case dryRun = "dry_run"
                    }
                }
                print(try jsonLine(Report(scopes: revoking.map(\.rawValue).sorted(), matched: report.matched, changed: report.changed,
                                          dryRun: dryRun, tokens: report.changedTokens)))
            } else {
                print("\(dryRun ? "Would revoke" : "Revoked") \(names) on \(report.changed) of \(report.matched) matching token(s).")
            }
        }
    }

    /// The audit log.
    struct Audit: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Check and show the audit log of token changes.", subcommands: [Verify.self, Show.self])

        struct Verify: ParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Check the audit log's hash chain; exit 6 when an entry was edited, reordered or deleted.")

            @OptionGroup var store: StoreOptions

            func run() throws {
                let verification = try TokenKeeper(store: try store.openStore()).verifyAuditLog()
                if verification.isIntact {
                    print("The audit log is intact: \(verification.entries) entr\(verification.entries == 1 ? "y" : "ies").")
                    return
                }
                for problem in verification.problems { print(problem) }
                throw CommandFailure(message: "the audit log's chain is broken (\(verification.problems.count) problem(s))", exitCode: ExitCode(6))
            }
        }

        struct Show: ParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Print the audit log, one JSON object per entry.")

            @OptionGroup var store: StoreOptions

            func run() throws {
                for entry in try TokenKeeper(store: try store.openStore()).auditEntries() { print(try jsonLine(entry)) }
            }
        }
    }
}

/// A progress bar on standard error, drawn only on a terminal and only for long jobs.
final class ProgressBar {
    private let enabled: Bool
    private var drawn = false

    init(enabled: Bool) { self.enabled = enabled }

    func update(_ done: Int, _ total: Int) {
        guard enabled, total >= 5000 else { return }
        let width = 40
        let filled = total == 0 ? width : done * width / total
        let line = "\r[" + String(repeating: "#", count: filled) + String(repeating: " ", count: width - filled) + "] \(done)/\(total)"
        Terminal.write(Array(line.utf8), to: 2)
        drawn = true
    }

    func finish() {
        if drawn { Terminal.write(Array("\n".utf8), to: 2) }
    }
}
