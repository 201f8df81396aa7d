import FoundationEssentials

extension StoreOperation {
    /// The operations written as JSON lines, as `keysmith batch` reads them (docs/cli.md): each
    /// line an object with `"op"` (`set`, `create` or `delete`), the item's fields (those of an
    /// ``ItemDocument``: `"service"` and `"account"` for a generic password; `"server"`,
    /// `"protocol"`, `"account"` and optionally `"port"`, `"authType"`, `"securityDomain"`,
    /// `"path"` for an internet password; optional `"label"` and `"comment"`), and for `set` and
    /// `create` the secret, as `"secret"` (UTF-8 text) or `"secretBase64"`. The other fields of
    /// an ``ItemDocument`` are accepted and ignored, so a listing can be edited into a batch;
    /// any other field is refused. Blank lines are skipped. Every line is checked, names and
    /// sizes against ``StoreLimits/standard`` included, before anything is returned: perform
    /// the result with ``SecureStore/perform(_:)`` and it is applied whole or not at all.
    ///
    /// ```swift
    /// let lines = #"{"op":"set","service":"api","account":"ci","secret":"s3cret"}"#
    /// try store.perform(try StoreOperation.batch(jsonLines: Array(lines.utf8)))
    /// ```
    ///
    /// - Parameter allowEmpty: Whether an empty secret is taken (refused otherwise).
    /// - Throws: `KeysmithError.Code.invalidArgument` naming the first bad line and what is
    ///   wrong with it (never repeating a secret); the code of a name or size the stores refuse,
    ///   naming the line.
    public static func batch(jsonLines input: [UInt8], allowEmpty: Bool = false) throws -> [StoreOperation] {
        try JSONLines.numbered(input).map { try batchLine($0.bytes, line: $0.number, allowEmpty: allowEmpty) }
    }

    /// A line: the operation and its secret, beside the item's fields (``ItemDocument``).
    private struct Line: Decodable {
        var op: String
        var secret: String?
        var secretBase64: String?
        var item: ItemDocument

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
        /// `secret list --json` (``ItemDocument``: the item's, and those a listing adds, which
        /// are ignored).
        static let fields = Set(["op", "secret", "secretBase64"] + ItemDocument.CodingKeys.allCases.map(\.rawValue))

        init(from decoder: any Decoder) throws {
            unknownFields = try decoder.container(keyedBy: AnyKey.self).allKeys.map(\.stringValue).filter { !Self.fields.contains($0) }.sorted()
            let container = try decoder.container(keyedBy: CodingKeys.self)
            op = try container.decode(String.self, forKey: .op)
            secret = try container.decodeIfPresent(String.self, forKey: .secret)
            secretBase64 = try container.decodeIfPresent(String.self, forKey: .secretBase64)
            item = try ItemDocument(from: decoder)
        }
    }

    private static func batchLine(_ bytes: [UInt8], line: Int, allowEmpty: Bool) throws -> StoreOperation {
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
        default: throw KeysmithError.invalidArgument("line \(line): unknown op \"\(OneLine.unicodeEscaped(String(decoded.op.prefix(64))))\"; one of set, create, delete")
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
