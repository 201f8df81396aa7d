import ArgumentParser
import Keysmith
import KeysmithPostgres

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

        @Flag(help: "Print one JSON document: {database, namespace}.")
        var json = false

        func validate() throws {
            if !(14...20).contains(scryptLogN) { throw ValidationError("--scrypt-log-n is 14 to 20") }
        }

        func run() throws {
            let settings = try PostgresConnectionSettings(url: try store.databaseURL())
            let masterKey = try store.postgresMasterKey()
            try PostgresStore.initialize(settings, masterKey: masterKey, scrypt: ScryptCost(logN: scryptLogN))
            let opened = try PostgresStore(settings, namespace: try store.postgresNamespace(), masterKey: masterKey)
            if json {
                print("{\"database\":\(jsonString(settings.description)),\"namespace\":\(jsonString(opened.namespace))}")
            } else {
                print("ready: \(opened.storeDescription)")
            }
        }
    }
}
