import Foundation
import Testing

@Suite("the keysmith command: policies")
struct PolicyCommandTests {
    static let examples = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("docs/examples/news-groups").path
    static let policies = examples + "/policies.cedar"
    static let schema = examples + "/schema.cedarschema"
    static let entities = examples + "/entities.json"
    static let inputs = ["--policies", policies, "--schema", schema, "--entities", entities]

    /// A scratch keysmith whose vault (unlocked by a keyfile) holds alice's token for the
    /// service `news`, granting groups:read and posts:write (its access token is
    /// `a-secret-access-token`, which no output may show).
    static func keysmithWithAlicesToken() throws -> Keysmith {
        var keysmith = try Keysmith()
        keysmith.environment["KEYSMITH_KEYFILE"] = keysmith.keyfile
        do {
            try keysmith.run(["init"])
            try keysmith.run(["token", "import", "--service", "news", "--account", "alice"],
                             stdin: #"{"access_token":"a-secret-access-token","token_type":"Bearer","scope":"groups:read posts:write"}"#)
        } catch {
            keysmith.cleanup()
            throw error
        }
        return keysmith
    }

    @Test("the built-in example is docs/examples/news-groups/, byte for byte, and validates")
    func example() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        #expect(try keysmith.run(["policy", "example"]).stdout == (try String(contentsOfFile: Self.policies, encoding: .utf8)))
        #expect(try keysmith.run(["policy", "example", "--schema"]).stdout == (try String(contentsOfFile: Self.schema, encoding: .utf8)))
        #expect(try keysmith.run(["policy", "example", "--entities"]).stdout == (try String(contentsOfFile: Self.entities, encoding: .utf8)))
        let valid = try keysmith.run(["policy", "validate"] + Self.inputs)
        #expect(valid.status == 0)
        #expect(valid.stdout == "valid: 7 policies, checked against the schema\n")
        let json = try keysmith.run(["policy", "validate", "--json"] + Self.inputs)
        #expect(json.stdout == "{\"valid\":true,\"policies\":7,\"problems\":[]}\n")
    }

    @Test("check decides one request, explains it with what would allow it, and exits 3 on a denial")
    func check() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        let bob = ["policy", "check"] + Self.inputs + ["--principal", #"User::"bob""#, "--action", "delete", "--resource", #"Group::"g1""#]
        let allowed = try keysmith.run(bob + ["--scope", "posts:delete", "--explain"])
        #expect(allowed.status == 0)
        #expect(allowed.stdout == "allow: permitted by admin-delete\n")
        let denied = try keysmith.run(bob + ["--scope", "groups:read", "--json"])
        #expect(denied.status == 3)
        #expect(denied.stdout.contains(#""decision":"deny","determining":[{"id":"scope-delete","effect":"forbid""#))
        #expect(denied.stdout.contains(#""wouldAllow":[{"grant":["posts:delete"]}]"#))
        #expect(denied.stdout.split(separator: "\n").count == 1)
        let explained = try keysmith.run(bob + ["--scope", "groups:read", "--explain"])
        #expect(explained.stdout.contains("posts:delete is not in the token"))
        #expect(explained.stdout.contains("would allow: grant posts:delete"))
        let visitor = ["policy", "check"] + Self.inputs + ["--principal", #"Anonymous::"visitor""#, "--action", "browse"]
        #expect(try keysmith.run(visitor + ["--resource", #"Group::"g1""#]).status == 3)
        #expect(try keysmith.run(visitor + ["--resource", #"Group::"g2""#]).status == 0)
        // A member (not an admin) who lacks the role: what would allow it is membership.
        let alice = try keysmith.run(["policy", "check"] + Self.inputs + ["--principal", #"User::"alice""#, "--action", "delete",
                                                                          "--resource", #"Group::"g1""#, "--scope", "posts:delete", "--explain"])
        #expect(alice.status == 3)
        #expect(alice.stdout.contains("admin-delete"))
    }

    @Test("a mistyped request is an error (exit 64), never a decision")
    func invalidRequests() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        let base = ["policy", "check"] + Self.inputs + ["--principal", #"User::"bob""#, "--resource", #"Group::"g1""#]
        let typo = try keysmith.run(base + ["--action", "delet"])
        #expect(typo.status == 64)
        #expect(typo.stderr.contains("did you mean delete?"))
        #expect(typo.stdout.isEmpty)
        let context = try keysmith.run(base + ["--action", "delete", "--context", #"{"archived":"true"}"#])
        #expect(context.status == 64)
        #expect(context.stderr.contains("context.archived is not declared"))
        let duplicate = try keysmith.run(base + ["--action", "delete", "--context", #"{"a":1,"a":2}"#])
        #expect(duplicate.status == 64)
        let wrongType = try keysmith.run(["policy", "check"] + Self.inputs + ["--principal", #"Group::"g1""#, "--resource", #"Group::"g1""#, "--action", "post"])
        #expect(wrongType.status == 64)
        let badEntity = try keysmith.run(base + ["--action", "delete", "--principal", "bob"])
        #expect(badEntity.status == 64)
        #expect(badEntity.stderr.contains("--principal is not an entity"))
        // Which part of an entity is wrong is said: a type with a look-alike letter (a Kelvin
        // sign for K) is shown escaped; an id whose quote is not escaped is the id's fault.
        let lookAlike = try keysmith.run(base + ["--action", "delete", "--resource", "\u{212A}ey::\"42\""])
        #expect(lookAlike.status == 64 && lookAlike.stdout.isEmpty)
        #expect(lookAlike.stderr.contains(#"--resource has the type "\u{212A}ey", which is not a type name"#))
        let reserved = try keysmith.run(base + ["--action", "delete", "--resource", #"if::"x""#])
        #expect(reserved.stderr.contains(#"--resource has the type "if", which is not a type name"#))
        let badID = try keysmith.run(base + ["--action", "delete", "--resource", #"Group::"g"1""#])
        #expect(badID.status == 64 && badID.stderr.contains("--resource has an id that is not a quoted string"))
        // A line of `policy decide` says the same about its fields.
        let line = #"{"principal":"User::\"bob\"","action":"Action::\"delete\"","resource":"\#u{212A}ey::\"42\""}"#
        let decided = try keysmith.run(["policy", "decide"] + Self.inputs, stdin: line + "\n")
        #expect(decided.status == 64)
        #expect(decided.stdout.contains(#"the resource has the type \"\\u{212A}ey\", which is not a type name"#))
    }

    @Test("check reads a stored token, so a revocation changes the next decision, and says when it was revoked")
    func checkWithToken() throws {
        let keysmith = try Self.keysmithWithAlicesToken()
        defer { keysmith.cleanup() }
        let request = ["policy", "check"] + Self.inputs + ["--token-service", "news", "--token-account", "alice",
                                                           "--principal", #"User::"alice""#, "--action", "post", "--resource", #"Group::"g1""#, "--explain"]
        #expect(try keysmith.run(request).stdout == "allow: permitted by member-browse-post\n")
        try keysmith.run(["token", "revoke", "--service", "news", "--account", "alice", "posts:write"])
        let after = try keysmith.run(request)
        #expect(after.status == 3)
        #expect(after.stdout.hasPrefix("deny: forbidden by scope-post\n"))
        #expect(after.stdout.contains("posts:write is revoked since 20"))
        #expect(!after.output.contains("a-secret-access-token"))
    }

    @Test("a decision's JSON (check --json, decide --explain) is one document per answer with every field escaped: deciding policies, errors with where, unmet clauses with each scope's state and time, what would allow")
    func decisionDocuments() throws {
        let keysmith = try Self.keysmithWithAlicesToken()
        defer { keysmith.cleanup() }
        try keysmith.run(["token", "revoke", "--service", "news", "--account", "alice", "posts:write"])
        // A file name and a policy id that must be escaped (a quote, a backslash, U+2028).
        let file = keysmith.directory + "/odd \"name\" \\ \u{2028}.cedar"
        try #"""
            @id("needs \"write\"") forbid (principal, action == Action::"post", resource)
            unless { context has token && context.token.granted.contains("posts:write") };
            @id("errs") permit (principal, action, resource) when { principal.level > 3 };
            @id("posters") permit (principal, action == Action::"post", resource);
            """#.write(toFile: file, atomically: true, encoding: .utf8)
        func document(_ line: Substring) throws -> [String: Any] {
            #expect(!line.unicodeScalars.contains { $0.value < 0x20 || $0 == "\u{2028}" || $0 == "\u{2029}" })
            return try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        }
        func check(_ answer: [String: Any], tokenTimes: Bool) throws {
            #expect(answer["decision"] as? String == "deny")
            let determining = try #require(answer["determining"] as? [[String: Any]])
            #expect(determining.count == 1)
            #expect(determining.first?["id"] as? String == #"needs "write""#)
            #expect(determining.first?["effect"] as? String == "forbid")
            #expect(determining.first?["file"] as? String == file)
            #expect(determining.first?["line"] as? Int == 1 && determining.first?["column"] as? Int == 24)
            let errors = try #require(answer["errors"] as? [[String: Any]])
            #expect(errors.count == 1)
            #expect(errors.first?["policy"] as? String == "errs")
            #expect(errors.first?["kind"] as? String == "missingEntity")
            #expect((errors.first?["message"] as? String)?.contains("level") == true)
            #expect(errors.first?["file"] as? String == file && errors.first?["line"] as? Int == 3 && errors.first?["column"] as? Int == 57)
            let unmet = try #require(answer["unmet"] as? [[String: Any]])
            let clause = try #require(unmet.first { $0["policy"] as? String == #"needs "write""# })
            #expect(clause["clause"] as? String == "unless" && clause["value"] as? Bool == false)
            #expect(clause["text"] as? String == #"context has token && context.token.granted.contains("posts:write")"#)
            #expect(clause["file"] as? String == file && clause["line"] as? Int == 2 && clause["column"] as? Int == 10)
            let scope = try #require((clause["scopes"] as? [[String: Any]])?.first)
            #expect(scope["scope"] as? String == "posts:write")
            if tokenTimes {
                #expect(scope["state"] as? String == "revoked")
                let changedAt = try #require(scope["changedAt"] as? String)
                #expect(try Date(changedAt, strategy: .iso8601) > Date(timeIntervalSince1970: 1_700_000_000))
                #expect(scope["reason"] is String)
            } else {
                #expect(scope["state"] is NSNull && scope["changedAt"] is NSNull && scope["reason"] is NSNull)
            }
            let wouldAllow = try #require(answer["wouldAllow"] as? [[String: Any]])
            #expect(wouldAllow.contains { ($0["grant"] as? [String])?.contains("posts:write") == true })
        }
        let checked = try keysmith.run(["policy", "check", "--policies", file, "--token-service", "news", "--token-account", "alice",
                                        "--principal", #"User::"alice""#, "--action", "post", "--resource", #"Group::"g1""#, "--json"])
        #expect(checked.status == 3)
        let checkedLines = checked.stdout.split(separator: "\n")
        #expect(checkedLines.count == 1)
        try check(try document(try #require(checkedLines.first)), tokenTimes: true)
        #expect(!checked.output.contains("a-secret-access-token"))
        let line = #"{"principal":"User::\"alice\"","action":"Action::\"post\"","resource":"Group::\"g1\"","scopes":["groups:read"]}"#
        let decided = try keysmith.run(["policy", "decide", "--policies", file, "--explain"], stdin: line + "\n" + line + "\n")
        #expect(decided.status == 0)
        let decidedLines = decided.stdout.split(separator: "\n")
        #expect(decidedLines.count == 2)
        for answer in decidedLines { try check(try document(answer), tokenTimes: false) }
        // An allowed line: `wouldAllow` is [] under --explain (the document check --json
        // prints), and absent without it.
        let allowed = #"{"principal":"User::\"alice\"","action":"Action::\"post\"","resource":"Group::\"g1\"","scopes":["posts:write"]}"#
        for (flags, expected) in [(["--explain"], true), ([], false)] {
            let answered = try keysmith.run(["policy", "decide", "--policies", file] + flags, stdin: allowed + "\n")
            let answer = try document(try #require(answered.stdout.split(separator: "\n").first))
            #expect(answered.status == 0 && answer["decision"] as? String == "allow", "\(answered.output)")
            if expected { #expect((answer["wouldAllow"] as? [Any])?.isEmpty == true, "\(answer)") } else { #expect(answer["wouldAllow"] == nil) }
        }
    }

    @Test("check gives conditions the stored token's scope times (context.token.since); bare --scope has none")
    func checkWithScopeTimes() throws {
        var keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        keysmith.environment["KEYSMITH_KEYFILE"] = keysmith.keyfile
        try keysmith.run(["init"])
        try keysmith.run(["token", "import", "--service", "news", "--account", "alice"],
                         stdin: #"{"access_token":"a-secret-access-token","token_type":"Bearer","scope":"posts:write"}"#)
        let file = keysmith.directory + "/since.cedar"
        try """
            @id("granted-this-century") permit (principal, action, resource)
            when { context has token && context.token.since has "posts:write" && context.token.since["posts:write"] > datetime("2000-01-01") };
            """.write(toFile: file, atomically: true, encoding: .utf8)
        let base = ["policy", "check", "--policies", file, "--principal", #"User::"alice""#, "--action", "post", "--resource", #"Group::"g1""#]
        #expect(try keysmith.run(base + ["--token-service", "news", "--token-account", "alice", "--explain"]).stdout == "allow: permitted by granted-this-century\n")
        let bare = try keysmith.run(base + ["--scope", "posts:write"])
        #expect(bare.status == 3 && bare.stdout.hasPrefix("deny"))
    }

    @Test("validate lists every problem of every file with file:line:column; a missing file is not found")
    func validate() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        let file = keysmith.directory + "/bad.cedar"
        try """
            permit (principal, action == Action::"delet", resource);
            permit (principal is User, action == Action::"post", resource) when { principal.super_admn };
            forbid (principal, action, resource) when { resource.public == "yes" };
            """.write(toFile: file, atomically: true, encoding: .utf8)
        let result = try keysmith.run(["policy", "validate", "--policies", file, "--schema", Self.schema])
        #expect(result.status == 64)
        #expect(result.stderr.contains("bad.cedar:1:20: the action Action::\"delet\" is not declared in the schema (did you mean delete?)"))
        #expect(result.stderr.contains("bad.cedar:2:71: entity of type User has no attribute super_admn (did you mean super_admin?)"))
        #expect(result.stderr.contains("bad.cedar:3:45:"))
        #expect(try keysmith.run(["policy", "validate", "--policies", keysmith.directory + "/none.cedar"]).status == 2)
        let json = try keysmith.run(["policy", "validate", "--json", "--policies", file, "--schema", Self.schema])
        #expect(json.stdout == "{\"valid\":false}\n")
        #expect(json.status == 64)
    }

    @Test("validate reports the type errors of every file that reads in the same run as a syntax error in another file and an id used twice (those hid them)")
    func validateReportsEverythingAtOnce() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        let files = [
            ("typed.cedar", """
                @id("x") permit (principal is User, action == Action::"post", resource) when { principal.super_admn };
                permit (principal, action == Action::"delet", resource);
                """),
            ("broken.cedar", "permit (principal, action, resource) when { principal.super_admin &&& true };"),
            ("twice.cedar", #"@id("x") permit (principal, action, resource);"#),
        ]
        for (name, text) in files { try text.write(toFile: keysmith.directory + "/" + name, atomically: true, encoding: .utf8) }
        let result = try keysmith.run(["policy", "validate", "--schema", Self.schema] + files.flatMap { ["--policies", keysmith.directory + "/" + $0.0] })
        #expect(result.status == 64)
        #expect(result.stderr.contains("typed.cedar:1:"), "\(result.stderr)")
        #expect(result.stderr.contains("has no attribute super_admn"), "\(result.stderr)")
        #expect(result.stderr.contains("typed.cedar:2:") && result.stderr.contains("Action::\"delet\" is not declared"), "\(result.stderr)")
        #expect(result.stderr.contains("broken.cedar:1:"), "\(result.stderr)")
        #expect(result.stderr.contains("twice.cedar:1:") && result.stderr.contains("is used twice"), "\(result.stderr)")
        #expect(result.stderr.contains("keysmith: 4 problem(s)"), "\(result.stderr)")
        // Within one file too: an id used twice, and a syntax error in one policy, leave the
        // file's other policies type-checked.
        try """
            @id("y") permit (principal is User, action == Action::"post", resource) when { principal.super_admn };
            @id("y") permit (principal, action == Action::"delet", resource);
            permit (principal, action, resource) when { principal.super_admin && };
            """.write(toFile: keysmith.directory + "/one.cedar", atomically: true, encoding: .utf8)
        let one = try keysmith.run(["policy", "validate", "--schema", Self.schema, "--policies", keysmith.directory + "/one.cedar"])
        #expect(one.status == 64)
        for expected in ["one.cedar:2:10: the policy id \"y\" is used twice", "super_admn", "Action::\"delet\" is not declared", "one.cedar:3:", "4 problem(s)"] {
            #expect(one.stderr.contains(expected), "\(expected): \(one.stderr)")
        }
    }

    @Test("a policy nested deeper than 200 levels is a syntax error at file:line:column for every command that reads policies (a chain of 100,000 || crashed them, 4,000 already did)")
    func deepPolicies() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        for (index, separator) in ["||", "."].enumerated() {
            let file = keysmith.directory + "/deep\(index).cedar"
            let condition = separator == "." ? "context" + String(repeating: ".a", count: 100_000)
                : Array(repeating: "true", count: 100_000).joined(separator: " || ")
            try "@id(\"deep\")\npermit (principal, action, resource) when { \(condition) };\n".write(toFile: file, atomically: true, encoding: .utf8)
            // The error points just after the part that makes the 201st level: the `||` after the
            // 201st term, the `.` after the 200th member (`context` is the first level).
            let column = separator == "." ? 45 + 7 + 200 * 2 : 45 + 200 * 8 + 5
            let commands = [["validate"], ["format", "--to", "json"], ["decide"], ["permitted", "--principal", #"User::"alice""#],
                            ["check", "--principal", #"User::"alice""#, "--action", "view", "--resource", #"Photo::"42""#]]
            for command in commands {
                let result = try keysmith.run(["policy"] + command + ["--policies", file], stdin: "")
                #expect(result.status == 64, "\(command)")
                #expect(result.stderr.contains("deep\(index).cedar:2:\(column): the expression nests deeper than 200 levels"), "\(command): \(result.stderr)")
            }
        }
    }

    @Test("an input file larger than 64 MiB is refused (exit 64) after reading at most that much: /dev/zero given as policies, schema, entities or a test's policies grew to 10 GB")
    func largeInputFiles() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        let test = keysmith.directory + "/t.json"
        try #"{"policies":["/dev/zero"],"cases":[]}"#.write(toFile: test, atomically: true, encoding: .utf8)
        let runs: [([String], String)] = [
            (["validate", "--policies", "/dev/zero"], "the policy file /dev/zero is larger than 64 MiB"),
            (["validate", "--policies", Self.policies, "--schema", "/dev/urandom"], "the schema /dev/urandom is larger than 64 MiB"),
            (["validate", "--policies", Self.policies, "--entities", "/dev/zero"], "the entities file /dev/zero is larger than 64 MiB"),
            (["test", test], "the policy file /dev/zero is larger than 64 MiB"),
        ]
        for (arguments, message) in runs {
            let result = try keysmith.run(["policy"] + arguments)
            #expect(result.status == 64, "\(arguments)")
            #expect(result.stderr.contains(message), "\(arguments): \(result.stderr)")
        }
    }

    @Test("decide answers each line as it arrives, and flags invalid lines")
    func decide() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Keysmith.binary)
        process.arguments = ["policy", "decide"] + Self.inputs
        let input = Pipe(), output = Pipe(), errors = Pipe()
        process.standardInput = input
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        // One line in, one answer out, while standard input stays open.
        input.fileHandleForWriting.write(Data(#"{"principal":"Anonymous::\"visitor\"","action":"Action::\"browse\"","resource":"Group::\"g2\""}"#.utf8 + [10]))
        var first = Data()
        while !first.contains(10) {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            first += chunk
        }
        #expect(String(decoding: first, as: UTF8.self).hasPrefix(#"{"decision":"allow","determining":[{"id":"browse-public""#))
        let rest = """
            {"principal":"User::\\"root\\"","action":"Action::\\"delete\\"","resource":"Group::\\"g1\\"","scopes":["posts:delete"]}
            not json
            {"principal":"User::\\"root\\"","action":"Action::\\"delete\\"","resource":"Group::\\"g1\\"","action":"Action::\\"browse\\""}
            {"principal":"User::\\"root\\"","action":"Action::\\"delet\\"","resource":"Group::\\"g1\\""}
            {"principal":"Usr::root","action":"Action::\\"post\\"","resource":"Group::\\"g1\\"","scopes":"posts:write"}

            """
        input.fileHandleForWriting.write(Data(rest.utf8))
        try input.fileHandleForWriting.close()
        let remaining = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        let lines = remaining.split(separator: "\n").map(String.init)
        try #require(lines.count == 5, "\(lines)")
        #expect(lines[0].hasPrefix(#"{"decision":"allow","determining":[{"id":"super-admin""#))
        #expect(lines[1].hasPrefix(#"{"line":3,"error":"invalid request""#))
        #expect(lines[2].contains("appears twice"))
        #expect(lines[3].contains("did you mean delete?"))
        // Every problem of a line at once: the principal and the scopes.
        #expect(lines[4].contains("the principal is not an entity") && lines[4].contains("scopes must be an array"), "\(lines[4])")
        #expect(process.terminationStatus == 64)
    }

    /// `keysmith policy decide` on the news-groups example, its standard input and output piped,
    /// with a watchdog that SIGKILLs it after 60 s (a command that stops answering fails the
    /// test instead of hanging it; SIGKILL because a process started from the test runner's
    /// threads may inherit SIGTERM blocked). Cancel the watchdog when done.
    static func startDecide() throws -> (process: Process, input: Pipe, output: Pipe, watchdog: DispatchWorkItem) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Keysmith.binary)
        process.arguments = ["policy", "decide"] + inputs
        let input = Pipe(), output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let watchdog = DispatchWorkItem { kill(process.processIdentifier, SIGKILL) }
        DispatchQueue.global().asyncAfter(deadline: .now() + 60, execute: watchdog)
        return (process, input, output, watchdog)
    }

    /// Reads until `lines` newlines have come (or the output ends).
    static func read(lines: Int, from output: Pipe) -> Data {
        var received = Data()
        while received.count(where: { $0 == 10 }) < lines {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            received += chunk
        }
        return received
    }

    @Test("decide answers a line over 1 MiB with an error and goes on: the lines sent with it are answered at once, each with its own number; a line of exactly 1 MiB is decided")
    func decideLongLines() throws {
        let (process, input, output, watchdog) = try Self.startDecide()
        let visitor = #"{"principal":"Anonymous::\"visitor\"","action":"Action::\"browse\"","resource":"Group::\"g2\""}"#
        let atLimit = visitor + String(repeating: " ", count: (1 << 20) - visitor.utf8.count)
        let lines = [atLimit, atLimit + " ", String(repeating: "x", count: 2 << 20), visitor, visitor, visitor]
        input.fileHandleForWriting.write(Data((lines.joined(separator: "\n") + "\n").utf8))
        // Six answers while standard input stays open.
        var received = Self.read(lines: 6, from: output)
        try input.fileHandleForWriting.close()
        received += output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        watchdog.cancel()
        let answers = String(decoding: received, as: UTF8.self).split(separator: "\n").map(String.init)
        #expect(answers.count == 6)
        guard answers.count == 6 else { return }
        for index in [0, 3, 4, 5] { #expect(answers[index].hasPrefix(#"{"decision":"allow","determining":[{"id":"browse-public""#), "\(index)") }
        #expect(answers[1] == #"{"line":2,"error":"the line is longer than 1 MiB"}"#)
        #expect(answers[2] == #"{"line":3,"error":"the line is longer than 1 MiB"}"#)
        #expect(process.terminationStatus == 64)
    }

    @Test("decide stops on SIGTERM while it waits for input, even started from a thread that blocks SIGTERM (the test runner's do)")
    func decideStopsOnSIGTERM() throws {
        let (process, input, output, watchdog) = try Self.startDecide()
        // One answer first: it is reading, with its policies loaded.
        input.fileHandleForWriting.write(Data(#"{"principal":"Anonymous::\"visitor\"","action":"Action::\"browse\"","resource":"Group::\"g2\""}"#.utf8 + [10]))
        #expect(!Self.read(lines: 1, from: output).isEmpty)
        kill(process.processIdentifier, SIGTERM)
        process.waitUntilExit()
        watchdog.cancel()
        #expect(process.terminationReason == .uncaughtSignal)
        #expect(process.terminationStatus == SIGTERM)
        try? input.fileHandleForWriting.close()
    }

    @Test("permitted lists what a principal may do, with the permits")
    func permitted() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        let result = try keysmith.run(["policy", "permitted"] + Self.inputs + ["--principal", #"User::"alice""#, "--scope", "groups:read posts:write"])
        #expect(result.status == 0)
        #expect(result.stdout == """
            browse\tGroup::"g1"\t(member-browse-post)
            browse\tGroup::"g2"\t(browse-public)
            post\tGroup::"g1"\t(member-browse-post)

            """)
        let json = try keysmith.run(["policy", "permitted", "--json"] + Self.inputs + ["--principal", #"User::"alice""#])
        #expect(json.stdout == "{\"principal\":\"User::\\\"alice\\\"\",\"permitted\":[]}\n")
    }

    @Test("permitted decides nothing from input that disagrees with the schema: a context the actions do not declare, or mistyped, and a principal of an undeclared type, exit 64 (they listed what was allowed)")
    func permittedValidatesItsRequests() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        for (arguments, expected) in [
            (["--principal", #"User::"alice""#, "--context", #"{"mfa":"false"}"#], "context"),
            (["--principal", #"Zed::"x""#], "Zed"),
            (["--principal", #"Usr::"alice""#, "--scope", "groups:read"], "Usr"),
        ] {
            let result = try keysmith.run(["policy", "permitted"] + Self.inputs + arguments)
            #expect(result.status == 64, "\(arguments): \(result.output)")
            #expect(result.stdout.isEmpty, "nothing listed: \(result.stdout)")
            #expect(result.stderr.contains(expected), "\(result.stderr)")
        }
        // The same principal with a context as declared (news groups declare none) is answered.
        #expect(try keysmith.run(["policy", "permitted"] + Self.inputs + ["--principal", #"User::"alice""#, "--context", "{}"]).status == 0)
    }

    @Test("test runs a test file's cases and exits 3 when one fails")
    func testFile() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        for name in ["policies.cedar", "schema.cedarschema", "entities.json"] {
            try FileManager.default.copyItem(atPath: Self.examples + "/" + name, toPath: keysmith.directory + "/" + name)
        }
        let cases = """
            {"policies": ["policies.cedar"], "schema": "schema.cedarschema", "entities": "entities.json", "cases": [
              {"name": "member posts", "expect": "allow", "determining": ["member-browse-post"], "scopes": ["posts:write"],
               "request": {"principal": "User::\\"alice\\"", "action": "Action::\\"post\\"", "resource": "Group::\\"g1\\""}},
              {"name": "member deletes", "expect": "allow", "scopes": ["posts:delete"],
               "request": {"principal": "User::\\"alice\\"", "action": "Action::\\"delete\\"", "resource": "Group::\\"g1\\""}}
            ]}
            """
        try cases.write(toFile: keysmith.directory + "/tests.json", atomically: true, encoding: .utf8)
        let result = try keysmith.run(["policy", "test", keysmith.directory + "/tests.json"])
        #expect(result.status == 3)
        #expect(result.stdout.contains("FAIL member deletes (\(keysmith.directory)/tests.json:4)"))
        #expect(result.stdout.contains("1 passed, 1 failed"))
        let json = try keysmith.run(["policy", "test", "--json", keysmith.directory + "/tests.json"])
        #expect(json.stdout.hasPrefix(#"{"passed":1,"failed":1,"failures":[{"name":"member deletes","line":4"#))
    }

    @Test("format turns text into Cedar's JSON policy format and back; JSON policy files are read like text")
    func format() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        let json = try keysmith.run(["policy", "format", "--to", "json", "--policies", Self.policies])
        #expect(json.status == 0)
        #expect(json.stdout.hasPrefix(#"{"staticPolicies":{"browse-public":{"effect":"permit","principal":{"op":"All"}"#))
        let file = keysmith.directory + "/policies.json"
        try json.stdout.write(toFile: file, atomically: true, encoding: .utf8)
        let check = ["policy", "check", "--policies", file, "--schema", Self.schema, "--entities", Self.entities,
                     "--principal", #"User::"alice""#, "--action", "post", "--resource", #"Group::"g1""#]
        #expect(try keysmith.run(check + ["--scope", "posts:write", "--explain"]).stdout == "allow: permitted by member-browse-post\n")
        #expect(try keysmith.run(check).status == 3)
        let text = try keysmith.run(["policy", "format", "--policies", file])
        #expect(text.stdout.contains("@id(\"scope-post\")\nforbid (principal is User, action == Action::\"post\", resource)\nunless { context has token && context.token.granted.contains(\"posts:write\") };"))
        try #"{"staticPolicies": {"p": {"effect": "permit", "principal": {"op": "All"}, "action": {"op": "All"}, "resource": {"op": "All"}, "conditions": [{"kind": "when", "body": {"Var": "subject"}}]}}}"#
            .write(toFile: file, atomically: true, encoding: .utf8)
        let bad = try keysmith.run(["policy", "validate", "--policies", file])
        #expect(bad.status == 64)
        #expect(bad.stderr.contains("policies.json:1:175: Var must be principal, action, resource or context"))
    }
}
