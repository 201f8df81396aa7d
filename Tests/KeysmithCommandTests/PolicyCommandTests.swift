import Foundation
import Testing

@Suite("the keysmith command: policies")
struct PolicyCommandTests {
    static let example = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("docs/examples/news-groups.json").path

    @Test("the built-in example is docs/examples/news-groups.json, byte for byte, and validates")
    func example() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        let printed = try keysmith.run(["policy", "example"])
        #expect(printed.stdout == (try String(contentsOfFile: Self.example, encoding: .utf8)))
        let valid = try keysmith.run(["policy", "validate", Self.example])
        #expect(valid.status == 0)
        #expect(valid.stdout.contains("7 policies"))
    }

    @Test("check decides one request, explains it, and exits 3 on a denial")
    func check() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        let base = ["policy", "check", "--policy", Self.example, "--resource-type", "group", "--resource", "g1", "--attribute", "public=false"]
        let admin = try keysmith.run(base + ["--resource-role", "g1:admin", "--scope", "posts:delete", "--action", "delete", "--explain"])
        #expect(admin.status == 0)
        #expect(admin.stdout == "allow: admin-delete\n")
        let noScope = try keysmith.run(base + ["--resource-role", "g1:admin", "--action", "delete", "--json"])
        #expect(noScope.status == 3)
        #expect(noScope.stdout.contains(#""reasons":["scope-delete"]"#))
        let anonymous = try keysmith.run(base + ["--anonymous", "--action", "browse"])
        #expect(anonymous.status == 3)
    }

    @Test("check reads scopes from a stored token, so a revocation changes the next decision")
    func checkWithToken() throws {
        var keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        keysmith.environment["KEYSMITH_KEYFILE"] = keysmith.keyfile
        try keysmith.run(["init"])
        try keysmith.run(["token", "import", "--service", "news", "--account", "bob"],
                         stdin: #"{"access_token":"a","token_type":"Bearer","scope":"groups:read posts:write"}"#)
        let request = ["policy", "check", "--policy", Self.example, "--token-service", "news", "--token-account", "bob",
                       "--resource-role", "g1:member", "--action", "post", "--resource-type", "group", "--resource", "g1",
                       "--attribute", "public=false", "--explain"]
        #expect(try keysmith.run(request).stdout == "allow: member-browse-post\n")
        try keysmith.run(["token", "revoke", "--service", "news", "--account", "bob", "posts:write"])
        let after = try keysmith.run(request)
        #expect(after.status == 3)
        #expect(after.stdout == "deny: forbidden by scope-post\n")
    }

    @Test("validate lists every problem with its line; a missing file is not found")
    func validate() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        let file = keysmith.directory + "/bad.json"
        try """
            {"roles": ["member"],
             "actions": ["read"],
             "policies": [{"name": "p", "effect": "permit", "roles": ["guest"], "actions": ["write"]}]}
            """.write(toFile: file, atomically: true, encoding: .utf8)
        let result = try keysmith.run(["policy", "validate", file])
        #expect(result.status == 64)
        #expect(result.stderr.contains("line 3: the policy \"p\" names the undeclared role \"guest\""))
        #expect(result.stderr.contains("line 3: the policy \"p\" names the undeclared action \"write\""))
        #expect(try keysmith.run(["policy", "validate", keysmith.directory + "/none.json"]).status == 2)
    }

    @Test("decide answers JSON lines with decisions and reasons, and flags malformed lines")
    func decide() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        let input = """
            {"principal":{"anonymous":true},"action":"browse","resource":{"type":"group","id":"g1","attributes":{"public":true}}}
            {"principal":{"id":"s","roles":["super-admin"],"scopes":["posts:delete"]},"action":"delete","resource":{"type":"group","id":"g9","attributes":{"public":false}}}
            not json

            """
        let result = try keysmith.run(["policy", "decide", "--policy", Self.example], stdin: input)
        let lines = result.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == 3)
        #expect(lines[0] == #"{"basis":"permitted","decision":"allow","reasons":["browse-public"]}"#)
        #expect(lines[1] == #"{"basis":"permitted","decision":"allow","reasons":["super-admin"]}"#)
        #expect(lines[2].contains(#""line":3"#))
        #expect(result.status == 64)
    }

    @Test("test runs a test file's cases and exits 3 when one fails")
    func testFile() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        try FileManager.default.copyItem(atPath: Self.example, toPath: keysmith.directory + "/news-groups.json")
        let cases = """
            {"policy": "news-groups.json", "cases": [
              {"name": "member posts", "expected": "allow", "reasons": ["member-browse-post"],
               "request": {"principal": {"id": "u", "scopes": ["posts:write"], "resourceRoles": {"g1": ["member"]}}, "action": "post", "resource": {"type": "group", "id": "g1", "attributes": {"public": false}}}},
              {"name": "member deletes", "expected": "allow",
               "request": {"principal": {"id": "u", "scopes": ["posts:delete"], "resourceRoles": {"g1": ["member"]}}, "action": "delete", "resource": {"type": "group", "id": "g1", "attributes": {"public": false}}}}
            ]}
            """
        try cases.write(toFile: keysmith.directory + "/tests.json", atomically: true, encoding: .utf8)
        let result = try keysmith.run(["policy", "test", keysmith.directory + "/tests.json"])
        #expect(result.status == 3)
        #expect(result.stdout.contains("FAIL member deletes (line 4)"))
        #expect(result.stdout.contains("1 passed, 1 failed"))
    }
}
