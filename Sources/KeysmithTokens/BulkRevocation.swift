public import FoundationEssentials
public import Keysmith

/// Which tokens a bulk revocation touches: every field set must match.
public struct TokenFilter: Sendable, Hashable {
    /// Only tokens stored under this service.
    public var service: String?
    /// Only tokens issued to this client.
    public var clientID: String?
    /// Only tokens acting for this subject.
    public var subject: String?

    /// Creates a filter; every argument left out matches anything.
    public init(service: String? = nil, clientID: String? = nil, subject: String? = nil) {
        self.service = service
        self.clientID = clientID
        self.subject = subject
    }
}

/// Where a token is kept: its service and account (two fields, never one joined string, so
/// that names holding " at " or any other separator stay unambiguous).
public struct TokenReference: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The service the token is kept under.
    public var service: String
    /// The account the token is kept under.
    public var account: String

    /// Names a token.
    public init(service: String, account: String) {
        self.service = service
        self.account = account
    }

    /// `ACCOUNT at SERVICE`, for people.
    public var description: String { "\(account) at \(service)" }
}

extension TokenFilter {
    /// The filter in words, for messages: `service news, client web` or `the filter (every token)`.
    var summary: String {
        let parts = [service.map { "service \($0)" }, clientID.map { "client \($0)" }, subject.map { "subject \($0)" }].compactMap { $0 }
        return parts.isEmpty ? "(every token)" : parts.joined(separator: ", ")
    }
}

/// One token response to import with ``TokenKeeper/importBatch(_:replacing:)``.
public struct TokenImport: Sendable {
    /// Where to keep it: the service…
    public var service: String
    /// …and the account.
    public var account: String
    /// The RFC 6749 token response (JSON).
    public var response: Data
    /// The scopes that were requested.
    public var requested: Set<Scope>
    /// The client it was issued to.
    public var clientID: String?
    /// The user it acts for.
    public var subject: String?
    /// The issuer.
    public var issuer: String?

    /// Describes one import.
    public init(service: String, account: String, response: Data, requested: Set<Scope> = [], clientID: String? = nil,
                subject: String? = nil, issuer: String? = nil) {
        self.service = service
        self.account = account
        self.response = response
        self.requested = requested
        self.clientID = clientID
        self.subject = subject
        self.issuer = issuer
    }
}

extension TokenImport {
    /// The imports written as JSON lines, one token response per line, as `keysmith token import
    /// --batch` reads them (docs/cli.md): `{"service", "account", "response", "requested",
    /// "client_id", "subject", "issuer"}`, where `response` is the token response's object (or a
    /// string holding it) and `requested` a scope list (a string, or an array of strings).
    /// Blank lines are skipped. The whole input is checked before anything is returned, so a
    /// caller that imports the result imports all of it or, on an error, nothing.
    ///
    /// ```swift
    /// let lines = Data(#"{"service":"news","account":"bob","response":{"access_token":"…","token_type":"Bearer"}}"#.utf8)
    /// let (imported, updated) = try keeper.importBatch(try TokenImport.batch(jsonLines: Array(lines)), replacing: false)
    /// ```
    ///
    /// - Throws: `KeysmithError.Code.invalidArgument` naming the first line that is not such an
    ///   object, or whose `requested` is neither a string nor an array of strings;
    ///   `KeysmithError.Code.invalidScope` naming the line of a requested scope that is invalid.
    public static func batch(jsonLines input: [UInt8]) throws -> [TokenImport] {
        try JSONLines.numbered(input).map { try batchLine($0.bytes, line: $0.number) }
    }

    /// One line of ``batch(jsonLines:)``, numbered `line` in errors.
    private static func batchLine(_ bytes: [UInt8], line: Int) throws -> TokenImport {
        struct Line: Decodable {
            var service: String
            var account: String
            var response: JSONValue
            var requested: JSONValue?
            var clientID: String?
            var subject: String?
            var issuer: String?
            enum CodingKeys: String, CodingKey {
                case service, account, response, requested, subject, issuer
                case clientID = "client_id"
            }
        }
        let parsed: Line
        do {
            parsed = try JSONDecoder().decode(Line.self, from: Data(bytes))
        } catch {
            throw KeysmithError.invalidArgument("line \(line) is not {\"service\", \"account\", \"response\": {…}, …}; nothing was imported")
        }
        // The response may be the object itself or a string holding it.
        let response: Data
        if case .string(let raw) = parsed.response { response = Data(raw.utf8) } else { response = try JSONEncoder().encode(parsed.response) }
        var requested: Set<Scope> = []
        do {
            switch parsed.requested {
            case .string(let list)?: requested = try Scope.parseList(list)
            case .array(let items)?:
                for item in items {
                    guard case .string(let text) = item else {
                        throw KeysmithError.invalidArgument("line \(line): requested is neither a string nor an array of strings")
                    }
                    requested.formUnion(try Scope.parseList(text))
                }
            case nil, .null?: break
            default: throw KeysmithError.invalidArgument("line \(line): requested is neither a string nor an array of strings")
            }
        } catch let error as KeysmithError where error.code == .invalidScope {
            throw KeysmithError(.invalidScope, "line \(line): \(error.message); nothing was imported")
        }
        return TokenImport(service: parsed.service, account: parsed.account, response: response, requested: requested,
                           clientID: parsed.clientID, subject: parsed.subject, issuer: parsed.issuer)
    }
}

/// What a bulk revocation did (or, in a dry run, would do).
public struct BulkRevocationReport: Sendable, Hashable {
    /// Tokens that match the filter.
    public var matched: Int
    /// Tokens whose scope changed from another state to revoked.
    public var changed: Int
    /// The changed tokens.
    public var changedTokens: [TokenReference]
    /// Whether this was a dry run (nothing was written).
    public var dryRun: Bool
}

extension TokenKeeper {
    /// Revokes one scope across every matching token; the same as
    /// ``revoke(scopes:matching:reason:dryRun:progress:)`` with one scope.
    public func revoke(
        scope: Scope, matching filter: TokenFilter, reason: String, dryRun: Bool = false,
        progress: ((Int, Int) -> Void)? = nil
    ) throws -> BulkRevocationReport {
        try revoke(scopes: [scope], matching: filter, reason: reason, dryRun: dryRun, progress: progress)
    }

    /// Revokes scopes across every matching token, as one durable all-or-nothing batch with
    /// one audit entry naming every changed token.
    ///
    /// Only scopes a token holds as **granted** change (also on a token that has expired, so
    /// that a refresh cannot bring them back): a declined or already revoked scope keeps its
    /// state, and a token changes and counts only when at least one of the scopes was granted.
    /// So running it again changes nothing. A scope that no matching token holds in any state
    /// is an error, as it is for ``revoke(_:service:account:reason:)`` (a misspelled scope must
    /// not report success): nothing is revoked then.
    ///
    /// ```swift
    /// let report = try keeper.revoke(scopes: [try Scope("posts:write"), try Scope("posts:delete")],
    ///                                matching: TokenFilter(clientID: "web"), reason: "incident 42")
    /// print("\(report.changed) of \(report.matched) tokens changed")
    /// ```
    ///
    /// - Parameters:
    ///   - scopes: The scopes to revoke (at least one).
    ///   - filter: Which tokens.
    ///   - reason: Why, for the audit log.
    ///   - dryRun: Report without writing.
    ///   - progress: Called with (items examined, about how many to examine) as the job goes
    ///     (`ScanProgress`: a vault counts every record it walks, not only tokens).
    /// - Returns: How many tokens matched and changed.
    /// - Throws: `KeysmithError.Code.invalidArgument` for no scope;
    ///   `KeysmithError.Code.itemNotFound` when no token matches, or a scope is held (in any
    ///   state) by none of the matching tokens; a store failure. Nothing is written then.
    public func revoke(
        scopes: [Scope], matching filter: TokenFilter, reason: String, dryRun: Bool = false,
        progress: ((Int, Int) -> Void)? = nil
    ) throws -> BulkRevocationReport {
        try bulkRevoke(scopes: scopes, matching: filter, reason: reason, dryRun: dryRun, progress: progress, alongside: nil)
    }

    /// Revokes scopes across every matching token as ``revoke(scopes:matching:reason:dryRun:progress:)``
    /// does, and ends each changed token's grant: the token is made inactive (every scope
    /// revoked), and `alongside` is given each changed token as it was read and returns
    /// operations committed in the same batch (the KeysmithProvider module queues each
    /// revocation at the provider this way, all or nothing with the local change).
    public func revokeEndingGrants(
        scopes: [Scope], matching filter: TokenFilter, reason: String, progress: ((Int, Int) -> Void)? = nil,
        alongside: (TokenReference, OAuthToken) throws -> [StoreOperation]
    ) throws -> BulkRevocationReport {
        try withoutActuallyEscaping(alongside) { alongside in
            try bulkRevoke(scopes: scopes, matching: filter, reason: reason, dryRun: false, progress: progress, alongside: alongside)
        }
    }

    private func bulkRevoke(
        scopes: [Scope], matching filter: TokenFilter, reason: String, dryRun: Bool, progress: ((Int, Int) -> Void)?,
        alongside: ((TokenReference, OAuthToken) throws -> [StoreOperation])?
    ) throws -> BulkRevocationReport {
        try run(try bulkRevokeChange(scopes: scopes, matching: filter, reason: reason, dryRun: dryRun, progress: progress, alongside: alongside))
    }

    /// A bulk revocation as a change to run: its read is a scan of every matching token, a
    /// chunk at a time (each token read and decrypted once), and its batch replaces each
    /// changed token.
    func bulkRevokeChange(
        scopes: [Scope], matching filter: TokenFilter, reason: String, dryRun: Bool, progress: ((Int, Int) -> Void)?,
        alongside: ((TokenReference, OAuthToken) throws -> [StoreOperation])?
    ) throws -> Change<BulkRevocationReport> {
        let scopes = Array(Set(scopes)).sorted()
        guard !scopes.isEmpty else { throw KeysmithError.invalidArgument("name at least one scope to revoke") }
        let time = now
        // What one attempt's scan found (set afresh at each attempt's start).
        var report = BulkRevocationReport(matched: 0, changed: 0, changedTokens: [], dryRun: dryRun)
        var tokens: [StoreOperation] = [], extra: [StoreOperation] = []
        var examined = 0
        var heardOf = Set<Scope>()
        let scan = ChangeScan(query: ItemQuery(service: filter.service, recordType: .oauthToken), chunkSize: 4096) {
            report = BulkRevocationReport(matched: 0, changed: 0, changedTokens: [], dryRun: dryRun)
            tokens = []
            extra = []
            examined = 0
            heardOf = []
        } each: { records, scan in
            for record in records {
                guard case .keysmithRecord(let recordKey) = record.key else { continue }
                let service = recordKey.service, account = recordKey.account
                var token = try TokenCodec.decode(Array(record.secret), what: "the token for \(account) at \(service)")
                if let client = filter.clientID, token.clientID != client { continue }
                if let subject = filter.subject, token.subject != subject { continue }
                report.matched += 1
                for scope in scopes where token.scopes[scope] != nil { heardOf.insert(scope) }
                // The stored state: a granted scope of an expired token is revoked too (a
                // refresh would bring it back otherwise).
                let granted = scopes.filter { token.scopes[$0]?.state == .granted }
                guard !granted.isEmpty else { continue }
                if let alongside {
                    extra += try alongside(TokenReference(service: service, account: account), token)
                    _ = token.revokeAll(reason: reason, at: time)
                }
                for scope in granted { try token.revoke(scope, reason: reason, at: time) }
                report.changed += 1
                report.changedTokens.append(TokenReference(service: service, account: account))
                tokens.append(Self.tokenReplace(StoredToken(service: service, account: account, token: token), over: record))
            }
            examined = scan.examined
            progress?(scan.examined, scan.total)
        }
        return Change(time: time, reading: [], scanning: scan) { _ in
            progress?(examined, examined)
            guard report.matched > 0 else {
                throw KeysmithError(.itemNotFound, "no token matches \(filter.summary); nothing was revoked")
            }
            let unknown = scopes.filter { !heardOf.contains($0) }
            guard unknown.isEmpty else {
                throw KeysmithError(
                    .itemNotFound,
                    "none of the \(report.matched) matching token(s) has ever held \(Scope.formatList(unknown)) "
                        + "(misspelled?); nothing was revoked")
            }
            guard !dryRun, !tokens.isEmpty else { return Built([], [], report) }
            // One audit entry names every token the bulk change touched.
            // The filters go in the detail; account is "*" (a bulk change has no one account).
            let event = Event("bulk-revoke", filter.service ?? "*", "*", scopes.map(\.rawValue),
                              "bulk: \(reason); service \(filter.service ?? "*"); client \(filter.clientID ?? "*"); "
                                  + "subject \(filter.subject ?? "*"); \(tokens.count) token(s)",
                              tokens: report.changedTokens.map(\.description))
            // The token writes become the batch, moved out of the scan's state, not copied.
            var operations = tokens
            tokens = []
            operations += extra
            return Built(operations, [event], report)
        }
    }
}
