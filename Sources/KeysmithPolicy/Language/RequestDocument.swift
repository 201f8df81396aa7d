import KeysmithTokens

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
        func part(_ value: Located?, _ name: String) -> EntityUID? {
            do throws(PolicyDiagnostic) {
                guard let value else { throw JSONValues.problem(document, file, "the request has no \(name)") }
                return try JSONValues.uid(value, file, "the \(name)")
            } catch {
                problems.append(error)
                return nil
            }
        }
        let principal = part(principalValue, "principal")
        let action = part(actionValue, "action")
        let resource = part(resourceValue, "resource")
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
    public static func decideLine(_ bytes: [UInt8], line: Int) throws(PolicyDiagnostics) -> AuthorizationRequest {
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
            request = try parseReportingAll(document, file: "stdin", allowing: ["scopes"])
        } catch {
            problems = error.problems.map { problem in
                var problem = problem
                problem.location.line = line
                return problem
            }
        }
        // The scopes are checked too, so a line with several problems names them all.
        var granted: Set<Scope>?
        if let scopes = document["scopes"] {
            if case .array(let items) = scopes.value {
                var names: Set<Scope> = []
                for item in items {
                    guard case .string(let name) = item.value, let scope = try? Scope(name) else {
                        problems.append(PolicyDiagnostic(location: location, message: "scopes must hold valid scope names (RFC 6749 §3.3)"))
                        break
                    }
                    names.insert(scope)
                }
                granted = names
            } else {
                problems.append(PolicyDiagnostic(location: location, message: "scopes must be an array of scope names"))
            }
        }
        guard problems.isEmpty, var request else { throw PolicyDiagnostics(kind: .input, problems: problems) }
        if let granted { request.token = .granted(granted) }
        return request
    }
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
        guard let separator = text.range(of: "::\""), text.hasSuffix("\""), text.index(before: text.endIndex) >= separator.upperBound else {
            return "is not an entity (a type, ::, then the id in double quotes)"
        }
        let type = String(text[..<separator.lowerBound])
        guard JSONValues.isTypeName(type) else {
            return "has the type \(PolicyValue.quoted(type, escapingNonASCII: true)), which is not a type name (Name or Namespace::Name, not a reserved word)"
        }
        return "has an id that is not a quoted string (inside the quotes, write \\\" for a quote and \\\\ for a backslash)"
    }
}
