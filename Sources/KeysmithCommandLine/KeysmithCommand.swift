package import ArgumentParser
import FoundationEssentials
import Keysmith
import KeysmithSystem
import Logging

/// The `keysmith` command: secrets from a terminal or a script. Its `main` runs in two programs:
/// the lean `keysmith`, and `keysmith-net`, which adds PostgreSQL and providers (``NetworkParts``).
package struct KeysmithCommand: ParsableCommand {
    // Every command's configuration names it (`commandName:`): without a name, the argument
    // parser derives it with `String(describing:)`, which scans every protocol conformance in
    // the binary, for every command in the tree, on every run (it was 30% of `--version`).
    package static let configuration = CommandConfiguration(
        commandName: "keysmith",
        abstract: "Keep secrets in an encrypted vault and manage them from a terminal or a script.",
        discussion: """
            The vault is $KEYSMITH_VAULT, else $XDG_DATA_HOME/keysmith, else ~/.local/share/keysmith, \
            unless --vault names one. It unlocks with --keyfile or $KEYSMITH_KEYFILE, or a passphrase \
            from --passphrase-fd, $KEYSMITH_PASSPHRASE or a prompt on the terminal. Secrets are never \
            taken from the command line.

            Diagnostics go to standard error at the level KEYSMITH_LOG_LEVEL names (trace, debug, info, \
            notice, warning, error, critical; error by default, so that a failure is its one keysmith: \
            line). They never contain a secret, and name items only at trace.

            Exit codes: 0 success, 1 other failure, 2 not found, 3 denied or not granted, \
            4 authentication failed, 5 store unavailable or locked, 6 corrupt data, \
            7 already exists, 8 changed by another writer (retry), 9 watchers did not acknowledge \
            (revoke --wait), 10 the provider refused (invalid_grant, access_denied, …), 11 the provider \
            could not be reached or answered badly, 64 usage error or bad input.
            """,
        version: Keysmith.version,
        subcommands: inserting(network?.commands ?? [], into: [
            Init.self, Secret.self, Token.self, BulkRevoke.self, Audit.self, PolicyCommand.self, Vault.self, Batch.self, Backend.self, Migrate.self,
            Run.self, Serve.self, Lock.self, Unlock.self, Walkthrough.self,
        ])
    )

    package init() {}

    /// `base` with each of `extra` placed after the command it names, in order.
    static func inserting(_ extra: [(after: String, command: any ParsableCommand.Type)], into base: [any ParsableCommand.Type])
        -> [any ParsableCommand.Type]
    {
        var commands = base
        for (after, command) in extra {
            let index = commands.firstIndex { $0._commandName == after }.map { $0 + 1 } ?? commands.endIndex
            commands.insert(command, at: index)
        }
        return commands
    }

    /// Runs the command, turning every error into one line on stderr and a stable exit code.
    /// `parts` are the network parts (`keysmith-net`), or `nil` in the lean `keysmith`, which
    /// hands a command that needs them, and any command line it cannot parse, to `keysmith-net`.
    package static func main(network parts: NetworkParts?) -> Never {
        network = parts
        // keysmith-net: the mark keysmith set when it handed the command over goes no further.
        if parts != nil { System.unsetEnvironment(NetworkHelper.marker) }
        if parts == nil, System.environment(NetworkHelper.marker) != nil {
            // keysmith-net handed the command back: what stands where keysmith-net should is a
            // lean keysmith (a copy or a link), and running it again would never end.
            fail("the keysmith-net this keysmith found is a lean keysmith, not keysmith-net; install keysmith-net (scripts/install.sh)",
                 code: ExitCode(5))
        }
        if let index = Terminal.firstNonUTF8Argument() {
            // Swift would read the bytes as U+FFFD, and two different names as one.
            fail("argument \(index) is not UTF-8 text; names and options must be UTF-8 (a secret of any bytes goes on standard input, "
                 + "or in `batch` as secretBase64)", code: ExitCode(64))
        }
        var arguments = Array(CommandLine.arguments.dropFirst())
        // Run as git-credential-keysmith (a link git finds for `credential.helper keysmith`).
        if CommandLine.arguments.first?.split(separator: "/").last == "git-credential-keysmith" {
            arguments = ["git-credential"] + arguments
        }
        if parts == nil {
            switch NetworkHelper.need(for: arguments) {
            case .required: handOver()
            case .preferred: handOver(ifInstalled: true)
            case .none: break
            }
        }
        bootstrapLogging()
        checkCommandName(arguments)
        checkShortOptions(arguments)
        do {
            var command: any ParsableCommand
            do {
                command = try parseAsRoot(arguments)
            } catch where parts == nil && exitCode(for: error) != .success {
                // What the lean command cannot parse may be a command or option of keysmith-net's:
                // it parses every command, and says what is wrong when nothing is. Without it,
                // the lean command says what is wrong itself.
                handOver(ifInstalled: true)
                throw error
            }
            try command.run()
        } catch let error as KeysmithError {
            // A usage error (exit 64) about an argument (a scope, a type, a descriptor number)
            // must not repeat it either: it could be a secret typed in the wrong place.
            let code = exitCode(for: error.code)
            fail(code == 64 ? masked(error.message, Array(CommandLine.arguments.dropFirst())) : error.message, code: ExitCode(code))
        } catch let error as CommandFailure {
            if error.message.isEmpty { Self.exit(withError: error.exitCode) }
            fail(error.message, code: error.exitCode)
        } catch let error where network?.failure(error) != nil {
            let (message, code) = network!.failure(error)!
            fail(message, code: ExitCode(code))
        } catch {
            // --help and --version print as the parser prints them; every other parse or
            // validation error is one `keysmith:` line, exit 64, pointing at the help.
            let code = exitCode(for: error)
            guard code != .success else { exit(withError: error) }
            // An option-shaped word that is no option of Keysmith's is what went wrong, whatever
            // the parser says first (it reports a missing required option before it).
            if let unknown = unknownOption(in: Array(CommandLine.arguments.dropFirst())) {
                let help = (["keysmith"] + commandPath(Array(CommandLine.arguments.dropFirst())) + ["--help"]).joined(separator: " ")
                fail("\(unknown) (see `\(help)`)", code: ExitCode(64))
            }
            // The arguments are hidden before the message's lines are joined: an argument with
            // a newline in it (a pasted key) would otherwise no longer be found.
            let message = masked(Self.message(for: error), Array(CommandLine.arguments.dropFirst())).split(separator: "\n").map { line in
                String(line.drop { $0 == " " }.reversed().drop { $0 == " " }.reversed())
            }.filter { !$0.isEmpty }.joined(separator: "; ")
            let path = commandPath(Array(CommandLine.arguments.dropFirst()))
            let help = (["keysmith"] + path + ["--help"]).joined(separator: " ")
            fail("\(message) (see `\(help)`)", code: code == .failure ? ExitCode(1) : ExitCode(64))
        }
        Self.exit(withError: nil)
    }

    /// The options every store command takes (StoreOptions); before the subcommand they are an
    /// easy mistake, told apart here, before parsing, by the arguments themselves.
    static let storeOptions: Set<String> = ["--vault", "--keyfile", "--passphrase-fd", "--backend", "--collection", "--timeout", "--namespace"]

    /// The subcommand names at the start of the arguments (`token list`), for pointing at help.
    static func commandPath(_ arguments: [String]) -> [String] {
        var path: [String] = []
        var level = configuration.subcommands
        for argument in arguments {
            guard let next = level.first(where: { $0._commandName == argument }) else { break }
            path.append(argument)
            level = next.configuration.subcommands
        }
        return path
    }

    /// Catches mistakes the parser reports poorly: store options before the subcommand, and a
    /// misspelled command at any depth (`secrt`, `secret lst`), with a suggestion; `help X`
    /// for a command that does not exist is one too (the parser printed the top-level help and
    /// exited 0).
    static func checkCommandName(_ arguments: [String]) {
        guard let first = arguments.first else { return }
        // The lean command knows only its own commands: what it cannot name, keysmith-net
        // (which knows them all) names, or runs.
        func fail(_ message: String, code: ExitCode) -> Never {
            if network == nil { handOver(ifInstalled: true) }
            KeysmithCommand.fail(message, code: code)
        }
        let names = configuration.subcommands.map { $0._commandName } + ["help"]  // the parser's own `help`
        if let option = first.split(separator: "=").first.map(String.init), storeOptions.contains(option) {
            // The subcommand's words come after the option's value (which may be a command's
            // name: `--backend vault secret list`); only command names are repeated.
            let rest = Array(arguments.dropFirst(first.contains("=") ? 1 : 2))
            let words = commandPath(Array(rest.drop { !names.contains($0) })).joined(separator: " ")
            let subcommand = words.isEmpty ? "secret get" : words
            fail("\(option) goes after the subcommand, as in `keysmith \(subcommand) \(option) …`", code: ExitCode(64))
        }
        var level: [any ParsableCommand.Type] = configuration.subcommands
        var walked = ["keysmith"]
        for argument in arguments {
            if argument.hasPrefix("-") { return }
            guard !level.isEmpty else { return }  // a command's own arguments
            if let next = level.first(where: { $0._commandName == argument }) {
                walked.append(argument)
                level = next.configuration.subcommands
                continue
            }
            if argument == "help" { continue }  // the parser's own `help`, at any level: what follows is a path
            let candidates = level.map { $0._commandName }
            let closest = candidates.min { distance($0, argument) < distance($1, argument) }
            let suggestion = closest.flatMap { distance($0, argument) <= 2 ? "; did you mean `\($0)`?" : nil } ?? ""
            // The word is not repeated: it could be a secret typed in the wrong place.
            fail("unknown command after `\(walked.joined(separator: " "))`\(suggestion) (see `\(walked.joined(separator: " ")) --help`)", code: ExitCode(64))
        }
    }

    /// Keysmith has no short options but `-h`: an argument such as `-shell` is a cluster the
    /// parser would read as `-s -h -e -l -l`, print help for and exit 0, doing nothing. Any
    /// argument that starts with one `-` and is longer than two characters (and is not a
    /// number) is a usage error instead, never repeated (it could be a secret). Arguments
    /// after `--` are not options.
    static func checkShortOptions(_ arguments: [String]) {
        for argument in arguments {
            if argument == "--" { return }
            guard argument.hasPrefix("-"), !argument.hasPrefix("--"), argument.count > 2, Int(argument) == nil else { continue }
            let help = (["keysmith"] + commandPath(arguments) + ["--help"]).joined(separator: " ")
            fail("an argument starting with a single '-' is not an option (options are spelled --name; only -h is short); "
                 + "it is not repeated, as it could be a secret (see `\(help)`)", code: ExitCode(64))
        }
    }

    /// The short spellings pass and secret-tool users type, and the option each one means.
    static let shortSpellings: [Character: String] = ["s": "--service", "a": "--account", "k": "--keyfile", "v": "--vault", "l": "--label"]

    /// The first argument (before `--`) that is shaped like an option and is none of Keysmith's,
    /// described with the nearest option's name: `--acount` ("unknown option '--acount'; did
    /// you mean '--account'?"), `-s` ("options are spelled --name; did you mean '--service'?").
    /// Only a name of lower-case letters and hyphens is repeated (`--verbose`, `--acount`): a
    /// word with a digit or a symbol, or a value after `=`, could be a secret typed in the
    /// wrong place, and is withheld as the parser's messages are (``masked(_:_:)``).
    static func unknownOption(in arguments: [String]) -> String? {
        var known: Set<String>?
        for argument in arguments {
            if argument == "--" { return nil }
            if argument.count == 2, argument.first == "-", let letter = argument.last, letter.isLetter, letter.isLowercase, letter != "h" {
                let suggestion = shortSpellings[letter].map { "; did you mean '\($0)'?" } ?? ""
                return "'\(argument)' is not an option: options are spelled --name (only -h is short)\(suggestion)"
            }
            guard argument.hasPrefix("--"), argument.count > 2 else { continue }
            let name = String(argument.prefix { $0 != "=" })
            let words = name.dropFirst(2).split(separator: "-", omittingEmptySubsequences: false)
            // Short, of at most three words: a longer hyphenated phrase could be a passphrase.
            guard name.count <= 26, (1...3).contains(words.count),
                  words.allSatisfy({ !$0.isEmpty && $0.allSatisfy { $0.isASCII && $0.isLowercase } })
            else { continue }
            let names = known ?? knownWords()
            known = names
            guard !names.contains(name) else { continue }
            let options = names.filter { $0.hasPrefix("--") }
            let nearest = options.map { ($0, distance($0, name)) }.filter { $0.1 <= max(2, name.count / 4) }.min { ($0.1, $0.0) < ($1.1, $1.0) }
            return "unknown option '\(name)'" + (nearest.map { "; did you mean '\($0.0)'?" } ?? "")
        }
        return nil
    }

    /// The parser's message with the arguments it may repeat hidden. It quotes what it rejects
    /// (`Unexpected argument 'x'`, `The value 'x' is invalid`), or not (`Invalid option: ---x`),
    /// and one of them may be a secret typed in the wrong place (`--hunter2`, `--label=s3cret`,
    /// a pasted key over several lines), so none is repeated: only the names of options
    /// Keysmith has. An argument, each of its lines, its value after `=` and its name before
    /// it are each hidden wherever they appear, except short ones and plain words (under four
    /// characters, or under eight letters: hidden only when quoted), words inside an option's
    /// name (`account` in `--account`), and paths of files that exist.
    static func masked(_ message: String, _ arguments: [String]) -> String {
        let known = knownWords()
        var pieces: Set<String> = []
        for argument in arguments where !argument.isEmpty && !known.contains(argument) {
            pieces.insert(argument)
            let parts = argument.split(separator: "=", maxSplits: 1).map(String.init)
            if parts.count == 2 {
                pieces.insert(parts[1])
                if !known.contains(parts[0]) { pieces.insert(parts[0]) }
            }
            for line in argument.split(whereSeparator: \.isNewline) {
                pieces.insert(String(line.drop(while: \.isWhitespace).reversed().drop(while: \.isWhitespace).reversed()))
            }
        }
        // Longest first, across all arguments: a shorter one inside a longer one must not
        // leave the rest of the longer one behind.
        var out = message
        // A path to a file or directory that exists (a keyfile, a policy file) is not a secret
        // typed in the wrong place: it stays, so the message says which file.
        pieces = pieces.filter { piece in !(piece.contains("/") && ((try? System.status(piece)) ?? nil) != nil) }
        for piece in pieces.sorted(by: { $0.count > $1.count }) where !piece.isEmpty && !known.contains(piece) {
            // Hidden wherever it appears when it could not be a word of the message itself
            // (long, or holding a digit or a symbol); a plain short word (`with`) only when quoted.
            let wordLike = piece.count < 8 && piece.allSatisfy(\.isLetter)
            if piece.count >= 4, !wordLike, !known.contains(where: { $0.contains(piece) }) {
                out = out.replacing(piece, with: "…")
            } else {
                out = out.replacing("'\(piece)'", with: "'…'")
            }
        }
        return out
    }

    /// What the parser's messages may name and no secret is taken for: every option name
    /// (`--service`, …) and command name of every command, read from their help once.
    static func knownWords() -> Set<String> {
        var names: Set<String> = ["--help", "--version", "help"]
        var pending: [any ParsableCommand.Type] = [KeysmithCommand.self]
        while let command = pending.popLast() {
            pending += command.configuration.subcommands
            names.insert(command._commandName)
            // Each `--` and the name that follows it.
            var rest = Substring(KeysmithCommand.helpMessage(for: command))
            while let start = rest.indices.first(where: { rest[$0] == "-" && rest[rest.index(after: $0)...].first == "-" }) {
                let name = rest[start...].prefix { $0 == "-" || $0.isLetter || $0.isNumber }
                if name.count > 2, name.dropFirst(2).first?.isLetter == true { names.insert(String(name)) }
                rest = rest[rest.index(start, offsetBy: 2)...]
            }
        }
        return names
    }

    /// Edit distance between two short words, for suggestions.
    static func distance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        var previous = Array(0...b.count)
        for i in 1...max(a.count, 1) where !a.isEmpty {
            var current = [i] + Array(repeating: 0, count: b.count)
            for j in 1...max(b.count, 1) where !b.isEmpty {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            previous = current
        }
        return a.isEmpty ? b.count : previous[b.count]
    }

    /// Diagnostics on standard error, at the level `KEYSMITH_LOG_LEVEL` names (`error` by
    /// default: a failing command prints its one `keysmith:` line, not the stores' warnings
    /// before it; `warning` shows what they notice on the way, such as damage elsewhere in a
    /// vault a read succeeded in).
    static func bootstrapLogging() {
        let named = System.environment("KEYSMITH_LOG_LEVEL").flatMap { Logger.Level(rawValue: $0.lowercased()) }
        let level = named ?? .error
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        if let raw = System.environment("KEYSMITH_LOG_LEVEL"), !raw.isEmpty, named == nil {
            Logger(label: "keysmith").error("KEYSMITH_LOG_LEVEL is not one of trace, debug, info, notice, warning, error, critical; using error")
        }
    }

    package static func fail(_ message: String, code: ExitCode) -> Never {
        Terminal.write(Array("keysmith: \(message)\n".utf8), to: .standardError)
        Self.exit(withError: code)
    }

    /// The documented exit code of each error code (docs/cli.md).
    /// 10 when the provider refused, 11 when it could not be reached or answered badly, 64 when
    /// it cannot do what was asked (no such endpoint).
    /// Runs `keysmith-net` in this process's place, with this process's arguments; or fails
    /// saying why it cannot.
    static func handOver() -> Never {
        do {
            try NetworkHelper.run(CommandLine.arguments)
        } catch let error as KeysmithError {
            fail(error.message, code: ExitCode(exitCode(for: error.code)))
        } catch {
            fail("\(error)", code: ExitCode(1))
        }
    }

    /// Runs `keysmith-net` in this process's place when it is installed (help, and what the lean
    /// command cannot parse: keysmith-net knows every command); returns when it is not, and the
    /// lean command answers itself.
    static func handOver(ifInstalled: Bool) {
        guard NetworkHelper.installedPath() != nil else { return }
        handOver()
    }

    static func exitCode(for code: KeysmithError.Code) -> Int32 {
        switch code {
        case .itemNotFound: 2
        case .authenticationFailed: 4
        case .storeLocked, .storeUnavailable: 5
        case .timedOut: 12
        case .corruptData: 6
        case .duplicateItem: 7
        case .writeConflict: 8
        case .invalidArgument, .invalidScope, .malformedData, .limitExceeded: 64
        default: 1
        }
    }
}

/// A failure of the command itself, with its exit code.
package struct CommandFailure: Error {
    package init(message: String, exitCode: ExitCode) {
        self.message = message
        self.exitCode = exitCode
    }

    let message: String
    let exitCode: ExitCode

    package static func notFound(_ message: String) -> CommandFailure { CommandFailure(message: message, exitCode: ExitCode(2)) }
    package static func denied(_ message: String) -> CommandFailure { CommandFailure(message: message, exitCode: ExitCode(3)) }
    /// An answer given by the exit code alone (`--quiet`): nothing is printed.
    package static func silent(_ code: ExitCode) -> CommandFailure { CommandFailure(message: "", exitCode: code) }
}
