// The PostgreSQL store: single reads and durable writes (p50, p99), 8 concurrent writers on
// distinct and on the same items (lost updates counted), and bulk revocation of one scope across
// many tokens. Needs a server: run it as
//   scripts/with-postgres.sh Benchmarks/.build/release/PostgresBenchmarks [--tokens 100000]
// (fsync on, synchronous commits, a Unix socket). Figures printed, nothing asserted.
import Foundation
import Keysmith
import KeysmithPostgres
import KeysmithTokens
import Synchronization

func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }
func ms(_ ns: UInt64) -> String { String(format: "%.3f ms", Double(ns) / 1e6) }
func percentile(_ values: [UInt64], _ p: Double) -> UInt64 {
    let sorted = values.sorted()
    return sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
}

let arguments = CommandLine.arguments
let tokenCount = arguments.firstIndex(of: "--tokens").map { Int(arguments[$0 + 1]) ?? 100_000 } ?? 100_000
guard let url = ProcessInfo.processInfo.environment["KEYSMITH_TEST_DATABASE_URL"] else {
    print("run under scripts/with-postgres.sh (it sets KEYSMITH_TEST_DATABASE_URL)")
    exit(64)
}
let settings = try PostgresConnectionSettings(url: url)
let master = PostgresMasterKey.key([UInt8](repeating: 9, count: 32))
try PostgresStore.initialize(settings, masterKey: master)
let namespace = "bench-\(UUID().uuidString)"
let store = try PostgresStore(settings, namespace: namespace, masterKey: master)

// Single durable writes and single reads, one item each time.
var writes: [UInt64] = [], reads: [UInt64] = []
for index in 0..<2000 {
    let key = ItemKey.genericPassword(service: "bench", account: "a\(index % 200)")
    let start = now()
    try store.perform([.upsert(ItemAttributes(key: key), secret: Data("secret-\(index)".utf8))])
    writes.append(now() - start)
}
for index in 0..<5000 {
    let start = now()
    _ = try store.read(.genericPassword(service: "bench", account: "a\(index % 200)"))
    reads.append(now() - start)
}
print("single read: p50 \(ms(percentile(reads, 0.5))), p99 \(ms(percentile(reads, 0.99))) (5,000 reads)")
print("single durable write: p50 \(ms(percentile(writes, 0.5))), p99 \(ms(percentile(writes, 0.99))) (2,000 upserts, each a commit)")

// 8 writers, each its own handle (connection), incrementing with conditional updates.
func race(sameItem: Bool, perWriter: Int) throws -> (seconds: Double, lost: Int, conflicts: Int) {
    let counter = ItemKey.genericPassword(service: "race", account: sameItem ? "shared" : "x")
    let group = DispatchGroup()
    let conflicts = Mutex(0)
    let failures = Mutex<[String]>([])
    let start = now()
    for writer in 0..<8 {
        group.enter()
        Thread.detachNewThread {
            defer { group.leave() }
            do {
                let handle = try PostgresStore(settings, namespace: namespace, masterKey: master)
                let key = sameItem ? counter : ItemKey.genericPassword(service: "race", account: "w\(writer)")
                for _ in 0..<perWriter {
                    while true {
                        do {
                            if let record = try handle.read(key) {
                                let value = Int(String(decoding: record.secret, as: UTF8.self)) ?? 0
                                try handle.perform([.update(ItemAttributes(key: key), secret: Data(String(value + 1).utf8), ifVersion: record.info.version)])
                            } else {
                                try handle.perform([.create(ItemAttributes(key: key), secret: Data("1".utf8))])
                            }
                            break
                        } catch let error as KeysmithError where error.code == .writeConflict || error.code == .duplicateItem {
                            conflicts.withLock { $0 += 1 }
                        }
                    }
                }
            } catch {
                failures.withLock { $0.append("\(error)") }
            }
        }
    }
    group.wait()
    let seconds = Double(now() - start) / 1e9
    if let failure = failures.withLock({ $0.first }) { print("a writer failed: \(failure)") }
    var total = 0
    if sameItem {
        total = Int(String(decoding: try store.read(counter)?.secret ?? Data(), as: UTF8.self)) ?? 0
    } else {
        for writer in 0..<8 {
            total += Int(String(decoding: try store.read(.genericPassword(service: "race", account: "w\(writer)"))?.secret ?? Data(), as: UTF8.self)) ?? 0
        }
    }
    return (seconds, 8 * perWriter - total, conflicts.withLock { $0 })
}
let distinct = try race(sameItem: false, perWriter: 250)
print("8 writers, distinct items: 2,000 increments in \(String(format: "%.2f", distinct.seconds)) s, \(distinct.lost) lost, \(distinct.conflicts) conflicts retried")
let same = try race(sameItem: true, perWriter: 100)
print("8 writers, one item: 800 increments in \(String(format: "%.2f", same.seconds)) s, \(same.lost) lost, \(same.conflicts) conflicts retried")

// Bulk revocation across many tokens, one transaction.
let token = try OAuthToken(
    response: Data(#"{"access_token":"a","token_type":"Bearer","expires_in":3600,"scope":"groups:read posts:write"}"#.utf8),
    requested: [try Scope("groups:read"), try Scope("posts:write")], now: Date())
var filled = 0
let fillStart = now()
while filled < tokenCount {
    let batch = min(10_000, tokenCount - filled)
    try store.perform((filled..<filled + batch).map { index in
        var token = token
        token.accessToken = "access-\(index)"
        let item = StoredToken(service: "news", account: "user\(index)", token: token)
        return .create(item.attributes, secret: item.secret)
    })
    filled += batch
}
print("stored \(tokenCount) tokens in \(ms(now() - fillStart)) (batches of 10,000)")
let keeper = TokenKeeper(store: store)
let revokeStart = now()
let report = try keeper.revoke(scope: try Scope("posts:write"), matching: TokenFilter(), reason: "bench")
print("bulk revocation of one scope across \(report.changed) tokens (one transaction): \(ms(now() - revokeStart))")
