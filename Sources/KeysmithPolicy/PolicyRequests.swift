import Keysmith
import KeysmithTokens

/// Requests as JSON, for `keysmith policy decide` and policy test files (docs/cli.md):
///
/// ```json
/// {"principal": {"id": "u1", "anonymous": false, "roles": ["super-admin"],
///                "resourceRoles": {"g1": ["admin"]}, "scopes": ["groups:read"], "attributes": {}},
///  "action": "post",
///  "resource": {"type": "group", "id": "g1", "attributes": {"public": false}}}
/// ```
public enum PolicyRequestJSON {
    /// Parses one request.
    ///
    /// - Throws: ``KeysmithError/Code/malformedData`` naming what is wrong;
    ///   ``KeysmithError/Code/invalidScope`` for a bad scope.
    public static func request(from bytes: [UInt8]) throws -> Request {
        let document: Located
        do {
            document = try JSONReader.parse(bytes)
        } catch {
            throw KeysmithError(.malformedData, "not valid JSON: \(error.message)")
        }
        return try request(document)
    }

    static func request(_ document: Located) throws -> Request {
        guard case .object = document.value else { throw KeysmithError(.malformedData, "a request is a JSON object with principal, action and resource") }
        guard let principalValue = document["principal"], case .object = principalValue.value else {
            throw KeysmithError(.malformedData, "the request has no \"principal\" object")
        }
        guard case .string(let actionName)? = document["action"]?.value, !actionName.isEmpty else {
            throw KeysmithError(.malformedData, "the request has no \"action\" string")
        }
        guard let resourceValue = document["resource"], case .object = resourceValue.value else {
            throw KeysmithError(.malformedData, "the request has no \"resource\" object")
        }
        func string(_ value: Located?, _ what: String) throws -> String? {
            guard let value else { return nil }
            guard case .string(let text) = value.value else { throw KeysmithError(.malformedData, "\(what) must be a string") }
            return text
        }
        func strings(_ value: Located?, _ what: String) throws -> [String] {
            guard let value else { return [] }
            guard case .array(let items) = value.value else { throw KeysmithError(.malformedData, "\(what) must be an array of strings") }
            return try items.map { item in
                guard case .string(let text) = item.value else { throw KeysmithError(.malformedData, "\(what) must be an array of strings") }
                return text
            }
        }
        func attributes(_ value: Located?, _ what: String) throws -> [String: AttributeValue] {
            guard let value else { return [:] }
            guard case .object(let members) = value.value else { throw KeysmithError(.malformedData, "\(what) must be an object") }
            var result: [String: AttributeValue] = [:]
            for member in members {
                guard let attribute = PolicyFile.attributeValue(member.value.value) else {
                    throw KeysmithError(.malformedData, "\(what).\(member.key) must be a bool, a string or a whole number")
                }
                result[member.key] = attribute
            }
            return result
        }

        let id = try string(principalValue["id"], "principal.id") ?? "anonymous"
        var anonymous = false
        if let flag = principalValue["anonymous"] {
            guard case .bool(let value) = flag.value else { throw KeysmithError(.malformedData, "principal.anonymous must be true or false") }
            anonymous = value
        }
        let principalAttributes = try attributes(principalValue["attributes"], "principal.attributes")
        let principal: Principal
        if anonymous {
            principal = .anonymous(id: id, attributes: principalAttributes)
        } else {
            var resourceRoles: [String: Set<Role>] = [:]
            if let held = principalValue["resourceRoles"] {
                guard case .object(let members) = held.value else {
                    throw KeysmithError(.malformedData, "principal.resourceRoles must map resource ids to arrays of roles")
                }
                for member in members {
                    resourceRoles[member.key] = Set(try strings(member.value, "principal.resourceRoles.\(member.key)").map(Role.init))
                }
            }
            let scopes = Set(try strings(principalValue["scopes"], "principal.scopes").map { try Scope($0) })
            principal = Principal(
                id: id, roles: Set(try strings(principalValue["roles"], "principal.roles").map(Role.init)),
                resourceRoles: resourceRoles, scopes: .fixed(scopes), attributes: principalAttributes)
        }
        let resource = Resource(
            type: try string(resourceValue["type"], "resource.type") ?? "",
            id: try string(resourceValue["id"], "resource.id") ?? "",
            attributes: try attributes(resourceValue["attributes"], "resource.attributes"))
        return Request(principal: principal, action: Action(actionName), resource: resource)
    }
}

/// A test file in the spirit of `cedar run-tests`: requests with the decisions they must get.
///
/// ```json
/// {"policy": "news-groups.json",
///  "cases": [{"name": "anonymous browses a public group", "request": {…}, "expected": "allow",
///             "reasons": ["browse-public"]}]}
/// ```
///
/// `reasons` is optional; when given, the deciding policies must be exactly those.
public struct PolicyTestFile: Sendable {
    /// One case.
    public struct Case: Sendable {
        /// The case's name (or its line).
        public var name: String
        /// The request.
        public var request: Request
        /// Whether it must be allowed.
        public var expectAllowed: Bool
        /// The policies that must decide it, when given.
        public var expectedReasons: [String]?
        /// The line it starts on.
        public var line: Int
    }

    /// One case's outcome.
    public struct Outcome: Sendable {
        /// The case.
        public var testCase: Case
        /// The engine's decision.
        public var decision: Decision
        /// Whether the decision and reasons matched.
        public var passed: Bool
        /// What differed, when it failed.
        public var failure: String?
    }

    /// The policy file named by the test file (relative to the test file).
    public var policyPath: String?
    /// The cases.
    public var cases: [Case]

    /// Parses a test file.
    ///
    /// - Throws: ``KeysmithError/Code/malformedData`` naming the line of the first bad case.
    public init(bytes: [UInt8]) throws {
        let document: Located
        do {
            document = try JSONReader.parse(bytes)
        } catch {
            throw KeysmithError(.malformedData, "line \(error.line): not valid JSON: \(error.message)")
        }
        guard case .object = document.value, case .array(let items)? = document["cases"]?.value else {
            throw KeysmithError(.malformedData, "a test file is an object with \"policy\" and a \"cases\" array")
        }
        if case .string(let path)? = document["policy"]?.value { policyPath = path }
        cases = try items.map { item in
            do {
                guard let request = item["request"] else { throw KeysmithError(.malformedData, "the case has no \"request\"") }
                guard case .string(let expected)? = item["expected"]?.value, ["allow", "deny"].contains(expected) else {
                    throw KeysmithError(.malformedData, "\"expected\" must be \"allow\" or \"deny\"")
                }
                var reasons: [String]?
                if case .array(let names)? = item["reasons"]?.value {
                    reasons = names.compactMap { if case .string(let name) = $0.value { name } else { nil } }
                }
                var name = "line \(item.line)"
                if case .string(let given)? = item["name"]?.value { name = given }
                return Case(name: name, request: try PolicyRequestJSON.request(request), expectAllowed: expected == "allow",
                            expectedReasons: reasons, line: item.line)
            } catch let error as KeysmithError {
                throw KeysmithError(error.code, "line \(item.line): \(error.message)")
            }
        }
    }

    /// Runs every case against an engine.
    public func run(_ engine: PolicyEngine) -> [Outcome] {
        cases.map { testCase in
            let decision = engine.decide(testCase.request)
            var failure: String?
            if decision.isAllowed != testCase.expectAllowed {
                failure = "expected \(testCase.expectAllowed ? "allow" : "deny"), got \(decision.explanation)"
            } else if let reasons = testCase.expectedReasons, reasons.sorted() != decision.policies.sorted() {
                failure = "expected reasons [\(reasons.sorted().joined(separator: ", "))], got [\(decision.policies.sorted().joined(separator: ", "))]"
            }
            return Outcome(testCase: testCase, decision: decision, passed: failure == nil, failure: failure)
        }
    }
}
