import Foundation
import Keysmith
import KeysmithCrypto
import KeysmithSystem
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

    @Test("one damaged header copy is reported, the vault opens and reads every record, and the upgrade writes both copies")
    func headerCopyHeals() throws {
        let vault = try SmallVault(format1: "a")
        try Data("garbage".utf8).write(to: URL(fileURLWithPath: vault.path + "/header"))
        let opened = try FileVault.open(at: vault.path, credential: SmallVault.credential, anchorDirectory: nil)
        #expect(try opened.verify().map(\.file) == ["header"])
        for (key, secret) in vault.expected { #expect(try opened.read(key)?.secret == secret) }
        #expect(try FileVault.upgrade(at: vault.path, credential: SmallVault.credential, scrypt: .testing))
        let upgraded = try FileVault.open(at: vault.path, credential: SmallVault.credential, anchorDirectory: nil)
        #expect(try upgraded.verify().isEmpty)
        #expect(try Data(contentsOf: URL(fileURLWithPath: vault.path + "/header"))
            == Data(contentsOf: URL(fileURLWithPath: vault.path + "/header.backup")))
        for (key, secret) in vault.expected { #expect(try upgraded.read(key)?.secret == secret) }
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

    @Test("a damaged record: a write is refused; the repair upgrades to format 2 with every other record, names the loss and deletes nothing")
    func repairUpgradesKeepingWhatAuthenticates() throws {
        let vault = try SmallVault(format1: "a")
        let log = vault.path + "/log/0000000000000004"
        var bytes = try Data(contentsOf: URL(fileURLWithPath: log))
        bytes[bytes.count - 60] ^= 1  // inside log1's ciphertext or tag
        try bytes.write(to: URL(fileURLWithPath: log))
        let opened = try FileVault.open(at: vault.path, credential: SmallVault.credential, anchorDirectory: nil)
        let error = #expect(throws: KeysmithError.self) { try opened.read(genericKey("log1")) }
        #expect(error?.message.contains("log/0000000000000004") == true)
        #expect(error?.message.contains("secret-log-1") == false)
        #expect(error?.message.contains("keysmith vault repair") == true)
        let refused = #expect(throws: KeysmithError.self) {
            try opened.upsert(ItemAttributes(key: genericKey("log1")), secret: Data("fresh".utf8))
        }
        #expect(refused?.code == .invalidArgument)
        // An upgrade refuses the damage; the instance repair points at the format 1 one.
        #expect(throws: KeysmithError.self) { try FileVault.upgrade(at: vault.path, credential: SmallVault.credential, scrypt: .testing) }
        #expect(throws: KeysmithError.self) { try opened.repair(dryRun: true) }

        // A dry run reports and changes no byte.
        let untouched = try snapshotOfFiles(vault.path)
        let preview = try FileVault.repairFormat1(at: vault.path, credential: SmallVault.credential, scrypt: .testing, dryRun: true)
        #expect(try snapshotOfFiles(vault.path) == untouched)
        #expect(preview.needed && preview.dryRun && preview.movedAside == nil)
        #expect(preview.itemsKept == 3)  // snap1, snap2, web: log1 is the damaged one
        #expect(preview.losses.map(\.file) == ["log/0000000000000004"])
        #expect(preview.losses.first?.sequence == 4)
        #expect(preview.unreadableRecords.count == 1)
        #expect(preview.absentItemsMayBeLost)

        let report = try FileVault.repairFormat1(at: vault.path, credential: SmallVault.credential, scrypt: .testing)
        #expect(report.needed && !report.dryRun)
        #expect(report.itemsKept == 3 && report.losses == preview.losses && report.unreadableRecords == preview.unreadableRecords)
        #expect(report.sequence == 6)
        let aside = try #require(report.movedAside)
        // Every format 1 file is kept aside, byte for byte.
        for (name, data) in untouched where name != "lock" && name != "log" {
            #expect(try Data(contentsOf: URL(fileURLWithPath: vault.path + "/" + aside + "/" + name)) == data, "\(name)")
        }
        let repaired = try FileVault.open(at: vault.path, credential: SmallVault.credential, anchorDirectory: nil)
        #expect(repaired.formatVersion == 2)
        #expect(try repaired.verify().isEmpty)
        #expect(try repaired.sequence == 6)
        for (key, secret) in vault.expected where key != genericKey("log1") { #expect(try repaired.read(key)?.secret == secret) }
        #expect(try repaired.read(genericKey("log1")) == nil)
        try repaired.upsert(ItemAttributes(key: genericKey("log1")), secret: Data("fresh".utf8))
        #expect(try repaired.read(genericKey("log1"))?.secret == Data("fresh".utf8))
        #expect(!FileManager.default.fileExists(atPath: vault.path + "/log") && !FileManager.default.fileExists(atPath: vault.path + "/snapshot"))
        // Nothing left to repair, and a format 2 vault is not the format 1 repair's.
        let again = #expect(throws: KeysmithError.self) { try FileVault.repairFormat1(at: vault.path, credential: SmallVault.credential) }
        #expect(again?.code == .invalidArgument)
        #expect(try !repaired.repair(dryRun: true).needed)
    }

    @Test("an intact format 1 vault needs no repair (the upgrade converts it), and a lost log makes older items possibly stale")
    func repairFormat1Reports() throws {
        let intact = try SmallVault(format1: "a")
        #expect(try !FileVault.repairFormat1(at: intact.path, credential: SmallVault.credential, dryRun: true).needed)
        #expect(try !FileVault.repairFormat1(at: intact.path, credential: SmallVault.credential).needed)
        #expect(try FileVault.open(at: intact.path, credential: SmallVault.credential).formatVersion == 1)

        // Log 4's header from another vault: which records it changed cannot be told.
        let vault = try SmallVault(format1: "a"), other = try SmallVault(format1: "b")
        try FileManager.default.removeItem(atPath: vault.path + "/log/0000000000000004")
        try FileManager.default.copyItem(atPath: other.path + "/log/0000000000000004", toPath: vault.path + "/log/0000000000000004")
        let report = try FileVault.repairFormat1(at: vault.path, credential: SmallVault.credential, scrypt: .testing)
        #expect(report.losses.map(\.file) == ["log/0000000000000004"])
        #expect(report.absentItemsMayBeLost)
        // snap1 (commit 1) is older than the lost commit: kept, and named as possibly stale.
        #expect(report.itemsMaybeStale.contains(genericKey("snap1")))
        let repaired = try FileVault.open(at: vault.path, credential: SmallVault.credential, anchorDirectory: nil)
        #expect(try repaired.read(genericKey("snap1"))?.secret == Data("secret-snap-1".utf8))
        #expect(try repaired.read(genericKey("log1")) == nil)
        #expect(try repaired.verify().isEmpty)
    }

    @Test("the repair of a format 1 vault never follows a symbolic link out of the vault: a linked snapshot or log directory is moved aside as the link")
    func repairFormat1NeverFollowsLinks() throws {
        for linked in ["snapshot", "log"] {
            let vault = try SmallVault(format1: "a")
            let outside = vault.directory.sub("outside-" + linked)
            try FileManager.default.moveItem(atPath: vault.path + "/" + linked, toPath: outside)
            try FileManager.default.createSymbolicLink(atPath: vault.path + "/" + linked, withDestinationPath: outside)
            let before = try snapshotOfFiles(outside)
            let report = try FileVault.repairFormat1(at: vault.path, credential: SmallVault.credential, scrypt: .testing)
            #expect(try snapshotOfFiles(outside) == before, "\(linked): what the link points to changed")
            #expect(report.needed && report.absentItemsMayBeLost, "\(linked)")
            #expect(report.losses.map(\.file) == [linked], "\(linked): \(report.losses)")
            let aside = try #require(report.movedAside)
            #expect(try FileManager.default.destinationOfSymbolicLink(atPath: vault.path + "/" + aside + "/" + linked) == outside, "\(linked)")
            #expect(!System.entryExists(vault.path + "/" + linked), "\(linked)")
            let repaired = try FileVault.open(at: vault.path, credential: SmallVault.credential, anchorDirectory: nil)
            #expect(try repaired.verify().isEmpty, "\(linked)")
            // What the other files held is kept: the logs without the snapshot (read from the
            // lowest log present), the snapshot without the logs; every item may be stale.
            let kept: [String: String] = linked == "snapshot"
                ? ["log1": "secret-log-1", "snap2": "secret-snap-2b"]
                : ["snap1": "secret-snap-1", "snap2": "secret-snap-2", "deleted": "secret-deleted"]
            for (name, secret) in kept { #expect(try repaired.read(genericKey(name))?.secret == Data(secret.utf8), "\(linked): \(name)") }
            let items = try repaired.search(ItemQuery()).map(\.key)
            #expect(Set(report.itemsMaybeStale) == Set(items), "\(linked): \(report.itemsMaybeStale)")
            #expect(report.itemsKept == items.count, "\(linked)")
        }
    }

    @Test("the repair keeps every record that authenticates: one damaged only in its trailer, and the older version of one whose newer version is damaged")
    func repairFormat1KeepsWhatAuthenticates() throws {
        // The last byte of log 4 is the trailer's checksum of log1's frame: the record itself verifies.
        let trailer = try SmallVault(format1: "a")
        let log4 = trailer.path + "/log/0000000000000004"
        var bytes = try Data(contentsOf: URL(fileURLWithPath: log4))
        bytes[bytes.count - 1] ^= 1
        try bytes.write(to: URL(fileURLWithPath: log4))
        let kept = try FileVault.repairFormat1(at: trailer.path, credential: SmallVault.credential, scrypt: .testing)
        #expect(kept.needed && kept.itemsKept == 4 && kept.unreadableRecords.isEmpty, "\(kept)")
        #expect(kept.losses.map(\.file) == ["log/0000000000000004"] && kept.losses.allSatisfy(\.complete), "\(kept.losses)")
        let readTrailer = try FileVault.open(at: trailer.path, credential: SmallVault.credential, anchorDirectory: nil)
        for (key, secret) in trailer.expected { #expect(try readTrailer.read(key)?.secret == secret, "\(key)") }

        // Log 5 updates snap2; its record there fails: the snapshot's version is kept, named as possibly stale.
        let older = try SmallVault(format1: "a")
        let log5 = older.path + "/log/0000000000000005"
        var log5Bytes = try Data(contentsOf: URL(fileURLWithPath: log5))
        let snap2 = try format1RecordID(older.path, genericKey("snap2"))
        let frame = try #require(FrameFile.parseFrames(Array(log5Bytes)).frames.first { $0.frame.recordID == snap2 })
        log5Bytes[frame.offset + Format1.frameHeaderSize] ^= 1  // the first byte of its ciphertext
        try log5Bytes.write(to: URL(fileURLWithPath: log5))
        let report = try FileVault.repairFormat1(at: older.path, credential: SmallVault.credential, scrypt: .testing)
        #expect(report.itemsMaybeStale == [genericKey("snap2")], "\(report)")
        #expect(report.unreadableRecords.isEmpty, "\(report)")
        let repaired = try FileVault.open(at: older.path, credential: SmallVault.credential, anchorDirectory: nil)
        #expect(try repaired.read(genericKey("snap2"))?.secret == Data("secret-snap-2".utf8))
        for (key, secret) in older.expected where key != genericKey("snap2") { #expect(try repaired.read(key)?.secret == secret, "\(key)") }
    }

    @Test("a log after a gap: the upgrade refuses it (it used to delete it); the repair reports the missing commit and merges the logs after it")
    func repairFormat1LogAfterAGap() throws {
        let vault = try SmallVault(format1: "a")
        try FileManager.default.removeItem(atPath: vault.path + "/log/0000000000000004")
        let refused = #expect(throws: KeysmithError.self) { try FileVault.upgrade(at: vault.path, credential: SmallVault.credential, scrypt: .testing) }
        #expect(refused?.code == .corruptData)
        #expect(FileManager.default.fileExists(atPath: vault.path + "/log/0000000000000005"), "the upgrade deleted a log")
        let report = try FileVault.repairFormat1(at: vault.path, credential: SmallVault.credential, scrypt: .testing)
        #expect(report.losses.map(\.file) == ["log/0000000000000004"] && report.losses.first?.sequence == 4, "\(report.losses)")
        #expect(report.absentItemsMayBeLost)
        #expect(report.sequence == 6)
        // snap1 is older than the missing commit; what log 5 changed is kept (snap2's update, the deletion).
        #expect(report.itemsMaybeStale == [genericKey("snap1")], "\(report.itemsMaybeStale)")
        let aside = try #require(report.movedAside)
        #expect(FileManager.default.fileExists(atPath: vault.path + "/" + aside + "/log/0000000000000005"))
        let repaired = try FileVault.open(at: vault.path, credential: SmallVault.credential, anchorDirectory: nil)
        for (key, secret) in vault.expected where key != genericKey("log1") { #expect(try repaired.read(key)?.secret == secret, "\(key)") }
        #expect(try repaired.read(genericKey("log1")) == nil)
    }

    @Test("the command's repair does not need the damaged vault to open: a linked snapshot fails an open, and is repaired")
    func repairFormat1WithoutOpening() throws {
        let vault = try SmallVault(format1: "a")
        let outside = vault.directory.sub("outside")
        try FileManager.default.moveItem(atPath: vault.path + "/snapshot", toPath: outside)
        try FileManager.default.createSymbolicLink(atPath: vault.path + "/snapshot", withDestinationPath: outside)
        let error = #expect(throws: KeysmithError.self) { try FileVault.open(at: vault.path, credential: SmallVault.credential) }
        #expect(error?.code == .corruptData && error?.message.contains("keysmith vault repair") == true)
        #expect(FileVault.formatVersion(at: vault.path) == 1)
        #expect(try FileVault.repairFormat1(at: vault.path, credential: SmallVault.credential, scrypt: .testing).needed)
        #expect(FileVault.formatVersion(at: vault.path) == 2)
        #expect(FileVault.formatVersion(at: vault.directory.sub("nothing")) == nil)
    }

    @Test("a missing snapshot with logs that start after commit 1, a snapshot claiming the last commit there is, a stray log name: reported, never a crash")
    func repairFormat1OddSnapshots() throws {
        // The snapshot removed: the logs from the lowest present are kept, every item possibly stale.
        let missing = try SmallVault(format1: "a")
        try FileManager.default.removeItem(atPath: missing.path + "/snapshot")
        let report = try FileVault.repairFormat1(at: missing.path, credential: SmallVault.credential, scrypt: .testing)
        #expect(report.losses.map(\.file) == ["snapshot"] && report.absentItemsMayBeLost, "\(report)")
        #expect(report.itemsKept == 3 && Set(report.itemsMaybeStale).count == 3, "\(report)")  // log1, web, snap2

        // A snapshot whose (checksummed) header claims commit 2^64 - 1, and a stray log name
        // beyond any commit: an open refuses, the repair reports; neither traps.
        let far = try SmallVault(format1: "a")
        let snapshot = far.path + "/snapshot"
        let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: snapshot)))
        let header = try #require(FrameFile.parseHeader(bytes, kind: .snapshot))
        let frames = FrameFile.parseFrames(bytes).frames.map(\.frame)
        try Data(FrameFile.encode(kind: .snapshot, vaultID: header.vaultID, sequence: .max, frames: frames)).write(to: URL(fileURLWithPath: snapshot))
        try Data().write(to: URL(fileURLWithPath: far.path + "/log/ffffffffffffffff"))
        let refused = #expect(throws: KeysmithError.self) { try FileVault.open(at: far.path, credential: SmallVault.credential) }
        #expect(refused?.code == .corruptData)
        let farReport = try FileVault.repairFormat1(at: far.path, credential: SmallVault.credential, scrypt: .testing, dryRun: true)
        #expect(farReport.losses.map(\.file) == ["log/ffffffffffffffff", "snapshot"], "\(farReport.losses)")
        #expect(farReport.sequence == 6)
    }

    @Test("a format 2 data directory under a format 1 header put back is moved aside by the upgrade and the repair, never deleted")
    func format2DataIsNeverDeleted() throws {
        for repair in [false, true] {
            let vault = try SmallVault(format1: "a")
            let headers = try ["header", "header.backup"].map { try Data(contentsOf: URL(fileURLWithPath: vault.path + "/" + $0)) }
            #expect(try FileVault.upgrade(at: vault.path, credential: SmallVault.credential, scrypt: .testing))
            let data = try snapshotOfFiles(vault.path + "/data")
            // The old format 1 header copies put back: the format 1 reader sees an empty vault.
            for (name, bytes) in zip(["header", "header.backup"], headers) { try bytes.write(to: URL(fileURLWithPath: vault.path + "/" + name)) }
            if repair {
                try Data("garbage".utf8).write(to: URL(fileURLWithPath: vault.path + "/header.backup"))  // makes a repair needed
                #expect(try FileVault.repairFormat1(at: vault.path, credential: SmallVault.credential, scrypt: .testing).needed)
            } else {
                #expect(try FileVault.upgrade(at: vault.path, credential: SmallVault.credential, scrypt: .testing))
            }
            let asides = try FileManager.default.contentsOfDirectory(atPath: vault.path).filter { $0.hasPrefix("damaged-") }
            #expect(asides.contains { (try? snapshotOfFiles(vault.path + "/" + $0 + "/data")) == data }, "repair \(repair): the data directory is gone")
        }
    }

    @Test("the repair's dry run creates nothing, not even the lock file; a header copy that is not a regular file is moved aside before the switch")
    func repairFormat1DryRunAndOddHeaderCopy() throws {
        let vault = try SmallVault(format1: "a")
        try FileManager.default.removeItem(atPath: vault.path + "/lock")
        try FileManager.default.removeItem(atPath: vault.path + "/header.backup")
        try FileManager.default.createDirectory(atPath: vault.path + "/header.backup", withIntermediateDirectories: false)
        let before = try snapshotOfFiles(vault.path)
        let preview = try FileVault.repairFormat1(at: vault.path, credential: SmallVault.credential, scrypt: .testing, dryRun: true)
        #expect(try snapshotOfFiles(vault.path) == before)
        #expect(!System.entryExists(vault.path + "/lock"))
        #expect(preview.needed && preview.headerCopies.count == 1 && preview.losses.isEmpty, "\(preview)")
        let report = try FileVault.repairFormat1(at: vault.path, credential: SmallVault.credential, scrypt: .testing)
        let aside = try #require(report.movedAside)
        #expect(System.isRealDirectory(vault.path + "/" + aside + "/header.backup"))
        let repaired = try FileVault.open(at: vault.path, credential: SmallVault.credential, anchorDirectory: nil)
        #expect(try repaired.verify().isEmpty)
        for (key, secret) in vault.expected { #expect(try repaired.read(key)?.secret == secret, "\(key)") }
    }
}

/// The record id of `key` in the format 1 vault at `path` (a small vault's credential).
func format1RecordID(_ path: String, _ key: ItemKey) throws -> RecordID {
    let unlocked = try Format1Salvage.unlock(Paths1(root: path), credential: SmallVault.credential)
    return try #require(RecordID(SHA256.hmac(key: unlocked.idKey, RecordCodec.identity(key))))
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

// Format 1's encoding, as Keysmith wrote it until format 1 became read-only: kept here so the
// tamper tests can forge a file whose checksums hold (docs/format.md, "Format version 1").
extension Frame {
    func encode(into writer: inout ByteWriter) {
        let start = writer.bytes.count
        writer.append(Format1.frameMagic)
        writer.append(op.rawValue)
        writer.append(epoch)
        writer.append(version)
        writer.append(recordID.bytes)
        writer.append(nonce)
        writer.append(UInt32(ciphertext.count))
        writer.append(CRC32.checksum(writer.bytes[start...]))
        writer.append(ciphertext)
        writer.append(tag)
        let trailerStart = writer.bytes.count
        writer.append(recordID.bytes)
        writer.append(version)
        writer.append(CRC32.checksum(writer.bytes[trailerStart...]))
    }
}

extension FrameFile {
    static func encode(kind: Kind, vaultID: [UInt8], sequence: UInt64, frames: [Frame]) -> [UInt8] {
        let size = frames.reduce(Format1.fileHeaderSize) { $0 + Format1.frameHeaderSize + $1.ciphertext.count + 16 + Format1.frameTrailerSize }
        var writer = ByteWriter(capacity: size)
        writer.append(kind == .log ? Format1.logMagic : Format1.snapshotMagic)
        writer.append(vaultID)
        writer.append(sequence)
        writer.append(UInt32(frames.count))
        writer.append(CRC32.checksum(writer.bytes))
        for frame in frames { frame.encode(into: &writer) }
        return writer.bytes
    }
}
