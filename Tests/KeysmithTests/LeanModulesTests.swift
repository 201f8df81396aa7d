import Foundation
import Testing

/// The modules the lean `keysmith` links (docs/benchmarks.md, "Binary size") use only
/// FoundationEssentials: one `import Foundation` in any of them links Foundation's
/// internationalization and its ICU data (about 36 MB) into the command.
@Suite("the lean command's modules never import Foundation")
struct LeanModulesTests {
    static let sources = SourceImports.root.appendingPathComponent("Sources")
    static let lean = ["Keysmith", "KeysmithCrypto", "KeysmithSystem", "KeysmithCredentials", "KeysmithVault", "KeysmithSecretService",
                       "KeysmithStores", "KeysmithTokens", "KeysmithPolicy", "KeysmithTokenPolicy", "KeysmithCommandLine", "keysmith"]

    @Test("no Swift file of a lean module imports Foundation (FoundationEssentials only)", arguments: lean)
    func noFoundation(module: String) throws {
        let folder = Self.sources.appendingPathComponent(module)
        let files = SourceImports.swiftFiles(in: folder)
        #expect(!files.isEmpty, "no sources found for \(module) at \(folder.path)")
        for file in files {
            let text = try String(contentsOf: folder.appendingPathComponent(file), encoding: .utf8)
            // `import Foundation`, `import Foundation.NSString`, `import struct Foundation.URL`,
            // and the parts of Foundation that bring its ICU data.
            for (line, module) in SourceImports.imports(in: text) {
                #expect(!["Foundation", "FoundationInternationalization", "FoundationNetworking", "FoundationXML", "_FoundationICU"].contains(module),
                        "\(file): \(line)")
            }
        }
    }
}
