import Foundation
import Keysmith
import KeysmithVault
import Testing

@Suite("file vault")
struct VaultTests {
    @Test("a vault reopened from disk holds what was written, with every attribute")
    func persistence() throws {
        let directory = TemporaryDirectory()
        let vault = try FileVault.create(at: directory.path, credential: .passphrase("pw"), scrypt: .testing)
        let attributes = ItemAttributes(key: genericKey("bob"), label: "Bob", comment: "c", isNegative: true, generic: Data([1, 2]))
        try vault.create(attributes, secret: Data("secret-one".utf8))
        try vault.create(ItemAttributes(key: genericKey("gone")), secret: Data("x".utf8))
        try vault.delete(genericKey("gone"))

        let reopened = try FileVault.open(at: directory.path, credential: .passphrase("pw"))
        let record = try #require(try reopened.read(genericKey("bob")))
        #expect(record.attributes == attributes.merged(over: nil))
        #expect(record.secret == Data("secret-one".utf8))
        #expect(try reopened.read(genericKey("gone")) == nil)
        #expect(try reopened.search(ItemQuery()).count == 1)
    }

    @Test("a wrong passphrase, a wrong keyfile and the wrong kind of credential each fail authentication")
    func wrongCredentials() throws {
        let directory = TemporaryDirectory()
        _ = try FileVault.create(at: directory.sub("p"), credential: .passphrase("right"), scrypt: .testing)
        let wrong = #expect(throws: KeysmithError.self) { try FileVault.open(at: directory.sub("p"), credential: .passphrase("wrong")) }
        #expect(wrong?.code == .authenticationFailed)
        #expect(wrong?.message == "wrong passphrase for this vault (or its header was altered)")

        let keyfile = directory.sub("keyfile")
        try VaultCredential.generateKeyfile(at: keyfile)
        #expect(try mode(keyfile) == 0o600)
        _ = try FileVault.create(at: directory.sub("k"), credential: .keyfile(at: keyfile))
        let otherKeyfile = directory.sub("other")
        try VaultCredential.generateKeyfile(at: otherKeyfile)
        let wrongKey = #expect(throws: KeysmithError.self) { try FileVault.open(at: directory.sub("k"), credential: .keyfile(at: otherKeyfile)) }
        #expect(wrongKey?.code == .authenticationFailed)

        let kind = #expect(throws: KeysmithError.self) { try FileVault.open(at: directory.sub("k"), credential: .passphrase("x")) }
        #expect(kind?.code == .authenticationFailed)
        #expect(kind?.message.contains("keyfile") == true)

        let missing = #expect(throws: KeysmithError.self) { try FileVault.open(at: directory.sub("none"), credential: testKey) }
        #expect(missing?.code == .storeUnavailable)

        try "not hex\n".write(toFile: directory.sub("bad-keyfile"), atomically: true, encoding: .utf8)
        let badKeyfile = #expect(throws: KeysmithError.self) { try FileVault.open(at: directory.sub("k"), credential: .keyfile(at: directory.sub("bad-keyfile"))) }
        #expect(badKeyfile?.code == .invalidArgument)

        let exists = #expect(throws: KeysmithError.self) { try VaultCredential.generateKeyfile(at: keyfile) }
        #expect(exists?.code == .duplicateItem)
    }

    @Test("the directory is 0700 and every file 0600")
    func modes() throws {
        let directory = TemporaryDirectory()
        let vault = try FileVault.create(at: directory.sub("a/b/vault"), credential: testKey)
        try vault.create(ItemAttributes(key: genericKey("x")), secret: Data("1".utf8))
        try vault.compact()
        try vault.create(ItemAttributes(key: genericKey("y")), secret: Data("2".utf8))
        #expect(try mode(directory.sub("a/b/vault")) == 0o700)
        #expect(try mode(directory.sub("a/b/vault/data")) == 0o700)
        #expect(try mode(directory.sub("a/b/vault/data/log")) == 0o700)
        let names = try files(in: directory.sub("a/b/vault"))
        #expect(names.contains("header") && names.contains("header.backup") && names.contains("data/snapshot") && names.contains("lock"))
        for name in names {
            #expect(try mode(directory.sub("a/b/vault/\(name)")) == 0o600, "\(name)")
        }
    }

    @Test("creating a vault where one exists, or in a non-empty directory, is refused and touches nothing")
    func createRefusesExisting() throws {
        let directory = TemporaryDirectory()
        let vault = try FileVault.create(at: directory.path, credential: testKey)
        try vault.create(ItemAttributes(key: genericKey("x")), secret: Data("1".utf8))
        let again = #expect(throws: KeysmithError.self) { try FileVault.create(at: directory.path, credential: .passphrase("p"), scrypt: .testing) }
        #expect(again?.code == .duplicateItem)
        #expect(try FileVault.open(at: directory.path, credential: testKey).read(genericKey("x"))?.secret == Data("1".utf8))
    }

    @Test("no secret, service or account appears in the clear in any file")
    func nothingInTheClear() throws {
        let directory = TemporaryDirectory()
        let vault = try FileVault.create(at: directory.path, credential: .passphrase("pw"), scrypt: .testing)
        try vault.create(ItemAttributes(key: .genericPassword(service: "VISIBLESERVICE", account: "VISIBLEACCOUNT"), label: "VISIBLELABEL"),
                         secret: Data("VISIBLESECRET".utf8))
        try vault.compact()
        try vault.create(ItemAttributes(key: .genericPassword(service: "VISIBLESERVICE", account: "OTHERACCOUNT")), secret: Data("VISIBLESECRET2".utf8))
        try vault.changeCredential(to: .passphrase("pw2"), scrypt: .testing)
        for name in try files(in: directory.path) {
            let contents = try Data(contentsOf: URL(fileURLWithPath: directory.sub(name)))
            for needle in ["VISIBLE", "pw2", "OTHERACCOUNT"] {
                #expect(contents.range(of: Data(needle.utf8)) == nil, "\(needle) in \(name)")
            }
        }
    }

    @Test("changing the passphrase re-wraps the key: the new one opens, the old one fails, records stay")
    func changeCredential() throws {
        let directory = TemporaryDirectory()
        let vault = try FileVault.create(at: directory.path, credential: .passphrase("old"), scrypt: .testing)
        try vault.create(ItemAttributes(key: genericKey("a")), secret: Data("1".utf8))
        let logBefore = try Data(contentsOf: URL(fileURLWithPath: directory.sub("data/log/0000000000000001")))
        try vault.changeCredential(to: .passphrase("new"), scrypt: .testing)
        // Records were not rewritten.
        #expect(try Data(contentsOf: URL(fileURLWithPath: directory.sub("data/log/0000000000000001"))) == logBefore)
        let old = #expect(throws: KeysmithError.self) { try FileVault.open(at: directory.path, credential: .passphrase("old")) }
        #expect(old?.code == .authenticationFailed)
        let reopened = try FileVault.open(at: directory.path, credential: .passphrase("new"))
        #expect(try reopened.read(genericKey("a"))?.secret == Data("1".utf8))

        // From passphrase to keyfile.
        try reopened.changeCredential(to: testKey)
        #expect(try FileVault.open(at: directory.path, credential: testKey).read(genericKey("a"))?.secret == Data("1".utf8))
        // A handle opened before both changes keeps working: the data key it holds is still current.
        try vault.create(ItemAttributes(key: genericKey("b")), secret: Data("2".utf8))
        #expect(try reopened.read(genericKey("b"))?.secret == Data("2".utf8))
    }

    @Test("rekey re-encrypts every record under a new data key and keeps only that key")
    func rekey() throws {
        let directory = TemporaryDirectory()
        let vault = try FileVault.create(at: directory.path, credential: testKey)
        try vault.perform((0..<50).map { .create(ItemAttributes(key: genericKey("a\($0)")), secret: Data("s\($0)".utf8)) })
        let otherProcess = try FileVault.open(at: directory.path, credential: testKey)
        let headerBefore = try String(contentsOfFile: directory.sub("header"), encoding: .utf8)
        try vault.rekey()
        let headerAfter = try String(contentsOfFile: directory.sub("header"), encoding: .utf8)
        #expect(headerBefore.contains("\"epoch\" : 1"))
        #expect(!headerAfter.contains("\"epoch\" : 1"))
        #expect(headerAfter.contains("\"epoch\" : 2"))
        #expect(try files(in: directory.path).filter { $0.hasPrefix("data/log/") }.isEmpty)
        let reopened = try FileVault.open(at: directory.path, credential: testKey)
        for index in 0..<50 {
            #expect(try reopened.read(genericKey("a\(index)"))?.secret == Data("s\(index)".utf8))
        }
        // A vault opened before the rekey picks up the new key from the header.
        #expect(try otherProcess.read(genericKey("a7"))?.secret == Data("s7".utf8))
        try otherProcess.create(ItemAttributes(key: genericKey("after")), secret: Data("z".utf8))
        #expect(try reopened.read(genericKey("after"))?.secret == Data("z".utf8))
        #expect(try reopened.verify().isEmpty)
    }

    @Test("a rekey after a credential change on the same handle wraps the new key under the new credential")
    func rekeyAfterCredentialChange() throws {
        let directory = TemporaryDirectory()
        let vault = try FileVault.create(at: directory.path, credential: testKey)
        try vault.create(ItemAttributes(key: genericKey("a")), secret: Data("1".utf8))
        try vault.changeCredential(to: .passphrase("new"), scrypt: .testing)
        try vault.rekey()
        try vault.changeCredential(to: .passphrase("newer"), scrypt: .testing)
        try vault.rekey()
        let reopened = try FileVault.open(at: directory.path, credential: .passphrase("newer"))
        #expect(try reopened.read(genericKey("a"))?.secret == Data("1".utf8))
        #expect(try reopened.verify().isEmpty)
    }

    @Test("logs are compacted into a snapshot as they pile up, and nothing is lost")
    func automaticCompaction() throws {
        let directory = TemporaryDirectory()
        let vault = try FileVault.create(at: directory.path, credential: testKey)
        for index in 0..<1100 {
            try vault.upsert(ItemAttributes(key: genericKey("k\(index % 40)")), secret: Data("v\(index)".utf8))
        }
        let statistics = try vault.statistics
        #expect(statistics.items == 40)
        #expect(statistics.logFiles <= 32)
        #expect(FileManager.default.fileExists(atPath: directory.sub("data/snapshot")))
        let reopened = try FileVault.open(at: directory.path, credential: testKey)
        for key in 0..<40 {
            let last = (0..<1100).last { $0 % 40 == key }!
            #expect(try reopened.read(genericKey("k\(key)"))?.secret == Data("v\(last)".utf8))
        }
    }

    /// A vault whose snapshot holds `a0`…`a299`, with two logs on top (updates, deletes and
    /// creates), and the same state in a memory store, for the bulk-commit tests.
    private func layeredVault(_ directory: TemporaryDirectory) throws -> (FileVault, MemoryStore) {
        let vault = try FileVault.create(at: directory.path, credential: testKey)
        let model = MemoryStore()
        func both(_ operations: [StoreOperation]) throws {
            try vault.perform(operations)
            try model.perform(operations)
        }
        try both((0..<300).map { .create(ItemAttributes(key: genericKey("a\($0)"), label: "first"), secret: Data("v\($0)".utf8)) })
        try vault.compact()
        try both((0..<20).map { .update(ItemAttributes(key: genericKey("a\($0 * 3)"), comment: "log"), secret: Data("log\($0)".utf8)) }
                 + (0..<10).map { .delete(genericKey("a\($0 * 3 + 1)")) })
        try both((0..<15).map { .create(ItemAttributes(key: genericKey("b\($0)")), secret: Data("b\($0)".utf8)) })
        #expect(try vault.statistics.logFiles == 2)
        return (vault, model)
    }

    /// Every item of the model reads back from `vault` with its secret and metadata, and the
    /// vault holds nothing else.
    private func expectSame(_ vault: FileVault, as model: MemoryStore, _ comment: Comment) throws {
        let expected = try model.search(ItemQuery())
        #expect(try Set(vault.search(ItemQuery()).map(\.key)) == Set(expected.map(\.key)), comment)
        for info in expected {
            let read = try #require(try vault.read(info.key), comment)
            #expect(read.secret == (try model.read(info.key))?.secret, comment)
            #expect(read.attributes == info.attributes, comment)
        }
    }

    @Test("a batch of 4,096 items or more is committed and compacted at once, merged over the snapshot and the logs before it")
    func bulkBatchIsCompactedAtOnce() throws {
        let directory = TemporaryDirectory()
        let (vault, model) = try layeredVault(directory)
        // Updates of snapshot records and of records the logs changed, deletes of both, creates,
        // a record created and deleted within the batch, and 4,100 new items.
        var operations: [StoreOperation] = (0..<300).filter { $0 % 3 != 1 || $0 >= 30 }.map {
            .update(ItemAttributes(key: genericKey("a\($0)"), label: "bulk"), secret: Data("bulk\($0)".utf8))
        }
        operations += (0..<5).map { .delete(genericKey("b\($0)")) } + [.delete(genericKey("a299"))]
        operations += (0..<4100).map { .create(ItemAttributes(key: genericKey("c\($0)")), secret: Data("c\($0)".utf8)) }
        operations += [.create(ItemAttributes(key: genericKey("gone")), secret: Data("x".utf8)), .delete(genericKey("gone"))]
        operations += [.update(ItemAttributes(key: genericKey("c7"), comment: "twice"), secret: Data("c7 again".utf8))]
        try vault.perform(operations)
        try model.perform(operations)
        let statistics = try vault.statistics
        #expect(statistics.logFiles == 0)
        #expect(statistics.items == 300 - 10 - 1 + 10 + 4100)
        try expectSame(vault, as: model, "the handle that wrote")
        let reopened = try FileVault.open(at: directory.path, credential: testKey)
        try expectSame(reopened, as: model, "a new handle")
        #expect(try reopened.verify().isEmpty)
        // Small writes after it go to logs again.
        try reopened.update(ItemAttributes(key: genericKey("c1")), secret: Data("after".utf8))
        #expect(try reopened.statistics.logFiles == 1)
        #expect(try vault.read(genericKey("c1"))?.secret == Data("after".utf8))
    }

    @Test("a bulk batch on a damaged vault is committed as a log, and the damage stays reported")
    func bulkBatchOnDamagedVault() throws {
        let directory = TemporaryDirectory()
        let vault = try FileVault.create(at: directory.path, credential: testKey)
        try vault.perform((0..<300).map { .create(ItemAttributes(key: genericKey("a\($0)")), secret: Data("v\($0)".utf8)) })
        try vault.compact()
        // Flip a byte at the end of the snapshot: the last record's body (every record is live:
        // no log supersedes any of them).
        let snapshot = directory.sub("data/snapshot")
        var bytes = try Data(contentsOf: URL(fileURLWithPath: snapshot))
        bytes[bytes.count - 1] ^= 0x01
        try bytes.write(to: URL(fileURLWithPath: snapshot))
        let damaged = try FileVault.open(at: directory.path, credential: testKey)
        #expect(try damaged.verify().contains { !$0.isSuperseded })
        let operations: [StoreOperation] = (0..<4100).map { .create(ItemAttributes(key: genericKey("c\($0)")), secret: Data("c\($0)".utf8)) }
        try damaged.perform(operations)
        #expect(try damaged.statistics.logFiles == 1)
        #expect(try damaged.verify().contains { !$0.isSuperseded })
        #expect(try damaged.read(genericKey("c4099"))?.secret == Data("c4099".utf8))
        #expect(try FileVault.open(at: directory.path, credential: testKey).read(genericKey("c0"))?.secret == Data("c0".utf8))
    }

    @Test("when the compaction after a bulk batch fails, the batch is still committed and reported so; the next write compacts")
    func bulkBatchCompactionFailure() throws {
        let directory = TemporaryDirectory()
        let (vault, model) = try layeredVault(directory)
        // A directory where the compaction's temporary snapshot goes: it cannot be created.
        let blocker = directory.sub("data/.tmp-snapshot-\(getpid())")
        try FileManager.default.createDirectory(atPath: blocker, withIntermediateDirectories: false)
        let operations: [StoreOperation] = (0..<4100).map { .create(ItemAttributes(key: genericKey("c\($0)")), secret: Data("c\($0)".utf8)) }
        try vault.perform(operations)  // committed: no error
        try model.perform(operations)
        #expect(try vault.statistics.logFiles == 3)
        try expectSame(vault, as: model, "after the failed compaction")
        try expectSame(try FileVault.open(at: directory.path, credential: testKey), as: model, "a new handle")
        try FileManager.default.removeItem(atPath: blocker)
        try vault.perform([.create(ItemAttributes(key: genericKey("next")), secret: Data("n".utf8))])
        try model.perform([.create(ItemAttributes(key: genericKey("next")), secret: Data("n".utf8))])
        #expect(try vault.statistics.logFiles == 0)
        try expectSame(vault, as: model, "after the next write compacted")
    }

    @Test("two vault handles on one directory see each other's writes")
    func twoHandles() throws {
        let directory = TemporaryDirectory()
        let first = try FileVault.create(at: directory.path, credential: testKey)
        let second = try FileVault.open(at: directory.path, credential: testKey)
        try first.create(ItemAttributes(key: genericKey("a")), secret: Data("1".utf8))
        #expect(try second.read(genericKey("a"))?.secret == Data("1".utf8))
        let duplicate = #expect(throws: KeysmithError.self) { try second.create(ItemAttributes(key: genericKey("a")), secret: Data("2".utf8)) }
        #expect(duplicate?.code == .duplicateItem)
        try second.compact()
        try first.update(ItemAttributes(key: genericKey("a")), secret: Data("3".utf8))
        #expect(try second.read(genericKey("a"))?.secret == Data("3".utf8))
        try first.compact()
        #expect(try second.read(genericKey("a"))?.secret == Data("3".utf8))
        #expect(try second.search(ItemQuery()).count == 1)
    }

    @Test("the default vault path is KEYSMITH_VAULT, else XDG_DATA_HOME/keysmith, else ~/.local/share/keysmith")
    func defaultLocation() throws {
        let path = FileVault.defaultPath
        if let explicit = ProcessInfo.processInfo.environment["KEYSMITH_VAULT"], !explicit.isEmpty {
            #expect(path == explicit)
        } else if let data = ProcessInfo.processInfo.environment["XDG_DATA_HOME"], data.hasPrefix("/") {
            #expect(path == data + "/keysmith")
        } else {
            #expect(path == NSHomeDirectory() + "/.local/share/keysmith")
        }
    }
}
