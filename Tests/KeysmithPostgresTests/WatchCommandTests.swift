import Foundation
import Keysmith
@testable import KeysmithPostgres
import KeysmithTestSupport
import Testing

/// `keysmith watch` as a fleet operator runs it, against a private server this test can stop:
/// it says when it is no longer current and when it is again, and SIGTERM ends it cleanly.
@Suite("keysmith watch: staleness is said, SIGTERM deregisters", .enabled(if: ProcessInfo.processInfo.environment["KEYSMITH_TEST_POSTGRES_BIN"] != nil))
struct WatchCommandTests {
    static let binary: String = {
        let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var url = URL(fileURLWithPath: executable).deletingLastPathComponent()
        if url.pathExtension == "xctest" { url.deleteLastPathComponent() }
        return url.path + "/keysmith"
    }()

    /// The server's postmaster and every process it started (its backends).
    static func serverProcesses(_ directory: String) throws -> [pid_t] {
        let pidFile = try String(contentsOfFile: directory + "/data/postmaster.pid", encoding: .utf8)
        guard let postmaster = pid_t(pidFile.split(separator: "\n").first ?? "") else { return [] }
        var pids = [postmaster]
        for entry in try FileManager.default.contentsOfDirectory(atPath: "/proc") {
            guard let pid = pid_t(entry), let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8) else { continue }
            // The parent pid is the fourth field, after the command in parentheses.
            let fields = stat[(stat.lastIndex(of: ")") ?? stat.startIndex)...].split(separator: " ")
            if fields.count > 2, pid_t(fields[2]) == postmaster { pids.append(pid) }
        }
        return pids
    }

    @Test("a server that stops answering: watch says it is not current within the bound, then current again; SIGTERM exits 0 and removes its registration")
    func staleThenCurrentThenStopped() throws {
        let server = try PrivatePostgres()  // started
        defer { server.destroy() }
        let key = [UInt8](repeating: 7, count: 32)
        try PostgresStore.initialize(server.settings, masterKey: .key(key))
        let store = try PostgresStore(server.settings, namespace: "default", masterKey: .key(key))
        let keyfile = server.directory + "/master.key"
        try (key.map { String(format: "%02x", $0) }.joined() + "\n").write(toFile: keyfile, atomically: true, encoding: .utf8)
        chmod(keyfile, 0o600)
        let out = server.directory + "/watch.out", err = server.directory + "/watch.err"
        let environment = [
            "PATH": "/usr/bin:/bin", "HOME": server.directory,
            "KEYSMITH_DATABASE_URL": "postgresql://keysmith@/keysmith?host=\(server.directory)&port=\(server.port)",
            "KEYSMITH_KEYFILE": keyfile,
        ]
        let watch = try SpawnedProcess(Self.binary, ["watch", "--name", "w1"], environment: environment,
                                       standardOutput: .file(out), standardError: .file(err), deadline: 120)
        defer { if watch.isRunning { kill(watch.processIdentifier, SIGKILL) } }
        func text(_ path: String) -> String { (try? String(contentsOfFile: path, encoding: .utf8)) ?? "" }
        // Current: a change arrives.
        #expect(WatcherTests.waitUntil(20) {
            try? store.perform([.upsert(ItemAttributes(key: .genericPassword(service: "s", account: "a")), secret: Data("1".utf8))])
            return text(out).contains("\"account\":\"a\"")
        }, "no change printed: \(text(err))")
        // The server stops answering (every process of it stopped): within the bound and a little, it says so.
        let pids = try Self.serverProcesses(server.directory)
        try #require(pids.count > 1)
        for pid in pids { kill(pid, SIGSTOP) }
        let stale = WatcherTests.waitUntil(15) { text(err).contains("not current") }
        for pid in pids { kill(pid, SIGCONT) }
        #expect(stale, "nothing said while the server did not answer: \(text(err))")
        #expect(WatcherTests.waitUntil(30) { text(err).contains("current again") }, "\(text(err))")
        #expect(watch.isRunning)
        // SIGTERM: a clean end, exit 0, and no registration left to wait for.
        kill(watch.processIdentifier, SIGTERM)
        watch.waitUntilExit()
        #expect(watch.terminationStatus == 0, "\(text(err))")
        let session = try Session.connect(server.settings, logger: .init(label: "test"))
        defer { session.close() }
        let registered = try session.transaction { try $0.execute("SELECT count(*) FROM keysmith_watchers").first?.decode(Int64.self) }
        #expect(registered == 0)
        #expect(try store.waitForWatchers(through: 1 << 40, timeout: .seconds(3)).isEmpty)
    }
}
