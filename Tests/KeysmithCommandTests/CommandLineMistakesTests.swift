import Foundation
import KeysmithTestSupport
import Testing

/// Mistakes at the command line get a usage error (exit 64) and change nothing, as docs/cli.md
/// promises; found by a session-17 audit from the docs alone, each failed before its fix.
@Suite("the keysmith command: a mistyped command line changes nothing")
struct CommandLineMistakesTests {
    /// Runs `script` with `sh -c`, `$KS` being the built binary.
    static func shell(_ keysmith: Keysmith, _ script: String, deadline: TimeInterval = 120) throws -> Keysmith.Result {
        let result = try spawnAndWait("/bin/sh", ["-c", script], environment: keysmith.environment.merging(["KS": Keysmith.binary]) { $1 },
                                      directory: keysmith.directory, deadline: deadline)
        return Keysmith.Result(status: result.status, stdout: String(decoding: result.stdout, as: UTF8.self),
                               stderr: String(decoding: result.stderr, as: UTF8.self))
    }

    @Test("an option-shaped word that is not an option is named, with the nearest option, even when a required option is missing because of it; -s and -a point at --service and --account; a word with a digit, or a value after =, is still withheld")
    func unknownOptionsAreNamed() throws {
        let keysmith = try Keysmith.withVault()
        defer { keysmith.cleanup() }
        let cases: [([String], String)] = [
            (["secret", "get", "--service", "s", "--acount", "a"], "unknown option '--acount'; did you mean '--account'?"),
            (["secret", "get", "--service", "s", "--account", "a", "--verbose"], "unknown option '--verbose'"),
            (["secret", "set", "--servce", "s", "--account", "a"], "unknown option '--servce'; did you mean '--service'?"),
            (["secret", "get", "-s", "github", "-a", "ci"], "'-s' is not an option: options are spelled --name (only -h is short); did you mean '--service'?"),
            (["token", "list", "--jsn"], "unknown option '--jsn'; did you mean '--json'?"),
        ]
        for (arguments, message) in cases {
            let result = try keysmith.run(arguments, stdin: "x")
            #expect(result.status == 64 && result.stderr.contains(message), "\(arguments): \(result.output)")
        }
        // Could be secrets typed in the wrong place: withheld.
        for secret in ["--hunter2", "--Pa55word", "--acount=s3cret-value", "--correct-horse-battery-staple"] {
            let result = try keysmith.run(["secret", "get", "--service", "s", "--account", "a", secret])
            #expect(result.status == 64, "\(secret): \(result.output)")
            #expect(!result.stderr.contains("hunter2") && !result.stderr.contains("Pa55word") && !result.stderr.contains("s3cret-value")
                    && !result.stderr.contains("battery"), "\(result.stderr)")
        }
    }

    @Test("a cluster of short options is a usage error, not help: `-shell` would have printed help, exited 0 and stored nothing")
    func shortOptionClustersAreUsageErrors() throws {
        let keysmith = try Keysmith.withVault()
        defer { keysmith.cleanup() }
        #expect(try keysmith.run(["secret", "set", "--service", "s", "--account", "a"], stdin: "kept").status == 0)
        for cluster in ["-shell", "-ch", "-hx", "-vh"] {
            let set = try keysmith.run(["secret", "set", "--service", "s", "--account", "a", cluster], stdin: "new")
            #expect(set.status == 64, "\(cluster): \(set.output)")
            #expect(set.stdout.isEmpty, "no help printed: \(set.stdout)")
            #expect(!set.stderr.contains(cluster), "\(set.stderr)")
            let delete = try keysmith.run(["secret", "delete", "--service", "s", "--account", "a", cluster])
            #expect(delete.status == 64, "\(cluster): \(delete.output)")
        }
        #expect(try keysmith.run(["secret", "get", "--service", "s", "--account", "a"]).stdout == "kept\n")
        // -h and --help themselves still print help.
        #expect(try keysmith.run(["secret", "set", "-h"]).status == 0)
        #expect(try keysmith.run(["secret", "set", "--help"]).stdout.contains("--service"))
    }

    @Test("an option the parser does not know is never repeated (it could be a secret); a known one is named")
    func unknownOptionsAreNotRepeated() throws {
        let keysmith = try Keysmith.withVault()
        defer { keysmith.cleanup() }
        for argument in ["--Tr0ub4dor", "--hunter2=x", "--label=Tr0ub4dor-value"] {
            let result = try keysmith.run(["secret", "get", "--service", "a", "--account", "b", argument])
            #expect(result.status == 64, "\(result.output)")
            #expect(!result.stderr.contains("Tr0ub4dor") && !result.stderr.contains("hunter2"), "\(result.stderr)")
            #expect(result.stderr.split(separator: "\n").count == 1, "\(result.stderr)")
        }
        // Nor when it spans lines (a pasted key), starts with three dashes, or is unquoted.
        for argument in ["s3cr3tline1\nline2", "---hunter2", "-----BEGIN KEY-----\nMIIs3cr3tkey\n-----END KEY-----", "s3cr3t  \n "] {
            let result = try keysmith.run(["secret", "get", "--service", "a", "--account", "b", argument])
            #expect(result.status == 64, "\(result.output)")
            #expect(!result.stderr.contains("s3cr3t") && !result.stderr.contains("hunter2") && !result.stderr.contains("MII"), "\(result.stderr)")
        }
        // Nor does keysmith's own usage error about an argument (a scope, a descriptor number).
        let scope = try keysmith.run(["token", "check", "--service", "a", "--account", "b", #"S3cr3t"Value"#])
        #expect(scope.status == 64 && !scope.stderr.contains("S3cr3t"), "\(scope.output)")
        // A plain word that is also a word of the message is not cut out of it.
        #expect(try keysmith.run(["revoke", "--scope", "with", "--yes", "--wait-timeout", "1s"]).stderr.contains("goes with --wait"))
        // An option Keysmith has, given where it does not belong, is named.
        #expect(try keysmith.run(["--json", "secret", "list"]).stderr.contains("'--json'"))
        // A value the parser rejects is not repeated either (as a separate argument or after `=`).
        let port = try keysmith.run(["secret", "get", "--server", "h", "--protocol", "https", "--account", "b", "--port=s3cr3t"])
        #expect(port.status == 64 && !port.stderr.contains("s3cr3t"), "\(port.output)")
        let missing = try keysmith.run(["secret", "get", "--service", "a", "--acount", "b"])
        #expect(missing.status == 64 && missing.stderr.contains("--account"), "\(missing.output)")
    }

    @Test("arguments that are not UTF-8 are refused: two different byte strings were one item (both became U+FFFD)")
    func argumentsMustBeUTF8() throws {
        let keysmith = try Keysmith.withVault()
        defer { keysmith.cleanup() }
        let set = try Self.shell(keysmith, #"printf x | "$KS" secret set --service "$(printf '\377\376')" --account u"#)
        #expect(set.status == 64, "\(set.output)")
        #expect(set.stderr.contains("UTF-8"), "\(set.stderr)")
        let get = try Self.shell(keysmith, #""$KS" secret get --service "$(printf '\200\200')" --account u"#)
        #expect(get.status == 64, "\(get.output)")
        #expect(try listedItems(try keysmith.run(["secret", "list", "--json"])).isEmpty)
    }

    @Test("batch refuses an empty secret unless --allow-empty, unknown fields, and both secret forms; nothing is applied")
    func batchRefusesWhatSecretSetRefuses() throws {
        let keysmith = try Keysmith.withVault()
        defer { keysmith.cleanup() }
        #expect(try keysmith.run(["secret", "set", "--service", "s1", "--account", "a"], stdin: "kept").status == 0)
        let lines = [
            #"{"op":"set","service":"s1","account":"a","secret":""}"#,
            #"{"op":"set","service":"s1","account":"a","secretBase64":""}"#,
            #"{"op":"set","service":"s1","account":"a","secret":"x","labl":"typo"}"#,
            #"{"op":"set","service":"s1","account":"a","secret":"x","secretBase64":"eQ=="}"#,
            #"{"op":"set","service":"s\u0000x","account":"a","secret":"x"}"#,
            #"{"op":"delete","service":"s1","account":"a","secret":"x"}"#,
            #"{"op":"set","service":"s1","account":"a","secret":"x","port":99999}"#,
        ]
        for line in lines {
            let result = try keysmith.run(["batch"], stdin: #"{"op":"set","service":"s2","account":"a","secret":"fine"}"# + "\n" + line + "\n")
            #expect(result.status == 64, "\(line): \(result.output)")
            #expect(result.stderr.contains("line 2"), "\(result.stderr)")
        }
        #expect(try keysmith.run(["secret", "get", "--service", "s1", "--account", "a"]).stdout == "kept\n")
        #expect(try keysmith.run(["secret", "get", "--service", "s2", "--account", "a"]).status == 2, "nothing applied")
        let allowed = try keysmith.run(["batch", "--allow-empty"], stdin: lines[0] + "\n")
        #expect(allowed.status == 0, "\(allowed.output)")
        #expect(try keysmith.run(["secret", "get", "--service", "s1", "--account", "a"]).stdout == "\n")
    }

    @Test("an empty passphrase is refused by init and passwd, from the environment or a descriptor; both new credentials at once are a usage error")
    func emptyPassphrasesAndTwoCredentials() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        let fromEnvironment = try keysmith.run(["init", "--scrypt-log-n", "14"], environment: ["KEYSMITH_PASSPHRASE": ""])
        #expect(fromEnvironment.status == 64, "\(fromEnvironment.output)")
        #expect(!FileManager.default.fileExists(atPath: keysmith.vault + "/header"))
        try Data().write(to: URL(fileURLWithPath: keysmith.directory + "/empty"))
        let fromDescriptor = try Self.shell(keysmith, #""$KS" init --scrypt-log-n 14 --passphrase-fd 3 3<empty"#)
        #expect(fromDescriptor.status == 64, "\(fromDescriptor.output)")
        #expect(!FileManager.default.fileExists(atPath: keysmith.vault + "/header"))
        // A vault with a passphrase: changing to an empty one is refused too.
        #expect(try keysmith.run(["init", "--scrypt-log-n", "14"], environment: ["KEYSMITH_PASSPHRASE": "old pass"]).status == 0)
        let passwd = try keysmith.run(["vault", "passwd", "--scrypt-log-n", "14"], environment: ["KEYSMITH_PASSPHRASE": "old pass", "KEYSMITH_NEW_PASSPHRASE": ""])
        #expect(passwd.status == 64, "\(passwd.output)")
        try "new pass\n".write(toFile: keysmith.directory + "/new", atomically: true, encoding: .utf8)
        let both = try Self.shell(keysmith, #"KEYSMITH_PASSPHRASE='old pass' "$KS" vault passwd --new-keyfile k2 --new-passphrase-fd 3 3<new"#)
        #expect(both.status == 64, "\(both.output)")
        #expect(!FileManager.default.fileExists(atPath: keysmith.directory + "/k2"))
        #expect(try keysmith.run(["secret", "list"], environment: ["KEYSMITH_PASSPHRASE": "old pass"]).status == 0, "the old passphrase still opens it")
    }

    @Test("a new passphrase from the environment with a line break is refused by init and passwd: --passphrase-fd and the prompt could never give it back")
    func passphrasesWithLineBreaks() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        for passphrase in ["\n", "pass\n", "pass\r", "two\nlines"] {
            let created = try keysmith.run(["init", "--scrypt-log-n", "14"], environment: ["KEYSMITH_PASSPHRASE": passphrase])
            #expect(created.status == 64, "\(passphrase.debugDescription): \(created.output)")
            #expect(created.stderr.contains("KEYSMITH_PASSPHRASE holds a line break"), "\(created.stderr)")
            #expect(!FileManager.default.fileExists(atPath: keysmith.vault + "/header"))
        }
        // Bytes that are not UTF-8 (read as text they became U+FFFD; the descriptor gives the bytes).
        let notUTF8 = try Self.shell(keysmith, #"KEYSMITH_PASSPHRASE="$(printf 'ab\377')" "$KS" init --scrypt-log-n 14"#)
        #expect(notUTF8.status == 64 && notUTF8.stderr.contains("KEYSMITH_PASSPHRASE is not UTF-8"), "\(notUTF8.output)")
        #expect(!FileManager.default.fileExists(atPath: keysmith.vault + "/header"))
        // The passphrase without its newline, as the descriptor gives it, is what works.
        #expect(try keysmith.run(["init", "--scrypt-log-n", "14"], environment: ["KEYSMITH_PASSPHRASE": "pass"]).status == 0)
        try "pass\n".write(toFile: keysmith.directory + "/pass", atomically: true, encoding: .utf8)
        #expect(try Self.shell(keysmith, #""$KS" secret list --passphrase-fd 3 3<pass"#).status == 0)
        for passphrase in ["new\n", "new\r\n"] {
            let passwd = try keysmith.run(["vault", "passwd", "--scrypt-log-n", "14"],
                                          environment: ["KEYSMITH_PASSPHRASE": "pass", "KEYSMITH_NEW_PASSPHRASE": passphrase])
            #expect(passwd.status == 64, "\(passphrase.debugDescription): \(passwd.output)")
            #expect(passwd.stderr.contains("KEYSMITH_NEW_PASSPHRASE holds a line break"), "\(passwd.stderr)")
            #expect(!passwd.stderr.contains("new"), "the passphrase is not echoed: \(passwd.stderr)")
        }
        let passwdNotUTF8 = try Self.shell(keysmith, #"KEYSMITH_PASSPHRASE=pass KEYSMITH_NEW_PASSPHRASE="$(printf 'q\376')" "$KS" vault passwd --scrypt-log-n 14"#)
        #expect(passwdNotUTF8.status == 64, "\(passwdNotUTF8.output)")
        // An existing vault still opens from the environment whatever its bytes (only new ones are checked).
        #expect(try keysmith.run(["secret", "list"], environment: ["KEYSMITH_PASSPHRASE": "pass"]).status == 0)
        #expect(try Self.shell(keysmith, #""$KS" secret list --passphrase-fd 3 3<pass"#).status == 0, "the passphrase did not change")
    }

    @Test("--passphrase-fd 0 is a usage error for commands whose data is standard input (it read the secret, then failed as a wrong passphrase)")
    func passphraseOnStandardInput() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        #expect(try keysmith.run(["init", "--scrypt-log-n", "14"], environment: ["KEYSMITH_PASSPHRASE": "pass"]).status == 0)
        for command in [["secret", "set", "--service", "s", "--account", "a"], ["batch"], ["token", "import", "--service", "t", "--account", "a"]] {
            let result = try keysmith.run(command + ["--passphrase-fd", "0"], stdin: "pass\n")
            #expect(result.status == 64, "\(command): \(result.output)")
            #expect(result.stderr.contains("--passphrase-fd 0 is standard input"), "\(result.stderr)")
        }
    }

    @Test("options that cannot apply are refused, not ignored: watch on another backend, --namespace without PostgreSQL, both new master keys, --wait-timeout without --wait, watch counts below 1 or names with control characters")
    func optionsThatCannotApply() throws {
        let keysmith = try Keysmith.withVault()
        defer { keysmith.cleanup() }
        let cases: [([String], String)] = [
            (["watch", "--backend", "vault", "--count", "1"], "watch needs the postgres backend"),
            (["watch", "--backend", "secret-service"], "watch needs the postgres backend"),
            (["watch", "--count", "0"], "--count must be at least 1"),
            (["watch", "--after=-5"], "--after must be"),
            (["watch", "--name", "evil\nkeysmith: forged"], "--name must be"),
            (["secret", "list", "--backend", "vault", "--namespace", "app1"], "--namespace names a PostgreSQL namespace"),
            (["postgres", "rotate-master-key", "--new-keyfile", "k3", "--new-passphrase-fd", "5"], "not both"),
            (["revoke", "--scope", "read", "--yes", "--wait-timeout", "1s"], "--wait-timeout goes with --wait"),
        ]
        for (arguments, message) in cases {
            let result = try keysmith.run(arguments, environment: ["KEYSMITH_DATABASE_URL": "postgresql://nobody@/nowhere?host=/nonexistent"])
            #expect(result.status == 64, "\(arguments): \(result.output)")
            #expect(result.stderr.contains(message) && result.stderr.split(separator: "\n").count == 1, "\(arguments): \(result.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: keysmith.directory + "/k3"), "no keyfile was made")
    }

    @Test("init over a file that is not a directory exits 7, as over anything else already there")
    func initOverAFile() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        try "mine".write(toFile: keysmith.vault, atomically: true, encoding: .utf8)
        let result = try keysmith.run(["init", "--keyfile", keysmith.keyfile])
        #expect(result.status == 7, "\(result.output)")
        #expect(FileManager.default.contents(atPath: keysmith.vault) == Data("mine".utf8))
    }

    @Test("--port outside 0…65535 is a usage error for every secret command, not 'does not exist'")
    func portsAreBounded() throws {
        let keysmith = try Keysmith.withVault()
        defer { keysmith.cleanup() }
        for command in [["secret", "get"], ["secret", "delete"], ["secret", "set"]] {
            let result = try keysmith.run(command + ["--server", "h", "--protocol", "https", "--account", "a", "--port", "70000"], stdin: "x")
            #expect(result.status == 64, "\(command): \(result.output)")
        }
    }

    @Test("a token response whose scope array holds an element with a space is refused, not split")
    func scopeArrayElementsAreSingleScopes() throws {
        let keysmith = try Keysmith.withVault()
        defer { keysmith.cleanup() }
        let result = try keysmith.run(["token", "import", "--service", "t", "--account", "a"],
                                      stdin: #"{"access_token":"A","token_type":"Bearer","scope":["x","y z"]}"#)
        #expect(result.status == 64, "\(result.output)")
        #expect(try keysmith.run(["token", "list", "--json"]).stdout == #"{"tokens":[]}"# + "\n")
    }

    @Test("token check --quiet prints nothing, on either stream; the exit code answers")
    func quietIsQuiet() throws {
        let keysmith = try Keysmith.withVault()
        defer { keysmith.cleanup() }
        let imported = try keysmith.run(["token", "import", "--service", "news", "--account", "bob", "--requested", "posts:write posts:delete"],
                                        stdin: #"{"access_token":"A","token_type":"Bearer","scope":"posts:write"}"#)
        #expect(imported.status == 0, "\(imported.output)")
        let declined = try keysmith.run(["token", "check", "--service", "news", "--account", "bob", "--quiet", "posts:delete"])
        #expect(declined.status == 3 && declined.output.isEmpty, "\(declined.output)")
        let granted = try keysmith.run(["token", "check", "--service", "news", "--account", "bob", "--quiet", "posts:write"])
        #expect(granted.status == 0 && granted.output.isEmpty, "\(granted.output)")
    }

    @Test("standard input that never ends is refused at the store's limit, not read until memory runs out")
    func endlessInputIsRefusedAtTheLimit() throws {
        let keysmith = try Keysmith.withVault()
        defer { keysmith.cleanup() }
        let secret = try Self.shell(keysmith, #"yes | "$KS" secret set --service big --account a"#, deadline: 120)
        #expect(secret.status == 64, "\(secret.output)")
        #expect(secret.stderr.contains("32 MiB") || secret.stderr.contains("33554432"), "\(secret.stderr)")
        let batch = try Self.shell(keysmith, #"yes '{"op":"delete","service":"s","account":"a"}' | "$KS" batch"#, deadline: 120)
        #expect(batch.status == 64, "\(batch.output)")
        #expect(try listedItems(try keysmith.run(["secret", "list", "--json"])).isEmpty)
    }
}
