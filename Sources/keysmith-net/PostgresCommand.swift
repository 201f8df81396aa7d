import ArgumentParser
import Foundation
import Keysmith
import KeysmithCommandLine
import KeysmithCredentials
import KeysmithCrypto
import KeysmithPostgres
import KeysmithSystem
import KeysmithTokens
import Synchronization

extension KeysmithCommand {
    /// The PostgreSQL store's administration.
    struct PostgresCommand: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "postgres",
            abstract: "Set up the shared store on PostgreSQL (docs/postgres.md).",
            subcommands: [Init.self, Verify.self, RotateMasterKey.self, RotateDataKey.self, Rekey.self]
        )
    }
}

extension KeysmithCommand.PostgresCommand {
    /// Creates the schema, the master key's record and the namespace's first data key.
    struct Init: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "init", 
            abstract: "Create the schema (if missing), the master key's record and the namespace's first data key.",
            discussion: """
                The database comes from $KEYSMITH_DATABASE_URL or the config file's database_url; the \
                master key from --keyfile / $KEYSMITH_KEYFILE, or a passphrase (--passphrase-fd, \
                $KEYSMITH_PASSPHRASE, or asked on the terminal). Running it again with the same master key \
                changes nothing; with another it fails (exit 4).
                """
        )

        @OptionGroup var store: StoreOptions

        @Option(name: .customLong("scrypt-log-n"), help: "The passphrase KDF's cost, 2^N (14 to 20).")
        var scryptLogN: Int = 17

        @Option(name: .customLong("grant-to"), help: ArgumentHelp(
            "Grant this existing database role what applications need and no more (the audit log and the change feed: add and read only).",
            valueName: "role"))
        var grantTo: String?

        @Flag(help: "Print one JSON document: {database, namespace, store}.")
        var json = false

        func validate() throws {
            if !(14...20).contains(scryptLogN) { throw ValidationError("--scrypt-log-n is 14 to 20") }
        }

        func run() throws {
            let settings = try PostgresConnectionSettings(url: try store.databaseURL())
            let masterKey = try store.postgresMasterKey(making: true)  // a master key may be made from it
            try PostgresStore.initialize(settings, masterKey: masterKey, scrypt: ScryptCost(logN: scryptLogN), applicationRole: grantTo)
            let opened = try PostgresStore(settings, namespace: try store.postgresNamespace(), masterKey: masterKey)
            if json {
                print("{\"database\":\(jsonString(settings.database)),\"namespace\":\(jsonString(opened.namespace)),\"store\":\(jsonString(settings.description))}")
            } else {
                print("ready: \(opened.storeDescription)")
            }
        }
    }
}

extension KeysmithCommand.PostgresCommand {
    /// Replaces the master key: data keys are re-wrapped, nothing else moves.
    struct RotateMasterKey: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "rotate-master-key",
            abstract: "Replace the master key: every namespace's data keys are re-wrapped in one transaction; no record is rewritten.",
            discussion: """
                The current master key comes as for every command (--keyfile, --passphrase-fd, $KEYSMITH_PASSPHRASE, \
                a prompt); the new one from --new-keyfile (created when missing), --new-passphrase-fd, \
                $KEYSMITH_NEW_PASSPHRASE, or a prompt (typed twice). Run it as the database role that owns the \
                schema. Processes that opened the store with the old key are told to reopen when they next need a key.
                """
        )

        @OptionGroup var store: StoreOptions

        @Option(name: .customLong("new-keyfile"), help: ArgumentHelp("The new master key's keyfile.", valueName: "file"))
        var newKeyfile: String?

        @Option(name: .customLong("new-passphrase-fd"), help: ArgumentHelp("Read the new passphrase from this descriptor.", valueName: "n"))
        var newPassphraseFD: Int32?

        @Option(name: .customLong("scrypt-log-n"), help: "scrypt's cost for a new passphrase, as log2(N), 14 to 20.")
        var scryptLogN: Int = 17

        @Flag(help: "Print one JSON document: {rewrapped}.")
        var json = false

        func validate() throws {
            guard (14...20).contains(scryptLogN) else { throw ValidationError("--scrypt-log-n must be between 14 and 20") }
            guard newKeyfile == nil || newPassphraseFD == nil else {
                throw ValidationError("give --new-keyfile or --new-passphrase-fd, not both: the database has one master key")
            }
        }

        func run() throws {
            let settings = try PostgresConnectionSettings(url: try store.databaseURL())
            let current = try store.postgresMasterKey()
            let replacement: PostgresMasterKey
            var createdKeyfile: String?
            if let newKeyfile {
                if try System.status(newKeyfile) == nil {
                    try Keyfile.generate(at: newKeyfile)
                    createdKeyfile = newKeyfile
                }
                replacement = .keyfile(path: newKeyfile)
            } else if let newPassphraseFD {
                var bytes = try KeySources.readPassphrase(descriptor: newPassphraseFD)
                defer { cleanse(&bytes) }
                guard !bytes.isEmpty else { throw KeysmithError.invalidArgument("the new passphrase is empty; nothing changed") }
                replacement = try PostgresMasterKey(.passphrase(bytes, from: .descriptor(newPassphraseFD, option: "--new-passphrase-fd")), making: true)
            } else if let environment = try KeySources.newPassphrase(fromEnvironment: "KEYSMITH_NEW_PASSPHRASE"), !environment.isEmpty {
                replacement = .passphrase(environment)
            } else {
                guard var first = try Terminal.readHidden(prompt: "New master passphrase: ") else {
                    throw KeysmithError.invalidArgument("no new master key: use --new-keyfile, --new-passphrase-fd or KEYSMITH_NEW_PASSPHRASE")
                }
                defer { cleanse(&first) }
                var second = try Terminal.readHidden(prompt: "Repeat the new master passphrase: ") ?? []
                defer { cleanse(&second) }
                guard first == second, !first.isEmpty else { throw KeysmithError.invalidArgument("the passphrases differ or are empty; nothing changed") }
                replacement = try PostgresMasterKey(.passphrase(first, from: .terminal), making: true)
            }
            let count: Int
            do {
                count = try PostgresStore.rotateMasterKey(settings, from: current, to: replacement, scrypt: ScryptCost(logN: scryptLogN))
            } catch let error as KeysmithError {
                guard let createdKeyfile else { throw error }
                // The keyfile made for this rotation opens nothing unless the rotation committed
                // after all (a connection lost during COMMIT): removed then, kept otherwise.
                switch try? PostgresStore.isCurrentMasterKey(settings, replacement) {
                case false?:
                    _ = try? System.unlink(createdKeyfile)
                    throw KeysmithError(error.code, error.message + " (the new keyfile \(OneLine.escaped(createdKeyfile)) made for it was removed)")
                case true?:
                    throw KeysmithError(error.code, error.message + " (yet the database's master key is now the new keyfile "
                                        + "\(OneLine.escaped(createdKeyfile)): keep it)")
                case nil:
                    throw KeysmithError(error.code, error.message + " (the new keyfile \(OneLine.escaped(createdKeyfile)) was kept: "
                                        + "whether the database took it is unknown; try it with `keysmith postgres verify`)")
                }
            }
            if json {
                print("{\"rewrapped\":\(count)}")
            } else {
                print("The master key of \(settings.description) is replaced: \(count) data key\(count == 1 ? "" : "s") re-wrapped.")
            }
        }
    }

    /// Starts sealing new rows of a namespace with a new data key.
    struct RotateDataKey: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "rotate-data-key",
            abstract: "Add a data key to the namespace and seal new rows with it (then run `keysmith postgres rekey`)."
        )

        @OptionGroup var store: StoreOptions

        @Flag(help: "Print one JSON document: {namespace, key_id}.")
        var json = false

        func run() throws {
            let opened = try store.openPostgresStore()
            let id = try opened.rotateDataKey()
            if json {
                print("{\"namespace\":\(jsonString(opened.namespace)),\"key_id\":\(id)}")
            } else {
                print("Namespace \(opened.namespace) now seals new rows with data key \(id); run `keysmith postgres rekey` to re-encrypt the rest.")
            }
        }
    }

    /// Checks a namespace's change feed and rows against what the database could have done to them.
    struct Verify: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "verify",
            abstract: "Check the namespace's change feed (its keyed chain) and that no row was put back; exit 6 when something was deleted, edited or put back."
        )

        @OptionGroup var store: StoreOptions

        @Flag(help: "Print one JSON document: {namespace, intact, changes, unlinked, problems} (the exit code still answers).")
        var json = false

        @Flag(name: .customLong("accept-rollback"), help: "Accept the feed as it is after a deliberate restore of the database (resets this machine's mark).")
        var acceptRollback = false

        func run() throws {
            let opened = try store.openPostgresStore()
            let result = try opened.verifyChangeFeed(anchor: .standard, acceptRollback: acceptRollback)
            if json {
                print("{\"namespace\":\(jsonString(opened.namespace)),\"intact\":\(result.isIntact),\"changes\":\(result.changes),"
                      + "\"unlinked\":\(result.unlinked),\"problems\":[\(result.problems.map(jsonString).joined(separator: ","))]}")
            } else if result.isIntact {
                print("The change feed of namespace \(opened.namespace) is intact: \(result.changes) change\(result.changes == 1 ? "" : "s")"
                      + (result.unlinked > 0 ? " (\(result.unlinked) from before chaining)" : "") + ".")
            } else {
                for problem in result.problems { print(problem) }
            }
            if !result.isIntact {
                throw CommandFailure(message: "the change feed of namespace \(opened.namespace) has \(result.problems.count) problem(s)", exitCode: ExitCode(6))
            }
        }
    }

    /// Re-encrypts a namespace's rows sealed with older data keys.
    struct Rekey: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "rekey", 
            abstract: "Re-encrypt the namespace's rows sealed with older data keys under the current one, a chunk per transaction.",
            discussion: "Versions do not change; safe to run while applications write, and to stop and run again."
        )

        @OptionGroup var store: StoreOptions

        @Option(name: .customLong("chunk-size"), help: "Rows per transaction (1 to 10000).")
        var chunkSize: Int = 1000

        @Flag(help: "Print one JSON document: {namespace, key_id, rekeyed, damaged, audit_entries_on_older_keys}.")
        var json = false

        func validate() throws {
            guard (1...10_000).contains(chunkSize) else { throw ValidationError("--chunk-size is 1 to 10000") }
        }

        func run() throws {
            let opened = try store.openPostgresStore()
            let report = try opened.rekey(chunkSize: chunkSize)
            if json {
                print("{\"namespace\":\(jsonString(opened.namespace)),\"key_id\":\(report.currentKeyID),\"rekeyed\":\(report.rekeyed),"
                      + "\"damaged\":\(report.damaged),\"audit_entries_on_older_keys\":\(report.auditEntriesOnOlderKeys)}")
            } else {
                print("Re-encrypted \(report.rekeyed) row\(report.rekeyed == 1 ? "" : "s") of namespace \(opened.namespace) under data key \(report.currentKeyID)"
                      + (report.damaged > 0 ? "; \(report.damaged) that do not open were left alone" : "")
                      + (report.auditEntriesOnOlderKeys > 0 ? "; \(report.auditEntriesOnOlderKeys) audit entries keep older keys (append-only)" : "") + ".")
            }
        }
    }
}

extension KeysmithCommand {
    /// Streams changes of the PostgreSQL store as JSON lines.
    struct Watch: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "watch", 
            abstract: "Stream the PostgreSQL store's changes as JSON lines, as they are committed (never a secret).",
            discussion: """
                One line per change: {"seq","kind","service","account","record_type","version","deleted"}, and \
                for a token "scopes":[{"scope","state"}] and "active". The watcher registers under --name and \
                acknowledges every change it printed, so `keysmith revoke --wait` waits for it. It survives a \
                lost connection by replaying from the last change it printed. Only the postgres backend has a \
                change feed; the file vault and the Secret Service are refused.
                """
        )

        @OptionGroup var store: StoreOptions

        @Option(help: "The name it registers and acknowledges under (default: keysmith-watch-HOST-PID).")
        var name: String?

        @Option(help: "Start after this sequence number (default: only changes from now on).")
        var after: Int64?

        @Option(help: "Stop after this many changes, at least 1 (default: never).")
        var count: Int?

        func validate() throws {
            if let count, count < 1 { throw ValidationError("--count must be at least 1") }
            if let after, after < 0 { throw ValidationError("--after must be a sequence number, 0 or more") }
            if let name, name.isEmpty || name.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) || name.utf8.count > 200 {
                throw ValidationError("--name must be 1 to 200 bytes without control characters")
            }
        }

        func run() throws {
            // Only PostgreSQL has a change feed: a backend given otherwise is refused, not ignored
            // (none given: the database URL is the store).
            if let choice = try store.givenChoice(), choice != .postgres, choice != .auto {
                throw KeysmithError.invalidArgument("watch needs the postgres backend: only it has a change feed (the backend chosen is \(choice.rawValue))")
            }
            Terminal.unblockTerminationSignals()
            let settings = try PostgresConnectionSettings(url: try store.databaseURL())
            let label = name ?? "keysmith-watch-\(ProcessInfo.processInfo.hostName)-\(ProcessInfo.processInfo.processIdentifier)"
            let watcher = try PostgresWatcher(settings, namespace: try store.postgresNamespace(), masterKey: try store.postgresMasterKey(),
                                              name: label, after: after)
            // SIGTERM and SIGINT end the watch cleanly: it deregisters (so `revoke --wait` stops
            // waiting for it) and exits 0.
            let signals = [SIGTERM, SIGINT].map { number -> any DispatchSourceSignal in
                signal(number, SIG_IGN)
                let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
                source.setEventHandler { watcher.stop() }
                source.resume()
                return source
            }
            defer { signals.forEach { $0.cancel() } }
            // Whether it is current, said on standard error when that changes, with the bound
            // that makes WatchedPermissions deny (the watcher's staleAfter).
            let currency = CurrencyReporter(watcher: watcher, label: label)
            currency.start()
            defer { currency.stop() }
            var printed = 0
            let now = Date()
            try watcher.run { change in
                // Written (and flushed) before it is acknowledged.
                Terminal.write(Array((changeLine(change, at: now) + "\n").utf8), to: .standardOutput)
                printed += 1
                return count.map { printed < $0 } ?? true
            }
        }
    }
}

/// One change as a JSON line: names, never a secret (for a token, its scopes' states).
func changeLine(_ change: PostgresChange, at date: Date) -> String {
    var fields: [String] = ["\"seq\":\(change.sequence)"]
    switch change.key {
    case .genericPassword(let service, let account):
        fields += ["\"kind\":\"generic-password\"", "\"service\":\(jsonString(service))", "\"account\":\(jsonString(account))"]
    case .internetPassword(let internet):
        fields += ["\"kind\":\"internet-password\"", "\"server\":\(jsonString(internet.server))", "\"account\":\(jsonString(internet.account))"]
    case .keysmithRecord(let record):
        fields += ["\"kind\":\"keysmith-record\"", "\"record_type\":\(jsonString(record.recordType.rawValue))",
                   "\"service\":\(jsonString(record.service))", "\"account\":\(jsonString(record.account))"]
    }
    fields += ["\"version\":\(change.version)", "\"deleted\":\(change.deleted)"]
    if case .keysmithRecord(let record) = change.key, record.recordType == .oauthToken, !change.deleted,
       let secret = change.record?.secret, let token = try? OAuthToken(storedSecret: secret) {
        let scopes = token.statuses(at: date).sorted { $0.key < $1.key }.map {
            "{\"scope\":\(jsonString($0.key.rawValue)),\"state\":\"\($0.value.state.rawValue)\"}"
        }
        fields += ["\"active\":\(token.isActive(at: date))", "\"scopes\":[" + scopes.joined(separator: ",") + "]"]
    }
    return "{" + fields.joined(separator: ",") + "}"
}

/// Says on standard error when a watcher stops being current (no confirmation from the database
/// within its `staleAfter`: checks through a watcher deny then) and when it is current again.
final class CurrencyReporter: Sendable {
    private let watcher: PostgresWatcher
    private let label: String
    private let stopped = Mutex(false)

    init(watcher: PostgresWatcher, label: String) {
        self.watcher = watcher
        self.label = label
    }

    /// Looks four times per bound, on a thread of its own (the watch holds the main one).
    func start() {
        let bound = watcher.staleAfter
        let seconds = bound.inSeconds
        let thread = Thread { [self] in
            var last: Bool?
            Thread.sleep(forTimeInterval: max(0.25, seconds))
            while !stopped.withLock({ $0 }) {
                if watcher.failure == nil {  // a failed run ends with its own error
                    let current = watcher.isCurrent
                    if last != current && (last != nil || !current) {
                        let line = current
                            ? "keysmith: watch \(label): current again (through change \(watcher.lastSequence))\n"
                            : "keysmith: watch \(label): not current: no confirmation from the database for \(seconds) s; "
                                + "checks through a watcher deny until it is current again\n"
                        Terminal.write(Array(line.utf8), to: .standardError)
                    }
                    last = current
                }
                Thread.sleep(forTimeInterval: max(0.05, seconds / 4))
            }
        }
        thread.start()
    }

    func stop() { stopped.withLock { $0 = true } }
}
