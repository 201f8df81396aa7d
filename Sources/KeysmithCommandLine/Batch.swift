import ArgumentParser
import Keysmith
import KeysmithCrypto
import KeysmithSystem
import KeysmithVault

extension KeysmithCommand {
    /// Applies many operations after one unlock, all or nothing.
    struct Batch: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "batch", 
            abstract: "Apply operations read as JSON lines on standard input, after one unlock, as one all-or-nothing commit.",
            discussion: """
                Each line is an object with "op" ("set", "create", "delete") and the item's fields: \
                "service" and "account" for a generic password, or "server", "protocol", "account" and \
                optionally "port", "authType", "securityDomain", "path" for an internet password; \
                "secret" (a UTF-8 string) or "secretBase64" for set and create; optional "label" and \
                "comment". The other fields of `secret list --json` are accepted and ignored, so a \
                listing can be edited into a batch; any other field is an error. An empty secret is \
                refused unless --allow-empty. Nothing is applied if any line is invalid or any \
                operation fails.
                """
        )

        @OptionGroup var store: StoreOptions

        @Flag(name: .customLong("dry-run"), help: "Check every line and report what would change, without changing anything.")
        var dryRun = false

        @Flag(help: "Print one JSON document: {operations, applied, dry_run}.")
        var json = false

        @Flag(name: .customLong("allow-empty"), help: "Store empty secrets (refused otherwise, as by `secret set`).")
        var allowEmpty = false

        /// `--json`: one document.
        struct Report: Encodable {
            var operations: Int
            var applied: Bool
            var dryRun: Bool
            enum CodingKeys: String, CodingKey {
                case operations, applied
                case dryRun = "dry_run"
            }
        }

        func validate() throws { try store.requireStandardInputFree(for: "the batch") }

        func run() throws {
            var input = try InputLimit.read(limit: InputLimit.batch, what: "standard input (the batch)")
            defer { cleanse(&input) }
            let operations = try StoreOperation.batch(jsonLines: input, allowEmpty: allowEmpty)
            let vault = try store.openStore()
            if dryRun {
                // Check the whole batch against the vault without committing it.
                let memory = MemoryStore()
                let touched = operations.map(\.key)
                try memory.perform(try touched.compactMap { try vault.read($0) }.map { .restore($0) })
                try memory.perform(operations)
                if json { return print(try jsonLine(Report(operations: operations.count, applied: false, dryRun: true))) }
                print("Would apply \(operations.count) operation(s); nothing was changed.")
                return
            }
            try vault.perform(operations)
            if json { return print(try jsonLine(Report(operations: operations.count, applied: true, dryRun: false))) }
            print("Applied \(operations.count) operation(s).")
        }
    }
}
