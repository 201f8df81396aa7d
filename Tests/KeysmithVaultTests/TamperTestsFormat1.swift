import Foundation
import Keysmith
@testable import KeysmithVault
import Testing

/// A small vault with records in a snapshot and in logs, a deletion, and an internet password.
struct SmallVault {
    let directory = TemporaryDirectory()
    var path: String { directory.sub("vault") }
    static let credential = VaultCredential.key([UInt8](repeating: 0x5A, count: 32))
    /// What each key should read as: a secret, or nil for the deleted one.
    var expected: [ItemKey: Data?] = [:]

    /// A format 2 vault, made now.
    init() throws {
        let vault = try FileVault.create(at: directory.sub("vault"), credential: Self.credential, anchorDirectory: nil)
        let web = ItemKey.internetPassword(InternetPasswordKey(server: "example.com", internetProtocol: .https, account: "w"))
        try vault.create(ItemAttributes(key: genericKey("snap1")), secret: Data("secret-snap-1".utf8))
        try vault.create(ItemAttributes(key: genericKey("snap2"), label: "L"), secret: Data("secret-snap-2".utf8))
        try vault.create(ItemAttributes(key: genericKey("deleted")), secret: Data("secret-deleted".utf8))
        try vault.compact()
        try vault.create(ItemAttributes(key: genericKey("log1")), secret: Data("secret-log-1".utf8))
        try vault.perform([
            .create(ItemAttributes(key: web), secret: Data("secret-web".utf8)),
            .update(ItemAttributes(key: genericKey("snap2")), secret: Data("secret-snap-2b".utf8)),
            .delete(genericKey("deleted")),
        ])
        expected = Self.contents
    }

    /// A copy of one of the committed format 1 vaults with the same contents (Keys/format1-small-a
    /// and -b: Keysmith no longer writes format 1), each with its own vault id and keys.
    init(format1 name: String) throws {
        try copyFormat1Fixture("format1-small-" + name, to: directory.sub("vault"))
        expected = Self.contents
    }

    /// What each key reads as, in every small vault.
    static var contents: [ItemKey: Data?] {
        let web = ItemKey.internetPassword(InternetPasswordKey(server: "example.com", internetProtocol: .https, account: "w"))
        return [
            genericKey("snap1"): Data("secret-snap-1".utf8), genericKey("snap2"): Data("secret-snap-2b".utf8),
            genericKey("log1"): Data("secret-log-1".utf8), web: Data("secret-web".utf8), genericKey("deleted"): nil,
        ]
    }

    func copy(to destination: String) throws {
        try? FileManager.default.removeItem(atPath: destination)
        try FileManager.default.copyItem(atPath: path, toPath: destination)
    }

    /// Opens a damaged copy and checks the promises: open fails only with a Keysmith error;
    /// every read gives the right answer or a corrupt-data error, never a wrong secret and
    /// never a crash; damage is reported. Returns how many records stayed readable.
    func checkDamagedCopy(_ copy: String, context: String) throws -> (readable: Int, reported: Bool) {
        let vault: FileVault
        do {
            vault = try FileVault.open(at: copy, credential: Self.credential, anchorDirectory: nil)
        } catch let error as KeysmithError {
            #expect([.corruptData, .authenticationFailed].contains(error.code), "\(context): \(error)")
            return (0, true)
        }
        var readable = 0
        var sawError = false
        for (key, secret) in expected {
            do {
                let record = try vault.read(key)
                #expect(record?.secret == secret, "\(context): \(key) read a wrong value")
                if record?.secret == secret { readable += 1 }
            } catch let error as KeysmithError {
                #expect(error.code == .corruptData, "\(context): \(error)")
                sawError = true
            }
        }
        let damage = try vault.verify()
        #expect(!sawError || !damage.isEmpty, "\(context): reads failed but verify found nothing")
        return (readable, !damage.isEmpty)
    }
}

@Suite("file vault, format 1: tampering and damage")
struct TamperTestsFormat1 {
    @Test("flipping any single byte of any file is detected, never yields a wrong secret, and spares the other records")
    func everyByteFlip() throws {
        let vault = try SmallVault(format1: "a")
        let scratch = vault.directory.sub("scratch")
        var flips = 0
        var undetected: [String] = []
        for name in try files(in: vault.path) where name != "lock" {
            let original = try Data(contentsOf: URL(fileURLWithPath: vault.path + "/" + name))
            for offset in 0..<original.count {
                try vault.copy(to: scratch)
                var damaged = original
                damaged[offset] ^= 0x5A
                try damaged.write(to: URL(fileURLWithPath: scratch + "/" + name))
                let result = try vault.checkDamagedCopy(scratch, context: "\(name) byte \(offset)")
                if !result.reported { undetected.append("\(name)@\(offset)") }
                // At most the one record the byte belonged to is lost (two for a batch-level field).
                if !name.hasPrefix("header") {
                    #expect(result.readable >= vault.expected.count - 2, "\(name) byte \(offset): \(result.readable) readable")
                }
                flips += 1
            }
        }
        #expect(flips > 1000)
        #expect(undetected.isEmpty, "flips nobody noticed: \(undetected.prefix(10))")
    }

    @Test("truncating any file at any length is detected and never yields a wrong secret")
    func everyTruncation() throws {
        let vault = try SmallVault(format1: "a")
        let scratch = vault.directory.sub("scratch")
        for name in try files(in: vault.path) where name != "lock" {
            let original = try Data(contentsOf: URL(fileURLWithPath: vault.path + "/" + name))
            for length in 0..<original.count {
                try vault.copy(to: scratch)
                try original.prefix(length).write(to: URL(fileURLWithPath: scratch + "/" + name))
                let result = try vault.checkDamagedCopy(scratch, context: "\(name) cut to \(length)")
                #expect(result.reported, "\(name) cut to \(length) went unnoticed")
            }
        }
    }

    @Test("a wrong passphrase is told apart from a damaged header")
    func wrongPassphraseVersusDamage() throws {
        let vault = try SmallVault(format1: "a")
        let wrong = #expect(throws: KeysmithError.self) { try FileVault.open(at: vault.path, credential: .key([UInt8](repeating: 1, count: 32))) }
        #expect(wrong?.code == .authenticationFailed)
        // Both header copies damaged: corrupt, not "wrong passphrase".
        for name in ["header", "header.backup"] {
            var bytes = try Data(contentsOf: URL(fileURLWithPath: vault.path + "/" + name))
            bytes[40] ^= 1
            try bytes.write(to: URL(fileURLWithPath: vault.path + "/" + name))
        }
        let damaged = #expect(throws: KeysmithError.self) { try FileVault.open(at: vault.path, credential: SmallVault.credential, anchorDirectory: nil) }
        #expect(damaged?.code == .corruptData)
        #expect(damaged?.message.contains("header") == true)
    }

    @Test("one damaged header copy is reported, the vault opens, and the next write heals it")
    func headerCopyHeals() throws {
        let vault = try SmallVault(format1: "a")
        try Data("garbage".utf8).write(to: URL(fileURLWithPath: vault.path + "/header"))
        let opened = try FileVault.open(at: vault.path, credential: SmallVault.credential, anchorDirectory: nil)
        #expect(try opened.verify().map(\.file) == ["header"])
        try opened.create(ItemAttributes(key: genericKey("new")), secret: Data("n".utf8))
        #expect(try opened.verify().isEmpty)
        #expect(try Data(contentsOf: URL(fileURLWithPath: vault.path + "/header"))
            == Data(contentsOf: URL(fileURLWithPath: vault.path + "/header.backup")))
    }

    @Test("a record file swapped in from another vault is reported and never read as this vault's")
    func swapBetweenVaults() throws {
        let a = try SmallVault(format1: "a")
        let b = try SmallVault(format1: "b")  // same keys, same passphrase, different vault id and keys
        // Log 4 of each holds "log1" (logs 1-3 went into the snapshot); put B's in A.
        try FileManager.default.removeItem(atPath: a.path + "/log/0000000000000004")
        try FileManager.default.copyItem(atPath: b.path + "/log/0000000000000004", toPath: a.path + "/log/0000000000000004")
        let vault = try FileVault.open(at: a.path, credential: SmallVault.credential)
        let error = #expect(throws: KeysmithError.self) { try vault.read(genericKey("log1")) }
        #expect(error?.code == .corruptData)
        #expect(error?.message.contains("another vault") == true)
        // What log 4 held is lost, so older records are uncertain; a newer one reads fine.
        #expect(throws: KeysmithError.self) { try vault.read(genericKey("snap1")) }
        #expect(try vault.read(genericKey("snap2"))?.secret == Data("secret-snap-2b".utf8))
        #expect(try vault.verify().contains { $0.reason.contains("another vault") })
    }

    @Test("log files renamed or swapped within a vault are reported for the records they hold")
    func swapWithinVault() throws {
        let vault = try SmallVault(format1: "a")
        let log2 = vault.path + "/log/0000000000000004", log3 = vault.path + "/log/0000000000000005"
        try FileManager.default.moveItem(atPath: log2, toPath: vault.path + "/tmp")
        try FileManager.default.moveItem(atPath: log3, toPath: log2)
        try FileManager.default.moveItem(atPath: vault.path + "/tmp", toPath: log3)
        let opened = try FileVault.open(at: vault.path, credential: SmallVault.credential, anchorDirectory: nil)
        let error = #expect(throws: KeysmithError.self) { try opened.read(genericKey("log1")) }
        #expect(error?.code == .corruptData)
        #expect(error?.message.contains("log1") == true)
        #expect(try opened.read(genericKey("snap1"))?.secret == Data("secret-snap-1".utf8))
    }

    @Test("a format 1 vault is scanned a chunk at a time too: every match once, at most the chunk size per call")
    func scanInChunks() throws {
        let directory = TemporaryDirectory()
        // Keys/format1-scan: k0…k9 in service svc and x in service other, one commit.
        try copyFormat1Fixture("format1-scan", to: directory.sub("vault"))
        let vault = try FileVault.open(at: directory.sub("vault"), credential: testKey)
        var calls = 0
        var seen: [String: Data] = [:]
        try vault.forEachRecord(matching: ItemQuery(service: "svc"), chunkSize: 3) { records, _ in
            calls += 1
            #expect(records.count <= 3)
            for record in records {
                #expect(seen[record.key.account] == nil)
                seen[record.key.account] = record.secret
            }
        }
        #expect(calls == 4)
        #expect(seen.count == 10 && seen["k7"] == Data("s7".utf8))
    }

    @Test("records renamed inside a file (ids swapped, checksums fixed) fail authentication, each named")
    func renameRecordId() throws {
        let directory = TemporaryDirectory()
        // Keys/format1-three: one, two and three written one commit each, then compacted.
        let root = directory.sub("vault")
        try copyFormat1Fixture("format1-three", to: root)
        let path = root + "/snapshot"
        let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: path)))
        let parsed = FrameFile.parseFrames(bytes)
        #expect(parsed.damage.isEmpty)
        var frames = parsed.frames.map(\.frame)
        #expect(frames.count == 3)
        let first = frames[0].recordID
        frames[0].recordID = frames[1].recordID
        frames[1].recordID = first
        let header = try #require(FrameFile.parseHeader(bytes, kind: .snapshot))
        let rewritten = FrameFile.encode(kind: .snapshot, vaultID: header.vaultID, sequence: header.sequence, frames: frames)
        try Data(rewritten).write(to: URL(fileURLWithPath: path))

        let opened = try FileVault.open(at: root, credential: testKey)
        #expect(try opened.verify().filter { $0.reason.contains("failed authentication") }.count == 2)
        var failed = 0, intact = 0
        for name in ["one", "two", "three"] {
            do {
                #expect(try opened.read(genericKey(name))?.secret == Data("secret-\(name)".utf8))
                intact += 1
            } catch let error as KeysmithError {
                #expect(error.code == .corruptData)
                #expect(error.message.contains("\"\(name)\""))
                failed += 1
            }
        }
        #expect(failed == 2)
        #expect(intact == 1)
    }

    @Test("a header from another vault is a clear error, not a wrong secret")
    func foreignHeader() throws {
        let a = try SmallVault(format1: "a")
        let b = try SmallVault(format1: "b")
        for name in ["header", "header.backup"] {
            try FileManager.default.removeItem(atPath: a.path + "/" + name)
            try FileManager.default.copyItem(atPath: b.path + "/" + name, toPath: a.path + "/" + name)
        }
        let error = #expect(throws: KeysmithError.self) { try FileVault.open(at: a.path, credential: SmallVault.credential) }
        #expect(error?.code == .corruptData)
        #expect(error?.message.contains("another vault") == true)
    }

    @Test("a damaged record is repaired by writing it again")
    func repairByWriting() throws {
        let vault = try SmallVault(format1: "a")
        let log = vault.path + "/log/0000000000000004"
        var bytes = try Data(contentsOf: URL(fileURLWithPath: log))
        bytes[bytes.count - 60] ^= 1  // inside log1's ciphertext or tag
        try bytes.write(to: URL(fileURLWithPath: log))
        let opened = try FileVault.open(at: vault.path, credential: SmallVault.credential, anchorDirectory: nil)
        let error = #expect(throws: KeysmithError.self) { try opened.read(genericKey("log1")) }
        #expect(error?.message.contains("log/0000000000000004") == true)
        #expect(error?.message.contains("secret-log-1") == false)
        try opened.upsert(ItemAttributes(key: genericKey("log1")), secret: Data("fresh".utf8))
        #expect(try opened.read(genericKey("log1"))?.secret == Data("fresh".utf8))
    }
}

/// Copies the committed format 1 vault `Keys/<name>` to `destination`, with the empty log
/// directory git cannot keep.
func copyFormat1Fixture(_ name: String, to destination: String) throws {
    try FileManager.default.copyItem(atPath: Golden.keysDirectory + "/" + name, toPath: destination)
    try FileManager.default.createDirectory(atPath: destination + "/log", withIntermediateDirectories: true)
    try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: destination)
    for file in try FileManager.default.subpathsOfDirectory(atPath: destination) {
        var isDirectory: ObjCBool = false
        _ = FileManager.default.fileExists(atPath: destination + "/" + file, isDirectory: &isDirectory)
        try FileManager.default.setAttributes([.posixPermissions: isDirectory.boolValue ? 0o700 : 0o600], ofItemAtPath: destination + "/" + file)
    }
}
