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
            subcommands: [SetSecret.self, GetSecret.self, DeleteSecret.self, ListSecrets.self]
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
            if Terminal.isTerminal(0) {
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

        func run() throws {
            let vault = try store.openStore()
            guard let record = try vault.read(item.key) else {
                throw CommandFailure.notFound("\(item.key) does not exist")
            }
            var bytes = Array(record.secret)
            if !noNewline { bytes.append(UInt8(ascii: "\n")) }
            defer { cleanse(&bytes) }
            Terminal.write(bytes, to: 1)
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
                struct Listing: Encodable { var items: [ItemJSON] }
                print(try jsonLine(Listing(items: items.map(ItemJSON.init))))
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

/// An item's identity and metadata as JSON: what `secret list --json` prints and what a
/// `batch` line names (docs/cli.md). One shape for both, so scripts can feed one into the other.
struct ItemJSON: Codable {
    var kind: String?
    var service: String?
    var account: String?
    var server: String?
    var port: Int?
    var `protocol`: String?
    var authType: String?
    var securityDomain: String?
    var path: String?
    /// Set for Keysmith's own records (`secret list --all`): their record type.
    var recordType: String?
    var label: String?
    var comment: String?
    var description: String?
    var type: String?
    var created: String?
    var modified: String?
    var creator: String?
    var isInvisible: Bool?
    var isNegative: Bool?
    /// The item's generic data, in base64 (it is any bytes).
    var genericBase64: String?

    /// Every field, by its JSON name (what a `batch` line may hold beside `op` and the secret).
    enum CodingKeys: String, CodingKey, CaseIterable {
        case kind, service, account, server, port, `protocol`, authType, securityDomain, path, recordType, label, comment,
             description, type, created, modified, creator, isInvisible, isNegative, genericBase64
    }

    init(_ info: ItemInfo) {
        let attributes = info.attributes
        kind = attributes.key.kind.rawValue
        account = attributes.key.account
        switch attributes.key {
        case .genericPassword(let service, _):
            self.service = service
        case .internetPassword(let key):
            server = key.server
            port = key.port
            `protocol` = key.internetProtocol.rawValue
            authType = key.authenticationType.rawValue
            securityDomain = key.securityDomain
            path = key.path
        case .keysmithRecord(let key):
            service = key.service
            recordType = key.recordType.rawValue
        }
        label = attributes.label
        comment = attributes.comment
        description = attributes.itemDescription
        type = attributes.type
        creator = attributes.creator
        isInvisible = attributes.isInvisible
        isNegative = attributes.isNegative
        genericBase64 = attributes.generic?.base64EncodedString()
        created = iso8601(info.created)
        modified = iso8601(info.modified)
    }

    /// The identity these fields name.
    ///
    /// - Throws: ``KeysmithError/Code/invalidArgument`` saying which field is missing or unknown.
    func key() throws -> ItemKey {
        if recordType != nil || kind == ItemKind.keysmithRecord.rawValue {
            throw KeysmithError.invalidArgument(
                "Keysmith's own records (tokens, the audit log) cannot be written as secrets; use `keysmith token …`")
        }
        guard let account else { throw KeysmithError.invalidArgument("\"account\" is missing") }
        if let service { return .genericPassword(service: service, account: account) }
        guard let server else { throw KeysmithError.invalidArgument("give \"service\" or \"server\"") }
        guard let name = `protocol`, let internetProtocol = InternetProtocol(rawValue: name) else {
            throw KeysmithError.invalidArgument("an internet password needs a known \"protocol\"")
        }
        guard let authentication = InternetAuthenticationType(rawValue: authType ?? "default") else {
            throw KeysmithError.invalidArgument("unknown \"authType\"")
        }
        return .internetPassword(InternetPasswordKey(
            server: server, port: port ?? 0, internetProtocol: internetProtocol, authenticationType: authentication,
            securityDomain: securityDomain ?? "", path: path ?? "", account: account))
    }
}

package func jsonLine<T: Encodable>(_ value: T) throws -> String {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    return String(decoding: try encoder.encode(value), as: UTF8.self)
}

