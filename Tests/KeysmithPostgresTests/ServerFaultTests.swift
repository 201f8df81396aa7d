import Foundation
import Keysmith
@testable import KeysmithPostgres
import KeysmithTestSupport
import Synchronization
import Testing

/// A PostgreSQL server of this test's own (the shared one keeps serving the other suites), which
/// the test can crash and restart. With `tcp`, it also listens on 127.0.0.1 at a port of its own;
/// with `tls` too, it has a certificate for `localhost` (and no IP address) issued by a CA made
/// for it, and takes TCP connections over TLS only.
final class PrivatePostgres {
    let directory: String
    let bin: String
    /// The port (of the socket file, and of TCP with `tls`).
    private(set) var port = 5432
    let tcp: Bool, tls: Bool
    private let asOwner: [String]

    /// The CA that issued the server's certificate, and an unrelated one (PEM files).
    var certificateAuthority: String { directory + "/tls/ca.pem" }
    var otherCertificateAuthority: String { directory + "/tls/other-ca.pem" }

    init(tcp: Bool = false, tls: Bool = false) throws {
        guard let bin = ProcessInfo.processInfo.environment["KEYSMITH_TEST_POSTGRES_BIN"] else {
            throw KeysmithError(.storeUnavailable, "KEYSMITH_TEST_POSTGRES_BIN is not set (run under scripts/with-postgres.sh)")
        }
        self.bin = bin
        self.tcp = tcp || tls
        self.tls = tls
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("keysmith-pg-fault-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        // initdb and the server refuse to run as root: run them as the postgres user then.
        asOwner = getuid() == 0 ? ["/usr/sbin/runuser", "-u", "postgres", "--"] : []
        if getuid() == 0 { try Self.run(["/bin/chown", "postgres:", directory]) }
        try Self.run(asOwner + ["\(bin)/initdb", "-D", "\(directory)/data", "-U", "keysmith", "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8"])
        if tls {
            try makeCertificates()
            // Sockets as before; TCP from this machine over TLS only.
            try Self.run(asOwner + ["/bin/sh", "-c", """
                printf 'local all all trust\\nhostssl all all 127.0.0.1/32 trust\\nhostnossl all all 127.0.0.1/32 reject\\n' > '\(directory)/data/pg_hba.conf'
                """])
        }
        if tcp || tls {
            // A free port: another server may hold the one tried, then the next is tried.
            var started = false
            for _ in 0..<8 where !started {
                port = Int.random(in: 20_000..<60_000)
                started = (try? start()) != nil
            }
            guard started else { throw KeysmithError(.ioFailure, "no free port for the server") }
        } else {
            try start()
        }
        try Self.run(["\(bin)/createdb", "-h", directory, "-p", "\(port)", "-U", "keysmith", "keysmith"])
    }

    var settings: PostgresConnectionSettings {
        PostgresConnectionSettings(socketDirectory: directory, port: port, user: "keysmith", database: "keysmith")
    }

    func start() throws {
        var options = "-c listen_addresses='' -c unix_socket_directories='\(directory)' -c fsync=on -c port=\(port)"
        if tcp {
            options = "-c listen_addresses='127.0.0.1' -c unix_socket_directories='\(directory)' -c fsync=on -c port=\(port)"
        }
        if tls {
            options += " -c ssl=on -c ssl_cert_file='\(directory)/tls/server.pem' -c ssl_key_file='\(directory)/tls/server.key'"
        }
        try Self.run(asOwner + ["\(bin)/pg_ctl", "-D", "\(directory)/data", "-l", "\(directory)/server.log", "-w", "-t", "60",
                                "-o", options, "start"])
    }

    /// A CA, a server certificate it issues for `localhost` only (so 127.0.0.1 is not its
    /// name), and an unrelated CA, with openssl(1).
    private func makeCertificates() throws {
        let tlsDirectory = directory + "/tls"
        try FileManager.default.createDirectory(atPath: tlsDirectory, withIntermediateDirectories: true)
        let curve = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        let caExtensions = ["-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"]
        for (name, subject) in [("ca", "/CN=Keysmith test CA"), ("other-ca", "/CN=Another CA")] {
            try Self.run(["/usr/bin/openssl", "req", "-x509"] + curve + caExtensions + [
                "-keyout", "\(tlsDirectory)/\(name).key", "-out", "\(tlsDirectory)/\(name).pem", "-days", "2", "-subj", subject])
        }
        try Self.run(["/usr/bin/openssl", "req"] + curve + [
            "-keyout", "\(tlsDirectory)/server.key", "-out", "\(tlsDirectory)/server.csr", "-subj", "/CN=localhost"])
        try "subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n"
            .write(toFile: tlsDirectory + "/server.ext", atomically: true, encoding: .utf8)
        try Self.run(["/usr/bin/openssl", "x509", "-req", "-in", "\(tlsDirectory)/server.csr", "-CA", "\(tlsDirectory)/ca.pem",
                      "-CAkey", "\(tlsDirectory)/ca.key", "-CAcreateserial", "-out", "\(tlsDirectory)/server.pem", "-days", "2",
                      "-extfile", "\(tlsDirectory)/server.ext"])
        // The server reads its key only when it is the key's owner and no one else may read it.
        try Self.run(["/bin/chmod", "600", "\(tlsDirectory)/server.key"])
        if getuid() == 0 { try Self.run(["/bin/chown", "-R", "postgres:", tlsDirectory]) }
    }

    /// Stops the server as a crash would (`immediate`: no checkpoint, clients cut off at once),
    /// or cleanly (`fast`).
    func stop(mode: String) throws {
        try Self.run(asOwner + ["\(bin)/pg_ctl", "-D", "\(directory)/data", "-m", mode, "-w", "-t", "60", "stop"])
    }

    /// From now on every socket connection must give the role's password (SCRAM).
    func requirePasswords() throws {
        try Self.run(asOwner + ["/bin/sh", "-c", "printf 'local all all scram-sha-256\\n' > '\(directory)/data/pg_hba.conf'"])
        try Self.run(asOwner + ["\(bin)/pg_ctl", "-D", "\(directory)/data", "reload"])
        // A reload is a signal: wait until a connection without the password is turned away.
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline {
            let probe = try spawnAndWait("\(bin)/psql", ["-w", "-h", directory, "-p", "\(port)", "-U", "keysmith", "-d", "keysmith", "-c", "select 1"],
                                         deadline: 20)
            if probe.status != 0 { return }
            Thread.sleep(forTimeInterval: 0.05)
        }
        throw KeysmithError(.ioFailure, "the server still takes connections without a password after its reload")
    }

    func destroy() {
        try? stop(mode: "immediate")
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Runs a program to its end and returns its output. Not Foundation's `Process`: see
    /// `SpawnedProcess` (the server this starts lives on, and must inherit nothing of the tests').
    @discardableResult
    static func run(_ arguments: [String]) throws -> String {
        let result = try spawnAndWait(arguments[0], Array(arguments.dropFirst()), deadline: 120)
        let output = String(decoding: result.stdout + result.stderr, as: UTF8.self)
        guard result.status == 0 else {
            throw KeysmithError(.ioFailure, "\(arguments.joined(separator: " ")) failed (status \(result.status)): \(output)")
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
