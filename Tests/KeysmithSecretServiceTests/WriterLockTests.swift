import Foundation
import Glibc
import Keysmith
import KeysmithSecretService
import Testing

@Suite("Secret Service: the writer lock", .enabled(if: secretServiceProvided, "run through scripts/test.sh, which starts a private Secret Service"))
struct WriterLockTests {
    struct LockStayedHeld: Error {}

    /// The lock docs/secret-service.md names, held here as another (hung) Keysmith writer would.
    static func holdWriterLock() throws -> Int32 {
        let runtime = try #require(ProcessInfo.processInfo.environment["XDG_RUNTIME_DIR"], "scripts/with-secret-service.sh sets it")
        try #require(runtime.hasPrefix("/"))
        try FileManager.default.createDirectory(atPath: runtime + "/keysmith", withIntermediateDirectories: true)
        let fd = open(runtime + "/keysmith/secret-service.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        try #require(fd >= 0)
        // Another open of the file is another holder, even within this process (flock(2)).
        // Other tests' writers hold it for moments: wait for them at most 60 s.
        let deadline = ContinuousClock.now + .seconds(60)
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            guard errno == EWOULDBLOCK || errno == EINTR, ContinuousClock.now < deadline else {
                close(fd)
                throw LockStayedHeld()
            }
            usleep(2_000)
        }
        return fd
    }

    @Test("a batch over a limit is refused at once while another writer holds the lock; a valid one waits and times out")
    func oversizedBatchesDoNotWait() throws {
        let namespace = "writer-lock-\(UUID().uuidString)"
        let store = try SecretServiceStore(namespace: namespace, timeout: .seconds(1))
        // Once the lock is let go, other tests' writers may come first: this handle waits longer.
        let patient = try SecretServiceStore(namespace: namespace, timeout: .seconds(20))
        let key = ItemKey.genericPassword(service: "writer-lock", account: "a")
        let fd = try Self.holdWriterLock()
        var held = true
        defer {
            if held { close(fd) }
            try? patient.perform([.delete(key)])  // whatever happened, leave nothing behind
        }

        let oversized = #expect(throws: KeysmithError.self) {
            try store.create(ItemAttributes(key: key), secret: Data(count: store.limits.maximumSecretSize + 1))
        }
        #expect(oversized?.code == .limitExceeded)
        #expect(oversized?.message.contains(String(store.limits.maximumSecretSize)) == true)
        let waited = #expect(throws: KeysmithError.self) {
            try store.create(ItemAttributes(key: key), secret: Data("small".utf8))
        }
        #expect(waited?.code == .timedOut)
        // The lock was held: the oversized batch was refused for its size, not for the wait.

        close(fd)
        held = false
        try patient.create(ItemAttributes(key: key), secret: Data("small".utf8))
        #expect(try patient.read(key)?.secret == Data("small".utf8))
    }
}
