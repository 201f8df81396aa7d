import Foundation
import KeysmithTestSupport
import Testing

/// What a reader of docs/cli.md, docs/format.md and docs/threat-model.md was promised, tried
/// through the built command (found by a session-17 audit from the docs alone): a damaged vault
/// never answers with a listing that may be missing items, maintenance never runs on damage,
/// and nothing is lost or silently done on a mistyped command line.
@Suite("the keysmith command: damage is refused and mistakes lose nothing")
struct DamageAndRefusalTests {
    /// A vault with a keyfile and the secrets `s1`…`s5` (service `sN`, account `a`), one commit each.
    static func vaultWithFiveSecrets() throws -> Keysmith {
        let keysmith = try Keysmith.withVault()
        for index in 1...5 {
            let set = try keysmith.run(["secret", "set", "--service", "s\(index)", "--account", "a"], stdin: "secret-\(index)")
            #expect(set.status == 0, "\(set.output)")
        }
        return keysmith
    }

    /// Another machine's view: an anchor directory that has never seen this vault, so what is
    /// found is found by the vault's own structure.
    static func freshMachine(_ keysmith: Keysmith) throws -> [String: String] {
        let anchors = keysmith.directory + "/anchors-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: anchors, withIntermediateDirectories: true)
        return ["KEYSMITH_ANCHOR_DIR": anchors]
    }

    static func flipLastByte(_ path: String) throws {
        var bytes = try #require(FileManager.default.contents(atPath: path))
        bytes[bytes.count - 1] ^= 1
        try bytes.write(to: URL(fileURLWithPath: path))
    }

    @Test("a listing of a vault with damage exits 6 instead of printing what is left: a missing snapshot, a missing log, a damaged record")
    func listingsOfDamagedVaultsFail() throws {
        // The snapshot removed after a compaction: every item was in it.
        do {
            let keysmith = try Self.vaultWithFiveSecrets()
            defer { keysmith.cleanup() }
            #expect(try keysmith.run(["vault", "compact"]).status == 0)
            try FileManager.default.removeItem(atPath: keysmith.vault + "/data/snapshot")
            let list = try keysmith.run(["secret", "list", "--json"], environment: try Self.freshMachine(keysmith))
            #expect(list.status == 6, "\(list.output)")
            #expect(list.stdout.isEmpty, "\(list.stdout)")
            #expect(list.stderr.contains("vault verify"), "\(list.stderr)")
            #expect(list.stderr.split(separator: "\n").count == 1, "one keysmith: line, no log line before it: \(list.stderr)")
        }
        // A log in the middle removed: the items it may have changed are in doubt.
        do {
            let keysmith = try Self.vaultWithFiveSecrets()
            defer { keysmith.cleanup() }
            try FileManager.default.removeItem(atPath: keysmith.vault + "/data/log/0000000000000003")
            let machine = try Self.freshMachine(keysmith)
            let list = try keysmith.run(["secret", "list", "--json"], environment: machine)
            #expect(list.status == 6, "\(list.output)")
            #expect(list.stdout.isEmpty, "\(list.stdout)")
            // An item written after the lost commit still reads, with nothing on standard error
            // at the default level; KEYSMITH_LOG_LEVEL=warning shows the store's notice.
            let read = try keysmith.run(["secret", "get", "--service", "s5", "--account", "a"], environment: machine)
            #expect(read.status == 0 && read.stderr.isEmpty, "\(read.output)")
            let noticed = try keysmith.run(["secret", "get", "--service", "s5", "--account", "a"],
                                           environment: machine.merging(["KEYSMITH_LOG_LEVEL": "warning"]) { $1 })
            #expect(noticed.status == 0 && noticed.stderr.contains("the vault has damage"), "\(noticed.output)")
        }
        // One record's byte flipped: the listing would leave that item out.
        do {
            let keysmith = try Self.vaultWithFiveSecrets()
            defer { keysmith.cleanup() }
            try Self.flipLastByte(keysmith.vault + "/data/log/0000000000000004")
            let list = try keysmith.run(["secret", "list", "--json"])
            #expect(list.status == 6, "\(list.output)")
            // Writing the damaged item again repairs it, and the listing is whole again.
            #expect(try keysmith.run(["secret", "set", "--service", "s4", "--account", "a"], stdin: "again").status == 0)
            let repaired = try keysmith.run(["secret", "list", "--json"])
            #expect(repaired.status == 0, "\(repaired.output)")
            #expect(try listedItems(repaired).count == 5)
        }
        // Tokens are listed from the same records: `token list` refuses too.
        do {
            let keysmith = try Self.vaultWithFiveSecrets()
            defer { keysmith.cleanup() }
            let imported = try keysmith.run(["token", "import", "--service", "news", "--account", "bob"],
                                            stdin: #"{"access_token":"A","token_type":"Bearer","scope":"read write","expires_in":3600}"#)
            #expect(imported.status == 0, "\(imported.output)")
            #expect(try keysmith.run(["vault", "compact"]).status == 0)
            try FileManager.default.removeItem(atPath: keysmith.vault + "/data/snapshot")
            let list = try keysmith.run(["token", "list", "--expiring-within", "1d", "--json"], environment: try Self.freshMachine(keysmith))
            #expect(list.status == 6, "\(list.output)")
            #expect(list.stdout.isEmpty, "\(list.stdout)")
        }
    }

    @Test("the fault tests' crash point is not an environment variable of the library: keysmith with KEYSMITH_FAULT_EXIT_AT=1 writes and exits 0")
    func noFaultHookInTheLibrary() throws {
        let keysmith = try Keysmith.withVault()
        defer { keysmith.cleanup() }
        let set = try keysmith.run(["secret", "set", "--service", "mail", "--account", "bob"], stdin: "s3cret", environment: ["KEYSMITH_FAULT_EXIT_AT": "1"])
        #expect(set.status == 0, "\(set.output)")
        #expect(try keysmith.run(["secret", "get", "--service", "mail", "--account", "bob"], environment: ["KEYSMITH_FAULT_EXIT_AT": "1"]).stdout.hasPrefix("s3cret"))
    }

    @Test("a missing log directory is damage: reads and writes exit 6, not 'does not exist' or an I/O error")
    func missingLogDirectoryIsDamage() throws {
        let keysmith = try Self.vaultWithFiveSecrets()
        defer { keysmith.cleanup() }
        try FileManager.default.removeItem(atPath: keysmith.vault + "/data/log")
        let machine = try Self.freshMachine(keysmith)
        let get = try keysmith.run(["secret", "get", "--service", "s2", "--account", "a"], environment: machine)
        #expect(get.status == 6, "\(get.output)")
        let absent = try keysmith.run(["secret", "get", "--service", "never", "--account", "a"], environment: machine)
        #expect(absent.status == 6, "an absent item may have been written in a lost log: \(absent.output)")
        let set = try keysmith.run(["secret", "set", "--service", "s1", "--account", "a"], stdin: "x", environment: machine)
        #expect(set.status == 6, "\(set.output)")
        #expect(try keysmith.run(["vault", "verify"], environment: machine).status == 6)
        // A file in the directory's place is the same damage (it was an I/O error, exit 1).
        try "x".write(toFile: keysmith.vault + "/data/log", atomically: false, encoding: .utf8)
        for command in [["secret", "get", "--service", "s2", "--account", "a"], ["vault", "verify"], ["secret", "list"]] {
            let result = try keysmith.run(command, environment: machine)
            #expect(result.status == 6, "\(command): \(result.output)")
        }
    }

    @Test("rekey and compact on a vault with a damaged record exit 6 and change nothing")
    func maintenanceRefusesDamage() throws {
        let keysmith = try Self.vaultWithFiveSecrets()
        defer { keysmith.cleanup() }
        try Self.flipLastByte(keysmith.vault + "/data/log/0000000000000004")
        let files = { () throws -> [String: Data] in
            var out: [String: Data] = [:]
            for name in ["header", "header.backup", "data/snapshot"] + (try FileManager.default.contentsOfDirectory(atPath: keysmith.vault + "/data/log")).map({ "data/log/" + $0 }) {
                out[name] = FileManager.default.contents(atPath: keysmith.vault + "/" + name)
            }
            return out
        }
        let before = try files()
        let rekey = try keysmith.run(["vault", "rekey"])
        #expect(rekey.status == 6, "\(rekey.output)")
        #expect(rekey.stderr.contains("vault verify"), "\(rekey.stderr)")
        #expect(rekey.stderr.split(separator: "\n").count == 1 && rekey.stderr.hasPrefix("keysmith: "), "\(rekey.stderr)")
        let damagedRead = try keysmith.run(["secret", "get", "--service", "s4", "--account", "a"])
        #expect(damagedRead.status == 6 && damagedRead.stderr.split(separator: "\n").count == 1, "\(damagedRead.stderr)")

        let compact = try keysmith.run(["vault", "compact"])
        #expect(compact.status == 6, "\(compact.output)")
        #expect(try files() == before, "the header, the snapshot and the logs are as they were")
        // The other items still read.
        #expect(try keysmith.run(["secret", "get", "--service", "s5", "--account", "a"]).stdout == "secret-5\n")
    }

    @Test("vault verify reports a stray file among the logs as ignored, not as a repaired record; the vault is intact")
    func strayFilesAreIgnored() throws {
        let keysmith = try Self.vaultWithFiveSecrets()
        defer { keysmith.cleanup() }
        try "notes".write(toFile: keysmith.vault + "/data/log/README", atomically: true, encoding: .utf8)
        let text = try keysmith.run(["vault", "verify"])
        #expect(text.status == 0, "\(text.output)")
        #expect(text.stdout.contains("ignored (not named as a log): data/log/README"), "\(text.stdout)")
        #expect(!text.stdout.contains("superseded"), "\(text.stdout)")
        let json = try keysmith.run(["vault", "verify", "--json"])
        let report = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        let problem = try #require((report["problems"] as? [[String: Any]])?.first)
        #expect(report["intact"] as? Bool == true)
        #expect(problem["ignored"] as? Bool == true && problem["superseded"] as? Bool == false, "\(json.stdout)")
        #expect(report["items"] as? Int == 5)
    }

    @Test("a damaged token is repaired from the command: token delete, or token import --replace; the listings work again")
    func damagedTokensCanBeRepaired() throws {
        for repair in ["delete", "replace"] {
            let keysmith = try Self.vaultWithFiveSecrets()
            defer { keysmith.cleanup() }
            let response = #"{"access_token":"A","token_type":"Bearer","scope":"read write"}"#
            #expect(try keysmith.run(["token", "import", "--service", "news", "--account", "bob"], stdin: response).status == 0)
            // Flip a byte inside the token's record: the import's log holds the token and the
            // audit records, in record-id order, their bodies at the end of the file; try
            // offsets from the end until the token itself reads as damaged.
            let log = keysmith.vault + "/data/log/0000000000000006"
            let original = try #require(FileManager.default.contents(atPath: log))
            var damaged = false
            for back in stride(from: 1, to: min(original.count, 3000), by: 24) {
                var bytes = original
                bytes[bytes.count - back] ^= 1
                try bytes.write(to: URL(fileURLWithPath: log))
                if try keysmith.run(["token", "scopes", "--service", "news", "--account", "bob"]).status == 6 {
                    damaged = true
                    break
                }
                try original.write(to: URL(fileURLWithPath: log))
            }
            try #require(damaged, "found a byte of the token's own record")
            #expect(try keysmith.run(["secret", "list"]).status == 6)
            // audit verify answers in its own shape, broken, rather than with a bare error.
            let broken = try keysmith.run(["audit", "verify", "--json"])
            #expect(broken.status == 6, "\(broken.output)")
            let answer = try JSONSerialization.jsonObject(with: Data(broken.stdout.utf8)) as? [String: Any]
            #expect(answer?["intact"] as? Bool == false && (answer?["problems"] as? [String])?.count == 1, "\(broken.stdout)")
            let repaired = repair == "delete"
                ? try keysmith.run(["token", "delete", "--service", "news", "--account", "bob"])
                : try keysmith.run(["token", "import", "--service", "news", "--account", "bob", "--replace"], stdin: response)
            #expect(repaired.status == 0, "\(repair): \(repaired.output)")
            #expect(try keysmith.run(["secret", "list", "--json"]).status == 0)
            #expect(try keysmith.run(["token", "list", "--json"]).status == 0)
            #expect(try keysmith.run(["vault", "verify"]).status == 0, "the damage is superseded")
            #expect(try keysmith.run(["audit", "verify"]).status == 0)
            let audit = try keysmith.run(["audit", "show", "--account", "bob"])
            #expect(audit.stdout.contains(repair == "delete" ? "deleted a damaged token" : "replaced a damaged token"), "\(audit.stdout)")
        }
    }

    @Test("a damaged audit record (the head, which stopped every token change, or an entry, which stopped every listing) is repaired by audit repair; the loss stays reported")
    func damagedAuditRecordsCanBeRepaired() throws {
        let response = #"{"access_token":"A","token_type":"Bearer","scope":"read write"}"#
        var repairedKinds: Set<String> = []
        // The import's log holds the token, the first audit entry and the head; flip bytes from
        // the end until the token still reads but the audit log does not (the head or the entry).
        var back = 1
        while back < 3000 && repairedKinds.count < 2 {
            let keysmith = try Self.vaultWithFiveSecrets()
            defer { keysmith.cleanup() }
            #expect(try keysmith.run(["token", "import", "--service", "news", "--account", "bob"], stdin: response).status == 0)
            let log = keysmith.vault + "/data/log/0000000000000006"
            var bytes = try #require(FileManager.default.contents(atPath: log))
            bytes[bytes.count - back] ^= 1
            back += 24
            try bytes.write(to: URL(fileURLWithPath: log))
            guard try keysmith.run(["token", "scopes", "--service", "news", "--account", "bob"]).status == 0,
                  try keysmith.run(["audit", "verify"]).status == 6 else { continue }
            #expect(try keysmith.run(["secret", "list"]).status == 6)
            let repair = try keysmith.run(["audit", "repair", "--json"])
            #expect(repair.status == 0, "\(repair.output)")
            let answer = try #require(try JSONSerialization.jsonObject(with: Data(repair.stdout.utf8)) as? [String: Any])
            let entries = answer["entries_replaced"] as? [Int] ?? []
            repairedKinds.insert(entries.isEmpty ? "head" : "entry")
            #expect(answer["head_rebuilt"] as? Bool == true, "\(repair.stdout)")
            // Token changes and listings work again.
            #expect(try keysmith.run(["token", "revoke", "--service", "news", "--account", "bob", "write"]).status == 0)
            #expect(try keysmith.run(["secret", "list"]).status == 0)
            #expect(try keysmith.run(["token", "list"]).status == 0)
            // The repair is on record; a replaced entry stays reported, a rebuilt head does not.
            let shown = try keysmith.run(["audit", "show"])
            #expect(shown.stdout.contains("audit-repair"), "\(shown.stdout)")
            let verify = try keysmith.run(["audit", "verify"])
            if entries.isEmpty {
                #expect(verify.status == 0, "\(verify.output)")
            } else {
                #expect(verify.status == 6 && verify.stdout.contains("lost to damage"), "\(verify.output)")
            }
            // A second repair finds nothing left to do.
            #expect(try keysmith.run(["audit", "repair"]).stdout.contains("Nothing to repair"))
        }
        #expect(repairedKinds == ["head", "entry"], "both an entry and the head were damaged and repaired")
        // A vault that cannot tell which records exist (a lost commit, a lost log directory):
        // a repair would guess (it ran forever), so it is refused at once and changes nothing.
        for damage in ["log", "directory"] {
            let keysmith = try Self.vaultWithFiveSecrets()
            defer { keysmith.cleanup() }
            #expect(try keysmith.run(["token", "import", "--service", "news", "--account", "bob"], stdin: response).status == 0)
            #expect(try keysmith.run(["token", "revoke", "--service", "news", "--account", "bob", "write"]).status == 0)
            if damage == "log" {
                try FileManager.default.removeItem(atPath: keysmith.vault + "/data/log/0000000000000006")
            } else {
                try FileManager.default.removeItem(atPath: keysmith.vault + "/data/log")
            }
            let machine = try Self.freshMachine(keysmith)
            let repair = try keysmith.run(["audit", "repair"], environment: machine)
            #expect(repair.status == 6, "\(damage): \(repair.output)")
            #expect(repair.stderr.contains("cannot tell which records exist"), "\(repair.stderr)")
        }
    }

    @Test("the walkthrough never removes a directory it did not make")
    func walkthroughKeepsExistingDirectories() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        let existing = keysmith.directory + "/mine"
        try FileManager.default.createDirectory(atPath: existing, withIntermediateDirectories: true)
        try "precious".write(toFile: existing + "/precious.txt", atomically: true, encoding: .utf8)
        let refused = try keysmith.run(["walkthrough", "--directory", existing])
        #expect(refused.status == 7, "\(refused.output)")
        #expect(FileManager.default.contents(atPath: existing + "/precious.txt") == Data("precious".utf8))
        // An empty directory that exists is not the walkthrough's either.
        let empty = keysmith.directory + "/empty"
        try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: true)
        #expect(try keysmith.run(["walkthrough", "--directory", empty]).status == 7)
        #expect(FileManager.default.fileExists(atPath: empty))
        // A path that does not exist yet is made, used and removed.
        let fresh = keysmith.directory + "/fresh"
        let ran = try keysmith.run(["walkthrough", "--directory", fresh])
        #expect(ran.status == 0, "\(ran.output)")
        #expect(!FileManager.default.fileExists(atPath: fresh))
    }
}
