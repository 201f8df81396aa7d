import Foundation
import Keysmith
import KeysmithTokens
import Testing

/// The storage contract every store keeps, beyond CRUD: identity by bytes, read back through a
/// second handle, versions and conditional writes raced by handles and processes, limits at the
/// door, the update rule and the reserved namespace.
@Suite("store conformance: the storage contract")
struct StoreContractTests {
    static let generic = ItemKey.genericPassword(service: "mail", account: "bob")
    static let internet = ItemKey.internetPassword(InternetPasswordKey(
        server: "example.com", port: 443, internetProtocol: .https, authenticationType: .htmlForm,
        securityDomain: "realm", path: "/login", account: "bob"))
    static let token = ItemKey.keysmithRecord(KeysmithRecordKey(recordType: .oauthToken, service: "mail", account: "bob"))

    @Test("what one handle writes, a second handle opened afterwards reads back, every attribute and the version",
          arguments: StoreFixture.all)
    func readsBackThroughAnotherHandle(_ fixture: StoreFixture) throws {
        try fixture.withOpened { opened in
            let store = opened.store
            let written: [(ItemAttributes, Data)] = [
                (ItemAttributes(key: Self.generic, label: "Mail", comment: "c", itemDescription: "d", creator: "tests",
                                type: "password", isInvisible: true, isNegative: false, generic: Data([1, 2])), Data("one".utf8)),
                (ItemAttributes(key: Self.internet, label: "Web", isNegative: true), Data([0, 255])),
                (ItemAttributes(key: Self.token, label: "token"), Data("record".utf8)),
            ]
            try store.perform(written.map { .create($0.0, secret: $0.1) })
            let before = try store.read(written.map(\.0.key))
            let other = try opened.reopen()
            for ((attributes, secret), first) in zip(written, before) {
                let read = try #require(try other.read(attributes.key), "\(attributes.key)")
                #expect(read.attributes == attributes.merged(over: nil))
                #expect(read.secret == secret)
                #expect(read.info.version == first?.info.version)
                #expect(read.info.version != .unversioned)
            }
            // And the other way: what the second handle writes, the first reads.
            try other.update(ItemAttributes(key: Self.generic), secret: Data("two".utf8))
            #expect(try store.read(Self.generic)?.secret == Data("two".utf8))
            #expect(try store.read(Self.generic)?.attributes.label == "Mail")
        }
    }

    @Test("the two Unicode spellings of a name are two items in every store, also through another handle",
          arguments: StoreFixture.all)
    func unicodeSpellingsAreDistinct(_ fixture: StoreFixture) throws {
        try fixture.withOpened { opened in
            let store = opened.store
            let precomposed = "caf\u{E9}", decomposed = "cafe\u{301}"
            #expect(precomposed == decomposed)  // Swift's String says equal; identity does not
            let composedKey = ItemKey.genericPassword(service: precomposed, account: "bob")
            let decomposedKey = ItemKey.genericPassword(service: decomposed, account: "bob")
            #expect(composedKey != decomposedKey)
            #expect(Set([composedKey, decomposedKey]).count == 2)
            try store.create(ItemAttributes(key: composedKey), secret: Data("first".utf8))
            try store.create(ItemAttributes(key: decomposedKey), secret: Data("second".utf8))
            for handle in [store, try opened.reopen()] {
                #expect(try handle.read(composedKey)?.secret == Data("first".utf8))
                #expect(try handle.read(decomposedKey)?.secret == Data("second".utf8))
                #expect(try handle.search(ItemQuery(service: precomposed)).map(\.key) == [composedKey])
                #expect(try handle.search(ItemQuery(service: decomposed)).map(\.key) == [decomposedKey])
                #expect(try handle.read(composedKey)?.key.service?.utf8.count == 5)
            }
            try store.update(ItemAttributes(key: decomposedKey), secret: Data("third".utf8))
            #expect(try store.read(composedKey)?.secret == Data("first".utf8))
            try store.delete(composedKey)
            #expect(try opened.reopen().read(decomposedKey)?.secret == Data("third".utf8))
        }
    }

    @Test("a batch read returns one entry per key, in order, nil for the missing", arguments: StoreFixture.all)
    func batchReads(_ fixture: StoreFixture) throws {
        try fixture.withOpened { opened in
            try opened.store.create(ItemAttributes(key: Self.generic), secret: Data("g".utf8))
            try opened.store.create(ItemAttributes(key: Self.internet), secret: Data("i".utf8))
            let missing = ItemKey.genericPassword(service: "mail", account: "nobody")
            for handle in [opened.store, try opened.reopen()] {
                let read = try handle.read([Self.internet, missing, Self.generic, Self.internet])
                #expect(read.map { $0?.secret } == [Data("i".utf8), nil, Data("g".utf8), Data("i".utf8)])
                #expect(try handle.read([]).isEmpty)
            }
        }
    }

    @Test("a secret at the store's limit is kept and read back; one byte more is refused and nothing of its batch is written",
          arguments: StoreFixture.all)
    func limitsAtTheDoor(_ fixture: StoreFixture) throws {
        try fixture.withOpened { opened in
            let store = opened.store
            let limits = store.limits
            let atLimit = Data(repeating: 0x5A, count: limits.maximumSecretSize)
            try store.create(ItemAttributes(key: Self.generic), secret: atLimit)
            #expect(try opened.reopen().read(Self.generic)?.secret == atLimit)

            let other = ItemKey.genericPassword(service: "mail", account: "other")
            let tooLarge = #expect(throws: KeysmithError.self) {
                try store.perform([
                    .create(ItemAttributes(key: other), secret: Data("small".utf8)),
                    .update(ItemAttributes(key: Self.generic), secret: Data(count: limits.maximumSecretSize + 1)),
                ])
            }
            #expect(tooLarge?.code == .limitExceeded)
            #expect(tooLarge?.message.contains(String(limits.maximumSecretSize)) == true)
            #expect(try store.read(other) == nil)
            #expect(try opened.reopen().read(Self.generic)?.secret == atLimit)

            let longLabel = String(repeating: "l", count: limits.maximumFieldSize + 1)
            let tooLong = #expect(throws: KeysmithError.self) {
                try store.create(ItemAttributes(key: other, label: longLabel), secret: Data("x".utf8))
            }
            #expect(tooLong?.code == .limitExceeded)
            let longAccount = ItemKey.genericPassword(service: "mail", account: String(repeating: "a", count: limits.maximumFieldSize + 1))
            #expect(throws: KeysmithError.self) { try store.create(ItemAttributes(key: longAccount), secret: Data()) }
            #expect(try store.search(ItemQuery()).map(\.key) == [Self.generic])
        }
    }

    @Test("a batch giving a secret or a field over a limit is refused for its size, whatever else in it would fail, and writes nothing",
          arguments: StoreFixture.all)
    func limitsBeforeOtherErrors(_ fixture: StoreFixture) throws {
        try fixture.withOpened { opened in
            let store = opened.store
            let limits = store.limits
            try store.create(ItemAttributes(key: Self.generic, label: "kept"), secret: Data("kept".utf8))
            let stored = try #require(try store.read(Self.generic))
            let missing = ItemKey.genericPassword(service: "mail", account: "missing")
            let fresh = ItemKey.genericPassword(service: "mail", account: "fresh")
            // Each batch opens with operations that would fail on their own (a duplicate create,
            // an update of a missing item, a stale version) and ends with one over a limit.
            let oversized: [StoreOperation] = [
                .update(ItemAttributes(key: Self.generic), secret: Data(count: limits.maximumSecretSize + 1)),
                .upsert(ItemAttributes(key: fresh, comment: String(repeating: "c", count: limits.maximumFieldSize + 1)), secret: Data()),
                .replace(SecureRecord(info: stored.info, secret: Data(count: limits.maximumSecretSize + 1))),
                .restore(SecureRecord(info: ItemInfo(attributes: ItemAttributes(key: fresh, label: String(repeating: "l", count: limits.maximumFieldSize + 1)),
                                                     created: stored.info.created, modified: stored.info.modified, version: stored.info.version),
                                      secret: Data("x".utf8))),
            ]
            for last in oversized {
                let error = #expect(throws: KeysmithError.self) {
                    try store.perform([
                        .create(ItemAttributes(key: Self.generic), secret: Data("duplicate".utf8)),
                        .update(ItemAttributes(key: missing), secret: Data("missing".utf8)),
                        .delete(Self.generic, ifVersion: ItemVersion(rawValue: "stale")),
                        .create(ItemAttributes(key: missing), secret: Data("never".utf8)),
                        last,
                    ])
                }
                #expect(error?.code == .limitExceeded, "\(last.key)")
            }
            for handle in [store, try opened.reopen()] {
                #expect(try handle.read(Self.generic) == stored)
                #expect(try handle.search(ItemQuery()).map(\.key) == [Self.generic])
            }
        }
    }

    @Test("every name and metadata field one byte over the limit is refused, naming the field, and nothing is written",
          arguments: StoreFixture.all)
    func everyFieldHasALimit(_ fixture: StoreFixture) throws {
        func internet(server: String = "host", securityDomain: String = "", path: String = "", account: String = "a") -> ItemKey {
            .internetPassword(InternetPasswordKey(server: server, internetProtocol: .https, securityDomain: securityDomain, path: path, account: account))
        }
        try fixture.withOpened { opened in
            let store = opened.store
            let long = String(repeating: "f", count: store.limits.maximumFieldSize + 1)
            let generic = ItemKey.genericPassword(service: "mail", account: "field")
            let cases: [(field: String, attributes: ItemAttributes)] = [
                ("label", ItemAttributes(key: generic, label: long)),
                ("comment", ItemAttributes(key: generic, comment: long)),
                ("description", ItemAttributes(key: generic, itemDescription: long)),
                ("creator", ItemAttributes(key: generic, creator: long)),
                ("type", ItemAttributes(key: generic, type: long)),
                ("generic data", ItemAttributes(key: generic, generic: Data(long.utf8))),
                ("service", ItemAttributes(key: .genericPassword(service: long, account: "a"))),
                ("account", ItemAttributes(key: .genericPassword(service: "mail", account: long))),
                ("server", ItemAttributes(key: internet(server: long))),
                ("security domain", ItemAttributes(key: internet(securityDomain: long))),
                ("path", ItemAttributes(key: internet(path: long))),
                ("account", ItemAttributes(key: internet(account: long))),
            ]
            for (field, attributes) in cases {
                let error = #expect(throws: KeysmithError.self, "\(field)") {
                    try store.perform([.upsert(attributes, secret: Data("x".utf8))])
                }
                #expect(error?.code == .limitExceeded, "\(field)")
                #expect(error?.message.contains("the \(field) of an item is \(long.utf8.count) bytes") == true, "\(field)")
                #expect(error?.message.contains(long) == false, "the message quotes no field")
            }
            let left = try opened.reopen().search(ItemQuery(namespace: .any))
            #expect(left.isEmpty)
        }
    }

    @Test("every write gives a new version; a conditional update or delete at a stale version is refused and changes nothing",
          arguments: StoreFixture.all)
    func conditionalWrites(_ fixture: StoreFixture) throws {
        try fixture.withOpened { opened in
            let store = opened.store
            try store.create(ItemAttributes(key: Self.generic, label: "L"), secret: Data("1".utf8))
            let first = try #require(try store.read(Self.generic)).info.version
            try store.update(ItemAttributes(key: Self.generic), secret: Data("2".utf8), ifVersion: first)
            let second = try #require(try store.read(Self.generic)).info.version
            #expect(second != first)
            #expect(try store.search(ItemQuery()).first?.version == second)

            let other = try opened.reopen()
            let stale = #expect(throws: KeysmithError.self) {
                try other.update(ItemAttributes(key: Self.generic), secret: Data("lost".utf8), ifVersion: first)
            }
            #expect(stale?.code == .writeConflict)
            let staleDelete = #expect(throws: KeysmithError.self) { try other.delete(Self.generic, ifVersion: first) }
            #expect(staleDelete?.code == .writeConflict)
            #expect(try store.read(Self.generic)?.secret == Data("2".utf8))

            let missing = #expect(throws: KeysmithError.self) {
                try store.update(ItemAttributes(key: Self.internet), secret: Data(), ifVersion: second)
            }
            #expect(missing?.code == .itemNotFound)
            try other.delete(Self.generic, ifVersion: second)
            #expect(try store.read(Self.generic) == nil)
            // A re-created item never comes back at an old version.
            try store.create(ItemAttributes(key: Self.generic), secret: Data("3".utf8))
            let third = try #require(try store.read(Self.generic)).info.version
            #expect(third != first && third != second)
        }
    }

    @Test("replace writes a read record back only if unchanged, exactly as given; a stale or deleted one is refused with its batch",
          arguments: StoreFixture.all)
    func replaceIsCompareAndSwap(_ fixture: StoreFixture) throws {
        try fixture.withOpened { opened in
            let store = opened.store
            try store.create(ItemAttributes(key: Self.generic, label: "L", comment: "C", isInvisible: true), secret: Data("1".utf8))
            let original = try #require(try store.read(Self.generic))
            var changed = original
            changed.secret = Data("2".utf8)
            changed.info.attributes.label = "M"
            changed.info.attributes.comment = nil  // exactly as given: nothing is merged back
            try store.perform([.replace(changed)])
            let read = try #require(try opened.reopen().read(Self.generic))
            #expect(read.secret == Data("2".utf8))
            #expect(read.attributes.label == "M")
            #expect(read.attributes.comment == nil)
            #expect(read.attributes.isInvisible == true)
            #expect(read.info.created == original.info.created)
            #expect(read.info.version != original.info.version)
            // The record read before the write is stale now: refused, and its batch with it.
            let other = ItemKey.genericPassword(service: "mail", account: "carol")
            let stale = #expect(throws: KeysmithError.self) {
                try store.perform([.create(ItemAttributes(key: other), secret: Data("x".utf8)), .replace(changed)])
            }
            #expect(stale?.code == .writeConflict)
            #expect(try store.read(other) == nil)
            #expect(try store.read(Self.generic)?.secret == Data("2".utf8))
            // Deleted since it was read: not found.
            let current = try #require(try store.read(Self.generic))
            try opened.reopen().delete(Self.generic)
            let gone = #expect(throws: KeysmithError.self) { try store.perform([.replace(current)]) }
            #expect(gone?.code == .itemNotFound)
            #expect(try store.read(Self.generic) == nil)
        }
    }

    @Test("the update rule: metadata not given are kept, an empty string clears, flags change only when given",
          arguments: StoreFixture.all)
    func updateRule(_ fixture: StoreFixture) throws {
        try fixture.withOpened { opened in
            let store = opened.store
            try store.create(ItemAttributes(key: Self.generic, label: "L", comment: "C", creator: "me", type: "t",
                                            isInvisible: true, generic: Data([9])), secret: Data("1".utf8))
            try store.update(ItemAttributes(key: Self.generic), secret: Data("2".utf8))
            try store.upsert(ItemAttributes(key: Self.generic, comment: ""), secret: Data("3".utf8))
            let read = try #require(try opened.reopen().read(Self.generic))
            #expect(read.secret == Data("3".utf8))
            #expect(read.attributes == ItemAttributes(key: Self.generic, label: "L", comment: nil, creator: "me", type: "t",
                                                      isInvisible: true, isNegative: false, generic: Data([9])))
            try store.update(ItemAttributes(key: Self.generic, label: "M", isInvisible: false), secret: Data("4".utf8))
            let changed = try #require(try store.read(Self.generic))
            #expect(changed.attributes.label == "M")
            #expect(changed.attributes.isInvisible == false)
            #expect(changed.attributes.type == "t")
        }
    }

    @Test("Keysmith's records are listed only when asked for, and never collide with a user's item of the same names",
          arguments: StoreFixture.all)
    func reservedNamespace(_ fixture: StoreFixture) throws {
        try fixture.withOpened { opened in
            let store = opened.store
            try store.create(ItemAttributes(key: Self.token), secret: Data("token".utf8))
            try store.create(ItemAttributes(key: Self.generic), secret: Data("password".utf8))
            for handle in [store, try opened.reopen()] {
                #expect(try handle.search(ItemQuery()).map(\.key) == [Self.generic])
                #expect(try handle.search(ItemQuery(service: "mail", account: "bob")).map(\.key) == [Self.generic])
                #expect(try handle.search(ItemQuery(namespace: .keysmith)).map(\.key) == [Self.token])
                #expect(try handle.search(ItemQuery(recordType: .oauthToken)).map(\.key) == [Self.token])
                #expect(try handle.search(ItemQuery(recordType: .auditEntry)).isEmpty)
                #expect(try Set(handle.search(ItemQuery(namespace: .any)).map(\.key)) == [Self.generic, Self.token])
                #expect(try handle.read(Self.generic)?.secret == Data("password".utf8))
                #expect(try handle.read(Self.token)?.secret == Data("token".utf8))
            }
            try store.delete(Self.generic)
            #expect(try store.read(Self.token)?.secret == Data("token".utf8))
        }
    }

    @Test("a scan reads every matching item once, secret and version included, a chunk at a time, while another handle writes",
          arguments: StoreFixture.all)
    func scanReadsEveryItemOnce(_ fixture: StoreFixture) throws {
        try fixture.withOpened { opened in
            let store = opened.store
            func key(_ index: Int) -> ItemKey { .genericPassword(service: "scan", account: "a\(index)") }
            let count = 150
            try store.perform((0..<count).map { .create(ItemAttributes(key: key($0), label: "L\($0)"), secret: Data("s\($0)".utf8)) } + [
                .create(ItemAttributes(key: .genericPassword(service: "other", account: "a1")), secret: Data("other".utf8)),
                .create(ItemAttributes(key: .keysmithRecord(KeysmithRecordKey(recordType: .oauthToken, service: "scan", account: "t"))),
                        secret: Data("token".utf8)),
            ])
            let versions = Dictionary(uniqueKeysWithValues: try store.search(ItemQuery(service: "scan")).map { ($0.key, $0.version) })
            let other = try opened.reopen()
            var seen: [ItemKey: SecureRecord] = [:]
            var chunks = 0
            var lastProgress = ScanProgress(examined: 0, total: 0)
            try store.forEachRecord(matching: ItemQuery(service: "scan"), chunkSize: 16) { records, progress in
                chunks += 1
                #expect(!records.isEmpty && records.count <= 16, "chunk \(chunks) holds \(records.count)")
                #expect(progress.examined >= lastProgress.examined, "progress went back")
                lastProgress = progress
                for record in records {
                    #expect(seen[record.key] == nil, "\(record.key) came twice")
                    seen[record.key] = record
                }
                if chunks == 1 {
                    // Between chunks: a create, a delete and an update by another handle.
                    try other.perform([
                        .create(ItemAttributes(key: key(1000)), secret: Data("late".utf8)),
                        .delete(key(7)),
                        .update(ItemAttributes(key: key(8)), secret: Data("new".utf8)),
                    ])
                }
            }
            #expect(chunks >= count / 16)
            // Every item that existed throughout came once, with its secret, metadata and version.
            for index in 0..<count where index != 7 && index != 8 {
                let record = try #require(seen[key(index)], "a\(index) was not read")
                #expect(record.secret == Data("s\(index)".utf8))
                #expect(record.attributes.label == "L\(index)")
                #expect(record.info.version == versions[key(index)])
            }
            // The one written meanwhile came at its old or its new version, never torn.
            if let changed = seen[key(8)] {
                #expect(changed.secret == Data("s8".utf8) || changed.secret == Data("new".utf8))
                #expect(changed.attributes.label == "L8")
            }
            // Nothing outside the query: not another service, not Keysmith's records.
            #expect(seen.keys.allSatisfy { $0.service == "scan" && $0.kind == .genericPassword })
            // The reserved namespace is scanned when asked for.
            var tokens: [SecureRecord] = []
            try store.forEachRecord(matching: ItemQuery(service: "scan", recordType: .oauthToken), chunkSize: 0) { tokens += $0 ; _ = $1 }
            #expect(tokens.map(\.secret) == [Data("token".utf8)])
            // A scan that matches nothing calls nothing.
            try store.forEachRecord(matching: ItemQuery(service: "nothing")) { _, _ in Issue.record("called for no match") }
        }
    }

    @Test("two handles racing conditional increments lose no update, and racing creates each key is won once",
          arguments: StoreFixture.all)
    func handlesRace(_ fixture: StoreFixture) async throws {
        let opened = try fixture.open()
        defer { opened.cleanup() }
        let handles = [opened.store, try opened.reopen()]
        let perHandle = fixture.name == "Secret Service" ? 8 : 40
        let wins = try await withThrowingTaskGroup(of: Int.self) { group in
            for handle in handles {
                group.addTask {
                    var won = 0
                    for index in 0..<10 {
                        do {
                            try handle.create(ItemAttributes(key: .genericPassword(service: "race", account: "k\(index)")), secret: Data())
                            won += 1
                        } catch let error as KeysmithError where error.code == .duplicateItem {}
                    }
                    for _ in 0..<perHandle { try increment(handle, Self.generic) }
                    return won
                }
            }
            return try await group.reduce(0, +)
        }
        #expect(wins == 10)
        let final = try #require(try opened.store.read(Self.generic))
        #expect(String(decoding: final.secret, as: UTF8.self) == String(perHandle * handles.count))
    }

    @Test("two processes racing conditional increments lose no update, and racing creates each key is won exactly once",
          arguments: StoreFixture.shared)
    func processesRace(_ fixture: StoreFixture) throws {
        try fixture.withOpened { opened in
            let count = fixture.name == "Secret Service" ? 8 : 60
            let results = try race(opened, [["increment", "mail", "bob", String(count)], ["increment", "mail", "bob", String(count)]])
            #expect(results.allSatisfy { $0.last?.hasPrefix("conflicts ") == true })
            let final = try #require(try opened.reopen().read(Self.generic))
            #expect(String(decoding: final.secret, as: UTF8.self) == String(2 * count))

            let keys = 20
            let creates = try race(opened, [["create", "c", String(keys)], ["create", "c", String(keys)]])
            let won = creates.flatMap { $0 }.filter { $0.hasPrefix("won ") }.map { $0.split(separator: " ") }
            #expect(won.count == keys)
            #expect(Set(won.map { $0[1] }).count == keys)
            let store = try opened.reopen()
            for line in won {
                let stored = try store.read(.genericPassword(service: "race", account: "c-\(line[1])"))
                #expect(stored.map { String(decoding: $0.secret, as: UTF8.self) } == String(line[2]))
            }
        }
    }

    @Test("a named lock has one holder: a second handle, in this process or another, cannot take it until it is released; other names are free",
          arguments: StoreFixture.shared)
    func namedLocks(_ fixture: StoreFixture) throws {
        try fixture.withOpened { opened in
            let first = try #require(opened.store as? any ExclusiveLocking)
            let second = try #require(try opened.reopen() as? any ExclusiveLocking)
            let held = try #require(try first.tryExclusiveLock(named: "refresh news/alice"))
            #expect(try first.tryExclusiveLock(named: "refresh news/alice") == nil, "the same handle, again")
            #expect(try second.tryExclusiveLock(named: "refresh news/alice") == nil, "another handle")
            #expect(try race(opened, [["lock", "refresh news/alice"]]) == [["busy"]], "another process")
            let other = try #require(try second.tryExclusiveLock(named: "refresh news/bob"), "another name is free")
            #expect(try held.isHeld() && other.isHeld())
            other.release()
            #expect(try !other.isHeld() && held.isHeld(), "a released lock says so; the other stays held")
            held.release()
            held.release()  // again: nothing
            #expect(try !held.isHeld())
            #expect(try race(opened, [["lock", "refresh news/alice"]]) == [["held"]])
            let again = try #require(try second.tryExclusiveLock(named: "refresh news/alice"))
            again.release()
        }
    }

    @Test("the in-memory store's named lock has one holder among its users")
    func memoryLocks() throws {
        let store = MemoryStore()
        let held = try #require(try store.tryExclusiveLock(named: "n"))
        #expect(try store.tryExclusiveLock(named: "n") == nil)
        #expect(try store.tryExclusiveLock(named: "m") != nil)
        #expect(try held.isHeld())
        held.release()
        #expect(try !held.isHeld())
        #expect(try store.tryExclusiveLock(named: "n") != nil)
    }

    @Test("two processes revoking scopes of one token keep every revocation and one intact audit chain",
          arguments: StoreFixture.shared)
    func tokenRevocationRace(_ fixture: StoreFixture) throws {
        try fixture.withOpened { opened in
            let keeper = TokenKeeper(store: opened.store)
            let scopes = (0..<12).map { "s\($0)" }
            let response = Data(#"{"access_token":"AT","token_type":"Bearer","scope":"\#(scopes.joined(separator: " "))"}"#.utf8)
            try keeper.importResponse(response, service: "news", account: "bob", requested: Set(try scopes.map { try Scope($0) }))
            _ = try race(opened, [["revoke", "news", "bob"] + scopes[0..<6], ["revoke", "news", "bob"] + scopes[6...]])
            let after = TokenKeeper(store: try opened.reopen())
            let token = try #require(try after.token(service: "news", account: "bob"))
            for scope in scopes { #expect(token.state(of: try Scope(scope), at: Date()) == .revoked, "\(scope)") }
            let verification = try after.verifyAuditLog()
            #expect(verification.isIntact, "\(verification.problems)")
            #expect(verification.entries == 13)
            #expect(try after.auditEntries().map(\.sequence) == Array(1...13))
        }
    }

    @Test("migration into this store: a conflict fails with nothing written, or is skipped or overwritten; Keysmith records move as records",
          arguments: StoreFixture.all)
    func migrationConflicts(_ fixture: StoreFixture) throws {
        try fixture.withOpened { opened in
            let destination = opened.store
            let source = MemoryStore()
            try source.create(ItemAttributes(key: Self.generic, label: "source"), secret: Data("from source".utf8))
            try source.create(ItemAttributes(key: Self.token), secret: Data("token".utf8))
            try destination.create(ItemAttributes(key: Self.generic, label: "dest"), secret: Data("in destination".utf8))

            let failed = #expect(throws: KeysmithError.self) { try StoreMigration.migrate(from: source, to: destination) }
            #expect(failed?.code == .duplicateItem)
            #expect(try destination.read(Self.token) == nil)

            let skipped = try StoreMigration.migrate(from: source, to: destination, conflicts: .skip, removeFromSource: true)
            #expect(skipped.skipped == [Self.generic])
            #expect(skipped.copied == [Self.token])
            #expect(try destination.read(Self.generic)?.secret == Data("in destination".utf8))
            #expect(try opened.reopen().read(Self.token)?.key.namespace == .keysmith)
            #expect(try source.read(Self.generic) != nil)
            #expect(try source.read(Self.token) == nil)

            let overwritten = try StoreMigration.migrate(from: source, to: destination, conflicts: .overwrite)
            #expect(overwritten.overwritten == [Self.generic])
            let read = try #require(try opened.reopen().read(Self.generic))
            #expect(read.secret == Data("from source".utf8))
            #expect(read.attributes.label == "source")
        }
    }
}

/// Adds one to a counter item with a conditional write, retrying on conflicts.
func increment(_ store: any SecureStore, _ key: ItemKey) throws {
    while true {
        do {
            if let record = try store.read(key) {
                let value = try #require(Int(String(decoding: record.secret, as: UTF8.self)))
                try store.update(ItemAttributes(key: key), secret: Data(String(value + 1).utf8), ifVersion: record.info.version)
            } else {
                try store.create(ItemAttributes(key: key), secret: Data("1".utf8))
            }
            return
        } catch let error as KeysmithError where error.code == .writeConflict || error.code == .duplicateItem {
            continue
        }
    }
}
