import Foundation
import Keysmith
import KeysmithSystem
import KeysmithTestSupport
import KeysmithVault
import Testing

/// The golden vaults in Keys/: written once by format version 1 and read by every later
/// Keysmith. Regenerate them only for a new format version (KEYSMITH_REGENERATE_GOLDEN=1).
enum Golden {
    static let passphrase = "keysmith-golden-v1"
    static let keysDirectory = repositoryRoot + "/Keys"
    static let passphraseVault = keysDirectory + "/golden-v1-passphrase"
    static let keyfileVault = keysDirectory + "/golden-v1-keyfile"
    /// Format 2: the same contents, passphrase `keysmith-golden-v1` too (scrypt N = 2^14).
    static let passphraseVault2 = keysDirectory + "/golden-v2-passphrase"
    static let keyfileVault2 = keysDirectory + "/golden-v2-keyfile"
    static let keyfile = keysDirectory + "/test-keyfile"

    static let created = Date(timeIntervalSince1970: 1_790_000_000)

    static let web = ItemKey.internetPassword(InternetPasswordKey(
        server: "mail.example.com", port: 993, internetProtocol: .imaps, authenticationType: .default,
        securityDomain: "", path: "", account: "alice"))

    /// What each golden vault holds.
    static let records: [SecureRecord] = [
        SecureRecord(
            info: ItemInfo(
                attributes: ItemAttributes(key: .genericPassword(service: "mail", account: "bob"), label: "Bob's mail",
                                           comment: "golden", itemDescription: "Mail password", creator: "keysmith",
                                           type: "password", isInvisible: false, isNegative: false, generic: Data([1, 2, 3])),
                created: created, modified: created.addingTimeInterval(60)),
            secret: Data("bob-secret-v2".utf8)),
        SecureRecord(
            info: ItemInfo(attributes: ItemAttributes(key: web, label: "Alice IMAP", isInvisible: true),
                           created: created, modified: created),
            secret: Data((0...255).map(UInt8.init))),
        SecureRecord(
            info: ItemInfo(attributes: ItemAttributes(key: .genericPassword(service: "邮件", account: "李雷")),
                           created: created, modified: created),
            secret: Data()),
    ]
    static let deleted = ItemKey.genericPassword(service: "mail", account: "gone")

    /// Writes a golden vault of format 2: a snapshot and logs, with an update and a deletion.
    static func write(at path: String, credential: VaultCredential) throws {
        try? FileManager.default.removeItem(atPath: path)
        let clock: @Sendable () -> Date = { created }
        let vault = try FileVault.create(at: path, credential: credential, scrypt: .testing, clock: clock, anchorDirectory: nil)
        var first = records[0]
        first.secret = Data("bob-secret-v1".utf8)
        first.info.modified = created
        try vault.perform([.restore(first), .restore(records[1])])
        try vault.perform([.restore(SecureRecord(info: ItemInfo(attributes: ItemAttributes(key: deleted), created: created, modified: created), secret: Data("x".utf8)))])
        try vault.compact()
        try vault.perform([.restore(records[0]), .delete(deleted)])
        try vault.perform([.restore(records[2])])
        _ = FileManager.default.createFile(atPath: path + "/lock", contents: Data())
    }

    static func copy(_ path: String) throws -> (TemporaryDirectory, String) {
        let directory = TemporaryDirectory()
        let destination = directory.sub("vault")
        try FileManager.default.copyItem(atPath: path, toPath: destination)
        return (directory, destination)
    }
}

@Suite("golden vaults (format versions 1 and 2)")
struct GoldenVaultTests {
    /// The generator is tested on every run: a vault it writes now holds, item for item (names,
    /// metadata, dates, versions, secrets), and file for file, what the committed golden vault of
    /// format 2 holds. With KEYSMITH_REGENERATE_GOLDEN=1 (only for a new format version) the
    /// fresh vaults then replace the committed ones. Format 1 vaults can no longer be written.
    @Test("the generator writes what the format 2 golden vaults hold (KEYSMITH_REGENERATE_GOLDEN=1 rewrites them)", arguments: [true, false])
    func generatorMatchesGolden(passphrase: Bool) throws {
        let golden = passphrase ? Golden.passphraseVault2 : Golden.keyfileVault2
        let credential: VaultCredential = passphrase ? .passphrase(Golden.passphrase) : .keyfile(at: Golden.keyfile)
        let directory = TemporaryDirectory()
        let fresh = directory.sub("fresh")
        try Golden.write(at: fresh, credential: credential)
        let (copy, committed) = try Golden.copy(golden)
        _ = copy
        func contents(_ path: String) throws -> [String] {
            let vault = try FileVault.open(at: path, credential: credential, anchorDirectory: nil)
            return try vault.search(ItemQuery()).map { info in
                let record = try #require(try vault.read(info.key))
                return "\(record.key) \(record.attributes) \(record.info.created) \(record.info.modified) \(record.info.version) \(Array(record.secret))"
            }.sorted()
        }
        let written = try contents(fresh)
        #expect(written.count == Golden.records.count)
        #expect(written == (try contents(committed)))
        let files = { (path: String) in try FileManager.default.contentsOfDirectory(atPath: path).sorted() }
        #expect(try files(fresh) == (try files(committed)))
        if ProcessInfo.processInfo.environment["KEYSMITH_REGENERATE_GOLDEN"] == "1" {
            try Golden.write(at: golden, credential: credential)
        }
    }

    @Test("today's code reads the format 2 golden vaults, and they stay writable", arguments: [true, false])
    func readsGolden2(passphrase: Bool) throws {
        let (directory, path) = try Golden.copy(passphrase ? Golden.passphraseVault2 : Golden.keyfileVault2)
        _ = directory
        let credential: VaultCredential = passphrase ? .passphrase(Golden.passphrase) : .keyfile(at: Golden.keyfile)
        let vault = try FileVault.open(at: path, credential: credential, anchorDirectory: nil)
        #expect(vault.formatVersion == 2)
        #expect(try vault.verify().isEmpty)
        for record in Golden.records {
            #expect(try vault.read(record.key)?.hasSameContents(as: record) == true)
        }
        #expect(try vault.read(Golden.deleted) == nil)
        #expect(try vault.search(ItemQuery()).count == Golden.records.count)
        #expect(try vault.sequence == 4)
        try vault.create(ItemAttributes(key: .genericPassword(service: "new", account: "n")), secret: Data("n".utf8))
        try vault.rekey()
        #expect(try FileVault.open(at: path, credential: credential, anchorDirectory: nil).read(Golden.records[0].key)?
            .hasSameContents(as: Golden.records[0]) == true)
    }

    @Test("upgrading a format 1 vault keeps every record and version, removes the old files, and happens once",
          arguments: [true, false])
    func upgrade(passphrase: Bool) throws {
        let (directory, path) = try Golden.copy(passphrase ? Golden.passphraseVault : Golden.keyfileVault)
        _ = directory
        let credential: VaultCredential = passphrase ? .passphrase(Golden.passphrase) : .keyfile(at: Golden.keyfile)
        let before = try FileVault.open(at: path, credential: credential)
        #expect(before.formatVersion == 1)
        let versions = try Golden.records.map { try before.read($0.key)?.info.version }
        #expect(try FileVault.upgrade(at: path, credential: credential, scrypt: .testing))
        let after = try FileVault.open(at: path, credential: credential, anchorDirectory: nil)
        #expect(after.formatVersion == 2)
        #expect(try after.verify().isEmpty)
        for (record, version) in zip(Golden.records, versions) {
            let read = try after.read(record.key)
            #expect(read?.hasSameContents(as: record) == true)
            #expect(read?.info.version == version)
        }
        #expect(try after.read(Golden.deleted) == nil)
        #expect(try files(in: path).allSatisfy { ["header", "header.backup", "lock", "data/snapshot"].contains($0) })
        #expect(try !FileVault.upgrade(at: path, credential: credential))
        // The handle opened before the upgrade never writes format 1. Opened with a keyfile it
        // follows the upgrade (reads and writes the format 2 vault); with a passphrase, which is
        // never kept, its reads and writes fail ("open it again") instead of finding nothing.
        let late = ItemAttributes(key: .genericPassword(service: "late", account: "l"))
        if passphrase {
            let stale = #expect(throws: KeysmithError.self) { try before.create(late, secret: Data("l".utf8)) }
            #expect(stale?.code == .storeLocked)
            #expect(try after.read(late.key) == nil)
            let staleRead = #expect(throws: KeysmithError.self) { try before.read(Golden.records[0].key) }
            #expect(staleRead?.code == .storeLocked)
        } else {
            #expect(try before.read(Golden.records[0].key)?.hasSameContents(as: Golden.records[0]) == true)
            try before.create(late, secret: Data("l".utf8))
            #expect(try after.read(late.key)?.secret == Data("l".utf8))
        }
        try after.create(ItemAttributes(key: .genericPassword(service: "new", account: "n")), secret: Data("n".utf8))
        #expect(try after.sequence == (passphrase ? 5 : 6))
    }

    @Test("an upgrade never follows a symbolic link out of the vault when it clears a leftover")
    func upgradeDoesNotFollowLinks() throws {
        let (directory, path) = try Golden.copy(Golden.keyfileVault)
        let outside = directory.sub("outside")
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        #expect(FileManager.default.createFile(atPath: outside + "/precious", contents: Data("keep".utf8)))
        try FileManager.default.createSymbolicLink(atPath: path + "/data", withDestinationPath: outside)
        try FileVault.upgrade(at: path, credential: .keyfile(at: Golden.keyfile), scrypt: .testing)
        #expect(try Data(contentsOf: URL(fileURLWithPath: outside + "/precious")) == Data("keep".utf8))
        let vault = try FileVault.open(at: path, credential: .keyfile(at: Golden.keyfile), anchorDirectory: nil)
        #expect(vault.formatVersion == 2)
        #expect(try vault.read(Golden.records[0].key)?.hasSameContents(as: Golden.records[0]) == true)
    }

    @Test("an upgrade killed at any file-system step leaves a format 1 vault as it was or a complete format 2 one")
    func upgradeKilledAtEveryStep() throws {
        let directory = TemporaryDirectory()
        var step = 1
        var sawOld = false, sawNew = false
        while true {
            let path = directory.sub("vault-\(step)")
            try FileManager.default.copyItem(atPath: Golden.keyfileVault, toPath: path)
            let finished = try runStressKilled(at: step, ["upgrade", path, Golden.keyfile])
            let vault = try FileVault.open(at: path, credential: .keyfile(at: Golden.keyfile), anchorDirectory: nil)
            if vault.formatVersion == 1 { sawOld = true } else { sawNew = true }
            for record in Golden.records {
                #expect(try vault.read(record.key)?.hasSameContents(as: record) == true, "step \(step)")
            }
            #expect(try vault.verify().filter { !$0.isSuperseded && $0.file != "header.backup" }.isEmpty, "step \(step)")
            // Running it again finishes the job.
            try FileVault.upgrade(at: path, credential: .keyfile(at: Golden.keyfile))
            let again = try FileVault.open(at: path, credential: .keyfile(at: Golden.keyfile), anchorDirectory: nil)
            #expect(again.formatVersion == 2)
            #expect(try again.read(Golden.records[1].key)?.hasSameContents(as: Golden.records[1]) == true)
            if finished { break }
            step += 1
            try #require(step < 200)
        }
        print("upgrade fault injection: killed at each of \(step - 1) steps, then finished")
        #expect(sawOld && sawNew)
    }

    @Test("today's code reads the version 1 vault unlocked by the documented test passphrase, and never writes it",
          arguments: [true, false])
    func readsGolden(passphrase: Bool) throws {
        let (directory, path) = try Golden.copy(passphrase ? Golden.passphraseVault : Golden.keyfileVault)
        _ = directory
        let credential: VaultCredential = passphrase ? .passphrase(Golden.passphrase) : .keyfile(at: Golden.keyfile)
        // Nothing is created to read it: not even the lock file.
        try FileManager.default.removeItem(atPath: path + "/lock")
        let vault = try FileVault.open(at: path, credential: credential)
        #expect(try vault.verify().isEmpty)
        for record in Golden.records {
            #expect(try vault.read(record.key)?.hasSameContents(as: record) == true)
        }
        #expect(try vault.read(Golden.deleted) == nil)
        #expect(try vault.search(ItemQuery()).count == Golden.records.count)
        // Read-only: every kind of write is refused, names the way out, and changes no byte.
        let before = try snapshotOfFiles(path)
        let writes: [(String, () throws -> Void)] = [
            ("create", { try vault.create(ItemAttributes(key: .genericPassword(service: "new", account: "n")), secret: Data("n".utf8)) }),
            ("delete", { try vault.delete(Golden.records[0].key) }),
            ("rekey", { try vault.rekey() }),
            ("compact", { try vault.compact() }),
            ("passwd", { try vault.changeCredential(to: .key([UInt8](repeating: 7, count: 32))) }),
            // A named lock guards a write that follows (a token refresh): refused before it.
            ("named lock", { _ = try vault.tryExclusiveLock(named: "refresh") }),
        ]
        for (name, write) in writes {
            let error = #expect(throws: KeysmithError.self, "\(name)") { try write() }
            #expect(error?.code == .invalidArgument, "\(name)")
            #expect(error?.message.contains("keysmith vault upgrade") == true, "\(name)")
        }
        #expect(try snapshotOfFiles(path) == before)
        #expect(!System.entryExists(path + "/lock") && !System.entryExists(path + "/locks"))
        #expect(try FileVault.open(at: path, credential: credential).read(Golden.records[0].key)?.hasSameContents(as: Golden.records[0]) == true)
    }

    @Test("the golden vaults have the documented layout")
    func layout() throws {
        for path in [Golden.passphraseVault2, Golden.keyfileVault2] {
            #expect(try files(in: path) == ["data/log/0000000000000003", "data/log/0000000000000004", "data/snapshot",
                                            "header", "header.backup", "lock"])
        }
        #expect(try String(contentsOfFile: Golden.passphraseVault2 + "/header", encoding: .utf8).contains("\"n\" : 16384"))
        for path in [Golden.passphraseVault, Golden.keyfileVault] {
            let names = try files(in: path)
            #expect(names == ["header", "header.backup", "lock", "log/0000000000000003", "log/0000000000000004", "snapshot"])
        }
        let header = try String(contentsOfFile: Golden.passphraseVault + "/header", encoding: .utf8)
        #expect(header.contains("\"type\" : \"scrypt\""))
        #expect(header.contains("\"n\" : 4096"))
    }
}

@Suite("format specification")
struct FormatSpecificationTests {
    /// docs/examples/decrypt_vault.py was written from docs/format.md alone; if it decrypts what
    /// Keysmith wrote, the specification is complete enough for an independent decryptor.
    static func runDecryptor(_ vault: String, passphrase: Bool) throws -> (status: Int32, output: Data) {
        var arguments = ["python3", repositoryRoot + "/docs/examples/decrypt_vault.py", vault]
        arguments += passphrase ? ["--passphrase-env", "KEYSMITH_TEST_GOLDEN_PASSPHRASE"] : ["--keyfile", Golden.keyfile]
        var environment = ProcessInfo.processInfo.environment
        environment["KEYSMITH_TEST_GOLDEN_PASSPHRASE"] = Golden.passphrase
        let run = try spawnAndWait("/usr/bin/env", arguments, environment: environment)
        return (run.status, run.stdout)
    }

    @Test("the independent checker refuses what Keysmith refuses: a missing log, a replaced header field, a flipped record")
    func independentCheckerRefuses() throws {
        for attack in ["remove-log", "kdf", "flip"] {
            let (directory, path) = try Golden.copy(Golden.keyfileVault2)
            _ = directory
            switch attack {
            case "remove-log": try FileManager.default.removeItem(atPath: path + "/data/log/0000000000000003")
            case "kdf":
                for name in ["header", "header.backup"] {
                    let text = try String(contentsOfFile: path + "/" + name, encoding: .utf8)
                    try text.replacingOccurrences(of: "\"keyfile\"", with: "\"keyfilx\"").write(toFile: path + "/" + name, atomically: true, encoding: .utf8)
                }
            default:
                var bytes = try Data(contentsOf: URL(fileURLWithPath: path + "/data/snapshot"))
                bytes[bytes.count - 1] ^= 1
                try bytes.write(to: URL(fileURLWithPath: path + "/data/snapshot"))
            }
            #expect(try Self.runDecryptor(path, passphrase: false).status != 0, "\(attack)")
            // Keysmith refuses to open it, or opens it and reports the damage: which one is
            // pinned per attack, so an open that fails for another reason fails the test.
            // A missing log and a flipped record open (reads go on where they can) and verify
            // names the damage; a header field replaced is refused before anything is read.
            let open = { try FileVault.open(at: path, credential: .keyfile(at: Golden.keyfile), anchorDirectory: nil) }
            if attack == "kdf" {
                #expect(throws: KeysmithError.self) { _ = try open() }
                do { _ = try open() } catch let error as KeysmithError { #expect(error.code == .corruptData, "\(attack): \(error)") }
            } else {
                let problems = try open().verify()
                #expect(problems.count == 1, "\(attack): \(problems)")
            }
        }
    }

    @Test("an independent decryptor written from docs/format.md reads the golden vaults of both formats",
          arguments: [(true, 1), (false, 1), (true, 2), (false, 2)])
    func independentDecryptor(passphrase: Bool, format: Int) throws {
        let vault = format == 1 ? (passphrase ? Golden.passphraseVault : Golden.keyfileVault)
            : (passphrase ? Golden.passphraseVault2 : Golden.keyfileVault2)
        let (status, data) = try Self.runDecryptor(vault, passphrase: passphrase)
        #expect(status == 0)
        try checkDecrypted(data)
    }

    func checkDecrypted(_ data: Data) throws {
        let decoded = try String(decoding: data, as: UTF8.self).split(separator: "\n").map {
            try #require(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])
        }
        #expect(decoded.count == Golden.records.count)
        for record in Golden.records {
            let match = decoded.first { object in
                (object["account"] as? String) == record.key.account
                    && (object["service"] as? String ?? object["server"] as? String)
                        == (record.key.service ?? { if case .internetPassword(let k) = record.key { k.server } else { "" } }())
            }
            let object = try #require(match, "the decryptor did not find \(record.key)")
            #expect(Data(base64Encoded: object["secret"] as? String ?? "") == record.secret)
            #expect(object["label"] as? String == record.attributes.label)
            #expect(object["created"] as? Double == record.info.created.timeIntervalSince1970)
            #expect(object["modified"] as? Double == record.info.modified.timeIntervalSince1970)
            #expect(object["invisible"] as? Bool == (record.attributes.isInvisible ?? false))
        }
    }
}

/// Every file under `path` (relative name → bytes), to show that nothing changed.
func snapshotOfFiles(_ path: String) throws -> [String: Data] {
    var contents: [String: Data] = [:]
    for name in try FileManager.default.subpathsOfDirectory(atPath: path) {
        var isDirectory: ObjCBool = false
        _ = FileManager.default.fileExists(atPath: path + "/" + name, isDirectory: &isDirectory)
        contents[name] = isDirectory.boolValue ? Data() : try Data(contentsOf: URL(fileURLWithPath: path + "/" + name))
    }
    return contents
}
