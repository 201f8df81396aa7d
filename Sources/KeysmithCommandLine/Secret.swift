import FoundationEssentials
import ArgumentParser
import Keysmith
import KeysmithCrypto
import KeysmithSystem
import KeysmithVault

extension KeysmithCommand {
    /// Stores, reads, deletes and lists secrets.
    struct Secret: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "secret", 
            abstract: "Store, read, delete and list secrets.",
            subcommands: [SetSecret.self, GetSecret.self, GenerateSecret.self, DeleteSecret.self, ListSecrets.self]
        )
    }
}

extension KeysmithCommand.Secret {
    /// Stores a secret read from stdin or a prompt, never from argv.
    struct SetSecret: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set",
            abstract: "Store a secret read from standard input (or typed at a prompt), creating or replacing the item.",
            discussion: """
                One trailing newline is removed from standard input unless --keep-newline is given. An empty \
                secret is refused unless --allow-empty is given, so that a failed pipeline (`false | keysmith \
                secret set …`) never replaces a real secret. Replacing keeps the label and comment unless \
                given again (an empty --label "" clears it). Writing an item whose record is damaged \
                replaces it: that is how a damaged item is repaired.
                """
        )

        @OptionGroup var store: StoreOptions
        @OptionGroup var item: ItemOptions

        @Option(help: "A label a person can read.")
        var label: String?

        @Option(help: "A comment.")
        var comment: String?

        @Flag(help: "Fail if the item exists instead of replacing it.")
        var new = false

        @Flag(name: .customLong("keep-newline"), help: "Keep a trailing newline read from standard input.")
        var keepNewline = false

        @Flag(name: .customLong("allow-empty"), help: "Store an empty secret (refused otherwise).")
        var allowEmpty = false

        func validate() throws { try store.requireStandardInputFree(for: "the secret") }

        func run() throws {
            var secret = try readSecret()
            defer { cleanse(&secret) }
            guard !secret.isEmpty || allowEmpty else {
                throw KeysmithError.invalidArgument(
                    "the secret is empty (standard input was empty); nothing was stored. Give --allow-empty to store an empty secret")
            }
            let vault = try store.openStore()
            // The store keeps the metadata not given again (the update rule).
            let attributes = ItemAttributes(key: item.key, label: label, comment: comment)
            let operation: StoreOperation = new ? .create(attributes, secret: Data(secret)) : .upsert(attributes, secret: Data(secret))
            try vault.perform([operation])
        }

        func readSecret() throws -> [UInt8] {
            if Terminal.isTerminal(.standardInput) {
                guard var first = try Terminal.readHidden(prompt: "Secret: ") else { return [] }
                var second = try Terminal.readHidden(prompt: "Repeat the secret: ") ?? []
                defer { cleanse(&second) }
                guard first == second else {
                    cleanse(&first)
                    throw KeysmithError.invalidArgument("the two entries differ; nothing was stored")
                }
                return first
            }
            var bytes = try InputLimit.read(limit: InputLimit.secret, what: "standard input (the secret)")
            if !keepNewline, bytes.last == UInt8(ascii: "\n") {
                bytes.removeLast()
                if bytes.last == UInt8(ascii: "\r") { bytes.removeLast() }
            }
            return bytes
        }
    }

    /// Prints a secret alone, for `$(…)`.
    struct GetSecret: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "get",
            abstract: "Print a secret alone on standard output, for $(…).",
            discussion: "Exit code 2 when there is no such item."
        )

        @OptionGroup var store: StoreOptions
        @OptionGroup var item: ItemOptions

        @Flag(name: .customLong("no-newline"), help: "Do not print a newline after the secret.")
        var noNewline = false

        @Flag(name: .customLong("no-agent"), help: "Open the vault here even when a `keysmith serve` serves it.")
        var noAgent = false

        func run() throws {
            var bytes: [UInt8]
            if !noAgent, let secret = try fromAgent() {
                bytes = secret
            } else {
                let vault = try store.openStore()
                guard let record = try vault.read(item.key) else {
                    throw CommandFailure.notFound("\(item.key) does not exist")
                }
                bytes = Array(record.secret)
            }
            if !noNewline { bytes.append(UInt8(ascii: "\n")) }
            defer { cleanse(&bytes) }
            Terminal.write(bytes, to: .standardOutput)
        }

        /// The secret from the `keysmith serve` that serves this vault, if one does: `nil` when
        /// none does (or the store is not the vault). A serve that is locked is an error, never
        /// a reason to unlock the vault here behind its back.
        func fromAgent() throws -> [UInt8]? {
            try Self.agentSecret(store: store, key: item.key)
        }

        /// The secret of `key` from the `keysmith serve` of the vault `store` names, if one
        /// serves it (``fromAgent()``).
        static func agentSecret(store: StoreOptions, key: ItemKey) throws -> [UInt8]? {
            guard try store.choice() == .vault else { return nil }
            let request = Agent.Request(op: "get", item: ItemDocument(ItemInfo(attributes: ItemAttributes(key: key),
                                                                             created: Date(timeIntervalSince1970: 0), modified: Date(timeIntervalSince1970: 0))))
            guard let answer = try Agent.ask(vault: store.vaultPath, request) else { return nil }
            guard answer.ok else {
                let error = Agent.error(answer)
                if error.code == .itemNotFound { throw CommandFailure.notFound(error.message) }
                throw error
            }
            guard let encoded = answer.secretBase64, let decoded = Data(base64Encoded: encoded) else {
                throw KeysmithError(.storeUnavailable, "the keysmith serve for \(store.vaultPath) answered without the secret")
            }
            return Array(decoded)
        }
    }

    /// Deletes an item.
    struct DeleteSecret: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "delete",
            abstract: "Delete an item.",
            discussion: "Exit code 2 when there is no such item."
        )

        @OptionGroup var store: StoreOptions
        @OptionGroup var item: ItemOptions

        func run() throws {
            try store.openStore().delete(item.key)
        }
    }

    /// Lists items without their secrets.
    struct ListSecrets: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "list", abstract: "List items and their attributes; never their secrets.")

        @OptionGroup var store: StoreOptions

        @Option(help: "Only this service.")
        var service: String?

        @Option(help: "Only this account.")
        var account: String?

        @Option(help: "Only internet passwords on this server.")
        var server: String?

        @Flag(help: "Print one JSON document: {\"items\": [...]}, each item named as batch lines name it.")
        var json = false

        @Flag(help: "Also list Keysmith's own records (tokens, the audit log), marked as such; never their contents.")
        var all = false

        func run() throws {
            let vault = try store.openStore()
            let query = ItemQuery(service: service, account: account, server: server, namespace: all ? .any : .user)
            let items = try vault.search(query).sorted { $0.key.description < $1.key.description }
            if json {
                struct Listing: Encodable { var items: [ItemDocument] }
                print(try jsonLine(Listing(items: items.map(ItemDocument.init))))
                return
            }
            if items.isEmpty {
                print("No items.")
                return
            }
            for info in items {
                var line = info.key.namespace == .keysmith ? "[keysmith] " + info.key.description : info.key.description
                if let label = info.attributes.label { line += "  label \"\(OneLine.unicodeEscaped(label))\"" }
                line += "  modified \(iso8601(info.modified))"
                print(line)
            }
        }
    }
}

package func jsonLine<T: Encodable>(_ value: T) throws -> String {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    return String(decoding: try encoder.encode(value), as: UTF8.self)
}

