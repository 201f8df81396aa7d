import Foundation
import KeysmithTestSupport
import Testing

/// scripts/install.sh puts keysmith where a system tool goes (README, "Install"): the stripped
/// binary and git's helper link, a man page per command, bash, zsh and fish completions, and
/// `--uninstall` takes exactly those away again.
@Suite("install: keysmith installed like a system tool, and uninstalled")
struct InstallTests {
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("scripts/install.sh").path

    func run(_ executable: String, _ arguments: [String], environment extra: [String: String] = [:]) throws -> Keysmith.Result {
        let result = try spawnAndWait(executable, arguments, environment: ProcessInfo.processInfo.environment.merging(extra) { $1 }, deadline: 300)
        return Keysmith.Result(status: result.status, stdout: String(decoding: result.stdout, as: UTF8.self), stderr: String(decoding: result.stderr, as: UTF8.self))
    }

    @Test("install.sh PREFIX: the installed binary runs, and runs the installed keysmith-net for PostgreSQL, git-credential-keysmith is it, man -l renders a command's page, bash completes `keysmith token <TAB>`; --uninstall leaves no file behind")
    func installAndUninstall() throws {
        let prefix = FileManager.default.temporaryDirectory.appendingPathComponent("keysmith-prefix-\(UUID().uuidString.prefix(8))").path
        defer { try? FileManager.default.removeItem(atPath: prefix) }
        let installed = try run("/bin/bash", [Self.script, prefix], environment: ["KEYSMITH": Keysmith.binary])
        #expect(installed.status == 0, "\(installed.output)")
        #expect(installed.stdout.contains("installed in \(prefix)"), "\(installed.output)")

        let version = try run(prefix + "/bin/keysmith", ["--version"])
        let built = try run(Keysmith.binary, ["--version"])
        #expect(version.status == 0 && version.stdout == built.stdout)
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: prefix + "/bin/git-credential-keysmith") == "keysmith")
        let helper = try run(prefix + "/bin/git-credential-keysmith", ["capability"])
        #expect(helper.status == 0 && helper.stdout.isEmpty, "git's helper link runs keysmith git-credential: \(helper.output)")
        // Stripped: no symbol table left, in keysmith and in keysmith-net.
        let symbols = try run("/usr/bin/nm", [prefix + "/bin/keysmith"])
        #expect(symbols.stderr.contains("no symbols"), "\(symbols.stderr.prefix(200))")
        let net = prefix + "/libexec/keysmith/keysmith-net"
        let netSymbols = try run("/usr/bin/nm", [net])
        #expect(netSymbols.stderr.contains("no symbols"), "\(netSymbols.stderr.prefix(200))")
        // The installed keysmith finds keysmith-net where install.sh put it, and hands it what
        // needs PostgreSQL (no database here: keysmith-net says so, exit 5).
        let postgres = try run(prefix + "/bin/keysmith", ["postgres", "verify"], environment: ["KEYSMITH_DATABASE_URL": ""])
        #expect(postgres.status == 5 && postgres.stderr.contains("no database is configured"), "\(postgres.output)")
        let netVersion = try run(net, ["--version"])
        #expect(netVersion.stdout == built.stdout)

        // A man page per command, rendered by man.
        let pages = try FileManager.default.contentsOfDirectory(atPath: prefix + "/share/man/man1")
        for page in ["keysmith.1", "keysmith-token.1", "keysmith-token-get.1", "keysmith-git-credential.1", "keysmith-provider-add.1"] {
            #expect(pages.contains(page), "\(page) missing from \(pages.sorted().prefix(8))")
        }
        let manual = try run("/usr/bin/man", ["-l", "-P", "cat", prefix + "/share/man/man1/keysmith-token-get.1"], environment: ["MANWIDTH": "100"])
        #expect(manual.status == 0, "\(manual.stderr)")
        #expect(manual.stdout.contains("KEYSMITH-TOKEN-GET(1)") && manual.stdout.contains("--min-validity") && manual.stdout.contains("SYNOPSIS"),
                "\(manual.stdout.prefix(400))")

        // bash completes the subcommands of `keysmith token`.
        let completion = prefix + "/share/bash-completion/completions/keysmith"
        let completed = try run("/bin/bash", ["-c", """
            source '\(completion)'
            COMP_LINE='keysmith token '; COMP_WORDS=(keysmith token ''); COMP_CWORD=2; COMP_POINT=${#COMP_LINE}
            _keysmith
            printf '%s\\n' "${COMPREPLY[@]}"
            """], environment: ["PATH": prefix + "/bin:/usr/bin:/bin"])
        let offered = Set(completed.stdout.split(separator: "\n").map(String.init))
        #expect(offered.isSuperset(of: ["get", "login", "revoke", "outbox", "list"]), "\(offered.sorted()) \(completed.stderr)")
        #expect(FileManager.default.fileExists(atPath: prefix + "/share/zsh/site-functions/_keysmith"))
        #expect(FileManager.default.fileExists(atPath: prefix + "/share/fish/vendor_completions.d/keysmith.fish"))

        // --uninstall: every file it installed goes, and nothing else was there.
        let removed = try run("/bin/bash", [Self.script, "--uninstall", prefix])
        #expect(removed.status == 0, "\(removed.output)")
        let left = FileManager.default.enumerator(atPath: prefix)?.compactMap { $0 as? String }.filter { path in
            var directory: ObjCBool = false
            return FileManager.default.fileExists(atPath: prefix + "/" + path, isDirectory: &directory) && !directory.boolValue
                || (try? FileManager.default.destinationOfSymbolicLink(atPath: prefix + "/" + path)) != nil
        } ?? []
        #expect(left.isEmpty, "left behind: \(left)")
        let again = try run("/bin/bash", [Self.script, "--uninstall", prefix])
        #expect(again.status == 2 && again.stderr.contains("nothing to uninstall"))
    }
}
