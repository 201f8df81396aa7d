import Foundation
import Testing

/// The storage contract through the built command: each test is one finding of the
/// storage-contract issue, reproduced as it was reported.
@Suite("the keysmith command: the storage contract")
struct StorageContractCommandTests {
    static func initialized() throws -> Keysmith {
        var keysmith = try Keysmith()
        let created = try keysmith.run(["init", "--keyfile", keysmith.keyfile])
        #expect(created.status == 0, "\(created.output)")
        keysmith.environment["KEYSMITH_KEYFILE"] = keysmith.keyfile
        return keysmith
    }

    @Test("two spellings of one name are two items: both read back, verify and compact succeed")
    func twoSpellings() throws {
        let keysmith = try Self.initialized()
        defer { keysmith.cleanup() }
        let precomposed = "caf\u{E9}", decomposed = "cafe\u{301}"
        #expect(try keysmith.run(["secret", "set", "--service", precomposed, "--account", "bob"], stdin: "first").status == 0)
        #expect(try keysmith.run(["secret", "set", "--service", decomposed, "--account", "bob"], stdin: "second").status == 0)
        let first = try keysmith.run(["secret", "get", "--service", precomposed, "--account", "bob"])
        #expect(first.status == 0, "\(first.output)")
        #expect(first.stdout == "first\n")
        let second = try keysmith.run(["secret", "get", "--service", decomposed, "--account", "bob"])
        #expect(second.stdout == "second\n")
        #expect(try keysmith.run(["vault", "verify"]).status == 0)
        #expect(try keysmith.run(["vault", "compact"]).status == 0)
        #expect(try keysmith.run(["secret", "get", "--service", decomposed, "--account", "bob"]).stdout == "second\n")
        #expect(try listedItems(keysmith.run(["secret", "list", "--json"])).count == 2)
    }

    @Test("tokens and the audit log are invisible to secret commands, which cannot read, overwrite or delete them")
    func reservedRecords() throws {
        let keysmith = try Self.initialized()
        defer { keysmith.cleanup() }
        // A password under the same names as the token, stored first: token import leaves it alone.
        #expect(try keysmith.run(["secret", "set", "--service", "news", "--account", "bob"], stdin: "password").status == 0)
        let response = #"{"access_token":"AT-secret","refresh_token":"RT-secret","token_type":"Bearer","scope":"groups:read posts:write"}"#
        let imported = try keysmith.run(["token", "import", "--service", "news", "--account", "bob"], stdin: response)
        #expect(imported.status == 0, "\(imported.output)")
        #expect(try keysmith.run(["token", "revoke", "--service", "news", "--account", "bob", "posts:write"]).status == 0)
        #expect(try keysmith.run(["secret", "get", "--service", "news", "--account", "bob"]).stdout == "password\n")

        let list = try keysmith.run(["secret", "list"])
        #expect(!list.stdout.contains("audit"), "\(list.stdout)")
        #expect(list.stdout.split(separator: "\n").count == 1)
        let all = try keysmith.run(["secret", "list", "--all"])
        #expect(all.stdout.contains("[keysmith] Keysmith record (oauth-token"))
        #expect(all.stdout.contains("audit-entry"))
        #expect(!all.output.contains("AT-secret") && !all.output.contains("RT-secret"))

        // Overwriting and deleting the password leaves the token and its revocation as they were.
        #expect(try keysmith.run(["secret", "set", "--service", "news", "--account", "bob"], stdin: "other").status == 0)
        #expect(try keysmith.run(["secret", "delete", "--service", "news", "--account", "bob"]).status == 0)
        #expect(try keysmith.run(["secret", "get", "--service", "news", "--account", "bob"]).status == 2)
        #expect(try keysmith.run(["token", "check", "--service", "news", "--account", "bob", "posts:write"]).status == 3)
        #expect(try keysmith.run(["token", "check", "--service", "news", "--account", "bob", "groups:read"]).status == 0)
        #expect(try keysmith.run(["audit", "verify"]).status == 0)

        // A batch cannot name a Keysmith record.
        let batch = try keysmith.run(["batch"], stdin: #"{"op":"delete","kind":"keysmith-record","recordType":"audit-entry","service":"audit","account":"000000000001"}"#)
        #expect(batch.status == 64, "\(batch.output)")
        #expect(try keysmith.run(["audit", "verify"]).status == 0)
    }

    @Test("a secret larger than the vault keeps is refused at write (exit 64, naming the limit) and nothing is stored")
    func limitAtWrite() throws {
        let keysmith = try Self.initialized()
        defer { keysmith.cleanup() }
        #expect(try keysmith.run(["secret", "set", "--service", "s", "--account", "a"], stdin: "small").status == 0)
        let big = String(repeating: "x", count: (32 << 20) + 1)
        let refused = try keysmith.run(["secret", "set", "--service", "s", "--account", "a", "--keep-newline"], stdin: big)
        #expect(refused.status == 64, "\(refused.stderr)")
        #expect(refused.stderr.contains("33554432"))
        #expect(try keysmith.run(["secret", "get", "--service", "s", "--account", "a"]).stdout == "small\n")
        #expect(try keysmith.run(["vault", "verify"]).status == 0)
        #expect(try keysmith.run(["vault", "compact"]).status == 0)
    }

    @Test("secret set repairs a damaged item; verify then exits 0 and lists the damage as superseded")
    func repair() throws {
        let keysmith = try Self.initialized()
        defer { keysmith.cleanup() }
        #expect(try keysmith.run(["secret", "set", "--service", "s", "--account", "a", "--label", "L"], stdin: "one").status == 0)
        // Flip one byte inside the sealed record of the only log file.
        let log = keysmith.vault + "/data/log/"
            + (try #require(try FileManager.default.contentsOfDirectory(atPath: keysmith.vault + "/data/log").first))
        var bytes = try Data(contentsOf: URL(fileURLWithPath: log))
        bytes[bytes.count - 3] ^= 0x01  // records end the file
        try bytes.write(to: URL(fileURLWithPath: log))
        #expect(try keysmith.run(["secret", "get", "--service", "s", "--account", "a"]).status == 6)
        #expect(try keysmith.run(["vault", "verify"]).status == 6)

        let repaired = try keysmith.run(["secret", "set", "--service", "s", "--account", "a"], stdin: "two")
        #expect(repaired.status == 0, "\(repaired.output)")
        #expect(try keysmith.run(["secret", "get", "--service", "s", "--account", "a"]).stdout == "two\n")
        let verify = try keysmith.run(["vault", "verify"])
        #expect(verify.status == 0, "\(verify.output)")
        #expect(verify.stdout.contains("intact"))
        #expect(verify.stdout.contains("superseded"))
        #expect(try keysmith.run(["vault", "compact"]).status == 0)
        #expect(!(try keysmith.run(["vault", "verify"]).stdout.contains("superseded")))
    }

    @Test("empty standard input is refused unless --allow-empty, and the stored secret is kept")
    func emptyInput() throws {
        let keysmith = try Self.initialized()
        defer { keysmith.cleanup() }
        #expect(try keysmith.run(["secret", "set", "--service", "s", "--account", "a"], stdin: "real").status == 0)
        let empty = try keysmith.run(["secret", "set", "--service", "s", "--account", "a"], stdin: "")
        #expect(empty.status == 64)
        #expect(empty.stderr.contains("--allow-empty"))
        #expect(try keysmith.run(["secret", "get", "--service", "s", "--account", "a"]).stdout == "real\n")
        #expect(try keysmith.run(["secret", "set", "--service", "s", "--account", "a", "--allow-empty"], stdin: "").status == 0)
        #expect(try keysmith.run(["secret", "get", "--service", "s", "--account", "a"]).stdout == "\n")
    }

    @Test("secret set and batch set follow one update rule: metadata not given are kept")
    func oneUpdateRule() throws {
        let keysmith = try Self.initialized()
        defer { keysmith.cleanup() }
        #expect(try keysmith.run(["secret", "set", "--service", "s", "--account", "a", "--label", "L", "--comment", "C"], stdin: "1").status == 0)
        #expect(try keysmith.run(["batch"], stdin: #"{"op":"set","service":"s","account":"a","secret":"2"}"#).status == 0)
        #expect(try keysmith.run(["secret", "set", "--service", "s", "--account", "a", "--comment", ""], stdin: "3").status == 0)
        let object = try #require(try listedItems(keysmith.run(["secret", "list", "--json"])).first)
        #expect(object["label"] as? String == "L")
        #expect(object["comment"] == nil)
        #expect(try keysmith.run(["secret", "get", "--service", "s", "--account", "a"]).stdout == "3\n")
    }
}
