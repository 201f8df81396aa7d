import Foundation
import KeysmithTestSupport
import Testing

/// The items of `secret list --json` (one document, `{"items": [...]}`).
func listedItems(_ result: Keysmith.Result) throws -> [[String: Any]] {
    #expect(result.stdout.split(separator: "\n").count == 1, "one document: \(result.stdout)")
    let document = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
    return try #require(document["items"] as? [[String: Any]])
}

/// Runs the built `keysmith` binary in a scratch directory.
struct Keysmith {
    let directory: String
    var environment: [String: String]
    /// The program run: the built `keysmith`, unless a test runs a copy.
    var executable = Keysmith.binary

    static let binary: String = {
        let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var url = URL(fileURLWithPath: executable).deletingLastPathComponent()
        if url.pathExtension == "xctest" { url.deleteLastPathComponent() }
        return url.path + "/keysmith"
    }()

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("keysmith-cli-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        // A clean environment: nothing leaks in from the developer's shell.
        environment = [
            "PATH": "/usr/bin:/bin", "HOME": directory, "TMPDIR": directory,
            "KEYSMITH_VAULT": directory + "/vault",
        ]
    }

    var vault: String { directory + "/vault" }
    var keyfile: String { directory + "/keyfile" }

    struct Result {
        var status: Int32
        var stdout: String
        var stderr: String
        var output: String { stdout + stderr }
    }

    @discardableResult
    func run(_ arguments: [String], stdin: String = "", environment extra: [String: String] = [:]) throws -> Result {
        let result = try spawnAndWait(executable, arguments, environment: environment.merging(extra) { $1 }, directory: directory,
                                      stdin: Data(stdin.utf8))
        return Result(status: result.status, stdout: String(decoding: result.stdout, as: UTF8.self),
                      stderr: String(decoding: result.stderr, as: UTF8.self))
    }

    func cleanup() { try? FileManager.default.removeItem(atPath: directory) }

    /// A scratch directory with a vault made by `keysmith init --keyfile`, unlocked by
    /// `KEYSMITH_KEYFILE` in every run.
    static func withVault() throws -> Keysmith {
        var keysmith = try Keysmith()
        let created = try keysmith.run(["init", "--keyfile", keysmith.keyfile])
        #expect(created.status == 0, "\(created.output)")
        keysmith.environment["KEYSMITH_KEYFILE"] = keysmith.keyfile
        return keysmith
    }
}

@Suite("the keysmith command")
struct CommandTests {
    @Test("errors are one keysmith: line with a stable code: no vault, missing and malformed keyfiles, usage errors, misplaced store options, misspelled commands")
    func errorLines() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        func expectOneLine(_ result: Keysmith.Result, _ code: Int32, _ fragment: String, sourceLocation: SourceLocation = #_sourceLocation) {
            #expect(result.status == code, "\(result.output)", sourceLocation: sourceLocation)
            #expect(result.stderr.hasPrefix("keysmith: "), "\(result.stderr)", sourceLocation: sourceLocation)
            #expect(result.stderr.split(separator: "\n").count == 1, "\(result.stderr)", sourceLocation: sourceLocation)
            #expect(result.stderr.contains(fragment), "\(result.stderr)", sourceLocation: sourceLocation)
        }
        // No vault and no credential: the missing vault is the news, not the missing passphrase.
        expectOneLine(try keysmith.run(["secret", "get", "--service", "s", "--account", "a"]), 5, "no vault at \(keysmith.vault); create one with `keysmith init`")
        try keysmith.run(["init", "--keyfile", keysmith.keyfile])
        expectOneLine(try keysmith.run(["secret", "get", "--keyfile", keysmith.directory + "/nope", "--service", "s", "--account", "a"]), 5,
                      "keyfile \(keysmith.directory)/nope does not exist")
        try "not hex".write(toFile: keysmith.directory + "/bad", atomically: true, encoding: .utf8)
        expectOneLine(try keysmith.run(["secret", "get", "--keyfile", keysmith.directory + "/bad", "--service", "s", "--account", "a"]), 64,
                      "the keyfile \(keysmith.directory)/bad is not 64 hexadecimal digits")
        expectOneLine(try keysmith.run(["secret", "get", "--keyfile", keysmith.keyfile, "--service", "s"]), 64, "keysmith secret get --help")
        expectOneLine(try keysmith.run(["--backend", "secret-service", "secret", "get", "--service", "s", "--account", "a"]), 64,
                      "--backend goes after the subcommand, as in `keysmith secret get --backend")
        expectOneLine(try keysmith.run(["secrt", "get"]), 64, "did you mean `secret`?")
        expectOneLine(try keysmith.run(["zzzzzz"]), 64, "unknown command after `keysmith`")
        #expect(try !keysmith.run(["zzzzzz"]).stderr.contains("zzzzzz"), "the word is not repeated: it could be a secret")
        #expect(try !keysmith.run(["secret", "hunter2"]).stderr.contains("hunter2"))
        // A stray argument (perhaps a secret typed in the wrong place) is never repeated.
        let stray = try keysmith.run(["secret", "set", "--keyfile", keysmith.keyfile, "--service", "s", "--account", "a", "hunter2-SECRET"])
        expectOneLine(stray, 64, "Unexpected argument '…' (see `keysmith secret set --help`)")
        #expect(!stray.output.contains("hunter2"))
        // The parser's own help command still works.
        let help2 = try keysmith.run(["help", "secret"])
        #expect(help2.status == 0 && help2.stdout.contains("USAGE: keysmith secret"), "\(help2.output)")
        // Help states each default once.
        let help = try keysmith.run(["secret", "get", "--help"])
        #expect(help.status == 0)
        #expect(!help.stdout.contains("(default: default). (default") && !help.stdout.contains("(default: 5). (default"), "\(help.stdout)")
        #expect(try keysmith.run(["--version"]).status == 0)
    }

    @Test("init with a keyfile creates both, 0600 and 0700; a second init is refused with exit 7")
    func initWithKeyfile() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        let result = try keysmith.run(["init", "--keyfile", keysmith.keyfile])
        #expect(result.status == 0, "\(result.output)")
        let keyfileMode = try FileManager.default.attributesOfItem(atPath: keysmith.keyfile)[.posixPermissions] as? Int
        let vaultMode = try FileManager.default.attributesOfItem(atPath: keysmith.vault)[.posixPermissions] as? Int
        #expect(keyfileMode == 0o600)
        #expect(vaultMode == 0o700)
        let again = try keysmith.run(["init", "--keyfile", keysmith.keyfile])
        #expect(again.status == 7)
        #expect(again.stderr.hasPrefix("keysmith: "))
        #expect(again.stderr.split(separator: "\n").count == 1)
    }

    @Test("init on a fresh home: the keyfile's directories (~/.config) and the vault's are made, 0700, as README's tour starts")
    func initOnAFreshHome() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        let keyfile = keysmith.directory + "/.config/keysmith/keysmith.key"
        let vault = keysmith.directory + "/.local/share/keysmith/vault"
        let result = try keysmith.run(["init", "--keyfile", keyfile], environment: ["KEYSMITH_VAULT": vault])
        #expect(result.status == 0, "\(result.output)")
        for directory in [keysmith.directory + "/.config", keysmith.directory + "/.config/keysmith"] {
            #expect(try FileManager.default.attributesOfItem(atPath: directory)[.posixPermissions] as? Int == 0o700, "\(directory)")
        }
        #expect(try FileManager.default.attributesOfItem(atPath: keyfile)[.posixPermissions] as? Int == 0o600)
        let set = try keysmith.run(["secret", "set", "--service", "s", "--account", "a"], stdin: "x",
                                   environment: ["KEYSMITH_VAULT": vault, "KEYSMITH_KEYFILE": keyfile])
        #expect(set.status == 0, "\(set.output)")
    }

    @Test("a writer that finds the vault's lock held says so after 1 s naming the lock file and the holder's pid, gives up after --wait-lock with exit 12 and nothing changed; --no-wait fails at once; by default it waits and then writes; a reader does not wait")
    func lockWaits() throws {
        let keysmith = try Keysmith.withVault()
        defer { keysmith.cleanup() }
        #expect(try keysmith.run(["secret", "set", "--service", "s", "--account", "a"], stdin: "before").status == 0)
        // Another process holds the vault's lock (as a long import would) for `hold` seconds.
        let holder = """
            python3 -c 'import fcntl,os,sys,time; f=open(sys.argv[1],"a"); fcntl.flock(f,fcntl.LOCK_EX); open(sys.argv[2],"w").write(str(os.getpid())); time.sleep(float(sys.argv[3]))' \
              "$KEYSMITH_VAULT/lock" held.pid
            """
        /// Runs `then` while the lock is held (for `hold` seconds at most: the holder is ended
        /// when `then` is done).
        func script(hold: Double, _ then: String) throws -> Keysmith.Result {
            try CommandLineMistakesTests.shell(keysmith, """
                rm -f held.pid
                \(holder) \(hold) &
                holding=$!
                while [ ! -s held.pid ]; do sleep 0.01; done
                start=$(date +%s%N)
                \(then)
                status=$?
                echo "ELAPSED_MS: $(( ($(date +%s%N) - start) / 1000000 )) HOLDER: $(cat held.pid)"
                kill $holding 2>/dev/null
                wait
                exit $status
                """)
        }
        func elapsed(_ result: Keysmith.Result) -> Int {
            Int(result.stdout.components(separatedBy: "ELAPSED_MS: ").last?.split(separator: " ").first ?? "") ?? -1
        }
        func holderPID(_ result: Keysmith.Result) -> String {
            String(result.stdout.components(separatedBy: "HOLDER: ").last?.prefix { $0.isNumber } ?? "")
        }
        let noWait = try script(hold: 30, #"printf new | "$KS" secret set --service s --account a --no-wait"#)
        #expect(noWait.status == 12, "\(noWait.output)")
        #expect(noWait.stderr.contains("lock") && noWait.stderr.contains("process \(holderPID(noWait))"), "\(noWait.stderr)")
        #expect(elapsed(noWait) < 5_000, "\(noWait.output)")
        let bounded = try script(hold: 30, #"printf new | "$KS" secret set --service s --account a --wait-lock 2s"#)
        #expect(bounded.status == 12, "\(bounded.output)")
        #expect(bounded.stderr.contains("keysmith: waiting for the vault's lock (") && bounded.stderr.contains("held by process \(holderPID(bounded))")
                && bounded.stderr.contains("giving up after 2 s"), "\(bounded.stderr)")
        #expect(elapsed(bounded) >= 2_000, "\(bounded.output)")
        #expect(try keysmith.run(["secret", "get", "--service", "s", "--account", "a"]).stdout == "before\n", "nothing changed")
        // A reader does not wait for the writers' lock.
        let read = try script(hold: 30, #""$KS" secret get --service s --account a"#)
        #expect(read.status == 0 && read.stdout.hasPrefix("before\n") && elapsed(read) < 5_000, "\(read.output)")
        // By default the writer waits (30 s): the holder lets go after 2 s, and the write lands.
        let waited = try script(hold: 2, #"printf after | "$KS" secret set --service s --account a"#)
        #expect(waited.status == 0, "\(waited.output)")
        #expect(waited.stderr.contains("waiting for the vault's lock") && waited.stderr.contains("giving up after 30 s"), "\(waited.stderr)")
        #expect(try keysmith.run(["secret", "get", "--service", "s", "--account", "a"]).stdout == "after\n")
        #expect(try keysmith.run(["secret", "set", "--service", "s", "--account", "a", "--no-wait", "--wait-lock", "1s"], stdin: "x").status == 64)
    }

    @Test("a vault the user may not read or write is reported as that (exit 1, the path, what to check), never as damage, and nothing changes: the header copies, a log, the log directory read-only, the vault's directory")
    func permissionErrorsAreNotDamage() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        // Root reads everything: as root, the commands run as nobody (setpriv), on files nobody owns.
        let result = try CommandLineMistakesTests.shell(keysmith, #"""
            set -u
            dir=$(pwd)/perm; mkdir -p "$dir"; chmod 777 "$dir"
            export HOME="$dir" KEYSMITH_VAULT="$dir/v" KEYSMITH_KEYFILE="$dir/k" KEYSMITH_ANCHOR_DIR="$dir/a"
            as() { if [ "$(id -u)" = 0 ]; then setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; else "$@"; fi; }
            as "$KS" init --keyfile "$dir/k" >/dev/null || exit 90
            printf kept | as "$KS" secret set --service s --account a || exit 91
            check() { echo "== $1 exit $2"; }
            chmod 000 "$dir/v/header" "$dir/v/header.backup"
            as "$KS" secret get --service s --account a; check header $?
            chmod 600 "$dir/v/header" "$dir/v/header.backup"
            chmod 000 "$dir"/v/data/log/*
            as "$KS" secret get --service s --account a; check log $?
            chmod 600 "$dir"/v/data/log/*
            chmod 500 "$dir/v/data/log"
            printf new | as "$KS" secret set --service s --account a; check logdir $?
            chmod 700 "$dir/v/data/log"
            chmod 000 "$dir/v"
            as "$KS" secret get --service s --account a; check vault $?
            chmod 700 "$dir/v"
            as "$KS" secret get --service s --account a; check after $?
            """#)
        #expect(result.stdout.contains("== header exit 1") && result.stdout.contains("== log exit 1") && result.stdout.contains("== logdir exit 1")
                && result.stdout.contains("== vault exit 1") && result.stdout.contains("kept\n== after exit 0"), "\(result.output)")
        #expect(result.stderr.contains("cannot read the vault's header: open ") && result.stderr.contains("check the owner and mode of"), "\(result.stderr)")
        #expect(result.stderr.contains("cannot read the vault's log data/log/0000000000000001"), "\(result.stderr)")
        #expect(result.stderr.contains("/v/data/log/.tmp-") && result.stderr.contains("Permission denied"), "the read-only log directory: \(result.stderr)")
        #expect(!result.stderr.contains("are damaged") && !result.stderr.contains("restore"), "\(result.stderr)")
    }

    @Test("with no credential and no terminal, a command says no credential was given (exit 5), not that the vault is locked; an empty provider list says so on standard error and prints nothing on standard output")
    func wordingOfEmptyAnswers() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        #expect(try keysmith.run(["init", "--keyfile", keysmith.keyfile]).status == 0)
        let noCredential = try keysmith.run(["secret", "get", "--service", "s", "--account", "a"])
        #expect(noCredential.status == 5 && noCredential.stderr.contains("no credential was given for the vault"), "\(noCredential.output)")
        #expect(!noCredential.stderr.contains("is locked"))
        let providers = try keysmith.run(["provider", "list"], environment: ["KEYSMITH_KEYFILE": keysmith.keyfile])
        #expect(providers.status == 0 && providers.stdout.isEmpty && providers.stderr.contains("no provider is kept here"), "\(providers.output)")
        let json = try keysmith.run(["provider", "list", "--json"], environment: ["KEYSMITH_KEYFILE": keysmith.keyfile])
        #expect(json.status == 0 && json.stdout == "[]\n", "\(json.output)")
    }

    @Test("token get hands out only Bearer tokens (any case): a mac token exits 3 naming its type, printed only with --any-type; a logged-out token exits 3 with --fresh as without it")
    func tokenTypeAndLoggedOut() throws {
        let keysmith = try Keysmith.withVault()
        defer { keysmith.cleanup() }
        let imports = [("mac", #"{"access_token":"mac-access","token_type":"mac","mac_key":"k","mac_algorithm":"hmac-sha-256"}"#),
                       ("lower", #"{"access_token":"lower-access","token_type":"bearer","refresh_token":"r"}"#)]
        for (account, response) in imports {
            let imported = try keysmith.run(["token", "import", "--service", "api", "--account", account], stdin: response)
            #expect(imported.status == 0, "\(imported.output)")
        }
        let mac = try keysmith.run(["token", "get", "--service", "api", "--account", "mac"])
        #expect(mac.status == 3 && mac.stdout.isEmpty, "\(mac.output)")
        #expect(mac.stderr.contains("is of type mac, not Bearer"), "\(mac.stderr)")
        #expect(!mac.stderr.contains("mac-access"))
        let anyType = try keysmith.run(["token", "get", "--service", "api", "--account", "mac", "--any-type"])
        #expect(anyType.status == 0 && anyType.stdout == "mac-access\n", "\(anyType.output)")
        #expect(try keysmith.run(["token", "get", "--service", "api", "--account", "mac", "--refresh", "--any-type"]).status == 64)
        let lower = try keysmith.run(["token", "get", "--service", "api", "--account", "lower"])
        #expect(lower.status == 0 && lower.stdout == "lower-access\n", "\(lower.output)")
        // Logged out: exit 3, with --fresh (no request is made) as without it.
        #expect(try keysmith.run(["token", "revoke-all", "--service", "api", "--account", "lower"]).status == 0)
        let plain = try keysmith.run(["token", "get", "--service", "api", "--account", "lower"])
        let fresh = try keysmith.run(["token", "get", "--service", "api", "--account", "lower", "--fresh"])
        #expect(plain.status == 3, "\(plain.output)")
        #expect(fresh.status == 3 && fresh.stderr.contains("logged out"), "\(fresh.output)")
    }

    @Test("set reads the secret from stdin, get prints it alone, a missing item exits 2")
    func setAndGet() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        try keysmith.run(["init", "--keyfile", keysmith.keyfile])
        let set = try keysmith.run(["secret", "set", "--keyfile", keysmith.keyfile, "--service", "mail", "--account", "bob"],
                                   stdin: "s3cret value\n")
        #expect(set.status == 0, "\(set.output)")
        let get = try keysmith.run(["secret", "get", "--keyfile", keysmith.keyfile, "--service", "mail", "--account", "bob"])
        #expect(get.status == 0)
        #expect(get.stdout == "s3cret value\n")
        let bare = try keysmith.run(["secret", "get", "--no-newline", "--service", "mail", "--account", "bob"],
                                    environment: ["KEYSMITH_KEYFILE": keysmith.keyfile])
        #expect(bare.stdout == "s3cret value")
        let missing = try keysmith.run(["secret", "get", "--keyfile", keysmith.keyfile, "--service", "mail", "--account", "eve"])
        #expect(missing.status == 2)
        #expect(missing.stdout.isEmpty)
        #expect(missing.stderr.contains("does not exist"))
        let delete = try keysmith.run(["secret", "delete", "--keyfile", keysmith.keyfile, "--service", "mail", "--account", "bob"])
        #expect(delete.status == 0)
        let deleteAgain = try keysmith.run(["secret", "delete", "--keyfile", keysmith.keyfile, "--service", "mail", "--account", "bob"])
        #expect(deleteAgain.status == 2)
    }

    @Test("an internet password is stored and read by server, port, protocol and account")
    func internetPassword() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        try keysmith.run(["init", "--keyfile", keysmith.keyfile])
        let item = ["--keyfile", keysmith.keyfile, "--server", "example.com", "--port", "443", "--protocol", "https", "--account", "alice"]
        #expect(try keysmith.run(["secret", "set"] + item, stdin: "pw").status == 0)
        #expect(try keysmith.run(["secret", "get", "--no-newline"] + item).stdout == "pw")
        let unknown = try keysmith.run(["secret", "get", "--keyfile", keysmith.keyfile, "--server", "h", "--protocol", "gopher", "--account", "a"])
        #expect(unknown.status == 64)
        #expect(unknown.stderr.contains("unknown protocol"))
    }

    @Test("a passphrase vault opens from KEYSMITH_PASSPHRASE or --passphrase-fd; a wrong one exits 4")
    func passphrases() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        let created = try keysmith.run(["init", "--scrypt-log-n", "14"], environment: ["KEYSMITH_PASSPHRASE": "right horse"])
        #expect(created.status == 0, "\(created.output)")
        #expect(try keysmith.run(["secret", "set", "--service", "s", "--account", "a"], stdin: "x",
                                 environment: ["KEYSMITH_PASSPHRASE": "right horse"]).status == 0)
        // --passphrase-fd 0 reads the passphrase from stdin.
        let fd = try keysmith.run(["secret", "get", "--passphrase-fd", "0", "--service", "s", "--account", "a"], stdin: "right horse\n")
        #expect(fd.status == 0, "\(fd.output)")
        #expect(fd.stdout == "x\n")
        let wrong = try keysmith.run(["secret", "list"], environment: ["KEYSMITH_PASSPHRASE": "wrong horse"])
        #expect(wrong.status == 4)
        #expect(wrong.stderr == "keysmith: wrong passphrase for this vault (or its header was altered)\n")
        #expect(!wrong.output.contains("right horse") && !wrong.output.contains("wrong horse"))
        let locked = try keysmith.run(["secret", "list"])
        #expect(locked.status == 5)
        #expect(locked.stderr.contains("KEYSMITH_PASSPHRASE"))
    }

    @Test("the key is looked for in one order: --keyfile, KEYSMITH_KEYFILE, --passphrase-fd, KEYSMITH_PASSPHRASE (each source before the next wins, a later wrong one is never tried)")
    func keySourceOrder() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        // A passphrase vault: --passphrase-fd comes before KEYSMITH_PASSPHRASE.
        #expect(try keysmith.run(["init", "--scrypt-log-n", "14"], environment: ["KEYSMITH_PASSPHRASE": "right horse"]).status == 0)
        let fdFirst = try keysmith.run(["secret", "list", "--passphrase-fd", "0"], stdin: "right horse\n",
                                       environment: ["KEYSMITH_PASSPHRASE": "wrong horse"])
        #expect(fdFirst.status == 0, "\(fdFirst.output)")
        let fdWrong = try keysmith.run(["secret", "list", "--passphrase-fd", "0"], stdin: "wrong horse\n",
                                       environment: ["KEYSMITH_PASSPHRASE": "right horse"])
        #expect(fdWrong.status == 4, "\(fdWrong.output)")
        // A keyfile vault: KEYSMITH_KEYFILE comes before a passphrase from either source, and
        // --keyfile before KEYSMITH_KEYFILE; an empty KEYSMITH_KEYFILE names no keyfile.
        let other = keysmith.directory + "/other-vault", otherKey = keysmith.directory + "/other-key"
        #expect(try keysmith.run(["init", "--vault", other, "--keyfile", otherKey]).status == 0)
        let keyfileFirst = try keysmith.run(["secret", "list", "--vault", other, "--passphrase-fd", "0"], stdin: "right horse\n",
                                            environment: ["KEYSMITH_KEYFILE": otherKey, "KEYSMITH_PASSPHRASE": "right horse"])
        #expect(keyfileFirst.status == 0, "\(keyfileFirst.output)")
        let optionFirst = try keysmith.run(["secret", "list", "--vault", other, "--keyfile", otherKey],
                                           environment: ["KEYSMITH_KEYFILE": keysmith.directory + "/no-such-keyfile"])
        #expect(optionFirst.status == 0, "\(optionFirst.output)")
        let emptyVariable = try keysmith.run(["secret", "list"], environment: ["KEYSMITH_KEYFILE": "", "KEYSMITH_PASSPHRASE": "right horse"])
        #expect(emptyVariable.status == 0, "\(emptyVariable.output)")
    }

    @Test("a missing vault exits 5 with a hint to create one")
    func missingVault() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        let result = try keysmith.run(["secret", "list", "--keyfile", keysmith.keyfile])
        #expect(result.status == 5)
        #expect(result.stderr.contains("keysmith init"))
    }

    @Test("a secret never appears in list, verify, errors or help output")
    func secretNeverPrinted() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        try keysmith.run(["init", "--keyfile", keysmith.keyfile])
        let secret = "TOPSECRET-4f1c9a"
        let item = ["--keyfile", keysmith.keyfile, "--service", "vault", "--account", "root"]
        #expect(try keysmith.run(["secret", "set"] + item, stdin: secret).status == 0)
        var outputs = [
            try keysmith.run(["secret", "list", "--keyfile", keysmith.keyfile]),
            try keysmith.run(["secret", "list", "--json", "--keyfile", keysmith.keyfile]),
            try keysmith.run(["vault", "verify", "--keyfile", keysmith.keyfile]),
            try keysmith.run(["secret", "set", "--new"] + item, stdin: secret),  // duplicate: an error
            try keysmith.run(["batch", "--keyfile", keysmith.keyfile], stdin: "{\"op\":\"create\",\"service\":\"vault\",\"account\":\"root\",\"secret\":\"\(secret)\"}\n"),
        ]
        outputs.append(try keysmith.run(["batch", "--keyfile", keysmith.keyfile], stdin: "{\"op\":\"set\",\"secret\":\"\(secret)\"\n"))
        #expect(outputs[3].status == 7)
        #expect(outputs[4].status == 7)
        #expect(outputs[5].status == 64)
        for output in outputs {
            #expect(!output.output.contains(secret), "\(output.output)")
        }
    }

    @Test("batch applies every line in one commit, or none when one line is bad; --dry-run changes nothing")
    func batch() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        try keysmith.run(["init", "--keyfile", keysmith.keyfile])
        let lines = """
            {"op":"set","service":"db","account":"app","secret":"one","label":"App DB"}
            {"op":"create","server":"example.com","protocol":"https","port":443,"account":"a","secretBase64":"AAEC"}

            """
        let dry = try keysmith.run(["batch", "--dry-run", "--keyfile", keysmith.keyfile], stdin: lines)
        #expect(dry.status == 0, "\(dry.output)")
        let dryJSON = try keysmith.run(["batch", "--dry-run", "--json", "--keyfile", keysmith.keyfile], stdin: lines)
        let dryReport = try JSONSerialization.jsonObject(with: Data(dryJSON.stdout.utf8)) as? [String: Any]
        #expect(dryReport?["operations"] as? Int == 2 && dryReport?["applied"] as? Bool == false && dryReport?["dry_run"] as? Bool == true)
        #expect(try listedItems(keysmith.run(["secret", "list", "--json", "--keyfile", keysmith.keyfile])).isEmpty)
        let applied = try keysmith.run(["batch", "--keyfile", keysmith.keyfile], stdin: lines)
        #expect(applied.status == 0, "\(applied.output)")
        let list = try listedItems(keysmith.run(["secret", "list", "--json", "--keyfile", keysmith.keyfile]))
        #expect(list.count == 2)
        #expect(list.contains { $0["label"] as? String == "App DB" })

        let bad = """
            {"op":"set","service":"db","account":"new","secret":"x"}
            {"op":"delete","service":"db","account":"nobody"}

            """
        let failed = try keysmith.run(["batch", "--keyfile", keysmith.keyfile], stdin: bad)
        #expect(failed.status == 2)
        #expect(try listedItems(keysmith.run(["secret", "list", "--json", "--keyfile", keysmith.keyfile])).count == 2)
        let malformed = try keysmith.run(["batch", "--keyfile", keysmith.keyfile], stdin: "{\"op\":\"set\"\n")
        #expect(malformed.status == 64)
        #expect(malformed.stderr.contains("line 1"))
    }

    @Test("verify exits 6 and names the damaged record after a byte of it is flipped")
    func verifyDamage() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        try keysmith.run(["init", "--keyfile", keysmith.keyfile])
        try keysmith.run(["secret", "set", "--keyfile", keysmith.keyfile, "--service", "s", "--account", "a"], stdin: "x")
        #expect(try keysmith.run(["vault", "verify", "--keyfile", keysmith.keyfile]).status == 0)
        let log = keysmith.vault + "/data/log/0000000000000001"
        var bytes = try Data(contentsOf: URL(fileURLWithPath: log))
        bytes[bytes.count - 50] ^= 0xFF
        try bytes.write(to: URL(fileURLWithPath: log))
        let verify = try keysmith.run(["vault", "verify", "--json", "--keyfile", keysmith.keyfile])
        #expect(verify.status == 6)
        #expect(verify.stdout.split(separator: "\n").count == 1, "one document")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(verify.stdout.utf8)) as? [String: Any])
        #expect(report["intact"] as? Bool == false && report["format"] as? Int == 2 && report["newest_commit"] as? Int == 1)
        let problems = try #require(report["problems"] as? [[String: Any]])
        #expect(problems.contains { $0["file"] as? String == "data/log/0000000000000001" && $0["superseded"] as? Bool == false })
        let get = try keysmith.run(["secret", "get", "--keyfile", keysmith.keyfile, "--service", "s", "--account", "a"])
        #expect(get.status == 6)
        #expect(get.stderr.contains("damaged"))
    }

    @Test("passwd moves a vault from a keyfile to a passphrase; rekey keeps every secret")
    func passwdAndRekey() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        try keysmith.run(["init", "--keyfile", keysmith.keyfile])
        try keysmith.run(["secret", "set", "--keyfile", keysmith.keyfile, "--service", "s", "--account", "a"], stdin: "x")
        let passwd = try keysmith.run(["vault", "passwd", "--keyfile", keysmith.keyfile, "--scrypt-log-n", "14"],
                                      environment: ["KEYSMITH_NEW_PASSPHRASE": "new pass"])
        #expect(passwd.status == 0, "\(passwd.output)")
        #expect(try keysmith.run(["secret", "list", "--keyfile", keysmith.keyfile]).status == 4)
        let env = ["KEYSMITH_PASSPHRASE": "new pass"]
        #expect(try keysmith.run(["vault", "rekey"], environment: env).status == 0)
        #expect(try keysmith.run(["secret", "get", "--service", "s", "--account", "a"], environment: env).stdout == "x\n")
    }

    @Test("usage errors exit 64 and --help documents the exit codes")
    func usage() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        #expect(try keysmith.run(["secret", "get", "--service", "s"]).status == 64)
        #expect(try keysmith.run(["frobnicate"]).status == 64)
        let help = try keysmith.run(["--help"])
        #expect(help.status == 0)
        #expect(help.stdout.contains("Exit codes"))
    }

    @Test("the walkthrough runs to the end on a throwaway vault and removes it")
    func walkthrough() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        let result = try keysmith.run(["walkthrough", "--directory", keysmith.directory + "/walk"])
        #expect(result.status == 0, "\(result.output)")
        #expect(result.stdout.contains("9. Repair"))
        #expect(result.stdout.contains("verify now calls the damage superseded: true"))
        #expect(result.stdout.contains("read returned nil"))
        #expect(result.stdout.contains("allow: permitted by member-browse-post"))
        #expect(result.stdout.contains("posts:write is revoked since"))
        #expect(result.stdout.contains("deny: forbidden by scope-post"))
        #expect(result.stdout.contains("intact: true"))
        #expect(!result.stdout.contains("example-access-token"))
        #expect(result.stdout.contains("damaged"))
        #expect(!result.stdout.contains("correct horse battery staple"))
        #expect(!FileManager.default.fileExists(atPath: keysmith.directory + "/walk"))
    }
}

@Suite("the keysmith command: choosing the store")
struct StoreChoiceCommandTests {
    @Test("KEYSMITH_BACKEND, then the config file, then the vault; a bad value is a usage error naming its source")
    func choice() throws {
        var keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        keysmith.environment["KEYSMITH_KEYFILE"] = keysmith.keyfile
        try keysmith.run(["init"])
        #expect(try keysmith.run(["backend"]).stdout.hasPrefix("vault: file vault at"))
        let answer = try JSONSerialization.jsonObject(with: Data(try keysmith.run(["backend", "--json"]).stdout.utf8)) as? [String: Any]
        #expect(answer?["backend"] as? String == "vault" && (answer?["store"] as? String)?.hasPrefix("file vault at") == true)
        #expect((answer?["reason"] as? String)?.isEmpty == false)
        let config = keysmith.directory + "/config/keysmith"
        try FileManager.default.createDirectory(atPath: config, withIntermediateDirectories: true)
        try "# keysmith\nbackend = bogus\n".write(toFile: config + "/config", atomically: true, encoding: .utf8)
        keysmith.environment["XDG_CONFIG_HOME"] = keysmith.directory + "/config"
        let bad = try keysmith.run(["backend"])
        #expect(bad.status == 64)
        #expect(bad.stderr.contains(config + "/config, line 2, names no backend"))
        try "backend = vault\n".write(toFile: config + "/config", atomically: true, encoding: .utf8)
        #expect(try keysmith.run(["backend"]).stdout.hasPrefix("vault:"))
        // A line that is not a setting, and a config file that cannot be read, are errors, not ignored.
        try "backend = vault\nbakend = auto\n".write(toFile: config + "/config", atomically: true, encoding: .utf8)
        let typo = try keysmith.run(["secret", "list"])
        #expect(typo.status == 64, "\(typo.output)")
        #expect(typo.stderr.contains("line 2"))
        try FileManager.default.removeItem(atPath: config + "/config")
        try FileManager.default.createDirectory(atPath: config + "/config", withIntermediateDirectories: false)
        let unreadable = try keysmith.run(["secret", "list"])
        #expect(unreadable.status == 1, "\(unreadable.output)")
        #expect(unreadable.stderr.contains("cannot read the config file"))
        try FileManager.default.removeItem(atPath: config + "/config")
        // A FIFO (no writer: reading it would wait for ever) and a file over 1 MiB are refused at
        // once; a link to a good config file is followed.
        #expect(mkfifo(config + "/config", 0o600) == 0)
        let fifo = try keysmith.run(["secret", "list"])
        #expect(fifo.status == 1 && fifo.stderr.contains("cannot read the config file"), "\(fifo.output)")
        try FileManager.default.removeItem(atPath: config + "/config")
        try ("# " + String(repeating: "x", count: 1 << 20) + "\nbackend = vault\n").write(toFile: config + "/config", atomically: true, encoding: .utf8)
        let large = try keysmith.run(["secret", "list"])
        #expect(large.status == 1 && large.stderr.contains("cannot read the config file"), "\(large.output)")
        try "backend = vault\n".write(toFile: config + "/real", atomically: true, encoding: .utf8)
        try FileManager.default.removeItem(atPath: config + "/config")
        try FileManager.default.createSymbolicLink(atPath: config + "/config", withDestinationPath: config + "/real")
        #expect(try keysmith.run(["backend"]).stdout.hasPrefix("vault:"))
        try FileManager.default.removeItem(atPath: config + "/config")
        let fromEnvironment = try keysmith.run(["backend"], environment: ["KEYSMITH_BACKEND": "nonsense"])
        #expect(fromEnvironment.stderr.contains("KEYSMITH_BACKEND names no backend"))
        #expect(!fromEnvironment.stderr.contains("nonsense"))
        // auto with no D-Bus session at all falls back to the vault and says why.
        let auto = try keysmith.run(["backend", "--backend", "auto"])
        #expect(auto.stdout.contains("vault:") && auto.stdout.contains("auto: no Secret Service"))
    }
}
