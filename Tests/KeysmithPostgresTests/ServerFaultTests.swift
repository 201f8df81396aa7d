import Foundation
import Keysmith
@testable import KeysmithPostgres
import Synchronization
import Testing

/// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34 and later; Swift's Glibc module does
/// not import it): the child closes every descriptor from the given one up.
private let addCloseFrom: @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32 = {
    // dlsym with RTLD_DEFAULT (a null handle) searches the libraries already loaded: glibc's.
    guard let symbol = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np") else {
        fatalError("this C library has no posix_spawn_file_actions_addclosefrom_np (glibc 2.34 or later is needed)")
    }
    return unsafeBitCast(symbol, to: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32).self)
}()

/// A PostgreSQL server of this test's own (the shared one keeps serving the other suites), which
/// the test can crash and restart.
final class PrivatePostgres {
    let directory: String
    let bin: String
    private let asOwner: [String]

    init() throws {
        guard let bin = ProcessInfo.processInfo.environment["KEYSMITH_TEST_POSTGRES_BIN"] else {
            throw KeysmithError(.storeUnavailable, "KEYSMITH_TEST_POSTGRES_BIN is not set (run under scripts/with-postgres.sh)")
        }
        self.bin = bin
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("keysmith-pg-fault-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        // initdb and the server refuse to run as root: run them as the postgres user then.
        asOwner = getuid() == 0 ? ["/usr/sbin/runuser", "-u", "postgres", "--"] : []
        if getuid() == 0 { try Self.run(["/bin/chown", "postgres:", directory]) }
        try Self.run(asOwner + ["\(bin)/initdb", "-D", "\(directory)/data", "-U", "keysmith", "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8"])
        try start()
        try Self.run(["\(bin)/createdb", "-h", directory, "-U", "keysmith", "keysmith"])
    }

    var settings: PostgresConnectionSettings { PostgresConnectionSettings(socketDirectory: directory, user: "keysmith", database: "keysmith") }

    func start() throws {
        try Self.run(asOwner + ["\(bin)/pg_ctl", "-D", "\(directory)/data", "-l", "\(directory)/server.log", "-w", "-t", "60",
                                "-o", "-c listen_addresses='' -c unix_socket_directories='\(directory)' -c fsync=on", "start"])
    }

    /// Stops the server as a crash would (`immediate`: no checkpoint, clients cut off at once),
    /// or cleanly (`fast`).
    func stop(mode: String) throws {
        try Self.run(asOwner + ["\(bin)/pg_ctl", "-D", "\(directory)/data", "-m", mode, "-w", "-t", "60", "stop"])
    }

    func destroy() {
        try? stop(mode: "immediate")
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Runs a program to its end, its output into a file (returned). Not Foundation's `Process`:
    /// its `waitUntilExit` can miss the exit of a child (`runuser`) whose descendant (the server)
    /// lives on, and hang.
    @discardableResult
    static func run(_ arguments: [String]) throws -> String {
        let outputPath = FileManager.default.temporaryDirectory.appendingPathComponent("keysmith-pg-run-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: outputPath) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        // Nothing else: a server that inherited another test's descriptors (a child's pipe, the
        // socket Foundation watches for a child's exit) would keep them open for its whole life.
        guard addCloseFrom(&actions, 3) == 0 else { throw POSIXError(.EINVAL) }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // The test runner blocks some signals; the server must not inherit that.
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK))
        var pid: pid_t = 0
        let argv = arguments.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let spawned = posix_spawn(&pid, arguments[0], &actions, &attributes, argv, environ)
        guard spawned == 0 else { throw KeysmithError(.ioFailure, "cannot start \(arguments[0]): error \(spawned)") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        let output = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
        guard status == 0 else {
            throw KeysmithError(.ioFailure, "\(arguments.joined(separator: " ")) failed (status \(status)): \(output)")
        }
        return output
    }
}

/// The server crashes and restarts while batches are being written.
@Suite("PostgreSQL store: a server restarted mid-batch", .enabled(if: ProcessInfo.processInfo.environment["KEYSMITH_TEST_POSTGRES_BIN"] != nil))
struct ServerFaultTests {
    final class Log: Sendable {
        /// Batches whose `perform` returned: each must be in the store, whole.
        let acknowledged = Mutex<[Int]>([])
        /// Batches whose `perform` threw: each is in the store whole or not at all.
        let failed = Mutex<[(Int, KeysmithError.Code)]>([])
        let stop = Atomic<Bool>(false)
    }

    static func keys(ofBatch batch: Int) -> [ItemKey] {
        (0..<50).map { ItemKey.genericPassword(service: "batch-\(batch)", account: "item-\($0)") }
    }

    @Test("no acknowledged write is lost when the server crashes mid-batch; the batch in flight fails with storeUnavailable and is whole or absent; writes resume")
    func crashMidBatch() throws {
        let server = try PrivatePostgres()
        defer { server.destroy() }
        let key = [UInt8](repeating: 5, count: 32)
        try PostgresStore.initialize(server.settings, masterKey: .key(key), scrypt: .testing)
        let store = try PostgresStore(server.settings, namespace: "fault", masterKey: .key(key))
        let log = Log()
        // A writer committing 50-item batches (each with a 4 KiB secret per item) as fast as it can.
        let writer = Thread {
            var batch = 0
            while !log.stop.load(ordering: .relaxed) {
                batch += 1
                let secret = Data(repeating: UInt8(batch % 251), count: 4096)
                do {
                    try store.perform(Self.keys(ofBatch: batch).map { .create(ItemAttributes(key: $0), secret: secret) })
                    log.acknowledged.withLock { $0.append(batch) }
                } catch let error as KeysmithError {
                    log.failed.withLock { $0.append((batch, error.code)) }
                    usleep(20_000)
                } catch {
                    log.failed.withLock { $0.append((batch, .ioFailure)) }
                }
            }
        }
        writer.start()
        for _ in 0..<3 {
            // Let some batches commit, then crash the server under the writer, and restart it.
            let before = log.acknowledged.withLock { $0.count }
            let deadline = Date().addingTimeInterval(20)
            while log.acknowledged.withLock({ $0.count }) < before + 5, Date() < deadline { usleep(5_000) }
            try server.stop(mode: "immediate")
            usleep(300_000)
            try server.start()
        }
        let before = log.acknowledged.withLock { $0.count }
        let deadline = Date().addingTimeInterval(20)
        while log.acknowledged.withLock({ $0.count }) < before + 5, Date() < deadline { usleep(5_000) }
        log.stop.store(true, ordering: .relaxed)
        while !writer.isFinished { usleep(5_000) }

        let acknowledged = log.acknowledged.withLock { $0 }
        let failed = log.failed.withLock { $0 }
        #expect(acknowledged.count >= 20, "the writer did not resume after the restarts")
        #expect(!failed.isEmpty, "no batch was in flight at a crash: the test did not test anything")
        #expect(failed.allSatisfy { $0.1 == .storeUnavailable }, "\(failed)")
        let reader = try PostgresStore(server.settings, namespace: "fault", masterKey: .key(key))
        for batch in acknowledged {
            let records = try reader.read(Self.keys(ofBatch: batch))
            #expect(records.allSatisfy { $0?.secret == Data(repeating: UInt8(batch % 251), count: 4096) }, "acknowledged batch \(batch) was lost")
        }
        var whole = 0, absent = 0
        for (batch, _) in failed {
            let present = try reader.read(Self.keys(ofBatch: batch)).filter { $0 != nil }.count
            #expect(present == 0 || present == 50, "batch \(batch) is half there: \(present) of 50")
            if present == 50 { whole += 1 } else { absent += 1 }
        }
        print("server crashes: \(acknowledged.count) batches acknowledged and all present; \(failed.count) failed with storeUnavailable (\(whole) committed whole before the connection dropped, \(absent) absent)")
    }
}
