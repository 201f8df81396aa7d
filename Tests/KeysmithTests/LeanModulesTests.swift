import Foundation
import Testing

/// The modules the lean `keysmith` links (docs/benchmarks.md, "Binary size") use only
/// FoundationEssentials: one `import Foundation` in any of them links Foundation's
/// internationalization and its ICU data (about 36 MB) into the command.
@Suite("the lean command's modules never import Foundation")
struct LeanModulesTests {
    static let sources = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Sources")
    static let lean = ["Keysmith", "KeysmithCrypto", "KeysmithSystem", "KeysmithCredentials", "KeysmithVault", "KeysmithSecretService",
                       "KeysmithStores", "KeysmithTokens", "KeysmithPolicy", "KeysmithCommandLine", "keysmith"]

    @Test("no Swift file of a lean module imports Foundation (FoundationEssentials only)", arguments: lean)
    func noFoundation(module: String) throws {
        let folder = Self.sources.appendingPathComponent(module)
        let files = try #require(FileManager.default.enumerator(atPath: folder.path)).compactMap { $0 as? String }.filter { $0.hasSuffix(".swift") }
        #expect(!files.isEmpty, "no sources found for \(module) at \(folder.path)")
        for file in files {
            let text = try String(contentsOf: folder.appendingPathComponent(file), encoding: .utf8)
            // The fallback branch of `#if canImport(FoundationEssentials)` is for toolchains
            // without it, never this one.
            var fallback = false, guarded = false
            for line in text.split(separator: "\n") {
                let trimmed = line.trimmingCharacters(in: .whitespaces)
                if trimmed == "#if canImport(FoundationEssentials)" { guarded = true; continue }
                if trimmed == "#else", guarded { fallback = true; continue }
                if trimmed == "#endif", guarded { guarded = false; fallback = false; continue }
                if fallback { continue }
                let words = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
                guard let index = words.firstIndex(of: "import"), index + 1 < words.count else { continue }
                // With or without an access level or attribute before it.
                guard words[..<index].allSatisfy({ $0.hasPrefix("@") || ["public", "package", "internal", "private", "fileprivate"].contains($0) })
                else { continue }
                // `import Foundation`, `import Foundation.NSString`, `import struct Foundation.URL`,
                // and the parts of Foundation that bring its ICU data.
                var position = index + 1
                if ["struct", "class", "enum", "protocol", "typealias", "func", "let", "var"].contains(words[position]), position + 1 < words.count {
                    position += 1
                }
                let module = words[position].split(separator: ".").first.map(String.init) ?? ""
                #expect(!["Foundation", "FoundationInternationalization", "FoundationNetworking", "FoundationXML", "_FoundationICU"].contains(module),
                        "\(file): \(line)")
            }
        }
    }
}
