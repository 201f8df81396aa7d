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
}
