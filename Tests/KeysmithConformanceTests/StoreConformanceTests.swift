import Foundation
import Keysmith
import Testing

/// The suite every store must pass. Each test runs once per store in `StoreFixture.all`; a new
/// backend joins by adding a case there.
@Suite("store conformance")
struct StoreConformanceTests {
    static let generic = ItemKey.genericPassword(service: "mail", account: "bob")
    static let internet = ItemKey.internetPassword(
        InternetPasswordKey(
            server: "example.com", port: 443, internetProtocol: .https, authenticationType: .htmlForm,
            securityDomain: "realm", path: "/login", account: "bob"))

    @Test("create, read, update and delete one item", arguments: StoreFixture.all)
    func crud(_ fixture: StoreFixture) throws {
        try fixture.withStore { store throws in
            let attributes = ItemAttributes(key: Self.generic, label: "Bob's mail", comment: "c", type: "password")
            try store.create(attributes, secret: Data("one".utf8))
            let created = try #require(try store.read(Self.generic))
            #expect(created.secret == Data("one".utf8))
            #expect(created.attributes == attributes.merged(over: nil))

            var changed = attributes
            changed.label = "renamed"
            try store.update(changed, secret: Data("two".utf8))
            let updated = try #require(try store.read(Self.generic))
            #expect(updated.secret == Data("two".utf8))
            #expect(updated.attributes.label == "renamed")
            #expect(updated.info.created == created.info.created)
            #expect(updated.info.modified >= created.info.modified)

            try store.delete(Self.generic)
            #expect(try store.read(Self.generic) == nil)
            #expect(try store.search(ItemQuery()).isEmpty)
        }
    }

    @Test("an internet password keeps every attribute", arguments: StoreFixture.all)
    func internetPassword(_ fixture: StoreFixture) throws {
        try fixture.withStore { store throws in
            let attributes = ItemAttributes(
                key: Self.internet, label: "Example", comment: "comment", itemDescription: "Web form",
                creator: "tests", type: "web", isInvisible: true, isNegative: true)
            try store.create(attributes, secret: Data("pw".utf8))
            let read = try #require(try store.read(Self.internet))
            #expect(read.attributes == attributes.merged(over: nil))
            #expect(read.secret == Data("pw".utf8))
        }
    }

    @Test("a generic password keeps its application data", arguments: StoreFixture.all)
    func genericData(_ fixture: StoreFixture) throws {
        try fixture.withStore { store throws in
            let attributes = ItemAttributes(key: Self.generic, generic: Data([0, 1, 2, 255]))
            try store.create(attributes, secret: Data("pw".utf8))
            #expect(try store.read(Self.generic)?.attributes.generic == Data([0, 1, 2, 255]))
        }
    }

    @Test("creating an existing item throws duplicate and changes nothing", arguments: StoreFixture.all)
    func duplicate(_ fixture: StoreFixture) throws {
        try fixture.withStore { store throws in
            try store.create(ItemAttributes(key: Self.generic), secret: Data("one".utf8))
            let error = #expect(throws: KeysmithError.self) {
                try store.create(ItemAttributes(key: Self.generic, label: "x"), secret: Data("two".utf8))
            }
            #expect(error?.code == .duplicateItem)
            let read = try #require(try store.read(Self.generic))
            #expect(read.secret == Data("one".utf8))
            #expect(read.attributes.label == nil)
        }
    }

    @Test("reads of a missing item return nil; update and delete throw not found", arguments: StoreFixture.all)
    func notFound(_ fixture: StoreFixture) throws {
        try fixture.withStore { store throws in
            #expect(try store.read(Self.generic) == nil)
            #expect(try store.search(ItemQuery(account: "nobody")).isEmpty)
            let update = #expect(throws: KeysmithError.self) {
                try store.update(ItemAttributes(key: Self.generic), secret: Data())
            }
            #expect(update?.code == .itemNotFound)
            let delete = #expect(throws: KeysmithError.self) { try store.delete(Self.generic) }
            #expect(delete?.code == .itemNotFound)
        }
    }

    @Test("search finds items by any subset of attributes", arguments: StoreFixture.all)
    func search(_ fixture: StoreFixture) throws {
        try fixture.withStore { store throws in
            let items: [ItemAttributes] = [
                ItemAttributes(key: .genericPassword(service: "mail", account: "bob"), label: "L1"),
                ItemAttributes(key: .genericPassword(service: "mail", account: "alice"), type: "t"),
                ItemAttributes(key: .genericPassword(service: "chat", account: "bob")),
                ItemAttributes(key: Self.internet, label: "L1"),
                ItemAttributes(
                    key: .internetPassword(
                        InternetPasswordKey(server: "ftp.example.com", port: 21, internetProtocol: .ftp, account: "carol"))),
            ]
            try store.perform(items.map { .create($0, secret: Data("s".utf8)) })

            func accounts(_ query: ItemQuery) throws -> [String] {
                try store.search(query).map { $0.key.account }.sorted()
            }
            #expect(try store.search(ItemQuery()).count == 5)
            #expect(try accounts(ItemQuery(service: "mail")) == ["alice", "bob"])
            #expect(try accounts(ItemQuery(account: "bob")) == ["bob", "bob", "bob"])
            #expect(try accounts(ItemQuery(service: "mail", account: "bob")) == ["bob"])
            #expect(try accounts(ItemQuery(kind: .internetPassword)) == ["bob", "carol"])
            #expect(try accounts(ItemQuery(kind: .genericPassword, account: "bob")) == ["bob", "bob"])
            #expect(try accounts(ItemQuery(server: "example.com")) == ["bob"])
            #expect(try accounts(ItemQuery(port: 21)) == ["carol"])
            #expect(try accounts(ItemQuery(internetProtocol: .https, path: "/login")) == ["bob"])
            #expect(try accounts(ItemQuery(label: "L1")) == ["bob", "bob"])
            #expect(try accounts(ItemQuery(type: "t")) == ["alice"])
            #expect(try accounts(ItemQuery(service: "nope")) == [])
        }
    }

    @Test("names are case-sensitive: Bob and bob are two accounts", arguments: StoreFixture.all)
    func caseSensitive(_ fixture: StoreFixture) throws {
        try fixture.withStore { store throws in
            let upper = ItemKey.genericPassword(service: "mail", account: "Bob")
            let lower = ItemKey.genericPassword(service: "mail", account: "bob")
            try store.create(ItemAttributes(key: upper), secret: Data("upper".utf8))
            try store.create(ItemAttributes(key: lower), secret: Data("lower".utf8))
            #expect(try store.read(upper)?.secret == Data("upper".utf8))
            #expect(try store.read(lower)?.secret == Data("lower".utf8))
            #expect(try store.search(ItemQuery(account: "Bob")).count == 1)
        }
    }

    @Test(
        "unicode service and account names round-trip",
        arguments: StoreFixture.all,
        [("邮件", "李雷"), ("mail 📬", "zoë"), ("сервис", "пользователь"), ("a\u{301}", "tab\tname")])
    func unicodeNames(_ fixture: StoreFixture, names: (String, String)) throws {
        try fixture.withStore { store throws in
            let key = ItemKey.genericPassword(service: names.0, account: names.1)
            try store.create(ItemAttributes(key: key, label: "🔑 \(names.1)"), secret: Data("s".utf8))
            let read = try #require(try store.read(key))
            #expect(read.key == key)
            #expect(read.attributes.label == "🔑 \(names.1)")
            #expect(try store.search(ItemQuery(service: names.0)).map(\.key) == [key])
        }
    }

    @Test(
        "secrets of any content and size read back byte for byte",
        arguments: StoreFixture.all,
        [Data(), Data((0...255).map(UInt8.init)), Data(repeating: 0, count: 17), StoreFixture.mebibyte])
    func secrets(_ fixture: StoreFixture, secret: Data) throws {
        try fixture.withStore { store throws in
            try store.create(ItemAttributes(key: Self.generic), secret: secret)
            #expect(try store.read(Self.generic)?.secret == secret)
        }
    }

    @Test("a batch is all or nothing", arguments: StoreFixture.all)
    func batchAtomic(_ fixture: StoreFixture) throws {
        try fixture.withStore { store throws in
            try store.create(ItemAttributes(key: Self.generic), secret: Data("keep".utf8))
            let other = ItemKey.genericPassword(service: "mail", account: "new")
            let error = #expect(throws: KeysmithError.self) {
                try store.perform([
                    .create(ItemAttributes(key: other), secret: Data("x".utf8)),
                    .update(ItemAttributes(key: Self.generic), secret: Data("changed".utf8)),
                    .create(ItemAttributes(key: Self.generic), secret: Data("dup".utf8)),
                ])
            }
            #expect(error?.code == .duplicateItem)
            #expect(try store.read(other) == nil)
            #expect(try store.read(Self.generic)?.secret == Data("keep".utf8))

            // A batch that sees its own earlier operations.
            try store.perform([
                .create(ItemAttributes(key: other), secret: Data("1".utf8)),
                .update(ItemAttributes(key: other), secret: Data("2".utf8)),
                .delete(Self.generic),
            ])
            #expect(try store.read(other)?.secret == Data("2".utf8))
            #expect(try store.read(Self.generic) == nil)
        }
    }

    @Test("restore keeps the dates it is given", arguments: StoreFixture.all)
    func restoreKeepsDates(_ fixture: StoreFixture) throws {
        try fixture.withStore { store throws in
            // Arbitrary fractions: every Date must come back bit for bit.
            let created = Date(timeIntervalSinceReferenceDate: 620_000_000.123_456_789)
            let modified = Date().addingTimeInterval(0.000_000_1)
            let record = SecureRecord(
                info: ItemInfo(attributes: ItemAttributes(key: Self.internet), created: created, modified: modified),
                secret: Data("r".utf8))
            try store.perform([.restore(record)])
            let read = try #require(try store.read(Self.internet))
            #expect(read.hasSameContents(as: record))
        }
    }

    @Test("many tasks writing and reading at once lose nothing", arguments: StoreFixture.all)
    func concurrentTasks(_ fixture: StoreFixture) async throws {
        try await fixture.withStoreAsync { store in
            let tasks = 32
            let perTask = 8
            try await withThrowingTaskGroup(of: Void.self) { group in
                for task in 0..<tasks {
                    group.addTask {
                        for index in 0..<perTask {
                            let key = ItemKey.genericPassword(service: "task\(task)", account: "item\(index)")
                            try store.create(ItemAttributes(key: key), secret: Data("\(task).\(index)".utf8))
                            #expect(try store.read(key)?.secret == Data("\(task).\(index)".utf8))
                            _ = try store.search(ItemQuery(service: "task\(task)"))
                        }
                    }
                }
                try await group.waitForAll()
            }
            #expect(try store.search(ItemQuery()).count == tasks * perTask)

            // Many tasks updating one item: every update lands, the last one wins, none is torn.
            try store.create(ItemAttributes(key: Self.generic), secret: Data(repeating: 0, count: 1024))
            try await withThrowingTaskGroup(of: Void.self) { group in
                for task in 1...16 {
                    group.addTask {
                        try store.update(ItemAttributes(key: Self.generic), secret: Data(repeating: UInt8(task), count: 1024))
                        let read = try #require(try store.read(Self.generic))
                        #expect(Set(read.secret).count == 1)
                    }
                }
                try await group.waitForAll()
            }
        }
    }

    @Test("invalid keys are rejected before anything is stored", arguments: StoreFixture.all)
    func invalidKeys(_ fixture: StoreFixture) throws {
        try fixture.withStore { store throws in
            let bad: [ItemKey] = [
                .genericPassword(service: "", account: "a"),
                .genericPassword(service: "s", account: ""),
                .genericPassword(service: "s", account: "nul\u{0}"),
                .internetPassword(InternetPasswordKey(server: "h", port: 70000, internetProtocol: .ssh, account: "a")),
                .internetPassword(InternetPasswordKey(server: "", internetProtocol: .ssh, account: "a")),
            ]
            for key in bad {
                let error = #expect(throws: KeysmithError.self) {
                    try store.create(ItemAttributes(key: key), secret: Data("x".utf8))
                }
                #expect(error?.code == .invalidArgument)
            }
            #expect(try store.search(ItemQuery()).isEmpty)
        }
    }
}
