import Foundation
import Keysmith
import KeysmithCrypto
@testable import KeysmithVault
import Testing

/// The promises docs/format.md and docs/threat-model.md make about the anchor and about files
/// in odd places, each tried the way it was found broken (issue 32's findings 4, 5, 6 and 10).
@Suite("file vault: the anchor, and files that are not what they should be")
struct AnchorAndFileHoleTests {
    /// The anchor files in `directory` (not the lock, not temporary files).
    static func anchorFiles(_ directory: String) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: directory).filter { !$0.hasPrefix(".") }.sorted()
    }

    @Test("a malformed anchor is damage: every read and write is refused, saying so, until the rollback is accepted")
    func malformedAnchorIsDamage() throws {
        let history = try HistoryVault()
        _ = try history.open(anchored: true)
        let name = try #require(try Self.anchorFiles(history.anchors).first)
        let path = history.anchors + "/" + name
        let good = try String(contentsOfFile: path, encoding: .utf8)
        let damages: [(String, (String) throws -> Void)] = [
            ("trailing junk", { try (good + "junk\n").write(toFile: $0, atomically: false, encoding: .utf8) }),
            ("no line feed", { try String(good.dropLast()).write(toFile: $0, atomically: false, encoding: .utf8) }),
            ("sequence 2^63", { try "keysmith-anchor-1 9223372036854775808 \(String(repeating: "ab", count: 32))\n".write(toFile: $0, atomically: false, encoding: .utf8) }),
            ("sequence with a sign", { try good.replacingOccurrences(of: "-1 ", with: "-1 +").write(toFile: $0, atomically: false, encoding: .utf8) }),
            ("short MAC", { try "keysmith-anchor-1 5 abcd\n".write(toFile: $0, atomically: false, encoding: .utf8) }),
            ("upper-case MAC", { try good.uppercased().replacingOccurrences(of: "KEYSMITH-ANCHOR-1", with: "keysmith-anchor-1").write(toFile: $0, atomically: false, encoding: .utf8) }),
            ("a FIFO", { #expect(mkfifo($0, 0o600) == 0) }),
            ("a directory", { try FileManager.default.createDirectory(atPath: $0, withIntermediateDirectories: false) }),
            ("a link to /dev/zero", { try FileManager.default.createSymbolicLink(atPath: $0, withDestinationPath: "/dev/zero") }),
            ("an empty file", { _ = FileManager.default.createFile(atPath: $0, contents: Data()) }),
        ]
        for (label, damage) in damages {
            try? FileManager.default.removeItem(atPath: path)
            try damage(path)
            let vault = try history.open(anchored: true)
            let read = #expect(throws: KeysmithError.self, "\(label)") { try vault.read(genericKey("x")) }
            #expect(read?.code == .corruptData, "\(label)")
            #expect(read?.message.contains("anchor") == true && read?.message.contains("--accept-rollback") == true, "\(label): \(read?.message ?? "")")
            #expect(throws: KeysmithError.self, "\(label): a write") { try vault.upsert(ItemAttributes(key: genericKey("w")), secret: Data("w".utf8)) }
            #expect(try vault.verify().contains { $0.reason.contains("anchor") }, "\(label)")
            // Not overwritten by the open or the refused write.
            if label == "trailing junk" { #expect(try String(contentsOfFile: path, encoding: .utf8) == good + "junk\n") }
            // The way out: accept, and a well-formed anchor is written again.
            try vault.acceptRollback()
            #expect(try vault.read(genericKey("x"))?.secret == Data("v2".utf8), "\(label)")
            #expect(try String(contentsOfFile: path, encoding: .utf8).hasPrefix("keysmith-anchor-1 5 "), "\(label)")
        }
    }

    @Test("the anchor is kept per place: accepting a rollback of a backup elsewhere does not set back the vault in use")
    func anchorIsPerPlace() throws {
        let directory = TemporaryDirectory()
        let live = directory.sub("live"), backup = directory.sub("backup"), anchors = directory.sub("anchors")
        let vault = try FileVault.create(at: live, credential: testKey, anchorDirectory: anchors)
        try vault.upsert(ItemAttributes(key: genericKey("a")), secret: Data("1".utf8))
        try FileManager.default.copyItem(atPath: live, toPath: backup)
        try vault.upsert(ItemAttributes(key: genericKey("a")), secret: Data("2".utf8))
        try vault.upsert(ItemAttributes(key: genericKey("b")), secret: Data("3".utf8))
        // The backup, opened and accepted where it is.
        let old = try FileVault.open(at: backup, credential: testKey, anchorDirectory: anchors)
        try old.acceptRollback()
        #expect(try old.read(genericKey("a"))?.secret == Data("1".utf8))
        let marks = try Self.anchorFiles(anchors)
        #expect(marks.count == 2, "one mark per place: \(marks)")
        // The backup put in place of the vault in use is a rollback there.
        try FileManager.default.removeItem(atPath: live)
        try FileManager.default.moveItem(atPath: backup, toPath: live)
        let restored = try FileVault.open(at: live, credential: testKey, anchorDirectory: anchors)
        let error = #expect(throws: KeysmithError.self) { try restored.read(genericKey("a")) }
        #expect(error?.code == .corruptData)
        #expect(try restored.verify().contains { $0.reason.contains("rolled back") })
    }

    @Test("a mark written by an earlier Keysmith (named by the vault id alone) still anchors the vault, and moves to the place's name")
    func legacyAnchorIsRead() throws {
        let history = try HistoryVault()
        _ = try history.open(anchored: true)
        let name = try #require(try Self.anchorFiles(history.anchors).first)
        #expect(name.count == 32 + 1 + 16)
        // As an earlier Keysmith left it: named by the vault id, saying commit 5.
        let legacy = history.anchors + "/" + String(name.prefix(32))
        try FileManager.default.moveItem(atPath: history.anchors + "/" + name, toPath: legacy)
        // Commit 5 removed: the legacy mark catches it.
        let copy = history.directory.sub("copy")
        try FileManager.default.copyItem(atPath: history.path, toPath: copy)
        try FileManager.default.removeItem(atPath: history.path + "/data/log/0000000000000005")
        let rolled = try history.open(anchored: true)
        #expect(throws: KeysmithError.self) { try rolled.read(genericKey("z")) }
        // With the commit back, the vault opens and the mark is written under the place's name.
        try FileManager.default.removeItem(atPath: history.path)
        try FileManager.default.moveItem(atPath: copy, toPath: history.path)
        #expect(try history.open(anchored: true).read(genericKey("z"))?.secret == Data("z1".utf8))
        #expect(try Self.anchorFiles(history.anchors).contains(name))
    }

    @Test("format 1: a FIFO, a directory or a link to /dev/urandom in place of the snapshot, a header copy or a log never hangs a command; each is a clear error")
    func format1FilesNeverHang() throws {
        let directory = TemporaryDirectory()
        for file in ["snapshot", "header", "header.backup", "log/0000000000000003", "log/0000000000000004"] {
            for kind in ["fifo", "urandom", "directory"] {
                let path = directory.sub("\(kind)-\(file.replacingOccurrences(of: "/", with: "-"))")
                try FileManager.default.copyItem(atPath: Golden.keyfileVault, toPath: path)
                let target = path + "/" + file
                guard FileManager.default.fileExists(atPath: target) else { continue }
                try FileManager.default.removeItem(atPath: target)
                switch kind {
                case "fifo": #expect(mkfifo(target, 0o600) == 0)
                case "urandom": try FileManager.default.createSymbolicLink(atPath: target, withDestinationPath: "/dev/urandom")
                default: try FileManager.default.createDirectory(atPath: target, withIntermediateDirectories: false)
                }
                let started = Date()
                do {
                    let vault = try FileVault.open(at: path, credential: .keyfile(at: Golden.keyfile), anchorDirectory: nil)
                    // A header copy in odd shape: the other copy keeps the vault open, and verify says so.
                    #expect(file.hasPrefix("header"), "\(kind) \(file): opened")
                    #expect(try vault.verify().contains { $0.file == file }, "\(kind) \(file)")
                } catch let error as KeysmithError {
                    #expect(error.code == .corruptData, "\(kind) \(file): \(error)")
                }
                #expect(Date().timeIntervalSince(started) < 5, "\(kind) \(file) took \(Date().timeIntervalSince(started)) s")
            }
        }
    }

    @Test("a linked data/ or data/log/ is reported by verify, not followed silently")
    func linkedDirectoriesAreReported() throws {
        for inner in ["data", "data/log"] {
            let directory = TemporaryDirectory()
            let path = directory.sub("vault")
            let vault = try FileVault.create(at: path, credential: testKey, anchorDirectory: nil)
            try vault.upsert(ItemAttributes(key: genericKey("a")), secret: Data("1".utf8))
            let elsewhere = directory.sub("elsewhere")
            try FileManager.default.moveItem(atPath: path + "/" + inner, toPath: elsewhere)
            try FileManager.default.createSymbolicLink(atPath: path + "/" + inner, withDestinationPath: elsewhere)
            let reopened = try FileVault.open(at: path, credential: testKey, anchorDirectory: nil)
            #expect(try reopened.verify().contains { $0.file == inner && $0.reason.contains("symbolic link") }, "\(inner)")
            let repair = #expect(throws: KeysmithError.self) { try reopened.repair() }
            #expect(repair?.message.contains("symbolic link") == true)
        }
    }

    @Test("a planted log with the last commit number makes writes fail as damage (with the way out), not as a full vault")
    func plantedLastLog() throws {
        let history = try HistoryVault()
        try Data("junk".utf8).write(to: URL(fileURLWithPath: history.path + "/data/log/3fffffffffffffff"))
        let vault = try history.open()
        let error = #expect(throws: KeysmithError.self) { try vault.upsert(ItemAttributes(key: genericKey("w")), secret: Data("w".utf8)) }
        #expect(error?.code == .corruptData)
        #expect(error?.message.contains("vault repair") == true)
    }

    @Test("a new keyfile is written whole or not at all: an existing file is never touched, and nothing is left beside it")
    func keyfileWrittenAtomically() throws {
        let directory = TemporaryDirectory()
        let path = directory.sub("key")
        try VaultCredential.generateKeyfile(at: path)
        let bytes = try #require(FileManager.default.contents(atPath: path))
        #expect(bytes.count == 65 && bytes.last == 0x0A)
        #expect(try mode(path) == 0o600)
        let again = #expect(throws: KeysmithError.self) { try VaultCredential.generateKeyfile(at: path) }
        #expect(again?.code == .duplicateItem)
        #expect(FileManager.default.contents(atPath: path) == bytes)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["key"])
    }
}

/// docs/format.md, "The anchor" and "The history": a fork is refused even after a compaction
/// removed the logs that would have shown it.
@Suite("file vault: forks compacted past the anchor")
struct ForkPastAnchorTests {
    @Test("a copy written to and compacted past the anchor's commit is refused, and the anchor is not moved")
    func forkCompactedPastAnchor() throws {
        let directory = TemporaryDirectory()
        let live = directory.sub("live"), anchors = directory.sub("anchors"), elsewhere = directory.sub("elsewhere")
        let vault = try FileVault.create(at: live, credential: testKey, anchorDirectory: anchors)
        for index in 1...2 { try vault.upsert(ItemAttributes(key: genericKey("k\(index)")), secret: Data("v\(index)".utf8)) }
        let copy = directory.sub("copy")
        try FileManager.default.copyItem(atPath: live, toPath: copy)
        for index in 3...6 { try vault.upsert(ItemAttributes(key: genericKey("k\(index)")), secret: Data("v\(index)".utf8)) }
        // The copy, written to under another anchor and compacted past commit 6.
        let fork = try FileVault.open(at: copy, credential: testKey, anchorDirectory: elsewhere)
        for index in 3...7 { try fork.upsert(ItemAttributes(key: genericKey("f\(index)")), secret: Data("x".utf8)) }
        try fork.compact()
        try FileManager.default.removeItem(atPath: live)
        try FileManager.default.moveItem(atPath: copy, toPath: live)
        let anchorFiles = try AnchorAndFileHoleTests.anchorFiles(anchors)
        let before = try anchorFiles.map { try String(contentsOfFile: anchors + "/" + $0, encoding: .utf8) }
        let swapped = try FileVault.open(at: live, credential: testKey, anchorDirectory: anchors)
        let error = #expect(throws: KeysmithError.self) { try swapped.read(genericKey("k6")) }
        #expect(error?.code == .corruptData)
        #expect(error?.message.contains("forked") == true, "\(error?.message ?? "")")
        #expect(try swapped.verify().contains { $0.reason.contains("forked") })
        #expect(throws: KeysmithError.self) { try swapped.upsert(ItemAttributes(key: genericKey("w")), secret: Data("w".utf8)) }
        #expect(try anchorFiles.map { try String(contentsOfFile: anchors + "/" + $0, encoding: .utf8) } == before, "the anchor moved")
    }

    @Test("the vault's own compactions past a lagging anchor are accepted, through the snapshot's history")
    func ownCompactionPastLaggingAnchor() throws {
        let directory = TemporaryDirectory()
        let path = directory.sub("vault"), anchors = directory.sub("anchors"), other = directory.sub("other-anchors")
        let vault = try FileVault.create(at: path, credential: testKey, anchorDirectory: anchors)
        for index in 1...6 { try vault.upsert(ItemAttributes(key: genericKey("k\(index)")), secret: Data("v\(index)".utf8)) }
        // Another process, with its own anchor, commits and compacts twice.
        let writer = try FileVault.open(at: path, credential: testKey, anchorDirectory: other)
        for index in 7...40 { try writer.upsert(ItemAttributes(key: genericKey("k\(index)")), secret: Data("v\(index)".utf8)) }
        try writer.compact()
        for index in 41...45 { try writer.upsert(ItemAttributes(key: genericKey("k\(index)")), secret: Data("v\(index)".utf8)) }
        try writer.compact()
        let reopened = try FileVault.open(at: path, credential: testKey, anchorDirectory: anchors)
        #expect(try reopened.read(genericKey("k45"))?.secret == Data("v45".utf8))
        #expect(try reopened.verify().isEmpty)
    }

    @Test("an anchor that saw only the vault's creation is verified after compactions: its first advance skipped while another process held the anchors' lock is no false rollback")
    func anchorThatSawOnlyTheCreation() throws {
        let directory = TemporaryDirectory()
        let path = directory.sub("vault"), anchors = directory.sub("anchors"), other = directory.sub("other-anchors")
        _ = try FileVault.create(at: path, credential: testKey, anchorDirectory: anchors)
        // Another process holds the anchors' lock (as any keysmith on this machine may, for a
        // moment) while this one writes and compacts: the mark stays at the creation.
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/flock")
        holder.arguments = ["--no-fork", anchors + "/.lock", "sleep", "30"]
        try holder.run()
        defer { kill(holder.processIdentifier, SIGKILL); holder.waitUntilExit() }
        // Held once a try of our own fails.
        let probe = open(anchors + "/.lock", O_RDWR | O_CREAT, 0o600)
        var held = false
        let deadline = Date().addingTimeInterval(30)
        while !held, Date() < deadline {
            if flock(probe, LOCK_EX | LOCK_NB) == 0 { flock(probe, LOCK_UN); usleep(10_000) } else { held = true }
        }
        close(probe)
        try #require(held, "flock(1) never took the anchors' lock")
        let vault = try FileVault.open(at: path, credential: testKey, anchorDirectory: anchors)
        try vault.perform((0..<300).map { .create(ItemAttributes(key: genericKey("a\($0)")), secret: Data("v\($0)".utf8)) })
        try vault.compact()
        let mark = try String(contentsOfFile: anchors + "/" + (try FileManager.default.contentsOfDirectory(atPath: anchors).first { !$0.hasPrefix(".") } ?? ""),
                              encoding: .utf8)
        #expect(mark.split(separator: " ").dropFirst().first == "0", "the mark advanced although the lock was held: \(mark)")
        // Another handle with its own anchor writes and compacts too.
        let writer = try FileVault.open(at: path, credential: testKey, anchorDirectory: other)
        try writer.upsert(ItemAttributes(key: genericKey("b")), secret: Data("b".utf8))
        try writer.compact()
        let reopened = try FileVault.open(at: path, credential: testKey, anchorDirectory: anchors)
        #expect(try reopened.read(genericKey("a299"))?.secret == Data("v299".utf8))
        #expect(try reopened.verify().isEmpty)
        try reopened.upsert(ItemAttributes(key: genericKey("c")), secret: Data("c".utf8))
    }

    @Test("an anchor older than the history reaches is refused with the way out, which works")
    func anchorOlderThanTheHistory() throws {
        let directory = TemporaryDirectory()
        let path = directory.sub("vault"), anchors = directory.sub("anchors"), other = directory.sub("other-anchors")
        let vault = try FileVault.create(at: path, credential: testKey, anchorDirectory: anchors)
        try vault.upsert(ItemAttributes(key: genericKey("first")), secret: Data("1".utf8))
        let writer = try FileVault.open(at: path, credential: testKey, anchorDirectory: other)
        for index in 0..<(HistoryFile.window + 40) {
            try writer.upsert(ItemAttributes(key: genericKey("k\(index % 50)")), secret: Data("v\(index)".utf8))
        }
        try writer.compact()
        let lagging = try FileVault.open(at: path, credential: testKey, anchorDirectory: anchors)
        let error = #expect(throws: KeysmithError.self) { try lagging.read(genericKey("first")) }
        #expect(error?.message.contains("--accept-rollback") == true, "\(error?.message ?? "")")
        try lagging.acceptRollback()
        #expect(try lagging.read(genericKey("first"))?.secret == Data("1".utf8))
    }
}
