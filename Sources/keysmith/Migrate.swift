import ArgumentParser
import Keysmith
import KeysmithSecretService
import KeysmithStores
import KeysmithVault

extension KeysmithCommand {
    /// Says which store the options and environment select.
    struct Backend: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Say which store --backend, $KEYSMITH_BACKEND or the config file selects, and why.")

        @OptionGroup var store: StoreOptions

        func run() throws {
            let opened = try store.openChosen()
            print("\(opened.backend.rawValue): \(opened.store.storeDescription) (\(opened.reason))")
        }
    }

    /// Moves items between the vault and the Secret Service.
    struct Migrate: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Copy every item from one store to the other, verify the copies, and optionally remove the originals.",
            discussion: """
                Safe to run again after an interruption: items already copied identically count as done. \
                Originals are removed (--remove-source) only after every copy was read back identical.
                """
        )

        @OptionGroup var store: StoreOptions

        @Option(help: "The source: vault or secret-service.")
        var from: String

        @Option(help: "The destination: vault or secret-service.")
        var to: String

        @Option(help: "When the destination holds a different item of the same identity: fail, skip or overwrite.")
        var conflicts: String = "fail"

        @Flag(name: .customLong("remove-source"), help: "Remove migrated items from the source after verifying their copies.")
        var removeSource = false

        @Flag(name: .customLong("dry-run"), help: "Report what would happen without writing anything.")
        var dryRun = false

        func validate() throws {
            for (value, name) in [(from, "--from"), (to, "--to")] where !["vault", "secret-service"].contains(value) {
                throw ValidationError("\(name) is vault or secret-service, not '\(value)'")
            }
            if from == to { throw ValidationError("--from and --to name the same store") }
            if MigrationConflictPolicy(rawValue: conflicts) == nil { throw ValidationError("--conflicts is fail, skip or overwrite") }
        }

        func open(_ name: String) throws -> any SecureStore {
            name == "vault"
                ? try store.openVault()
                : try SecretServiceStore(collection: store.collection, timeout: .milliseconds(Int(store.timeout * 1000)))
        }

        func run() throws {
            let report = try StoreMigration.migrate(
                from: try open(from), to: try open(to), conflicts: MigrationConflictPolicy(rawValue: conflicts) ?? .fail,
                removeFromSource: removeSource, dryRun: dryRun)
            let verb = dryRun ? "would copy" : "copied"
            print("\(verb) \(report.copied.count), already present \(report.alreadyPresent.count), overwritten \(report.overwritten.count), "
                  + "skipped \(report.skipped.count), removed from the source \(report.removedFromSource.count)")
        }
    }
}
