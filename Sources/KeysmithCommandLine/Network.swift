package import ArgumentParser
package import Keysmith
import KeysmithStores
import KeysmithSystem
package import KeysmithTokens

/// The parts of the command that need PostgreSQL or an OAuth provider. Both need SwiftNIO, TLS
/// and Foundation, which are four fifths of a binary that has them (docs/benchmarks.md, "Binary
/// size"), so they live in a second executable, `keysmith-net`, installed beside `keysmith`.
/// `keysmith-net` sets ``network`` before it parses; the lean `keysmith` leaves it `nil` and hands
/// every command that needs these parts to `keysmith-net` before it does anything
/// (``NetworkHelper``), as git runs its helpers: same arguments, same environment, same
/// descriptors, so the user sees one command.
package struct NetworkParts {
    /// Top-level commands only `keysmith-net` runs, each with its place in the help's list.
    package var commands: [(after: String, command: any ParsableCommand.Type)]
    /// `token` subcommands only `keysmith-net` runs, each with its place in the help's list.
    package var tokenCommands: [(after: String, command: any ParsableCommand.Type)]
    /// Opens the PostgreSQL store the options name.
    package var openPostgres: (StoreOptions) throws -> any SecureStore
    /// `--at-provider` on `token revoke`, `revoke-all` and `delete`.
    package var revokeAtProvider: (_ keeper: TokenKeeper, _ location: TokenLocation, _ scopes: [Scope]?, _ deleting: Bool, _ reason: String,
                                   _ json: Bool) throws -> Void
    /// `token introspect --at-provider`.
    package var introspectAtProvider: (_ keeper: TokenKeeper, _ location: TokenLocation) throws -> Void
    /// `token get --fresh`: the token, refreshed at its provider first when its access token
    /// expires within `minValidity` seconds.
    package var freshToken: (_ keeper: TokenKeeper, _ location: TokenLocation, _ minValidity: Double) throws -> OAuthToken
    /// `revoke --at-provider`: the bulk revocation with each changed token queued for its
    /// provider in the same commit, and the queued ones sent.
    package var bulkRevokeAtProvider: (_ keeper: TokenKeeper, _ scopes: [Scope], _ filter: TokenFilter, _ reason: String) throws
        -> (report: BulkRevocationReport, confirmed: Int, pending: Int, failed: Int)
    /// `revoke --wait`: `nil` when the store is not PostgreSQL; else the live watchers that did
    /// not apply this handle's last commit within `timeout` seconds.
    package var waitForWatchers: (_ store: any SecureStore, _ timeout: Double) throws -> [String]?
    /// Whether a store is the PostgreSQL store.
    package var isPostgres: (any SecureStore) -> Bool
    /// A provider's error as the command reports it (message and exit code), `nil` for others.
    package var failure: (any Error) -> (message: String, code: Int32)?

    package init(commands: [(after: String, command: any ParsableCommand.Type)], tokenCommands: [(after: String, command: any ParsableCommand.Type)],
                 openPostgres: @escaping (StoreOptions) throws -> any SecureStore,
                 revokeAtProvider: @escaping (TokenKeeper, TokenLocation, [Scope]?, Bool, String, Bool) throws -> Void,
                 introspectAtProvider: @escaping (TokenKeeper, TokenLocation) throws -> Void,
                 freshToken: @escaping (TokenKeeper, TokenLocation, Double) throws -> OAuthToken,
                 bulkRevokeAtProvider: @escaping (TokenKeeper, [Scope], TokenFilter, String) throws
                     -> (report: BulkRevocationReport, confirmed: Int, pending: Int, failed: Int),
                 waitForWatchers: @escaping (any SecureStore, Double) throws -> [String]?,
                 isPostgres: @escaping (any SecureStore) -> Bool,
                 failure: @escaping (any Error) -> (message: String, code: Int32)?) {
        self.commands = commands
        self.tokenCommands = tokenCommands
        self.openPostgres = openPostgres
        self.revokeAtProvider = revokeAtProvider
        self.introspectAtProvider = introspectAtProvider
        self.freshToken = freshToken
        self.bulkRevokeAtProvider = bulkRevokeAtProvider
        self.waitForWatchers = waitForWatchers
        self.isPostgres = isPostgres
        self.failure = failure
    }
}

/// Set once by `keysmith-net`'s `main`, before anything else runs; read-only afterwards.
package nonisolated(unsafe) var network: NetworkParts?

/// The network parts, or (in the lean `keysmith`) `keysmith-net` run in this process's place.
/// ``NetworkHelper/need(for:)`` sends every command that needs them to `keysmith-net` before it
/// starts (LeanBinaryTests runs each such command line against a `keysmith` without it); this is
/// the safety net for one it missed, and never returns without them.
func networkParts() throws -> NetworkParts {
    if let network { return network }
    try NetworkHelper.run(CommandLine.arguments)
}

/// Whether a store is PostgreSQL's: never, in the lean `keysmith` (it cannot open one).
func isPostgres(_ store: any SecureStore) -> Bool { network?.isPostgres(store) ?? false }

/// Hands a command to `keysmith-net`.
package enum NetworkHelper {
    /// Top-level commands that always need PostgreSQL or a provider.
    static let commands: Set<String> = ["postgres", "watch", "provider", "git-credential"]
    /// `token` subcommands that always need a provider.
    static let tokenCommands: Set<String> = ["login", "outbox", "reconcile"]
    /// Options that need PostgreSQL or a provider, whichever command they are given to.
    static let options: Set<String> = ["--at-provider", "--fresh", "--wait"]

    /// How much a command line needs `keysmith-net`.
    package enum Need {
        /// Not at all.
        case none
        /// Help (it lists every command): from `keysmith-net` when it is installed, else from
        /// the lean command.
        case preferred
        /// The command cannot run without it.
        case required
    }

    /// The environment variable set for `keysmith-net` when `keysmith` hands a command over: a
    /// lean `keysmith` that finds it was handed the command back (a copy or a link installed as
    /// `keysmith-net`) says so instead of running itself again for ever.
    package static let marker = "KEYSMITH_HANDED_OVER"

    /// What the command `arguments` (without the program's name) needs of `keysmith-net`.
    package static func need(for arguments: [String]) -> Need {
        let words = Array(arguments.prefix { $0 != "--" })
        // No command at all prints the help, which lists every command; so does `token` alone.
        guard let first = words.first else { return .preferred }
        if isNeeded(for: arguments) { return .required }
        if first == "help" || (first == "token" && words.dropFirst().allSatisfy { $0.hasPrefix("-") }) { return .preferred }
        for word in words where word == "--help" || word == "-h" || word.hasPrefix("--generate-completion-script")
            || word.hasPrefix("--experimental-dump-help") || word.hasPrefix("---completion")
        {
            return .preferred
        }
        return .none
    }

    /// Whether the command `arguments` (without the program's name) must run in `keysmith-net`:
    /// a command or option above, or the PostgreSQL store, named by an argument (`--backend
    /// postgres`, `migrate --to postgres`), `KEYSMITH_BACKEND` or the config file, or chosen by
    /// `auto` with a database configured.
    /// `git-credential-keysmith` arrives here as `git-credential`.
    /// It errs towards `keysmith-net`, which runs every command: an argument that merely reads
    /// `postgres` (a service of that name) costs a slower start, never a different answer.
    package static func isNeeded(for arguments: [String]) -> Bool {
        let words = Array(arguments.prefix { $0 != "--" })
        guard let first = words.first else { return false }
        if commands.contains(first) { return true }
        if first == "help", words.count > 1, commands.contains(words[1]) { return true }
        if first == "token", words.count > 1, tokenCommands.contains(words[1]) { return true }
        for word in words {
            if options.contains(word) { return true }
            if word == "postgres" || word.hasSuffix("=postgres") || word == "auto" || word.hasSuffix("=auto") { return true }
        }
        // No store named on the command line: the environment, else the config file (a config
        // file that does not read is left to the command, which says what is wrong with it).
        if let choice = try? StoreChoice.given() {
            if choice == .postgres { return true }
            if choice == .auto, (System.environment("KEYSMITH_DATABASE_URL").map { !$0.isEmpty } ?? false)
                || (try? StoreChoice.configFile().databaseURL) != nil
            {
                return true
            }
        }
        return false
    }

    /// Runs `keysmith-net` in this process's place with `arguments` (the program's name first, as
    /// given), or fails saying where it was looked for.
    package static func run(_ arguments: [String]) throws -> Never {
        let candidates = helperPaths()
        var failures: [String] = []
        for path in candidates {
            if System.canonicalPath(path) == System.executablePath() {
                failures.append("\(path) is this keysmith itself")
                continue
            }
            guard System.isExecutable(path) else {
                if (try? System.status(path)) ?? nil != nil { failures.append("\(path) is not an executable file") }
                continue
            }
            System.setEnvironment(marker, "1")
            let error = System.replaceProcess(path: path, arguments: arguments)
            System.unsetEnvironment(marker)
            failures.append("\(path) did not run: \(error)")
        }
        guard !candidates.isEmpty else {
            throw KeysmithError(.storeUnavailable, "this command needs keysmith-net (PostgreSQL and providers), and this keysmith cannot tell "
                                + "where it runs from (no /proc/self/exe) to find it")
        }
        throw KeysmithError(.storeUnavailable,
                            "this command needs keysmith-net (PostgreSQL and providers), which is not installed beside keysmith (looked for "
                                + candidates.joined(separator: " and ") + (failures.isEmpty ? "" : "; " + failures.joined(separator: "; "))
                                + "); scripts/install.sh installs both")
    }

    /// The `keysmith-net` ``run(_:)`` would run, when there is one.
    static func installedPath() -> String? {
        helperPaths().first { System.isExecutable($0) && System.canonicalPath($0) != System.executablePath() }
    }

    /// Beside this executable, then in `../libexec/keysmith/` (where scripts/install.sh puts it);
    /// none when this process cannot tell where it runs from. `run(_:)` never takes this
    /// executable itself (a link to it) for `keysmith-net`.
    static func helperPaths() -> [String] {
        guard let executable = System.executablePath() else { return [] }
        let directory = executable.split(separator: "/", omittingEmptySubsequences: false).dropLast().joined(separator: "/")
        return [directory + "/keysmith-net", directory + "/../libexec/keysmith/keysmith-net"]
    }
}
