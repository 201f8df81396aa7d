import ArgumentParser
import Keysmith
import KeysmithSecretService
import KeysmithStores
import KeysmithVault

extension KeysmithCommand {
    /// Says which store the options and environment select.
    struct Backend: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "backend", 
            abstract: "Say which store --backend, $KEYSMITH_BACKEND or the config file selects, and why.")

        @OptionGroup var store: StoreOptions

        @Flag(help: "Print one JSON document: {backend, store, reason}.")
        var json = false

        func run() throws {
            let opened = try store.openChosen()
            if json {
                struct Answer: Encodable { var backend: String; var store: String; var reason: String }
                print(try jsonLine(Answer(backend: opened.backend.rawValue, store: opened.store.storeDescription, reason: opened.reason)))
                return
            }
            print("\(opened.backend.rawValue): \(opened.store.storeDescription) (\(opened.reason))")
        }
    }

    /// Moves items between the vault, the Secret Service and PostgreSQL.
    struct Migrate: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "migrate", 
            abstract: "Copy every item from one store to the other, verify the copies, and optionally remove the originals.",
            discussion: """
                Safe to run again after an interruption: items already copied identically count as done. \
                Originals are removed (--remove-source) only after every copy was read back identical.
                """
        )

        @OptionGroup var store: StoreOptions

        @Option(help: "The source: vault, secret-service or postgres.")
        var from: String

        @Option(help: "The destination: vault, secret-service or postgres.")
        var to: String

        @Option(help: "When the destination holds a different item of the same identity: fail, skip or overwrite.")
        var conflicts: String = "fail"

        @Flag(name: .customLong("remove-source"), help: "Remove migrated items from the source after verifying their copies.")
        var removeSource = false

        @Flag(name: .customLong("dry-run"), help: "Report what would happen without writing anything.")
        var dryRun = false

        @Flag(help: "Print one JSON document: the items copied, already present, overwritten, skipped and removed.")
        var json = false

        func validate() throws {
            for (value, name) in [(from, "--from"), (to, "--to")] where !["vault", "secret-service", "postgres"].contains(value) {
                throw ValidationError("\(name) is vault, secret-service or postgres, not '\(value)'")
            }
            if from == to { throw ValidationError("--from and --to name the same store") }
            if MigrationConflictPolicy(rawValue: conflicts) == nil { throw ValidationError("--conflicts is fail, skip or overwrite") }
        }

        func open(_ name: String) throws -> any SecureStore {
            switch name {
            case "vault": try store.openVault()
            case "postgres": try store.openPostgres()
            default: try SecretServiceStore(collection: store.collection, timeout: .milliseconds(Int(store.timeout * 1000)))
            }
        }

        func run() throws {
            let report = try StoreMigration.migrate(
                from: try open(from), to: try open(to), conflicts: MigrationConflictPolicy(rawValue: conflicts) ?? .fail,
                removeFromSource: removeSource, dryRun: dryRun)
            if json {
                struct Report: Encodable {
                    var dryRun: Bool
                    var copied, alreadyPresent, overwritten, skipped, removedFromSource: [String]
                    enum CodingKeys: String, CodingKey {
                        case copied, overwritten, skipped
                        case dryRun = "dry_run"
                        case alreadyPresent = "already_present"
                        case removedFromSource = "removed_from_source"
                    }
                }
                func names(_ keys: [ItemKey]) -> [String] { keys.map(\.description) }
                print(try jsonLine(Report(dryRun: dryRun, copied: names(report.copied), alreadyPresent: names(report.alreadyPresent),
                                          overwritten: names(report.overwritten), skipped: names(report.skipped),
                                          removedFromSource: names(report.removedFromSource))))
                return
            }
            let verb = dryRun ? "would copy" : "copied"
            print("\(verb) \(report.copied.count), already present \(report.alreadyPresent.count), overwritten \(report.overwritten.count), "
                  + "skipped \(report.skipped.count), removed from the source \(report.removedFromSource.count)")
        }
    }
}
