import Foundation
import KeysmithTestSupport
import Testing

/// The command on the PostgreSQL store, against the server scripts/with-postgres.sh starts.
@Suite("the keysmith command: PostgreSQL", .enabled(if: ProcessInfo.processInfo.environment["KEYSMITH_TEST_DATABASE_URL"] != nil))
struct PostgresCommandTests {
    static let url = ProcessInfo.processInfo.environment["KEYSMITH_TEST_DATABASE_URL"] ?? ""

    /// A keysmith run on a namespace of its own; the master keyfile is the conformance suite's key.
    static func keysmith() throws -> Keysmith {
        var keysmith = try Keysmith()
        let keyfile = keysmith.directory + "/master.key"
        try (String(repeating: "09", count: 32) + "\n").write(toFile: keyfile, atomically: true, encoding: .utf8)
        keysmith.environment["KEYSMITH_DATABASE_URL"] = url
        keysmith.environment["KEYSMITH_KEYFILE"] = keyfile
        keysmith.environment["KEYSMITH_NAMESPACE"] = "command-\(UUID().uuidString)"
        keysmith.environment["KEYSMITH_BACKEND"] = "postgres"
        return keysmith
    }

    @Test("postgres init, then secrets and tokens on PostgreSQL; a wrong master key exits 4")
    func endToEnd() throws {
        var keysmith = try Self.keysmith()
        defer { keysmith.cleanup() }
        let initialized = try keysmith.run(["postgres", "init"])
        #expect(initialized.status == 0, "\(initialized.output)")
        #expect(initialized.stdout.hasPrefix("ready: PostgreSQL database keysmith as keysmith on "))
        #expect(try keysmith.run(["postgres", "init"]).status == 0)
        #expect(try keysmith.run(["secret", "set", "--service", "mail", "--account", "bob"], stdin: "s3cret").status == 0)
        let read = try keysmith.run(["secret", "get", "--service", "mail", "--account", "bob"])
        #expect(read.stdout == "s3cret\n")
        let backend = try keysmith.run(["backend", "--json"])
        #expect(backend.stdout.contains(#""backend":"postgres""#))
        #expect(!backend.output.contains("s3cret"))
        try keysmith.run(["token", "import", "--service", "news", "--account", "alice"],
                         stdin: #"{"access_token":"tok-secret","token_type":"Bearer","scope":"groups:read posts:write"}"#)
        #expect(try keysmith.run(["revoke", "--scope", "posts:write", "--service", "news"]).status == 0)
        #expect(try keysmith.run(["token", "check", "--service", "news", "--account", "alice", "posts:write"]).status == 3)
        #expect(try keysmith.run(["audit", "verify"]).status == 0)
        let wrongKey = keysmith.directory + "/wrong.key"
        try (String(repeating: "01", count: 32) + "\n").write(toFile: wrongKey, atomically: true, encoding: .utf8)
        keysmith.environment["KEYSMITH_KEYFILE"] = wrongKey
        let wrong = try keysmith.run(["secret", "get", "--service", "mail", "--account", "bob"])
        #expect(wrong.status == 4)
        #expect(!wrong.output.contains("s3cret"))
    }

    @Test("migrate copies the vault into PostgreSQL and back, verified")
    func migrate() throws {
        var keysmith = try Self.keysmith()
        defer { keysmith.cleanup() }
        try keysmith.run(["postgres", "init"])
        // One credential per run opens both stores: the vault is made with the master keyfile too.
        keysmith.environment["KEYSMITH_BACKEND"] = "vault"
        let created = try keysmith.run(["init"])
        #expect(created.status == 0, "\(created.output)")
        try keysmith.run(["secret", "set", "--service", "svc", "--account", "a"], stdin: "v1")
        try keysmith.run(["secret", "set", "--service", "svc", "--account", "b"], stdin: "v2")
        let copy = try keysmith.run(["migrate", "--from", "vault", "--to", "postgres", "--json"])
        #expect(copy.status == 0, "\(copy.output)")
        #expect(copy.stdout.contains(#""copied":["#))
        let read = try keysmith.run(["secret", "get", "--service", "svc", "--account", "b"], environment: ["KEYSMITH_BACKEND": "postgres"])
        #expect(read.stdout == "v2\n")
        let again = try keysmith.run(["migrate", "--from", "vault", "--to", "postgres", "--json"])
        #expect(again.stdout.contains(#""copied":[]"#))
        let back = try keysmith.run(["migrate", "--from", "postgres", "--to", "vault", "--conflicts", "skip", "--json"])
        #expect(back.status == 0, "\(back.output)")
    }

    @Test("postgres init --json names the database by its name, the namespace, and the store as the text line does")
    func initJSON() throws {
        let keysmith = try Self.keysmith()
        defer { keysmith.cleanup() }
        let result = try keysmith.run(["postgres", "init", "--json"])
        #expect(result.status == 0, "\(result.output)")
        let document = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any], "\(result.stdout)")
        let expected = try #require(URLComponents(string: Self.url)?.path.split(separator: "/").first.map(String.init))
        #expect(document["database"] as? String == expected, "\(document)")
        #expect(document["namespace"] as? String == keysmith.environment["KEYSMITH_NAMESPACE"])
        #expect((document["store"] as? String)?.contains(expected) == true)
    }

    @Test("no database configured is a clear error; a malformed URL exits 64")
    func configuration() throws {
        var keysmith = try Self.keysmith()
        defer { keysmith.cleanup() }
        keysmith.environment["KEYSMITH_DATABASE_URL"] = nil
        let none = try keysmith.run(["secret", "list"], environment: ["XDG_CONFIG_HOME": keysmith.directory])
        #expect(none.status == 5)
        #expect(none.stderr.contains("KEYSMITH_DATABASE_URL"))
        keysmith.environment["KEYSMITH_DATABASE_URL"] = "postgresql://u:hunter2@/nodb?sslmode=x"
        let bad = try keysmith.run(["secret", "list"])
        #expect(bad.status == 64)
        #expect(!bad.output.contains("hunter2"))
    }

    @Test("keysmith watch streams a revocation as a JSON line, and revoke --wait returns once it applied it; a watcher stopped with SIGTERM deregisters, a killed one is named (exit 9)")
    func watchAndWait() throws {
        let keysmith = try Self.keysmith()
        defer { keysmith.cleanup() }
        try keysmith.run(["postgres", "init"])
        try keysmith.run(["token", "import", "--service", "news", "--account", "alice"],
                         stdin: #"{"access_token":"tok-secret-zz","token_type":"Bearer","scope":"groups:read posts:write"}"#)
        let watch = Process()
        watch.executableURL = URL(fileURLWithPath: Keysmith.binary)
        watch.arguments = ["watch", "--name", "watcher-a"]
        // As README runs it: the database URL alone (no backend given) is the store to watch.
        watch.environment = keysmith.environment.filter { $0.key != "KEYSMITH_BACKEND" }
        let output = Pipe()
        watch.standardOutput = output
        watch.standardError = FileHandle.nullDevice
        try watch.run()
        // Wait until it has registered (its first acknowledgment).
        var registered = false
        for _ in 0..<200 where !registered {
            registered = try Self.psql("SELECT count(*) FROM keysmith_watchers WHERE watcher = 'watcher-a'") == "1"
            if !registered { usleep(50_000) }
        }
        #expect(registered)
        let revoke = try keysmith.run(["revoke", "--scope", "posts:write", "--service", "news", "--wait", "--json"])
        #expect(revoke.status == 0, "\(revoke.output)")
        #expect(revoke.stdout.contains(#""not_acknowledged":[]"#))
        // The watcher acknowledges only what it printed: its output already holds the revocation.
        // Stopped as an operator stops it (the command unblocks SIGTERM, which it may inherit blocked).
        watch.terminate()
        watch.waitUntilExit()
        let lines = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self).split(separator: "\n")
        #expect(lines.count >= 2)
        #expect(lines.contains { $0.contains(#""record_type":"oauth-token""#) && $0.contains(#"{"scope":"posts:write","state":"revoked"}"#) })
        #expect(!lines.joined().contains("tok-secret-zz"))
        // watcher-a ended cleanly (SIGTERM, exit 0): it deregistered and is not waited for.
        #expect(watch.terminationStatus == 0)
        #expect(try Self.psql("SELECT count(*) FROM keysmith_watchers WHERE watcher = 'watcher-a'") == "0")
        let quick = try keysmith.run(["revoke", "--scope", "groups:read", "--service", "news", "--wait", "--wait-timeout", "5s"])
        #expect(quick.status == 0, "\(quick.output)")
        // watcher-b dies (SIGKILL) but was seen moments ago: the next revocation names it.
        let dying = Process()
        dying.executableURL = URL(fileURLWithPath: Keysmith.binary)
        dying.arguments = ["watch", "--name", "watcher-b"]
        dying.environment = keysmith.environment.filter { $0.key != "KEYSMITH_BACKEND" }
        dying.standardOutput = FileHandle.nullDevice
        dying.standardError = FileHandle.nullDevice
        try dying.run()
        registered = false
        for _ in 0..<200 where !registered {
            registered = try Self.psql("SELECT count(*) FROM keysmith_watchers WHERE watcher = 'watcher-b'") == "1"
            if !registered { usleep(50_000) }
        }
        #expect(registered)
        kill(dying.processIdentifier, SIGKILL)
        dying.waitUntilExit()
        try keysmith.run(["token", "import", "--service", "news", "--account", "bob"],
                         stdin: #"{"access_token":"tok-secret-yy","token_type":"Bearer","scope":"groups:read"}"#)
        let late = try keysmith.run(["revoke", "--scope", "groups:read", "--service", "news", "--wait", "--wait-timeout", "1s"])
        #expect(late.status == 9, "\(late.output)")
        #expect(late.stderr.contains("watcher-b"))
        let vault = try keysmith.run(["revoke", "--scope", "groups:read", "--wait"], environment: ["KEYSMITH_BACKEND": "vault"])
        #expect(vault.status == 64)
    }

    /// Runs SQL through psql on the test server (the socket directory from the URL).
    static func psql(_ sql: String, database: String = "keysmith") throws -> String {
        let host = url.components(separatedBy: "host=").last ?? ""
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/psql")
        process.arguments = ["-h", host, "-U", "keysmith", "-d", database, "-tAc", sql]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    @Test("rotate-data-key, rekey and rotate-master-key: secrets stay readable, the old master key stops opening the database")
    func rotation() throws {
        var keysmith = try Self.keysmith()
        defer { keysmith.cleanup() }
        // A database of its own: a master-key rotation changes the whole database.
        let database = "command_rotation_" + UUID().uuidString.prefix(8).lowercased()
        let socketDirectory = try #require(Self.url.split(separator: "?host=").last.map(String.init))
        let bin = try #require(ProcessInfo.processInfo.environment["KEYSMITH_TEST_POSTGRES_BIN"])
        let createdb = Process()
        createdb.executableURL = URL(fileURLWithPath: bin + "/createdb")
        createdb.arguments = ["-h", socketDirectory, "-U", "keysmith", database]
        try createdb.run()
        createdb.waitUntilExit()
        #expect(createdb.terminationStatus == 0)
        keysmith.environment["KEYSMITH_DATABASE_URL"] = "postgresql://keysmith@/\(database)?host=\(socketDirectory)"
        // A master passphrase with a line break could never come back through a descriptor or
        // a prompt: refused before anything is made.
        let lineBreak = try keysmith.run(["postgres", "init", "--scrypt-log-n", "14"],
                                         environment: ["KEYSMITH_KEYFILE": "", "KEYSMITH_PASSPHRASE": "master\n"])
        #expect(lineBreak.status == 64 && lineBreak.stderr.contains("KEYSMITH_PASSPHRASE holds a line break"), "\(lineBreak.output)")
        // Bytes that are not UTF-8, from a descriptor: reading them as text would change them
        // (two byte strings, one key). Refused; the environment's likewise.
        let binary = try CommandLineMistakesTests.shell(keysmith, #"printf 'pw\377\n' > bin; KEYSMITH_KEYFILE= "$KS" postgres init --scrypt-log-n 14 --passphrase-fd 3 3<bin"#)
        #expect(binary.status == 64 && binary.stderr.contains("--passphrase-fd is not UTF-8 text"), "\(binary.output)")
        #expect(try Self.psql("SELECT count(*) FROM pg_tables WHERE tablename = 'keysmith_master'", database: database) == "0")
        try keysmith.run(["postgres", "init", "--scrypt-log-n", "14"])
        try keysmith.run(["secret", "set", "--service", "mail", "--account", "bob"], stdin: "before-rotation")
        let rotated = try keysmith.run(["postgres", "rotate-data-key", "--json"])
        #expect(rotated.status == 0 && rotated.stdout.contains(#""key_id":2"#), "\(rotated.output)")
        try keysmith.run(["secret", "set", "--service", "mail", "--account", "carol"], stdin: "after-rotation")
        let rekey = try keysmith.run(["postgres", "rekey", "--json"])
        #expect(rekey.status == 0 && rekey.stdout.contains(#""key_id":2,"rekeyed":1,"damaged":0"#), "\(rekey.output)")
        let newKeyfile = keysmith.directory + "/new-master.key"
        let master = try keysmith.run(["postgres", "rotate-master-key", "--new-keyfile", newKeyfile, "--json"])
        #expect(master.status == 0 && master.stdout == "{\"rewrapped\":2}\n", "\(master.output)")
        let old = try keysmith.run(["secret", "get", "--service", "mail", "--account", "bob"])
        #expect(old.status == 4)
        // A rotation that fails (here: the old key no longer opens the database) leaves no new
        // keyfile behind: a key that opens nothing would only mislead.
        let unused = keysmith.directory + "/unused-master.key"
        let failed = try keysmith.run(["postgres", "rotate-master-key", "--new-keyfile", unused])
        #expect(failed.status == 4 && failed.stderr.contains("made for it was removed"), "\(failed.output)")
        #expect(!FileManager.default.fileExists(atPath: unused))
        keysmith.environment["KEYSMITH_KEYFILE"] = newKeyfile
        #expect(try keysmith.run(["secret", "get", "--service", "mail", "--account", "bob"]).stdout == "before-rotation\n")
        #expect(try keysmith.run(["secret", "get", "--service", "mail", "--account", "carol"]).stdout == "after-rotation\n")
        let newBinary = try CommandLineMistakesTests.shell(keysmith, #"printf 'new\376\n' > newbin; "$KS" postgres rotate-master-key --scrypt-log-n 14 --new-passphrase-fd 3 3<newbin"#)
        #expect(newBinary.status == 64 && newBinary.stderr.contains("--new-passphrase-fd is not UTF-8 text"), "\(newBinary.output)")
        let newLineBreak = try keysmith.run(["postgres", "rotate-master-key", "--scrypt-log-n", "14"],
                                            environment: ["KEYSMITH_NEW_PASSPHRASE": "new master\r\n"])
        #expect(newLineBreak.status == 64 && newLineBreak.stderr.contains("KEYSMITH_NEW_PASSPHRASE holds a line break"), "\(newLineBreak.output)")
        #expect(try keysmith.run(["secret", "get", "--service", "mail", "--account", "bob"]).stdout == "before-rotation\n")
        // The same key again is refused; a passphrase read from a descriptor is taken.
        #expect(try keysmith.run(["postgres", "rotate-master-key", "--new-keyfile", newKeyfile]).status == 64)
        let toPassphrase = try keysmith.run(["postgres", "rotate-master-key", "--new-passphrase-fd", "0", "--scrypt-log-n", "14"], stdin: "a long new passphrase")
        #expect(toPassphrase.status == 0, "\(toPassphrase.output)")
        #expect(!toPassphrase.output.contains("a long new passphrase"))
        keysmith.environment["KEYSMITH_KEYFILE"] = nil
        keysmith.environment["KEYSMITH_PASSPHRASE"] = "a long new passphrase"
        #expect(try keysmith.run(["secret", "get", "--service", "mail", "--account", "carol"]).stdout == "after-rotation\n")
    }

    @Test("watch stops with exit 6 at a change row edited in the database, after printing every change before it")
    func watchStopsAtEditedChange() throws {
        let keysmith = try Self.keysmith()
        defer { keysmith.cleanup() }
        try keysmith.run(["postgres", "init"])
        for account in ["a", "b", "c"] { try keysmith.run(["secret", "set", "--service", "s", "--account", account], stdin: "v") }
        let before = try keysmith.run(["watch", "--after", "0", "--count", "3"])
        let sequences = before.stdout.split(separator: "\n").compactMap { line -> Int? in
            guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else { return nil }
            return object["seq"] as? Int
        }
        #expect(sequences.count == 3, "\(before.output)")
        // The administrator flips a byte of the middle change's sealed key, past the triggers.
        try Self.asOwner("UPDATE keysmith_changes SET sealed_key = set_byte(sealed_key, 20, get_byte(sealed_key, 20) # 1) WHERE seq = \(sequences[1])")
        let after = try keysmith.run(["watch", "--after", "0", "--count", "3"])
        #expect(after.status == 6, "\(after.output)")
        #expect(after.stdout.split(separator: "\n").count == 1 && after.stdout.contains(#""seq":\#(sequences[0])"#))
        #expect(after.stderr.contains("change \(sequences[1])"))
    }

    /// Runs SQL with psql as the tables' owner, with the triggers off for the session.
    static func asOwner(_ sql: String) throws {
        let psql = try #require(ProcessInfo.processInfo.environment["KEYSMITH_TEST_POSTGRES_BIN"]) + "/psql"
        let result = try spawnAndWait(psql, [url, "-v", "ON_ERROR_STOP=1", "-q", "-c", "SET session_replication_role = replica; " + sql])
        #expect(result.status == 0, "\(String(decoding: result.stderr, as: UTF8.self))")
    }

    @Test("postgres verify: exit 0 on an intact feed; exit 6 naming the break after the owner deletes a change row past the triggers; --json says the same")
    func verifyFindsDeletedChange() throws {
        let keysmith = try Self.keysmith()
        defer { keysmith.cleanup() }
        try keysmith.run(["postgres", "init"])
        for account in ["a", "b", "c"] { try keysmith.run(["secret", "set", "--service", "s", "--account", account], stdin: "v") }
        let intact = try keysmith.run(["postgres", "verify"])
        #expect(intact.status == 0 && intact.stdout.contains("is intact: 3 changes"), "\(intact.output)")
        let intactJSON = try keysmith.run(["postgres", "verify", "--json"])
        let document = try #require(try JSONSerialization.jsonObject(with: Data(intactJSON.stdout.utf8)) as? [String: Any])
        #expect(document["intact"] as? Bool == true && document["changes"] as? Int == 3, "\(intactJSON.output)")
        let listed = try keysmith.run(["watch", "--after", "0", "--count", "3"])
        let sequences = listed.stdout.split(separator: "\n").compactMap { line -> Int? in
            (try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])?["seq"] as? Int
        }
        try #require(sequences.count == 3, "\(listed.output)")
        try Self.asOwner("DELETE FROM keysmith_changes WHERE seq = \(sequences[1])")
        let broken = try keysmith.run(["postgres", "verify"])
        #expect(broken.status == 6, "\(broken.output)")
        #expect(broken.stdout.contains("change \(sequences[2]) does not continue the chain"), "\(broken.stdout)")
        #expect(broken.stderr.hasPrefix("keysmith: ") && broken.stderr.split(separator: "\n").count == 1, "\(broken.stderr)")
        let brokenJSON = try keysmith.run(["postgres", "verify", "--json"])
        #expect(brokenJSON.status == 6)
        let report = try #require(try JSONSerialization.jsonObject(with: Data(brokenJSON.stdout.utf8)) as? [String: Any])
        #expect(report["intact"] as? Bool == false && ((report["problems"] as? [String])?.isEmpty == false), "\(brokenJSON.output)")
        // Watchers stop there too.
        let watch = try keysmith.run(["watch", "--after", "0", "--count", "3"])
        #expect(watch.status == 6, "\(watch.output)")
    }
}
