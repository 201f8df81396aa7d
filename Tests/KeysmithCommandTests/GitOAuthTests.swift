import Foundation
import KeysmithTestSupport
import Testing

/// git's credential for a host bound to a provider (`provider add --git-host`) is a fresh OAuth
/// access token (issue 36, the OAuth part): the helper protocol through the built binary, the
/// device flow on git's terminal, and 16 real `git fetch` processes against a git server that
/// accepts a password while the test authorization server's introspection says it is active.
@Suite("git-credential-keysmith: OAuth tokens for a provider's git hosts", .enabled(if: OAuthTestServer.available))
struct GitOAuthTests {
    /// A vault with the provider `dot` bound to `gitHost`, the git-credential-keysmith link, and
    /// (with `grant`) alice's token.
    /// With `publicClient`, the provider is the server's public client `ks-device` (the device
    /// flow's), with no secret.
    static func setUp(_ server: OAuthTestServer, gitHost: String, grant: Bool = true, publicClient: Bool = false) throws -> (keysmith: Keysmith, bin: String) {
        let (keysmith, bin) = try GitCredentialTests.setUp()
        let secretFile = keysmith.directory + "/client-secret"
        try (server.clientSecret + "\n").write(toFile: secretFile, atomically: true, encoding: .utf8)
        let client = publicClient ? "--client-id ks-device --client-auth none" : "--client-id ks-password --client-secret-fd 3 3<'\(secretFile)'"
        let added = try CommandLineMistakesTests.shell(
            keysmith, "\"$KS\" provider add dot --issuer '\(server.url)' --device-endpoint '\(server.url)/device-authorization/' "
                + "--git-host '\(gitHost)' --git-scope 'read write' " + client)
        #expect(added.status == 0, "\(added.output)")
        if grant {
            let imported = try keysmith.run(["token", "import", "--service", "dot", "--account", "alice", "--requested", "read write"],
                                            stdin: try server.passwordGrant())
            #expect(imported.status == 0, "\(imported.output)")
        }
        return (keysmith, bin)
    }

    static func issued(_ server: OAuthTestServer) throws -> Int {
        try #require(try server.request("/test/refreshes?client_id=ks-password").json["issued"] as? Int)
    }

    static func fields(_ output: String) -> [String: String] {
        Dictionary(output.split(separator: "\n").map { line in
            let parts = line.split(separator: "=", maxSplits: 1)
            return (String(parts[0]), parts.count > 1 ? String(parts[1]) : "")
        }, uniquingKeysWith: { $1 })
    }

    @Test("get gives the kept access token with its expiry; store keeps no item; erase of the kept token refreshes once (a second erase of the old one, or of another password, does nothing) and never deletes the grant; http to another host gets nothing")
    func protocolForAProvidersHost() throws {
        let server = try OAuthTestServer()
        defer { server.destroy() }
        let (keysmith, bin) = try Self.setUp(server, gitHost: "git.example:8443")
        defer { keysmith.cleanup() }
        let before = try ProviderCommandTests.tokens(keysmith, account: "alice")
        let got = try GitCredentialTests.helper(keysmith, bin, "get", "protocol=https\nhost=GIT.example:8443\n\n")
        let answer = Self.fields(got.stdout)
        #expect(got.status == 0 && answer["username"] == "alice" && answer["password"] == before.access, "\(got.output)")
        let expiry = try #require(answer["password_expiry_utc"].flatMap(Int.init))
        #expect(abs(Double(expiry) - Date().addingTimeInterval(3600).timeIntervalSince1970) < 120)
        #expect(try Self.issued(server) == 1, "a fresh token costs no request")

        // store: the password is the token Keysmith keeps; no internet-password item is made.
        let stored = try GitCredentialTests.helper(keysmith, bin, "store", "protocol=https\nhost=git.example:8443\nusername=alice\npassword=\(before.access)\n\n")
        #expect(stored.status == 0 && stored.stdout.isEmpty)
        #expect(try keysmith.run(["secret", "list", "--json"]).stdout == #"{"items":[]}"# + "\n")

        // erase with the kept access token: one refresh.
        let erased = try GitCredentialTests.helper(keysmith, bin, "erase", "protocol=https\nhost=git.example:8443\nusername=alice\npassword=\(before.access)\n\n")
        #expect(erased.status == 0 && erased.stderr.isEmpty, "\(erased.output)")
        let after = try ProviderCommandTests.tokens(keysmith, account: "alice")
        #expect(after.access != before.access && after.refresh != before.refresh)
        #expect(try Self.issued(server) == 2 && server.isActive(after.access))
        // The same rejection reported again (another git process), and a password not ours: nothing.
        _ = try GitCredentialTests.helper(keysmith, bin, "erase", "protocol=https\nhost=git.example:8443\nusername=alice\npassword=\(before.access)\n\n")
        _ = try GitCredentialTests.helper(keysmith, bin, "erase", "protocol=https\nhost=git.example:8443\npassword=not-a-token\n\n")
        #expect(try Self.issued(server) == 2)
        #expect(try ProviderCommandTests.tokens(keysmith, account: "alice").access == after.access)

        // A bound host over http to another machine: no token in the clear; git is told why.
        let clear = try GitCredentialTests.helper(keysmith, bin, "get", "protocol=http\nhost=git.example:8443\n\n")
        #expect(clear.status == 0 && clear.stdout.isEmpty && clear.stderr.contains("https"), "\(clear.output)")
        #expect(!clear.stderr.contains(after.access))
        // A git host is one provider's; a host is a host (no scheme, user or path).
        let claimed = try keysmith.run(["provider", "add", "other", "--token-endpoint", server.url + "/token/", "--client-id", "x",
                                        "--git-host", "git.EXAMPLE:8443"])
        #expect(claimed.status == 7 && claimed.stderr.contains("already the provider dot's"), "\(claimed.output)")
        for bad in ["https://git.example", "alice@git.example", "git.example/repo"] {
            let refused = try keysmith.run(["provider", "add", "other", "--token-endpoint", server.url + "/token/", "--client-id", "x", "--git-host", bad])
            #expect(refused.status == 64, "\(bad): \(refused.output)")
        }
        let shown = try keysmith.run(["provider", "show", "dot", "--json"])
        #expect(shown.stdout.contains(#""git_hosts":["git.example:8443"]"#) && shown.stdout.contains(#""git_scope":"read write""#), "\(shown.output)")
        // A token holding a line break would add lines of the provider's choosing to git's
        // input: it is refused, and nothing is printed.
        let crafted = #"{"access_token":"abc\nhost=evil.example\nquit=1","token_type":"Bearer","expires_in":3600}"#
        #expect(try keysmith.run(["token", "import", "--service", "dot", "--account", "mallory"], stdin: crafted).status == 0)
        let smuggled = try GitCredentialTests.helper(keysmith, bin, "get", "protocol=https\nhost=git.example:8443\nusername=mallory\n\n")
        #expect(smuggled.status == 0 && smuggled.stdout.isEmpty && smuggled.stderr.contains("line break"), "\(smuggled.output)")
        // A token that is not a bearer token (RFC 6750) would be used without its proof: refused.
        let mac = #"{"access_token":"mac-access","token_type":"mac","expires_in":3600}"#
        #expect(try keysmith.run(["token", "import", "--service", "dot", "--account", "macuser"], stdin: mac).status == 0)
        let macAnswer = try GitCredentialTests.helper(keysmith, bin, "get", "protocol=https\nhost=git.example:8443\nusername=macuser\n\n")
        #expect(macAnswer.status == 0 && macAnswer.stdout.isEmpty && macAnswer.stderr.contains("not Bearer"), "\(macAnswer.output)")
        // Another host keeps its plain credentials.
        let plain = try GitCredentialTests.helper(keysmith, bin, "get", "protocol=https\nhost=other.example\n\n")
        #expect(plain.status == 0 && plain.stdout.isEmpty)
    }

    @Test("a host bound to a provider with no token: with git unable to prompt, nothing is printed and the message names token login; with a terminal, the device flow runs on it, the token is kept and given to git")
    func signInFromGit() throws {
        let server = try OAuthTestServer()
        defer { server.destroy() }
        let (keysmith, bin) = try Self.setUp(server, gitHost: "git.example", grant: false, publicClient: true)
        defer { keysmith.cleanup() }
        let silent = try GitCredentialTests.helper(keysmith, bin, "get", "protocol=https\nhost=git.example\n\n",
                                                   environment: ["GIT_TERMINAL_PROMPT": "0"])
        #expect(silent.status == 0 && silent.stdout.isEmpty && silent.stderr.contains("token login"), "\(silent.output)")

        // A terminal (script(1) gives the helper one): the code goes to it, never to git.
        let input = keysmith.directory + "/input", output = keysmith.directory + "/answer", terminal = keysmith.directory + "/terminal"
        try "protocol=https\nhost=git.example\nusername=carol\n\n".write(toFile: input, atomically: true, encoding: .utf8)
        var environment = keysmith.environment
        // With a terminal but git told not to prompt (0, or set and empty, as git reads it): no sign-in starts.
        for value in ["0", ""] {
            environment["GIT_TERMINAL_PROMPT"] = value
            let muted = try SpawnedProcess("/usr/bin/script", ["-qefc", "timeout 30 '\(bin)/git-credential-keysmith' get < '\(input)' > '\(output)'", "/dev/null"],
                                           environment: environment, directory: keysmith.directory, standardOutput: .file(terminal), deadline: 120)
            muted.waitUntilExit()
            let shown = (try? String(contentsOfFile: terminal, encoding: .utf8)) ?? ""
            #expect(muted.terminationStatus == 0 && !shown.contains("enter the code") && shown.contains("token login"),
                    "GIT_TERMINAL_PROMPT=\(value): \(shown)")
            #expect(((try? String(contentsOfFile: output, encoding: .utf8)) ?? "").isEmpty)
        }
        environment.removeValue(forKey: "GIT_TERMINAL_PROMPT")
        let helper = try SpawnedProcess("/usr/bin/script", ["-qefc", "'\(bin)/git-credential-keysmith' get < '\(input)' > '\(output)'", "/dev/null"],
                                        environment: environment, directory: keysmith.directory, standardOutput: .file(terminal), deadline: 120)
        var code: String?
        let deadline = Date().addingTimeInterval(60)
        while code == nil, Date() < deadline, helper.isRunning {
            let shown = (try? String(contentsOfFile: terminal, encoding: .utf8)) ?? ""
            if let range = shown.range(of: "enter the code ") {
                code = shown[range.upperBound...].prefix { $0.isLetter || $0.isNumber || $0 == "-" }.description
            } else {
                Thread.sleep(forTimeInterval: 0.05)
            }
        }
        let userCode = try #require(code, "no code on the terminal: \((try? String(contentsOfFile: terminal, encoding: .utf8)) ?? "")")
        #expect(try server.request("/test/approve-device", form: ["user_code": userCode, "user": "carol"]).status == 200)
        helper.waitUntilExit()
        #expect(helper.terminationStatus == 0)
        let answer = Self.fields((try? String(contentsOfFile: output, encoding: .utf8)) ?? "")
        #expect(answer["username"] == "carol" && !(answer["password"] ?? "").isEmpty, "\(answer.keys.sorted())")
        #expect(try server.isActive(try #require(answer["password"])))
        #expect(try ProviderCommandTests.tokens(keysmith, account: "carol").access == answer["password"])
        #expect(!((try? String(contentsOfFile: output, encoding: .utf8)) ?? "").contains(userCode), "the code went to git")
    }

    @Test("16 parallel git fetch processes, 5 each, against a git server checking each password by introspection, on tokens that live 4 s with rotating refresh tokens (each refresh ends the previous access token): every fetch succeeds with no prompt, the grant lives, the provider's refreshes equal the audit log's, one per expiry")
    func parallelFetches() throws {
        let server = try OAuthTestServer(accessSeconds: 4)
        defer { server.destroy() }
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("keysmith-gitoauth-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let git = try GitCredentialTests.GitServer(directory: scratch, users: [:], introspection: server.url + "/introspect/",
                                                   client: "ks-password:" + server.clientSecret)
        let host = "127.0.0.1:\(git.port)"
        let (keysmith, bin) = try Self.setUp(server, gitHost: host)
        defer { keysmith.cleanup() }
        var environment = keysmith.environment
        environment["PATH"] = bin + ":/usr/bin:/bin"
        environment["GIT_CONFIG_NOSYSTEM"] = "1"
        environment["GIT_TERMINAL_PROMPT"] = "0"
        environment["GIT_ASKPASS"] = "/bin/false"
        func run(_ directory: String, _ arguments: [String]) throws -> Keysmith.Result {
            let result = try spawnAndWait("/usr/bin/git", ["-c", "credential.helper=", "-c", "credential.helper=keysmith"] + arguments,
                                          environment: environment, directory: directory, deadline: 120)
            return Keysmith.Result(status: result.status, stdout: String(decoding: result.stdout, as: UTF8.self), stderr: String(decoding: result.stderr, as: UTF8.self))
        }
        try git.makeRepository("repo.git") { try run($0, $1) }
        let work = keysmith.directory + "/work"
        try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
        let clone = try run(work, ["clone", "-q", "http://\(host)/repo.git", "c0"])
        #expect(clone.status == 0, "\(clone.output)")
        for index in 1..<16 { try FileManager.default.copyItem(atPath: work + "/c0", toPath: work + "/c\(index)") }
        let before = try Self.issued(server)
        let started = Date()
        let workers = try (0..<16).map { index in
            try SpawnedProcess("/bin/sh", ["-c", "for i in 1 2 3 4 5; do if git -c credential.helper= -c credential.helper=keysmith fetch -q origin; then echo ok; else echo fail; fi; done"],
                               environment: environment, directory: work + "/c\(index)", standardOutput: .file(work + "/w\(index).log"),
                               standardError: .file(work + "/w\(index).err"), deadline: 600)
        }
        for worker in workers { worker.waitUntilExit() }
        let elapsed = Date().timeIntervalSince(started)
        var results: [String] = []
        for index in 0..<16 {
            results += ((try? String(contentsOfFile: work + "/w\(index).log", encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
        }
        let failures = (0..<16).compactMap { try? String(contentsOfFile: work + "/w\($0).err", encoding: .utf8) }.filter { !$0.isEmpty }
        #expect(results.count == 80 && results.allSatisfy { $0 == "ok" }, "\(results.filter { $0 != "ok" }.count) failed: \(failures.prefix(3))")
        #expect(try server.request("/test/grant-alive?client_id=ks-password").json["alive"] as? Bool == true)
        let issued = try Self.issued(server)
        let refreshes = issued - before
        let audit = try keysmith.run(["audit", "show", "--event", "refresh", "--json"]).stdout
        let audited = audit.components(separatedBy: "\"event\":\"refresh\"").count - 1
        #expect(audited == issued - 1, "the audit log has \(audited) refreshes, the provider issued \(issued - 1)")
        // One refresh per expiry: a token is refreshed only once it has run out (its guard time is
        // its whole last second), so at most one per 4 s token lifetime (2 s failed now and then on a loaded 2-core run: a fetch whose second request came after its token ran out).
        #expect(refreshes >= 1 && Double(refreshes) <= elapsed / 4 + 1, "\(refreshes) refreshes in \(elapsed) s")
        let rejected = ((try? String(contentsOfFile: git.root + "/requests.log", encoding: .utf8)) ?? "").split(separator: "\n").filter { $0.contains(" 401 ") }.count
        print("git over OAuth: 16 processes x 5 `git fetch`, 2 s tokens: \(results.filter { $0 == "ok" }.count) of \(results.count) fetches succeeded, "
              + "\(refreshes) refreshes in \(String(format: "%.1f", elapsed)) s, \(rejected) requests answered 401 (git's first, unauthenticated, try included)")
    }
}
