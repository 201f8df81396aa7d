import ArgumentParser
import Foundation
import Keysmith
import KeysmithPostgres
import KeysmithSystem
import KeysmithTokens

extension KeysmithCommand {
    /// The PostgreSQL store's administration.
    struct PostgresCommand: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "postgres",
            abstract: "Set up the shared store on PostgreSQL (docs/postgres.md).",
            subcommands: [Init.self]
        )
    }
}

extension KeysmithCommand.PostgresCommand {
    /// Creates the schema, the master key's record and the namespace's first data key.
    struct Init: ParsableCommand {
        static let configuration = CommandConfiguration(
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

        @Flag(help: "Print one JSON document: {database, namespace}.")
        var json = false

        func validate() throws {
            if !(14...20).contains(scryptLogN) { throw ValidationError("--scrypt-log-n is 14 to 20") }
        }

        func run() throws {
            let settings = try PostgresConnectionSettings(url: try store.databaseURL())
            let masterKey = try store.postgresMasterKey()
            try PostgresStore.initialize(settings, masterKey: masterKey, scrypt: ScryptCost(logN: scryptLogN), applicationRole: grantTo)
            let opened = try PostgresStore(settings, namespace: try store.postgresNamespace(), masterKey: masterKey)
            if json {
                print("{\"database\":\(jsonString(settings.description)),\"namespace\":\(jsonString(opened.namespace))}")
            } else {
                print("ready: \(opened.storeDescription)")
            }
        }
    }
}

extension KeysmithCommand {
    /// Streams changes of the PostgreSQL store as JSON lines.
    struct Watch: ParsableCommand {
        static let configuration = CommandConfiguration(
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

        @Option(help: "Stop after this many changes (default: never).")
        var count: Int?

        func run() throws {
            Terminal.unblockTerminationSignals()
            let settings = try PostgresConnectionSettings(url: try store.databaseURL())
            let label = name ?? "keysmith-watch-\(ProcessInfo.processInfo.hostName)-\(ProcessInfo.processInfo.processIdentifier)"
            let watcher = try PostgresWatcher(settings, namespace: try store.postgresNamespace(), masterKey: try store.postgresMasterKey(),
                                              name: label, after: after)
            var printed = 0
            let now = Date()
            try watcher.run { change in
                // Written (and flushed) before it is acknowledged.
                Terminal.write(Array((changeLine(change, at: now) + "\n").utf8), to: 1)
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
