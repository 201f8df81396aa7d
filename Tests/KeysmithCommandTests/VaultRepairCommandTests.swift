import Foundation
import KeysmithTestSupport
import Testing

/// `keysmith vault repair` and the one-document promise of `vault verify --json`, through the
/// built binary (docs/cli.md).
@Suite("the keysmith command: vault repair")
struct VaultRepairCommandTests {
    /// The bytes of every file in the vault's data directory.
    static func dataFiles(_ vault: String) throws -> [String: Data] {
        var result: [String: Data] = [:]
        let enumerator = FileManager.default.enumerator(atPath: vault)
        while let name = enumerator?.nextObject() as? String {
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: vault + "/" + name, isDirectory: &isDirectory), !isDirectory.boolValue, name != "lock" {
                result[name] = FileManager.default.contents(atPath: vault + "/" + name)
            }
        }
        return result
    }

    @Test("a flipped bit in a record: the dry run reports and changes nothing, the repair leaves an intact vault, the damaged file aside and an audit entry")
    func repairAfterAFlippedBit() throws {
        let keysmith = try DamageAndRefusalTests.vaultWithFiveSecrets()
        defer { keysmith.cleanup() }
        // Commit 1 wrote s1; the last byte of log 2 (s2's record) flipped.
        let log = keysmith.vault + "/data/log/0000000000000002"
        var bytes = try #require(FileManager.default.contents(atPath: log))
        bytes[bytes.count - 1] ^= 0x01
        try bytes.write(to: URL(fileURLWithPath: log))
        let blocked = try keysmith.run(["secret", "get", "--service", "s2", "--account", "a"])
        #expect(blocked.status == 6, "\(blocked.output)")
        #expect(try keysmith.run(["secret", "list"]).status == 6)
        #expect(try keysmith.run(["vault", "compact"]).status == 6)

        let before = try Self.dataFiles(keysmith.vault)
        let dry = try keysmith.run(["vault", "repair", "--dry-run", "--json"])
        #expect(dry.status == 6, "\(dry.output)")
        #expect(dry.stdout.split(separator: "\n").count == 1)
        let preview = try #require(try JSONSerialization.jsonObject(with: Data(dry.stdout.utf8)) as? [String: Any])
        #expect(preview["needed"] as? Bool == true && preview["dry_run"] as? Bool == true)
        #expect(preview["items_kept"] as? Int == 4, "\(preview)")  // s1, s3, s4, s5
        let losses = try #require(preview["losses"] as? [[String: Any]])
        #expect(losses.map { $0["file"] as? String } == ["data/log/0000000000000002"])
        #expect(losses.first?["complete"] as? Bool == false)
        // s1 is older than the damaged commit: it is named; s2's name is sealed in the damaged record.
        #expect((preview["items_maybe_stale"] as? [String])?.count == 1, "\(preview)")
        #expect((preview["items_maybe_stale"] as? [String])?.first?.contains("s1") == true, "\(preview)")
        #expect((preview["unreadable_records"] as? [String])?.count == 1, "\(preview)")
        #expect(preview["absent_items_may_be_lost"] as? Bool == true)
        #expect(try Self.dataFiles(keysmith.vault) == before, "the dry run changed files")

        let repair = try keysmith.run(["vault", "repair"])
        #expect(repair.status == 0, "\(repair.output)")
        #expect(repair.stdout.contains("lost: data/log/0000000000000002"), "\(repair.stdout)")
        #expect(repair.stdout.contains("may be out of date"), "\(repair.stdout)")
        #expect(repair.stdout.contains("/damaged-"), "\(repair.stdout)")
        let aside = try #require(try FileManager.default.contentsOfDirectory(atPath: keysmith.vault).first { $0.hasPrefix("damaged-") })
        #expect(FileManager.default.contents(atPath: keysmith.vault + "/" + aside + "/log/0000000000000002") == bytes)

        let verify = try keysmith.run(["vault", "verify"])
        #expect(verify.status == 0, "\(verify.output)")
        // verify points at the account the repair left of what it lost.
        let reportPath = keysmith.vault + "/" + aside + "/report"
        #expect(FileManager.default.fileExists(atPath: reportPath))
        #expect(verify.stdout.contains("An earlier repair's account of what it lost: \(reportPath)"), "\(verify.stdout)")
        let verifyJSON = try keysmith.run(["vault", "verify", "--json"])
        #expect(verifyJSON.stdout.contains(#""repair_reports":[""#) && verifyJSON.stdout.contains(aside + "/report"), "\(verifyJSON.stdout)")
        for index in [1, 3, 4, 5] {
            let read = try keysmith.run(["secret", "get", "--service", "s\(index)", "--account", "a"])
            #expect(read.status == 0 && read.stdout.trimmingCharacters(in: .newlines) == "secret-\(index)", "s\(index): \(read.output)")
        }
        #expect(try keysmith.run(["secret", "get", "--service", "s2", "--account", "a"]).status == 2)
        #expect(try keysmith.run(["secret", "list"]).status == 0)
        #expect(try keysmith.run(["vault", "compact"]).status == 0)
        let audit = try keysmith.run(["audit", "show", "--event", "store-repair", "--json"])
        #expect(audit.status == 0, "\(audit.output)")
        #expect(audit.stdout.contains("store-repair") && audit.stdout.contains("data/log/0000000000000002"), "\(audit.stdout)")
        #expect(try keysmith.run(["audit", "verify"]).status == 0)
        // Nothing left to repair.
        let again = try keysmith.run(["vault", "repair"])
        #expect(again.status == 0 && again.stdout.contains("intact"), "\(again.output)")
    }

    @Test("a flipped bit in a log's vault id: every record of the commit is recovered, and nothing is reported in doubt")
    func repairRecoversAWholeCommit() throws {
        let keysmith = try DamageAndRefusalTests.vaultWithFiveSecrets()
        defer { keysmith.cleanup() }
        let log = keysmith.vault + "/data/log/0000000000000002"
        var bytes = try #require(FileManager.default.contents(atPath: log))
        bytes[10] ^= 0x01
        try bytes.write(to: URL(fileURLWithPath: log))
        #expect(try keysmith.run(["secret", "get", "--service", "s1", "--account", "a"]).status == 6)
        let repair = try keysmith.run(["vault", "repair", "--json"])
        #expect(repair.status == 0, "\(repair.output)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(repair.stdout.utf8)) as? [String: Any])
        #expect(report["items_kept"] as? Int == 5)
        #expect((report["losses"] as? [[String: Any]])?.first?["complete"] as? Bool == true, "\(report)")
        #expect((report["items_maybe_stale"] as? [String]) == [])
        #expect(report["absent_items_may_be_lost"] as? Bool == false)
        #expect(report["audited"] as? Bool == true)
        for index in 1...5 {
            let read = try keysmith.run(["secret", "get", "--service", "s\(index)", "--account", "a"])
            #expect(read.status == 0 && read.stdout.trimmingCharacters(in: .newlines) == "secret-\(index)", "s\(index): \(read.output)")
        }
        #expect(try keysmith.run(["vault", "verify"]).status == 0)
    }

    @Test("vault verify --json prints one document when the vault does not open (both header copies damaged, a wrong keyfile)")
    func verifyJSONWhenOpeningFails() throws {
        let keysmith = try DamageAndRefusalTests.vaultWithFiveSecrets()
        defer { keysmith.cleanup() }
        let wrong = keysmith.directory + "/wrong-key"
        try (String(repeating: "ab", count: 32) + "\n").write(toFile: wrong, atomically: true, encoding: .utf8)
        let wrongKey = try keysmith.run(["vault", "verify", "--json"], environment: ["KEYSMITH_KEYFILE": wrong])
        #expect(wrongKey.status == 4, "\(wrongKey.output)")
        let failed = try #require(try JSONSerialization.jsonObject(with: Data(wrongKey.stdout.utf8)) as? [String: Any], "\(wrongKey.stdout)")
        #expect(failed["intact"] as? Bool == false)
        #expect((failed["error"] as? [String: Any])?["code"] as? String == "authentication failed")
        for name in ["header", "header.backup"] {
            var bytes = try #require(FileManager.default.contents(atPath: keysmith.vault + "/" + name))
            bytes[5] ^= 0x01
            try bytes.write(to: URL(fileURLWithPath: keysmith.vault + "/" + name))
        }
        let damaged = try keysmith.run(["vault", "verify", "--json"])
        #expect(damaged.status == 6, "\(damaged.output)")
        #expect(damaged.stdout.split(separator: "\n").count == 1)
        let document = try #require(try JSONSerialization.jsonObject(with: Data(damaged.stdout.utf8)) as? [String: Any], "\(damaged.stdout)")
        #expect(document["intact"] as? Bool == false)
        #expect((document["error"] as? [String: Any])?["code"] as? String == "corrupt or tampered data")
    }

    @Test("a format 1 vault: every write exits 64 naming `vault upgrade` and changes nothing; damaged, `vault repair` upgrades it keeping what authenticates, with an audit entry")
    func format1IsReadOnlyAndRepairedByUpgrading() throws {
        var keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        let keys = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path + "/Keys"
        #expect(try spawnAndWait("/bin/cp", ["-a", keys + "/golden-v1-keyfile", keysmith.vault]).status == 0)
        keysmith.environment["KEYSMITH_KEYFILE"] = keys + "/test-keyfile"
        let read = try keysmith.run(["secret", "get", "--service", "mail", "--account", "bob"])
        #expect(read.status == 0 && read.stdout == "bob-secret-v2\n", "\(read.output)")
        let before = try Self.dataFiles(keysmith.vault)
        for (arguments, stdin) in [(["secret", "set", "--service", "new", "--account", "n"], "n"), (["secret", "delete", "--service", "mail", "--account", "bob"], ""),
                                   (["batch"], "{\"op\":\"delete\",\"service\":\"mail\",\"account\":\"bob\"}\n"), (["vault", "compact"], ""), (["vault", "rekey"], ""),
                                   (["vault", "passwd", "--new-keyfile", keysmith.directory + "/new-keyfile"], ""),
                                   (["token", "import", "--service", "api", "--account", "a"], "{\"access_token\":\"t\",\"token_type\":\"Bearer\"}")] {
            let write = try keysmith.run(arguments, stdin: stdin)
            #expect(write.status == 64, "\(arguments): \(write.output)")
            #expect(write.stderr.contains("keysmith vault upgrade"), "\(arguments): \(write.stderr)")
        }
        #expect(try Self.dataFiles(keysmith.vault) == before, "a refused write changed files")
        #expect(try keysmith.run(["vault", "repair"]).stdout.contains("intact"))

        // Damage in the last commit's only record (邮件/李雷, inside its tag): the repair
        // upgrades, keeping the rest.
        let log = keysmith.vault + "/log/0000000000000004"
        var bytes = try #require(FileManager.default.contents(atPath: log))
        bytes[bytes.count - 50] ^= 1
        try bytes.write(to: URL(fileURLWithPath: log))
        let damaged = try Self.dataFiles(keysmith.vault)
        let dry = try keysmith.run(["vault", "repair", "--dry-run", "--json"])
        #expect(dry.status == 6, "\(dry.output)")
        let preview = try #require(try JSONSerialization.jsonObject(with: Data(dry.stdout.utf8)) as? [String: Any])
        #expect((preview["losses"] as? [[String: Any]])?.map { $0["file"] as? String } == ["log/0000000000000004"], "\(preview)")
        #expect(try Self.dataFiles(keysmith.vault) == damaged, "the dry run changed files")
        let repair = try keysmith.run(["vault", "repair"])
        #expect(repair.status == 0, "\(repair.output)")
        #expect(repair.stdout.contains("lost: log/0000000000000004"), "\(repair.stdout)")
        let aside = try #require(try FileManager.default.contentsOfDirectory(atPath: keysmith.vault).first { $0.hasPrefix("damaged-") })
        #expect(FileManager.default.contents(atPath: keysmith.vault + "/" + aside + "/log/0000000000000004") == damaged["log/0000000000000004"])
        #expect(try keysmith.run(["vault", "verify"]).status == 0)
        let bob = try keysmith.run(["secret", "get", "--service", "mail", "--account", "bob"])
        #expect(bob.status == 0 && bob.stdout == "bob-secret-v2\n", "\(bob.output)")
        #expect(try keysmith.run(["secret", "get", "--service", "邮件", "--account", "李雷"]).status == 2)
        #expect(try keysmith.run(["secret", "set", "--service", "new", "--account", "n"], stdin: "n").status == 0)
        let audit = try keysmith.run(["audit", "show", "--event", "store-repair", "--json"])
        #expect(audit.status == 0 && audit.stdout.contains("log/0000000000000004"), "\(audit.output)")
    }


    @Test("`vault repair` repairs a format 1 vault that no longer opens (its snapshot replaced by a link): the logs' records are kept")
    func format1RepairWithoutOpening() throws {
        var keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        let keys = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path + "/Keys"
        #expect(try spawnAndWait("/bin/cp", ["-a", keys + "/golden-v1-keyfile", keysmith.vault]).status == 0)
        keysmith.environment["KEYSMITH_KEYFILE"] = keys + "/test-keyfile"
        let outside = keysmith.directory + "/outside-snapshot"
        try FileManager.default.moveItem(atPath: keysmith.vault + "/snapshot", toPath: outside)
        try FileManager.default.createSymbolicLink(atPath: keysmith.vault + "/snapshot", withDestinationPath: outside)
        let blocked = try keysmith.run(["secret", "list"])
        #expect(blocked.status == 6 && blocked.stderr.contains("vault repair"), "\(blocked.output)")
        let repair = try keysmith.run(["vault", "repair"])
        #expect(repair.status == 0, "\(repair.output)")
        #expect(repair.stdout.contains("lost: snapshot"), "\(repair.stdout)")
        let bob = try keysmith.run(["secret", "get", "--service", "mail", "--account", "bob"])  // updated in commit 3
        #expect(bob.status == 0 && bob.stdout == "bob-secret-v2\n", "\(bob.output)")
        #expect(try keysmith.run(["vault", "verify"]).status == 0)
        #expect(FileManager.default.fileExists(atPath: outside))
    }

}

/// Issue 49's reproductions through the binary: damage, then repair, must never undo what the
/// vault promises.
@Suite("the keysmith command: vault repair never launders an attack")
struct VaultRepairAttackCommandTests {
    @Test("a revocation dropped out of its commit: the repair refuses (the anchor saw that commit) and the scope is never granted again")
    func droppedRevocation() throws {
        let keysmith = try Keysmith.withVault()
        defer { keysmith.cleanup() }
        let imported = try keysmith.run(["token", "import", "--service", "gh", "--account", "ci"],
                                        stdin: #"{"access_token":"a","token_type":"Bearer","scope":"repo:read repo:admin"}"#)
        #expect(imported.status == 0, "\(imported.output)")
        let revoked = try keysmith.run(["token", "revoke", "--service", "gh", "--account", "ci", "repo:admin"])
        #expect(revoked.status == 0, "\(revoked.output)")
        let logs = try FileManager.default.contentsOfDirectory(atPath: keysmith.vault + "/data/log").sorted()
        let log = keysmith.vault + "/data/log/" + logs.last!
        // The revocation's commit with its first frame cut out (table entry and body; count - 1).
        let data = [UInt8](try #require(FileManager.default.contents(atPath: log)))
        let count = Int(data[36]) << 24 | Int(data[37]) << 16 | Int(data[38]) << 8 | Int(data[39])
        #expect(count >= 2)
        let length = Int(data[72 + 33]) << 24 | Int(data[72 + 34]) << 16 | Int(data[72 + 35]) << 8 | Int(data[72 + 36])
        let bodies = 72 + 65 * count + 32
        let fewer = UInt32(count - 1)
        var cut: [UInt8] = Array(data[0..<36])
        cut += [UInt8(fewer >> 24), UInt8(fewer >> 16 & 0xFF), UInt8(fewer >> 8 & 0xFF), UInt8(fewer & 0xFF)]
        cut += Array(data[40..<72])
        cut += Array(data[137..<(72 + 65 * count)])
        cut += Array(data[(72 + 65 * count)..<bodies])
        cut += Array(data[(bodies + length)...])
        try Data(cut).write(to: URL(fileURLWithPath: log))
        let repair = try keysmith.run(["vault", "repair"])
        #expect(repair.status != 0, "\(repair.output)")
        #expect(repair.stderr.contains("accept-rollback"), "\(repair.stderr)")
        #expect(!repair.stdout.contains("every record recovered"), "\(repair.stdout)")
        let check = try keysmith.run(["token", "check", "--service", "gh", "--account", "ci", "repo:admin"])
        #expect(check.status != 0, "the revoked scope reads as granted: \(check.output)")
        // Another machine (no anchor) repairs it: the commit is lost, never complete, and the
        // token is named as possibly out of date.
        let elsewhere = try DamageAndRefusalTests.freshMachine(keysmith)
        let other = try keysmith.run(["vault", "repair", "--json"], environment: elsewhere)
        #expect(other.status == 0, "\(other.output)")
        let document = try #require(try JSONSerialization.jsonObject(with: Data(other.stdout.utf8)) as? [String: Any])
        let losses = try #require(document["losses"] as? [[String: Any]])
        #expect(!losses.isEmpty && losses.allSatisfy { $0["complete"] as? Bool == false }, "\(losses)")
        #expect((document["items_maybe_stale"] as? [String])?.isEmpty == false, "\(document)")
    }

    @Test("a refused fork with one flipped bit in its newest log: the repair refuses, the fork is never served")
    func forkWithFlippedBit() throws {
        var keysmith = try Keysmith.withVault()
        defer { keysmith.cleanup() }
        func put(_ value: String, _ extra: [String: String] = [:]) throws {
            let set = try keysmith.run(["secret", "set", "--service", "s", "--account", "k"], stdin: value, environment: extra)
            #expect(set.status == 0, "\(set.output)")
        }
        try put("old")
        let copy = keysmith.directory + "/o"
        try FileManager.default.copyItem(atPath: keysmith.vault, toPath: copy)
        try put("true-newest")
        try put("fork", ["KEYSMITH_VAULT": copy, "KEYSMITH_ANCHOR_DIR": keysmith.directory + "/a2"])
        try FileManager.default.removeItem(atPath: keysmith.vault)
        try FileManager.default.copyItem(atPath: copy, toPath: keysmith.vault)
        let log = keysmith.vault + "/data/log/0000000000000002"
        var bytes = try #require(FileManager.default.contents(atPath: log))
        bytes[140] ^= 1
        try bytes.write(to: URL(fileURLWithPath: log))
        keysmith.environment["KEYSMITH_VAULT"] = keysmith.vault
        let repair = try keysmith.run(["vault", "repair"])
        #expect(repair.status != 0, "\(repair.output)")
        let get = try keysmith.run(["secret", "get", "--service", "s", "--account", "k"])
        #expect(get.stdout != "fork" && get.status != 0, "\(get.output)")
    }

    @Test("vault repair --dry-run writes nothing, not even an older header.backup that an open would heal")
    func dryRunWritesNothing() throws {
        var keysmith = try Keysmith.withVault()
        defer { keysmith.cleanup() }
        #expect(try keysmith.run(["secret", "set", "--service", "s", "--account", "a"], stdin: "x").status == 0)
        let old = try #require(FileManager.default.contents(atPath: keysmith.vault + "/header.backup"))
        let passwd = try keysmith.run(["vault", "passwd", "--new-keyfile", keysmith.directory + "/k2"])
        #expect(passwd.status == 0, "\(passwd.output)")
        keysmith.environment["KEYSMITH_KEYFILE"] = keysmith.directory + "/k2"
        try old.write(to: URL(fileURLWithPath: keysmith.vault + "/header.backup"))
        let before = try VaultRepairCommandTests.dataFiles(keysmith.vault)
        let dry = try keysmith.run(["vault", "repair", "--dry-run"])
        #expect(dry.status == 0, "\(dry.output)")
        #expect(try VaultRepairCommandTests.dataFiles(keysmith.vault) == before, "the dry run changed files")
    }
}
