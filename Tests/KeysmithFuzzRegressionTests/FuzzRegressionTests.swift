import Foundation
import KeysmithPolicy
import KeysmithTokens
@_spi(Fuzzing) import KeysmithVault
import Testing

/// Every input the fuzzers ever crashed on (Fuzz/Regressions/) and every seed (Fuzz/Corpus/)
/// goes through the same parsers as the fuzz targets, on every test run.
@Suite("fuzz regressions")
struct FuzzRegressionTests {
    static let fuzz = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Fuzz")

    static func inputs(_ name: String) -> [(String, [UInt8])] {
        ["Corpus", "Regressions"].flatMap { folder -> [(String, [UInt8])] in
            let directory = fuzz.appendingPathComponent(folder).appendingPathComponent(name)
            let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
            return names.filter { !$0.hasPrefix(".") && $0 != "README.md" }.sorted().compactMap { file in
                (try? Data(contentsOf: directory.appendingPathComponent(file))).map { ("\(folder)/\(name)/\(file)", Array($0)) }
            }
        }
    }

    @Test("vault-format inputs parse without a crash")
    func vaultFormat() {
        let inputs = Self.inputs("VaultFormat")
        #expect(!inputs.isEmpty)
        for (_, bytes) in inputs { VaultFormatFuzzing.parse(bytes) }
    }

    @Test("token-response inputs parse without a crash, and the seeds parse as documented")
    func tokenResponse() throws {
        let inputs = Self.inputs("TokenResponse")
        #expect(!inputs.isEmpty)
        for (name, bytes) in inputs {
            let token = try? OAuthToken(response: Data(bytes), requested: [], now: Date(timeIntervalSince1970: 0))
            if name.hasSuffix("rfc6749.json") { #expect(token?.grantedScopes(at: Date(timeIntervalSince1970: 0)).count == 3) }
            _ = try? OAuthToken(storedSecret: Data(bytes))
        }
    }

    @Test("policy-language inputs parse without a crash, and the seeds parse and validate")
    func policyLanguage() throws {
        let inputs = Self.inputs("PolicyLanguage")
        #expect(inputs.count >= 6)
        let schema = try Schema(text: String(decoding: inputs.first { $0.0.hasSuffix("news-groups.cedarschema") }!.1, as: UTF8.self))
        for (name, bytes) in inputs {
            let text = String(decoding: bytes, as: UTF8.self)
            let policies = try? Policies(text: text)
            if name.hasSuffix("news-groups.cedar") {
                #expect(policies?.ids.count == 7)
                if let policies { try schema.validate(policies) }
            }
            if name.hasSuffix(".cedarschema") { #expect((try? Schema(text: text)) != nil) }
            if name.hasSuffix("entities.json") { try schema.validate(try EntityStore(json: bytes)) }
            if name.hasSuffix("request.json") { #expect((try? AuthorizationRequest.decideLine(bytes, line: 1)) != nil) }
            _ = try? Schema(text: text)
            _ = try? EntityStore(json: bytes)
            _ = try? AuthorizationRequest(json: bytes)
            _ = try? PolicyTestSuite(json: bytes, file: name)
        }
    }
}
