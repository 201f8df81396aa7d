import Foundation
import Keysmith
import Testing

// The guide's example, as a newcomer writes it: attributes and a secret, no method bodies.
struct MailAccount: GenericPasswordSecureStorable, CreateableSecureStorable, ReadableSecureStorable,
    DeleteableSecureStorable, LabellableSecureStorable, CommentableSecureStorable
{
    let store: MemoryStore
    var secureStore: any SecureStore { store }
    let service = "mail.example.com"
    let account: String
    var secret = Data()
    var label: String { "Mail for \(account)" }
    var comment: String { "created by the tests" }
}

struct RouterLogin: InternetPasswordSecureStorable, CreateableSecureStorable, ReadableSecureStorable,
    DeleteableSecureStorable, TypeDesignatableSecureStorable, IsInvisibleAssignableSecureStorable,
    IsNegativeAssignableSecureStorable, CreatorDesignatableSecureStorable, DescribableSecureStorable
{
    let store: MemoryStore
    var secureStore: any SecureStore { store }
    let server = "router.lan"
    let port = 8443
    let internetProtocol = InternetProtocol.https
    let authenticationType = InternetAuthenticationType.httpBasic
    let securityDomain: String? = "admin realm"
    let path: String? = "/login"
    let account = "admin"
    var secret = Data()
    let type = "router"
    let isInvisible = true
    let isNegative = false
    let creator = "tests"
    let itemDescription = "Router admin password"
}

struct ReadOnlyMail: GenericPasswordSecureStorable, ReadableSecureStorable {
    let store: MemoryStore
    var secureStore: any SecureStore { store }
    let service = "mail.example.com"
    let account: String
}

struct DatabaseCredentials: Codable, Sendable, Equatable {
    var user: String
    var password: String
}

struct DatabaseLogin: GenericPasswordSecureStorable, CodableSecureStorable, ReadableSecureStorable {
    let store: MemoryStore
    var secureStore: any SecureStore { store }
    let service = "db"
    let account = "app"
    var value: DatabaseCredentials
}

/// Reads through generic code only: Locksmith returns nil here; Keysmith returns the typed result.
func readGenerically<T: ReadableSecureStorable>(_ item: T) throws -> T.Result? {
    try item.readFromSecureStore()
}

@Suite("capability protocols")
struct CapabilityProtocolTests {
    @Test("a type with only attributes and a secret round-trips through create, read, update, delete")
    func roundTrip() throws {
        let store = MemoryStore()
        var item = MailAccount(store: store, account: "bob", secret: Data("first".utf8))
        try item.createInSecureStore()
        let read = try #require(try item.readFromSecureStore())
        #expect(read.secret == Data("first".utf8))
        #expect(read.service == "mail.example.com")
        #expect(read.account == "bob")
        #expect(read.label == "Mail for bob")
        #expect(read.comment == "created by the tests")

        item.secret = Data("second".utf8)
        try item.updateInSecureStore()
        #expect(try item.readFromSecureStore()?.secret == Data("second".utf8))

        try item.deleteFromSecureStore()
        #expect(try item.readFromSecureStore() == nil)
    }

    @Test("a read through a generic function returns the typed generic password result")
    func genericReadIsTyped() throws {
        let store = MemoryStore()
        try MailAccount(store: store, account: "carol", secret: Data("pw".utf8)).createInSecureStore()
        let result: GenericPasswordResult? = try readGenerically(ReadOnlyMail(store: store, account: "carol"))
        let typed = try #require(result)
        #expect(typed.account == "carol")
        #expect(typed.secret == Data("pw".utf8))
        // And through an existential, the dynamic type is the typed result too.
        let erased: any SecureStorableResult = typed
        #expect(erased is GenericPasswordResult)
    }

    @Test("an internet password keeps every attribute and reads back typed through generic code")
    func internetPasswordAttributes() throws {
        let store = MemoryStore()
        try RouterLogin(store: store, secret: Data("hunter2".utf8)).createInSecureStore()
        let result: InternetPasswordResult = try #require(try readGenerically(RouterLogin(store: store)))
        #expect(result.server == "router.lan")
        #expect(result.port == 8443)
        #expect(result.internetProtocol == .https)
        #expect(result.authenticationType == .httpBasic)
        #expect(result.securityDomain == "admin realm")
        #expect(result.path == "/login")
        #expect(result.account == "admin")
        #expect(result.type == "router")
        #expect(result.isInvisible)
        #expect(!result.isNegative)
        #expect(result.creator == "tests")
        #expect(result.itemDescription == "Router admin password")
        #expect(result.secret == Data("hunter2".utf8))
        #expect(result.created <= result.modified)
    }

    @Test("creating an item twice reports a duplicate and keeps the first secret")
    func duplicateCreate() throws {
        let store = MemoryStore()
        try MailAccount(store: store, account: "dave", secret: Data("one".utf8)).createInSecureStore()
        let error = #expect(throws: KeysmithError.self) {
            try MailAccount(store: store, account: "dave", secret: Data("two".utf8)).createInSecureStore()
        }
        #expect(error?.code == .duplicateItem)
        #expect(try ReadOnlyMail(store: store, account: "dave").readFromSecureStore()?.secret == Data("one".utf8))
    }

    @Test("updating or deleting a missing item throws not found, reading it returns nil")
    func notFoundIsNotFailure() throws {
        let store = MemoryStore()
        let item = MailAccount(store: store, account: "erin", secret: Data("x".utf8))
        #expect(try item.readFromSecureStore() == nil)
        let update = #expect(throws: KeysmithError.self) { try item.updateInSecureStore() }
        #expect(update?.code == .itemNotFound)
        let delete = #expect(throws: KeysmithError.self) { try item.deleteFromSecureStore() }
        #expect(delete?.code == .itemNotFound)
    }

    @Test("a Codable value is stored as its secret and decoded back")
    func codableValue() throws {
        let store = MemoryStore()
        let credentials = DatabaseCredentials(user: "app", password: "p@ss")
        try DatabaseLogin(store: store, value: credentials).createInSecureStore()
        let read = try #require(try DatabaseLogin(store: store, value: credentials).readFromSecureStore())
        #expect(try read.decode(DatabaseCredentials.self) == credentials)
        let wrongType = #expect(throws: KeysmithError.self) { try read.decode([Int].self) }
        #expect(wrongType?.code == .invalidArgument)
        #expect(wrongType?.message.contains("p@ss") == false)
    }

    @Test("an empty account is rejected as an invalid argument")
    func emptyAccount() throws {
        let store = MemoryStore()
        let error = #expect(throws: KeysmithError.self) {
            try MailAccount(store: store, account: "", secret: Data("x".utf8)).createInSecureStore()
        }
        #expect(error?.code == .invalidArgument)
        #expect(try store.search(ItemQuery()).isEmpty)
    }

    @Test("result descriptions never show the secret")
    func redactedDescriptions() throws {
        let store = MemoryStore()
        try MailAccount(store: store, account: "frank", secret: Data("TOPSECRET".utf8)).createInSecureStore()
        let read = try #require(try ReadOnlyMail(store: store, account: "frank").readFromSecureStore())
        #expect(!String(describing: read).contains("TOPSECRET"))
        let record = try #require(try store.read(read.attributes.key))
        #expect(!String(describing: record).contains("TOPSECRET"))
        #expect(!String(reflecting: record).contains("TOPSECRET"))
    }
}
