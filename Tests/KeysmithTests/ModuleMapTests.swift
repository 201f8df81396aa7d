import Foundation
import KeysmithTestSupport
import Testing

/// docs/architecture.md's module map is true: its table is the package's build graph, every
/// arrow follows the rules of its module's role (or is a listed exception, from its named files
/// only), and no source file imports a module of the package that its target does not declare.
@Suite("module map: docs/architecture.md, the build graph and the sources agree, and every arrow points the allowed way")
struct ModuleMapTests {
    /// A module as docs/architecture.md's table describes it.
    struct Module: Equatable {
        var name: String
        var role: Role
        var layer: Int
        /// Target dependencies, and external products as `Product@package`.
        var imports: Set<String>
    }

    enum Role: String, CaseIterable {
        case shim = "C shim", foundation, store, feature, composition, program
    }

    /// An arrow the rules forbid, allowed from the named files only.
    struct Exception: Equatable {
        var from: String
        var to: String
        var files: Set<String>
    }

    // MARK: Reading the map and the graph

    static func architecture() throws -> String {
        try String(contentsOf: SourceImports.root.appendingPathComponent("docs/architecture.md"), encoding: .utf8)
    }

    /// The rows of the table under "## Modules": "| `name` | role | layer | owns | `a`, `b` |".
    static func documented(_ text: String) throws -> [String: Module] {
        var modules: [String: Module] = [:]
        let section = try #require(text.components(separatedBy: "\n## Modules\n").dropFirst().first?.components(separatedBy: "\n## ").first,
                                   "docs/architecture.md has no \"## Modules\" section")
        for line in section.split(separator: "\n") where line.hasPrefix("| `") {
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            try #require(cells.count == 7, "a row of the module table has \(cells.count - 2) cells: \(line)")
            let name = cells[1].trimmingCharacters(in: CharacterSet(charactersIn: "`"))
            let role = try #require(Role(rawValue: cells[2]), "\(name): no role \(cells[2])")
            let layer = try #require(Int(cells[3]), "\(name): layer \(cells[3])")
            let imports = Set(Self.backticked(cells[5]))
            try #require(modules[name] == nil, "\(name) is in the table twice")
            modules[name] = Module(name: name, role: role, layer: layer, imports: imports)
        }
        return modules
    }

    /// The numbered items of "## Exceptions": "1. `A` → `B`, only from `path`, `path`: …".
    static func exceptions(_ text: String) -> [Exception] {
        guard let section = text.components(separatedBy: "## Exceptions").dropFirst().first?.components(separatedBy: "\n## ").first else { return [] }
        return section.split(separator: "\n").compactMap { line -> Exception? in
            guard line.first?.isNumber == true, line.contains(" → "), let only = line.range(of: "only from ") else { return nil }
            let arrow = Self.backticked(String(line[..<only.lowerBound]))
            let files = Self.backticked(String(line[only.upperBound...]).components(separatedBy: ":").first ?? "")
            guard arrow.count == 2 else { return nil }
            return Exception(from: arrow[0], to: arrow[1], files: Set(files))
        }
    }

    static func backticked(_ text: String) -> [String] {
        text.split(separator: "`", omittingEmptySubsequences: false).enumerated().filter { $0.offset % 2 == 1 }.map { String($0.element) }
    }

    /// The package's targets from `swift package dump-package`: kind, path and dependencies
    /// (`Product@package` for another package's product).
    static func built() throws -> [String: (kind: String, path: String, dependencies: Set<String>)] {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("keysmith-module-map-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: scratch) }
        // A scratch path of its own: the running `swift test` holds .build's lock.
        let run = try spawnAndWait("/usr/bin/env", ["swift", "package", "--scratch-path", scratch.path, "dump-package"],
                                   directory: SourceImports.root.path)
        try #require(run.status == 0, "swift package dump-package failed (exit \(run.status)): \(String(decoding: run.stderr, as: UTF8.self))")
        let package = try #require(try JSONSerialization.jsonObject(with: run.stdout) as? [String: Any])
        let targets = try #require(package["targets"] as? [[String: Any]])
        var graph: [String: (kind: String, path: String, dependencies: Set<String>)] = [:]
        for target in targets {
            let name = try #require(target["name"] as? String), kind = try #require(target["type"] as? String)
            var dependencies: Set<String> = []
            for dependency in target["dependencies"] as? [[String: Any]] ?? [] {
                if let byName = (dependency["byName"] ?? dependency["target"]) as? [Any], let module = byName.first as? String {
                    dependencies.insert(module)
                } else if let product = dependency["product"] as? [Any], let module = product.first as? String {
                    dependencies.insert("\(module)@\(product.count > 1 ? (product[1] as? String ?? "") : "")")
                }
            }
            let path = target["path"] as? String ?? (kind == "test" ? "Tests/\(name)" : "Sources/\(name)")
            graph[name] = (kind, path, dependencies)
        }
        return graph
    }

    // MARK: The rules

    /// Why an arrow from `from` to `to` breaks the rules, or `nil` when it follows them.
    static func violation(from: Module, to: Module) -> String? {
        guard to.layer < from.layer else { return "\(from.name) (layer \(from.layer)) → \(to.name) (layer \(to.layer)) points up or sideways" }
        let allowed: Set<Role> = switch from.role {
        case .shim: []
        case .foundation: [.shim, .foundation]
        case .store: [.shim, .foundation]
        case .feature: [.foundation, .feature]
        case .composition: [.shim, .foundation, .store, .feature, .composition]
        case .program: [.shim, .foundation, .store, .feature, .composition]
        }
        return allowed.contains(to.role) ? nil : "a \(from.role.rawValue) (\(from.name)) may not import a \(to.role.rawValue) (\(to.name))"
    }

    /// Every arrow between the package's own modules that breaks the rules and is no exception.
    static func violations(_ modules: [String: Module], exceptions: [Exception]) -> [String] {
        modules.values.sorted { $0.name < $1.name }.flatMap { module in
            module.imports.sorted().compactMap { name -> String? in
                guard let target = modules[name] else { return nil }  // another package's product
                if exceptions.contains(where: { $0.from == module.name && $0.to == name }) { return nil }
                return violation(from: module, to: target)
            }
        }
    }

    // MARK: Tests

    @Test("every target but the tests is in the table once, with exactly the dependencies Package.swift gives it")
    func tableIsTheBuildGraph() throws {
        let documented = try Self.documented(try Self.architecture())
        let graph = try Self.built().filter { $0.value.kind != "test" && $0.key != "KeysmithTestSupport" }
        #expect(Set(documented.keys) == Set(graph.keys), "in the table only: \(Set(documented.keys).subtracting(graph.keys)), in the package only: \(Set(graph.keys).subtracting(documented.keys))")
        for (name, target) in graph.sorted(by: { $0.key < $1.key }) {
            guard let module = documented[name] else { continue }
            #expect(module.imports == target.dependencies,
                    "\(name): the table says \(module.imports.subtracting(target.dependencies).sorted()) that Package.swift does not, Package.swift \(target.dependencies.subtracting(module.imports).sorted()) that the table does not")
        }
    }

    @Test("every arrow follows its module's role and points to a lower layer, or is a listed exception")
    func arrowsPointOneWay() throws {
        let text = try Self.architecture()
        let modules = try Self.documented(text)
        #expect(modules.count >= 18)
        #expect(Self.violations(modules, exceptions: Self.exceptions(text)) == [])
        // Each exception is an arrow that exists and that the rules forbid (else it is stale).
        for exception in Self.exceptions(text) {
            let from = try #require(modules[exception.from]), to = try #require(modules[exception.to])
            #expect(from.imports.contains(exception.to), "exception \(exception.from) → \(exception.to) names no arrow of the table")
            #expect(Self.violation(from: from, to: to) != nil, "exception \(exception.from) → \(exception.to) is allowed anyway: remove it")
        }
    }

    @Test("the rules catch a wrong-way arrow: a store or feature importing another store, a feature importing a higher one, a foundation module importing a feature")
    func rulesCanFail() throws {
        var modules = try Self.documented(try Self.architecture())
        let exceptions = Self.exceptions(try Self.architecture())
        #expect(Self.violations(modules, exceptions: exceptions).isEmpty)
        for (from, to) in [("KeysmithTokens", "KeysmithPostgres"), ("KeysmithVault", "KeysmithSecretService"), ("KeysmithTokens", "KeysmithPolicy"),
                           ("Keysmith", "KeysmithTokens"), ("KeysmithPolicy", "KeysmithStores"), ("KeysmithStores", "keysmith")] {
            var wrong = modules
            wrong[from]!.imports.insert(to)
            #expect(Self.violations(wrong, exceptions: exceptions).count == 1, "\(from) → \(to) passed the rules")
        }
        // An exception, written as docs/architecture.md says, covers its own arrow only.
        let written = Self.exceptions("## Exceptions\n\n1. `KeysmithPolicy` → `KeysmithTokens`, only from `Sources/KeysmithPolicy/A.swift`: why.\n")
        #expect(written.map { "\($0.from) → \($0.to) \($0.files.sorted())" } == ["KeysmithPolicy → KeysmithTokens [\"Sources/KeysmithPolicy/A.swift\"]"])
        modules["KeysmithPolicy"]!.imports.insert("KeysmithTokens")
        #expect(Self.violations(modules, exceptions: written).isEmpty)
        modules["KeysmithPostgres"]!.imports.insert("KeysmithProvider")
        #expect(Self.violations(modules, exceptions: written).count == 1)
    }

    @Test("no source re-exports a module of another package (Foundation included); the only re-exports are two of the core's own declarations")
    func noForeignReexports() throws {
        let graph = try Self.built()
        var reexports: [String] = []
        for (_, target) in graph where target.kind != "test" {
            let folder = SourceImports.root.appendingPathComponent(target.path)
            for file in SourceImports.swiftFiles(in: folder) {
                let text = try String(contentsOf: folder.appendingPathComponent(file), encoding: .utf8)
                for line in text.split(separator: "\n") where line.trimmingCharacters(in: .whitespaces).hasPrefix("@_exported") {
                    reexports.append("\(target.path)/\(file): \(line.trimmingCharacters(in: .whitespaces))")
                }
            }
        }
        #expect(reexports.sorted() == [
            "Sources/KeysmithTokens/OAuthToken.swift: @_exported public import enum Keysmith.ScopeState",
            "Sources/KeysmithTokens/OAuthToken.swift: @_exported public import struct Keysmith.ScopeStatus",
        ], "\(reexports)")
    }

    @Test("a source file imports only the package's modules its target declares; an exception's arrow only from its named files")
    func sourcesImportWhatIsDeclared() throws {
        let text = try Self.architecture()
        let exceptions = Self.exceptions(text)
        // None since 0.5.0 (the deprecated forwards went with their arrows).
        #expect(exceptions.isEmpty, "\(exceptions.map { "\($0.from) → \($0.to)" })")
        let graph = try Self.built()
        var checked = 0
        for (name, target) in graph.sorted(by: { $0.key < $1.key }) where target.kind != "system-target" && target.kind != "system" {
            let folder = SourceImports.root.appendingPathComponent(target.path)
            for file in SourceImports.swiftFiles(in: folder) {
                let path = "\(target.path)/\(file)"
                for (line, module) in SourceImports.imports(in: try String(contentsOf: folder.appendingPathComponent(file), encoding: .utf8))
                where graph[module] != nil && module != name {
                    checked += 1
                    #expect(target.dependencies.contains(module), "\(path) imports \(module), which \(name) does not declare: \(line)")
                    if let exception = exceptions.first(where: { $0.from == name && $0.to == module }) {
                        #expect(exception.files.contains(path), "\(path) imports \(module); the exception allows it only from \(exception.files.sorted())")
                    }
                }
            }
        }
        #expect(checked > 100, "only \(checked) imports of the package's modules found: are the sources where dump-package says?")
    }
}
