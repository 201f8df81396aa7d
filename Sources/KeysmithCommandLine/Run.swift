import ArgumentParser
import FoundationEssentials
import Keysmith
import KeysmithCrypto
import KeysmithSystem

extension KeysmithCommand {
    /// Starts a program with secrets in its environment: never on its command line, never
    /// written to a file.
    struct Run: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "run",
            abstract: "Run a command with secrets in its environment (never on its argv, never on disk): keysmith run --env NAME=SERVICE/ACCOUNT -- COMMAND [ARGS...].",
            discussion: """
                Each --env NAME=SERVICE/ACCOUNT reads the generic password of that service and account \
                (split at the first '/': the account may hold more) and sets NAME to it. Every secret is \
                read before the command starts; a missing item exits 2 and nothing runs. keysmith then \
                becomes the command (exec): same process id, its exit status and signals are the \
                command's own. A command not found exits 127, one that cannot run 126. A secret that is \
                not UTF-8 text or holds a NUL byte cannot be an environment variable: exit 64. With a \
                `keysmith serve` for the vault, the secrets come from it. See docs/cli.md.
                """)

        @OptionGroup var store: StoreOptions

        @Option(name: .customLong("env"), help: ArgumentHelp("An environment variable and the item whose secret it gets.", valueName: "NAME=SERVICE/ACCOUNT"))
        var environment: [String] = []

        @Argument(parsing: .postTerminator, help: ArgumentHelp("The command and its arguments, after --.", valueName: "command"))
        var command: [String] = []

        /// The variables that carry keysmith's own credentials: removed from the command's
        /// environment (unless an `--env` sets one of those names).
        static let credentialVariables = ["KEYSMITH_PASSPHRASE", "KEYSMITH_KEYFILE", "KEYSMITH_DATABASE_URL"]

        /// A variable and the item that fills it.
        struct Binding {
            var name: String
            var service: String
            var account: String
        }

        func bindings() throws -> [Binding] {
            try environment.map { text in
                guard let equals = text.firstIndex(of: "=") else {
                    throw ValidationError("--env takes NAME=SERVICE/ACCOUNT")
                }
                let name = String(text[..<equals])
                let item = text[text.index(after: equals)...]
                guard let first = name.unicodeScalars.first, first == "_" || (first.isASCII && first.properties.isAlphabetic),
                      name.unicodeScalars.allSatisfy({ $0 == "_" || ($0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0))) })
                else {
                    throw ValidationError("--env: an environment variable's name is letters, digits and '_', not starting with a digit")
                }
                guard let slash = item.firstIndex(of: "/"), slash != item.startIndex, item.index(after: slash) != item.endIndex else {
                    throw ValidationError("--env \(name)=…: the item is SERVICE/ACCOUNT, both non-empty")
                }
                return Binding(name: name, service: String(item[..<slash]), account: String(item[item.index(after: slash)...]))
            }
        }

        func validate() throws {
            guard !command.isEmpty else { throw ValidationError("give the command to run after --") }
            let names = try bindings().map(\.name)
            if let twice = names.first(where: { name in names.filter { $0 == name }.count > 1 }) {
                throw ValidationError("--env names \(twice) twice")
            }
        }

        func run() throws {
            let bindings = try bindings()
            // Every secret first: a missing one means the command never starts.
            var values: [(name: String, bytes: [UInt8])] = []
            defer { for index in values.indices { cleanse(&values[index].bytes) } }
            var opened: (any SecureStore)?
            for binding in bindings {
                let key = ItemKey.genericPassword(service: binding.service, account: binding.account)
                var bytes: [UInt8]
                if let fromAgent = try Secret.GetSecret.agentSecret(store: store, key: key) {
                    bytes = fromAgent
                } else {
                    if opened == nil { opened = try store.openStore() }
                    guard let record = try opened!.read(key) else {
                        throw CommandFailure.notFound("\(key) does not exist; the command was not run")
                    }
                    bytes = Array(record.secret)
                }
                guard !bytes.contains(0), String(validating: bytes, as: UTF8.self) != nil else {
                    cleanse(&bytes)
                    throw KeysmithError.invalidArgument("the secret of \(key) is not UTF-8 text without NUL bytes, so it cannot be an environment "
                                                        + "variable; the command was not run")
                }
                values.append((binding.name, bytes))
            }
            opened = nil
            // The command gets the secrets it was given, not keysmith's own credential.
            for name in Self.credentialVariables { System.unsetEnvironment(name) }
            for (name, bytes) in values { System.setEnvironment(name, String(decoding: bytes, as: UTF8.self)) }
            let failure = System.replaceProcess(searching: command[0], arguments: command)
            // Only when the command could not be started.
            throw CommandFailure(message: "cannot run \(command[0]): \(failure)", exitCode: ExitCode(failure.isNotFound ? 127 : 126))
        }
    }
}
