import ArgumentParser
import FoundationEssentials
import Keysmith
import KeysmithPolicy
import KeysmithSystem
import KeysmithTokenPolicy
import KeysmithTokens
import KeysmithVault

extension KeysmithCommand {
    /// Policies in Keysmith's policy language: validate, check, decide, list what is permitted, test.
    struct PolicyCommand: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "policy",
            abstract: "Validate policies against a schema, decide requests, list what a principal may do, run policy tests.",
            discussion: "The language is described in docs/policy-language.md.",
            subcommands: [Validate.self, Check.self, Decide.self, Permitted.self, Test.self, Format.self, Example.self]
        )
    }
}

/// The files a decision reads: policies, and optionally a schema and entities.
struct PolicyInputs: ParsableArguments {
    @Option(name: .customLong("policies"), help: ArgumentHelp("A policy file (repeatable).", valueName: "file"))
    var policyFiles: [String] = []

    @Option(help: ArgumentHelp("A schema file: policies, entities and requests are checked against it.", valueName: "file"))
    var schema: String?

    @Option(help: ArgumentHelp("An entities file (Cedar's JSON entity format).", valueName: "file"))
    var entities: String?

    func validate() throws {
        if policyFiles.isEmpty { throw ValidationError("give at least one --policies FILE") }
    }

    /// Everything loaded and validated; every problem of every file is printed before the failure.
    struct Loaded {
        var policies: Policies
        var schema: Schema?
        var entities: EntityStore

        /// What decides requests against them.
        var decider: PolicyDecider { PolicyDecider(policies: policies, schema: schema, entities: entities) }
    }

    func load() throws -> Loaded {
        var problems: [PolicyDiagnostic] = []
        var texts: [(String, String)] = []
        for file in policyFiles { texts.append((file, try readText(file, "policy file"))) }
        // Every problem in one run: the policies that did read are type-checked below even
        // when another file has a syntax error or an id is used twice.
        let (parsed, parseProblems) = Policies.readingWhatParses(texts)
        problems += parseProblems
        var schema: Schema?
        if let path = self.schema {
            do {
                schema = try Schema(text: try readText(path, "schema"), file: path)
            } catch let error as PolicyDiagnostics {
                problems += error.problems
            }
        }
        var store = try EntityStore()
        var storeRead = true
        if let path = entities {
            do {
                store = try EntityStore(json: Array(try readText(path, "entities file").utf8), file: path)
            } catch let error as PolicyDiagnostics {
                problems += error.problems
                storeRead = false
            }
        }
        if let schema {
            do { try schema.validate(parsed) } catch { problems += error.problems }
            if storeRead {
                do { try schema.validate(store) } catch { problems += error.problems }
                do { try store.add(schema.actionEntities.filter { store[$0.uid] == nil }) } catch { problems += error.problems }
            }
        }
        try reportProblems(problems)
        return Loaded(policies: parsed, schema: schema, entities: store)
    }
}

/// Prints every problem as `file:line:column: message` on standard error and fails with exit 64.
func reportProblems(_ problems: [PolicyDiagnostic]) throws {
    guard !problems.isEmpty else { return }
    Terminal.write(Array(problems.map { "\($0)\n" }.joined().utf8), to: .standardError)
    throw CommandFailure(message: "\(problems.count) problem(s); nothing was decided", exitCode: ExitCode(64))
}

/// The largest policy, schema, entities or test file the command reads: it holds every byte and
/// what it parses from them in memory (a file given as /dev/zero grew without end).
let largestInputFile = 64 << 20

/// A text file, or a not-found / too-large / I/O failure naming what it was.
func readText(_ path: String, _ what: String) throws -> String {
    let bytes: [UInt8]
    do {
        guard let read = try System.readFile(path, atMost: largestInputFile) else { throw KeysmithError(.itemNotFound, "there is no \(what) at \(path)") }
        bytes = read
    } catch let error as SystemError where error.isOverLimit {
        throw CommandFailure(message: "the \(what) \(path) is larger than \(largestInputFile >> 20) MiB", exitCode: ExitCode(64))
    } catch let error as SystemError {
        throw KeysmithError(.ioFailure, "cannot read the \(what) \(path): \(error)")
    }
    guard let text = String(validating: bytes, as: UTF8.self) else { throw KeysmithError(.malformedData, "the \(what) \(path) is not UTF-8") }
    return text
}

/// `User::"alice"`, or for an action a bare name (`view` is `Action::"view"`).
func parseEntity(_ text: String, what: String, bareType: String? = nil) throws -> EntityUID {
    if let bareType, !text.contains("::") { return EntityUID(type: bareType, id: text) }
    guard let uid = EntityUID(parsing: text) else {
        let example = what == "--action" ? "Action::\"view\"" : "User::\"alice\""
        throw KeysmithError.invalidArgument("\(what) \(EntityUID.problem(parsing: text) ?? ""): an entity is written \(example) (quote it for the shell: '\(example)')")
    }
    return uid
}

/// Where the principal's token comes from on the command line.
struct TokenOptions: ParsableArguments {
    @Option(name: .customLong("scope"), help: "A scope the principal's token grants (repeatable; comma or space lists too). Without a token the principal has none (context has token is false).")
    var scopes: [String] = []

    @Option(name: .customLong("token-service"), help: "Read the principal's token stored under this service…")
    var tokenService: String?

    @Option(name: .customLong("token-account"), help: "…and this account: its scopes' states and times, read now.")
    var tokenAccount: String?

    func validate() throws {
        if (tokenService == nil) != (tokenAccount == nil) { throw ValidationError("give both --token-service and --token-account, or neither") }
        if tokenService != nil && !scopes.isEmpty { throw ValidationError("give --scope or a stored token (--token-service), not both") }
    }

    func token(_ store: StoreOptions) throws -> TokenView? {
        if let tokenService, let tokenAccount {
            let keeper = makeKeeper(try store.openStore())
            let token = try loadToken(keeper, try TokenLocation.parse(["--service", tokenService, "--account", tokenAccount]))
            return TokenView(token: token, at: keeper.now)
        }
        if scopes.isEmpty { return nil }
        return TokenView(granted: Set(try parseScopes(scopes)))
    }
}

/// A JSON string literal (the policy library's writer).
package func jsonString(_ text: String) -> String { JSONOutput.string(text) }

extension KeysmithCommand.PolicyCommand {
    /// Validates policies, a schema and entities.
    struct Validate: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "validate", 
            abstract: "Check policy files (and entities) against a schema; list every problem with file:line:column; exit 64 on any.")

        @OptionGroup var inputs: PolicyInputs

        @Flag(help: "Print the result as one JSON document.")
        var json = false

        func run() throws {
            do {
                let loaded = try inputs.load()
                if json {
                    print("{\"valid\":true,\"policies\":\(loaded.policies.ids.count),\"problems\":[]}")
                } else {
                    print("valid: \(loaded.policies.ids.count) policies\(loaded.schema == nil ? " (no schema: syntax only)" : ", checked against the schema")")
                }
            } catch let failure as CommandFailure where json && failure.exitCode == ExitCode(64) {
                print("{\"valid\":false}")
                throw failure
            }
        }
    }

    /// Decides one request given as options.
    struct Check: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "check", 
            abstract: "Decide one request; exit 0 when allowed, 3 when denied, 64 when the request is invalid.",
            discussion: """
                The principal's token comes from --scope, or from a stored token (--token-service and \
                --token-account), read at this instant: revoke a scope and the next check changes. \
                Entities are written Type::"id" (quote them for the shell); --action takes a bare name.
                """
        )

        @OptionGroup var store: StoreOptions
        @OptionGroup var inputs: PolicyInputs
        @OptionGroup var tokenOptions: TokenOptions

        @Option(help: ArgumentHelp("The principal, as Type::\"id\".", valueName: "entity"))
        var principal: String

        @Option(help: ArgumentHelp("The action: a name (Action::\"name\") or a full entity.", valueName: "action"))
        var action: String

        @Option(help: ArgumentHelp("The resource, as Type::\"id\".", valueName: "entity"))
        var resource: String

        @Option(help: ArgumentHelp("The request's context, as a JSON object.", valueName: "json"))
        var context: String?

        @Flag(help: "Say why: the deciding policies, errors, the clauses that failed with the scopes they name, and what would allow a denial.")
        var explain = false

        @Flag(help: "Print the decision as one JSON document (with what would allow a denial).")
        var json = false

        func run() throws {
            let loaded = try inputs.load()
            var request = AuthorizationRequest(principal: try parseEntity(principal, what: "--principal"),
                                               action: try parseEntity(action, what: "--action", bareType: "Action"),
                                               resource: try parseEntity(resource, what: "--resource"))
            if let context {
                do {
                    request.context = try AuthorizationRequest.context(json: Array(context.utf8), file: "--context")
                } catch {
                    try reportProblems(error.problems)
                }
            }
            let decider = loaded.decider
            let location = SourceLocation(file: "request", line: 1, column: 1)
            // The request is checked before the token is read (a bad request never opens the store).
            do { try decider.validate(request, location: location) } catch { try reportProblems(error.problems) }
            request.token = try tokenOptions.token(store)
            let answer: PolicyDecider.Answer
            do { answer = try decider.decide(request, location: location, explaining: explain || json) } catch { try reportProblems(error.problems); return }
            let decision = answer.decision
            if json {
                print(answer.json)
            } else if explain {
                print(decision.description)
                for remedy in answer.remedies ?? [] { print("  would allow: \(remedy)") }
            } else {
                print(decision.outcome)
            }
            if !decision.isAllowed { throw CommandFailure(message: "denied", exitCode: ExitCode(3)) }
        }
    }

    /// Decides JSON-lines requests from standard input, as they arrive.
    struct Decide: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "decide", 
            abstract: "Decide requests read as JSON lines on standard input, answering each line as it arrives.",
            discussion: """
                A line is {"principal":…,"action":…,"resource":…,"context":{…}} and may add "scopes":[…] \
                (the token's granted scopes; without it the principal has no token). Each answer is one \
                JSON line (docs/cli.md); an invalid line gets {"line":N,"error":…,"problems":[…]} and the \
                command exits 64 at the end. Output is flushed whenever no more input is waiting.
                """
        )

        @OptionGroup var inputs: PolicyInputs

        @Flag(help: "Add what would allow each denial (slower).")
        var explain = false

        func run() throws {
            // A service's long-running decider stops when asked, whoever started it.
            Terminal.unblockTerminationSignals()
            let decider = try inputs.load().decider
            var pending: [UInt8] = []
            var output: [UInt8] = []
            var lineNumber = 0
            var bad = 0
            var buffer = [UInt8](repeating: 0, count: 1 << 16)
            var reader = DecideLineReader()
            func answer(_ line: ArraySlice<UInt8>) {
                lineNumber += 1
                if line.allSatisfy({ $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\r") || $0 == UInt8(ascii: "\t") }) { return }
                do {
                    let request = try reader.request(Array(line), line: lineNumber)
                    try decider.decide(request, location: SourceLocation(file: "stdin", line: lineNumber, column: 1), explaining: explain)
                        .appendJSON(to: &output)
                } catch {
                    bad += 1
                    output += Array("{\"line\":\(lineNumber),\"error\":\"invalid request\",\"problems\":[".utf8)
                    output += Array(error.problems.map { jsonString($0.description) }.joined(separator: ",").utf8)
                    output += Array("]}".utf8)
                }
                output.append(UInt8(ascii: "\n"))
            }
            // A line longer than 1 MiB is answered with an error and skipped to its end; the
            // lines after it (in the same read or later ones) are answered as usual.
            let longest = 1 << 20
            var skipping = false
            func tooLong() {
                bad += 1
                lineNumber += 1
                output += Array("{\"line\":\(lineNumber),\"error\":\"the line is longer than 1 MiB\"}\n".utf8)
            }
            while true {
                let count = Terminal.read(fd: .standardInput, into: &buffer)
                if count <= 0 { break }
                var chunk = buffer[0..<count]
                if skipping {
                    guard let newline = chunk.firstIndex(of: UInt8(ascii: "\n")) else { continue }
                    skipping = false
                    chunk = chunk[(newline + 1)...]
                }
                // The bytes kept from earlier reads hold no newline: search only the new ones
                // (a line arriving a few bytes at a time is not searched again and again).
                let searched = pending.count
                pending += chunk
                var start = pending.startIndex
                var from = pending.startIndex + searched
                while let newline = pending[from...].firstIndex(of: UInt8(ascii: "\n")) {
                    if newline - start > longest { tooLong() } else { answer(pending[start..<newline]) }
                    start = newline + 1
                    from = start
                }
                pending.removeSubrange(pending.startIndex..<start)
                if pending.count > longest {
                    tooLong()
                    pending.removeAll()
                    skipping = true
                }
                Terminal.write(output, to: .standardOutput)
                output.removeAll(keepingCapacity: true)
            }
            if !pending.isEmpty { answer(pending[...]) }
            Terminal.write(output, to: .standardOutput)
            if bad > 0 { throw CommandFailure(message: "\(bad) request line(s) were invalid", exitCode: ExitCode(64)) }
        }
    }

    /// Lists what a principal may do.
    struct Permitted: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "permitted", 
            abstract: "List every action on every resource in the entities that a principal is allowed, with the permits that allow it.")

        @OptionGroup var store: StoreOptions
        @OptionGroup var inputs: PolicyInputs
        @OptionGroup var tokenOptions: TokenOptions

        @Option(help: ArgumentHelp("The principal, as Type::\"id\".", valueName: "entity"))
        var principal: String

        @Option(help: ArgumentHelp("The context of every request, as a JSON object.", valueName: "json"))
        var context: String?

        @Flag(help: "Print one JSON document.")
        var json = false

        func run() throws {
            let loaded = try inputs.load()
            let who = try parseEntity(principal, what: "--principal")
            var contextValues: [String: PolicyValue] = [:]
            if let context {
                do { contextValues = try AuthorizationRequest.context(json: Array(context.utf8), file: "--context") } catch { try reportProblems(error.problems) }
            }
            let permissions: [PermittedAction]
            do {
                permissions = try loaded.policies.permissions(of: who, token: try tokenOptions.token(store), context: contextValues,
                                                              entities: loaded.entities, schema: loaded.schema)
            } catch let error as PolicyDiagnostics {
                try reportProblems(error.problems)
                return
            }
            if json {
                print("{\"principal\":\(jsonString(who.description)),\"permitted\":[" + permissions.map {
                    "{\"action\":\(jsonString($0.action.description)),\"resource\":\(jsonString($0.resource.description)),\"policies\":["
                        + $0.policies.map(jsonString).joined(separator: ",") + "]}"
                }.joined(separator: ",") + "]}")
            } else if permissions.isEmpty {
                print("\(who) may do nothing to these entities")
            } else {
                for permission in permissions {
                    // Each field escaped on its own: ids are anybody's text, tabs separate the fields.
                    print("\(OneLine.escaped(permission.action.id))\t\(OneLine.escaped(permission.resource.description))\t"
                          + "(\(OneLine.escaped(permission.policies.joined(separator: ", "))))")
                }
            }
        }
    }

    /// Runs a policy test file.
    struct Test: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "test", 
            abstract: "Run a policy test file: requests with the decisions (and deciding policies) they must get; exit 3 if any fails.")

        @Argument(help: "The test file (docs/policy-language.md, \"Testing policies\").")
        var file: String

        @Flag(help: "Print one JSON document.")
        var json = false

        func run() throws {
            let text = try readText(file, "test file")
            let suite: PolicyTestSuite
            do {
                suite = try PolicyTestSuite(json: Array(text.utf8), file: file)
            } catch {
                try reportProblems(error.problems)
                return
            }
            let base = file.contains("/") ? String(file[...file.lastIndex(of: "/")!]) : ""
            func resolve(_ path: String) -> String { path.hasPrefix("/") ? path : base + path }
            var inputs = PolicyInputs()
            inputs.policyFiles = suite.policyFiles.map(resolve)
            inputs.schema = suite.schemaFile.map(resolve)
            inputs.entities = suite.entitiesFile.map(resolve)
            let loaded = try inputs.load()
            let outcomes = suite.run(loaded.policies, entities: loaded.entities, schema: loaded.schema)
            let failed = outcomes.filter { $0.failure != nil }
            if json {
                print("{\"passed\":\(outcomes.count - failed.count),\"failed\":\(failed.count),\"failures\":[" + failed.map {
                    "{\"name\":\(jsonString($0.name)),\"line\":\($0.line),\"failure\":\(jsonString($0.failure!))}"
                }.joined(separator: ",") + "]}")
            } else {
                for outcome in failed { print(OneLine.escaped("FAIL \(outcome.name) (\(file):\(outcome.line)): \(outcome.failure!)")) }
                print("\(outcomes.count - failed.count) passed, \(failed.count) failed")
            }
            if !failed.isEmpty { throw CommandFailure(message: "\(failed.count) policy test(s) failed", exitCode: ExitCode(3)) }
        }
    }

    /// Converts policies between the text and Cedar's JSON policy format.
    struct Format: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "format", 
            abstract: "Print policies (text or Cedar's JSON policy format) as text or as JSON.")

        enum Form: String, ExpressibleByArgument, CaseIterable {
            case cedar, json
        }

        @Option(name: .customLong("policies"), help: ArgumentHelp("A policy file, text or JSON (repeatable).", valueName: "file"))
        var policyFiles: [String] = []

        @Option(help: "The form to print: cedar (text) or json (a Cedar JSON policy set).")
        var to: Form = .cedar

        func validate() throws {
            if policyFiles.isEmpty { throw ValidationError("give at least one --policies FILE") }
        }

        func run() throws {
            var files: [(String, String)] = []
            for file in policyFiles { files.append((file, try readText(file, "policy file"))) }
            do {
                let policies = try Policies(files: files)
                Terminal.write(Array((to == .json ? policies.json + "\n" : policies.formatted).utf8), to: .standardOutput)
            } catch {
                try reportProblems(error.problems)
            }
        }
    }

    /// Prints the news-groups example.
    struct Example: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "example", 
            abstract: "Print the news-groups example: its policies (docs/examples/news-groups/policies.cedar), or its schema or entities.")

        @Flag(help: "Print its schema instead.")
        var schema = false

        @Flag(help: "Print its entities instead.")
        var entities = false

        func validate() throws {
            if schema && entities { throw ValidationError("give --schema or --entities, not both") }
        }

        func run() {
            let text = schema ? NewsGroupsExample.schema : entities ? NewsGroupsExample.entities : NewsGroupsExample.policies
            Terminal.write(Array((text + "\n").utf8), to: .standardOutput)
        }
    }
}
