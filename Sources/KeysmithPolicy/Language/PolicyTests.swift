import Keysmith

/// A policy test file: the files to test and requests with the decisions they must get.
///
/// ```json
/// {"policies": ["policies.cedar"], "schema": "schema.cedarschema", "entities": "entities.json",
///  "cases": [{"name": "alice posts", "request": {"principal": "User::\"alice\"", "action": "Action::\"post\"",
///             "resource": "Group::\"g1\""}, "scopes": ["posts:write"], "expect": "allow",
///             "determining": ["member-browse-post"]}]}
/// ```
///
/// Paths are relative to the test file. `scopes` gives the principal a token with those scopes
/// granted (without it, no token); `determining`, when given, must equal the deciding policies.
public struct PolicyTestSuite: Sendable {
    /// One case.
    public struct Case: Sendable {
        /// Its name.
        public var name: String
        /// Its line in the test file.
        public var line: Int
        /// The request (with its token, if any).
        public var request: AuthorizationRequest
        /// `true` for allow.
        public var expectAllow: Bool
        /// The deciding policies it must report, when given.
        public var determining: [String]?
    }

    /// The outcome of one case.
    public struct Outcome: Sendable {
        /// The case's name.
        public var name: String
        /// Its line.
        public var line: Int
        /// Why it failed, or `nil` when it passed.
        public var failure: String?
    }

    /// The policy files, as written in the test file.
    public var policyFiles: [String]
    /// The schema file, if any.
    public var schemaFile: String?
    /// The entities file, if any.
    public var entitiesFile: String?
    /// The cases.
    public var cases: [Case]

    /// Reads a test file; every malformed case is reported.
    public init(json bytes: [UInt8], file: String) throws(PolicyDiagnostics) {
        let document = try JSONValues.document(bytes, file: file, kind: .input)
        var problems: [PolicyDiagnostic] = []
        var policyFiles: [String] = [], schemaFile: String?, entitiesFile: String?, cases: [Case] = []
        do throws(PolicyDiagnostic) {
            let fields = try JSONValues.members(document, file, "a policy test file", allowed: ["policies", "schema", "entities", "cases"])
            guard case .array(let files)? = fields["policies"]?.value, !files.isEmpty else {
                throw JSONValues.problem(document, file, "the test file must name its policy files: \"policies\": [\"file.cedar\"]")
            }
            for item in files {
                guard case .string(let path) = item.value else { throw JSONValues.problem(item, file, "a policy file must be a string") }
                policyFiles.append(path)
            }
            if let schema = fields["schema"] { schemaFile = try JSONValues.string(schema, file, "schema", in: document) }
            if let entities = fields["entities"] { entitiesFile = try JSONValues.string(entities, file, "entities", in: document) }
            guard case .array(let items)? = fields["cases"]?.value else { throw JSONValues.problem(document, file, "the test file has no \"cases\" array") }
            for item in items {
                do throws(PolicyDiagnostic) {
                    let caseFields = try JSONValues.members(item, file, "a test case", allowed: ["name", "request", "scopes", "expect", "determining"])
                    let name = try JSONValues.string(caseFields["name"], file, "the case's name", in: item)
                    guard let requestValue = caseFields["request"] else { throw JSONValues.problem(item, file, "the case \(name) has no request") }
                    // Every problem of the request is reported; the case's other fields are
                    // still checked, and the case is dropped at the end.
                    var parsedRequest: AuthorizationRequest?
                    do {
                        parsedRequest = try AuthorizationRequest.parseReportingAll(requestValue, file: file, allowing: [])
                    } catch {
                        problems += error.problems
                    }
                    var request = parsedRequest ?? AuthorizationRequest(principal: EntityUID(type: "_", id: ""), action: EntityUID(type: "_", id: ""),
                                                                        resource: EntityUID(type: "_", id: ""))
                    if let scopes = caseFields["scopes"] {
                        guard case .array(let list) = scopes.value else { throw JSONValues.problem(scopes, file, "scopes must be an array") }
                        var granted: Set<String> = []
                        for entry in list {
                            guard case .string(let text) = entry.value, ScopeToken.problem(in: text) == nil else {
                                throw JSONValues.problem(entry, file, "scopes must hold valid scope names")
                            }
                            granted.insert(text)
                        }
                        request.token = .granted(names: granted)
                    }
                    let expect = try JSONValues.string(caseFields["expect"], file, "the case's expect", in: item)
                    guard expect == "allow" || expect == "deny" else { throw JSONValues.problem(item, file, "expect must be \"allow\" or \"deny\"") }
                    var determining: [String]?
                    if let list = caseFields["determining"] {
                        guard case .array(let ids) = list.value else { throw JSONValues.problem(list, file, "determining must be an array of policy ids") }
                        var listed: Set<String> = []
                        determining = try ids.map { (id: Located) throws(PolicyDiagnostic) -> String in
                            let text = try JSONValues.string(id, file, "a policy id", in: list)
                            // Compared as a set with the deciding policies: a repeated id would pass unnoticed.
                            guard listed.insert(text).inserted else { throw JSONValues.problem(id, file, "the policy id \(PolicyValue.quoted(text)) is listed twice") }
                            return text
                        }
                    }
                    guard parsedRequest != nil else { continue }  // its problems are reported above
                    cases.append(Case(name: name, line: item.line, request: request, expectAllow: expect == "allow", determining: determining))
                } catch {
                    problems.append(error)
                }
            }
        } catch {
            problems.append(error)
        }
        if !problems.isEmpty { throw PolicyDiagnostics(kind: .input, problems: problems) }
        self.policyFiles = policyFiles
        self.schemaFile = schemaFile
        self.entitiesFile = entitiesFile
        self.cases = cases
    }

    /// Runs every case; with a schema, a request the schema refuses is a failure of its case.
    public func run(_ policies: Policies, entities: EntityStore, schema: Schema?) -> [Outcome] {
        cases.map { item -> Outcome in
            let decision: AuthorizationDecision
            do throws(PolicyDiagnostics) {
                decision = try PolicyDecider(policies: policies, schema: schema, entities: entities).decide(item.request).decision
            } catch {
                return Outcome(name: item.name, line: item.line, failure: "the request is invalid: " + error.problems.map(\.message).joined(separator: "; "))
            }
            var failure: String?
            if decision.isAllowed != item.expectAllow {
                failure = "expected \(item.expectAllow ? "allow" : "deny"), got \(decision.description)"
            } else if let expected = item.determining, Set(expected) != Set(decision.determining.map(\.id)) {
                failure = "expected it decided by [\(expected.joined(separator: ", "))], got [\(decision.determining.map(\.id).joined(separator: ", "))]"
            }
            return Outcome(name: item.name, line: item.line, failure: failure)
        }
    }
}
