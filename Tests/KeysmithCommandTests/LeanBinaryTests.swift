import Foundation
import Testing
import KeysmithTestSupport

/// The lean `keysmith` and `keysmith-net` (README, "Install"; docs/benchmarks.md, "Binary size"):
/// PostgreSQL and providers live in `keysmith-net`, which `keysmith` runs in its place for the
/// commands that need them.
@Suite("keysmith is lean, and hands what needs the network to keysmith-net")
struct LeanBinaryTests {
    static let net = URL(fileURLWithPath: Keysmith.binary).deletingLastPathComponent().appendingPathComponent("keysmith-net").path

    /// Module names as Swift writes them in every symbol and type name of a module (its length,
    /// then the name): only a binary that uses Foundation (whose ICU data is most of its size),
    /// SwiftNIO, TLS, the PostgreSQL driver or the HTTP client holds them. (A debug build may
    /// still list libFoundation.so as needed, unused: the autolink of FoundationEssentials names
    /// it; a static release build links only what is used.)
    static let heavy = ["10Foundation", "11PostgresNIO", "8NIOPosix", "6NIOSSL", "15AsyncHTTPClient", "16KeysmithPostgres", "16KeysmithProvider"]

    @Test("the built keysmith uses no Foundation, SwiftNIO, TLS, PostgreSQL driver or HTTP client; keysmith-net uses each of them")
    func leanBinary() throws {
        let lean = try Data(contentsOf: URL(fileURLWithPath: Keysmith.binary))
        let full = try Data(contentsOf: URL(fileURLWithPath: Self.net))
        for name in Self.heavy {
            #expect(lean.range(of: Data(name.utf8)) == nil, "keysmith holds \(name)")
            // The same search finds it where it is: the check above can fail.
            #expect(full.range(of: Data(name.utf8)) != nil, "keysmith-net lacks \(name)")
        }
        print("debug builds: keysmith \(lean.count >> 20) MiB, keysmith-net \(full.count >> 20) MiB")
    }

    @Test("keysmith runs keysmith-net for PostgreSQL, providers, git and help: the same answers, from one command")
    func handsOver() throws {
        let keysmith = try Keysmith()
        // A command of keysmith-net's alone: its help, and its own usage error.
        let help = try keysmith.run(["postgres", "--help"])
        #expect(help.status == 0 && help.stdout.contains("rotate-master-key"), "\(help.output)")
        let top = try keysmith.run(["--help"])
        #expect(top.stdout.contains("provider") && top.stdout.contains("git-credential") && top.stdout.contains("watch"), "\(top.output)")
        let token = try keysmith.run(["token", "--help"])
        #expect(token.stdout.contains("login") && token.stdout.contains("outbox") && token.stdout.contains("reconcile"), "\(token.output)")
        // No database configured: keysmith-net says so (exit 5), as keysmith always did.
        let watch = try keysmith.run(["watch"])
        #expect(watch.status == 5 && watch.stderr.contains("no database is configured"), "\(watch.output)")
        let backend = try keysmith.run(["secret", "list", "--backend", "postgres"])
        #expect(backend.status == 5 && backend.stderr.contains("no database is configured"), "\(backend.output)")
        // A misspelled command gets keysmith-net's suggestion among every command.
        let typo = try keysmith.run(["postgress"])
        #expect(typo.status == 64 && typo.stderr.contains("did you mean `postgres`"), "\(typo.output)")
        // What needs neither stays in keysmith: it runs without keysmith-net.
        let lonely = FileManager.default.temporaryDirectory.appendingPathComponent("keysmith-lonely-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: lonely, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: lonely) }
        let copy = lonely.appendingPathComponent("keysmith").path
        try FileManager.default.copyItem(atPath: Keysmith.binary, toPath: copy)
        var alone = keysmith
        alone.executable = copy
        let version = try alone.run(["--version"])
        #expect(version.status == 0 && !version.stdout.isEmpty, "\(version.output)")
        let list = try alone.run(["secret", "list"])
        #expect(list.status == 5 && list.stderr.contains("keysmith init"), "a vault command runs in keysmith alone: \(list.output)")
        // And what needs keysmith-net says it is missing, and where it was looked for.
        let missing = try alone.run(["postgres", "verify"])
        #expect(missing.status == 5 && missing.stderr.contains("keysmith-net") && missing.stderr.contains(lonely.path), "\(missing.output)")
        // Without keysmith-net, help and usage errors are the lean command's own (exit 0 and 64).
        let aloneHelp = try alone.run(["--help"])
        #expect(aloneHelp.status == 0 && aloneHelp.stdout.contains("secret"), "\(aloneHelp.output)")
        let aloneTypo = try alone.run(["secret", "get", "--servce", "x"])
        #expect(aloneTypo.status == 64 && !aloneTypo.stderr.contains("keysmith-net"), "\(aloneTypo.output)")
        let misplaced = try alone.run(["--vault", "v", "secret", "list"])
        #expect(misplaced.status == 64 && misplaced.stderr.contains("goes after the subcommand"), "\(misplaced.output)")
    }

    /// Every command line that reaches PostgreSQL or a provider. Run by a `keysmith` without
    /// `keysmith-net` and with no vault, each must say it needs `keysmith-net`: had `keysmith`
    /// gone on to open the store (where a passphrase would be asked for, or input read) before
    /// handing the command over, it would say instead that there is no vault.
    static let needsNetwork: [[String]] = [
        ["token", "revoke", "--service", "s", "--account", "a", "--at-provider", "read"],
        ["token", "revoke-all", "--service", "s", "--account", "a", "--at-provider"],
        ["token", "delete", "--service", "s", "--account", "a", "--at-provider"],
        ["token", "introspect", "--service", "s", "--account", "a", "--at-provider"],
        ["token", "get", "--service", "s", "--account", "a", "--fresh"],
        ["token", "login", "--provider", "p"],
        ["token", "outbox"],
        ["token", "reconcile", "--service", "s"],
        ["revoke", "--scope", "read", "--yes", "--at-provider"],
        ["revoke", "--scope", "read", "--wait"],
        ["secret", "list", "--backend", "postgres"],
        ["secret", "list", "--backend=auto"],
        ["migrate", "--from", "vault", "--to", "postgres"],
        ["watch"],
        ["postgres", "verify"],
        ["provider", "list"],
        ["git-credential", "get"],
        ["help", "postgres"],
    ]

    @Test("a keysmith without keysmith-net refuses every command line that needs it before it opens a store",
          arguments: needsNetwork)
    func everyNetworkPathIsHandedOverAtTheStart(_ arguments: [String]) throws {
        var keysmith = try Keysmith()
        let lonely = URL(fileURLWithPath: keysmith.directory).appendingPathComponent("alone")
        try FileManager.default.createDirectory(at: lonely, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: Keysmith.binary, toPath: lonely.appendingPathComponent("keysmith").path)
        keysmith.executable = lonely.appendingPathComponent("keysmith").path
        keysmith.environment["KEYSMITH_KEYFILE"] = keysmith.keyfile
        let result = try keysmith.run(arguments, stdin: "protocol=https\nhost=example.com\n\n")
        #expect(result.status == 5 && result.stderr.contains("needs keysmith-net") && result.stdout.isEmpty, "\(arguments): \(result.output)")
        #expect(!result.stderr.contains("no vault"), "\(arguments) opened the store before handing over: \(result.output)")
    }

    @Test("a lean keysmith installed as keysmith-net is refused at once, not run again for ever")
    func aLeanHelperIsRefused() throws {
        let keysmith = try Keysmith()
        let folder = URL(fileURLWithPath: keysmith.directory).appendingPathComponent("twins")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        var twin = keysmith
        twin.executable = folder.appendingPathComponent("keysmith").path
        try FileManager.default.copyItem(atPath: Keysmith.binary, toPath: twin.executable)
        try FileManager.default.copyItem(atPath: Keysmith.binary, toPath: folder.appendingPathComponent("keysmith-net").path)
        let copied = try twin.run(["postgres", "verify"])
        #expect(copied.status == 5 && copied.stderr.contains("is a lean keysmith, not keysmith-net"), "\(copied.output)")
        // A link to keysmith itself is never taken for keysmith-net.
        try FileManager.default.removeItem(atPath: folder.appendingPathComponent("keysmith-net").path)
        try FileManager.default.createSymbolicLink(atPath: folder.appendingPathComponent("keysmith-net").path, withDestinationPath: "keysmith")
        let linked = try twin.run(["postgres", "verify"])
        #expect(linked.status == 5 && linked.stderr.contains("needs keysmith-net"), "\(linked.output)")
    }

    /// The dynamic loader's list of what a binary loads at its start (`LD_TRACE_LOADED_OBJECTS`,
    /// what ldd does): the program itself is not run.
    static func loadedAtStart(_ binary: String) throws -> String {
        let result = try spawnAndWait(binary, ["--version"], environment: ["LD_TRACE_LOADED_OBJECTS": "1", "PATH": "/usr/bin:/bin"],
                                      directory: "/", stdin: Data())
        #expect(result.status == 0, "\(String(decoding: result.stderr, as: UTF8.self))")
        return String(decoding: result.stdout, as: UTF8.self)
    }

    @Test("neither keysmith nor keysmith-net loads libsecret, GLib or GIO at its start: only opening a Secret Service store does")
    func libsecretIsLoadedOnFirstUse() throws {
        for binary in [Keysmith.binary, Self.net] {
            let loaded = try Self.loadedAtStart(binary)
            // What the list would name: libcrypto is linked, so the list is the real one.
            #expect(loaded.contains("libcrypto.so"), "\(loaded)")
            for library in ["libsecret-1", "libglib-2.0", "libgio-2.0", "libgobject-2.0"] {
                #expect(!loaded.contains(library), "\(binary) loads \(library) at its start:\n\(loaded)")
            }
        }
        // A libsecret that cannot be loaded, first in the search path: a command on a file vault
        // never notices (a linked libsecret would stop the program before main), and one on the
        // Secret Service says what is missing and how to get it (exit 5), without a D-Bus session.
        var keysmith = try Keysmith.withVault()
        let broken = keysmith.directory + "/broken-lib"
        try FileManager.default.createDirectory(atPath: broken, withIntermediateDirectories: true)
        try Data("not a shared library".utf8).write(to: URL(fileURLWithPath: broken + "/libsecret-1.so.0"))
        keysmith.environment["LD_LIBRARY_PATH"] = ([broken] + (keysmith.environment["LD_LIBRARY_PATH"].map { [$0] } ?? [])).joined(separator: ":")
        keysmith.environment.removeValue(forKey: "DBUS_SESSION_BUS_ADDRESS")
        let set = try keysmith.run(["secret", "set", "--service", "s", "--account", "a"], stdin: "value")
        #expect(set.status == 0, "\(set.output)")
        let got = try keysmith.run(["secret", "get", "--service", "s", "--account", "a"])
        #expect(got.status == 0 && got.stdout.trimmingCharacters(in: .newlines) == "value", "\(got.output)")
        let refused = try keysmith.run(["secret", "list", "--backend", "secret-service"])
        #expect(refused.status == 5, "\(refused.output)")
        #expect(refused.stderr.contains("needs libsecret, which cannot be loaded") && refused.stderr.contains("libsecret-1-0"), "\(refused.output)")
        // A shared library that is not libsecret (another real one under its name): refused
        // whole, naming what it lacks, before any of it is called.
        let other = ["/lib/x86_64-linux-gnu/libz.so.1", "/usr/lib/x86_64-linux-gnu/libz.so.1", "/lib/aarch64-linux-gnu/libz.so.1"]
            .first { FileManager.default.fileExists(atPath: $0) }
        let impostor = try #require(other, "no libz.so.1 to stand in for libsecret")
        try FileManager.default.removeItem(atPath: broken + "/libsecret-1.so.0")
        // Its bytes, not the link the system's name is.
        try Data(contentsOf: URL(fileURLWithPath: impostor)).write(to: URL(fileURLWithPath: broken + "/libsecret-1.so.0"))
        let lacking = try keysmith.run(["secret", "list", "--backend", "secret-service"])
        #expect(lacking.status == 5, "\(lacking.output)")
        #expect(lacking.stderr.contains("lacks 41 of the 41 functions Keysmith calls (secret_service_get_sync, "), "\(lacking.output)")
    }
}
