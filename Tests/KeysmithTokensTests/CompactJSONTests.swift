import Foundation
import Keysmith
@testable import KeysmithTokens
import Testing

/// A token response's additional fields are kept as compact JSON written without Foundation:
/// Foundation's own reader is the oracle for what each kept text means.
@Suite("compact JSON: a response's additional fields mean what the provider sent, written the same way on every machine")
struct CompactJSONTests {
    /// What Foundation reads `text` as (a fragment allowed), for comparing meanings.
    static func meaning(_ text: String) -> NSObject? {
        (try? JSONSerialization.jsonObject(with: Data(text.utf8), options: [.fragmentsAllowed])) as? NSObject
    }

    static func compact(_ value: String) -> String? {
        (try? CompactJSON.members(of: Array(#"{"v":\#(value)}"#.utf8)))?.first?.text
    }

    @Test("the written text: no white space, members sorted by the bytes of their names, numbers as written, only the escapes JSON needs")
    func writtenForm() {
        #expect(Self.compact(#" { "b" : 1 , "a" : [ 1 , 2.50 , -0 , 1E+2 ] , "B" : { } , "é" : null , "e" : true } "#)
                == #"{"B":{},"a":[1,2.50,-0,1E+2],"b":1,"e":true,"é":null}"#)
        #expect(Self.compact(#""a\/b \u00e9\u2028\u0001\u001f\t\n\r\b\f\"\\ \ud83d\ude00""#)
                == "\"a/b é\u{2028}\\u0001\\u001f\\t\\n\\r\\b\\f\\\"\\\\ 😀\"")
        #expect(Self.compact("123456789012345678901234567890") == "123456789012345678901234567890")
        #expect(Self.compact("[[],{},\"\"]") == "[[],{},\"\"]")
        // The members of the response itself, in the order written.
        #expect((try? CompactJSON.members(of: Array(#"{"z":1,"a":{"y":2,"x":3}}"#.utf8)))?.map(\.name) == ["z", "a"])
        #expect((try? CompactJSON.members(of: Array(#"{"z":1,"a":{"y":2,"x":3}}"#.utf8)))?.map(\.text) == ["1", #"{"x":3,"y":2}"#])
        // A byte order mark before the object is skipped (RFC 8259 §8.1 allows it).
        #expect((try? CompactJSON.members(of: [0xEF, 0xBB, 0xBF] + Array(#"{"a":1}"#.utf8)))?.map(\.text) == ["1"])
    }

    @Test("anything that is not one JSON object is refused, as Foundation refuses it (and trailing commas, which Foundation lets through)", arguments: [
        "", "[]", "1", #"{"a":1"#, #"{"a":1}x"#, #"{"a":01}"#, #"{"a":1.}"#, #"{"a":.5}"#, #"{"a":1e}"#, #"{"a":+1}"#, #"{"a":-}"#,
        #"{"a":"\ud800"}"#, #"{"a":"\udc00"}"#, #"{"a":"\x"}"#, "{\"a\":\"\u{1}\"}", #"{"a":tru}"#, #"{"a":[1,]}"#, #"{"a":1,}"#,
        #"{a:1}"#, #"{"a" 1}"#, #"{"a":"\u12"}"#,
    ])
    func refusals(_ text: String) {
        #expect(throws: CompactJSON.Failure.notJSON) { try CompactJSON.members(of: Array(text.utf8)) }
        let foundation = (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any]
        #expect(foundation == nil || text.contains(",]") || text.contains(",}"), "Foundation reads \(text)")
    }

    @Test("bytes that are not UTF-8 and nesting past 512 levels are refused")
    func limits() {
        #expect(throws: CompactJSON.Failure.notJSON) { try CompactJSON.members(of: [0x7B, 0x22, 0x61, 0x22, 0x3A, 0x22, 0xFF, 0x22, 0x7D]) }
        let deep = String(repeating: "[", count: 600) + String(repeating: "]", count: 600)
        #expect(Self.compact(deep) == nil)
        let fine = String(repeating: "[", count: 500) + String(repeating: "]", count: 500)
        #expect(Self.compact(fine) == fine)
        // A value that would be written longer than the limit stops the reading where it passes
        // it, naming the member, deep inside or not; a member left unlimited is read whole.
        let nested = #"{"ok":1,"big":"# + String(repeating: #"{"k":"#, count: 400) + "\"" + String(repeating: "x", count: 70_000) + "\""
            + String(repeating: "}", count: 400) + "}"
        #expect(throws: CompactJSON.Failure.tooLarge("big")) { try CompactJSON.members(of: Array(nested.utf8), limit: 65_536) }
        #expect((try? CompactJSON.members(of: Array(nested.utf8), limit: 65_536, unlimited: ["big"]))?.count == 2)
        let long = #"{"big":["# + Array(repeating: "1234567890", count: 10_000).joined(separator: ",") + "]}"
        #expect(throws: CompactJSON.Failure.tooLarge("big")) { try CompactJSON.members(of: Array(long.utf8), limit: 65_536) }
    }

    @Test("20,000 random values: each kept text means what the provider sent (Foundation reads both alike), and writing it again changes nothing")
    func randomValuesKeepTheirMeaning() throws {
        var generator = SystemRandomNumberGenerator()
        let alphabet: [String] = ["a", "B", "é", "\u{2028}", "\"", "\\", "/", "\n", "\u{1}", "😀", " ", "Z9", "\u{7F}"]
        func string() -> String {
            (0..<Int.random(in: 0...6, using: &generator)).map { _ in alphabet.randomElement(using: &generator)! }.joined()
        }
        func literal(_ text: String) -> String {
            // Written with escapes of every kind a provider might use.
            var out = "\""
            for scalar in text.unicodeScalars {
                switch scalar {
                case "\"": out += "\\\""
                case "\\": out += Bool.random(using: &generator) ? "\\\\" : "\\u005c"
                case "/": out += Bool.random(using: &generator) ? "\\/" : "/"
                case "\n": out += "\\n"
                case _ where scalar.value < 0x20: out += String(format: "\\u%04x", scalar.value)
                case _ where scalar.value > 0xFFFF && Bool.random(using: &generator):
                    let value = scalar.value - 0x10000
                    out += String(format: "\\u%04X\\u%04x", 0xD800 + (value >> 10), 0xDC00 + (value & 0x3FF))
                default: out.unicodeScalars.append(scalar)
                }
            }
            return out + "\""
        }
        func number() -> String {
            [String(Int.random(in: -1_000_000...1_000_000, using: &generator)), "0", "-0", "1.5", "2.50", "1e3", "-2.5E-3",
             "9007199254740993", String(Double.random(in: -1e6...1e6, using: &generator))].randomElement(using: &generator)!
        }
        func value(_ depth: Int) -> String {
            let space = [" ", "", "\n", "\t"].randomElement(using: &generator)!
            switch Int.random(in: 0..<(depth > 3 ? 5 : 7), using: &generator) {
            case 0: return "null"
            case 1: return Bool.random(using: &generator) ? "true" : "false"
            case 2: return number()
            case 3, 4: return literal(string())
            case 5: return "[" + (0..<Int.random(in: 0...3, using: &generator)).map { _ in space + value(depth + 1) }.joined(separator: ",") + space + "]"
            default:
                var names = Set<String>()
                for _ in 0..<Int.random(in: 0...4, using: &generator) { names.insert(string()) }
                return "{" + names.map { space + literal($0) + space + ":" + value(depth + 1) }.joined(separator: ",") + "}"
            }
        }
        for _ in 0..<20_000 {
            let sent = value(0)
            let kept = try #require(Self.compact(sent), "refused: \(sent)")
            #expect(Self.meaning(kept) == Self.meaning(sent) && Self.meaning(kept) != nil, "\(sent) became \(kept)")
            #expect(Self.compact(kept) == kept, "\(kept) is not written the same again")
            // No white space between tokens (a string may hold a space, never a line break or a
            // tab: those are escaped; the alphabet has no comma, colon or bracket).
            #expect(!kept.contains("\n") && !kept.contains("\t") && !kept.contains("\r") && !kept.contains(": ") && !kept.contains(", ")
                    && !kept.contains("[ ") && !kept.contains("{ ") && !kept.contains(" ]") && !kept.contains(" }") && !kept.contains(" :"),
                    "white space left in \(kept)")
        }
    }

    @Test("a token response that is not one JSON object as RFC 8259 writes it is refused as malformed, naming why")
    func malformedResponsesAreRefused() {
        for text in [#"{"access_token":"a","token_type":"Bearer","team":[1,],}"#, #"{"access_token":"a","token_type":"Bearer"} x"#,
                     #"{"access_token":"\ud800","token_type":"Bearer"}"#] {
            let error = #expect(throws: KeysmithError.self, "\(text)") { try OAuthToken(response: Data(text.utf8), requested: [], now: Date()) }
            #expect(error?.code == .malformedData, "\(text)")
            #expect(error?.message.contains("as RFC 8259 writes it") == true || error?.message.contains("not text Keysmith can keep") == true,
                    "\(String(describing: error?.message))")
        }
    }

    @Test("an answer is kept whatever its extra fields hold: a lone surrogate, over 64 KiB, a name twice, more than 64 of them; those fields are dropped and named")
    func extraFieldsThatCannotBeKeptAreDropped() throws {
        func parse(_ text: String) throws -> TokenResponse { try TokenResponse.parse(Data(text.utf8)) }
        let surrogate = try parse(#"{"access_token":"a","token_type":"Bearer","refresh_token":"r2","x":"\ud800","y":1}"#)
        #expect(surrogate.refreshToken == "r2" && surrogate.additionalFields == ["y": "1"] && surrogate.droppedFields == ["x"])
        let big = try parse(#"{"access_token":"a","token_type":"Bearer","refresh_token":"r2","id_token":""# + String(repeating: "x", count: 70_000) + "\"}")
        #expect(big.refreshToken == "r2" && big.additionalFields.isEmpty && big.droppedFields == ["id_token"])
        let twice = try parse(#"{"access_token":"a","token_type":"Bearer","team":1,"t\u0065am":2,"ok":true}"#)
        #expect(twice.additionalFields == ["ok": "true"] && twice.droppedFields == ["team"])
        let nested = try parse(#"{"access_token":"a","token_type":"Bearer","team":{"id":"T1","id":"T2"}}"#)
        #expect(nested.additionalFields.isEmpty && nested.droppedFields == ["team"])
        let sameValue = try parse(#"{"access_token":"a","token_type":"Bearer","refresh_token":"r2","refresh_token":"r2"}"#)
        #expect(sameValue.refreshToken == "r2")
        var many = #"{"access_token":"a","token_type":"Bearer""#
        for index in 0..<70 { many += ",\"f\(String(format: "%02d", index))\":\(index)" }
        let lots = try parse(many + "}")
        #expect(lots.additionalFields.count == 64 && lots.droppedFields.count == 6)
        // The token itself is never taken from an ambiguous answer.
        #expect(throws: KeysmithError.self) { try parse(#"{"access_token":"a","token_type":"Bearer","refresh_token":"r1","refresh_token":"r2"}"#) }
        let longToken = #"{"access_token":""# + String(repeating: "a", count: 70_000) + #"","token_type":"Bearer","x":1}"#
        #expect(try OAuthToken(response: Data(longToken.utf8), requested: [], now: Date()).additionalFields == ["x": "1"])
    }

    @Test("a name written with escapes is the same name")
    func escapedNames() throws {
        #expect(CompactJSON.string(literal: Array(#""t\u0065am""#.utf8)) == "team")
        #expect(CompactJSON.string(literal: Array(#""team"x"#.utf8)) == nil)
        let error = #expect(throws: KeysmithError.self) {
            try OAuthToken(response: Data(#"{"access_token":"a","token_type":"Bearer","expires_in":1,"expires\u005fin":2}"#.utf8), requested: [], now: Date())
        }
        #expect(error?.code == .malformedData && error?.message.contains("twice") == true, "\(String(describing: error?.message))")
    }
}
