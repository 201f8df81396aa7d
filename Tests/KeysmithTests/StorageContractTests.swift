import Foundation
import Keysmith
import Testing

// Types as people write them by mistake: each declares an attribute the capability protocols
// would have ignored. Keysmith refuses them at first use.
struct LabelNotAdopted: GenericPasswordSecureStorable, CreateableSecureStorable, ReadableSecureStorable {
    let store: MemoryStore
    var secureStore: any SecureStore { store }
    let service = "s"
    let account = "a"
    var secret = Data("x".utf8)
    let label = "never stored"
}

struct GenericOfWrongType: GenericPasswordSecureStorable, CreateableSecureStorable {
    let store: MemoryStore
    var secureStore: any SecureStore { store }
    let service = "s"
    let account = "a"
    var secret = Data("x".utf8)
    let generic = Data([1])  // Data, not Data?: the requirement's default would win
}

struct MisspelledAttribute: GenericPasswordSecureStorable, CreateableSecureStorable, LabellableSecureStorable {
    let store: MemoryStore
    var secureStore: any SecureStore { store }
    let service = "s"
    let account = "a"
    var secret = Data("x".utf8)
    var label: String { "ok" }
    let Comment = "capitalized"
}

/// A type that adopts no label protocol, updating an item someone labelled.
struct PlainMail: GenericPasswordSecureStorable, CreateableSecureStorable {
    let store: MemoryStore
    var secureStore: any SecureStore { store }
    let service = "mail"
    let account = "bob"
    var secret: Data
}

@Suite("the storage contract in the core")
struct StorageContractTests {
    @Test("updates through the capability protocols keep the metadata the type does not declare")
    func capabilityUpdatesKeepMetadata() throws {
        let store = MemoryStore()
        let key = ItemKey.genericPassword(service: "mail", account: "bob")
        try store.create(ItemAttributes(key: key, label: "Bob's mail", comment: "c", isInvisible: true), secret: Data("0".utf8))
        try PlainMail(store: store, secret: Data("1".utf8)).updateInSecureStore()
        try PlainMail(store: store, secret: Data("2".utf8)).saveInSecureStore()
        try Keysmith.update(Data("3".utf8), forAccount: "bob", inService: "mail", in: store)
        try Keysmith.set(Data("4".utf8), forAccount: "bob", inService: "mail", in: store)
        let read = try #require(try store.read(key))
        #expect(read.secret == Data("4".utf8))
        #expect(read.attributes.label == "Bob's mail")
        #expect(read.attributes.comment == "c")
        #expect(read.attributes.isInvisible == true)
    }

    @Test("a property named like an attribute that would be ignored is an error at first use, naming the fix")
    func ignoredAttributesAreErrors() throws {
        let store = MemoryStore()
        let notAdopted = #expect(throws: KeysmithError.self) { try LabelNotAdopted(store: store).createInSecureStore() }
        #expect(notAdopted?.code == .invalidArgument)
        #expect(notAdopted?.message.contains("LabellableSecureStorable") == true)
        #expect(throws: KeysmithError.self) { _ = try LabelNotAdopted(store: store).readFromSecureStore() }
        let wrongType = #expect(throws: KeysmithError.self) { try GenericOfWrongType(store: store).createInSecureStore() }
        #expect(wrongType?.message.contains("Optional<Data>") == true)
        let misspelled = #expect(throws: KeysmithError.self) { try MisspelledAttribute(store: store).createInSecureStore() }
        #expect(misspelled?.message.contains("`comment`") == true)
        #expect(try store.search(ItemQuery()).isEmpty)
        // A correct type passes the same check.
        try PlainMail(store: store, secret: Data("ok".utf8)).createInSecureStore()
    }

    @Test("an internet password attribute of the wrong type or name does not compile", arguments: [
        ("let securityDomain = \"realm\"\n    let path: String? = nil\n    let authenticationType = InternetAuthenticationType.httpBasic", false),
        ("let securityDomain: String? = nil\n    let path: String? = nil\n    let authenticationType = \"http-basic\"", false),
        ("let secDomain: String? = \"realm\"\n    let path: String? = nil\n    let authenticationType = InternetAuthenticationType.httpBasic", false),
        ("let securityDomain: String? = nil\n    let path = \"/a\"\n    let authenticationType = InternetAuthenticationType.httpBasic", false),
        ("let securityDomain: String? = \"realm\"\n    let path: String? = \"/a\"\n    let authenticationType = InternetAuthenticationType.httpBasic", true),
    ])
    func wrongAttributesDoNotCompile(_ declarations: String, compiles: Bool) throws {
        let source = """
            import Keysmith
            struct Login: InternetPasswordSecureStorable {
                let server = "example.com"
                let port = 443
                let internetProtocol = InternetProtocol.https
                let account = "bob"
                \(declarations)
            }
            """
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("keysmith-typecheck-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("Login.swift")
        try Data(source.utf8).write(to: file)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["swiftc", "-typecheck", "-I", productsDirectory + "/Modules", file.path]
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        let text = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect((process.terminationStatus == 0) == compiles, "\(text)")
        if !compiles { #expect(text.contains("does not conform to protocol 'InternetPasswordSecureStorable'")) }
    }

    @Test("dump, debugDescription and description of records and results never show the secret")
    func redactedEverywhere() throws {
        let store = MemoryStore()
        let secret = "hunter2-SECRET"
        try store.create(ItemAttributes(key: .genericPassword(service: "s", account: "a"), label: "L"), secret: Data(secret.utf8))
        let internet = ItemKey.internetPassword(InternetPasswordKey(server: "h", internetProtocol: .https, account: "a"))
        try store.create(ItemAttributes(key: internet), secret: Data(secret.utf8))
        let record = try #require(try store.read(.genericPassword(service: "s", account: "a")))
        let generic = try GenericPasswordResult(record: record)
        let web = try InternetPasswordResult(record: try #require(try store.read(internet)))
        let bytes = Array(secret.utf8).map(String.init).joined(separator: ", ")
        for value in [record as Any, generic as Any, web as Any] {
            var dumped = ""
            dump(value, to: &dumped)
            for text in [dumped, String(describing: value), String(reflecting: value)] {
                #expect(!text.contains(secret), "\(text)")
                // The first byte, 'h', as dump prints Data's bytes: a line of its own ("- 104"); a
                // date's digits elsewhere in the dump may hold "104" (one run's did).
                #expect(!text.split(separator: "\n").contains { $0.trimmingCharacters(in: .whitespaces) == "- 104" }, "\(text)")
                #expect(!text.contains(bytes))
            }
            #expect(dumped.contains("redacted"))
        }
    }

    @Test("identity is bytes: equal keys hash equal, and canonically equivalent spellings are different keys")
    func identityIsBytes() {
        let a = ItemKey.genericPassword(service: "caf\u{E9}", account: "x")
        let b = ItemKey.genericPassword(service: "cafe\u{301}", account: "x")
        #expect(a != b)
        #expect(a == ItemKey.genericPassword(service: "caf\u{E9}", account: "x"))
        #expect(a.hashValue == ItemKey.genericPassword(service: "caf\u{E9}", account: "x").hashValue)
        #expect(ItemQuery(service: "caf\u{E9}").matches(ItemAttributes(key: a)))
        #expect(!ItemQuery(service: "caf\u{E9}").matches(ItemAttributes(key: b)))
        // Field boundaries count: ("ab", "c") is not ("a", "bc").
        #expect(ItemKey.genericPassword(service: "ab", account: "c") != ItemKey.genericPassword(service: "a", account: "bc"))
    }
}

/// The directory of the built products.
let productsDirectory: String = {
    let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    var url = URL(fileURLWithPath: executable).deletingLastPathComponent()
    if url.pathExtension == "xctest" { url.deleteLastPathComponent() }
    return url.path
}()
