import Foundation
import Keysmith
import Testing

@Suite("StoreOperation.batch(jsonLines:) and ItemDocument: the command's batch lines and listing entries, in the library")
struct StoreBatchTests {
    static func lines(_ lines: String...) -> [UInt8] { Array(lines.joined(separator: "\n").utf8) }

    @Test("set, create and delete of generic and internet passwords; a listing's own fields are taken and ignored; blank lines skipped")
    func read() throws {
        let store = MemoryStore()
        try store.perform([.create(ItemAttributes(key: .genericPassword(service: "old", account: "gone")), secret: Data("x".utf8))])
        let operations = try StoreOperation.batch(jsonLines: Self.lines(
            #"{"op":"set","service":"api","account":"ci","secret":"s3cret","label":"CI key","comment":"rotated monthly"}"#,
            "",
            #"{"op":"create","server":"git.example","protocol":"https","port":8443,"path":"/team","account":"bob","secretBase64":"AAEC/w=="}"#,
            #"{"op":"delete","kind":"generic-password","service":"old","account":"gone","created":"2026-01-01T00:00:00Z","modified":"x","isInvisible":false}"#))
        try #require(operations.count == 3)
        try store.perform(operations)
        let ci = try #require(try store.read(.genericPassword(service: "api", account: "ci")))
        #expect(ci.secret == Data("s3cret".utf8) && ci.info.attributes.label == "CI key" && ci.info.attributes.comment == "rotated monthly")
        let git = ItemKey.internetPassword(InternetPasswordKey(server: "git.example", port: 8443, internetProtocol: .https, path: "/team", account: "bob"))
        #expect(try store.read(git)?.secret == Data([0, 1, 2, 255]))
        #expect(try store.read(.genericPassword(service: "old", account: "gone")) == nil)

        // A listing entry, written back as a line, names the same item.
        let document = ItemDocument(try #require(try store.read(git)).info)
        #expect(try document.key() == git && document.kind == "internet-password" && document.port == 8443 && document.created != nil)
        var object = try #require(try JSONSerialization.jsonObject(with: JSONEncoder().encode(document)) as? [String: Any])
        object["op"] = "set"
        object["secret"] = "new"
        let edited = try StoreOperation.batch(jsonLines: Array(try JSONSerialization.data(withJSONObject: object)))
        try store.perform(edited)
        #expect(try store.read(git)?.secret == Data("new".utf8))
    }

    @Test("a bad line is refused as an invalid argument naming its line, never repeating the secret")
    func refused() throws {
        let good = #"{"op":"set","service":"api","account":"a","secret":"fine"}"#
        let cases: [(String, String)] = [
            ("not json", "line 2: not a JSON object"),
            (#"{"op":"set","service":"api","account":"a","secret":"hunter2","labl":"x"}"#, "line 2: unknown field \"labl\""),
            (#"{"op":"set","service":"api","account":"a","secret":"hunter2","secretBase64":"aGk="}"#, "line 2: give \"secret\" or \"secretBase64\", not both"),
            (#"{"op":"delete","service":"api","account":"a","secret":"hunter2"}"#, "line 2: \"delete\" takes no secret"),
            (#"{"op":"set","service":"api","account":"a","server":"h","secret":"hunter2"}"#, "line 2: a generic password (\"service\") has no server"),
            (#"{"op":"set","service":"api","account":"a","secretBase64":"hunter2!"}"#, "line 2: \"secretBase64\" is not base64"),
            (#"{"op":"set","service":"api","account":"a"}"#, "line 2: \"set\" needs \"secret\" or \"secretBase64\""),
            (#"{"op":"set","service":"api","account":"a","secret":""}"#, "line 2: the secret is empty"),
            (#"{"op":"move","service":"api","account":"a","secret":"hunter2"}"#, "line 2: unknown op \"move\""),
            (#"{"op":"set","service":"api","secret":"hunter2"}"#, "line 2: \"account\" is missing"),
            (#"{"op":"set","server":"h","protocol":"gopher2","account":"a","secret":"hunter2"}"#, "line 2: an internet password needs a known \"protocol\""),
            (#"{"op":"set","recordType":"oauthToken","service":"api","account":"a","secret":"hunter2"}"#, "line 2: Keysmith's own records"),
            (#"{"op":"set","service":"","account":"a","secret":"hunter2"}"#, "line 2: "),
        ]
        for (bad, start) in cases {
            let error = #expect(throws: KeysmithError.self) { try StoreOperation.batch(jsonLines: Self.lines(good, bad, good)) }
            #expect(error?.code == .invalidArgument, "\(bad): \(String(describing: error))")
            #expect(error?.message.hasPrefix(start) == true, "\(bad): \(error?.message ?? "")")
            #expect(error?.message.contains("hunter2") == false)
        }
        // An empty secret when asked for; the same line otherwise refused above.
        let empty = try StoreOperation.batch(jsonLines: Self.lines(#"{"op":"set","service":"api","account":"a","secret":""}"#), allowEmpty: true)
        #expect(empty.count == 1)
        #expect(try StoreOperation.batch(jsonLines: []).isEmpty)
    }
}
