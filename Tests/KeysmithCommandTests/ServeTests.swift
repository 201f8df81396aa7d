import Foundation
import KeysmithTestSupport
import Testing

/// `keysmith serve` as the agent of the `keysmith` command: the built binary, real processes,
/// a real Unix socket.
@Suite("the keysmith command: serve, lock and unlock")
struct ServeTests {
    /// A passphrase vault with one secret, and a private runtime directory for the agent.
    static func passphraseVault() throws -> Keysmith {
        var keysmith = try Keysmith()
        keysmith.environment["XDG_RUNTIME_DIR"] = keysmith.directory + "/run"
        try FileManager.default.createDirectory(atPath: keysmith.directory + "/run", withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        let passphrase = ["KEYSMITH_PASSPHRASE": "correct horse"]
        let created = try keysmith.run(["init", "--scrypt-log-n", "15"], environment: passphrase)
        #expect(created.status == 0, "\(created.output)")
        #expect(try keysmith.run(["secret", "set", "--service", "mail", "--account", "bob"], stdin: "s3cret", environment: passphrase).status == 0)
        return keysmith
    }

    /// Starts a serve with `arguments` and waits until it says it serves (its first line).
    static func serve(_ keysmith: Keysmith, _ arguments: [String] = [], environment extra: [String: String] = ["KEYSMITH_PASSPHRASE": "correct horse"])
        throws -> (process: SpawnedProcess, log: String)
    {
        let log = keysmith.directory + "/serve-\(UUID().uuidString.prefix(8)).err"
        let process = try SpawnedProcess(Keysmith.binary, ["serve"] + arguments, environment: keysmith.environment.merging(extra) { $1 },
                                         directory: keysmith.directory, standardError: .file(log), deadline: 300)
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline, process.isRunning, !((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("keysmith: serving ") {
            Thread.sleep(forTimeInterval: 0.02)
        }
        return (process, log)
    }

    static func socket(_ log: String) -> String? {
        let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        guard let range = text.range(of: " on "), let end = text[range.upperBound...].range(of: " (process") else { return nil }
        return String(text[range.upperBound..<end.lowerBound])
    }

    @Test("a passphrase vault served: secret get is answered with no credential given; a missing item exits 2; locked, a get exits 5 and says to unlock, never opening the vault itself; a wrong passphrase does not unlock (exit 4), the right one does; a second serve is refused (exit 7); SIGTERM removes the socket")
    func agentAnswersAndLocks() throws {
        let keysmith = try Self.passphraseVault()
        defer { keysmith.cleanup() }
        let (serve, log) = try Self.serve(keysmith)
        defer { if serve.isRunning { kill(serve.processIdentifier, SIGKILL); serve.waitUntilExit() } }
        let socket = try #require(Self.socket(log), "\((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
        // Only this user may connect: the socket 0600 in a 0700 directory.
        let socketMode = try #require(try FileManager.default.attributesOfItem(atPath: socket)[.posixPermissions] as? Int)
        let directoryMode = try #require(try FileManager.default.attributesOfItem(atPath: (socket as NSString).deletingLastPathComponent)[.posixPermissions] as? Int)
        #expect(socketMode & 0o077 == 0 && directoryMode == 0o700, "\(String(socketMode, radix: 8)) \(String(directoryMode, radix: 8))")
        // Another user's process cannot even connect: the test becomes another user (nobody) with
        // setpriv, which needs root; run as another user, this one check cannot be made.
        let other = try CommandLineMistakesTests.shell(keysmith, """
            [ "$(id -u)" = 0 ] || { echo NOT-ROOT; exit 0; }
            setpriv --reuid=65534 --regid=65534 --clear-groups python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(b"{\\"op\\":\\"status\\"}\\n"); print(s.recv(100))' '\(socket)'
            """)
        if !other.stdout.contains("NOT-ROOT") {
            #expect(other.status != 0 && other.stderr.contains("PermissionError"), "\(other.output)")
        }
        // No credential at all in the environment: only the serve can answer.
        let got = try keysmith.run(["secret", "get", "--service", "mail", "--account", "bob"])
        #expect(got.status == 0 && got.stdout == "s3cret\n", "\(got.output)")
        let missing = try keysmith.run(["secret", "get", "--service", "mail", "--account", "nobody"])
        #expect(missing.status == 2 && missing.stderr.contains("does not exist"), "\(missing.output)")
        // Locked: the key is dropped; a get says so and does not open the vault behind the serve's back.
        #expect(try keysmith.run(["lock"]).status == 0)
        let locked = try keysmith.run(["secret", "get", "--service", "mail", "--account", "bob"], environment: ["KEYSMITH_PASSPHRASE": "correct horse"])
        #expect(locked.status == 5 && locked.stdout.isEmpty && locked.stderr.contains("is locked: run `keysmith unlock`"), "\(locked.output)")
        let wrong = try keysmith.run(["unlock"], environment: ["KEYSMITH_PASSPHRASE": "wrong horse"])
        #expect(wrong.status == 4, "\(wrong.output)")
        #expect(try keysmith.run(["secret", "get", "--service", "mail", "--account", "bob"]).status == 5)
        let unlocked = try keysmith.run(["unlock"], environment: ["KEYSMITH_PASSPHRASE": "correct horse"])
        #expect(unlocked.status == 0, "\(unlocked.output)")
        #expect(try keysmith.run(["secret", "get", "--service", "mail", "--account", "bob"]).stdout == "s3cret\n")
        // --no-agent opens the vault here (and needs the credential for it).
        let direct = try keysmith.run(["secret", "get", "--service", "mail", "--account", "bob", "--no-agent"])
        #expect(direct.status == 5, "no credential, no agent: \(direct.output)")
        // One serve per vault.
        let (second, secondLog) = try Self.serve(keysmith)
        second.waitUntilExit()
        #expect(second.terminationStatus == 7, "\((try? String(contentsOfFile: secondLog, encoding: .utf8)) ?? "")")
        #expect(((try? String(contentsOfFile: secondLog, encoding: .utf8)) ?? "").contains("already serves"))
        // SIGTERM: the serve ends, its socket goes; a get then needs a credential again.
        kill(serve.processIdentifier, SIGTERM)
        serve.waitUntilExit()
        #expect(!FileManager.default.fileExists(atPath: socket))
        #expect(try keysmith.run(["secret", "get", "--service", "mail", "--account", "bob"]).status == 5)
        #expect(try keysmith.run(["secret", "get", "--service", "mail", "--account", "bob"], environment: ["KEYSMITH_PASSPHRASE": "correct horse"]).stdout
                == "s3cret\n")
    }

    @Test("--idle-lock locks after the idle time (a get then exits 5); a serve killed with SIGKILL leaves a socket nothing listens on: a get opens the vault itself, and a new serve starts in its place")
    func idleLockAndKilledServe() throws {
        let keysmith = try Self.passphraseVault()
        defer { keysmith.cleanup() }
        let (serve, log) = try Self.serve(keysmith, ["--idle-lock", "1s"])
        defer { if serve.isRunning { kill(serve.processIdentifier, SIGKILL); serve.waitUntilExit() } }
        #expect(try keysmith.run(["secret", "get", "--service", "mail", "--account", "bob"]).stdout == "s3cret\n")
        // Locked once a second has passed with no request. A get is a request (it keeps the serve
        // unlocked), so each look comes after a quiet pause longer than the idle time, growing
        // (a loaded machine may run the serve's timer late).
        var status: Int32 = 0
        for pause in [1.6, 3.2, 6.4, 12.8] where status == 0 {
            Thread.sleep(forTimeInterval: pause)
            status = try keysmith.run(["secret", "get", "--service", "mail", "--account", "bob"]).status
        }
        #expect(status == 5)
        let socket = try #require(Self.socket(log))
        kill(serve.processIdentifier, SIGKILL)
        serve.waitUntilExit()
        #expect(FileManager.default.fileExists(atPath: socket), "SIGKILL leaves the socket file")
        let opened = try keysmith.run(["secret", "get", "--service", "mail", "--account", "bob"], environment: ["KEYSMITH_PASSPHRASE": "correct horse"])
        #expect(opened.status == 0 && opened.stdout == "s3cret\n", "\(opened.output)")
        let (again, _) = try Self.serve(keysmith, environment: ["KEYSMITH_KEYFILE": "", "KEYSMITH_PASSPHRASE": "correct horse"])
        defer { if again.isRunning { kill(again.processIdentifier, SIGKILL); again.waitUntilExit() } }
        #expect(again.isRunning)
        #expect(try keysmith.run(["secret", "get", "--service", "mail", "--account", "bob"]).stdout == "s3cret\n")
    }

    @Test("a symbolic link in the agent directory's place (as another user could plant in /tmp): the serve refuses it (exit 5), a client ignores it and opens the vault itself")
    func symlinkedDirectoryIsRefused() throws {
        var keysmith = try Self.passphraseVault()
        defer { keysmith.cleanup() }
        let runtime = keysmith.directory + "/planted"
        try FileManager.default.createDirectory(atPath: runtime, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        try FileManager.default.createDirectory(atPath: keysmith.directory + "/elsewhere", withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        try FileManager.default.createSymbolicLink(atPath: runtime + "/keysmith", withDestinationPath: keysmith.directory + "/elsewhere")
        keysmith.environment["XDG_RUNTIME_DIR"] = runtime
        let refused = try keysmith.run(["serve"], environment: ["KEYSMITH_PASSPHRASE": "correct horse"])
        #expect(refused.status == 5 && refused.stderr.contains("must be a directory of this user's"), "\(refused.output)")
        let direct = try keysmith.run(["secret", "get", "--service", "mail", "--account", "bob"], environment: ["KEYSMITH_PASSPHRASE": "correct horse"])
        #expect(direct.status == 0 && direct.stdout == "s3cret\n", "\(direct.output)")
    }

    @Test("serve refuses the Secret Service and PostgreSQL backends, and a vault that does not exist")
    func serveRefuses() throws {
        let keysmith = try Keysmith()
        defer { keysmith.cleanup() }
        let missing = try keysmith.run(["serve"], environment: ["XDG_RUNTIME_DIR": keysmith.directory])
        #expect(missing.status == 5 && missing.stderr.contains("there is no vault"), "\(missing.output)")
        for backend in ["secret-service", "postgres"] {
            let refused = try keysmith.run(["serve", "--backend", backend])
            #expect(refused.status == 64 && refused.stderr.contains("serves the file vault only"), "\(backend): \(refused.output)")
        }
    }
}
