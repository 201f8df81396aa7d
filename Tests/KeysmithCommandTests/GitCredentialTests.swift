import Foundation
import KeysmithTestSupport
import Testing

/// git keeps its credentials in Keysmith (issue 36, the plain credential part): the helper
/// protocol through the built binary, and the real `git` binary against a local HTTP server that
/// requires Basic authentication (scripts/git-http-server.py, git's own git-http-backend).
@Suite("git-credential-keysmith: git's credentials in Keysmith")
struct GitCredentialTests {
    /// A vault, and a bin directory whose git-credential-keysmith is a link to the binary.
    static func setUp() throws -> (keysmith: Keysmith, bin: String) {
        let keysmith = try Keysmith.withVault()
        let bin = keysmith.directory + "/bin"
        try FileManager.default.createDirectory(atPath: bin, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: bin + "/git-credential-keysmith", withDestinationPath: Keysmith.binary)
        return (keysmith, bin)
    }

    /// Runs the helper as git does (through the link), with `input` on standard input.
    static func helper(_ keysmith: Keysmith, _ bin: String, _ action: String, _ input: String,
                       environment extra: [String: String] = [:]) throws -> Keysmith.Result {
        let result = try spawnAndWait(bin + "/git-credential-keysmith", [action],
                                      environment: keysmith.environment.merging(extra) { $1 }, directory: keysmith.directory,
                                      stdin: Data(input.utf8))
        return Keysmith.Result(status: result.status, stdout: String(decoding: result.stdout, as: UTF8.self),
                               stderr: String(decoding: result.stderr, as: UTF8.self))
    }

    @Test("the protocol: store, get and erase the credential git names, and nothing else")
    func protocolRoundTrip() throws {
        let (keysmith, bin) = try Self.setUp()
        defer { keysmith.cleanup() }
        let password = "p=ss w0rd with = and spaces"
        #expect(try Self.helper(keysmith, bin, "store", "protocol=https\nhost=git.example.com\nusername=alice\npassword=\(password)\n\n").status == 0)
        #expect(try Self.helper(keysmith, bin, "store", "protocol=https\nhost=git.example.com\nusername=bob\npassword=bobs\n\n").status == 0)
        // With a username: that user's; without: one of the host's (the newest).
        let alice = try Self.helper(keysmith, bin, "get", "protocol=https\nhost=git.example.com\nusername=alice\n\n")
        #expect(alice.stdout == "username=alice\npassword=\(password)\n", "\(alice.output)")
        let any = try Self.helper(keysmith, bin, "get", "protocol=https\nhost=git.example.com\n")  // no trailing blank line
        #expect(any.stdout == "username=bob\npassword=bobs\n", "\(any.output)")
        // Another host, another port, another protocol: nothing.
        for other in ["protocol=https\nhost=other.example.com\n\n", "protocol=https\nhost=git.example.com:8443\n\n",
                      "protocol=http\nhost=git.example.com\n\n", "protocol=cert\nhost=git.example.com\n\n", "protocol=https\n\n", "\n"] {
            let result = try Self.helper(keysmith, bin, "get", other)
            #expect(result.status == 0 && result.stdout.isEmpty, "\(other.debugDescription): \(result.output)")
        }
        // The items are internet passwords that `keysmith secret` sees.
        let shown = try keysmith.run(["secret", "get", "--server", "git.example.com", "--protocol", "https", "--account", "alice"])
        #expect(shown.status == 0 && shown.stdout.hasPrefix(password), "\(shown.output)")
        // erase with a password that is not the stored one (changed since): kept.
        #expect(try Self.helper(keysmith, bin, "erase", "protocol=https\nhost=git.example.com\nusername=alice\npassword=stale\n\n").status == 0)
        #expect(try Self.helper(keysmith, bin, "get", "protocol=https\nhost=git.example.com\nusername=alice\n\n").stdout.contains(password))
        // erase of what git names: only alice's, bob's stays.
        #expect(try Self.helper(keysmith, bin, "erase", "protocol=https\nhost=git.example.com\nusername=alice\npassword=\(password)\n\n").status == 0)
        #expect(try Self.helper(keysmith, bin, "get", "protocol=https\nhost=git.example.com\nusername=alice\n\n").stdout.isEmpty)
        #expect(try Self.helper(keysmith, bin, "get", "protocol=https\nhost=git.example.com\nusername=bob\n\n").stdout.contains("bobs"))
    }

    @Test("oauth_refresh_token (git 2.41+): kept beside the password in one commit, given back with it (also to a get without a username), removed with it, and dropped when git stores a password without one")
    func oauthRefreshToken() throws {
        let (keysmith, bin) = try Self.setUp()
        defer { keysmith.cleanup() }
        let stored = try Self.helper(keysmith, bin, "store",
                                     "protocol=https\nhost=git.example.com\nusername=alice\npassword=at-1\npassword_expiry_utc=4102444800\noauth_refresh_token=rt-1\n\n")
        #expect(stored.status == 0, "\(stored.output)")
        let got = try Self.helper(keysmith, bin, "get", "protocol=https\nhost=git.example.com\nusername=alice\n\n")
        #expect(got.stdout == "username=alice\npassword=at-1\npassword_expiry_utc=4102444800\noauth_refresh_token=rt-1\n", "\(got.output)")
        // The refresh token's own item is never answered as a password.
        let any = try Self.helper(keysmith, bin, "get", "protocol=https\nhost=git.example.com\n\n")
        #expect(any.stdout == got.stdout, "\(any.output)")
        let listed = try keysmith.run(["secret", "list", "--json"]).stdout
        #expect(listed.contains("git OAuth refresh token") && !listed.contains("rt-1"))
        // A new password without a refresh token: the old refresh token goes.
        #expect(try Self.helper(keysmith, bin, "store", "protocol=https\nhost=git.example.com\nusername=alice\npassword=at-2\n\n").status == 0)
        #expect(try Self.helper(keysmith, bin, "get", "protocol=https\nhost=git.example.com\nusername=alice\n\n").stdout == "username=alice\npassword=at-2\n")
        #expect(!(try keysmith.run(["secret", "list", "--json"]).stdout.contains("git OAuth refresh token")))
        // erase takes both.
        #expect(try Self.helper(keysmith, bin, "store", "protocol=https\nhost=git.example.com\nusername=alice\npassword=at-3\noauth_refresh_token=rt-3\n\n").status == 0)
        #expect(try Self.helper(keysmith, bin, "erase", "protocol=https\nhost=git.example.com\nusername=alice\npassword=at-3\n\n").status == 0)
        #expect(try keysmith.run(["secret", "list", "--json"]).stdout == #"{"items":[]}"# + "\n")
    }

    @Test("edge cases: a port, IPv6, a Unicode username, unknown keys, quit, a 64 KiB secret, a path only with useHttpPath")
    func edgeCases() throws {
        let (keysmith, bin) = try Self.setUp()
        defer { keysmith.cleanup() }
        let big = String(repeating: "x", count: 64 << 10)
        let cases: [(store: String, get: String, expected: String)] = [
            ("protocol=http\nhost=127.0.0.1:8080\nusername=a\npassword=port\n", "protocol=http\nhost=127.0.0.1:8080\n", "username=a\npassword=port\n"),
            ("protocol=https\nhost=[::1]:9443\nusername=v6\npassword=six\n", "protocol=https\nhost=[::1]:9443\n", "username=v6\npassword=six\n"),
            ("protocol=https\nhost=u.example\nusername=李雷\npassword=ü\n", "protocol=https\nhost=u.example\nusername=李雷\n", "username=李雷\npassword=ü\n"),
            ("url=https://k.example/x\nwwwauth[]=Basic realm=x\ncapability[]=authtype\nprotocol=https\nhost=k.example\nusername=k\npassword=unknown-keys\nquit=true\n",
             "protocol=https\nhost=k.example\nquit=1\nfuture_key=whatever\n", "username=k\npassword=unknown-keys\n"),
            ("protocol=https\nhost=big.example\nusername=big\npassword=\(big)\n", "protocol=https\nhost=big.example\n", "username=big\npassword=\(big)\n"),
            ("protocol=https\nhost=p.example\npath=team/one.git\nusername=p\npassword=one\n", "protocol=https\nhost=p.example\npath=team/one.git\n", "username=p\npassword=one\n"),
        ]
        for (store, get, expected) in cases {
            let stored = try Self.helper(keysmith, bin, "store", store + "\n")
            #expect(stored.status == 0 && stored.stderr.isEmpty, "\(store.prefix(60)): \(stored.output.prefix(200))")
            let got = try Self.helper(keysmith, bin, "get", get)
            #expect(got.stdout == expected, "\(get.prefix(60)): \(got.output.prefix(200))")
        }
        // A path kept with useHttpPath is another item than the host's: a get without the path does not find it.
        #expect(try Self.helper(keysmith, bin, "get", "protocol=https\nhost=p.example\n\n").stdout.isEmpty)
        #expect(try Self.helper(keysmith, bin, "get", "protocol=https\nhost=p.example\npath=team/two.git\n\n").stdout.isEmpty)
        // Malformed input and unknown actions change nothing and print nothing.
        for input in ["no equals sign\n", "protocol=https\u{0}\nhost=x\n"] {
            let result = try Self.helper(keysmith, bin, "store", input)
            #expect(result.status == 0 && result.stdout.isEmpty && !result.stderr.isEmpty, "\(result.output)")
        }
        #expect(try Self.helper(keysmith, bin, "capability", "").stdout.isEmpty)
    }

    @Test("a store that cannot be unlocked: the helper says why on standard error, prints nothing and exits 0, so git goes on")
    func lockedStore() throws {
        let (keysmith, bin) = try Self.setUp()
        defer { keysmith.cleanup() }
        #expect(try Self.helper(keysmith, bin, "store", "protocol=https\nhost=h.example\nusername=u\npassword=secret-pw\n\n").status == 0)
        let wrong = keysmith.directory + "/wrong-key"
        try (String(repeating: "cd", count: 32) + "\n").write(toFile: wrong, atomically: true, encoding: .utf8)
        for environment in [["KEYSMITH_KEYFILE": wrong], ["KEYSMITH_VAULT": keysmith.directory + "/no-vault-here"]] {
            let result = try Self.helper(keysmith, bin, "get", "protocol=https\nhost=h.example\n\n", environment: environment)
            #expect(result.status == 0 && result.stdout.isEmpty, "\(result.output)")
            #expect(result.stderr.hasPrefix("keysmith: git-credential get:"), "\(result.stderr)")
            #expect(!result.stderr.contains("secret-pw"))
        }
    }

    // MARK: The real git

    final class GitServer {
        let root: String
        let process: SpawnedProcess
        let port: Int
        var users: String { root + "/users" }

        /// A server for `users`, or (with `introspection`) one that takes a password while the
        /// authorization server's introspection endpoint says it is an active token, asking
        /// there as `client` (`id:secret`).
        init(directory: String, users: [String: String], introspection: String? = nil, client: String? = nil) throws {
            root = directory + "/git-server"
            try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
            try users.map { "\($0.key):\($0.value)" }.joined(separator: "\n").write(toFile: root + "/users", atomically: true, encoding: .utf8)
            let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
                .appendingPathComponent("scripts/git-http-server.py").path
            let portFile = root + "/port"
            var environment = ProcessInfo.processInfo.environment
            if let client { environment["GIT_SERVER_INTROSPECT_CLIENT"] = client }
            process = try SpawnedProcess("/usr/bin/env", ["python3", script, root, introspection.map { "introspect=" + $0 } ?? root + "/users", portFile],
                                         environment: environment, standardError: .file(root + "/server.err"), deadline: 600)
            var found: Int?
            for _ in 0..<200 where found == nil {
                found = (try? String(contentsOfFile: portFile, encoding: .utf8)).flatMap { Int($0) }
                if found == nil { usleep(50_000) }
            }
            guard let found else { throw CocoaError(.fileNoSuchFile) }
            port = found
        }

        func setPassword(_ user: String, _ password: String, others: [String: String]) throws {
            var all = others
            all[user] = password
            try all.map { "\($0.key):\($0.value)" }.joined(separator: "\n").write(toFile: users, atomically: true, encoding: .utf8)
        }

        /// Makes a bare repository with one commit.
        func makeRepository(_ name: String, git: (String, [String]) throws -> Keysmith.Result) throws {
            let seed = root + "/seed-" + name
            #expect(try git(root, ["init", "-q", "-b", "main", seed]).status == 0)
            try "hello \(name)\n".write(toFile: seed + "/README", atomically: true, encoding: .utf8)
            #expect(try git(seed, ["add", "README"]).status == 0)
            #expect(try git(seed, ["-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "-m", "first"]).status == 0)
            #expect(try git(root, ["clone", "-q", "--bare", seed, root + "/" + name]).status == 0)
        }

        deinit {
            kill(process.processIdentifier, SIGTERM)
            process.waitUntilExit()
        }
    }

    @Test("the real git over HTTP with Basic authentication: one prompt, then none; a rejected password is erased and asked again; users and (with useHttpPath) repositories kept apart")
    func realGit() throws {
        let (keysmith, bin) = try Self.setUp()
        defer { keysmith.cleanup() }
        let server = try GitServer(directory: keysmith.directory, users: ["alice": "alice-pw", "bob": "bob-pw"])
        // An askpass program that counts its prompts and answers with $ANSWER.
        let askpass = bin + "/askpass"
        let prompts = keysmith.directory + "/prompts"
        try "#!/bin/sh\necho \"$1\" >> '\(prompts)'\nprintf '%s\\n' \"$ANSWER\"\n".write(toFile: askpass, atomically: true, encoding: .utf8)
        chmod(askpass, 0o755)
        func promptCount() -> Int {
            ((try? String(contentsOfFile: prompts, encoding: .utf8)) ?? "").split(separator: "\n").count
        }
        var environment = keysmith.environment
        environment["PATH"] = bin + ":/usr/bin:/bin"
        environment["GIT_CONFIG_NOSYSTEM"] = "1"
        environment["GIT_ASKPASS"] = askpass
        environment["GIT_TERMINAL_PROMPT"] = "0"
        func git(_ directory: String, _ arguments: [String], answer: String = "") throws -> Keysmith.Result {
            var env = environment
            env["ANSWER"] = answer
            let result = try spawnAndWait("/usr/bin/git", ["-c", "credential.helper=", "-c", "credential.helper=keysmith"] + arguments,
                                          environment: env, directory: directory, deadline: 120)
            return Keysmith.Result(status: result.status, stdout: String(decoding: result.stdout, as: UTF8.self),
                                   stderr: String(decoding: result.stderr, as: UTF8.self))
        }
        try server.makeRepository("repo.git") { try git($0, $1) }
        try server.makeRepository("other.git") { try git($0, $1) }
        let work = keysmith.directory + "/work"
        try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)

        // One prompt, and the helper keeps the password…
        let first = try git(work, ["clone", "-q", "http://alice@127.0.0.1:\(server.port)/repo.git", "one"], answer: "alice-pw")
        #expect(first.status == 0, "\(first.output)")
        #expect(promptCount() == 1)
        let listed = try keysmith.run(["secret", "list", "--json"])
        #expect(listed.stdout.contains("\"account\":\"alice\"") && listed.stdout.contains("127.0.0.1"), "\(listed.output)")
        // …then no prompt: clone, fetch and push.
        #expect(try git(work, ["clone", "-q", "http://alice@127.0.0.1:\(server.port)/repo.git", "two"]).status == 0)
        try "more\n".write(toFile: work + "/one/more", atomically: true, encoding: .utf8)
        #expect(try git(work + "/one", ["add", "more"]).status == 0)
        #expect(try git(work + "/one", ["-c", "user.name=a", "-c", "user.email=a@e", "commit", "-q", "-m", "more"]).status == 0)
        let push = try git(work + "/one", ["push", "-q", "origin", "main"])
        #expect(push.status == 0, "\(push.output)")
        #expect(try git(work + "/two", ["pull", "-q", "--ff-only"]).status == 0)
        #expect(FileManager.default.fileExists(atPath: work + "/two/more"))
        #expect(promptCount() == 1, "git prompted although the helper had the password")

        // The password changes on the server: git's attempt with the kept one fails and it tells
        // the helper, which erases it; the next attempt asks, and the new password is kept.
        try server.setPassword("alice", "alice-new", others: ["bob": "bob-pw"])
        let item = ["secret", "get", "--server", "127.0.0.1", "--port", "\(server.port)", "--protocol", "http", "--account", "alice"]
        let rejected = try git(work + "/two", ["fetch", "-q"], answer: "alice-new")
        #expect(rejected.status != 0, "\(rejected.output)")
        #expect(promptCount() == 1)
        #expect(try keysmith.run(item).status == 2, "the rejected password was not erased")
        let again = try git(work + "/two", ["fetch", "-q"], answer: "alice-new")
        #expect(again.status == 0, "\(again.output)")
        #expect(promptCount() == 2)
        let kept = try keysmith.run(item)
        #expect(kept.stdout.hasPrefix("alice-new"), "\(kept.output)")
        #expect(try git(work + "/two", ["fetch", "-q"]).status == 0)
        #expect(promptCount() == 2)

        // A second user on the same host: one prompt of their own; alice's item untouched.
        #expect(try git(work, ["clone", "-q", "http://bob@127.0.0.1:\(server.port)/repo.git", "bobs"], answer: "bob-pw").status == 0)
        #expect(promptCount() == 3)
        #expect(try git(work + "/bobs", ["fetch", "-q"]).status == 0)
        #expect(try git(work + "/two", ["fetch", "-q"]).status == 0)
        #expect(promptCount() == 3)

        // useHttpPath: each repository is its own credential.
        let useHttpPath = ["-c", "credential.useHttpPath=true"]
        #expect(try git(work, useHttpPath + ["clone", "-q", "http://alice@127.0.0.1:\(server.port)/repo.git", "p1"], answer: "alice-new").status == 0)
        #expect(promptCount() == 4, "a path-bound credential is asked for once")
        #expect(try git(work, useHttpPath + ["clone", "-q", "http://alice@127.0.0.1:\(server.port)/other.git", "p2"], answer: "alice-new").status == 0)
        #expect(promptCount() == 5, "another repository's path is another credential")
        #expect(try git(work, useHttpPath + ["clone", "-q", "http://alice@127.0.0.1:\(server.port)/repo.git", "p3"]).status == 0)
        #expect(promptCount() == 5)
    }
}
