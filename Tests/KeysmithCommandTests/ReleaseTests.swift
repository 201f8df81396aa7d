import Foundation
import Keysmith
import Testing

/// What a user depending on a release relies on (issue 37): one version everywhere, and docs
/// that link only to what ships.
@Suite("releases: one version, and links that resolve")
struct ReleaseTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The newest released version in CHANGELOG.md (the first `## [x.y.z]` heading, not Unreleased).
    static func newestRelease() throws -> String? {
        let text = try String(contentsOf: root.appendingPathComponent("CHANGELOG.md"), encoding: .utf8)
        for line in text.split(separator: "\n") where line.hasPrefix("## [") {
            let name = line.dropFirst(4).prefix { $0 != "]" }
            if name != "Unreleased" { return String(name) }
        }
        return nil
    }

    /// The version as Sources/Keysmith/Version.swift writes it (the one place).
    static func writtenVersion() throws -> String? {
        let text = try String(contentsOf: root.appendingPathComponent("Sources/Keysmith/Version.swift"), encoding: .utf8)
        let found = try Regex(#"public static let version = "([0-9]+\.[0-9]+\.[0-9]+)""#).firstMatch(in: text)
        return found?.output[1].substring.map(String.init)
    }

    @Test("keysmith --version, Keysmith.version and CHANGELOG.md's newest release are one version")
    func oneVersion() throws {
        let printed = try Keysmith().run(["--version"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let written = try #require(try Self.writtenVersion())
        #expect(printed == written)
        #expect(try Self.newestRelease() == written)
        let changelog = try String(contentsOf: Self.root.appendingPathComponent("CHANGELOG.md"), encoding: .utf8)
        #expect(changelog.contains("## [Unreleased]"), "the changelog keeps an Unreleased section on top")
    }

    /// Every relative link in README.md and docs/ (Markdown links, and paths in parentheses that
    /// start with ../ or ./ in any file there) names a file or directory that ships.
    @Test("no relative link in README.md or docs/ points at a missing file")
    func relativeLinksResolve() throws {
        var files = [Self.root.appendingPathComponent("README.md"), Self.root.appendingPathComponent("CHANGELOG.md")]
        let enumerator = FileManager.default.enumerator(at: Self.root.appendingPathComponent("docs"), includingPropertiesForKeys: nil)
        while let url = enumerator?.nextObject() as? URL {
            if !url.hasDirectoryPath, ["md", "cedar", "cedarschema", "json", "py"].contains(url.pathExtension) { files.append(url) }
        }
        var checked = 0
        var broken: [String] = []
        let markdown = try Regex(#"\]\(([^)\s]+)\)"#)
        let parenthesized = try Regex(#"\((\.\.?/[^)\s]+)\)"#)
        for file in files {
            let text = try String(contentsOf: file, encoding: .utf8)
            var targets: [Substring] = []
            if file.pathExtension == "md" { targets += text.matches(of: markdown).compactMap { $0.output[1].substring } }
            targets += text.matches(of: parenthesized).compactMap { $0.output[1].substring }
            for target in targets {
                let path = String(target.prefix { $0 != "#" })
                guard !path.isEmpty, !path.contains("://"), !path.hasPrefix("mailto:") else { continue }
                checked += 1
                let resolved = file.deletingLastPathComponent().appendingPathComponent(path).standardizedFileURL
                if !resolved.path.hasPrefix(Self.root.standardizedFileURL.path) || !FileManager.default.fileExists(atPath: resolved.path) {
                    broken.append("\(file.lastPathComponent): \(target)")
                }
            }
        }
        #expect(broken.isEmpty, "links to files that do not ship: \(broken)")
        #expect(checked > 5, "the check found almost no links (\(checked)): it is not looking")
    }
}
