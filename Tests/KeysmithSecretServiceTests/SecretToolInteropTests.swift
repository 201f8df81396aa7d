import Foundation
import Keysmith
import KeysmithSecretService
import Testing

/// Runs secret-tool against the same Secret Service.
func secretTool(_ arguments: [String], stdin: String = "") throws -> (status: Int32, output: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/secret-tool")
    process.arguments = arguments
    let input = Pipe(), output = Pipe()
    process.standardInput = input
    process.standardOutput = output
    process.standardError = output
    try process.run()
    input.fileHandleForWriting.write(Data(stdin.utf8))
    try input.fileHandleForWriting.close()
    let data = output.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: data, as: UTF8.self))
}

let secretServiceProvided = ProcessInfo.processInfo.environment["KEYSMITH_TEST_SECRET_SERVICE"] == "1"

@Suite("Secret Service: interoperation with secret-tool", .enabled(if: secretServiceProvided, "run through scripts/test.sh, which starts a private Secret Service"))
struct SecretToolInteropTests {
    @Test("secret-tool finds and reads a generic password that Keysmith stored")
    func keysmithToSecretTool() throws {
        let store = try SecretServiceStore()
        let service = "interop-\(UUID().uuidString)"
        try store.create(ItemAttributes(key: .genericPassword(service: service, account: "bob"), label: "Bob's mail", comment: "from keysmith"),
                         secret: Data("s3cret from keysmith".utf8))
        defer { try? store.delete(.genericPassword(service: service, account: "bob")) }
        let search = try secretTool(["search", "service", service, "account", "bob"])
        #expect(search.status == 0)
        #expect(search.output.contains("label = Bob's mail"))
        #expect(search.output.contains("attribute.comment = from keysmith"))
        #expect(search.output.contains("schema = org.keysmith.GenericPassword"))
        let lookup = try secretTool(["lookup", "service", service, "account", "bob"])
        #expect(lookup.output == "s3cret from keysmith")
    }

    @Test("Keysmith reads generic and internet passwords that secret-tool stored with the documented attributes")
    func secretToolToKeysmith() throws {
        let store = try SecretServiceStore()
        let service = "interop-\(UUID().uuidString)"
        #expect(try secretTool(["store", "--label=From the tool", "service", service, "account", "carol"], stdin: "tool-secret").status == 0)
        let generic = try #require(try store.read(.genericPassword(service: service, account: "carol")))
        #expect(generic.secret == Data("tool-secret".utf8))
        #expect(generic.attributes.label == "From the tool")

        let server = "\(UUID().uuidString).example.com"
        #expect(try secretTool(["store", "--label=Router", "server", server, "port", "8443", "protocol", "https",
                                "authtype", "http-basic", "account", "admin"], stdin: "router-pw").status == 0)
        let key = ItemKey.internetPassword(InternetPasswordKey(server: server, port: 8443, internetProtocol: .https,
                                                                authenticationType: .httpBasic, account: "admin"))
        #expect(try store.read(key)?.secret == Data("router-pw".utf8))
        #expect(try store.search(ItemQuery(server: server)).map(\.key) == [key])
        try store.delete(key)
        try store.delete(.genericPassword(service: service, account: "carol"))
        #expect(try secretTool(["lookup", "server", server, "account", "admin"]).output.isEmpty)
    }

    @Test("an update replaces the item instead of adding a second one")
    func updateReplaces() throws {
        let store = try SecretServiceStore()
        let service = "interop-\(UUID().uuidString)"
        let key = ItemKey.genericPassword(service: service, account: "dave")
        try store.create(ItemAttributes(key: key, comment: "one"), secret: Data("1".utf8))
        try store.update(ItemAttributes(key: key, comment: "two"), secret: Data("2".utf8))
        let search = try secretTool(["search", "--all", "service", service])
        #expect(search.output.components(separatedBy: "[/").count - 1 == 1)
        #expect(try store.read(key)?.attributes.comment == "two")
        try store.delete(key)
    }
}
