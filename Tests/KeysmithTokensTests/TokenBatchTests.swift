import Foundation
import Keysmith
import KeysmithTokens
import Testing

@Suite("TokenImport.batch(jsonLines:): the command's batch lines, read by the library")
struct TokenBatchTests {
    static func lines(_ lines: String...) -> [UInt8] { Array(lines.joined(separator: "\n").utf8) }

    @Test("each line is one import: the response as an object or a string, requested as a list or an array, blank lines skipped")
    func read() throws {
        let imports = try TokenImport.batch(jsonLines: Self.lines(
            #"{"service":"news","account":"a","client_id":"web","subject":"u-1","issuer":"https://auth.example","requested":"posts:read,posts:write","response":{"access_token":"T1","token_type":"Bearer"}}"#,
            "",
            "  \r",
            #"{"service":"news","account":"b","requested":["posts:read","groups:read groups:write"],"response":"{\"access_token\":\"T2\",\"token_type\":\"Bearer\"}"}"#,
            #"{"service":"mail","account":"c","requested":null,"response":{"access_token":"T3","token_type":"Bearer"}}"#))
        try #require(imports.count == 3)
        #expect(imports.map(\.service) == ["news", "news", "mail"] && imports.map(\.account) == ["a", "b", "c"])
        #expect(imports[0].clientID == "web" && imports[0].subject == "u-1" && imports[0].issuer == "https://auth.example")
        let (read, write) = (Scope("posts:read"), Scope("posts:write"))
        let (groupsRead, groupsWrite) = (Scope("groups:read"), Scope("groups:write"))
        #expect(imports[0].requested == [read, write])
        #expect(imports[1].requested == [read, groupsRead, groupsWrite])
        #expect(imports[2].requested.isEmpty && imports[2].clientID == nil)
        // The response is the token response, whichever way it was written.
        for (index, token) in ["T1", "T2", "T3"].enumerated() {
            let object = try #require(try JSONSerialization.jsonObject(with: imports[index].response) as? [String: String])
            #expect(object["access_token"] == token && object["token_type"] == "Bearer")
        }
        // And it imports: the keeper takes them as they are.
        let keeper = TokenKeeper(store: MemoryStore())
        let (imported, updated) = try keeper.importBatch(imports, replacing: false)
        #expect(imported.count == 3 && updated.isEmpty)
        #expect(try keeper.token(service: "news", account: "b")?.accessToken == "T2")
        #expect(try TokenImport.batch(jsonLines: Self.lines("", " ")).isEmpty)
    }

    @Test("a bad line is refused with its number and kind: not the documented object, requested of another type, an invalid scope")
    func refused() throws {
        let good = #"{"service":"news","account":"a","response":{"access_token":"T","token_type":"Bearer"}}"#
        let cases: [(String, KeysmithError.Code, String)] = [
            ("not json", .invalidArgument, "line 3 is not {"),
            (#"{"service":"news","response":{}}"#, .invalidArgument, "line 3 is not {"),
            (#"{"service":"news","account":"a","response":{},"requested":5}"#, .invalidArgument, "line 3: requested is neither"),
            (#"{"service":"news","account":"a","response":{},"requested":["ok",5]}"#, .invalidArgument, "line 3: requested is neither"),
            (#"{"service":"news","account":"a","response":{},"requested":"bad\"scope"}"#, .invalidScope, "line 3: "),
        ]
        for (bad, code, start) in cases {
            let error = #expect(throws: KeysmithError.self) { try TokenImport.batch(jsonLines: Self.lines(good, "", bad, good)) }
            #expect(error?.code == code, "\(bad): \(String(describing: error))")
            #expect(error?.message.hasPrefix(start) == true, "\(bad): \(error?.message ?? "")")
        }
    }
}
