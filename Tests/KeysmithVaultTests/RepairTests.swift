import Foundation
import Keysmith
import KeysmithCrypto
@testable import KeysmithVault
import Testing

/// A vault with a snapshot and logs after it, for the repair's damage matrix:
/// commit 1 keep=k1, 2 a=a1, 3 b=b1 (compacted into the snapshot through 3), then
/// log 4 a=a2, log 5 c=c1, log 6 deletes b, log 7 d=d1.
struct RepairVault {
    let directory = TemporaryDirectory()
    var pristine: String { directory.sub("pristine") }
    static let credential = VaultCredential.key([UInt8](repeating: 0x51, count: 32))
    /// Every value each item ever had, oldest first; `nil` is "deleted".
    static let history: [String: [String?]] = ["keep": ["k1"], "a": ["a1", "a2"], "b": ["b1", nil], "c": ["c1"], "d": ["d1"]]

    init() throws {
        let vault = try FileVault.create(at: directory.sub("pristine"), credential: Self.credential, anchorDirectory: nil)
        try vault.upsert(ItemAttributes(key: genericKey("keep")), secret: Data("k1".utf8))
        try vault.upsert(ItemAttributes(key: genericKey("a")), secret: Data("a1".utf8))
        try vault.upsert(ItemAttributes(key: genericKey("b")), secret: Data("b1".utf8))
        try vault.compact()
        try vault.upsert(ItemAttributes(key: genericKey("a")), secret: Data("a2".utf8))
        try vault.upsert(ItemAttributes(key: genericKey("c")), secret: Data("c1".utf8))
        try vault.delete(genericKey("b"))
        try vault.upsert(ItemAttributes(key: genericKey("d")), secret: Data("d1".utf8))
    }

    /// A fresh copy of the intact vault, with its own anchor directory (which has seen commit 7).
    func copy(_ name: String) throws -> (path: String, anchors: String) {
        let path = directory.sub(name), anchors = directory.sub(name + "-anchors")
        try FileManager.default.copyItem(atPath: pristine, toPath: path)
        _ = try FileVault.open(at: path, credential: Self.credential, anchorDirectory: anchors)
        return (path, anchors)
    }

    /// The bytes of every file under `path`, by relative name.
    static func tree(_ path: String) throws -> [String: Data] {
        var result: [String: Data] = [:]
        for name in try files(in: path) { result[name] = FileManager.default.contents(atPath: path + "/" + name) ?? Data() }
        return result
    }

    /// What a repaired vault must show: every item its newest value, unless the report names it
    /// as possibly out of date (then one of its own earlier values) or items may be lost (then
    /// possibly absent); never a value it never had; never an error.
    static func expectConsistent(_ vault: FileVault, _ report: VaultRepairReport, _ context: String) throws {
        let stale = Set(report.itemsMaybeStale)
        for (account, values) in history {
            let read: String?
            do {
                read = try vault.read(genericKey(account)).map { String(decoding: $0.secret, as: UTF8.self) }
            } catch {
                Issue.record("\(context): \(account) does not read after the repair: \(error)")
                continue
            }
            let newest = values.last!
            if read == newest { continue }
            if read == nil {
                #expect(report.absentItemsMayBeLost || stale.contains(genericKey(account)),
                        "\(context): \(account) is gone but the report does not say items may be lost")
            } else {
                #expect(stale.contains(genericKey(account)), "\(context): \(account) reads \(read!) (not its newest) but is not reported")
                #expect(values.contains(read), "\(context): \(account) reads \(read!), a value it never had")
            }
        }
    }
}

@Suite("file vault, format 2: repair")
struct RepairTests {
    /// One damage class on a fresh copy: damage, dry run (changes nothing), repair, checks.
    func check(_ fixture: RepairVault, _ name: String, expectLoss: Bool = true, acceptRollback: Bool = false,
               damage: (String) throws -> Void) throws {
        let (path, anchors) = try fixture.copy(name)
        try damage(path)
        let damaged = try RepairVault.tree(path)
        let vault = try FileVault.open(at: path, credential: RepairVault.credential, anchorDirectory: anchors)
        if acceptRollback {
            // Damage that removes the newest commits looks like a rollback to the anchor: the
            // repair refuses it until the owner accepts it (`vault verify --accept-rollback`).
            let before = try RepairVault.tree(path)
            #expect(throws: KeysmithError.self) { try vault.repair() }
            #expect(try RepairVault.tree(path) == before, "\(name): a refused repair changed files")
            try vault.acceptRollback()
        }
        let preview = try vault.repair(dryRun: true)
        #expect(preview.needed, "\(name): a dry run finds nothing to repair")
        #expect(preview.dryRun && preview.movedAside == nil)
        #expect(try RepairVault.tree(path) == damaged, "\(name): the dry run changed files")
        let report = try vault.repair()
        #expect(report.needed && !report.dryRun)
        #expect(report.losses == preview.losses && report.itemsMaybeStale == preview.itemsMaybeStale
                    && report.itemsKept == preview.itemsKept && report.sequence == preview.sequence,
                "\(name): the dry run's report differs from the repair's")
        if expectLoss { #expect(!report.losses.isEmpty || !report.unreadableRecords.isEmpty, "\(name): nothing reported lost") }
        // Nothing deleted: every damaged file is kept, byte for byte, in the directory named.
        let aside = try #require(report.movedAside)
        #expect(aside.hasPrefix("damaged-"))
        let kept = try RepairVault.tree(path + "/" + aside)
        for (file, bytes) in damaged where file.hasPrefix("data/") && !file.contains(".tmp-") {
            let name = String(file.dropFirst("data/".count))
            #expect(kept[name] == bytes, "\(name): \(file) is not kept as it was in \(aside)")
        }
        // The vault is intact: for this handle, a new one, and a new one under the same anchor.
        let afterRepair = try vault.verify()
        #expect(afterRepair.isEmpty, "\(name): \(afterRepair)")
        try RepairVault.expectConsistent(vault, report, name)
        let reopened = try FileVault.open(at: path, credential: RepairVault.credential, anchorDirectory: anchors)
        let afterReopen = try reopened.verify()
        #expect(afterReopen.isEmpty, "\(name) reopened: \(afterReopen)")
        try RepairVault.expectConsistent(reopened, report, name + " reopened")
        #expect(try reopened.sequence == report.sequence)
        #expect(try reopened.search(ItemQuery()).count == report.itemsKept)
        // Writes, listings, compaction and rekey work again; a second repair finds nothing.
        try reopened.upsert(ItemAttributes(key: genericKey("after")), secret: Data("x".utf8))
        try reopened.compact()
        try reopened.rekey()
        #expect(try reopened.read(genericKey("after"))?.secret == Data("x".utf8))
        #expect(try reopened.repair().needed == false)
        #expect(try FileVault.open(at: path, credential: RepairVault.credential, anchorDirectory: anchors).verify().isEmpty)
    }

    @Test("every byte of a log's header, table and commit MAC damaged: the repair keeps what authenticates and names what may be lost")
    func logStructureBytes() throws {
        let fixture = try RepairVault()
        let log = "/data/log/0000000000000005"
        let size = Format.logHeaderSize + Format.tableEntrySize + Format.macSize
        let table = Format.logHeaderSize..<(Format.logHeaderSize + Format.tableEntrySize)
        for offset in 0..<size {
            // A byte of the table leaves the commit unproven (a commit missing a record, or a
            // fork's, looks the same): its records and the logs after it are not kept, and the
            // anchor, which saw commit 7, refuses the repair until the rollback is accepted.
            // Header fields and the stored MAC are proven (the values put back, the next link).
            try check(fixture, "log-byte-\(offset)", acceptRollback: table.contains(offset)) { path in
                var bytes = try #require(FileManager.default.contents(atPath: path + log))
                bytes[offset] ^= 0x20
                try bytes.write(to: URL(fileURLWithPath: path + log))
            }
        }
    }

    @Test("a damaged record in a log: an older version is kept and named as possibly out of date")
    func damagedRecordFallsBack() throws {
        let fixture = try RepairVault()
        var reportSeen: VaultRepairReport?
        try check(fixture, "record") { path in
            let log = path + "/data/log/0000000000000004"
            var bytes = try #require(FileManager.default.contents(atPath: log))
            bytes[bytes.count - 1] ^= 1
            try bytes.write(to: URL(fileURLWithPath: log))
        }
        // The same damage, looked at closely.
        let (path, anchors) = try fixture.copy("record-detail")
        let log = path + "/data/log/0000000000000004"
        var bytes = try #require(FileManager.default.contents(atPath: log))
        bytes[bytes.count - 1] ^= 1
        try bytes.write(to: URL(fileURLWithPath: log))
        let vault = try FileVault.open(at: path, credential: RepairVault.credential, anchorDirectory: anchors)
        reportSeen = try vault.repair()
        let report = try #require(reportSeen)
        #expect(try vault.read(genericKey("a"))?.secret == Data("a1".utf8))
        #expect(report.itemsMaybeStale.contains(genericKey("a")))
        #expect(report.losses.map(\.sequence) == [4])
        #expect(try vault.read(genericKey("d"))?.secret == Data("d1".utf8))
        #expect(try vault.read(genericKey("b")) == nil)
    }

    @Test("the snapshot's header, directory and index pages damaged, the snapshot removed, a log removed or from another vault")
    func structuralDamage() throws {
        let fixture = try RepairVault()
        let snapshot = "/data/snapshot"
        for offset in [0, 9, 30, 40, 50, 60, 83, 84, 100, 116 + 64 + 32 - 1, 116 + 64 + 32, 116 + 64 + 40, 116 + 64 + 100] {
            try check(fixture, "snapshot-byte-\(offset)") { path in
                var bytes = try #require(FileManager.default.contents(atPath: path + snapshot))
                bytes[offset] ^= 0x20
                try bytes.write(to: URL(fileURLWithPath: path + snapshot))
            }
        }
        try check(fixture, "snapshot-removed") { path in try FileManager.default.removeItem(atPath: path + snapshot) }
        try check(fixture, "snapshot-fifo") { path in
            try FileManager.default.removeItem(atPath: path + snapshot)
            #expect(mkfifo(path + snapshot, 0o600) == 0)
        }
        try check(fixture, "middle-log-removed", acceptRollback: true) { path in try FileManager.default.removeItem(atPath: path + "/data/log/0000000000000005") }
        try check(fixture, "log-directory-removed", acceptRollback: true) { path in try FileManager.default.removeItem(atPath: path + "/data/log") }
        try check(fixture, "foreign-log", acceptRollback: true) { path in
            let other = fixture.directory.sub("other")
            let foreign = try FileVault.create(at: other, credential: RepairVault.credential, anchorDirectory: nil)
            for index in 0..<5 { try foreign.upsert(ItemAttributes(key: genericKey("f\(index)")), secret: Data("f".utf8)) }
            try FileManager.default.removeItem(atPath: path + "/data/log/0000000000000005")
            try FileManager.default.copyItem(atPath: other + "/data/log/0000000000000005", toPath: path + "/data/log/0000000000000005")
            try FileManager.default.removeItem(atPath: other)
        }
        try check(fixture, "planted-last-log-number") { path in
            try Data("junk".utf8).write(to: URL(fileURLWithPath: path + "/data/log/3fffffffffffffff"))
        }
        try check(fixture, "header-copy", expectLoss: false) { path in
            var bytes = try #require(FileManager.default.contents(atPath: path + "/header.backup"))
            bytes[10] ^= 0x20
            try bytes.write(to: URL(fileURLWithPath: path + "/header.backup"))
        }
    }

    @Test("a missing middle log: the logs after it cannot be linked to the history and are not kept; what may be stale is named, and items possibly lost are said to be")
    func missingLogReport() throws {
        let fixture = try RepairVault()
        let (path, anchors) = try fixture.copy("missing")
        try FileManager.default.removeItem(atPath: path + "/data/log/0000000000000005")
        let vault = try FileVault.open(at: path, credential: RepairVault.credential, anchorDirectory: anchors)
        #expect(throws: KeysmithError.self) { try vault.read(genericKey("keep")) }
        // This machine saw commit 7, which cannot be linked any more: refused until accepted.
        #expect(throws: KeysmithError.self) { try vault.repair() }
        try vault.acceptRollback()
        let report = try vault.repair()
        // Log 5 is missing; 6 and 7 follow a gap: an older copy's logs would look the same.
        #expect(report.losses.map(\.sequence) == [5, 6, 7])
        #expect(report.absentItemsMayBeLost)
        // Everything the snapshot and log 4 held is kept, each named as possibly out of date
        // (b's deletion was in log 6: b is back at its older value, and said so).
        #expect(Set(report.itemsMaybeStale) == [genericKey("keep"), genericKey("a"), genericKey("b")])
        #expect(try vault.read(genericKey("c")) == nil && vault.read(genericKey("d")) == nil)
        #expect(try vault.read(genericKey("keep"))?.secret == Data("k1".utf8))
        #expect(try vault.read(genericKey("b"))?.secret == Data("b1".utf8))
        // One past the newest commit kept (logs 6 and 7, not kept, are moved aside).
        #expect(report.sequence == 5)
        // The logs not kept are in the damaged-* directory, as they were.
        let aside = try #require(report.movedAside)
        #expect(FileManager.default.fileExists(atPath: path + "/" + aside + "/log/0000000000000007"))
    }

    @Test("an intact vault is left as it is")
    func intactVault() throws {
        let fixture = try RepairVault()
        let (path, anchors) = try fixture.copy("intact")
        let before = try RepairVault.tree(path)
        let vault = try FileVault.open(at: path, credential: RepairVault.credential, anchorDirectory: anchors)
        let report = try vault.repair()
        #expect(!report.needed && report.losses.isEmpty && report.movedAside == nil)
        #expect(try RepairVault.tree(path) == before)
    }

    @Test("a rolled-back vault is refused: accepting a rollback stays a deliberate step")
    func rollbackRefused() throws {
        let fixture = try RepairVault()
        let (path, anchors) = try fixture.copy("rolled")
        let vault = try FileVault.open(at: path, credential: RepairVault.credential, anchorDirectory: anchors)
        try vault.upsert(ItemAttributes(key: genericKey("later")), secret: Data("l".utf8))
        try FileManager.default.removeItem(atPath: path + "/data/log/0000000000000008")
        let rolled = try FileVault.open(at: path, credential: RepairVault.credential, anchorDirectory: anchors)
        let before = try RepairVault.tree(path)
        #expect(throws: KeysmithError.self) { try rolled.repair() }
        #expect(try RepairVault.tree(path) == before)
    }

    @Test("a repair killed at each of its steps leaves the damaged vault or the repaired one, and a second repair finishes")
    func killedAtEachStep() throws {
        let fixture = try RepairVault()
        var step = 1
        var sawDamaged = false, sawRepaired = false
        while true {
            let (path, anchors) = try fixture.copy("kill-\(step)")
            let log = path + "/data/log/0000000000000005"
            var bytes = try #require(FileManager.default.contents(atPath: log))
            bytes[50] ^= 0x20
            try bytes.write(to: URL(fileURLWithPath: log))
            // vault-stress takes a keyfile: the fixture's key, written as one.
            let keyfile = fixture.directory.sub("keyfile")
            try Data((String(repeating: "51", count: 32) + "\n").utf8).write(to: URL(fileURLWithPath: keyfile))
            let run = try startStress(["repair", path, keyfile],
                                      environment: ["KEYSMITH_FAULT_EXIT_AT": String(step), "KEYSMITH_ANCHOR_DIR": anchors])
            run.0.waitUntilExit()
            let finished = run.0.terminationStatus == 0
            #expect(finished || run.0.terminationStatus == 86, "step \(step): \(stressErrors(run.0))")
            let vault = try FileVault.open(at: path, credential: RepairVault.credential, anchorDirectory: anchors)
            let damage = try vault.verify()
            if damage.isEmpty { sawRepaired = true } else { sawDamaged = true }
            // Whatever the kill left, the damaged log is kept somewhere under the vault.
            let asides = try FileManager.default.contentsOfDirectory(atPath: path).filter { $0.hasPrefix("damaged-") }
            #expect(!finished || asides.count == 1, "step \(step)")
            if !damage.isEmpty {
                #expect(FileManager.default.contents(atPath: log) == bytes, "step \(step): the damaged log changed in place")
            }
            let report = try vault.repair()
            let afterRepair = try vault.verify()
            #expect(afterRepair.isEmpty, "step \(step): \(afterRepair)")
            try RepairVault.expectConsistent(vault, report, "step \(step)")
            let kept = try FileManager.default.contentsOfDirectory(atPath: path).filter { $0.hasPrefix("damaged-") }.contains { aside in
                FileManager.default.contents(atPath: path + "/" + aside + "/log/0000000000000005") == bytes
            }
            #expect(kept, "step \(step): the damaged log is not kept")
            try? FileManager.default.removeItem(atPath: path)
            if finished { break }
            step += 1
            try #require(step < 60)
        }
        print("repair fault injection: killed at each of \(step - 1) steps, then finished")
        #expect(sawDamaged && sawRepaired && step > 4)
    }
}

@Suite("file vault, format 2: repair never merges another history")
struct RepairForkTests {
    @Test("logs of an older copy that was written to are reported and their records not kept")
    func forkedLogsAreNotMerged() throws {
        let directory = TemporaryDirectory()
        let path = directory.sub("vault"), copy = directory.sub("copy")
        let vault = try FileVault.create(at: path, credential: testKey, anchorDirectory: nil)
        for account in ["p", "q", "r"] { try vault.upsert(ItemAttributes(key: genericKey(account)), secret: Data("1".utf8)) }
        try FileManager.default.copyItem(atPath: path, toPath: copy)
        try vault.upsert(ItemAttributes(key: genericKey("x")), secret: Data("v4".utf8))
        try vault.upsert(ItemAttributes(key: genericKey("y")), secret: Data("v5".utf8))
        let fork = try FileVault.open(at: copy, credential: testKey, anchorDirectory: nil)
        try fork.upsert(ItemAttributes(key: genericKey("x")), secret: Data("fork".utf8))
        try fork.upsert(ItemAttributes(key: genericKey("z")), secret: Data("fork".utf8))
        try fork.upsert(ItemAttributes(key: genericKey("w")), secret: Data("fork".utf8))
        // The fork's commit 6 beside this vault's 1…5.
        try FileManager.default.copyItem(atPath: copy + "/data/log/0000000000000006", toPath: path + "/data/log/0000000000000006")
        let damaged = try FileVault.open(at: path, credential: testKey, anchorDirectory: nil)
        let report = try damaged.repair()
        #expect(report.losses.map(\.sequence) == [6], "\(report.losses)")
        #expect(report.losses.first?.complete == false)
        #expect(try damaged.read(genericKey("w")) == nil, "a record of another history was merged")
        #expect(try damaged.read(genericKey("x"))?.secret == Data("v4".utf8))
        #expect(try damaged.read(genericKey("y"))?.secret == Data("v5".utf8))
        #expect(try damaged.verify().isEmpty)
        // The fork's commit 5 in place of this vault's: neither it nor what follows is kept.
        let second = directory.sub("second")
        try FileManager.default.copyItem(atPath: copy, toPath: second)
        try FileManager.default.removeItem(atPath: second + "/data/log/0000000000000004")
        try FileManager.default.copyItem(atPath: path + "/" + report.movedAside! + "/log/0000000000000004",
                                         toPath: second + "/data/log/0000000000000004")
        let mixed = try FileVault.open(at: second, credential: testKey, anchorDirectory: nil)
        let mixedReport = try mixed.repair()
        #expect(mixedReport.losses.map(\.sequence) == [5, 6], "\(mixedReport.losses)")
        #expect(mixedReport.absentItemsMayBeLost)
        #expect(try mixed.read(genericKey("z")) == nil && mixed.read(genericKey("w")) == nil)
        #expect(try mixed.read(genericKey("x"))?.secret == Data("v4".utf8))
    }
}
