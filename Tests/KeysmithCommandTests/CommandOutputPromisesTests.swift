import Foundation
import KeysmithTestSupport
import Testing

/// What docs/cli.md says the command prints, and the hints it gives, checked through the binary
/// (found by a session-17 audit from the docs alone; each failed before its fix).
@Suite("the keysmith command: hints and output as documented")
struct CommandOutputPromisesTests {
    @Test("misspelled subcommands at any depth get a suggestion; help for an unknown command is a usage error; a store option before the command names the command")
    func hints() throws {
        let keysmith = try Keysmith.withVault()
        defer { keysmith.cleanup() }
        let nested = try keysmith.run(["secret", "lst"])
        #expect(nested.status == 64, "\(nested.output)")
        #expect(nested.stderr.contains("did you mean `list`?"), "\(nested.stderr)")
        let deeper = try keysmith.run(["token", "scopse", "--service", "s", "--account", "a"])
        #expect(deeper.status == 64 && deeper.stderr.contains("did you mean `scopes`?"), "\(deeper.output)")
        let help = try keysmith.run(["help", "nosuch"])
        #expect(help.status == 64, "\(help.output)")
        #expect(help.stdout.isEmpty && help.stderr.contains("unknown command"), "\(help.output)")
        #expect(try keysmith.run(["help", "secret"]).status == 0)
        // The option's value is not taken for the subcommand, even when it is a command's name.
        let misplaced = try keysmith.run(["--backend", "vault", "secret", "list"])
        #expect(misplaced.status == 64, "\(misplaced.output)")
        #expect(misplaced.stderr.contains("as in `keysmith secret list --backend …`"), "\(misplaced.stderr)")
    }

    @Test("audit show: --event must be an event; a date alone in --until includes that day; --account and --service find the bulk changes that touched the token")
    func auditFilters() throws {
        let keysmith = try Keysmith.withVault()
        defer { keysmith.cleanup() }
        #expect(try keysmith.run(["token", "import", "--service", "news", "--account", "bob"],
                                 stdin: #"{"access_token":"A","token_type":"Bearer","scope":"read write"}"#).status == 0)
        #expect(try keysmith.run(["token", "import", "--service", "news", "--account", "eve"],
                                 stdin: #"{"access_token":"B","token_type":"Bearer","scope":"read"}"#).status == 0)
        #expect(try keysmith.run(["revoke", "--service", "news", "--scope", "write", "--reason", "cleanup"]).status == 0)
        let bogus = try keysmith.run(["audit", "show", "--event", "bogus"])
        #expect(bogus.status == 64, "\(bogus.output)")
        #expect(bogus.stderr.contains("bulk-revoke"), "names the events: \(bogus.stderr)")
        let today = ISO8601DateFormatter().string(from: Date()).prefix(10)
        let untilToday = try keysmith.run(["audit", "show", "--until", String(today), "--json"])
        #expect(untilToday.status == 0)
        let entries = try #require((try JSONSerialization.jsonObject(with: Data(untilToday.stdout.utf8)) as? [String: Any])?["entries"] as? [Any])
        #expect(entries.count == 3, "a date alone means through the end of that day: \(untilToday.stdout)")
        let bob = try keysmith.run(["audit", "show", "--account", "bob"])
        #expect(bob.status == 0)
        #expect(bob.stdout.contains("import") && bob.stdout.contains("bulk-revoke"), "bob's history includes the bulk change: \(bob.stdout)")
        let eve = try keysmith.run(["audit", "show", "--account", "eve"])
        #expect(!eve.stdout.contains("bulk-revoke"), "the bulk change did not touch eve's token (she had no write): \(eve.stdout)")
        let news = try keysmith.run(["audit", "show", "--service", "news", "--event", "bulk-revoke"])
        #expect(news.stdout.split(separator: "\n").count == 1, "\(news.stdout)")
    }

    @Test("audit show --account with names holding \" at \": a bulk entry names tokens as ACCOUNT at SERVICE, so it may match more tokens than asked for, never fewer (as documented)")
    func auditFiltersWithAtInNames() throws {
        let keysmith = try Keysmith.withVault()
        defer { keysmith.cleanup() }
        // The token "a at b" at service "c" and the token "a" at service "b at c" are both
        // written `a at b at c`; the bulk change touches only the first.
        #expect(try keysmith.run(["token", "import", "--service", "c", "--account", "a at b"],
                                 stdin: #"{"access_token":"A","token_type":"Bearer","scope":"write"}"#).status == 0)
        #expect(try keysmith.run(["token", "import", "--service", "b at c", "--account", "a"],
                                 stdin: #"{"access_token":"B","token_type":"Bearer","scope":"read"}"#).status == 0)
        #expect(try keysmith.run(["revoke", "--scope", "write", "--reason", "cleanup", "--yes"]).status == 0)
        func events(_ arguments: [String]) throws -> [String] {
            let shown = try keysmith.run(["audit", "show", "--json"] + arguments)
            #expect(shown.status == 0, "\(shown.output)")
            let entries = try #require((try JSONSerialization.jsonObject(with: Data(shown.stdout.utf8)) as? [String: Any])?["entries"] as? [[String: Any]])
            return entries.compactMap { $0["event"] as? String }
        }
        // Never fewer: the token the bulk change touched finds it, by account and by service.
        #expect(try events(["--account", "a at b"]) == ["import", "bulk-revoke"])
        #expect(try events(["--service", "c", "--account", "a at b"]) == ["import", "bulk-revoke"])
        // More: the other token's filters match the same text.
        #expect(try events(["--account", "a", "--service", "b at c"]) == ["import", "bulk-revoke"])
        #expect(try keysmith.run(["audit", "verify"]).status == 0)
    }

    @Test("secret list --json shows every attribute an item has: creator, the flags and generic data too (the golden vault's items)")
    func listingsShowEveryAttribute() throws {
        var keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        let keys = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path + "/Keys"
        let copy = try spawnAndWait("/bin/cp", ["-a", keys + "/golden-v2-keyfile", keysmith.vault])
        #expect(copy.status == 0)
        keysmith.environment["KEYSMITH_KEYFILE"] = keys + "/test-keyfile"
        let items = try listedItems(try keysmith.run(["secret", "list", "--json"]))
        let bob = try #require(items.first { $0["account"] as? String == "bob" })
        #expect(bob["creator"] as? String == "keysmith")
        #expect(bob["description"] as? String == "Mail password")
        #expect(bob["isInvisible"] as? Bool == false && bob["isNegative"] as? Bool == false)
        #expect(bob["genericBase64"] as? String == "AQID")
        let alice = try #require(items.first { $0["account"] as? String == "alice" })
        #expect(alice["isInvisible"] as? Bool == true)
        #expect(alice["genericBase64"] == nil, "fields absent from an item are left out")
        // A listing edited into a batch still reads: the new fields are accepted (and ignored).
        let line = String(decoding: try JSONSerialization.data(withJSONObject: bob.merging(["op": "set", "secret": "new"]) { $1 }), as: UTF8.self)
        let batch = try keysmith.run(["batch", "--dry-run"], stdin: line + "\n")
        #expect(batch.status == 0, "\(batch.output)")
    }

    @Test("backend opens the store it selects: no vault there exits 5 saying so")
    func backendWithoutAVault() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        let result = try keysmith.run(["backend", "--backend", "vault"])
        #expect(result.status == 5, "\(result.output)")
        #expect(result.stderr.contains("no vault at"), "\(result.stderr)")
    }

    @Test("token scopes escapes control characters in reasons, as audit show does: no reason can forge a line")
    func scopeReasonsAreEscaped() throws {
        let keysmith = try Keysmith.withVault()
        defer { keysmith.cleanup() }
        #expect(try keysmith.run(["token", "import", "--service", "news", "--account", "bob"],
                                 stdin: #"{"access_token":"A","token_type":"Bearer","scope":"read write"}"#).status == 0)
        let forged = "l1\n  admin  granted  2026-01-01T00:00:00Z  forged"
        #expect(try keysmith.run(["token", "revoke", "--service", "news", "--account", "bob", "--reason", forged, "write"]).status == 0)
        let scopes = try keysmith.run(["token", "scopes", "--service", "news", "--account", "bob"])
        #expect(scopes.status == 0)
        #expect(!scopes.stdout.contains("\n  admin"), "\(scopes.stdout)")
        #expect(scopes.stdout.contains("l1\\u{a}"), "\(scopes.stdout)")
        #expect(scopes.stdout.split(separator: "\n").count == 3, "a header and one line per scope: \(scopes.stdout)")
        // Names are anyone's text too: in the header, in token list's lines and in labels.
        let name = "ev\til\nforged\tline"
        #expect(try keysmith.run(["token", "import", "--service", "zz", "--account", name],
                                 stdin: #"{"access_token":"T","token_type":"Bearer","scope":"read"}"#).status == 0)
        let header = try keysmith.run(["token", "scopes", "--service", "zz", "--account", name])
        #expect(header.stdout.split(separator: "\n").count == 2 && !header.stdout.contains("\t"), "\(header.stdout)")
        let list = try keysmith.run(["token", "list", "--service", "zz"])
        #expect(list.stdout.split(separator: "\n").count == 1 && list.stdout.split(separator: "\t").count == 6, "\(list.stdout)")
        #expect(try keysmith.run(["secret", "set", "--service", "s", "--account", "a", "--label", "x\nforged"], stdin: "v").status == 0)
        let secrets = try keysmith.run(["secret", "list"])
        #expect(secrets.stdout.split(separator: "\n").count == 1, "\(secrets.stdout)")
        // Bidirectional overrides and line separators (which reorder or break what a terminal
        // shows) are escaped the same way.
        let spoof = "ok\u{202E}nimda\u{2028}x"
        #expect(try keysmith.run(["token", "revoke", "--service", "news", "--account", "bob", "--reason", spoof, "read"]).status == 0)
        let shown = try keysmith.run(["token", "scopes", "--service", "news", "--account", "bob"])
        #expect(shown.stdout.contains("ok\\u{202e}nimda\\u{2028}x") && !shown.stdout.contains("\u{202E}"), "\(shown.stdout)")
    }
}
