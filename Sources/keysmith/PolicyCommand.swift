import ArgumentParser
import Keysmith
import KeysmithPolicy
import KeysmithSystem
import KeysmithTokens
import KeysmithVault

extension KeysmithCommand {
    /// Policy files: check, validate, test, decide.
    struct PolicyCommand: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "policy",
            abstract: "Validate policy files, run their tests, and decide requests.",
            subcommands: [Check.self, Validate.self, Test.self, Decide.self, Example.self]
        )
    }
}

/// Reads and compiles a policy file; every problem is reported with its line.
func loadPolicy(_ path: String) throws -> PolicyEngine {
    let bytes: [UInt8]
    do {
        guard let read = try System.readFile(path) else {
            throw KeysmithError(.itemNotFound, "there is no policy file at \(path)")
        }
        bytes = read
    } catch let error as SystemError {
        throw KeysmithError(.ioFailure, "cannot read the policy file: \(error)")
    }
    do {
        return try PolicyFile.engine(from: bytes)
    } catch {
        throw KeysmithError(.malformedData, "\(path) is invalid:\n" + error.problems.map { "  \(path):\($0.description)" }.joined(separator: "\n"))
    }
}

struct DecisionJSON: Encodable {
    var decision: String
    var reasons: [String]
    var basis: String
    var errors: [String]?

    init(_ decision: Decision) {
        self.decision = decision.isAllowed ? "allow" : "deny"
        reasons = decision.policies
        basis = decision.basis.rawValue
        errors = decision.errors.isEmpty ? nil : decision.errors.map { "\($0.policy): \($0.error)" }
    }
}

extension KeysmithCommand.PolicyCommand {
    /// Decides one request given as options.
    struct Check: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Decide one request given as options; exit 0 when allowed, 3 when denied.",
            discussion: """
                The principal's scopes come from --scope, or from a stored token (--token-service and \
                --token-account), read at this instant: revoke a scope and the next check changes.
                """
        )

        @OptionGroup var store: StoreOptions

        @Option(help: ArgumentHelp("The policy file.", valueName: "file"))
        var policy: String

        @Option(help: "The principal's id.")
        var principal: String = "principal"

        @Flag(help: "The principal is anonymous (no token).")
        var anonymous = false

        @Option(name: .customLong("role"), help: "A role held everywhere (repeatable).")
        var roles: [String] = []

        @Option(name: .customLong("resource-role"), help: ArgumentHelp("A role held on one resource, as RESOURCE:ROLE (repeatable).", valueName: "resource:role"))
        var resourceRoles: [String] = []

        @Option(name: .customLong("scope"), help: "A scope of the principal's token (repeatable).")
        var scopes: [String] = []

        @Option(name: .customLong("token-service"), help: "Take the scopes from the token stored under this service…")
        var tokenService: String?

        @Option(name: .customLong("token-account"), help: "…and this account.")
        var tokenAccount: String?

        @Option(help: "The action.")
        var action: String

        @Option(name: .customLong("resource-type"), help: "The resource's type.")
        var resourceType: String = ""

        @Option(name: .customLong("resource"), help: "The resource's id.")
        var resourceID: String

        @Option(name: .customLong("attribute"), help: ArgumentHelp("A resource attribute, as NAME=VALUE (true, false, a number or text; repeatable).", valueName: "name=value"))
        var attributes: [String] = []

        @Flag(help: "Name the policies that decided.")
        var explain = false

        @Flag(help: "Print the decision as JSON.")
        var json = false

        func validate() throws {
            if (tokenService == nil) != (tokenAccount == nil) { throw ValidationError("give both --token-service and --token-account, or neither") }
            if anonymous && (!scopes.isEmpty || tokenService != nil) { throw ValidationError("an anonymous principal has no token or scopes") }
            for entry in resourceRoles where !entry.contains(":") { throw ValidationError("--resource-role takes RESOURCE:ROLE, not '\(entry)'") }
            for entry in attributes where !entry.contains("=") { throw ValidationError("--attribute takes NAME=VALUE, not '\(entry)'") }
        }

        func run() throws {
            let engine = try loadPolicy(policy)
            var resourceAttributes: [String: AttributeValue] = [:]
            for entry in attributes {
                let parts = entry.split(separator: "=", maxSplits: 1).map(String.init)
                let value = parts.count > 1 ? parts[1] : ""
                resourceAttributes[parts[0]] = value == "true" ? .bool(true) : value == "false" ? .bool(false) : Int(value).map { .int($0) } ?? .string(value)
            }
            let who: Principal
            if anonymous {
                who = .anonymous(id: principal)
            } else {
                var held: [String: Set<Role>] = [:]
                for entry in resourceRoles {
                    let parts = entry.split(separator: ":", maxSplits: 1).map(String.init)
                    held[parts[0], default: []].insert(Role(parts[1]))
                }
                var granted = try Set(parseScopes(scopes))
                if let tokenService, let tokenAccount {
                    let keeper = makeKeeper(try store.openStore())
                    let token = try loadToken(keeper, try TokenLocation.parse(["--service", tokenService, "--account", tokenAccount]))
                    granted.formUnion(token.grantedScopes(at: keeper.now))
                }
                who = Principal(id: principal, roles: Set(roles.map(Role.init)), resourceRoles: held, scopes: .fixed(granted))
            }
            let decision = engine.decide(Request(principal: who, action: Action(action),
                                                 resource: Resource(type: resourceType, id: resourceID, attributes: resourceAttributes)))
            if json {
                print(try jsonLine(DecisionJSON(decision)))
            } else {
                print(explain ? decision.explanation : (decision.isAllowed ? "allow" : "deny"))
            }
            if !decision.isAllowed { throw CommandFailure(message: decision.explanation, exitCode: ExitCode(3)) }
        }
    }

    /// Validates a policy file.
    struct Validate: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Check a policy file against the roles, actions and attributes it declares; list every problem with its line.")

        @Argument(help: "The policy file.")
        var file: String

        func run() throws {
            let engine = try loadPolicy(file)
            print("\(file) is valid: \(engine.allPolicies.count) policies.")
        }
    }

    /// Runs a test file.
    struct Test: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Run a policy test file: requests with the decisions (and reasons) they must get; exit 3 if any fails.")

        @Argument(help: "The test file (JSON with \"policy\" and \"cases\").")
        var file: String

        @Option(help: ArgumentHelp("The policy file (default: the one the test file names, relative to it).", valueName: "file"))
        var policy: String?

        func run() throws {
            guard let bytes = try System.readFile(file) else { throw KeysmithError(.itemNotFound, "there is no test file at \(file)") }
            let tests = try PolicyTestFile(bytes: bytes)
            guard let policyPath = policy ?? tests.policyPath.map({ path in
                path.hasPrefix("/") ? path : (file.contains("/") ? String(file[..<file.lastIndex(of: "/")!]) + "/" + path : path)
            }) else {
                throw KeysmithError.invalidArgument("the test file names no policy; give --policy")
            }
            let outcomes = tests.run(try loadPolicy(policyPath))
            for outcome in outcomes where !outcome.passed {
                print("FAIL \(outcome.testCase.name) (line \(outcome.testCase.line)): \(outcome.failure ?? "")")
            }
            let failed = outcomes.filter { !$0.passed }.count
            print("\(outcomes.count - failed) passed, \(failed) failed")
            if failed > 0 { throw CommandFailure(message: "\(failed) policy test(s) failed", exitCode: ExitCode(3)) }
        }
    }

    /// Decides JSON-lines requests from stdin.
    struct Decide: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Decide requests read as JSON lines on standard input; write one JSON line per request.",
            discussion: """
                Each output line is {"decision":"allow"|"deny","reasons":[…],"basis":…}; a malformed \
                request gives {"error":"…","line":N} and the command exits 64 at the end.
                """
        )

        @Option(help: ArgumentHelp("The policy file.", valueName: "file"))
        var policy: String

        func run() throws {
            let engine = try loadPolicy(policy)
            let input = try Terminal.readAll(fd: 0)
            var bad = 0
            var output: [UInt8] = []
            for (index, line) in input.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).enumerated() {
                if line.allSatisfy({ $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\r") }) { continue }
                do {
                    let request = try PolicyRequestJSON.request(from: Array(line))
                    output += Array(try jsonLine(DecisionJSON(engine.decide(request))).utf8)
                } catch let error as KeysmithError {
                    bad += 1
                    struct Failure: Encodable { var error: String; var line: Int }
                    output += Array(try jsonLine(Failure(error: error.message, line: index + 1)).utf8)
                }
                output.append(UInt8(ascii: "\n"))
                if output.count > 1 << 16 {
                    Terminal.write(output, to: 1)
                    output.removeAll(keepingCapacity: true)
                }
            }
            Terminal.write(output, to: 1)
            if bad > 0 { throw CommandFailure(message: "\(bad) request line(s) were malformed", exitCode: ExitCode(64)) }
        }
    }

    /// Prints the news-groups example policy.
    struct Example: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print the news-groups example policy file (docs/examples/news-groups.json).")

        func run() {
            Terminal.write(Array((newsGroupsPolicy + "\n").utf8), to: 1)
        }
    }
}
