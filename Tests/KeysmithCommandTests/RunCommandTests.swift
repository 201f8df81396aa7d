import Foundation
import KeysmithTestSupport
import Testing

/// `keysmith run`: secrets handed to a program in its environment, through the built binary.
@Suite("the keysmith command: run")
struct RunCommandTests {
    @Test("run --env NAME=SERVICE/ACCOUNT -- COMMAND: the command sees the secrets in its environment and never on its argv; its exit status and its signal are the process's; a missing item runs nothing (exit 2); a command not found exits 127; a bad name or no command is a usage error")
    func secretsInTheEnvironment() throws {
        let keysmith = try Keysmith.withVault()
        defer { keysmith.cleanup() }
        #expect(try keysmith.run(["secret", "set", "--service", "api", "--account", "ci"], stdin: "s3cret value").status == 0)
        #expect(try keysmith.run(["secret", "set", "--service", "db", "--account", "app/prod"], stdin: "pa55/word").status == 0)
        let marker = keysmith.directory + "/ran"
        // The account holds a '/': the item is split at the first one.
        let seen = try keysmith.run(["run", "--env", "API=api/ci", "--env", "DB=db/app/prod", "--",
                                     "sh", "-c", #"printf '[%s] [%s]' "$API" "$DB"; tr '\0' ' ' < /proc/$$/cmdline > "$1"; exit 7"#, "sh", marker])
        #expect(seen.status == 7, "\(seen.output)")
        #expect(seen.stdout == "[s3cret value] [pa55/word]", "\(seen.output)")
        // The secrets are not on the command's argv (nor on keysmith's, which it replaced).
        let argv = try String(contentsOfFile: marker, encoding: .utf8)
        #expect(argv.hasPrefix("sh -c ") && !argv.contains("s3cret") && !argv.contains("pa55"), "\(argv)")
        // keysmith's own credential does not go to the command (the vault's keyfile here).
        let scrubbed = try keysmith.run(["run", "--env", "API=api/ci", "--", "sh", "-c", #"printf '%s|%s' "${KEYSMITH_KEYFILE-unset}" "${KEYSMITH_PASSPHRASE-unset}""#],
                                        environment: ["KEYSMITH_PASSPHRASE": "not-for-the-command"])
        #expect(scrubbed.status == 0 && scrubbed.stdout == "unset|unset", "\(scrubbed.output)")
        // A missing item: nothing runs.
        try? FileManager.default.removeItem(atPath: marker)
        let missing = try keysmith.run(["run", "--env", "API=api/nobody", "--", "sh", "-c", "touch \"$1\"", "sh", marker])
        #expect(missing.status == 2 && missing.stderr.contains("the command was not run"), "\(missing.output)")
        #expect(!FileManager.default.fileExists(atPath: marker))
        // The command's signal is the process's own (it is the same process).
        let signalled = try keysmith.run(["run", "--env", "API=api/ci", "--", "sh", "-c", "kill -TERM $$"])
        #expect(signalled.status == 128 + SIGTERM, "\(signalled.output)")
        let notFound = try keysmith.run(["run", "--env", "API=api/ci", "--", "no-such-command-here"])
        #expect(notFound.status == 127 && notFound.stderr.contains("cannot run no-such-command-here"), "\(notFound.output)")
        for arguments in [["run", "--env", "1API=api/ci", "--", "true"], ["run", "--env", "API=api", "--", "true"], ["run", "--env", "API=api/ci"],
                          ["run", "--env", "A=api/ci", "--env", "A=db/app/prod", "--", "true"]] {
            let refused = try keysmith.run(arguments)
            #expect(refused.status == 64, "\(arguments): \(refused.output)")
        }
        // A secret that cannot be an environment variable (a NUL byte) is refused, naming the item only.
        #expect(try keysmith.run(["batch"], stdin: #"{"op":"set","service":"bin","account":"x","secretBase64":"YQBi"}"#).status == 0)
        let binary = try keysmith.run(["run", "--env", "B=bin/x", "--", "true"])
        #expect(binary.status == 64 && binary.stderr.contains("cannot be an environment variable"), "\(binary.output)")
    }

    @Test("secret generate: the length and classes asked for, each class present; printed without --set; with --set stored and printed only with --print; --new refuses an item that exists; digits drawn without bias; bad lengths and classes are usage errors")
    func generate() throws {
        let keysmith = try Keysmith.withVault()
        defer { keysmith.cleanup() }
        let printed = try keysmith.run(["secret", "generate", "--service", "g", "--account", "a", "--no-newline"])
        #expect(printed.status == 0 && printed.stdout.count == 24, "\(printed.output)")
        let classes: [(String, (Character) -> Bool)] = [("lower", { $0.isLowercase }), ("upper", { $0.isUppercase }), ("digits", { $0.isNumber }),
                                                        ("symbols", { $0.isPunctuation || $0.isSymbol })]
        for (name, test) in classes { #expect(printed.stdout.contains(where: test), "no \(name) in \(printed.stdout.count) characters") }
        #expect(printed.stdout.allSatisfy { $0.isASCII && !$0.isWhitespace })
        #expect(try keysmith.run(["secret", "get", "--service", "g", "--account", "a"]).status == 2, "not stored without --set")
        let stored = try keysmith.run(["secret", "generate", "--service", "g", "--account", "a", "--set", "--length", "40"])
        #expect(stored.status == 0 && stored.stdout.isEmpty, "printed only when asked: \(stored.output)")
        #expect(try keysmith.run(["secret", "get", "--service", "g", "--account", "a", "--no-newline"]).stdout.count == 40)
        let shown = try keysmith.run(["secret", "generate", "--service", "g", "--account", "a", "--set", "--print", "--classes", "lower,upper"])
        #expect(shown.status == 0 && shown.stdout.count == 25 && shown.stdout.dropLast().allSatisfy(\.isLetter), "\(shown.output)")
        #expect(try keysmith.run(["secret", "get", "--service", "g", "--account", "a"]).stdout == shown.stdout, "the printed one is the stored one")
        #expect(try keysmith.run(["secret", "generate", "--service", "g", "--account", "a", "--set", "--new"]).status == 7)
        // 20 x 640 digits: each digit about 1,280 times (sd about 34); a biased draw would skew them.
        var counts: [Character: Int] = [:]
        for _ in 0..<20 {
            let digits = try keysmith.run(["secret", "generate", "--service", "g", "--account", "a", "--length", "640", "--classes", "digits",
                                           "--no-newline"]).stdout
            #expect(digits.count == 640 && digits.allSatisfy(\.isNumber))
            for character in digits { counts[character, default: 0] += 1 }
        }
        #expect(counts.count == 10 && counts.values.allSatisfy { (1_100...1_460).contains($0) }, "\(counts.sorted { $0.key < $1.key })")
        for arguments in [["--length", "7"], ["--length", "1025"], ["--classes", "digits,emoji"], ["--classes", "digits,digits"], ["--print"], ["--new"]] {
            let refused = try keysmith.run(["secret", "generate", "--service", "g", "--account", "a"] + arguments)
            #expect(refused.status == 64, "\(arguments): \(refused.output)")
        }
    }
}
