import Foundation
import Testing

@Suite("the keysmith command: tokens")
struct TokenCommandTests {
    func prepared() throws -> Keysmith {
        var keysmith = try Keysmith()
        keysmith.environment["KEYSMITH_KEYFILE"] = keysmith.keyfile
        try keysmith.run(["init"])
        return keysmith
    }

    let response = #"{"access_token":"AT-SECRET-9","refresh_token":"RT-SECRET-9","token_type":"Bearer","expires_in":3600,"scope":"groups:read posts:write"}"#

    /// `token scopes --json`: one document; its scopes as objects.
    func scopeObjects(_ keysmith: Keysmith, _ location: [String]) throws -> [[String: Any]] {
        let shown = try keysmith.run(["token", "scopes", "--json"] + location)
        #expect(shown.status == 0, "\(shown.output)")
        #expect(shown.stdout.split(separator: "\n").count == 1, "one document")
        let document = try #require(try JSONSerialization.jsonObject(with: Data(shown.stdout.utf8)) as? [String: Any])
        return try #require(document["scopes"] as? [[String: Any]])
    }

    @Test("import, scopes, check, revoke and introspect a token; check's exit code follows the grant")
    func lifecycle() throws {
        let keysmith = try prepared()
        defer { keysmith.cleanup() }
        let location = ["--service", "news", "--account", "bob"]
        let imported = try keysmith.run(["token", "import"] + location + ["--requested", "groups:read posts:write posts:delete", "--client", "web"],
                                        stdin: response)
        #expect(imported.status == 0, "\(imported.output)")
        #expect(imported.stdout.contains("declined posts:delete"))
        let scopes = try keysmith.run(["token", "scopes", "--json"] + location)
        let states = try scopeObjects(keysmith, location)
        #expect(states.count == 3)
        #expect(states.contains { $0["scope"] as? String == "posts:delete" && $0["state"] as? String == "declined" })
        #expect(try keysmith.run(["token", "check", "--quiet"] + location + ["posts:write", "groups:read"]).status == 0)
        #expect(try keysmith.run(["token", "check"] + location + ["posts:delete"]).status == 3)
        #expect(try keysmith.run(["token", "revoke"] + location + ["posts:write"]).status == 0)
        let denied = try keysmith.run(["token", "check"] + location + ["posts:write"])
        #expect(denied.status == 3)
        #expect(denied.stderr.contains("posts:write is revoked"))
        let introspection = try keysmith.run(["token", "introspect"] + location)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(introspection.stdout.utf8)) as? [String: Any])
        #expect(object["active"] as? Bool == true)
        #expect(object["scope"] as? String == "groups:read")
        #expect(object["client_id"] as? String == "web")
        #expect(try keysmith.run(["token", "revoke-all"] + location).status == 0)
        #expect(try keysmith.run(["token", "check"] + location + ["groups:read"]).status == 3)
        let audit = try keysmith.run(["audit", "verify"])
        #expect(audit.status == 0)
        #expect(audit.stdout.contains("3 entries"))
        for result in [imported, scopes, denied, introspection, audit] {
            #expect(!result.output.contains("AT-SECRET-9") && !result.output.contains("RT-SECRET-9"))
        }
    }

    @Test("bad input: malformed JSON, a missing access_token, a negative expires_in, an invalid scope, an unknown token")
    func badInput() throws {
        let keysmith = try prepared()
        defer { keysmith.cleanup() }
        let location = ["--service", "news", "--account", "bob"]
        let malformed = try keysmith.run(["token", "import"] + location, stdin: "{not json")
        #expect(malformed.status == 64)
        #expect(malformed.stderr.contains("not a JSON object"))
        let missing = try keysmith.run(["token", "import"] + location, stdin: #"{"token_type":"Bearer"}"#)
        #expect(missing.status == 64)
        #expect(missing.stderr.contains("access_token"))
        let negative = try keysmith.run(["token", "import"] + location, stdin: #"{"access_token":"x","token_type":"Bearer","expires_in":-1}"#)
        #expect(negative.stderr.contains("negative"))
        // Issue 15, finding 9: a huge expires_in (as a string or a number) is refused at import;
        // nothing is stored, and introspection can never trap on a stored date.
        for huge in [#""9223372036854775807""#, "9223372036854775807", "999999999999999", #""3155760001""#] {
            let refused = try keysmith.run(["token", "import"] + location,
                                           stdin: #"{"access_token":"x","token_type":"Bearer","expires_in":"# + huge + "}")
            #expect(refused.status == 64, "\(huge): \(refused.output)")
            #expect(refused.stderr.contains("expires_in"), "\(huge)")
            #expect(!refused.output.contains("\"x\""))
        }
        #expect(try keysmith.run(["token", "introspect"] + location).status == 2)
        let century = try keysmith.run(["token", "import"] + location, stdin: #"{"access_token":"x","token_type":"Bearer","expires_in":3153600000}"#)
        #expect(century.status == 0, "\(century.output)")
        let introspected = try keysmith.run(["token", "introspect"] + location)
        #expect(introspected.status == 0, "\(introspected.output)")
        // RFC 7662's times are numbers (seconds since 1970), unlike every other date keysmith prints.
        let object = try #require(try JSONSerialization.jsonObject(with: Data(introspected.stdout.utf8)) as? [String: Any])
        let issued = try #require(object["iat"] as? Int, "\(object)"), expires = try #require(object["exp"] as? Int, "\(object)")
        #expect(expires - issued == 3_153_600_000)
        #expect(abs(Double(issued) - Date().timeIntervalSince1970) < 600)
        #expect(object["nbf"] as? Int == issued)
        let badScope = try keysmith.run(["token", "import"] + location + ["--requested", #"ok bad\scope"#], stdin: response)
        #expect(badScope.status == 64)
        #expect(badScope.stderr.contains("backslash"))
        let unknown = try keysmith.run(["token", "scopes", "--service", "news", "--account", "nobody"])
        #expect(unknown.status == 2)
        #expect(unknown.stderr.contains("no token"))
        #expect(try listedItems(keysmith.run(["secret", "list", "--json"])).isEmpty)
    }

    @Test("bulk revocation across tokens, with a dry run, filters and idempotence")
    func bulk() throws {
        let keysmith = try prepared()
        defer { keysmith.cleanup() }
        for (account, client) in [("a", "web"), ("b", "web"), ("c", "cli")] {
            #expect(try keysmith.run(["token", "import", "--service", "news", "--account", account, "--client", client], stdin: response).status == 0)
        }
        let dry = try keysmith.run(["revoke", "--scope", "posts:write", "--client", "web", "--dry-run", "--json"])
        #expect(dry.stdout.contains(#""changed":2"#) && dry.stdout.contains(#""dry_run":true"#))
        #expect(try keysmith.run(["token", "check", "--service", "news", "--account", "a", "posts:write"]).status == 0)
        let done = try keysmith.run(["revoke", "--scope", "posts:write", "--client", "web"])
        #expect(done.stdout.contains("Revoked posts:write on 2 of 2"))
        #expect(try keysmith.run(["token", "check", "--service", "news", "--account", "a", "posts:write"]).status == 3)
        #expect(try keysmith.run(["token", "check", "--service", "news", "--account", "c", "posts:write"]).status == 0)
        let again = try keysmith.run(["revoke", "--scope", "posts:write", "--client", "web", "--json"])
        #expect(again.stdout.contains(#""changed":0"#))
        #expect(try keysmith.run(["audit", "verify"]).stdout.contains("4 entries"))
    }

    @Test("providers' scope forms: GitHub's commas, Slack's commas, Facebook's array and a comma-separated --requested are separate scopes")
    func providerScopeForms() throws {
        let keysmith = try prepared()
        defer { keysmith.cleanup() }
        func scopes(_ account: String) throws -> [String: String] {
            var states: [String: String] = [:]
            for object in try scopeObjects(keysmith, ["--service", "p", "--account", account]) {
                states[object["scope"] as? String ?? "?"] = object["state"] as? String
            }
            return states
        }
        let github = #"{"access_token":"gho_X","token_type":"bearer","scope":"repo,gist"}"#
        #expect(try keysmith.run(["token", "import", "--service", "p", "--account", "github"], stdin: github).status == 0)
        #expect(try scopes("github") == ["repo": "granted", "gist": "granted"])
        let slack = #"{"access_token":"xoxb-X","token_type":"bot","scope":"commands,incoming-webhook"}"#
        #expect(try keysmith.run(["token", "import", "--service", "p", "--account", "slack"], stdin: slack).status == 0)
        #expect(try scopes("slack") == ["commands": "granted", "incoming-webhook": "granted"])
        let facebook = #"{"access_token":"EAA-X","token_type":"bearer","scope":["email","public_profile"]}"#
        let imported = try keysmith.run(["token", "import", "--service", "p", "--account", "facebook",
                                         "--requested", "email,public_profile,user_friends"], stdin: facebook)
        #expect(imported.status == 0, "\(imported.output)")
        #expect(try scopes("facebook") == ["email": "granted", "public_profile": "granted", "user_friends": "declined"])
        // Each scope is still checked, and a scope of the wrong JSON type is a clear error.
        let bad = try keysmith.run(["token", "import", "--service", "p", "--account", "bad"],
                                   stdin: #"{"access_token":"x","token_type":"bearer","scope":["ok","no\\pe"]}"#)
        #expect(bad.status == 64, "\(bad.output)")
        let number = try keysmith.run(["token", "import", "--service", "p", "--account", "bad"],
                                      stdin: #"{"access_token":"x","token_type":"bearer","scope":42}"#)
        #expect(number.status == 64)
        #expect(number.stderr.contains("scope is neither a string nor an array"), "\(number.output)")
        #expect(try keysmith.run(["token", "check", "--service", "p", "--account", "bad", "ok"]).status == 2)
    }

    @Test("bulk revocation: a misspelled scope or no matching token exits 2 and revokes nothing; JSON names tokens as objects")
    func bulkExitCodesAndJSON() throws {
        let keysmith = try prepared()
        defer { keysmith.cleanup() }
        for account in ["a at b", "a"] {
            #expect(try keysmith.run(["token", "import", "--service", "news", "--account", account, "--client", "web"], stdin: response).status == 0)
        }
        let misspelled = try keysmith.run(["revoke", "--scope", "posts:write", "--scope", "posts:wirte", "--client", "web"])
        #expect(misspelled.status == 2, "\(misspelled.output)")
        #expect(misspelled.stderr.contains("posts:wirte") && misspelled.stderr.contains("nothing was revoked"))
        // Not even the scope that exists was revoked.
        #expect(try keysmith.run(["token", "check", "--service", "news", "--account", "a", "posts:write"]).status == 0)
        let nobody = try keysmith.run(["revoke", "--scope", "posts:write", "--client", "mobile"])
        #expect(nobody.status == 2, "\(nobody.output)")
        #expect(nobody.stderr.contains("no token matches client mobile"))
        #expect(try keysmith.run(["audit", "verify"]).stdout.contains("2 entries"))
        // Names holding " at " stay unambiguous: two fields per token.
        let revoked = try keysmith.run(["revoke", "--scope", "posts:write", "--client", "web", "--json"])
        #expect(revoked.status == 0, "\(revoked.output)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(revoked.stdout.utf8)) as? [String: Any])
        let tokens = try #require(report["tokens"] as? [[String: String]])
        #expect(Set(tokens.map { $0["account"] ?? "" }) == ["a at b", "a"])
        #expect(tokens.allSatisfy { $0["service"] == "news" })
        #expect(report["dry_run"] as? Bool == false)
        #expect(revoked.stdout.split(separator: "\n").count == 1)  // one JSON document
    }

    @Test("token list filters by client, scope, state and expiry and prints one JSON document; get prints a token; delete is audited")
    func listGetDelete() throws {
        let keysmith = try prepared()
        defer { keysmith.cleanup() }
        func importToken(_ account: String, client: String, expiresIn: Int?, scope: String) throws {
            let expiry = expiresIn.map { #","expires_in":\#($0)"# } ?? ""
            let body = #"{"access_token":"AT-\#(account)","refresh_token":"RT-\#(account)","token_type":"Bearer"\#(expiry),"scope":"\#(scope)"}"#
            let result = try keysmith.run(["token", "import", "--service", "news", "--account", account, "--client", client,
                                           "--requested", "groups:read posts:write posts:delete"], stdin: body)
            #expect(result.status == 0, "\(result.output)")
        }
        try importToken("soon", client: "web", expiresIn: 3600, scope: "groups:read posts:write")
        try importToken("later", client: "web", expiresIn: 3 * 86_400, scope: "groups:read")
        try importToken("forever", client: "cli", expiresIn: nil, scope: "groups:read posts:write")
        try importToken("gone", client: "web", expiresIn: 0, scope: "groups:read")
        func listed(_ arguments: [String]) throws -> [[String: Any]] {
            let result = try keysmith.run(["token", "list", "--json"] + arguments)
            #expect(result.status == 0, "\(result.output)")
            #expect(result.stdout.split(separator: "\n").count == 1, "one document")
            let document = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
            return try #require(document["tokens"] as? [[String: Any]])
        }
        func accounts(_ arguments: [String]) throws -> [String] { try listed(arguments).compactMap { $0["account"] as? String } }
        #expect(try accounts([]) == ["forever", "gone", "later", "soon"])
        #expect(try accounts(["--expiring-within", "1d"]) == ["soon"])
        #expect(try accounts(["--expiring-within", "4d", "--client", "web"]) == ["later", "soon"])
        #expect(try accounts(["--scope", "posts:write", "--state", "granted"]) == ["forever", "soon"])
        #expect(try accounts(["--scope", "posts:write", "--state", "declined"]) == ["gone", "later"])
        #expect(try accounts(["--state", "expired"]) == ["gone"])
        let soon = try #require(try listed(["--expiring-within", "1d"]).first)
        #expect(soon["client_id"] as? String == "web" && soon["active"] as? Bool == true && soon["has_refresh_token"] as? Bool == true)
        #expect((soon["expires_at"] as? String)?.hasSuffix("Z") == true)
        let scopes = try #require(soon["scopes"] as? [[String: Any]])
        #expect(scopes.map { $0["scope"] as? String } == ["groups:read", "posts:delete", "posts:write"])
        #expect(scopes.allSatisfy { ($0["changed_at"] as? String)?.hasSuffix("Z") == true })
        let all = try keysmith.run(["token", "list", "--json"])
        #expect(!all.stdout.contains("AT-") && !all.stdout.contains("RT-"))
        #expect(try keysmith.run(["token", "list", "--expiring-within", "soon"]).status == 64)
        #expect(try keysmith.run(["token", "list", "--state", "gone"]).status == 64)
        #expect(try keysmith.run(["token", "list", "--scope", "groups:read,posts:write"]).status == 64)

        // get: the access token for a header, the refresh token on request; never for an expired one.
        let access = try keysmith.run(["token", "get", "--service", "news", "--account", "soon"])
        #expect(access.status == 0 && access.stdout == "AT-soon\n", "\(access.output)")
        #expect(try keysmith.run(["token", "get", "--service", "news", "--account", "soon", "--refresh", "--no-newline"]).stdout == "RT-soon")
        let expired = try keysmith.run(["token", "get", "--service", "news", "--account", "gone"])
        #expect(expired.status == 3 && expired.stdout.isEmpty && expired.stderr.contains("expired"), "\(expired.output)")
        #expect(!expired.stderr.contains("AT-gone"))
        #expect(try keysmith.run(["token", "get", "--service", "news", "--account", "gone", "--refresh"]).stdout == "RT-gone\n")
        #expect(try keysmith.run(["token", "get", "--service", "news", "--account", "nobody"]).status == 2)

        // delete: gone from the list, audited, and a second delete exits 2.
        let deleted = try keysmith.run(["token", "delete", "--service", "news", "--account", "gone"])
        #expect(deleted.status == 0, "\(deleted.output)")
        #expect(try accounts([]) == ["forever", "later", "soon"])
        #expect(try keysmith.run(["token", "delete", "--service", "news", "--account", "gone"]).status == 2)
        let audit = try keysmith.run(["audit", "show", "--json"])
        #expect(audit.stdout.contains(#""event":"delete""#), "\(audit.output)")
        #expect(try keysmith.run(["audit", "verify"]).stdout.contains("5 entries"))
    }

    @Test("a provider's extra response fields are kept: listed by name, printed one at a time by token get --field, kept across a re-import")
    func responseFieldsKept() throws {
        var keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        keysmith.environment["KEYSMITH_KEYFILE"] = keysmith.keyfile
        try keysmith.run(["init"])
        let slack = #"{"ok":true,"access_token":"xoxb-secret","token_type":"bot","scope":"commands,incoming-webhook","bot_user_id":"U0KRQLJ9H","team":{"name":"Slack Softball Team","id":"T9TK3CUKW"},"incoming_webhook":{"url":"https://hooks.slack.com/TXXXXX/BXXXXX/secret-part"}}"#
        let imported = try keysmith.run(["token", "import", "--service", "slack", "--account", "bot"], stdin: slack)
        #expect(imported.status == 0, "\(imported.output)")
        let document = try keysmith.run(["token", "scopes", "--service", "slack", "--account", "bot", "--json"])
        #expect(document.stdout.contains(#""response_fields":["bot_user_id","incoming_webhook","ok","team"]"#), "\(document.output)")
        #expect(!document.stdout.contains("secret-part") && !document.stdout.contains("xoxb-secret"))
        #expect(try keysmith.run(["token", "get", "--service", "slack", "--account", "bot", "--field", "team"]).stdout
                == #"{"id":"T9TK3CUKW","name":"Slack Softball Team"}"# + "\n")
        let missing = try keysmith.run(["token", "get", "--service", "slack", "--account", "bot", "--field", "id_token"])
        #expect(missing.status == 2 && missing.stderr.contains("bot_user_id, incoming_webhook, ok, team"))
        #expect(try keysmith.run(["token", "get", "--service", "slack", "--account", "bot", "--field", "ok", "--refresh"]).status == 64)
        // A re-import (an update) that carries one field replaces it and keeps the rest.
        let update = try keysmith.run(["token", "import", "--service", "slack", "--account", "bot"],
                                      stdin: #"{"access_token":"xoxb-2","token_type":"bot","scope":"commands,incoming-webhook","bot_user_id":"U2"}"#)
        #expect(update.status == 0, "\(update.output)")
        #expect(try keysmith.run(["token", "get", "--service", "slack", "--account", "bot", "--field", "bot_user_id"]).stdout == "\"U2\"\n")
        #expect(try keysmith.run(["token", "get", "--service", "slack", "--account", "bot", "--field", "incoming_webhook"]).stdout.contains("secret-part"))
        let audit = try keysmith.run(["audit", "show", "--json"])
        #expect(!audit.stdout.contains("secret-part") && !audit.stdout.contains("Softball"))
    }

    @Test("re-importing a kept token updates it with its history: narrowing declines, new scopes are granted, revoked ones stay revoked")
    func reimportKeepsHistory() throws {
        let keysmith = try prepared()
        defer { keysmith.cleanup() }
        let location = ["--service", "news", "--account", "bob"]
        func states() throws -> [String: (state: String, reason: String)] {
            var result: [String: (String, String)] = [:]
            for object in try scopeObjects(keysmith, location) {
                result[object["scope"] as? String ?? "?"] = (object["state"] as? String ?? "?", object["reason"] as? String ?? "?")
            }
            return result
        }
        func body(_ scope: String, _ access: String) -> String {
            #"{"access_token":"\#(access)","token_type":"Bearer","expires_in":3600,"scope":"\#(scope)"}"#
        }
        #expect(try keysmith.run(["token", "import", "--client", "web", "--subject", "bob"] + location, stdin: body("groups:read posts:write", "A1")).status == 0)
        #expect(try keysmith.run(["token", "revoke", "--reason", "incident 7"] + location + ["posts:write"]).status == 0)
        // The same grant again: the revocation stands, the new access token is kept.
        let again = try keysmith.run(["token", "import"] + location, stdin: body("groups:read posts:write", "A2"))
        #expect(again.status == 0, "\(again.output)")
        #expect(again.stdout.contains("kept revoked posts:write"))
        #expect(try states()["posts:write"]?.state == "revoked")
        #expect(try states()["posts:write"]?.reason.contains("incident 7") == true)
        #expect(try keysmith.run(["token", "get"] + location).stdout == "A2\n")
        // A new scope is added; one left out is dropped (declined, with the reason).
        let grown = try keysmith.run(["token", "import"] + location, stdin: body("posts:delete posts:write", "A3"))
        #expect(grown.status == 0, "\(grown.output)")
        #expect(try states()["posts:delete"]?.state == "granted")
        #expect(try states()["groups:read"]?.state == "declined")
        #expect(try states()["groups:read"]?.reason.contains("dropped") == true)
        // The identity stays: client and subject were not given again, and are kept.
        let listed = try keysmith.run(["token", "list", "--json", "--client", "web"])
        #expect(listed.stdout.contains(#""subject":"bob""#), "\(listed.output)")
        // Another client is a different token: refused unless --replace.
        let other = try keysmith.run(["token", "import", "--client", "mobile"] + location, stdin: body("groups:read", "A4"))
        #expect(other.status == 64 && other.stderr.contains("--replace"), "\(other.output)")
        // --allow-regrant grants a revoked scope again, history kept, and the audit entry says so.
        #expect(try keysmith.run(["token", "import", "--allow-regrant"] + location, stdin: body("posts:write", "A5")).status == 0)
        #expect(try states()["posts:write"]?.state == "granted")
        let regrant = try keysmith.run(["audit", "show", "--json", "--event", "update"])
        #expect(regrant.stdout.contains("granted again after a revocation (--allow-regrant): posts:write"), "\(regrant.output)")
        // After a log-out, a response granting nothing does not make the token active again.
        #expect(try keysmith.run(["token", "revoke-all"] + location).status == 0)
        #expect(try keysmith.run(["token", "import", "--allow-regrant"] + location,
                                 stdin: #"{"access_token":"A55","token_type":"Bearer","expires_in":3600}"#).status == 0)
        #expect(try keysmith.run(["token", "get"] + location).status == 3)
        #expect(try keysmith.run(["token", "import", "--allow-regrant"] + location, stdin: body("posts:write", "A5")).status == 0)
        // --replace starts over, and says what it discards, on screen and in the audit log.
        #expect(try keysmith.run(["token", "revoke"] + location + ["posts:delete"]).status == 0)
        let replaced = try keysmith.run(["token", "import", "--replace", "--client", "mobile"] + location, stdin: body("groups:read", "A6"))
        #expect(replaced.status == 0 && replaced.stdout.contains("the revocation of groups:read posts:delete is gone"), "\(replaced.output)")
        #expect(try Set(states().keys) == ["groups:read"])
        let audit = try keysmith.run(["audit", "show", "--json"])
        #expect(audit.stdout.components(separatedBy: #""event":"update""#).count - 1 == 5, "\(audit.output)")
        #expect(audit.stdout.contains(#""event":"replace""#) && audit.stdout.contains("discards the revocation of groups:read posts:delete"))
        #expect(try keysmith.run(["audit", "verify"]).status == 0)
    }

    /// Runs the command on a pseudo-terminal (its stdin, stdout, stderr and controlling
    /// terminal), answering `answer` when it asks a yes/no question.
    func onTerminal(_ keysmith: Keysmith, _ arguments: [String], answer: String) throws -> (status: Int32, output: String) {
        let script = """
            import os, pty, select, sys
            answer, argv = sys.argv[1].encode() + b"\\n", sys.argv[2:]
            if sys.argv[1] == "--no-controlling-terminal":
                # A terminal on the standard streams, but none the process can open as /dev/tty.
                fd, child = os.openpty()
                pid = os.fork()
                if pid == 0:
                    os.setsid()
                    for stream in (0, 1, 2):
                        os.dup2(child, stream)
                    os.execv(argv[0], argv)
                os.close(child)
            else:
                pid, fd = pty.fork()
                if pid == 0:
                    os.execv(argv[0], argv)
            out, sent = b"", False
            while True:
                try:
                    ready, _, _ = select.select([fd], [], [], 20)
                    data = os.read(fd, 4096) if ready else b""
                except OSError:
                    data = b""
                if not data:
                    break
                out += data
                if not sent and b"[y/N]" in out:
                    os.write(fd, answer)
                    sent = True
            _, status = os.waitpid(pid, 0)
            sys.stdout.write(out.decode(errors="replace"))
            sys.exit(os.WEXITSTATUS(status))
            """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", script, answer, Keysmith.binary] + arguments
        process.environment = keysmith.environment.merging(["KEYSMITH_KEYFILE": keysmith.keyfile, "PATH": "/usr/bin:/bin:/usr/local/bin"]) { $1 }
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return (process.terminationStatus, text)
    }

    @Test("a revocation from every token typed at a terminal asks first; no answer revokes nothing; scripts and filtered runs are not asked")
    func fleetWideRevocationAsks() throws {
        let keysmith = try prepared()
        defer { keysmith.cleanup() }
        #expect(try keysmith.run(["token", "import", "--service", "news", "--account", "a", "--client", "web"], stdin: response).status == 0)
        let declined = try onTerminal(keysmith, ["revoke", "--scope", "posts:write"], answer: "n")
        #expect(declined.status == 1, "\(declined.output)")
        #expect(declined.output.contains("from every token") && declined.output.contains("nothing was revoked"))
        #expect(try keysmith.run(["token", "check", "--service", "news", "--account", "a", "posts:write"]).status == 0)
        let accepted = try onTerminal(keysmith, ["revoke", "--scope", "posts:write"], answer: "y")
        #expect(accepted.status == 0, "\(accepted.output)")
        #expect(try keysmith.run(["token", "check", "--service", "news", "--account", "a", "posts:write"]).status == 3)
        // A terminal on stdin but no /dev/tty to ask on: refused, never taken as a yes.
        let unasked = try onTerminal(keysmith, ["revoke", "--scope", "groups:read"], answer: "--no-controlling-terminal")
        #expect(unasked.status == 64 && unasked.output.contains("give --yes"), "\(unasked.output)")
        #expect(try keysmith.run(["token", "check", "--service", "news", "--account", "a", "groups:read"]).status == 0)
        // Filtered, --yes, or from a script (no terminal): no question.
        let filtered = try onTerminal(keysmith, ["revoke", "--scope", "groups:read", "--client", "web"], answer: "n")
        #expect(filtered.status == 0 && !filtered.output.contains("[y/N]"), "\(filtered.output)")
        #expect(try keysmith.run(["revoke", "--scope", "groups:read"]).status == 0)
    }

    @Test("the audit log reads back who did what and when: ISO 8601 times, the actor and command, filters, one JSON document")
    func auditShowsWhoAndWhen() throws {
        let keysmith = try prepared()
        defer { keysmith.cleanup() }
        for account in ["a", "b"] {
            #expect(try keysmith.run(["token", "import", "--service", "news", "--account", account, "--client", "web",
                                      "--subject", account], stdin: response).status == 0)
        }
        #expect(try keysmith.run(["revoke", "--scope", "posts:write", "--client", "web", "--subject", "a", "--reason", "incident 9"]).status == 0)
        #expect(try keysmith.run(["token", "revoke-all", "--service", "news", "--account", "b"]).status == 0)
        func entries(_ arguments: [String]) throws -> [[String: Any]] {
            let shown = try keysmith.run(["audit", "show", "--json"] + arguments)
            #expect(shown.status == 0, "\(shown.output)")
            #expect(shown.stdout.split(separator: "\n").count == 1, "one document")
            guard let document = try JSONSerialization.jsonObject(with: Data(shown.stdout.utf8)) as? [String: Any],
                  let entries = document["entries"] as? [[String: Any]]
            else {
                Issue.record("audit show --json is not a document with entries: \(shown.stdout)")
                return []
            }
            return entries
        }
        let all = try entries([])
        #expect(all.map { $0["event"] as? String } == ["import", "import", "bulk-revoke", "revoke-all"])
        let bulk = all[2]
        #expect((bulk["time"] as? String)?.range(of: #"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$"#, options: .regularExpression) != nil, "\(bulk)")
        #expect(bulk["account"] as? String == "*")
        #expect((bulk["detail"] as? String)?.contains("subject a") == true && (bulk["detail"] as? String)?.contains("client web") == true)
        #expect(bulk["scopes"] as? [String] == ["posts:write"])
        let actor = try #require(bulk["actor"] as? [String: Any])
        #expect((actor["user"] as? String)?.isEmpty == false && (actor["host"] as? String)?.isEmpty == false)
        #expect((actor["process"] as? Int ?? 0) > 0)
        #expect((actor["command"] as? String)?.hasPrefix("keysmith revoke --scope posts:write --client web") == true, "\(actor)")
        // revoke-all names the scopes it revoked.
        #expect(all[3]["scopes"] as? [String] == ["groups:read", "posts:write"], "\(all[3])")
        // Filters.
        #expect(try entries(["--event", "import"]).count == 2)
        #expect(try entries(["--account", "b"]).map { $0["event"] as? String } == ["import", "revoke-all"])
        #expect(try entries(["--since", "1h"]).count == 4)
        #expect(try entries(["--until", "2001-01-01T00:00:00Z"]).isEmpty)
        #expect(try keysmith.run(["audit", "show", "--since", "yesterday"]).status == 64)
        // --until a printed time includes that entry (times print in whole seconds); a date alone works.
        let printed = try #require(all.last?["time"] as? String)
        #expect(try entries(["--until", printed]).count == 4)
        #expect(try entries(["--since", String(printed.prefix(10))]).count == 4)
        // The text form: one line per entry, with the time and who.
        let text = try keysmith.run(["audit", "show", "--event", "bulk-revoke"])
        #expect(text.stdout.split(separator: "\n").count == 1 && text.stdout.contains("bulk-revoke") && text.stdout.contains(" by "), "\(text.output)")
        // No field can forge a line in the text form: control characters are escaped.
        #expect(try keysmith.run(["token", "revoke", "--service", "news", "--account", "a", "--reason", "x\n99\t2030-01-01T00:00:00Z\tforged",
                                  "groups:read"]).status == 0)
        let lines = try keysmith.run(["audit", "show"]).stdout.split(separator: "\n")
        #expect(lines.count == 5 && !lines.contains { $0.hasPrefix("99") }, "\(lines)")
        #expect(try keysmith.run(["audit", "verify"]).status == 0)
    }

    @Test("one output contract: import, scopes, revoke, revoke-all, check, introspect and audit verify print one JSON document with --json")
    func jsonEverywhere() throws {
        let keysmith = try prepared()
        defer { keysmith.cleanup() }
        let location = ["--service", "news", "--account", "bob"]
        func document(_ arguments: [String], stdin: String = "", status: Int32 = 0) throws -> [String: Any] {
            let result = try keysmith.run(arguments, stdin: stdin)
            #expect(result.status == status, "\(arguments): \(result.output)")
            #expect(result.stdout.split(separator: "\n").count == 1, "\(arguments): one document: \(result.stdout)")
            #expect(!result.stdout.contains("AT-SECRET-9") && !result.stdout.contains("RT-SECRET-9"))
            return try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any], "\(arguments)")
        }
        let imported = try document(["token", "import", "--json", "--client", "web"] + location, stdin: response)
        #expect(imported["active"] as? Bool == true && imported["client_id"] as? String == "web")
        #expect((imported["scopes"] as? [[String: Any]])?.count == 2)
        let shown = try document(["token", "scopes", "--json"] + location)
        #expect((shown["expires_at"] as? String)?.hasSuffix("Z") == true && shown["account"] as? String == "bob")
        let revoked = try document(["token", "revoke", "--json"] + location + ["posts:write"])
        #expect((revoked["scopes"] as? [[String: Any]])?.first { $0["scope"] as? String == "posts:write" }?["state"] as? String == "revoked")
        let check = try document(["token", "check", "--json"] + location + ["groups:read", "posts:write"], status: 3)
        #expect(check["granted"] as? Bool == false && check["active"] as? Bool == true)
        #expect((check["scopes"] as? [[String: Any]])?.map { $0["state"] as? String } == ["granted", "revoked"])
        #expect(try document(["token", "check", "--json"] + location + ["groups:read"])["granted"] as? Bool == true)
        #expect(try document(["token", "introspect", "--json"] + location)["active"] as? Bool == true)
        let out = try document(["token", "revoke-all", "--json"] + location)
        #expect(out["active"] as? Bool == false && out["revoked_at"] != nil)
        // A token without scopes still prints its state.
        let bare = try document(["token", "import", "--json", "--service", "news", "--account", "bare"],
                                stdin: #"{"access_token":"x","token_type":"Bearer"}"#)
        #expect((bare["scopes"] as? [Any])?.isEmpty == true && bare["active"] as? Bool == true)
        let verify = try document(["audit", "verify", "--json"])
        #expect(verify["intact"] as? Bool == true && verify["entries"] as? Int == 4 && (verify["problems"] as? [Any])?.isEmpty == true)
    }

    @Test("token import --batch imports many tokens in one commit and one audit entry; a bad line imports nothing")
    func batchImport() throws {
        let keysmith = try prepared()
        defer { keysmith.cleanup() }
        // A kept token with a revocation: the batch updates it, and the revocation stands.
        #expect(try keysmith.run(["token", "import", "--service", "news", "--account", "kept", "--client", "web"], stdin: response).status == 0)
        #expect(try keysmith.run(["token", "revoke", "--service", "news", "--account", "kept", "posts:write"]).status == 0)
        var lines = (0..<500).map { index in
            #"{"service":"news","account":"u\#(index)","client_id":"web","requested":"groups:read,posts:write","response":{"access_token":"T\#(index)","token_type":"Bearer","expires_in":3600,"scope":"groups:read"}}"#
        }
        lines.append(#"{"service":"news","account":"kept","response":"{\"access_token\":\"NEW\",\"token_type\":\"Bearer\",\"scope\":\"groups:read posts:write\"}"}"#)
        let imported = try keysmith.run(["token", "import", "--batch", "--json"], stdin: lines.joined(separator: "\n") + "\n")
        #expect(imported.status == 0, "\(imported.output)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(imported.stdout.utf8)) as? [String: Any])
        #expect((report["imported"] as? [Any])?.count == 500 && (report["updated"] as? [[String: String]])?.first?["account"] == "kept")
        #expect(try keysmith.run(["token", "check", "--service", "news", "--account", "u499", "groups:read"]).status == 0)
        #expect(try keysmith.run(["token", "get", "--service", "news", "--account", "u7"]).stdout == "T7\n")
        #expect(try keysmith.run(["token", "check", "--service", "news", "--account", "kept", "posts:write"]).status == 3)
        #expect(try keysmith.run(["token", "get", "--service", "news", "--account", "kept"]).stdout == "NEW\n")
        let audit = try keysmith.run(["audit", "show", "--json", "--event", "import-batch"])
        #expect(audit.stdout.contains("batch of 501: 500 imported, 1 updated"), "\(audit.output)")
        #expect(try keysmith.run(["audit", "verify"]).stdout.contains("3 entries"))
        // A bad line, a bad response or a token twice: exit 64, nothing imported.
        for bad in [#"{"service":"news","account":"x","response":{"access_token":"a","token_type":"Bearer"}}"# + "\nnot json",
                    #"{"service":"news","account":"x","response":{"token_type":"Bearer"}}"#,
                    #"{"service":"news","account":"x","response":{"access_token":"a","token_type":"B"}}"# + "\n"
                        + #"{"service":"news","account":"x","response":{"access_token":"b","token_type":"B"}}"#] {
            let refused = try keysmith.run(["token", "import", "--batch"], stdin: bad)
            #expect(refused.status == 64, "\(refused.output)")
            #expect(refused.stderr.split(separator: "\n").count == 1)
            #expect(try keysmith.run(["token", "get", "--service", "news", "--account", "x"]).status == 2)
        }
        #expect(try keysmith.run(["token", "import", "--batch", "--service", "news"], stdin: lines[0]).status == 64)
    }

    @Test("a vault put back to an older copy: the vault and then the audit log report it, until each restore is accepted")
    func restoredVaultAuditAnchor() throws {
        let keysmith = try prepared()
        defer { keysmith.cleanup() }
        let location = ["--service", "news", "--account", "bob"]
        #expect(try keysmith.run(["token", "import"] + location, stdin: response).status == 0)
        let backup = keysmith.directory + "/backup"
        try FileManager.default.copyItem(atPath: keysmith.vault, toPath: backup)
        #expect(try keysmith.run(["token", "revoke"] + location + ["posts:write"]).status == 0)
        #expect(try keysmith.run(["audit", "verify"]).status == 0)
        // Put the older copy back: the revocation and its audit entry are gone.
        try FileManager.default.removeItem(atPath: keysmith.vault)
        try FileManager.default.copyItem(atPath: backup, toPath: keysmith.vault)
        #expect(try keysmith.run(["audit", "verify"]).status == 6)  // the vault's own anchor first
        #expect(try keysmith.run(["vault", "verify", "--accept-rollback"]).status == 0)
        let audit = try keysmith.run(["audit", "verify", "--json"])
        #expect(audit.status == 6, "\(audit.output)")
        #expect(audit.stdout.contains("this machine saw entry 2"), "\(audit.output)")
        let accepted = try keysmith.run(["audit", "verify", "--accept-rollback"])
        #expect(accepted.status == 0 && accepted.stdout.contains("1 entry"), "\(accepted.output)")
        #expect(try keysmith.run(["audit", "verify"]).status == 0)
        // A new vault made at the same path starts a new log: no false alarm.
        #expect(try keysmith.run(["token", "revoke"] + location + ["posts:write"]).status == 0)
        #expect(try keysmith.run(["token", "revoke"] + location + ["groups:read"]).status == 0)
        try FileManager.default.removeItem(atPath: keysmith.vault)
        #expect(try keysmith.run(["init"]).status == 0)
        #expect(try keysmith.run(["token", "import"] + location, stdin: response).status == 0)
        let fresh = try keysmith.run(["audit", "verify"])
        #expect(fresh.status == 0 && fresh.stdout.contains("1 entry"), "\(fresh.output)")
    }

    @Test("bulk revocation of several scopes at once is one commit; declined scopes are neither changed nor counted")
    func bulkSeveralScopes() throws {
        let keysmith = try prepared()
        defer { keysmith.cleanup() }
        for account in ["a", "b"] {
            let imported = try keysmith.run(["token", "import", "--service", "news", "--account", account, "--client", "web",
                                             "--requested", "groups:read posts:write posts:delete"], stdin: response)
            #expect(imported.status == 0, "\(imported.output)")
        }
        // Issue 15, finding 2: both scopes, not only the last one.
        let both = try keysmith.run(["revoke", "--scope", "posts:write", "--scope", "groups:read", "--client", "web", "--json"])
        #expect(both.status == 0, "\(both.output)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(both.stdout.utf8)) as? [String: Any])
        #expect(report["changed"] as? Int == 2)
        #expect(report["scopes"] as? [String] == ["groups:read", "posts:write"])
        for account in ["a", "b"] {
            for scope in ["posts:write", "groups:read"] {
                #expect(try keysmith.run(["token", "check", "--service", "news", "--account", account, scope]).status == 3, "\(account) \(scope)")
            }
        }
        let audit = try keysmith.run(["audit", "verify"])
        #expect(audit.stdout.contains("3 entries"), "\(audit.output)")  // two imports and one bulk change
        // Issue 15, finding 5: a declined scope stays declined and nothing counts as changed.
        let declined = try keysmith.run(["revoke", "--scope", "posts:delete", "--client", "web", "--json"])
        #expect(declined.stdout.contains(#""changed":0"#), "\(declined.output)")
        #expect(declined.stdout.contains(#""matched":2"#))
        #expect(try scopeObjects(keysmith, ["--service", "news", "--account", "a"])
            .contains { $0["scope"] as? String == "posts:delete" && $0["state"] as? String == "declined" })
        #expect(try keysmith.run(["revoke", "--client", "web"]).status == 64)
    }
}
