import Foundation
import Keysmith
import KeysmithCrypto
@testable import KeysmithVault
import Testing

/// Where the records of a format 2 file start: bytes before are structure (header, table,
/// directory, index), bytes after are sealed records.
func recordsStart(of file: String) throws -> Int {
    // A snapshot's history is structure throughout.
    if file.split(separator: "/").last?.hasPrefix("history-") == true { return Int.max }
    let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: file)))
    if file.hasSuffix("/snapshot") {
        return try SnapshotFile.parseHead(Array(bytes.prefix(Format.snapshotHeaderSize)), fileSize: bytes.count).bodiesStart
    }
    let head = try LogFile.parseHead(Array(bytes.prefix(Format.logHeaderSize)), fileSize: bytes.count)
    return Format.logHeaderSize + head.count * Format.tableEntrySize + Format.macSize
}

func replace(_ path: String, with bytes: some DataProtocol) throws {
    try Data(bytes).write(to: URL(fileURLWithPath: path))
}

func logPath(_ vault: String, _ sequence: Int) -> String {
    vault + "/data/log/" + LogName.hex16(UInt64(sequence))
}

/// A vault whose history is one commit per line, for the attacks on whole files:
/// log 1 x=v1, log 2 y=y1, log 3 x=v2, log 4 z=z1, log 5 deletes y.
struct HistoryVault {
    let directory = TemporaryDirectory()
    var path: String { directory.sub("vault") }
    var anchors: String { directory.sub("anchors") }
    static let credential = VaultCredential.key([UInt8](repeating: 0x33, count: 32))

    init() throws {
        let vault = try FileVault.create(at: directory.sub("vault"), credential: Self.credential, anchorDirectory: directory.sub("anchors"))
        try vault.upsert(ItemAttributes(key: genericKey("x")), secret: Data("v1".utf8))
        try vault.upsert(ItemAttributes(key: genericKey("y")), secret: Data("y1".utf8))
        try vault.upsert(ItemAttributes(key: genericKey("x")), secret: Data("v2".utf8))
        try vault.upsert(ItemAttributes(key: genericKey("z")), secret: Data("z1".utf8))
        try vault.delete(genericKey("y"))
    }

    func open(anchored: Bool = false) throws -> FileVault {
        try FileVault.open(at: path, credential: Self.credential, anchorDirectory: anchored ? anchors : nil)
    }

    /// Every read gives the newest value or a corrupt-data error: never an older value, never
    /// "absent" for something that exists, never a deleted item back.
    func expectNoStaleRead(_ vault: FileVault, _ context: String, mustFail: [String] = []) {
        let newest: [String: String?] = ["x": "v2", "y": nil, "z": "z1"]
        for (account, value) in newest {
            do {
                let read = try vault.read(genericKey(account))?.secret
                #expect(read == value.map { Data($0.utf8) }, "\(context): \(account) read \(read.map { String(decoding: $0, as: UTF8.self) } ?? "nothing")")
                #expect(!mustFail.contains(account), "\(context): \(account) should have failed")
            } catch let error as KeysmithError {
                #expect(error.code == .corruptData, "\(context): \(error)")
            } catch {
                Issue.record("\(context): \(error)")
            }
        }
    }
}

@Suite("file vault, format 2: tampering and damage")
struct TamperTests {
    @Test("flipping any byte of any file is detected and never yields a wrong secret; in a record it costs that record only")
    func everyByteFlip() throws {
        let vault = try SmallVault()
        let scratch = vault.directory.sub("scratch")
        var flips = 0
        var undetected: [String] = []
        for name in try files(in: vault.path) where name != "lock" {
            let original = try Data(contentsOf: URL(fileURLWithPath: vault.path + "/" + name))
            let records = name.hasPrefix("data/") ? try recordsStart(of: vault.path + "/" + name) : Int.max
            for offset in 0..<original.count {
                try vault.copy(to: scratch)
                var damaged = original
                damaged[offset] ^= 0x5A
                try replace(scratch + "/" + name, with: damaged)
                let result = try vault.checkDamagedCopy(scratch, context: "\(name) byte \(offset)")
                if !result.reported { undetected.append("\(name)@\(offset)") }
                if offset >= records {
                    #expect(result.readable >= vault.expected.count - 1, "\(name) byte \(offset): \(result.readable) readable")
                }
                flips += 1
            }
        }
        #expect(flips > 1000)
        #expect(undetected.isEmpty, "flips nobody noticed: \(undetected.prefix(10))")
    }

    @Test("truncating or extending any file is detected and never yields a wrong secret")
    func everyTruncation() throws {
        let vault = try SmallVault()
        let scratch = vault.directory.sub("scratch")
        for name in try files(in: vault.path) where name != "lock" {
            let original = try Data(contentsOf: URL(fileURLWithPath: vault.path + "/" + name))
            for length in 0..<original.count {
                try vault.copy(to: scratch)
                try replace(scratch + "/" + name, with: original.prefix(length))
                let result = try vault.checkDamagedCopy(scratch, context: "\(name) cut to \(length)")
                #expect(result.reported, "\(name) cut to \(length) went unnoticed")
            }
            try vault.copy(to: scratch)
            try replace(scratch + "/" + name, with: original + Data([0]))
            #expect(try vault.checkDamagedCopy(scratch, context: "\(name) extended").reported, "\(name) extended went unnoticed")
        }
    }

    @Test("removing a log from the middle fails the reads it may have changed instead of serving older values")
    func middleLogRemoved() throws {
        let history = try HistoryVault()
        try FileManager.default.removeItem(atPath: logPath(history.path, 3))
        let vault = try history.open()
        history.expectNoStaleRead(vault, "log 3 removed", mustFail: ["x"])
        #expect(try vault.read(genericKey("z"))?.secret == Data("z1".utf8))
        #expect(try vault.verify().contains { $0.file == "data/log/0000000000000003" && $0.reason.contains("missing") })
    }

    @Test("removing, emptying or zeroing the snapshot is reported, reads fail closed, and writes are refused")
    func snapshotRemoved() throws {
        for attack in ["remove", "empty", "zeros"] {
            let history = try HistoryVault()
            try history.open().compact()
            let opened = try history.open()
            try opened.upsert(ItemAttributes(key: genericKey("w")), secret: Data("w1".utf8))
            let snapshot = history.path + "/data/snapshot"
            switch attack {
            case "remove": try FileManager.default.removeItem(atPath: snapshot)
            case "empty": try replace(snapshot, with: Data())
            default: try replace(snapshot, with: Data(count: 40))
            }
            let vault = try history.open()
            history.expectNoStaleRead(vault, attack, mustFail: ["x", "z"])
            #expect(throws: KeysmithError.self, "\(attack): an absent item must not read as absent") { try vault.read(genericKey("never")) }
            #expect(try vault.read(genericKey("w"))?.secret == Data("w1".utf8), "\(attack): the newer log still reads")
            #expect(try vault.verify().contains { $0.file == "data/snapshot" }, "\(attack)")
            let write = #expect(throws: KeysmithError.self) { try vault.upsert(ItemAttributes(key: genericKey("q")), secret: Data("1".utf8)) }
            #expect(write?.code == .corruptData)
        }
    }

    @Test("an older snapshot put back is detected: no older value served, no deleted item back")
    func olderSnapshotRestored() throws {
        let history = try HistoryVault()
        let vault = try history.open()
        try vault.compact()  // snapshot through 5: x=v2, z=z1
        let older = try Data(contentsOf: URL(fileURLWithPath: history.path + "/data/snapshot"))
        try vault.upsert(ItemAttributes(key: genericKey("x")), secret: Data("v3".utf8))
        try vault.delete(genericKey("z"))
        try vault.compact()  // snapshot through 7: x=v3
        try vault.upsert(ItemAttributes(key: genericKey("n")), secret: Data("n1".utf8))  // log 8
        try replace(history.path + "/data/snapshot", with: older)
        let attacked = try history.open()
        for account in ["x", "z"] {
            #expect(throws: KeysmithError.self, "\(account) must not read from the older snapshot") { try attacked.read(genericKey(account)) }
        }
        #expect(try attacked.read(genericKey("n"))?.secret == Data("n1".utf8))
        #expect(try attacked.verify().contains { $0.reason.contains("does not follow") || $0.reason.contains("missing") })
    }

    @Test("a frame dropped out of a batch, with the count fixed, fails the commit's authentication")
    func frameDropped() throws {
        let directory = TemporaryDirectory()
        let path = directory.sub("vault")
        let vault = try FileVault.create(at: path, credential: testKey, anchorDirectory: nil)
        try vault.upsert(ItemAttributes(key: genericKey("a")), secret: Data("a1".utf8))
        try vault.perform([.upsert(ItemAttributes(key: genericKey("a")), secret: Data("a2".utf8)),
                           .create(ItemAttributes(key: genericKey("b")), secret: Data("b1".utf8))])
        // Remove the first table entry and its body, and say the commit holds one frame.
        let log = logPath(path, 2)
        var bytes = Array(try Data(contentsOf: URL(fileURLWithPath: log)))
        let head = try LogFile.parseHead(Array(bytes.prefix(72)), fileSize: bytes.count)
        let table = LogFile.parseTable(Array(bytes[72..<(72 + 2 * 65)]), count: 2, bodiesStart: 72 + 2 * 65 + 32, fileSize: bytes.count)
        let firstBody = 72 + 2 * 65 + 32
        bytes.removeSubrange(firstBody..<(firstBody + table.entries[0].length))
        bytes.removeSubrange(72..<(72 + 65))
        bytes[39] = 1
        #expect(head.count == 2)
        try replace(log, with: bytes)
        let opened = try FileVault.open(at: path, credential: testKey, anchorDirectory: nil)
        #expect(throws: KeysmithError.self, "the old value of a must not be served") { try opened.read(genericKey("a")) }
        #expect(try opened.verify().contains { $0.reason.contains("fails authentication") })
    }

    @Test("a log overwritten with a copy of an earlier one is reported and its records fail instead of reading old")
    func logReplacedByEarlierLog() throws {
        let history = try HistoryVault()
        try FileManager.default.removeItem(atPath: logPath(history.path, 3))
        try FileManager.default.copyItem(atPath: logPath(history.path, 1), toPath: logPath(history.path, 3))
        let vault = try history.open()
        history.expectNoStaleRead(vault, "log 3 = log 1", mustFail: ["x"])
        #expect(try vault.verify().contains { $0.reason.contains("holds commit 1, not 3") })
    }

    @Test("numbers out of bounds in any file are reported, never a crash", arguments: [
        ("snapshot", 24, 8), ("snapshot", 32, 4), ("snapshot", 36, 8), ("snapshot", 44, 4), ("snapshot", 48, 4),
        ("log", 24, 8), ("log", 32, 4), ("log", 36, 4),
    ])
    func hugeNumbers(file: String, offset: Int, width: Int) throws {
        let history = try HistoryVault()
        try history.open().compact()
        try history.open().upsert(ItemAttributes(key: genericKey("after")), secret: Data("1".utf8))
        let path = file == "snapshot" ? history.path + "/data/snapshot" : logPath(history.path, 6)
        var bytes = Array(try Data(contentsOf: URL(fileURLWithPath: path)))
        for index in 0..<width { bytes[offset + index] = 0xFF }
        try replace(path, with: bytes)
        let vault = try history.open()
        history.expectNoStaleRead(vault, "\(file) field at \(offset) all ones")
        #expect(!(try vault.verify().filter { !$0.isSuperseded }.isEmpty))
    }

    @Test("KDF parameters outside the bounds are refused before any derivation", arguments: [
        #""n" : 16384"# + "|" + #""n" : 4194304"#, #""n" : 16384"# + "|" + #""n" : 2"#, #""r" : 8"# + "|" + #""r" : 32"#,
        #""p" : 1"# + "|" + #""p" : 16"#,
    ])
    func kdfBounds(edit: String) throws {
        let directory = TemporaryDirectory()
        let path = directory.sub("vault")
        _ = try FileVault.create(at: path, credential: .passphrase("pw"), scrypt: .testing, anchorDirectory: nil)
        let parts = edit.split(separator: "|").map(String.init)
        for name in ["header", "header.backup"] {
            let text = try String(contentsOfFile: path + "/" + name, encoding: .utf8)
            // Re-checksum the edited body so that only the bounds (and the MAC) can object.
            let lines = text.components(separatedBy: "\nsha256=")
            let body = lines[0].replacingOccurrences(of: parts[0], with: parts[1])
            #expect(body != lines[0])
            let sum = SHA256.hash(Array(body.utf8)).hexString
            try (body + "\nsha256=" + sum + "\n").write(toFile: path + "/" + name, atomically: true, encoding: .utf8)
        }
        let error = #expect(throws: KeysmithError.self) { try FileVault.open(at: path, credential: .passphrase("pw"), anchorDirectory: nil) }
        #expect(error?.code == .corruptData)
        #expect(error?.message.contains("outside the allowed bounds") == true)
    }

    @Test("a FIFO, a device link or a directory in place of a log or the snapshot never hangs a read or a verify")
    func specialFiles() throws {
        for (target, kind) in [("log", "fifo"), ("log", "zero"), ("snapshot", "zero"), ("snapshot", "directory"), ("log", "directory")] {
            let history = try HistoryVault()
            let path = target == "log" ? logPath(history.path, 6) : history.path + "/data/snapshot"
            if target == "snapshot" { try FileManager.default.removeItem(atPath: path) }
            switch kind {
            case "fifo": #expect(mkfifo(path, 0o600) == 0)
            case "zero": try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: "/dev/zero")
            default: try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
            }
            let vault = try history.open()
            history.expectNoStaleRead(vault, "\(kind) as \(target)")
            #expect(!(try vault.verify().filter { !$0.isSuperseded }.isEmpty), "\(kind) as \(target)")

        }
    }

    @Test("the anchor reports a vault put back to an earlier state, or whose newest commits were removed, until accepted")
    func rollbackDetected() throws {
        let history = try HistoryVault()
        let backup = history.directory.sub("backup")
        try FileManager.default.copyItem(atPath: history.path, toPath: backup)
        let vault = try history.open(anchored: true)
        try vault.upsert(ItemAttributes(key: genericKey("x")), secret: Data("v3".utf8))
        #expect(try vault.sequence == 6)

        // The newest commit removed: without the anchor nothing can tell; with it, reads fail.
        try FileManager.default.removeItem(atPath: logPath(history.path, 6))
        #expect(try history.open().read(genericKey("x"))?.secret == Data("v2".utf8))
        let rolledBack = try history.open(anchored: true)
        let error = #expect(throws: KeysmithError.self) { try rolledBack.read(genericKey("x")) }
        #expect(error?.code == .corruptData)
        #expect(error?.message.contains("rolled back") == true)
        #expect(try rolledBack.verify().first?.reason.contains("rolled back") == true)
        #expect(throws: KeysmithError.self) { try rolledBack.upsert(ItemAttributes(key: genericKey("q")), secret: Data("1".utf8)) }

        // The whole directory put back, then written to (a fork): also reported.
        try FileManager.default.removeItem(atPath: history.path)
        try FileManager.default.copyItem(atPath: backup, toPath: history.path)
        try history.open().upsert(ItemAttributes(key: genericKey("x")), secret: Data("fork".utf8))
        let forked = try history.open(anchored: true)
        #expect(throws: KeysmithError.self) { try forked.read(genericKey("x")) }
        #expect(try forked.verify().first?.reason.contains("forked") == true)

        // A deliberate restore is accepted once, and reads work again.
        try forked.acceptRollback()
        #expect(try forked.read(genericKey("x"))?.secret == Data("fork".utf8))
        #expect(try history.open(anchored: true).read(genericKey("x"))?.secret == Data("fork".utf8))
    }

    @Test("a read-only vault can be read: opening creates and changes nothing")
    func readOnlyVault() throws {
        let history = try HistoryVault()
        try FileManager.default.removeItem(atPath: history.path + "/lock")
        let before = try files(in: history.path)
        let vault = try history.open()
        #expect(try vault.read(genericKey("x"))?.secret == Data("v2".utf8))
        #expect(try vault.verify().isEmpty)
        #expect(try files(in: history.path) == before)
        if getuid() != 0 {
            for directory in ["", "/data", "/data/log"] { chmod(history.path + directory, 0o500) }
            defer { for directory in ["", "/data", "/data/log"] { chmod(history.path + directory, 0o700) } }
            #expect(try history.open().read(genericKey("z"))?.secret == Data("z1".utf8))
        }
    }

    @Test("a log or snapshot from another vault is reported and never read as this vault's")
    func foreignFiles() throws {
        let a = try HistoryVault()
        let b = try HistoryVault()
        try FileManager.default.removeItem(atPath: logPath(a.path, 3))
        try FileManager.default.copyItem(atPath: logPath(b.path, 3), toPath: logPath(a.path, 3))
        let vault = try a.open()
        a.expectNoStaleRead(vault, "foreign log", mustFail: ["x"])
        #expect(try vault.verify().contains { $0.reason.contains("another vault") })
        for name in ["header", "header.backup"] {
            try FileManager.default.removeItem(atPath: a.path + "/" + name)
            try FileManager.default.copyItem(atPath: b.path + "/" + name, toPath: a.path + "/" + name)
        }
        let error = #expect(throws: KeysmithError.self) { try a.open() }
        #expect(error?.code == .corruptData)
        #expect(error?.message.contains("another vault") == true)
    }

    @Test("a wrong credential is told apart from a damaged header, and one damaged copy heals at the next write")
    func headerCopies() throws {
        let vault = try SmallVault()
        let wrong = #expect(throws: KeysmithError.self) {
            try FileVault.open(at: vault.path, credential: .key([UInt8](repeating: 1, count: 32)), anchorDirectory: nil)
        }
        #expect(wrong?.code == .authenticationFailed)
        try Data("garbage".utf8).write(to: URL(fileURLWithPath: vault.path + "/header"))
        let opened = try FileVault.open(at: vault.path, credential: SmallVault.credential, anchorDirectory: nil)
        #expect(try opened.verify().map(\.file) == ["header"])
        try opened.create(ItemAttributes(key: genericKey("new")), secret: Data("n".utf8))
        #expect(try opened.verify().isEmpty)
        #expect(try Data(contentsOf: URL(fileURLWithPath: vault.path + "/header"))
            == Data(contentsOf: URL(fileURLWithPath: vault.path + "/header.backup")))
        try Data("garbage".utf8).write(to: URL(fileURLWithPath: vault.path + "/header.backup"))
        try Data("garbage".utf8).write(to: URL(fileURLWithPath: vault.path + "/header"))
        let both = #expect(throws: KeysmithError.self) { try FileVault.open(at: vault.path, credential: SmallVault.credential) }
        #expect(both?.code == .corruptData)
    }

    @Test("a damaged record is repaired by writing it again")
    func repairByWriting() throws {
        let vault = try SmallVault()
        let log = logPath(vault.path, 4)
        var bytes = try Data(contentsOf: URL(fileURLWithPath: log))
        bytes[bytes.count - 3] ^= 1  // inside log1's sealed record
        try bytes.write(to: URL(fileURLWithPath: log))
        let opened = try FileVault.open(at: vault.path, credential: SmallVault.credential, anchorDirectory: nil)
        let error = #expect(throws: KeysmithError.self) { try opened.read(genericKey("log1")) }
        #expect(error?.message.contains("data/log/0000000000000004") == true)
        #expect(error?.message.contains("secret-log-1") == false)
        #expect(try opened.read(genericKey("snap1"))?.secret == Data("secret-snap-1".utf8))
        try opened.upsert(ItemAttributes(key: genericKey("log1")), secret: Data("fresh".utf8))
        #expect(try opened.read(genericKey("log1"))?.secret == Data("fresh".utf8))
        #expect(try opened.verify().allSatisfy(\.isSuperseded))
    }

    @Test("compaction and rekey refuse to rewrite a snapshot with a damaged index page, so no record is dropped")
    func compactionKeepsDamagedPages() throws {
        let directory = TemporaryDirectory()
        let path = directory.sub("vault")
        let vault = try FileVault.create(at: path, credential: testKey, anchorDirectory: nil)
        try vault.perform((0..<200).map { .create(ItemAttributes(key: genericKey("k\($0)")), secret: Data("v\($0)".utf8)) })
        try vault.compact()
        let snapshot = path + "/data/snapshot"
        var bytes = Array(try Data(contentsOf: URL(fileURLWithPath: snapshot)))
        let head = try SnapshotFile.parseHead(Array(bytes.prefix(84)), fileSize: bytes.count)
        bytes[head.pagesStart + head.entriesPerPage * Format.indexEntrySize + 40] ^= 1  // inside page 1
        try replace(snapshot, with: bytes)
        let opened = try FileVault.open(at: path, credential: testKey, anchorDirectory: nil)
        let compact = #expect(throws: KeysmithError.self) { try opened.compact() }
        #expect(compact?.code == .corruptData)
        #expect(throws: KeysmithError.self) { try opened.rekey() }
        // Writes go on (32 of them would compact by themselves), and every record outside the
        // damaged page stays readable; those inside it fail, never read as absent.
        for index in 0..<40 { try opened.upsert(ItemAttributes(key: genericKey("new\(index)")), secret: Data("n".utf8)) }
        var readable = 0, failed = 0
        for index in 0..<200 {
            do {
                #expect(try opened.read(genericKey("k\(index)"))?.secret == Data("v\(index)".utf8))
                readable += 1
            } catch let error as KeysmithError {
                #expect(error.code == .corruptData)
                failed += 1
            }
        }
        #expect(failed <= head.entriesPerPage && failed > 0 && readable + failed == 200)
    }

    @Test("compaction deletes only the logs it wrote: a stray file whose name reads as a covered log's number (with a sign, or zero) is kept and reported")
    func compactionKeepsStrayFiles() throws {
        let history = try HistoryVault()
        // `UInt64(_:radix:)` reads "+000000000000001" as 1: compaction through 5 deleted it.
        let strays = ["+000000000000001", "+000000000000003", "-000000000000000", "0000000000000000"]
        for name in strays { #expect(FileManager.default.createFile(atPath: history.path + "/data/log/" + name, contents: Data([1, 2, 3]))) }
        let vault = try history.open()
        try vault.upsert(ItemAttributes(key: genericKey("w")), secret: Data("w1".utf8))
        try vault.compact()
        for name in strays {
            #expect(FileManager.default.fileExists(atPath: history.path + "/data/log/" + name), "\(name)")
            #expect(try vault.verify().contains { $0.file == "data/log/" + name }, "\(name)")
        }
        history.expectNoStaleRead(vault, "stray files")
        // The logs it covers are gone.
        #expect(!FileManager.default.fileExists(atPath: logPath(history.path, 1)))
    }

    @Test("hostile log names and directories neither crash nor hang: ffff… logs, a file for the log directory, a sparse snapshot")
    func hostileNamesAndSizes() throws {
        let history = try HistoryVault()
        #expect(FileManager.default.createFile(atPath: history.path + "/data/log/ffffffffffffffff", contents: Data([1, 2, 3])))
        #expect(FileManager.default.createFile(atPath: history.path + "/data/log/4000000000000000", contents: Data([1, 2, 3])))
        let vault = try history.open()
        history.expectNoStaleRead(vault, "huge log names")
        #expect(try vault.read(genericKey("x"))?.secret == Data("v2".utf8))

        // The log directory replaced by a file: damage, as a missing directory is (its commits
        // may be gone), at once.
        let other = try HistoryVault()
        try FileManager.default.removeItem(atPath: other.path + "/data/log")
        #expect(FileManager.default.createFile(atPath: other.path + "/data/log", contents: Data()))
        let error = #expect(throws: KeysmithError.self) { _ = try other.open().read(genericKey("x")) }
        #expect(error?.code == .corruptData)

        // A snapshot claiming 2^32 - 1 records of one per page, sparse to look large enough.
        let sparse = try HistoryVault()
        let snapshot = sparse.path + "/data/snapshot"
        var bytes = Array(try Data(contentsOf: URL(fileURLWithPath: snapshot)))
        for index in 36..<44 { bytes[index] = index < 40 ? 0 : 0xFF }      // record count 2^32 - 1
        for index in 44..<48 { bytes[index] = 0xFF }                         // page count 2^32 - 1
        bytes[48] = 0; bytes[49] = 0; bytes[50] = 0; bytes[51] = 1          // one record per page
        try replace(snapshot, with: bytes)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: snapshot))
        try handle.truncate(atOffset: 1 << 40)
        try handle.close()
        let opened = try sparse.open()
        // Logs 1-5 survive from the genesis, so every value is still vouched for.
        sparse.expectNoStaleRead(opened, "sparse snapshot")
        #expect(try opened.read(genericKey("z"))?.secret == Data("z1".utf8))
        #expect(try opened.verify().contains { $0.file == "data/snapshot" })
    }

    @Test("a header put back to an older generation is refused by writers and never spread over the newer copy")
    func olderHeaderPutBack() throws {
        let history = try HistoryVault()
        let older = try Data(contentsOf: URL(fileURLWithPath: history.path + "/header"))
        let vault = try history.open()
        try vault.rekey()
        let newer = try Data(contentsOf: URL(fileURLWithPath: history.path + "/header.backup"))
        try older.write(to: URL(fileURLWithPath: history.path + "/header"))
        let error = #expect(throws: KeysmithError.self) { try vault.upsert(ItemAttributes(key: genericKey("q")), secret: Data("1".utf8)) }
        #expect(error?.code == .corruptData)
        #expect(try Data(contentsOf: URL(fileURLWithPath: history.path + "/header.backup")) == newer)
        // Putting the newer header back makes the vault whole again.
        try newer.write(to: URL(fileURLWithPath: history.path + "/header"))
        #expect(try history.open().read(genericKey("x"))?.secret == Data("v2".utf8))
    }
}
