import Keysmith

extension AuthorizationRequest {
    /// Reads a request in Cedar's JSON form:
    /// `{"principal": {"type": "User", "id": "alice"}, "action": …, "resource": …, "context": {…}}`
    /// (an entity may also be written `"User::\"alice\""`). Unknown fields, duplicate keys, a
    /// missing part and a context value that is not a Cedar value are errors. The context may
    /// not name `token`: a token is given as ``token``.
    public init(json bytes: [UInt8], file: String = "<request>") throws(PolicyDiagnostics) {
        let document = try JSONValues.document(bytes, file: file, kind: .input)
        self = try Self.parseReportingAll(document, file: file, allowing: [])
    }

    /// Parses a request object, allowing `extra` fields beside Cedar's four (they are left to
    /// the caller), reporting every problem in one run: each unknown field, each part that is
    /// not an entity, each context value that is not a Cedar value. `tokenInContext` lets the
    /// context hold `token` itself (the Cedar oracle's requests, which carry it as data).
    static func parseReportingAll(_ document: Located, file: String, allowing extra: Set<String>, tokenInContext: Bool = false)
        throws(PolicyDiagnostics) -> AuthorizationRequest
    {
        var forgetting: [ExactText: EntityUID]? = nil
        return try parseReportingAll(document, file: file, allowing: extra, tokenInContext: tokenInContext, remembering: &forgetting)
    }

    /// ``parseReportingAll(_:file:allowing:tokenInContext:)``, looking up entities written as
    /// `Type::"id"` text in `uids` first and adding the ones it parses (when `uids` is not `nil`).
    static func parseReportingAll(_ document: Located, file: String, allowing extra: Set<String>, tokenInContext: Bool = false,
                                  remembering uids: inout [ExactText: EntityUID]?) throws(PolicyDiagnostics) -> AuthorizationRequest
    {
        var problems: [PolicyDiagnostic] = []
        func fail(_ problem: PolicyDiagnostic) -> PolicyDiagnostics { PolicyDiagnostics(kind: .input, problems: [problem]) }
        // The four fields by name, in one pass (keys are unique: the reader refuses duplicates).
        guard case .object(let members) = document.value else { throw fail(JSONValues.problem(document, file, "a request must be a JSON object")) }
        var principalValue: Located?, actionValue: Located?, resourceValue: Located?, contextValue: Located?
        for (key, member) in members {
            switch key {
            case "principal": principalValue = member
            case "action": actionValue = member
            case "resource": resourceValue = member
            case "context": contextValue = member
            default:
                guard extra.contains(key) else {
                    let allowed = Set(["principal", "action", "resource", "context"]).union(extra)
                    problems.append(JSONValues.problem(member, file, "a request has an unknown field \(PolicyValue.quoted(key)) (fields: \(allowed.sorted().joined(separator: ", ")))"))
                    continue
                }
            }
        }
        func part(_ value: Located?, _ name: String, _ what: String) -> EntityUID? {
            do throws(PolicyDiagnostic) {
                guard let value else { throw JSONValues.problem(document, file, "the request has no \(name)") }
                guard case .string(let text) = value.value, uids != nil else { return try JSONValues.uid(value, file, what) }
                // Only short texts are remembered (the memory stays small whatever the lines).
                guard text.utf8.count <= DecideLineReader.longestRememberedText else { return try JSONValues.uid(value, file, what) }
                let key = ExactText(text)
                if let known = uids?[key] { return known }
                let uid = try JSONValues.uid(value, file, what)
                if uids!.count >= DecideLineReader.remembered * 16 { uids!.removeAll(keepingCapacity: true) }
                uids![key] = uid
                return uid
            } catch {
                problems.append(error)
                return nil
            }
        }
        let principal = part(principalValue, "principal", "the principal")
        let action = part(actionValue, "action", "the action")
        let resource = part(resourceValue, "resource", "the resource")
        var context: [String: PolicyValue] = [:]
        if let contextValue {
            if case .object(let members) = contextValue.value {
                for (key, member) in members {
                    if key == "token", !tokenInContext {
                        problems.append(JSONValues.problem(member, file, "context.token is reserved: it is the principal's token, given by Keysmith"))
                        continue
                    }
                    do throws(PolicyDiagnostic) {
                        context[key] = try JSONValues.policyValue(member, file, "context.\(key)")
                    } catch {
                        problems.append(error)
                    }
                }
            } else {
                problems.append(JSONValues.problem(contextValue, file, "the context must be a JSON object"))
            }
        }
        guard problems.isEmpty, let principal, let action, let resource else { throw PolicyDiagnostics(kind: .input, problems: problems) }
        return AuthorizationRequest(principal: principal, action: action, resource: resource, context: context)
    }
}

extension AuthorizationRequest {
    /// A context given alone as a JSON object (`keysmith policy check --context`).
    public static func context(json bytes: [UInt8], file: String) throws(PolicyDiagnostics) -> [String: PolicyValue] {
        let wrapped = #"{"principal":"A::\"a\"","action":"A::\"a\"","resource":"A::\"a\"","context":"# + String(decoding: bytes, as: UTF8.self) + "}"
        return try AuthorizationRequest(json: Array(wrapped.utf8), file: file).context
    }

    /// One line of `keysmith policy decide`: a request, with `"scopes": [...]` for the
    /// principal's token's granted scopes (without it, the principal has no token).
    ///
    /// A caller reading many lines uses a ``DecideLineReader``, which reads the same lines the
    /// same way and remembers what repeats between them.
    public static func decideLine(_ bytes: [UInt8], line: Int) throws(PolicyDiagnostics) -> AuthorizationRequest {
        var reader = DecideLineReader()
        return try reader.request(bytes, line: line)
    }
}

/// Reads the lines of `keysmith policy decide` one after another: each a request in Cedar's JSON
/// form, with `"scopes": [...]` for the principal's token's granted scopes (without it, the
/// principal has no token), as ``AuthorizationRequest/decideLine(_:line:)`` reads one.
///
/// What repeats from line to line is worked out once: a list of scopes seen before gives the
/// token view built for it then (a service's callers hold a few distinct lists among many
/// requests). The answers are the same as reading each line alone.
///
/// ```swift
/// var reader = DecideLineReader()
/// for (number, line) in lines.enumerated() {
///     let request = try reader.request(Array(line.utf8), line: number + 1)
///     print(try decider.decide(request).json)
/// }
/// ```
public struct DecideLineReader: Sendable {
    /// Token views by the scope names as a line lists them (in its order, byte for byte), for
    /// lists seen before.
    private var views: [[ExactText]: TokenView] = [:]
    /// Entities written as `Type::"id"` text, by that text (byte for byte), for texts seen before.
    private var uids: [ExactText: EntityUID]? = [:]
    /// The most lists remembered (and sixteen times as many entities); a memory is emptied when
    /// it is full (a stream of ever new lists then costs what reading each line alone costs).
    static let remembered = 256
    /// The longest entity text remembered, and the longest scope list (its names' bytes
    /// together): at most 4,096 texts of 256 bytes and 256 lists of 4 KiB are kept, about 2 MiB.
    static let longestRememberedText = 256
    static let longestRememberedList = 4096
    /// The field a line may have beside Cedar's four.
    private static let extra: Set<String> = ["scopes"]

    /// A reader that remembers nothing yet.
    public init() {}

    /// Reads one line.
    ///
    /// - Parameters:
    ///   - bytes: The line, without its line break.
    ///   - line: Its number, for the problems.
    /// - Returns: The request, with the principal's token when the line has `scopes`.
    /// - Throws: ``PolicyDiagnostics`` of kind input naming every problem of the line (malformed
    ///   JSON, an unknown field, a part that is not an entity, a context value that is not a
    ///   Cedar value, scopes that are not an array of valid scope names).
    public mutating func request(_ bytes: [UInt8], line: Int) throws(PolicyDiagnostics) -> AuthorizationRequest {
        let document: Located
        do {
            document = try JSONReader.parse(bytes)
        } catch {
            throw PolicyDiagnostics(kind: .input, problems: [PolicyDiagnostic(
                location: SourceLocation(file: "stdin", line: line, column: error.column), message: error.message)])
        }
        let location = SourceLocation(file: "stdin", line: line, column: 1)
        var problems: [PolicyDiagnostic] = []
        var request: AuthorizationRequest?
        do {
            request = try AuthorizationRequest.parseReportingAll(document, file: "stdin", allowing: Self.extra, remembering: &uids)
        } catch {
            problems = error.problems.map { problem in
                var problem = problem
                problem.location.line = line
                return problem
            }
        }
        // The scopes are checked too, so a line with several problems names them all.
        var token: TokenView?
        if let scopes = document["scopes"] {
            if case .array(let items) = scopes.value {
                var names: [String] = []
                names.reserveCapacity(items.count)
                for item in items {
                    guard case .string(let name) = item.value else { break }
                    names.append(name)
                }
                if names.count == items.count {
                    token = view(names, location: location, problems: &problems)
                } else {
                    problems.append(PolicyDiagnostic(location: location, message: "scopes must hold valid scope names (RFC 6749 §3.3)"))
                }
            } else {
                problems.append(PolicyDiagnostic(location: location, message: "scopes must be an array of scope names"))
            }
        }
        guard problems.isEmpty, var request else { throw PolicyDiagnostics(kind: .input, problems: problems) }
        request.token = token
        return request
    }

    /// The token view granting `names`: the one built before for the same list, or a new one
    /// (each name checked as a scope) remembered for the next line.
    private mutating func view(_ names: [String], location: SourceLocation, problems: inout [PolicyDiagnostic]) -> TokenView? {
        let remembers = names.reduce(0) { $0 + $1.utf8.count + 1 } <= Self.longestRememberedList
        let key = remembers ? names.map(ExactText.init) : []
        if remembers, let known = views[key] { return known }
        for name in names where ScopeToken.problem(in: name) != nil {
            problems.append(PolicyDiagnostic(location: location, message: "scopes must hold valid scope names (RFC 6749 §3.3)"))
            return nil
        }
        let view = TokenView.granted(names: Set(names))
        guard remembers else { return view }
        if views.count >= Self.remembered { views.removeAll(keepingCapacity: true) }
        views[key] = view
        return view
    }
}

/// A string that is equal to another and hashed by its UTF-8 bytes, as Cedar compares names: a
/// Swift string compares by canonical equivalence, so `"\u{212A}ey"` (a Kelvin sign) would find
/// what was remembered for `"Key"`, and a precomposed `é` what was remembered for a decomposed one.
struct ExactText: Hashable, Sendable {
    let text: String

    init(_ text: String) { self.text = text }

    static func == (lhs: ExactText, rhs: ExactText) -> Bool { PolicyValue.sameBytes(lhs.text, rhs.text) }

    func hash(into hasher: inout Hasher) { PolicyValue.hashBytes(text, into: &hasher) }
}

extension EntityUID {
    /// Parses `User::"alice"` (the id with policy-text escapes); `nil` when malformed
    /// (``problem(parsing:)`` says why).
    public init?(parsing text: String) {
        guard let uid = JSONValues.parseUID(text) else { return nil }
        self = uid
    }

    /// Why `text` does not parse as `Type::"id"` — no `::"…"` at all, a type that is not a type
    /// name, or an id that is not a quoted string — as the end of a sentence about the text;
    /// `nil` when it parses. Names are shown escaped, so a look-alike letter is visible.
    ///
    /// ```swift
    /// EntityUID.problem(parsing: "\u{212A}ey::\"42\"")
    /// // has the type "\u{212A}ey", which is not a type name (Name or Namespace::Name, not a reserved word)
    /// ```
    public static func problem(parsing text: String) -> String? {
        guard JSONValues.parseUID(text) == nil else { return nil }
        guard let separator = text.utf8.firstRange(of: "::\"".utf8), text.hasSuffix("\""), text.index(before: text.endIndex) >= separator.upperBound else {
            return "is not an entity (a type, ::, then the id in double quotes)"
        }
        let type = String(text[..<separator.lowerBound])
        guard JSONValues.isTypeName(type) else {
            return "has the type \(PolicyValue.quoted(type, escapingNonASCII: true)), which is not a type name (Name or Namespace::Name, not a reserved word)"
        }
        return "has an id that is not a quoted string (inside the quotes, write \\\" for a quote and \\\\ for a backslash)"
    }
}
