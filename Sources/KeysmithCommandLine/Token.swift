package import FoundationEssentials
package import ArgumentParser
package import Keysmith
import KeysmithSystem
package import KeysmithTokens
import KeysmithVault

/// Where a token is kept: --service and --account.
package struct TokenLocation: ParsableArguments {
    package init() {}

    @Option(help: "The service the token is kept under.")
    package var service: String

    @Option(help: "The account the token is kept under.")
    package var account: String

    /// `ACCOUNT at SERVICE` for a message, control characters escaped (names are anyone's text).
    package var shown: String { shownToken(service: service, account: account) }
}

/// `ACCOUNT at SERVICE` for a message, control characters escaped (names are anyone's text).
package func shownToken(service: String, account: String) -> String { "\(OneLine.unicodeEscaped(account)) at \(OneLine.unicodeEscaped(service))" }

/// Parses scope arguments, each possibly a space-separated list.
package func parseScopes(_ arguments: [String]) throws -> [Scope] {
    var scopes: [Scope] = []
    for argument in arguments {
        scopes += try Scope.parseList(argument).sorted()
    }
    return scopes
}

extension KeysmithCommand {
    /// OAuth tokens and their scopes.
    package struct Token: ParsableCommand {
        package init() {}

        package static let configuration = CommandConfiguration(commandName: "token",
            abstract: "Import OAuth tokens and inspect, check and revoke their scopes.",
            subcommands: KeysmithCommand.inserting(network?.tokenCommands ?? [], into: [
                Import.self, List.self, Get.self, Scopes.self, Revoke.self, RevokeAll.self, Check.self, Introspect.self, Delete.self,
            ])
        )
    }
}

extension KeysmithCommand.Token {
    /// Imports an RFC 6749 token response from stdin.
    struct Import: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "import", 
            abstract: "Import an RFC 6749 token response read from standard input.",
            discussion: """
                The granted scopes are the response's `scope`, else --requested; requested scopes not granted are declined. \
                When a token is kept under this service and account already, the response updates it (a refresh or an \
                incremental grant) and its history is kept: scopes the response leaves out become declined, scopes revoked \
                here stay revoked unless --allow-regrant; --replace starts over instead.
                """
        )

        @OptionGroup var store: StoreOptions

        @Option(help: "The service the token is kept under (not with --batch).")
        var service: String?

        @Option(help: "The account the token is kept under (not with --batch).")
        var account: String?

        @Flag(help: "Read JSON lines of {service, account, response, requested, client_id, subject, issuer} and import them all in one commit.")
        var batch = false

        @Option(help: "The scopes that were requested, separated by spaces or commas.")
        var requested: String = ""

        @Option(help: "The client the token was issued to.")
        var client: String?

        @Option(help: "The user the token acts for.")
        var subject: String?

        @Option(help: "The issuer.")
        var issuer: String?

        @Flag(help: "Replace a token already kept under this service and account, starting a new history.")
        var replace = false

        @Flag(name: .customLong("allow-regrant"), help: "Let the new response grant again scopes that were revoked here (and end a log-out).")
        var allowRegrant = false

        @Flag(help: "Print the token as stored afterwards as one JSON document (never the token itself).")
        var json = false

        func validate() throws { try store.requireStandardInputFree(for: "the token response") }

        func run() throws {
            if batch {
                guard service == nil, account == nil, client == nil, subject == nil, issuer == nil, requested.isEmpty, !allowRegrant else {
                    throw ValidationError("with --batch, each line names its token: give only --replace and --json")
                }
                return try runBatch()
            }
            guard let service, let account else { throw ValidationError("give --service and --account (or --batch)") }
            let location = (service: service, account: account)
            let shown = shownToken(service: service, account: account)
            let requestedScopes = try Scope.parseList(requested)
            if Terminal.isTerminal(.standardInput) {
                Terminal.write(Array("keysmith: reading a token response (JSON) from standard input; end it with Ctrl-D\n".utf8), to: .standardError)
            }
            let body = Data(try InputLimit.read(limit: InputLimit.tokenResponse, what: "standard input (the token response)"))
            let keeper = makeKeeper(try store.openStore())
            if !replace, let existing = try keeper.token(service: location.service, account: location.account) {
                // A token kept here already: a refresh or an incremental grant, history kept.
                for (flag, given, stored) in [("--client", client, existing.clientID), ("--subject", subject, existing.subject),
                                              ("--issuer", issuer, existing.issuer)] {
                    if let given, given != stored {
                        throw ValidationError(
                            "the token kept for \(shown) has \(flag) \(stored ?? "(none)"), not \(given); "
                                + "--replace replaces it (its history and revocations go with it)")
                    }
                }
                let (updated, outcome) = try keeper.update(with: body, requested: requestedScopes, allowRegrant: allowRegrant,
                                                           service: location.service, account: location.account)
                if json { return try printTokenDocument(location, updated, at: keeper.now) }
                var parts = ["Updated the \(existing.tokenType) token for \(shown)"]
                if !outcome.granted.isEmpty { parts.append("granted \(Scope.formatList(outcome.granted))") }
                if !outcome.dropped.isEmpty { parts.append("dropped \(Scope.formatList(outcome.dropped))") }
                if !outcome.keptRevoked.isEmpty {
                    parts.append("kept revoked \(Scope.formatList(outcome.keptRevoked)) (--allow-regrant to grant them again)")
                }
                print(parts.joined(separator: "; ") + ".")
                return
            }
            // What --replace discards, to say so; a damaged token is replaced as it is (the repair).
            var replacing: OAuthToken?
            var replacingDamaged = false
            if replace {
                do {
                    replacing = try keeper.token(service: location.service, account: location.account)
                } catch let error as KeysmithError where error.code == .corruptData {
                    replacingDamaged = true
                }
            }
            let token = try keeper.importResponse(
                body, service: location.service, account: location.account, requested: requestedScopes,
                clientID: client, subject: subject, issuer: issuer, replacing: replace)
            if json { return try printTokenDocument(location, token, at: keeper.now) }
            let granted = token.scopes(in: .granted, at: keeper.now)
            let declined = token.scopes(in: .declined, at: keeper.now)
            if replacingDamaged {
                print("Replaced the damaged token for \(shown) (the repair).")
            } else if let replacing {
                let revoked = replacing.scopes(in: .revoked, at: keeper.now)
                print("Replaced the token for \(shown)"
                      + (revoked.isEmpty ? "" : "; the revocation of \(Scope.formatList(revoked)) is gone with the old token") + ".")
            }
            print("Imported a \(token.tokenType) token for \(shown): granted \(Scope.formatList(granted).isEmpty ? "nothing" : Scope.formatList(granted))"
                  + (declined.isEmpty ? "" : "; declined \(Scope.formatList(declined))") + ".")
        }
    }

    /// Shows every scope with its state.
    struct Scopes: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "scopes", abstract: "Show every scope of a token with its state and when and why it changed.")

        @OptionGroup var store: StoreOptions
        @OptionGroup var location: TokenLocation

        @Flag(help: "Print the token's state, expiry and every scope as one JSON document.")
        var json = false

        func run() throws {
            let keeper = makeKeeper(try store.openStore())
            let token = try loadToken(keeper, location)
            let now = keeper.now
            let statuses = token.statuses(at: now).sorted { $0.key < $1.key }
            if json { return try printTokenDocument(location, token, at: now) }
            let active = switch token.standing(at: now) {
            case .active: "active"
            case .expired: "expired"
            case .loggedOut: "revoked (logged out)"
            }
            print("Token for \(location.shown): \(active)" + (token.expiresAt.map { ", expires \(iso8601($0))" } ?? ""))
            let width = statuses.map { $0.key.rawValue.count }.max() ?? 0
            for (scope, status) in statuses {
                let padded = scope.rawValue + String(repeating: " ", count: width - scope.rawValue.count)
                let state = status.state.rawValue + String(repeating: " ", count: 8 - status.state.rawValue.count)
                // A reason is anyone's text: control characters are escaped, as in `audit show`.
                print("  \(OneLine.unicodeEscaped(padded))  \(state)  \(iso8601(status.changedAt))  \(OneLine.unicodeEscaped(status.reason))")
            }
        }
    }

    /// Revokes scopes of one token.
    struct Revoke: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "revoke", abstract: "Revoke scopes of one token.")

        @OptionGroup var store: StoreOptions
        @OptionGroup var location: TokenLocation

        @Option(help: "Why, for the audit log.")
        var reason: String = "revoked with keysmith"

        @Argument(help: "The scopes to revoke.")
        var scopes: [String]

        @Flag(help: "Print the token as stored afterwards as one JSON document.")
        var json = false

        @Flag(name: .customLong("at-provider"), help: "Also revoke at the token's provider (RFC 7009): the whole grant ends there, and the token becomes inactive here.")
        var atProvider = false

        func run() throws {
            let revoking = try parseScopes(scopes)
            guard !revoking.isEmpty else { throw ValidationError("name at least one scope to revoke") }
            let keeper = makeKeeper(try store.openStore())
            if atProvider {
                try networkParts().revokeAtProvider(keeper, location, revoking, false, reason, json)
                return
            }
            let token = try keeper.revoke(revoking, service: location.service, account: location.account, reason: reason)
            if json { return try printTokenDocument(location, token, at: keeper.now) }
            print("Revoked \(Scope.formatList(revoking)) for \(location.shown).")
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

        @Flag(help: "Print the token as stored afterwards as one JSON document.")
        var json = false

        @Flag(name: .customLong("at-provider"), help: "Also revoke at the token's provider (RFC 7009), refresh token first.")
        var atProvider = false

        func run() throws {
            let keeper = makeKeeper(try store.openStore())
            if atProvider {
                try networkParts().revokeAtProvider(keeper, location, nil, false, reason, json)
                return
            }
            let token = try keeper.revokeAll(service: location.service, account: location.account, reason: reason)
            if json { return try printTokenDocument(location, token, at: keeper.now) }
            print("Revoked every scope of the token for \(location.shown).")
        }
    }

    /// Exit 0 only when every named scope is granted and the token active.
    struct Check: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "check", 
            abstract: "Exit 0 when the token is active and every named scope granted; exit 3 otherwise.")

        @OptionGroup var store: StoreOptions
        @OptionGroup var location: TokenLocation

        @Flag(help: "Print nothing for the answer, on either stream; only the exit code answers (errors, such as no such token, still print).")
        var quiet = false

        @Argument(help: "The scopes that must be granted.")
        var scopes: [String]

        @Flag(help: "Print the answer as one JSON document (the exit code still answers).")
        var json = false

        func validate() throws {
            guard !(quiet && json) else { throw ValidationError("give --quiet (the exit code answers) or --json (a document answers), not both") }
        }

        func run() throws {
            let needed = try parseScopes(scopes)
            guard !needed.isEmpty else { throw ValidationError("name at least one scope to check") }
            let keeper = makeKeeper(try store.openStore())
            let token = try loadToken(keeper, location)
            let now = keeper.now
            let missing = needed.filter { !token.hasGranted($0, at: now) }
            if json {
                struct Answer: Encodable {
                    struct Needed: Encodable { var scope: String; var state: String? }
                    var service: String
                    var account: String
                    var granted: Bool
                    var active: Bool
                    var scopes: [Needed]
                }
                print(try jsonLine(Answer(service: location.service, account: location.account, granted: missing.isEmpty,
                                          active: token.isActive(at: now),
                                          scopes: needed.map { Answer.Needed(scope: $0.rawValue, state: token.state(of: $0, at: now)?.rawValue) })))
            }
            if missing.isEmpty {
                if !quiet && !json { print("granted: \(Scope.formatList(needed))") }
                return
            }
            if quiet { throw CommandFailure.silent(ExitCode(3)) }
            let why = missing.map { scope in "\(scope) is \(token.state(of: scope, at: now)?.rawValue ?? "unknown to the token")" }
            let inactive = token.isActive(at: now) ? "" : " (the token is not active)"
            throw CommandFailure.denied("not granted: \(why.joined(separator: ", "))\(inactive)")
        }
    }

    /// Prints RFC 7662 introspection JSON.
    struct Introspect: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "introspect", abstract: "Print the token as RFC 7662 introspection JSON.")

        @OptionGroup var store: StoreOptions
        @OptionGroup var location: TokenLocation

        @Flag(help: "Accepted for uniformity: the output is always one JSON document (RFC 7662).")
        var json = false

        @Flag(name: .customLong("at-provider"),
              help: "Ask the token's provider instead (RFC 7662); a token it reports inactive while valid here is revoked here (exit 3).")
        var atProvider = false

        func run() throws {
            let keeper = makeKeeper(try store.openStore())
            guard atProvider else {
                return print(try jsonLine(try loadToken(keeper, location).introspection(at: keeper.now)))
            }
            try networkParts().introspectAtProvider(keeper, location)
        }
    }
}

/// A duration such as `90s`, `30m`, `12h`, `1d`, `2w`, or a number of seconds; at most 100 years
/// (`Duration(parsing:)`), refused as a usage error.
package func parseDuration(_ text: String) throws -> TimeInterval {
    do {
        return try Duration(parsing: text).inSeconds
    } catch let error as KeysmithError where error.code == .invalidArgument {
        throw ValidationError(error.message)
    }
}

extension KeysmithCommand.Token {
    /// Lists tokens with filters.
    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "list", 
            abstract: "List stored tokens: where each is kept, its state, expiry and scopes (never the token itself).",
            discussion: """
                Filters combine: --service, --client and --subject match the token's fields; --scope keeps tokens that \
                hold the scope, in --state if given (else in any state); --state alone keeps tokens with any scope in \
                that state; --expiring-within keeps active tokens that expire within the duration (such as 1d). \
                With --json, one JSON document: {"tokens": [...]}.
                """)

        @OptionGroup var store: StoreOptions

        @Option(help: "Only tokens kept under this service.")
        var service: String?

        @Option(help: "Only tokens issued to this client.")
        var client: String?

        @Option(help: "Only tokens acting for this subject.")
        var subject: String?

        @Option(help: "Only tokens that hold this scope.")
        var scope: String?

        @Option(help: "With --scope, only tokens holding it in this state; alone, tokens with any scope in it (granted, declined, expired, revoked).")
        var state: String?

        @Option(name: .customLong("expiring-within"), help: "Only active tokens that expire within this long (90s, 30m, 12h, 1d, 2w).")
        var expiringWithin: String?

        @Flag(help: "Print one JSON document.")
        var json = false

        func run() throws {
            let wantedScope = try scope.map { text in
                let scopes = try Scope.parseList(text)
                guard scopes.count == 1, let only = scopes.first else { throw ValidationError("--scope takes one scope, not '\(text)'") }
                return only
            }
            let wantedState = try state.map { name in
                guard let state = ScopeState(rawValue: name) else {
                    throw ValidationError("unknown state '\(name)': use granted, declined, expired or revoked")
                }
                return state
            }
            let horizon = try expiringWithin.map(parseDuration)
            let keeper = makeKeeper(try store.openStore())
            let now = keeper.now
            let listed = try keeper.tokens(selectedBy: TokenSelection(filter: TokenFilter(service: service, clientID: client, subject: subject),
                                                                     scope: wantedScope, state: wantedState, expiringWithin: horizon),
                                           at: now)
            if json {
                print(try jsonLine(TokenListDocument(tokens: listed.map { TokenSummary($0.reference, $0.token, at: now) })))
                return
            }
            if listed.isEmpty {
                print("No token matches.")
                return
            }
            for (reference, token) in listed {
                let state = switch token.standing(at: now) {
                case .active: "active"
                case .expired: "expired"
                case .loggedOut: "revoked"
                }
                let expiry = token.expiresAt.map { "expires \(iso8601($0))" } ?? "no expiry"
                let granted = Scope.formatList(token.grantedScopes(at: now))
                print("\(OneLine.unicodeEscaped(reference.service))\t\(OneLine.unicodeEscaped(reference.account))\t\(state)\t\(expiry)\t\(OneLine.unicodeEscaped(token.clientID ?? "-"))\t\(granted.isEmpty ? "-" : granted)")
            }
        }
    }

    /// Prints the access token (or the refresh token) for an `Authorization:` header or a refresh.
    struct Get: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "get", 
            abstract: "Print a token's access token (or, with --refresh, its refresh token; with --field, a response field) to standard output.",
            discussion: """
                For scripts: curl -H "Authorization: Bearer $(keysmith token get --service S --account A)". \
                Exit 2 when there is no such token (or no refresh token); exit 3 when the access token is \
                not active (expired or logged out); the refresh token is printed whatever the access token's state.
                """)

        @OptionGroup var store: StoreOptions
        @OptionGroup var location: TokenLocation

        @Flag(help: "Print the refresh token instead.")
        var refresh = false

        @Option(help: ArgumentHelp("Print this field of the token response, kept as sent (its JSON value), instead.", valueName: "name"))
        var field: String?

        @Flag(name: .customLong("no-newline"), help: "Do not print a newline after the token.")
        var noNewline = false

        @Flag(help: "Refresh the token at its provider first if its access token expires within --min-validity (one refresh per grant across processes).")
        var fresh = false

        @Option(name: .customLong("min-validity"), help: ArgumentHelp("With --fresh: how long the access token must stay valid (default 60s).", valueName: "duration"))
        var minValidity: String?

        @Flag(name: .customLong("any-type"), help: "Print an access token whose token_type is not Bearer (mac, DPoP: it needs a proof of possession; refused by default, exit 3).")
        var anyType = false

        func validate() throws {
            if refresh && field != nil { throw ValidationError("--refresh and --field are exclusive") }
            if anyType && (refresh || field != nil) { throw ValidationError("--any-type goes with the access token, not --refresh or --field") }
            if minValidity != nil && !fresh { throw ValidationError("--min-validity goes with --fresh") }
            if let minValidity { _ = try parseDuration(minValidity) }
        }

        func run() throws {
            let keeper = makeKeeper(try store.openStore())
            let token: OAuthToken
            if fresh {
                do {
                    token = try networkParts().freshToken(keeper, location, try minValidity.map(parseDuration) ?? 60)
                } catch let error as KeysmithError where error.code == .invalidArgument {
                    // A token that cannot be refreshed (logged out, or without a refresh token):
                    // when it is not active it is what `token get` calls one: exit 3, as there.
                    if let kept = try? loadToken(keeper, location), !kept.isActive(at: keeper.now) { throw CommandFailure.denied(error.message) }
                    throw error
                }
            } else {
                token = try loadToken(keeper, location)
            }
            let value: String
            if let field {
                guard let kept = token.additionalFields[field] else {
                    let known = token.additionalFields.keys.sorted()
                    throw CommandFailure.notFound("the token for \(location.shown) has no response field \(field)"
                                                  + (known.isEmpty ? "" : " (it has \(known.joined(separator: ", ")))"))
                }
                value = kept
            } else if refresh {
                guard let refreshToken = token.refreshToken else {
                    throw CommandFailure.notFound("the token for \(location.shown) has no refresh token")
                }
                value = refreshToken
            } else {
                guard token.isActive(at: keeper.now) else {
                    let why = token.revokedAt != nil ? "was logged out (revoke-all)" : "expired\(token.expiresAt.map { " at \(iso8601($0))" } ?? "")"
                    throw CommandFailure.denied("the token for \(location.shown) \(why); refresh it, or use --refresh")
                }
                guard token.isBearer || anyType else {
                    throw CommandFailure.denied("the token for \(location.shown) is of type \(OneLine.unicodeEscaped(String(token.tokenType.prefix(64)))), "
                                                + "not Bearer (RFC 6750): it needs a proof of possession; --any-type prints it anyway")
                }
                value = token.accessToken
            }
            Terminal.write(Array((value + (noNewline ? "" : "\n")).utf8), to: .standardOutput)
        }
    }

    /// Deletes a token, with an audit entry.
    struct Delete: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "delete", 
            abstract: "Delete a token; the audit log records it and keeps the token's history.")

        @OptionGroup var store: StoreOptions
        @OptionGroup var location: TokenLocation

        @Flag(name: .customLong("at-provider"), help: "Revoke it at its provider first (RFC 7009; queued until the provider confirms).")
        var atProvider = false

        func run() throws {
            let keeper = makeKeeper(try store.openStore())
            if atProvider {
                try networkParts().revokeAtProvider(keeper, location, nil, true, "deleted with keysmith", false)
                return
            }
            try keeper.delete(service: location.service, account: location.account)
            print("Deleted the token for \(location.shown).")
        }
    }
}

/// `audit show --json`: one document, snake_case names, ISO 8601 UTC times.
struct AuditDocument: Encodable {
    struct Entry: Encodable {
        var sequence: Int
        var time: String
        var event: String
        var service: String
        var account: String
        var scopes: [String]
        var detail: String
        var tokens: [String]
        var actor: AuditActor?
        var previousHash: String
        var hash: String

        enum CodingKeys: String, CodingKey {
            case sequence, time, event, service, account, scopes, detail, tokens, actor, hash
            case previousHash = "previous_hash"
        }

        init(_ entry: AuditEntry) {
            sequence = entry.sequence
            time = iso8601(entry.time)
            event = entry.event
            service = entry.service
            account = entry.account
            scopes = entry.scopes
            detail = entry.detail
            tokens = entry.tokens
            actor = entry.actor
            previousHash = entry.previousHash
            hash = entry.hash
        }
    }
    var entries: [Entry]
}

/// `token list --json`: one document, `{"tokens":[…]}`, each a `TokenSummary`.
struct TokenListDocument: Encodable {
    var tokens: [TokenSummary]
}

/// A token keeper whose audit entries name this user, host and process and the command line
/// (the command never takes a secret as an argument), and that anchors the audit head outside
/// the store (``AuditAnchor/standard``).
package func makeKeeper(_ store: any SecureStore) -> TokenKeeper {
    TokenKeeper(store: store, actor: .current(command: (["keysmith"] + CommandLine.arguments.dropFirst()).joined(separator: " ")),
                auditAnchor: .standard)
}

/// Prints a token as stored (`token list --json`'s entry form): one JSON document, never a secret.
func printTokenDocument(_ location: TokenLocation, _ token: OAuthToken, at now: Date) throws {
    try printTokenDocument((location.service, location.account), token, at: now)
}

func printTokenDocument(_ location: (service: String, account: String), _ token: OAuthToken, at now: Date) throws {
    print(try jsonLine(TokenSummary(TokenReference(service: location.service, account: location.account), token, at: now)))
}

extension KeysmithCommand.Token.Import {
    func runBatch() throws {
        let input = try InputLimit.read(limit: InputLimit.batch, what: "standard input (the token responses)")
        let imports: [TokenImport]
        do {
            imports = try TokenImport.batch(jsonLines: input)
        } catch let error as KeysmithError where error.code == .invalidArgument {
            throw ValidationError(error.message)
        }
        guard !imports.isEmpty else { throw ValidationError("no token on standard input; nothing was imported") }
        let keeper = makeKeeper(try store.openStore())
        let (imported, updated) = try keeper.importBatch(imports, replacing: replace)
        if json {
            struct Report: Encodable { var imported: [TokenReference]; var updated: [TokenReference] }
            print(try jsonLine(Report(imported: imported, updated: updated)))
        } else {
            print("Imported \(imported.count) and \(replace ? "replaced" : "updated") \(updated.count) token(s) in one commit.")
        }
    }
}

func loadToken(_ keeper: TokenKeeper, _ location: TokenLocation) throws -> OAuthToken {
    guard let token = try keeper.token(service: location.service, account: location.account) else {
        throw KeysmithError(.itemNotFound, "there is no token for \(location.shown); import one with `keysmith token import`")
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
                One audit entry names every changed token. A progress bar goes to standard error when it \
                is a terminal and the job is long. Without --service, --client or --subject, on a terminal, \
                it asks first (--yes skips the question).
                """
        )

        @OptionGroup var store: StoreOptions

        @Option(help: "A scope to revoke; repeat it (or give a list separated by spaces or commas) to revoke several in one commit.")
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

        @Flag(name: .customLong("at-provider"),
              help: "Also revoke each changed token at its provider (RFC 7009): its grant ends there and it becomes inactive here; queued until confirmed.")
        var atProvider = false

        @Flag(help: "Do not ask before revoking from every token (no --service, --client or --subject) on a terminal.")
        var yes = false

        @Flag(help: "PostgreSQL only: return when every live watcher (keysmith watch, a PostgresWatcher) has applied the revocation; exit 9 naming those that did not within --wait-timeout.")
        var wait = false

        @Option(name: .customLong("wait-timeout"), help: "How long --wait waits (a duration such as 10s or 2m; default 10s).")
        var waitTimeoutOption: String?
        var waitTimeout: String { waitTimeoutOption ?? "10s" }

        func validate() throws {
            if waitTimeoutOption != nil && !wait { throw ValidationError("--wait-timeout goes with --wait") }
        }

        func run() throws {
            let revoking = try parseScopes(scope)
            guard !revoking.isEmpty else { throw ValidationError("name at least one scope with --scope") }
            // A fleet-wide revocation typed at a terminal is confirmed first; scripts are not asked.
            // A fleet-wide revocation with a terminal on standard input is confirmed first;
            // without a terminal (a pipe, a cron job) no question is asked.
            if service == nil, client == nil, subject == nil, !dryRun, !yes, Terminal.isTerminal(.standardInput) {
                guard let confirmed = try Terminal.confirm("Revoke \(Scope.formatList(revoking)) from every token in the store?") else {
                    throw ValidationError("revoking from every token needs a yes, and there is no terminal to ask: give --yes")
                }
                guard confirmed else {
                    throw CommandFailure(message: "cancelled; nothing was revoked (--dry-run shows what would change, --yes skips this question)",
                                         exitCode: ExitCode(1))
                }
            }
            if wait, let choice = try? store.choice(), choice != .postgres, choice != .auto {
                throw KeysmithError.invalidArgument("--wait needs the postgres backend: only it has watchers to wait for")
            }
            let opened = try store.openStore()
            if wait, !isPostgres(opened) {
                throw KeysmithError.invalidArgument("--wait needs the postgres backend: only it has watchers to wait for")
            }
            let waitLimit = try parseDuration(waitTimeout)
            let keeper = makeKeeper(opened)
            let bar = ProgressBar(enabled: Terminal.isTerminal(.standardError))
            let filter = TokenFilter(service: service, clientID: client, subject: subject)
            let report: BulkRevocationReport
            var sent = (confirmed: 0, pending: 0, failed: 0)
            if atProvider && !dryRun {
                // The queued revocations at the providers: the ones this command queued are sent
                // now, at most 8 at a time per provider; what is not confirmed stays queued
                // (`keysmith token outbox`).
                let revoked = try networkParts().bulkRevokeAtProvider(keeper, revoking, filter, reason)
                report = revoked.report
                sent = (revoked.confirmed, revoked.pending, revoked.failed)
            } else {
                report = try keeper.revoke(scopes: revoking, matching: filter, reason: reason, dryRun: dryRun, progress: bar.update)
            }
            bar.finish()
            var pending: [String] = []
            if wait, !dryRun {
                pending = try networkParts().waitForWatchers(opened, waitLimit) ?? []
            }
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
                var document = try jsonLine(Report(scopes: revoking.map(\.rawValue).sorted(), matched: report.matched, changed: report.changed,
                                                   dryRun: dryRun, tokens: report.changedTokens))
                if wait {
                    document.removeLast()
                    document += ",\"not_acknowledged\":[" + pending.map { jsonString($0) }.joined(separator: ",") + "]}"
                }
                if atProvider && !dryRun {
                    document.removeLast()
                    document += ",\"at_provider\":{\"confirmed\":\(sent.confirmed),\"pending\":\(sent.pending),\"failed\":\(sent.failed)}}"
                }
                print(document)
            } else {
                print("\(dryRun ? "Would revoke" : "Revoked") \(names) on \(report.changed) of \(report.matched) matching token(s).")
                if atProvider && !dryRun {
                    print("At the providers: \(sent.confirmed) revocation(s) confirmed, \(sent.pending) still queued, \(sent.failed) failed"
                          + (sent.pending + sent.failed > 0 ? " (see `keysmith token outbox`)." : "."))
                }
                if wait && pending.isEmpty { print("Every live watcher applied it.") }
            }
            if !pending.isEmpty {
                throw CommandFailure(message: "committed, but not applied by \(pending.count) live watcher(s) within \(waitTimeout): "
                                     + pending.map { OneLine.unicodeEscaped($0) }.joined(separator: ", "), exitCode: ExitCode(9))
            }
            if sent.failed > 0 {
                throw CommandFailure(message: "revoked here, but \(sent.failed) provider revocation(s) were refused for good (see `keysmith token outbox`)",
                                     exitCode: ExitCode(10))
            }
        }
    }

    /// The audit log.
    struct Audit: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "audit", 
            abstract: "Check, show and repair the audit log of token changes.", subcommands: [Verify.self, Show.self, Repair.self])

        /// Repairs what damage left of the audit log, so token changes can be recorded again.
        struct Repair: ParsableCommand {
            static let configuration = CommandConfiguration(commandName: "repair",
                abstract: "Put a marker in place of each audit entry that does not read and rebuild the head, so token changes can be recorded again.",
                discussion: """
                    A damaged head stops every token change, and a damaged entry every listing of the vault. The loss \
                    stays on record: `audit verify` reports each marker (and exits 6) from then on, and an \
                    audit-repair entry names what was done. A PostgreSQL audit log is append-only: its damaged \
                    entries are left (exit 6 naming them), only its head is rebuilt. Exit 0 when there was nothing \
                    to repair or everything was.
                    """)

            @OptionGroup var store: StoreOptions

            @Flag(help: "Print one JSON document: {head_rebuilt, entries_replaced, entries_left}.")
            var json = false

            func run() throws {
                let repair = try makeKeeper(try store.openStore()).repairAuditLog()
                if json {
                    struct Result: Encodable {
                        var headRebuilt: Bool; var entriesReplaced: [Int]; var entriesLeft: [Int]
                        enum CodingKeys: String, CodingKey {
                            case headRebuilt = "head_rebuilt", entriesReplaced = "entries_replaced", entriesLeft = "entries_left"
                        }
                    }
                    print(try jsonLine(Result(headRebuilt: repair.headRebuilt, entriesReplaced: repair.entriesReplaced, entriesLeft: repair.entriesLeft)))
                } else if !repair.changed && repair.entriesLeft.isEmpty {
                    print("Nothing to repair: the head and every entry read.")
                } else {
                    print("Repaired the audit log: head \(repair.headRebuilt ? "rebuilt" : "kept"); entries replaced by markers: "
                          + (repair.entriesReplaced.isEmpty ? "none" : repair.entriesReplaced.map(String.init).joined(separator: " ")) + ".")
                }
                if !repair.entriesLeft.isEmpty {
                    throw CommandFailure(message: "entries \(repair.entriesLeft.map(String.init).joined(separator: " ")) do not read and cannot be "
                                         + "replaced (the audit log is append-only here)", exitCode: ExitCode(6))
                }
            }
        }


        struct Verify: ParsableCommand {
            static let configuration = CommandConfiguration(commandName: "verify", 
                abstract: "Check the audit log's hash chain; exit 6 when an entry was edited, reordered or deleted.")

            @OptionGroup var store: StoreOptions

            @Flag(help: "Print the result as one JSON document (the exit code still answers).")
            var json = false

            @Flag(name: .customLong("accept-rollback"), help: "Accept the log as it is after a deliberate restore (resets this machine's audit anchor).")
            var acceptRollback = false

            func run() throws {
                let keeper = makeKeeper(try store.openStore())
                let verification: AuditVerification
                do {
                    verification = try acceptRollback ? keeper.acceptAuditLog() : keeper.verifyAuditLog()
                } catch let error as KeysmithError where error.code == .corruptData {
                    // The log (or the store under it) does not read: that is the answer, in
                    // the same shape, not a bare error.
                    verification = AuditVerification(entries: 0, problems: ["the audit log cannot be read: \(error.message)"])
                }
                if json {
                    struct Result: Encodable { var intact: Bool; var entries: Int; var problems: [String] }
                    print(try jsonLine(Result(intact: verification.isIntact, entries: verification.entries, problems: verification.problems)))
                    if verification.isIntact { return }
                    throw CommandFailure(message: "the audit log's chain is broken (\(verification.problems.count) problem(s))", exitCode: ExitCode(6))
                }
                if verification.isIntact {
                    print("The audit log is intact: \(verification.entries) entr\(verification.entries == 1 ? "y" : "ies").")
                    return
                }
                for problem in verification.problems { print(problem) }
                throw CommandFailure(message: "the audit log's chain is broken (\(verification.problems.count) problem(s))", exitCode: ExitCode(6))
            }
        }

        struct Show: ParsableCommand {
            static let configuration = CommandConfiguration(commandName: "show", 
                abstract: "Print the audit log: one line per entry, or with --json one document.",
                discussion: """
                    Filters combine: --since and --until take an ISO 8601 time (2026-11-22T08:00:00Z), a \
                    date (2026-11-22: its start for --since, its end for --until) or a duration back from \
                    now (12h, 1d); --event, --service and --account match exactly, and a bulk change \
                    (bulk-revoke, import-batch) matches --service and --account through the tokens it \
                    changed.
                    """)

            @OptionGroup var store: StoreOptions

            @Option(help: "Only entries at or after this time (ISO 8601, or a duration back from now such as 1d).")
            var since: String?

            @Option(help: "Only entries at or before this time (ISO 8601, or a duration back from now).")
            var until: String?

            @Option(help: "Only entries of this event: import, replace, update, import-batch, revoke, revoke-all, refresh, grant, delete, bulk-revoke, provider-revoke, provider-revoke-retry, provider-revoke-failed, provider-revoke-queued.")
            var event: String?

            func validate() throws {
                if let event, !AuditEntry.events.contains(event) {
                    throw ValidationError("--event must be one of \(AuditEntry.events.joined(separator: ", "))")
                }
            }

            @Option(help: "Only entries about this service.")
            var service: String?

            @Option(help: "Only entries about this account.")
            var account: String?

            @Flag(help: "Print one JSON document.")
            var json = false

            func run() throws {
                let keeper = makeKeeper(try store.openStore())
                let now = keeper.now
                // A date alone is its first instant for --since and its last for --until.
                func instant(_ text: String, endOfDay: Bool = false) throws -> Date {
                    if let date = try? Date(text, strategy: Date.ISO8601FormatStyle()) { return date }
                    if let day = try? Date(text, strategy: Date.ISO8601FormatStyle().year().month().day()) {
                        return endOfDay ? day.addingTimeInterval(86_400 - 0.001) : day
                    }
                    guard let duration = try? parseDuration(text) else {
                        throw ValidationError("'\(text)' is neither an ISO 8601 time (2026-11-22T08:00:00Z, 2026-11-22) nor a duration (12h, 1d)")
                    }
                    return now.addingTimeInterval(-duration)
                }
                let from = try since.map { try instant($0) }, to = try until.map { try instant($0, endOfDay: true) }
                let entries = try keeper.auditEntries().filter { entry in
                    if let from, entry.time < from { return false }
                    // Times print in whole seconds: --until a printed time includes that entry.
                    if let to, entry.time.timeIntervalSince1970.rounded(.down) > to.timeIntervalSince1970 { return false }
                    if let event, entry.event != event { return false }
                    return entry.concerns(service: service, account: account)
                }
                if json {
                    print(try jsonLine(AuditDocument(entries: entries.map(AuditDocument.Entry.init))))
                    return
                }
                // Names and reasons are anyone's text: control characters are escaped, so no field
                // can forge a line (the JSON form escapes them too).
                for entry in entries {
                    let who = entry.actor.map { " by \(OneLine.unicodeEscaped($0.user))@\(OneLine.unicodeEscaped($0.host))" } ?? ""
                    let scopes = entry.scopes.isEmpty ? "" : " [\(entry.scopes.joined(separator: " "))]"
                    print("\(entry.sequence)\t\(iso8601(entry.time))\t\(OneLine.unicodeEscaped(entry.event))\t\(OneLine.unicodeEscaped(entry.account)) at \(OneLine.unicodeEscaped(entry.service))"
                          + "\(OneLine.unicodeEscaped(scopes))\t\(OneLine.unicodeEscaped(entry.detail))\(who)")
                }
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
        Terminal.write(Array(line.utf8), to: .standardError)
        drawn = true
    }

    func finish() {
        if drawn { Terminal.write(Array("\n".utf8), to: .standardError) }
    }
}
