import Keysmith
import KeysmithTokens

/// Policy files: a declarative JSON form of roles, actions, attributes and policies that
/// compiles to a ``PolicyEngine``. docs/policy-format.md specifies it; docs/examples/ holds the
/// news-groups scenario written as one.
///
/// ```swift
/// let engine = try PolicyFile.engine(from: Array(fileBytes))
/// ```
///
/// Loading validates everything against what the file declares and reports every problem with
/// its line, not just the first.
public enum PolicyFile {
    /// Compiles a policy file.
    ///
    /// - Parameter bytes: The file's contents.
    /// - Returns: The engine.
    /// - Throws: ``PolicyValidationError`` with every problem and its line.
    public static func engine(from bytes: [UInt8]) throws(PolicyValidationError) -> PolicyEngine {
        let document: Located
        do {
            document = try JSONReader.parse(bytes)
        } catch {
            throw PolicyValidationError(problems: [PolicyProblem(line: error.line, message: "not valid JSON: \(error.message)")])
        }
        var checker = Checker()
        let parsed = checker.document(document)
        guard checker.problems.isEmpty, let parsed else { throw PolicyValidationError(problems: checker.problems) }
        do {
            return try PolicyEngine(roles: parsed.roles, actions: parsed.actions, policies: parsed.policies)
        } catch {
            throw error
        }
    }

    /// The attribute types a file declares, which requests are checked against.
    struct Declared {
        var resource: [String: String] = [:]
        var principal: [String: String] = [:]
    }

    struct Parsed {
        var roles: [RoleDefinition]
        var actions: [Action]
        var policies: [Policy]
    }

    /// Walks a document, collecting every problem rather than stopping at the first.
    struct Checker {
        var problems: [PolicyProblem] = []

        mutating func problem(_ line: Int, _ message: String) { problems.append(PolicyProblem(line: line, message: message)) }

        mutating func strings(_ value: Located?, _ what: String) -> [(String, Int)] {
            guard let value else { return [] }
            guard case .array(let items) = value.value else {
                problem(value.line, "\(what) must be an array of strings, not \(value.value.typeName)")
                return []
            }
            return items.compactMap { item in
                guard case .string(let text) = item.value, !text.isEmpty else {
                    problem(item.line, "\(what) must hold non-empty strings, not \(item.value.typeName)")
                    return nil
                }
                return (text, item.line)
            }
        }

        mutating func onlyKeys(_ value: Located, _ allowed: Set<String>, _ what: String) {
            guard case .object(let members) = value.value else { return }
            for member in members where !allowed.contains(member.key) {
                problem(member.value.line, "unknown field \"\(member.key)\" in \(what); expected one of: \(allowed.sorted().joined(separator: ", "))")
            }
        }

        mutating func document(_ root: Located) -> Parsed? {
            guard case .object = root.value else {
                problem(root.line, "a policy file is a JSON object with roles, actions, attributes and policies")
                return nil
            }
            onlyKeys(root, ["roles", "actions", "attributes", "policies"], "the policy file")

            // Roles: "name" or {"name", "inherits"}.
            var roles: [RoleDefinition] = []
            var roleLines: [String: Int] = [:]
            if case .array(let items)? = root["roles"]?.value {
                for item in items {
                    switch item.value {
                    case .string(let name):
                        roles.append(RoleDefinition(Role(name)))
                        roleLines[name] = item.line
                    case .object:
                        onlyKeys(item, ["name", "inherits"], "a role")
                        guard case .string(let name)? = item["name"]?.value, !name.isEmpty else {
                            problem(item.line, "a role needs a \"name\"")
                            continue
                        }
                        let parents = strings(item["inherits"], "a role's \"inherits\"").map { Role($0.0) }
                        roles.append(RoleDefinition(Role(name), inherits: parents))
                        roleLines[name] = item.line
                    default:
                        problem(item.line, "a role is a name or an object with \"name\" and \"inherits\"")
                    }
                }
            } else {
                problem(root["roles"]?.line ?? root.line, "\"roles\" must be an array")
            }
            let declaredRoles = Set(roles.map(\.role.name)).union(["anyone", "authenticated"])
            for definition in roles {
                for parent in definition.inherits where !declaredRoles.contains(parent.name) {
                    problem(roleLines[definition.role.name] ?? root.line, "the role \"\(definition.role)\" inherits the undeclared role \"\(parent)\"")
                }
            }

            let actionEntries = strings(root["actions"], "\"actions\"")
            if root["actions"] == nil { problem(root.line, "\"actions\" is missing") }
            let actions = actionEntries.map { Action($0.0) }
            let declaredActions = Set(actionEntries.map(\.0))

            // Attributes: {"resource": {"name": "bool"|"string"|"int"}, "principal": {...}}.
            var declared = Declared()
            if let attributes = root["attributes"] {
                onlyKeys(attributes, ["resource", "principal"], "\"attributes\"")
                for side in ["resource", "principal"] {
                    guard let block = attributes[side] else { continue }
                    guard case .object(let members) = block.value else {
                        problem(block.line, "\"attributes.\(side)\" must be an object of name: type")
                        continue
                    }
                    for member in members {
                        guard case .string(let type) = member.value.value, ["bool", "string", "int"].contains(type) else {
                            problem(member.value.line, "the attribute \"\(member.key)\" must have the type \"bool\", \"string\" or \"int\"")
                            continue
                        }
                        if side == "resource" { declared.resource[member.key] = type } else { declared.principal[member.key] = type }
                    }
                }
            }

            var policies: [Policy] = []
            guard case .array(let items)? = root["policies"]?.value else {
                problem(root["policies"]?.line ?? root.line, "\"policies\" must be an array")
                return nil
            }
            for item in items {
                if let policy = self.policy(item, declaredRoles: declaredRoles, declaredActions: declaredActions, declared: declared) {
                    policies.append(policy)
                }
            }
            return Parsed(roles: roles, actions: actions, policies: policies)
        }

        mutating func policy(_ item: Located, declaredRoles: Set<String>, declaredActions: Set<String>, declared: Declared) -> Policy? {
            guard case .object = item.value else {
                problem(item.line, "a policy must be an object")
                return nil
            }
            onlyKeys(item, ["name", "effect", "roles", "actions", "when", "scopes", "resourceType", "description"], "a policy")
            guard case .string(let name)? = item["name"]?.value, !name.isEmpty else {
                problem(item.line, "a policy needs a \"name\"")
                return nil
            }
            var effect = Effect.permit
            if case .string(let text)? = item["effect"]?.value, let named = Effect(rawValue: text) {
                effect = named
            } else {
                problem(item["effect"]?.line ?? item.line, "the policy \"\(name)\" needs an \"effect\" of \"permit\" or \"forbid\"")
            }
            let roles = strings(item["roles"], "the policy \"\(name)\"'s \"roles\"")
            for (role, line) in roles where !declaredRoles.contains(role) {
                problem(line, "the policy \"\(name)\" names the undeclared role \"\(role)\"")
            }
            if roles.isEmpty { problem(item.line, "the policy \"\(name)\" names no role") }
            let actions = strings(item["actions"], "the policy \"\(name)\"'s \"actions\"")
            for (action, line) in actions where !declaredActions.contains(action) {
                problem(line, "the policy \"\(name)\" names the undeclared action \"\(action)\"")
            }
            if actions.isEmpty { problem(item.line, "the policy \"\(name)\" names no action") }
            var scopes: Set<Scope> = []
            for (text, line) in strings(item["scopes"], "the policy \"\(name)\"'s \"scopes\"") {
                do {
                    scopes.insert(try Scope(text))
                } catch let error as KeysmithError {
                    problem(line, "the policy \"\(name)\" has an invalid scope: \(error.message)")
                } catch {
                    problem(line, "the policy \"\(name)\" has an invalid scope")
                }
            }
            var conditions: [Condition] = []
            if let when = item["when"] {
                guard case .array(let clauses) = when.value else {
                    problem(when.line, "the policy \"\(name)\"'s \"when\" must be an array of conditions")
                    return nil
                }
                for clause in clauses {
                    if let condition = self.condition(clause, policy: name, declared: declared) { conditions.append(condition) }
                }
            }
            var resourceType: String?
            if let type = item["resourceType"] {
                if case .string(let text) = type.value { resourceType = text } else {
                    problem(type.line, "the policy \"\(name)\"'s \"resourceType\" must be a string")
                }
            }
            var policy = Policy(name: name, effect: effect, roles: roles.map { Role($0.0) }, actions: actions.map { Action($0.0) },
                                conditions: conditions, scopes: scopes, resourceType: resourceType)
            policy.line = item.line
            return policy
        }

        mutating func condition(_ clause: Located, policy: String, declared: Declared) -> Condition? {
            onlyKeys(clause, ["resource", "principal", "equals"], "a condition")
            let side: String
            let attribute: String
            if case .string(let name)? = clause["resource"]?.value {
                side = "resource"
                attribute = name
            } else if case .string(let name)? = clause["principal"]?.value {
                side = "principal"
                attribute = name
            } else {
                problem(clause.line, "a condition of \"\(policy)\" names {\"resource\": ATTRIBUTE} or {\"principal\": ATTRIBUTE} and \"equals\"")
                return nil
            }
            let types = side == "resource" ? declared.resource : declared.principal
            guard let type = types[attribute] else {
                problem(clause.line, "the policy \"\(policy)\" reads the undeclared \(side) attribute \"\(attribute)\"")
                return nil
            }
            guard let equals = clause["equals"], let value = attributeValue(equals.value) else {
                problem(clause.line, "a condition of \"\(policy)\" needs \"equals\" with a bool, string or whole number")
                return nil
            }
            guard value.typeName == type else {
                problem(equals.line, "the policy \"\(policy)\" compares the \(type) attribute \"\(attribute)\" with \(value.typeName) \(value)")
                return nil
            }
            return side == "resource" ? .resourceAttribute(attribute, equals: value) : .principalAttribute(attribute, equals: value)
        }
    }

    static func attributeValue(_ value: JSONValue) -> AttributeValue? {
        switch value {
        case .bool(let flag): .bool(flag)
        case .string(let text): .string(text)
        case .integer(let number): .int(Int(number))
        default: nil
        }
    }
}
