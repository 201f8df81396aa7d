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

        /// A line: the operation and its secret, beside the item's fields (``ItemJSON``).
        struct Line: Decodable {
            var op: String
            var secret: String?
            var secretBase64: String?
            var item: ItemJSON

            /// Fields the line has that no line may have (a typo such as `labl` would otherwise
            /// be dropped without a word).
            var unknownFields: [String]

            private enum CodingKeys: String, CodingKey { case op, secret, secretBase64 }
            private struct AnyKey: CodingKey {
                var stringValue: String
                init(stringValue: String) { self.stringValue = stringValue }
                var intValue: Int? { nil }
                init?(intValue: Int) { nil }
            }
            /// What a line may hold: the operation, the secret, and the fields of
            /// `secret list --json` (``ItemJSON``: the item's, and those a listing adds, which
            /// are ignored).
            static let fields = Set(["op", "secret", "secretBase64"] + ItemJSON.CodingKeys.allCases.map(\.rawValue))

            init(from decoder: any Decoder) throws {
                unknownFields = try decoder.container(keyedBy: AnyKey.self).allKeys.map(\.stringValue).filter { !Self.fields.contains($0) }.sorted()
                let container = try decoder.container(keyedBy: CodingKeys.self)
                op = try container.decode(String.self, forKey: .op)
                secret = try container.decodeIfPresent(String.self, forKey: .secret)
                secretBase64 = try container.decodeIfPresent(String.self, forKey: .secretBase64)
                item = try ItemJSON(from: decoder)
            }
        }

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
            var operations: [StoreOperation] = []
            for (index, raw) in input.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).enumerated() {
                if raw.allSatisfy({ $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\r") }) { continue }
                operations.append(try parse(Array(raw), line: index + 1))
            }
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

        func parse(_ bytes: [UInt8], line: Int) throws -> StoreOperation {
            let decoded: Line
            do {
                decoded = try JSONDecoder().decode(Line.self, from: Data(bytes))
            } catch {
                throw KeysmithError.invalidArgument("line \(line): not a JSON object of the documented shape; nothing was applied")
            }
            let key: ItemKey
            do {
                key = try decoded.item.key()
            } catch let error as KeysmithError {
                throw KeysmithError.invalidArgument("line \(line): \(error.message)")
            }
            if let field = decoded.unknownFields.first {
                throw KeysmithError.invalidArgument("line \(line): unknown field \"\(OneLine.unicodeEscaped(String(field.prefix(64))))\"; nothing was applied (see `keysmith batch --help`)")
            }
            if decoded.secret != nil && decoded.secretBase64 != nil {
                throw KeysmithError.invalidArgument("line \(line): give \"secret\" or \"secretBase64\", not both; nothing was applied")
            }
            if decoded.op == "delete" && (decoded.secret != nil || decoded.secretBase64 != nil) {
                throw KeysmithError.invalidArgument("line \(line): \"delete\" takes no secret; nothing was applied")
            }
            if decoded.item.service != nil, decoded.item.server != nil || decoded.item.port != nil || decoded.item.protocol != nil
                || decoded.item.authType != nil || decoded.item.securityDomain != nil || decoded.item.path != nil {
                throw KeysmithError.invalidArgument("line \(line): a generic password (\"service\") has no server, port, protocol, authType, "
                                                    + "securityDomain or path; nothing was applied")
            }
            let attributes = ItemAttributes(key: key, label: decoded.item.label, comment: decoded.item.comment)
            func secret() throws -> Data {
                let data: Data
                if let text = decoded.secret {
                    data = Data(text.utf8)
                } else if let encoded = decoded.secretBase64 {
                    guard let decodedData = Data(base64Encoded: encoded) else {
                        throw KeysmithError.invalidArgument("line \(line): \"secretBase64\" is not base64")
                    }
                    data = decodedData
                } else {
                    throw KeysmithError.invalidArgument("line \(line): \"\(decoded.op)\" needs \"secret\" or \"secretBase64\"")
                }
                guard !data.isEmpty || allowEmpty else {
                    throw KeysmithError.invalidArgument("line \(line): the secret is empty; nothing was applied (--allow-empty stores empty secrets)")
                }
                return data
            }
            let operation: StoreOperation
            switch decoded.op {
            case "set": operation = .upsert(attributes, secret: try secret())
            case "create": operation = .create(attributes, secret: try secret())
            case "delete": operation = .delete(key)
            default: throw KeysmithError.invalidArgument("line \(line): unknown op \"\(decoded.op)\"; one of set, create, delete")
            }
            // The names and sizes every store refuses, found here so the error names the line.
            do {
                try key.validate()
                switch operation {
                case .upsert(let attributes, let secret), .create(let attributes, let secret):
                    try StoreLimits.standard.check(attributes, secretSize: secret.count, in: "the batch")
                default:
                    break
                }
            } catch let error as KeysmithError {
                throw KeysmithError(error.code, "line \(line): \(error.message)")
            }
            return operation
        }
    }
}
