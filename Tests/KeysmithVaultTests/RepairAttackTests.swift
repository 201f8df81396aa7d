import Foundation
import Keysmith
import KeysmithCrypto
import KeysmithSystem
import KeysmithTestSupport
@testable import KeysmithVault
import Testing

/// The rule `vault repair` keeps (docs/format.md, "Repair"; docs/threat-model.md): a repair
/// never accepts content that could not have been accepted without it. Each test is an attack
/// or a plain damage from issue 49, which passed through the repair before.
@Suite("file vault, format 2: a repair never launders an attack")
struct RepairAttackTests {
    static func put(_ vault: FileVault, _ account: String, _ value: String) throws {
        try vault.upsert(ItemAttributes(key: genericKey(account)), secret: Data(value.utf8))
    }

    static func value(_ vault: FileVault, _ account: String) throws -> String? {
        try vault.read(genericKey(account)).map { String(decoding: $0.secret, as: UTF8.self) }
    }

    static func bytes(_ path: String) throws -> [UInt8] { Array(try #require(FileManager.default.contents(atPath: path))) }
    static func write(_ bytes: [UInt8], _ path: String) throws { try Data(bytes).write(to: URL(fileURLWithPath: path)) }
    static func flip(_ path: String, _ offset: Int, _ mask: UInt8 = 1) throws {
        var contents = try bytes(path)
        contents[offset] ^= mask
        try write(contents, path)
    }

    /// Removes the first frame of a log: its table entry and its body; the count goes down by
    /// one and nothing else changes (what an attacker without the key can do).
    static func dropFirstFrame(_ path: String) throws {
        let data = try bytes(path)
        let count = Int(UInt32(data[36]) << 24 | UInt32(data[37]) << 16 | UInt32(data[38]) << 8 | UInt32(data[39]))
        let entry = 65
        let first = Array(data[72..<(72 + entry)])
        let length = Int(UInt32(first[33]) << 24 | UInt32(first[34]) << 16 | UInt32(first[35]) << 8 | UInt32(first[36]))
        let bodies = 72 + entry * count + 32
        var out = Array(data[0..<36])
        let newCount = UInt32(count - 1)
        out += [UInt8(newCount >> 24), UInt8(newCount >> 16 & 0xFF), UInt8(newCount >> 8 & 0xFF), UInt8(newCount & 0xFF)]
        out += data[40..<72]
        out += data[(72 + entry)..<(72 + entry * count)]
        out += data[(72 + entry * count)..<bodies]  // the stored commit MAC, as it was
        out += data[(bodies + length)...]
        try write(out, path)
    }

    static func log(_ vault: String, _ number: Int) -> String { vault + "/data/log/" + String(format: "%016llx", number) }

    static func tree(_ path: String) throws -> [String: Data] { try RepairVault.tree(path) }

    @Test("a commit with a record dropped out of it: never called complete, none of its records kept, refused at the anchor's commit")
    func droppedRecord() throws {
        let directory = TemporaryDirectory()
        let path = directory.sub("v"), anchors = directory.sub("anchors")
        let vault = try FileVault.create(at: path, credential: testKey, anchorDirectory: anchors)
        try vault.perform([.upsert(ItemAttributes(key: genericKey("token")), secret: Data("granted".utf8)),
                           .upsert(ItemAttributes(key: genericKey("audit")), secret: Data("imported".utf8))])
        try vault.perform([.upsert(ItemAttributes(key: genericKey("token")), secret: Data("revoked".utf8)),
                           .upsert(ItemAttributes(key: genericKey("audit")), secret: Data("revoked it".utf8))])
        let copy = directory.sub("middle")
        try FileManager.default.copyItem(atPath: path, toPath: copy)

        // At the anchor's commit: the repair cannot tell it from a rollback and refuses.
        try Self.dropFirstFrame(Self.log(path, 2))
        let before = try Self.tree(path)
        let damaged = try FileVault.open(at: path, credential: testKey, anchorDirectory: anchors)
        #expect(throws: KeysmithError.self) { try damaged.repair() }
        #expect(throws: KeysmithError.self) { try damaged.repair(dryRun: true) }
        #expect(try Self.tree(path) == before, "a refused repair changed files")
        #expect(throws: KeysmithError.self) { try Self.value(damaged, "token") }

        // In the middle of the history (another machine, no anchor): lost, never "complete".
        let later = try FileVault.open(at: copy, credential: testKey, anchorDirectory: nil)
        try Self.put(later, "other", "o")
        try Self.dropFirstFrame(Self.log(copy, 2))
        let middle = try FileVault.open(at: copy, credential: testKey, anchorDirectory: nil)
        let report = try middle.repair()
        #expect(report.losses.allSatisfy { !$0.complete }, "\(report.losses)")
        #expect(report.losses.compactMap(\.sequence).contains(2))
        #expect(Set(report.itemsMaybeStale) == [genericKey("token"), genericKey("audit")], "\(report.itemsMaybeStale)")
        // The commit's surviving record is not kept: its commit is not proven.
        #expect(try Self.value(middle, "audit") == "imported")
        #expect(try Self.value(middle, "token") == "granted")
        #expect(report.absentItemsMayBeLost)
    }

    /// v: k=old (1), k=true-newest (2), seen by the anchor; o: a copy at 1 that wrote k=fork (2).
    static func forkedPair(_ directory: TemporaryDirectory) throws -> (path: String, anchors: String, fork: String) {
        let path = directory.sub("v"), anchors = directory.sub("anchors"), fork = directory.sub("o")
        let vault = try FileVault.create(at: path, credential: testKey, anchorDirectory: anchors)
        try put(vault, "k", "old")
        try FileManager.default.copyItem(atPath: path, toPath: fork)
        try put(vault, "k", "true-newest")
        try put(try FileVault.open(at: fork, credential: testKey, anchorDirectory: nil), "k", "fork")
        return (path, anchors, fork)
    }

    @Test("a fork put in the vault's place with one bit flipped, a junk file or an older log at the anchor's number: the repair refuses it")
    func forkWithFlippedBit() throws {
        let directory = TemporaryDirectory()
        let (path, anchors, fork) = try Self.forkedPair(directory)
        let forkLog = try Self.bytes(Self.log(fork, 2))
        let oldLog = try Self.bytes(Self.log(fork, 1))
        // Every byte of the fork's header, table and stored MAC flipped in turn, a junk file, commit 1 copied over 2.
        var cases: [(String, [UInt8])] = []
        for offset in 0..<(72 + 65 + 32) {
            var damaged = forkLog
            damaged[offset] ^= 1
            cases.append(("byte \(offset)", damaged))
        }
        cases.append(("junk", Array("not a log".utf8)))
        cases.append(("commit 1 copied over 2", oldLog))
        for (name, log) in cases {
            let target = directory.sub("case")
            try? FileManager.default.removeItem(atPath: target)
            try FileManager.default.copyItem(atPath: fork, toPath: target)
            try Self.write(log, Self.log(target, 2))
            // The anchor of the vault at `path`, as this machine saw it, for the files at `path`.
            try FileManager.default.removeItem(atPath: path)
            try FileManager.default.copyItem(atPath: target, toPath: path)
            let before = try Self.tree(path)
            let vault = try FileVault.open(at: path, credential: testKey, anchorDirectory: anchors)
            var repaired: VaultRepairReport?
            do { repaired = try vault.repair() } catch {}
            #expect(repaired == nil, "\(name): the repair accepted a fork: \(String(describing: repaired))")
            #expect(try Self.tree(path) == before, "\(name): a refused repair changed files")
            #expect((try? Self.value(vault, "k")) != "fork", "\(name): the fork is served")
        }
    }

    /// The repair vault of RepairTests (snapshot through 3, logs 4 to 7), with one log damaged.
    func repairProvable(_ name: String, log number: Int, offset: Int) throws -> VaultRepairReport {
        let fixture = try RepairVault()
        let (path, anchors) = try fixture.copy(name)
        try Self.flip(Self.log(path, number), offset)
        let vault = try FileVault.open(at: path, credential: RepairVault.credential, anchorDirectory: anchors)
        let report = try vault.repair()
        // Nothing lost: every item at its newest value, none named as possibly stale.
        for (account, values) in RepairVault.history {
            #expect(try Self.value(vault, account) == values.last!, "\(name): \(account)")
        }
        #expect(report.itemsMaybeStale.isEmpty && !report.absentItemsMayBeLost, "\(name): \(report)")
        #expect(report.losses.count == 1 && report.losses.allSatisfy(\.complete), "\(name): \(report.losses)")
        #expect(try vault.verify().isEmpty)
        return report
    }

    @Test("a damaged stored commit MAC is proven by the next commit's link, or by the anchor for the newest: nothing after it is lost")
    func storedMACProvenByLink() throws {
        let macStart = 72 + 65  // one frame per commit in the fixture
        for offset in [macStart, macStart + 17, macStart + 31] {
            _ = try repairProvable("mac-\(offset)", log: 5, offset: offset)
            _ = try repairProvable("newest-mac-\(offset)", log: 7, offset: offset)
        }
    }

    @Test("a damaged sequence, epoch or frame count field: the values a log must have are put back and its records kept")
    func knownFieldsPutBack() throws {
        // sequence (low and high bytes), epoch, frame count
        for offset in [24, 31, 35, 39, 36] {
            let report = try repairProvable("field-\(offset)", log: 5, offset: offset)
            #expect(report.losses.first?.sequence == 5)
        }
    }

    @Test("a snapshot compacted right after a delete, damaged in its header: its history proves where it ends, no later commit is lost")
    func damagedSnapshotAfterDelete() throws {
        let directory = TemporaryDirectory()
        let path = directory.sub("v"), anchors = directory.sub("anchors")
        let vault = try FileVault.create(at: path, credential: testKey, anchorDirectory: anchors)
        try Self.put(vault, "a", "a1")
        try Self.put(vault, "b", "b1")
        try Self.put(vault, "c", "c1")
        try vault.delete(genericKey("c"))
        try vault.compact()  // through 4; its newest record is version 2
        try Self.put(vault, "d", "d1")
        try Self.put(vault, "a", "a2")
        try Self.flip(path + "/data/snapshot", 30)  // the through-sequence field
        let damaged = try FileVault.open(at: path, credential: testKey, anchorDirectory: anchors)
        let report = try damaged.repair()
        #expect(report.losses.map(\.file) == ["data/snapshot"], "\(report.losses)")
        #expect(try Self.value(damaged, "d") == "d1")
        #expect(try Self.value(damaged, "a") == "a2")
        #expect(try Self.value(damaged, "b") == "b1")
        #expect(try Self.value(damaged, "c") == nil)
        #expect(try damaged.verify().isEmpty)
    }

    @Test("a fork compacted at the same commit, given the real vault's history: refused by an anchor that lags the compaction")
    func swappedHistory() throws {
        let directory = TemporaryDirectory()
        let path = directory.sub("v"), fork = directory.sub("f")
        let anchors = directory.sub("a"), lagging = directory.sub("m")
        let vault = try FileVault.create(at: path, credential: testKey, anchorDirectory: anchors)
        for index in 1...6 { try Self.put(vault, "s", "t\(index)") }
        try FileManager.default.copyItem(atPath: path, toPath: fork)
        for index in 7...10 { try Self.put(vault, "s", "t\(index)") }
        try FileManager.default.copyItem(atPath: anchors, toPath: lagging)  // this machine saw commit 10
        let elsewhere = try FileVault.open(at: path, credential: testKey, anchorDirectory: directory.sub("x"))
        try Self.put(elsewhere, "s", "t11")
        try elsewhere.compact()
        // The control: the real vault, compacted, passes the lagging anchor through its own history.
        try FileManager.default.copyItem(atPath: lagging, toPath: directory.sub("m2"))
        #expect(try Self.value(FileVault.open(at: path, credential: testKey, anchorDirectory: directory.sub("m2")), "s") == "t11")
        let realHistory = try Self.bytes(path + "/data/history-000000000000000b")
        let forked = try FileVault.open(at: fork, credential: testKey, anchorDirectory: nil)
        for index in 7...11 { try Self.put(forked, "s", "f\(index)") }
        try forked.compact()
        try FileManager.default.removeItem(atPath: path)
        try FileManager.default.copyItem(atPath: fork, toPath: path)
        try Self.write(realHistory, path + "/data/history-000000000000000b")
        let swapped = try FileVault.open(at: path, credential: testKey, anchorDirectory: lagging)
        #expect(throws: KeysmithError.self) { try Self.value(swapped, "s") }
        #expect(throws: KeysmithError.self) { try swapped.repair() }
    }

    @Test("a repair waits for the rollback anchors' lock held by another process, then moves the anchor to its new commit")
    func anchorLockIsWaitedFor() throws {
        let fixture = try RepairVault()
        let (path, anchors) = try fixture.copy("lock")
        try Self.flip(Self.log(path, 5), 72 + 65 + 3)  // log 5's stored MAC: proven by log 6
        let holder = open(anchors + "/.lock", O_RDWR | O_CREAT, 0o600)
        #expect(holder >= 0 && flock(holder, LOCK_EX) == 0)
        let released = DispatchSemaphore(value: 0)
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.5) {
            flock(holder, LOCK_UN)
            close(holder)
            released.signal()
        }
        let vault = try FileVault.open(at: path, credential: RepairVault.credential, anchorDirectory: anchors)
        let report = try vault.repair()
        released.wait()
        let marks = try FileManager.default.contentsOfDirectory(atPath: anchors).filter { !$0.hasPrefix(".") }
        #expect(marks.count == 1)
        let mark = try String(contentsOfFile: anchors + "/" + marks[0], encoding: .utf8)
        #expect(mark.split(separator: " ").dropFirst().first == Substring(String(report.sequence)), "the anchor was not moved: \(mark)")
        #expect(try FileVault.open(at: path, credential: RepairVault.credential, anchorDirectory: anchors).verify().isEmpty)
    }

    @Test("a snapshot index entry pointed at a fork's record (its page MAC fails): the record is never kept")
    func forgedSnapshotEntry() throws {
        let fixture = try RepairVault()
        let (path, anchors) = try fixture.copy("forged-entry")
        // A fork of the vault writes d=fork as its commit 8; main writes nothing more.
        let fork = fixture.directory.sub("forged-fork")
        try FileManager.default.copyItem(atPath: path, toPath: fork)
        try Self.put(try FileVault.open(at: fork, credential: RepairVault.credential, anchorDirectory: nil), "d", "fork")
        let forkLog = try Self.bytes(Self.log(fork, 8))
        let entry = Array(forkLog[72..<(72 + 65)])
        let length = Int(entry[33]) << 24 | Int(entry[34]) << 16 | Int(entry[35]) << 8 | Int(entry[36])
        let body = Array(forkLog[(72 + 65 + 32)..<(72 + 65 + 32 + length)])
        // Its ciphertext appended to main's snapshot, and the snapshot's first index entry made
        // to point at it: record id, version 8, epoch 1, offset, length, nonce, tag.
        var snapshot = try Self.bytes(path + "/data/snapshot")
        let offset = snapshot.count
        snapshot += body
        func be(_ value: UInt64, _ width: Int) -> [UInt8] { (0..<width).map { UInt8(truncatingIfNeeded: value >> (8 * UInt64(width - 1 - $0))) } }
        let forged = Array(entry[0..<32]) + be(8, 8) + be(1, 4) + be(UInt64(offset), 8) + be(UInt64(length), 4) + Array(entry[37..<65])
        let pagesStart = Format.snapshotHeaderSize + Format.directoryEntrySize + Format.macSize  // one page
        snapshot.replaceSubrange(pagesStart..<(pagesStart + Format.indexEntrySize), with: forged)
        try Self.write(snapshot, path + "/data/snapshot")
        let vault = try FileVault.open(at: path, credential: RepairVault.credential, anchorDirectory: anchors)
        if let report = try? vault.repair() {
            #expect(try Self.value(vault, "d") == "d1", "\(report)")
        }
        #expect((try? Self.value(vault, "d")) != "fork")
    }

    @Test("hostile histories: a name at the last number, a first sequence that would overflow: no crash, no hang")
    func hostileHistories() throws {
        let fixture = try RepairVault()
        let (path, anchors) = try fixture.copy("hostile-history")
        try Data(count: 100).write(to: URL(fileURLWithPath: path + "/data/history-ffffffffffffffff"))
        // The history of the snapshot in force replaced by one claiming first = 2^64-1, count 1.
        let history = path + "/data/history-0000000000000003"
        var bytes = try Self.bytes(history)
        bytes.replaceSubrange(36..<44, with: [UInt8](repeating: 0xFF, count: 8))
        bytes.replaceSubrange(44..<48, with: [0, 0, 0, 1])
        try Self.write(Array(bytes.prefix(48 + 32 + 32)), history)
        try Self.flip(path + "/data/snapshot", 30)
        let vault = try FileVault.open(at: path, credential: RepairVault.credential, anchorDirectory: anchors)
        _ = try vault.verify()
        _ = try? vault.repair(dryRun: true)
        _ = try? vault.repair()
    }

    @Test("stray files in data/log are left alone by verify, the dry run and the repair")
    func strayFilesLeftAlone() throws {
        let fixture = try RepairVault()
        let (path, anchors) = try fixture.copy("stray")
        try Data("notes".utf8).write(to: URL(fileURLWithPath: path + "/data/log/README"))
        let vault = try FileVault.open(at: path, credential: RepairVault.credential, anchorDirectory: anchors)
        #expect(try vault.verify().allSatisfy(\.isIgnored))
        #expect(try vault.repair(dryRun: true).needed == false)
        try Self.flip(Self.log(path, 5), 72 + 65 + 3)
        let damaged = try FileVault.open(at: path, credential: RepairVault.credential, anchorDirectory: anchors)
        _ = try damaged.repair()
        #expect(FileManager.default.contents(atPath: path + "/data/log/README") == Data("notes".utf8))
    }
}

@Suite("file vault, format 2: a repair killed at any step loses nothing silently")
struct RepairKillTests {
    /// Damages a fresh copy of a small vault (its anchor forgotten), then kills `vault-stress
    /// repair` at each of its steps: whatever a kill leaves either still reports damage (a rerun
    /// of the repair finds it and says what is lost) or is the repaired vault, at the sequence
    /// the dry run named; never an intact-looking vault that quietly lost something.
    func killAtEachStep(_ name: String, build: (FileVault) throws -> Void, damage: (String) throws -> Void) throws {
        let directory = TemporaryDirectory()
        let keyfile = directory.sub("keyfile")
        try Data((String(repeating: "42", count: 32) + "\n").utf8).write(to: URL(fileURLWithPath: keyfile))
        let pristine = directory.sub("pristine")
        try build(try FileVault.create(at: pristine, credential: testKey, anchorDirectory: nil))
        var step = 1
        var sawDamaged = false
        while true {
            let path = directory.sub("\(name)-\(step)"), anchors = directory.sub("\(name)-\(step)-anchors")
            try FileManager.default.copyItem(atPath: pristine, toPath: path)
            try damage(path)
            let expected = try FileVault.open(at: path, credential: testKey, anchorDirectory: anchors).repair(dryRun: true).sequence
            let run = try startStress(["repair", path, keyfile], environment: ["KEYSMITH_FAULT_EXIT_AT": String(step), "KEYSMITH_ANCHOR_DIR": anchors])
            run.0.waitUntilExit()
            let finished = run.0.terminationStatus == 0
            #expect(finished || run.0.terminationStatus == 86, "\(name) step \(step): \(stressErrors(run.0))")
            let vault = try FileVault.open(at: path, credential: testKey, anchorDirectory: anchors)
            let left = try vault.verify().filter { !$0.isSuperseded }
            if left.isEmpty {
                // The switch happened: what the repair found is written down beside the old files.
                let asides = try FileManager.default.contentsOfDirectory(atPath: path).filter { $0.hasPrefix("damaged-") }
                #expect(asides.contains { FileManager.default.fileExists(atPath: path + "/" + $0 + "/report") },
                        "\(name) step \(step): no report beside the replaced files")
                let sequence = try vault.sequence
                #expect(sequence == expected, "\(name) step \(step): the vault looks intact at \(sequence), not the repair's \(expected)")
            } else {
                sawDamaged = true
                let report = try vault.repair()
                #expect(report.needed && (!report.losses.isEmpty || report.absentItemsMayBeLost), "\(name) step \(step): \(report)")
            }
            #expect(try vault.verify().filter { !$0.isSuperseded }.isEmpty, "\(name) step \(step)")
            try? FileManager.default.removeItem(atPath: path)
            if finished { break }
            step += 1
            try #require(step < 60)
        }
        print("repair fault injection (\(name)): killed at each of \(step - 1) steps, then finished")
        #expect(sawDamaged && step > 4)
    }

    @Test("logs after a gap: never moved out of the vault before the switch")
    func logsAfterAGap() throws {
        try killAtEachStep("gap", build: { vault in
            for index in 1...5 { try RepairAttackTests.put(vault, "a", "v\(index)") }
            try RepairAttackTests.put(vault, "late", "x")
        }, damage: { path in try FileManager.default.removeItem(atPath: RepairAttackTests.log(path, 4)) })
    }

    @Test("a lost log directory: no empty one is made before the switch (the old snapshot would read as intact)")
    func lostLogDirectory() throws {
        try killAtEachStep("log-directory", build: { vault in
            try RepairAttackTests.put(vault, "a", "v1")
            try vault.compact()
            try RepairAttackTests.put(vault, "a", "v2")
        }, damage: { path in try FileManager.default.removeItem(atPath: path + "/data/log") })
    }
}

/// The repair's rule as a property: for random histories and random single damages (a byte of a
/// log, the snapshot or a history flipped; a frame cut out of a log; a log swapped with a fork's),
/// a repair either refuses (changing nothing) or keeps only values the real history held: each
/// item at its newest value, or, when the report names it as possibly stale (or says absent items
/// may be lost), at a value it had; never a fork's. Where every loss is complete (a provable
/// chain), every item is at its newest value. `KEYSMITH_REPAIR_PROPERTY_CASES` sets how many
/// cases (default 40).
@Suite("file vault, format 2: the repair's rule on random histories and damages")
struct RepairPropertyTests {
    typealias Generator = SplitMix64

    @Test("a repair keeps only what the real history held, all of it where the chain is provable")
    func randomHistoriesAndDamages() throws {
        let cases = Int(ProcessInfo.processInfo.environment["KEYSMITH_REPAIR_PROPERTY_CASES"] ?? "") ?? 40
        var refused = 0, repaired = 0, exact = 0, needlessStale = 0
        for seed in 0..<cases {
            var random = Generator(state: UInt64(seed) &* 7919 &+ 17)
            let directory = TemporaryDirectory()
            let path = directory.sub("v"), anchors = directory.sub("anchors"), fork = directory.sub("fork")
            let accounts = ["a", "b", "c", "d"]
            var history: [String: [String?]] = [:]
            let vault = try FileVault.create(at: path, credential: testKey, anchorDirectory: anchors)
            let commits = Int.random(in: 4...9, using: &random)
            let compactAt = Int.random(in: 0...commits, using: &random)
            let forkAt = Int.random(in: 1..<commits, using: &random)
            for commit in 1...commits {
                let account = accounts.randomElement(using: &random)!
                if Bool.random(using: &random), let last = history[account]?.last, last != nil {
                    try vault.delete(genericKey(account))
                    history[account, default: []].append(nil)
                } else {
                    let second = accounts.randomElement(using: &random)!
                    try vault.perform([.upsert(ItemAttributes(key: genericKey(account)), secret: Data("\(account)\(commit)".utf8)),
                                       .upsert(ItemAttributes(key: genericKey(second + "+")), secret: Data("\(second)+\(commit)".utf8))])
                    history[account, default: []].append("\(account)\(commit)")
                    history[second + "+", default: []].append("\(second)+\(commit)")
                }
                if commit == forkAt { try FileManager.default.copyItem(atPath: path, toPath: fork) }
                if commit == compactAt { try vault.compact() }
            }
            let forked = try FileVault.open(at: fork, credential: testKey, anchorDirectory: nil)
            for index in 0..<(commits - forkAt) {
                try forked.upsert(ItemAttributes(key: genericKey(accounts[index % accounts.count])), secret: Data("fork\(index)".utf8))
            }
            // One damage.
            let logs = try FileManager.default.contentsOfDirectory(atPath: path + "/data/log").sorted()
            let histories = try FileManager.default.contentsOfDirectory(atPath: path + "/data").filter { $0.hasPrefix("history-") }
            let kind = Int.random(in: 0..<4, using: &random)
            var what = ""
            if kind == 0 || logs.isEmpty {
                let file = logs.isEmpty || Bool.random(using: &random) ? "data/snapshot"
                    : (Bool.random(using: &random) || histories.isEmpty ? "data/log/" + logs.randomElement(using: &random)! : "data/" + histories[0])
                let size = try RepairAttackTests.bytes(path + "/" + file).count
                let offset = Int.random(in: 0..<size, using: &random)
                try RepairAttackTests.flip(path + "/" + file, offset, UInt8(1) << UInt8.random(in: 0..<8, using: &random))
                what = "byte \(offset) of \(file)"
            } else if kind == 1 {
                let log = logs.randomElement(using: &random)!
                let count = try RepairAttackTests.bytes(path + "/data/log/" + log)[39]
                if count >= 2 { try RepairAttackTests.dropFirstFrame(path + "/data/log/" + log) }
                what = "a frame cut out of \(log)"
            } else {
                let forkLogs = try FileManager.default.contentsOfDirectory(atPath: fork + "/data/log").sorted()
                if let log = forkLogs.last {
                    try? FileManager.default.removeItem(atPath: path + "/data/log/" + log)
                    try FileManager.default.copyItem(atPath: fork + "/data/log/" + log, toPath: path + "/data/log/" + log)
                }
                what = "the fork's newest log put in"
            }
            let context = "seed \(seed) (\(what))"
            let before = try RepairAttackTests.tree(path)
            let damaged = try FileVault.open(at: path, credential: testKey, anchorDirectory: anchors)
            let report: VaultRepairReport
            do {
                report = try damaged.repair()
            } catch {
                refused += 1
                #expect(try RepairAttackTests.tree(path) == before, "\(context): a refused repair changed files")
                continue
            }
            repaired += 1
            let stale = Set(report.itemsMaybeStale)
            var allNewest = true
            for (account, values) in history {
                let read = try RepairAttackTests.value(damaged, account)
                #expect(read == nil || values.contains(read), "\(context): \(account) reads \(read ?? "-"), a value the history never had")
                if read != values.last! {
                    allNewest = false
                    if read == nil {
                        #expect(report.absentItemsMayBeLost || stale.contains(genericKey(account)), "\(context): \(account) gone unreported")
                    } else {
                        #expect(stale.contains(genericKey(account)), "\(context): \(account) not at its newest and not reported")
                    }
                }
            }
            if report.losses.allSatisfy(\.complete) && report.unreadableRecords.isEmpty {
                #expect(allNewest, "\(context): a provable chain, but an item is not at its newest: \(report.losses)")
            }
            if allNewest { exact += 1 } else { needlessStale += report.itemsMaybeStale.count }
            #expect(try damaged.verify().filter { !$0.isSuperseded }.isEmpty, "\(context)")
        }
        print("repair property: \(cases) cases: \(refused) refused (a rollback or fork at the anchor), \(repaired) repaired, "
              + "\(exact) of them with every item at its newest value, \(needlessStale) items named as possibly stale in the others")
    }
}

@Suite("file vault: a format 1 handle follows an upgrade made by another handle or process")
struct UpgradeFollowTests {
    @Test("opened with a key, a format 1 handle reads, searches, counts and writes the upgraded vault; with a passphrase it says to open it again")
    func readerFollowsUpgrade() throws {
        let directory = TemporaryDirectory()
        let root = directory.sub("v")
        try copyFormat1Fixture("format1-three", to: root)
        let reader = try FileVault.open(at: root, credential: testKey, anchorDirectory: directory.sub("anchors"))
        #expect(reader.formatVersion == 1)
        #expect(try RepairAttackTests.value(reader, "one") == "secret-one")
        // Another process upgrades the vault while this handle is open.
        let upgrade = try startStress(["upgrade", root, try Self.keyfile(directory)])
        upgrade.0.waitUntilExit()
        #expect(upgrade.0.terminationStatus == 0, "\(stressErrors(upgrade.0))")
        #expect(FileVault.formatVersion(at: root) == 2)
        #expect(try RepairAttackTests.value(reader, "two") == "secret-two")
        #expect(try reader.search(ItemQuery()).count == 3)
        try RepairAttackTests.put(reader, "four", "secret-four")
        #expect(try RepairAttackTests.value(FileVault.open(at: root, credential: testKey, anchorDirectory: directory.sub("anchors")), "four")
                == "secret-four")
        #expect(try reader.verify().filter { !$0.isSuperseded }.isEmpty)
    }

    @Test("a format 1 handle does not follow into another vault the same key opens, put in the vault's place")
    func followRefusesAnotherVault() throws {
        let directory = TemporaryDirectory()
        let root = directory.sub("v")
        try copyFormat1Fixture("format1-three", to: root)
        let reader = try FileVault.open(at: root, credential: testKey, anchorDirectory: nil)
        #expect(try RepairAttackTests.value(reader, "one") == "secret-one")
        let other = directory.sub("other")
        try RepairAttackTests.put(try FileVault.create(at: other, credential: testKey, anchorDirectory: nil), "one", "planted")
        for name in ["snapshot", "log", "header", "header.backup"] { try? FileManager.default.removeItem(atPath: root + "/" + name) }
        for name in ["header", "header.backup", "data"] { try FileManager.default.copyItem(atPath: other + "/" + name, toPath: root + "/" + name) }
        #expect(throws: KeysmithError.self) { try RepairAttackTests.value(reader, "one") }
        #expect(throws: KeysmithError.self) { try RepairAttackTests.put(reader, "two", "x") }
    }

    /// The raw key of the format 1 fixtures (32 bytes 0x42), as a keyfile.
    static func keyfile(_ directory: TemporaryDirectory) throws -> String {
        let path = directory.sub("keyfile")
        try Data((String(repeating: "42", count: 32) + "\n").utf8).write(to: URL(fileURLWithPath: path))
        return path
    }
}
