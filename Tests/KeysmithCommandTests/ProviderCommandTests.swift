import Foundation
import KeysmithTestSupport
import Testing

/// The provider commands against the real test authorization server (django-oauth-toolkit).
@Suite("the keysmith command: providers, sign-in and fresh tokens", .enabled(if: OAuthTestServer.available))
struct ProviderCommandTests {
    /// A vault with the server's provider kept as `dot` for the client `client` (its secret
    /// given on a descriptor, never on the command line).
    /// With `grants`, each account gets a token of its own from the password grant (user alice
    /// or bob by turns), imported at service `dot`.
    static func setUp(_ server: OAuthTestServer, client: String = "ks-password", auth: String? = nil, on store: Keysmith? = nil,
                      grants: [String] = []) throws -> Keysmith {
        let keysmith = try store ?? Keysmith.withVault()
        var arguments = ["provider", "add", "dot", "--issuer", server.url, "--client-id", client, "--device-endpoint", server.url + "/device-authorization/"]
        if let auth { arguments += ["--client-auth", auth] }
        let secretFile = keysmith.directory + "/client-secret"
        try (server.clientSecret + "\n").write(toFile: secretFile, atomically: true, encoding: .utf8)
        let added: Keysmith.Result
        if auth == "none" {
            added = try keysmith.run(arguments)
        } else {
            added = try CommandLineMistakesTests.shell(keysmith, "\"$KS\" " + arguments.map { "'\($0)'" }.joined(separator: " ")
                                                       + " --client-secret-fd 3 3<'\(secretFile)'")
        }
        #expect(added.status == 0, "\(added.output)")
        for (index, account) in grants.enumerated() {
            let imported = try keysmith.run(["token", "import", "--service", "dot", "--account", account, "--requested", "read write"],
                                            stdin: try server.passwordGrant(user: index % 2 == 0 ? "alice" : "bob"))
            #expect(imported.status == 0, "\(imported.output)")
        }
        return keysmith
    }

    /// Adds provider `slow`, whose token endpoint answers 1.5 s after it has spent the refresh
    /// token (a slow network), and imports alice's token there (the client secret as `setUp` wrote it).
    static func addSlowProvider(_ keysmith: Keysmith, _ server: OAuthTestServer) throws {
        let added = try CommandLineMistakesTests.shell(keysmith, "\"$KS\" provider add slow --token-endpoint '\(server.url)/test/slow-token/1.5/' "
                                                       + "--client-id ks-password --client-secret-fd 3 3<'\(keysmith.directory)/client-secret'")
        #expect(added.status == 0, "\(added.output)")
        let imported = try keysmith.run(["token", "import", "--service", "slow", "--account", "alice", "--requested", "read write"],
                                        stdin: try server.passwordGrant(user: "alice"))
        #expect(imported.status == 0, "\(imported.output)")
    }

    @Test("provider add --issuer fills the endpoints from RFC 8414 metadata; show and list never print the client secret; a provider without a revocation endpoint says so; an issuer that differs from the metadata's by a trailing slash is refused, naming the exact one")
    func addShowList() throws {
        let server = try OAuthTestServer()
        defer { server.destroy() }
        let keysmith = try Self.setUp(server)
        defer { keysmith.cleanup() }
        let shown = try keysmith.run(["provider", "show", "dot", "--json"])
        #expect(shown.status == 0, "\(shown.output)")
        let provider = try #require(try JSONSerialization.jsonObject(with: Data(shown.stdout.utf8)) as? [String: Any])
        #expect(provider["token_endpoint"] as? String == server.url + "/token/")
        #expect(provider["revocation_endpoint"] as? String == server.url + "/revoke_token/")
        #expect(provider["introspection_endpoint"] as? String == server.url + "/introspect/")
        #expect(provider["client_auth"] as? String == "client_secret_basic")
        for output in [shown.output, try keysmith.run(["provider", "list", "--json"]).output, try keysmith.run(["provider", "show", "dot"]).output] {
            #expect(!output.contains(server.clientSecret))
        }
        // By hand, without a revocation endpoint: show says tokens cannot be revoked there.
        let bare = try keysmith.run(["provider", "add", "bare", "--token-endpoint", server.url + "/token/", "--client-id", "ks-device"])
        #expect(bare.status == 0 && bare.stdout.contains("no revocation endpoint"), "\(bare.output)")
        #expect(try keysmith.run(["provider", "show", "bare"]).stdout.contains("revocation endpoint: none: tokens cannot be revoked at this provider"))
        // Refused: plain http to another host, a secret in the URL, a secret for a public client, a name kept already.
        for (arguments, fragment) in [
            (["provider", "add", "x", "--token-endpoint", "http://auth.example/token", "--client-id", "c"], "http:// to a host other than this machine"),
            (["provider", "add", "x", "--token-endpoint", "https://u:pw@auth.example/token", "--client-id", "c"], "holds a user or password"),
            (["provider", "add", "bare", "--token-endpoint", server.url + "/token/", "--client-id", "c"], "already kept"),
            (["provider", "add", "x", "--client-id", "c"], "--issuer"),
            // RFC 8414 §3.3: the issuer given must be the metadata's, identically.
            (["provider", "add", "x", "--issuer", server.url + "/", "--client-id", "ks-device"],
             "the provider's issuer is \(server.url), which must be given exactly"),
        ] {
            let refused = try keysmith.run(arguments)
            #expect(refused.status == 64 || refused.status == 7, "\(arguments): \(refused.output)")
            #expect(refused.stderr.contains(fragment), "\(arguments): \(refused.stderr)")
            #expect(!refused.stderr.contains("pw@"))
        }
        #expect(try keysmith.run(["provider", "remove", "bare"]).status == 0)
        #expect(try keysmith.run(["provider", "show", "bare"]).status == 2)
    }

    @Test("token login --client-credentials keeps a token the provider says is active; a wrong client secret is exit 10 and keeps nothing")
    func clientCredentials() throws {
        let server = try OAuthTestServer()
        defer { server.destroy() }
        let keysmith = try Self.setUp(server, client: "ks-service")
        defer { keysmith.cleanup() }
        let login = try keysmith.run(["token", "login", "--provider", "dot", "--account", "reporter", "--scope", "read", "--client-credentials", "--json"])
        #expect(login.status == 0, "\(login.output)")
        #expect(login.stdout.contains(#""granted":["read"]"#), "\(login.stdout)")
        let token = try keysmith.run(["token", "get", "--service", "dot", "--account", "reporter", "--no-newline"]).stdout
        #expect(try server.isActive(token))
        #expect(!login.output.contains(token))
        // A wrong secret: the provider refuses (invalid_client), nothing is kept.
        let wrong = keysmith.directory + "/wrong"
        try "not-the-secret\n".write(toFile: wrong, atomically: true, encoding: .utf8)
        let replaced = try CommandLineMistakesTests.shell(keysmith, "\"$KS\" provider add dot --replace --token-endpoint '\(server.url)/token/' --client-id ks-service --client-secret-fd 3 3<'\(wrong)'")
        #expect(replaced.status == 0, "\(replaced.output)")
        let refused = try keysmith.run(["token", "login", "--provider", "dot", "--account", "other", "--scope", "read", "--client-credentials"])
        #expect(refused.status == 10 && refused.stderr.contains("invalid_client"), "\(refused.output)")
        #expect(try keysmith.run(["token", "get", "--service", "dot", "--account", "other"]).status == 2)
    }

    @Test("token login --device prints the code, waits for the approval and keeps the token; denied, it is exit 10 and keeps nothing")
    func deviceFlow() throws {
        let server = try OAuthTestServer()
        defer { server.destroy() }
        let keysmith = try Self.setUp(server, client: "ks-device", auth: "none")
        defer { keysmith.cleanup() }
        for deny in [false, true] {
            let account = deny ? "denied" : "alice"
            let stderr = keysmith.directory + "/login-\(account).err"
            let login = try SpawnedProcess(Keysmith.binary, ["token", "login", "--provider", "dot", "--account", account, "--scope", "read write"],
                                           environment: keysmith.environment, directory: keysmith.directory,
                                           standardOutput: .file(keysmith.directory + "/login-\(account).out"), standardError: .file(stderr), deadline: 120)
            // The code appears on standard error; the person (here, the test) approves it.
            var code: String?
            let deadline = Date().addingTimeInterval(30)
            while code == nil, Date() < deadline {
                let text = (try? String(contentsOfFile: stderr, encoding: .utf8)) ?? ""
                if let range = text.range(of: #"enter the code ([A-Z0-9]+)"#, options: .regularExpression) {
                    code = String(text[range].split(separator: " ").last!)
                } else {
                    Thread.sleep(forTimeInterval: 0.05)
                }
            }
            let userCode = try #require(code, "no code printed")
            var form = ["user_code": userCode, "user": "alice"]
            if deny { form["deny"] = "1" }
            #expect(try server.request("/test/approve-device", form: form).status == 200)
            login.waitUntilExit()
            let output = (try? String(contentsOfFile: stderr, encoding: .utf8)) ?? ""
            if deny {
                #expect(login.terminationStatus == 10 && output.contains("access_denied"), "\(output)")
                #expect(try keysmith.run(["token", "get", "--service", "dot", "--account", account]).status == 2)
            } else {
                #expect(login.terminationStatus == 0, "\(output)")
                let token = try keysmith.run(["token", "get", "--service", "dot", "--account", account, "--no-newline"]).stdout
                #expect(try server.isActive(token))
                #expect(try keysmith.run(["token", "get", "--service", "dot", "--account", account, "--refresh"]).status == 0)
            }
        }
    }

    @Test("token get --fresh: 8 processes, 50 calls each, on one grant whose access tokens live 2 s, reuse protection on: every call succeeds with the provider's current token (no invalid_grant), the grant lives, the provider saw as many refreshes as the audit log, at most one per second")
    func raceOfRefreshes() throws {
        let server = try OAuthTestServer(accessSeconds: 2)
        defer { server.destroy() }
        let keysmith = try Self.setUp(server)
        defer { keysmith.cleanup() }
        try Self.race(keysmith, server, store: "the file vault", machines: false)
    }

    @Test("token get --fresh on the PostgreSQL store: 8 processes standing for 8 machines (no local state shared), the same race: no failure, the grant lives, one refresh per expiry",
          .enabled(if: ProcessInfo.processInfo.environment["KEYSMITH_TEST_DATABASE_URL"] != nil))
    func raceOfRefreshesOnPostgres() throws {
        let server = try OAuthTestServer(accessSeconds: 2)
        defer { server.destroy() }
        let database = try PostgresCommandTests.keysmith()
        #expect(try database.run(["postgres", "init"]).status == 0)
        let keysmith = try Self.setUp(server, on: database)
        defer { keysmith.cleanup() }
        try Self.race(keysmith, server, store: "PostgreSQL", machines: true)
    }

    /// 8 processes, 50 `token get --fresh --min-validity 1s` each, each token introspected at
    /// once. With `machines`, each process has a home of its own (no file shared but the store).
    static func race(_ keysmith: Keysmith, _ server: OAuthTestServer, store: String, machines: Bool) throws {
        let imported = try keysmith.run(["token", "import", "--service", "dot", "--account", "alice", "--requested", "read write"],
                                        stdin: try server.passwordGrant())
        #expect(imported.status == 0, "\(imported.output)")
        // Each worker: `token get --fresh`, then introspection of what it got, at once.
        let worker = keysmith.directory + "/worker.py"
        try """
            import base64, json, subprocess, sys, time, urllib.parse, urllib.request
            url, secret, out = sys.argv[1], sys.argv[2], sys.argv[3]
            auth = "Basic " + base64.b64encode(("ks-password:" + secret).encode()).decode()
            with open(out, "w") as log:
                for i in range(50):
                    run = subprocess.run([sys.argv[4], "token", "get", "--service", "dot", "--account", "alice", "--fresh",
                                          "--min-validity", "1s", "--no-newline"], capture_output=True, text=True)
                    if run.returncode != 0:
                        log.write("fail %d %s\\n" % (run.returncode, run.stderr.strip())); continue
                    request = urllib.request.Request(url + "/introspect/", data=urllib.parse.urlencode({"token": run.stdout}).encode(),
                                                     headers={"Authorization": auth})
                    active = json.load(urllib.request.urlopen(request, timeout=30)).get("active")
                    if active is True:
                        log.write("active\\n"); continue
                    # Inactive: the provider revokes an access token when its grant is refreshed,
                    # so another process's refresh since may have ended it ("superseded"). Still
                    # the kept token, it was handed out dead ("stale").
                    now = subprocess.run([sys.argv[4], "token", "get", "--service", "dot", "--account", "alice", "--no-newline"],
                                         capture_output=True, text=True).stdout
                    log.write(("superseded" if now != run.stdout else "stale") + "\\n")
            """.write(toFile: worker, atomically: true, encoding: .utf8)
        let python = try #require(ProcessInfo.processInfo.environment["KEYSMITH_TEST_OAUTH_PYTHON"])
        let started = Date()
        let workers = try (0..<8).map { index in
            var environment = keysmith.environment
            if machines {
                let home = keysmith.directory + "/machine-\(index)"
                try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
                environment["HOME"] = home
                environment["TMPDIR"] = home
            }
            return try SpawnedProcess(python, [worker, server.url, server.clientSecret, keysmith.directory + "/worker-\(index).log", Keysmith.binary],
                                      environment: environment, directory: keysmith.directory,
                                      standardError: .file(keysmith.directory + "/worker-\(index).err"), deadline: 600)
        }
        for worker in workers { worker.waitUntilExit() }
        let elapsed = Date().timeIntervalSince(started)
        var lines: [String] = []
        for index in 0..<8 {
            #expect(workers[index].terminationStatus == 0, "\((try? String(contentsOfFile: keysmith.directory + "/worker-\(index).err", encoding: .utf8)) ?? "")")
            lines += ((try? String(contentsOfFile: keysmith.directory + "/worker-\(index).log", encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
        }
        #expect(lines.count == 400)
        // Every call succeeded (no invalid_grant, no lock timeout), and every token was the
        // provider's current one when it was handed out: active, or ended since by the next
        // refresh (django-oauth-toolkit revokes the previous access token when it rotates).
        #expect(lines.allSatisfy { $0 == "active" || $0 == "superseded" }, "\(lines.filter { $0 != "active" && $0 != "superseded" }.prefix(5))")
        #expect(try server.request("/test/grant-alive?client_id=ks-password").json["alive"] as? Bool == true)
        let issued = try #require(try server.request("/test/refreshes?client_id=ks-password").json["issued"] as? Int)
        let refreshes = issued - 1  // the first refresh token came with the grant
        // One refresh per expiry: a token is refreshed once it has less than 1 s of its 2 s left,
        // so about one refresh a second, and never more than one per second of the run.
        let audit = try keysmith.run(["audit", "show", "--event", "refresh", "--json"])
        let audited = audit.stdout.components(separatedBy: "\"event\":\"refresh\"").count - 1
        #expect(audited == refreshes, "the audit log has \(audited) refreshes, the provider saw \(refreshes)")
        #expect(refreshes >= 1 && Double(refreshes) <= elapsed + 1, "\(refreshes) refreshes in \(elapsed) s")
        let active = lines.filter { $0 == "active" }.count, superseded = lines.filter { $0 == "superseded" }.count
        print("refresh race on \(store): 8 processes x 50 `token get --fresh --min-validity 1s`, 2 s tokens: \(refreshes) refreshes in "
              + "\(String(format: "%.1f", elapsed)) s; of \(lines.count) tokens, \(active) introspected active, \(superseded) had been ended "
              + "by the next refresh by then, \(lines.count - active - superseded) stale")
    }

    /// The access and refresh tokens of a kept token.
    static func tokens(_ keysmith: Keysmith, account: String, service: String = "dot") throws -> (access: String, refresh: String) {
        (try keysmith.run(["token", "get", "--service", service, "--account", account, "--no-newline"]).stdout,
         try keysmith.run(["token", "get", "--service", service, "--account", account, "--refresh", "--no-newline"]).stdout)
    }

    @Test("token revoke-all --at-provider: the provider confirms, both tokens introspect inactive, the audit log records it; with the server down it stays queued and a second process sends it when the server is back")
    func revokeAtProvider() throws {
        let server = try OAuthTestServer()
        defer { server.destroy() }
        let keysmith = try Self.setUp(server, grants: ["alice", "bob"])
        defer { keysmith.cleanup() }
        let alice = try Self.tokens(keysmith, account: "alice")
        #expect(try server.isActive(alice.access))
        let revoked = try keysmith.run(["token", "revoke-all", "--service", "dot", "--account", "alice", "--at-provider", "--json"])
        #expect(revoked.status == 0 && revoked.stdout.contains(#""provider":"confirmed""#), "\(revoked.output)")
        #expect(try !server.isActive(alice.access) && !server.refreshWorks(alice.refresh))
        #expect(try keysmith.run(["token", "check", "--service", "dot", "--account", "alice", "read"]).status == 3)
        let audit = try keysmith.run(["audit", "show", "--json"]).stdout
        #expect(audit.contains(#""event":"provider-revoke""#), "\(audit)")
        #expect(!audit.contains(alice.access) && !audit.contains(alice.refresh))
        #expect(try keysmith.run(["token", "outbox"]).status == 0)

        // The server is down: revoked here at once, queued for the provider.
        let bob = try Self.tokens(keysmith, account: "bob")
        server.stop()
        let queued = try keysmith.run(["token", "revoke-all", "--service", "dot", "--account", "bob", "--at-provider"])
        #expect(queued.status == 0 && queued.stdout.contains("queued (pending)"), "\(queued.output)")
        #expect(try keysmith.run(["token", "check", "--service", "dot", "--account", "bob", "read"]).status == 3)
        let pending = try keysmith.run(["token", "outbox", "--json"])
        #expect(pending.status == 11 && pending.stdout.contains(#""state":"pending""#) && pending.stdout.contains("refused the connection"), "\(pending.output)")
        #expect(!pending.stdout.contains(bob.refresh) && !pending.stdout.contains(bob.access))
        try server.start()
        #expect(try server.isActive(bob.access))
        // Another process sends it.
        let sent = try keysmith.run(["token", "outbox", "--send"])
        #expect(sent.status == 0 && sent.stdout.contains("Confirmed 1 revocation(s)."), "\(sent.output)")
        #expect(try !server.isActive(bob.access) && !server.refreshWorks(bob.refresh))
        let events = try keysmith.run(["audit", "show", "--json"]).stdout
        #expect(events.contains(#""event":"provider-revoke-retry""#) && events.components(separatedBy: #""event":"provider-revoke""#).count == 3, "\(events)")
    }

    @Test("--at-provider at a provider without a revocation endpoint is refused, naming why, and changes nothing here either")
    func noRevocationEndpoint() throws {
        let server = try OAuthTestServer()
        defer { server.destroy() }
        let keysmith = try Self.setUp(server)
        defer { keysmith.cleanup() }
        let secretFile = keysmith.directory + "/client-secret"
        let replaced = try CommandLineMistakesTests.shell(keysmith, "\"$KS\" provider add dot --replace --token-endpoint '\(server.url)/token/' --client-id ks-password --client-secret-fd 3 3<'\(secretFile)'")
        #expect(replaced.status == 0, "\(replaced.output)")
        try keysmith.run(["token", "import", "--service", "dot", "--account", "alice", "--requested", "read write"], stdin: try server.passwordGrant())
        for arguments in [["token", "revoke-all", "--service", "dot", "--account", "alice", "--at-provider"],
                          ["token", "delete", "--service", "dot", "--account", "alice", "--at-provider"],
                          ["revoke", "--scope", "read", "--service", "dot", "--at-provider"]] {
            let refused = try keysmith.run(arguments)
            #expect(refused.status == 64 && refused.stderr.contains("no revocation endpoint"), "\(arguments): \(refused.output)")
        }
        #expect(try keysmith.run(["token", "check", "--service", "dot", "--account", "alice", "read", "write"]).status == 0)
        #expect(try keysmith.run(["token", "outbox"]).status == 0)
    }

    @Test("bulk revoke --at-provider: every changed token's grant is revoked at the provider, 8 requests at a time; the figure is printed")
    func bulkRevokeAtProvider() throws {
        let server = try OAuthTestServer()
        defer { server.destroy() }
        let keysmith = try Self.setUp(server)
        defer { keysmith.cleanup() }
        let count = Int(ProcessInfo.processInfo.environment["KEYSMITH_PROVIDER_BULK_COUNT"] ?? "") ?? 100  // 1,000 for the figure in the notes
        var lines: [String] = []
        for index in 0..<count {
            lines.append(#"{"service":"dot","account":"user\#(index)","requested":"read write","response":\#(try server.passwordGrant(user: index % 2 == 0 ? "alice" : "bob"))}"#)
        }
        let imported = try keysmith.run(["token", "import", "--batch"], stdin: lines.joined(separator: "\n"))
        #expect(imported.status == 0, "\(imported.output)")
        let sample = try Self.tokens(keysmith, account: "user7")
        let started = Date()
        let revoked = try keysmith.run(["revoke", "--scope", "write", "--service", "dot", "--at-provider", "--json"])
        let elapsed = Date().timeIntervalSince(started)
        #expect(revoked.status == 0 && revoked.stdout.contains(#""at_provider":{"confirmed":\#(count),"pending":0,"failed":0}"#), "\(revoked.output)")
        #expect(try !server.isActive(sample.access) && !server.refreshWorks(sample.refresh))
        #expect(try server.request("/test/grant-alive?client_id=ks-password").json["alive"] as? Bool == false)
        print("bulk revocation at the provider: \(count) tokens (refresh and access token each) in \(String(format: "%.2f", elapsed)) s, 8 requests at a time")
    }

    @Test("a refresh whose answer names a scope revoked here keeps the new tokens and the revocation (the spent refresh token is never thrown away); invalid_grant ends the grant here, audited, exit 10")
    func refreshKeepsLocalRevocations() throws {
        let server = try OAuthTestServer()
        defer { server.destroy() }
        let keysmith = try Self.setUp(server, grants: ["alice"])
        defer { keysmith.cleanup() }
        #expect(try keysmith.run(["token", "revoke", "--service", "dot", "--account", "alice", "write"]).status == 0)
        let before = try Self.tokens(keysmith, account: "alice")
        // The server's tokens live an hour: asking for more forces a refresh; its answer names
        // "read write", and write was revoked here.
        let fresh = try keysmith.run(["token", "get", "--service", "dot", "--account", "alice", "--fresh", "--min-validity", "2h"])
        #expect(fresh.status == 0, "\(fresh.output)")
        let after = try Self.tokens(keysmith, account: "alice")
        #expect(after.access != before.access && after.refresh != before.refresh)
        #expect(try server.isActive(after.access))
        #expect(try keysmith.run(["token", "check", "--service", "dot", "--account", "alice", "read"]).status == 0)
        #expect(try keysmith.run(["token", "check", "--service", "dot", "--account", "alice", "write"]).status == 3)
        let audit = try keysmith.run(["audit", "show", "--event", "refresh", "--json"]).stdout
        #expect(audit.contains("which stay as they were here"), "\(audit)")
        // The grant ended at the provider behind Keysmith's back: invalid_grant ends it here too.
        #expect(try server.refreshWorks(after.refresh))  // spends it: the kept refresh token is now dead
        let dead = try keysmith.run(["token", "get", "--service", "dot", "--account", "alice", "--fresh", "--min-validity", "2h"])
        #expect(dead.status == 10 && dead.stderr.contains("invalid_grant"), "\(dead.output)")
        #expect(try keysmith.run(["token", "check", "--service", "dot", "--account", "alice", "read"]).status == 3)
        #expect(try keysmith.run(["audit", "show", "--event", "revoke-all", "--json"]).stdout.contains("invalid_grant"))
    }

    @Test("SIGINT, SIGTERM or SIGHUP while a refresh's answer is on its way: the process ends after it kept the answer, with the signal's status; the grant lives and the next call refreshes without invalid_grant",
          arguments: [SIGINT, SIGTERM, SIGHUP])
    func signalDuringRefresh(_ signal: Int32) throws {
        let server = try OAuthTestServer()
        defer { server.destroy() }
        let keysmith = try Self.setUp(server)
        defer { keysmith.cleanup() }
        try Self.addSlowProvider(keysmith, server)
        let before = try Self.tokens(keysmith, account: "alice", service: "slow")
        let issued = { try #require(try server.request("/test/refreshes?client_id=ks-password").json["issued"] as? Int) }
        let issuedBefore = try issued()
        let process = try SpawnedProcess(Keysmith.binary, ["token", "get", "--service", "slow", "--account", "alice", "--fresh", "--min-validity", "2h"],
                                         environment: keysmith.environment, directory: keysmith.directory,
                                         standardOutput: .file(keysmith.directory + "/fresh.out"), standardError: .file(keysmith.directory + "/fresh.err"),
                                         deadline: 120)
        // The signal is sent once the provider has spent the old refresh token and issued the
        // new one (its answer comes 1.5 s later): the event, not a guess at the time.
        let deadline = Date().addingTimeInterval(60)
        while try issued() == issuedBefore, Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        try #require(try issued() > issuedBefore, "the refresh never reached the provider")
        kill(process.processIdentifier, signal)
        process.waitUntilExit()
        #expect(process.terminationStatus == 128 + signal, "\((try? String(contentsOfFile: keysmith.directory + "/fresh.err", encoding: .utf8)) ?? "")")
        let after = try Self.tokens(keysmith, account: "alice", service: "slow")
        #expect(after.refresh != before.refresh, "the rotated refresh token was not kept")
        let next = try keysmith.run(["token", "get", "--service", "slow", "--account", "alice", "--fresh", "--min-validity", "2h"])
        #expect(next.status == 0, "\(next.output)")
        #expect(try keysmith.run(["token", "check", "--service", "slow", "--account", "alice", "read"]).status == 0)
    }

    @Test("token get --fresh on PostgreSQL, the lock's connection terminated while the refresh is at the provider (single-use refresh tokens, reuse detection): a second machine that takes the lock waits for the first one's answer instead of sending the spent refresh token; 0 reuses, the grant lives, in every round",
          .enabled(if: ProcessInfo.processInfo.environment["KEYSMITH_TEST_DATABASE_URL"] != nil))
    func lostLockSendsNoRefreshTwice() throws {
        let server = try OAuthTestServer()
        defer { server.destroy() }
        let database = try PostgresCommandTests.keysmith()
        #expect(try database.run(["postgres", "init"]).status == 0)
        let keysmith = try Self.setUp(server, on: database)
        defer { keysmith.cleanup() }
        try Self.addSlowProvider(keysmith, server)
        let counts = { () throws -> (issued: Int, revoked: Int) in
            let json = try server.request("/test/refreshes?client_id=ks-password").json
            return (try #require(json["issued"] as? Int), try #require(json["revoked"] as? Int))
        }
        // Two machines: a home each, nothing shared but the store.
        func machine(_ name: String) throws -> [String: String] {
            var environment = keysmith.environment
            let home = keysmith.directory + "/" + name
            try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
            environment["HOME"] = home
            environment["TMPDIR"] = home
            return environment
        }
        let fresh = ["token", "get", "--service", "slow", "--account", "alice", "--fresh", "--min-validity", "2h", "--no-newline"]
        for round in 0..<3 {
            let before = try counts()
            let first = try SpawnedProcess(Keysmith.binary, fresh, environment: try machine("a"), directory: keysmith.directory,
                                           standardOutput: .file(keysmith.directory + "/a.out"), standardError: .file(keysmith.directory + "/a.err"),
                                           deadline: 120)
            // Once the provider has spent the refresh token (its answer comes 1.5 s later), the
            // first process's lock connection is terminated, as a failover or a pooler would.
            let deadline = Date().addingTimeInterval(60)
            while try counts().issued == before.issued, Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
            try #require(try counts().issued > before.issued, "round \(round): the refresh never reached the provider")
            let terminated = try PostgresCommandTests.psql(
                "SELECT count(pg_terminate_backend(pid))::text FROM pg_stat_activity WHERE application_name = 'keysmith-lock \(first.processIdentifier)'")
            #expect(terminated == "1", "round \(round): \(terminated) lock connections of the first process were terminated")
            // The second machine takes the lock at once and finds the token unchanged.
            let second = try SpawnedProcess(Keysmith.binary, fresh, environment: try machine("b"), directory: keysmith.directory,
                                            standardOutput: .file(keysmith.directory + "/b.out"), standardError: .file(keysmith.directory + "/b.err"),
                                            deadline: 120)
            first.waitUntilExit()
            second.waitUntilExit()
            let read = { (name: String) in (try? String(contentsOfFile: keysmith.directory + "/" + name, encoding: .utf8)) ?? "" }
            #expect(first.terminationStatus == 0, "round \(round): \(read("a.err"))")
            #expect(second.terminationStatus == 0, "round \(round): \(read("b.err"))")
            #expect(!read("a.out").isEmpty && read("a.out") == read("b.out"), "round \(round): the two machines were handed different tokens")
            let after = try counts()
            #expect(after.issued == before.issued + 1, "round \(round): \(after.issued - before.issued) refreshes for one expiry")
            #expect(try server.request("/test/grant-alive?client_id=ks-password").json["alive"] as? Bool == true, "round \(round): the grant was ended")
            // What both were handed is what is kept (the next round refreshes again: 2 h is
            // longer than the provider's tokens live).
            let token = try keysmith.run(["token", "get", "--service", "slow", "--account", "alice", "--no-newline"])
            #expect(token.stdout == read("a.out"))
        }
        #expect(try keysmith.run(["token", "check", "--service", "slow", "--account", "alice", "read"]).status == 0)
    }

    @Test("token introspect --at-provider and token reconcile: a token revoked at the provider behind Keysmith's back becomes revoked here, audited; one still active stays")
    func introspectAndReconcile() throws {
        let server = try OAuthTestServer()
        defer { server.destroy() }
        let keysmith = try Self.setUp(server, grants: ["alice", "bob"])
        defer { keysmith.cleanup() }
        let alice = try keysmith.run(["token", "introspect", "--service", "dot", "--account", "alice", "--at-provider"])
        #expect(alice.status == 0 && alice.stdout.contains(#""active":true"#) && alice.stdout.contains(#""revoked_here":false"#), "\(alice.output)")
        // Bob's grant is revoked at the provider by someone else (its console, say).
        let bob = try Self.tokens(keysmith, account: "bob")
        #expect(try server.request("/revoke_token/", form: ["token": bob.refresh, "token_type_hint": "refresh_token"],
                                   basic: ("ks-password", server.clientSecret)).status == 200)
        #expect(try keysmith.run(["token", "check", "--service", "dot", "--account", "bob", "read"]).status == 0)  // not known here yet
        let reconciled = try keysmith.run(["token", "reconcile", "--service", "dot", "--json"])
        #expect(reconciled.status == 0 && reconciled.stdout == #"{"checked":2,"failed":{},"revoked":["bob"]}"# + "\n", "\(reconciled.output)")
        #expect(try keysmith.run(["token", "check", "--service", "dot", "--account", "bob", "read"]).status == 3)
        #expect(try keysmith.run(["token", "check", "--service", "dot", "--account", "alice", "read"]).status == 0)
        let audit = try keysmith.run(["audit", "show", "--event", "revoke-all", "--json"]).stdout
        #expect(audit.contains("inactive at the provider"), "\(audit)")
        let again = try keysmith.run(["token", "introspect", "--service", "dot", "--account", "bob", "--at-provider"])
        #expect(again.status == 3 && again.stdout.contains(#""active":false"#), "\(again.output)")
        #expect(!reconciled.output.contains(bob.access) && !again.output.contains(bob.access))
    }

    /// A person's browser, played by Python: `authorize URL` prints where the provider redirects
    /// (as user alice, approved at once); `get URL` prints the answer's status, or `refused`.
    static func browser(_ keysmith: Keysmith, _ arguments: [String]) throws -> String {
        let script = keysmith.directory + "/browser.py"
        if !FileManager.default.fileExists(atPath: script) {
            try """
                import sys, urllib.error, urllib.request
                class Stay(urllib.request.HTTPRedirectHandler):
                    def redirect_request(self, *args, **kwargs): return None
                mode, url = sys.argv[1], sys.argv[2]
                if mode == "authorize":
                    try:
                        urllib.request.build_opener(Stay).open(urllib.request.Request(url, headers={"X-Test-User": "alice"}), timeout=30)
                        print("no redirect")
                    except urllib.error.HTTPError as error:
                        print(error.headers.get("Location", "no location"))
                else:
                    try:
                        print(urllib.request.urlopen(url, timeout=30).status)
                    except urllib.error.HTTPError as error:
                        print(error.code)
                    except (ConnectionRefusedError, urllib.error.URLError):
                        print("refused")
                """.write(toFile: script, atomically: true, encoding: .utf8)
        }
        let python = try #require(ProcessInfo.processInfo.environment["KEYSMITH_TEST_OAUTH_PYTHON"])
        let result = try spawnAndWait(python, [script] + arguments, deadline: 60)
        return String(decoding: result.stdout, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Starts `token login --browser` and waits for the address it prints.
    static func startBrowserLogin(_ keysmith: Keysmith, account: String) throws -> (SpawnedProcess, url: String, stderr: String) {
        let stderr = keysmith.directory + "/browser-\(account).err"
        let login = try SpawnedProcess(Keysmith.binary, ["token", "login", "--provider", "dot", "--account", account, "--scope", "read", "--browser",
                                                         "--browser-timeout", "60s"],
                                       environment: keysmith.environment, directory: keysmith.directory,
                                       standardOutput: .file(keysmith.directory + "/browser-\(account).out"), standardError: .file(stderr), deadline: 120)
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            let text = (try? String(contentsOfFile: stderr, encoding: .utf8)) ?? ""
            if let line = text.split(separator: "\n").first(where: { $0.hasPrefix("http") }) { return (login, String(line), stderr) }
            Thread.sleep(forTimeInterval: 0.05)
        }
        throw TestServerError("token login --browser printed no address")
    }

    @Test("token login --browser: PKCE S256 and a loopback redirect complete the sign-in; the listener answers one request and closes; a wrong state and a code exchanged without the verifier are refused, and nothing is kept")
    func browserSignIn() throws {
        let server = try OAuthTestServer()
        defer { server.destroy() }
        let keysmith = try Self.setUp(server, client: "ks-code", auth: "none")
        defer { keysmith.cleanup() }
        // The sign-in that works.
        let (login, url, stderr) = try Self.startBrowserLogin(keysmith, account: "alice")
        #expect(url.contains("code_challenge_method=S256") && url.contains("code_challenge=") && url.contains("state="), "\(url)")
        #expect(!url.contains("code_verifier"))
        let redirect = try Self.browser(keysmith, ["authorize", url])
        #expect(redirect.hasPrefix("http://127.0.0.1:") && redirect.contains("code="), "\(redirect)")
        #expect(try Self.browser(keysmith, ["get", redirect]) == "200")
        login.waitUntilExit()
        #expect(login.terminationStatus == 0, "\((try? String(contentsOfFile: stderr, encoding: .utf8)) ?? "")")
        // The listener answered one request and closed.
        #expect(try Self.browser(keysmith, ["get", redirect]) == "refused")
        let token = try keysmith.run(["token", "get", "--service", "dot", "--account", "alice", "--no-newline"]).stdout
        #expect(try server.isActive(token))

        // A redirect whose state is not the sign-in's: refused, nothing kept.
        let (forged, forgedURL, forgedErr) = try Self.startBrowserLogin(keysmith, account: "mallory")
        let genuine = try Self.browser(keysmith, ["authorize", forgedURL])
        let tampered = genuine.replacingOccurrences(of: "state=", with: "state=x")
        #expect(try Self.browser(keysmith, ["get", tampered]) == "400")
        forged.waitUntilExit()
        let forgedOutput = (try? String(contentsOfFile: forgedErr, encoding: .utf8)) ?? ""
        #expect(forged.terminationStatus == 11 && forgedOutput.contains("state does not match"), "\(forgedOutput)")
        #expect(try keysmith.run(["token", "get", "--service", "dot", "--account", "mallory"]).status == 2)

        // A code taken on its way, exchanged without the verifier: the provider refuses it (PKCE).
        let (third, thirdURL, _) = try Self.startBrowserLogin(keysmith, account: "carol")
        let intercepted = try Self.browser(keysmith, ["authorize", thirdURL])
        let code = try #require(URLComponents(string: intercepted)?.queryItems?.first { $0.name == "code" }?.value)
        let redirectURI = try #require(URLComponents(string: thirdURL)?.queryItems?.first { $0.name == "redirect_uri" }?.value)
        let stolen = try server.request("/token/", form: ["grant_type": "authorization_code", "code": code, "redirect_uri": redirectURI,
                                                          "client_id": "ks-code", "code_verifier": String(repeating: "x", count: 43)])
        #expect(stolen.status == 400 && stolen.json["access_token"] == nil, "\(stolen)")
        kill(third.processIdentifier, SIGTERM)
        third.waitUntilExit()
    }

    @Test("a bulk revocation at the provider killed (SIGKILL) halfway: the local revocation and the whole queue were committed first; a second process sends the rest; every grant ends at the provider, none is forgotten")
    func bulkRevocationKilledHalfway() throws {
        let server = try OAuthTestServer()
        defer { server.destroy() }
        let keysmith = try Self.setUp(server)
        defer { keysmith.cleanup() }
        let count = 300
        var lines: [String] = []
        for index in 0..<count {
            lines.append(#"{"service":"dot","account":"user\#(index)","requested":"read write","response":\#(try server.passwordGrant(user: index % 2 == 0 ? "alice" : "bob"))}"#)
        }
        #expect(try keysmith.run(["token", "import", "--batch"], stdin: lines.joined(separator: "\n")).status == 0)
        let samples = try [0, 150, 299].map { try Self.tokens(keysmith, account: "user\($0)") }
        let revoking = try SpawnedProcess(Keysmith.binary, ["revoke", "--scope", "write", "--service", "dot", "--at-provider"],
                                          environment: keysmith.environment, directory: keysmith.directory, deadline: 300)
        // Killed once the provider has confirmed some and not all.
        var pendingAtKill = 0
        let deadline = Date().addingTimeInterval(120)
        while Date() < deadline, revoking.isRunning {
            let listed = try keysmith.run(["token", "outbox", "--json"])
            let pending = listed.stdout.components(separatedBy: #""state":"pending""#).count - 1
            if pending > 0 && pending < count {
                kill(revoking.processIdentifier, SIGKILL)
                pendingAtKill = pending
                break
            }
            Thread.sleep(forTimeInterval: 0.02)
        }
        revoking.waitUntilExit()
        #expect(pendingAtKill > 0, "the revocation finished before it could be killed halfway")
        // Revoked here at once, all of them: the local change and the queue were one commit.
        let listed = try keysmith.run(["token", "list", "--service", "dot", "--json"]).stdout
        #expect(!listed.contains(#""active":true"#))
        // A second process sends the rest.
        let sent = try keysmith.run(["token", "outbox", "--send", "--json"])
        #expect(sent.status == 0 && sent.stdout.contains(#""entries":[]"#), "\(sent.output)")
        for sample in samples { #expect(try !server.isActive(sample.access) && !server.refreshWorks(sample.refresh)) }
        #expect(try server.request("/test/grant-alive?client_id=ks-password").json["alive"] as? Bool == false)
        let audit = try keysmith.run(["audit", "show", "--event", "provider-revoke", "--json"]).stdout
        let confirmedTokens = audit.components(separatedBy: "user").count - 1
        #expect(confirmedTokens >= count, "every token is named by a provider-revoke entry (\(confirmedTokens))")
        print("bulk revocation at the provider killed with \(pendingAtKill) of \(count) pending; the outbox sent the rest in a second process")
    }

    @Test("a revocation the provider refuses for good (a wrong client secret) is exit 10 and stays failed; --retry-failed sends it once the secret is mended; --drop gives one up, audited")
    func outboxRetryAndDrop() throws {
        let server = try OAuthTestServer()
        defer { server.destroy() }
        let keysmith = try Self.setUp(server, grants: ["alice", "bob"])
        defer { keysmith.cleanup() }
        let alice = try Self.tokens(keysmith, account: "alice")
        func provider(secret: String) throws {
            let file = keysmith.directory + "/secret-\(UUID().uuidString)"
            try (secret + "\n").write(toFile: file, atomically: true, encoding: .utf8)
            let added = try CommandLineMistakesTests.shell(keysmith, "\"$KS\" provider add dot --replace --issuer '\(server.url)' --client-id ks-password --client-secret-fd 3 3<'\(file)'")
            #expect(added.status == 0, "\(added.output)")
        }
        try provider(secret: "not-the-secret")
        let refused = try keysmith.run(["token", "revoke-all", "--service", "dot", "--account", "alice", "--at-provider"])
        #expect(refused.status == 10 && refused.stderr.contains("invalid_client"), "\(refused.output)")
        #expect(try keysmith.run(["token", "outbox"]).status == 10)
        #expect(try server.isActive(alice.access))
        try provider(secret: server.clientSecret)
        let retried = try keysmith.run(["token", "outbox", "--retry-failed"])
        #expect(retried.status == 0 && retried.stdout.contains("Confirmed 1 revocation(s)."), "\(retried.output)")
        #expect(try !server.isActive(alice.access))

        try provider(secret: "not-the-secret")
        #expect(try keysmith.run(["token", "revoke-all", "--service", "dot", "--account", "bob", "--at-provider"]).status == 10)
        let listed = try keysmith.run(["token", "outbox", "--json"])
        let document = try #require(try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [String: Any])
        let id = try #require((document["entries"] as? [[String: Any]])?.first?["id"] as? String)
        #expect(try keysmith.run(["token", "outbox", "--drop", id]).status == 0)
        #expect(try keysmith.run(["token", "outbox"]).status == 0)
        #expect(try keysmith.run(["audit", "show", "--event", "provider-revoke-dropped", "--json"]).stdout.contains("given up"))
    }
}
