import Foundation
import Keysmith
@testable import KeysmithPostgres
import Testing

/// A named lock on PostgreSQL rides on a connection: when that connection drops, the server
/// releases the lock while its holder runs on. `isHeld()` is how the holder finds out.
@Suite("PostgreSQL store: a named lock whose connection dropped says it is no longer held",
       .enabled(if: ProcessInfo.processInfo.environment["KEYSMITH_TEST_DATABASE_URL"] != nil))
struct AdvisoryLockTests {
    @Test("the lock's connection ended by the server: isHeld() is false, another handle takes the lock, and the first handle's next lock is held on a new connection")
    func droppedConnection() throws {
        let namespace = "locks-\(UUID().uuidString)"
        let store = try PostgresStoreTests.open(namespace), other = try PostgresStoreTests.open(namespace)
        let held = try #require(try store.tryExclusiveLock(named: "refresh news/alice"))
        #expect(try held.isHeld())
        #expect(try other.tryExclusiveLock(named: "refresh news/alice") == nil)
        // The administrator ends the backend that holds this lock (found by its number, which
        // only a holder of the namespace's keys can compute).
        let number = UInt64(bitPattern: store.lockNumber("refresh news/alice"))
        let ended = try PostgresStoreTests.sql("""
            SELECT pg_terminate_backend(pid)::text FROM pg_locks WHERE locktype = 'advisory' AND granted
              AND classid::bigint = \(number >> 32) AND objid::bigint = \(number & 0xffff_ffff) AND objsubid = 1
            """)
        #expect(ended == [["true"]], "one backend held the lock: \(ended)")
        #expect(try !held.isHeld(), "the holder learns that its lock is gone")
        // The server released it: another handle (another machine) can take it now.
        var taken: (any HeldLock)?
        for _ in 0..<100 where taken == nil {
            taken = try other.tryExclusiveLock(named: "refresh news/alice")
            if taken == nil { Thread.sleep(forTimeInterval: 0.02) }
        }
        let second = try #require(taken)
        #expect(try second.isHeld() && !held.isHeld())
        second.release()
        held.release()
        // The first handle recovers: a new lock on a new connection, held.
        let again = try #require(try store.tryExclusiveLock(named: "refresh news/alice"))
        #expect(try again.isHeld())
        again.release()
        #expect(try !again.isHeld())
    }
}
