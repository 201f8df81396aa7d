import Foundation
import Glibc
import Keysmith
import KeysmithSecretService
import Testing

@Suite("Secret Service: the writer lock", .enabled(if: secretServiceProvided, "run through scripts/test.sh, which starts a private Secret Service"))
struct WriterLockTests {
    /// The lock docs/secret-service.md names, held here as another (hung) Keysmith writer would.
    static func holdWriterLock() throws -> Int32 {
        let runtime = try #require(ProcessInfo.processInfo.environment["XDG_RUNTIME_DIR"], "scripts/with-secret-service.sh sets it")
        try FileManager.default.createDirectory(atPath: runtime + "/keysmith", withIntermediateDirectories: true)
        let fd = open(runtime + "/keysmith/secret-service.lock", O_RDWR | O_CREAT, 0o600)
        try #require(fd >= 0)
        // Another open of the file is another holder, even within this process (flock(2)).
        while flock(fd, LOCK_EX) != 0 { try #require(errno == EINTR) }
        return fd
    }

    @Test("a batch over a limit is refused at once while another writer holds the lock; a valid one waits and times out")
    func oversizedBatchesDoNotWait() throws {
        let store = try SecretServiceStore(namespace: "writer-lock-\(UUID().uuidString)", timeout: .seconds(1))
        let key = ItemKey.genericPassword(service: "writer-lock", account: "a")
        let fd = try Self.holdWriterLock()
        var held = true
        defer { if held { close(fd) } }

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
        try store.create(ItemAttributes(key: key), secret: Data("small".utf8))
        #expect(try store.read(key)?.secret == Data("small".utf8))
        try store.delete(key)
    }
}
