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

    @Test("policy inputs parse without a crash, and the seed policy compiles")
    func policyFile() {
        let inputs = Self.inputs("PolicyFile")
        #expect(!inputs.isEmpty)
        for (name, bytes) in inputs {
            let engine = try? PolicyFile.engine(from: bytes)
            if name.hasSuffix("news-groups.json") { #expect(engine?.allPolicies.count == 7) }
            _ = try? PolicyRequestJSON.request(from: bytes)
            _ = try? PolicyTestFile(bytes: bytes)
        }
    }
}
