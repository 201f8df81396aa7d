import Foundation

/// The modules a Swift source file imports, read from its text: `import X`, `public import X`,
/// `@_exported import X`, `import struct X.Y` and `import X.Y` all name X. The fallback branch of
/// `#if canImport(FoundationEssentials)` is skipped: it is for toolchains without
/// FoundationEssentials, never this one.
enum SourceImports {
    /// The repository's root, found from this file's path.
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// Each import line of `text` with the module it names.
    static func imports(in text: String) -> [(line: String, module: String)] {
        var found: [(line: String, module: String)] = []
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
            var position = index + 1
            if ["struct", "class", "enum", "protocol", "typealias", "func", "let", "var"].contains(words[position]), position + 1 < words.count {
                position += 1
            }
            found.append((String(line), words[position].split(separator: ".").first.map(String.init) ?? ""))
        }
        return found
    }

    /// The Swift files under `folder` (relative paths), recursively.
    static func swiftFiles(in folder: URL) -> [String] {
        (FileManager.default.enumerator(atPath: folder.path)?.compactMap { $0 as? String } ?? []).filter { $0.hasSuffix(".swift") }.sorted()
    }
}
