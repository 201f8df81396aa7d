// The PostgreSQL store: single reads and durable writes (p50, p99), 8 concurrent writers on
// distinct and on the same items (lost updates counted), and bulk revocation of one scope across
// many tokens. Needs a server: run it as
//   scripts/with-postgres.sh Benchmarks/.build/release/PostgresBenchmarks [--tokens 100000]
// (fsync on, synchronous commits, a Unix socket). Figures printed, nothing asserted.
import Foundation
import Keysmith
import KeysmithPostgres
import KeysmithTokens
import KeysmithVault
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

// --bulk-only: only the bulk revocation, and the same on a file vault (issue 33's figure).
let bulkOnly = arguments.contains("--bulk-only")
if !bulkOnly {
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

// 64 tasks reading at once from async code, on one handle with a pool of 16 connections: the
// async API (each read awaits its answer; no thread waits) against the blocking API called from
// the same 64 tasks (each call holds one of the cooperative pool's threads, as many as there are
// cores, until its answer comes). Rounds alternate; medians of 5. Run on their own with
// --concurrent-only.
let concurrentTasks = 64, readsPerTask = 50
let poolSize = arguments.firstIndex(of: "--pool").map { Int(arguments[$0 + 1]) ?? 16 } ?? 16
let pooled = try PostgresStore(settings, namespace: namespace, masterKey: master, connections: poolSize)
/// Reads per second of `concurrentTasks` tasks each reading `readsPerTask` items, through the
/// async API or the blocking one.
@Sendable func concurrentReads(async: Bool) async throws -> Double {
    let start = now()
    try await withThrowingTaskGroup(of: Void.self) { group in
        for task in 0..<concurrentTasks {
            group.addTask {
                for read in 0..<readsPerTask {
                    let key = ItemKey.genericPassword(service: "bench", account: "a\((task * readsPerTask + read) % 200)")
                    // `any SecureStore` has only the blocking read.
                    let record = async ? try await pooled.read(key) : try (pooled as any SecureStore).read(key)
                    precondition(record != nil)
                }
            }
        }
        try await group.waitForAll()
    }
    return Double(concurrentTasks * readsPerTask) / (Double(now() - start) / 1e9)
}
let concurrentDone = DispatchSemaphore(value: 0)
let concurrentFigures = Mutex<(async: [Double], blocking: [Double])>(([], []))
Task.detached {  // detached: top-level code is on the main actor, whose thread waits below
    do {
        _ = try await concurrentReads(async: true)  // warm: every connection of the pool opened
        for _ in 0..<5 {
            let blocking = try await concurrentReads(async: false)
            let async = try await concurrentReads(async: true)
            concurrentFigures.withLock { $0.blocking.append(blocking); $0.async.append(async) }
        }
    } catch {
        print("concurrent reads failed: \(error)")
    }
    concurrentDone.signal()
}
concurrentDone.wait()
let (asyncRates, blockingRates) = concurrentFigures.withLock { ($0.async.sorted(), $0.blocking.sorted()) }
if asyncRates.count == 5 {
    let ratio = asyncRates[2] / blockingRates[2]
    print(String(format: "64 concurrent tasks reading (pool of %d connections, %d cores): async %.0f reads/s, blocking calls %.0f reads/s (medians of 5, alternating): %.2fx (docs/benchmarks.md compares with 0.4's blocking calls)",
                 poolSize, ProcessInfo.processInfo.activeProcessorCount, asyncRates[2], blockingRates[2], ratio))
}
if arguments.contains("--concurrent-only") { exit(0) }

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

}

// Bulk revocation across many tokens, one transaction.
let token = try OAuthToken(
    response: Data(#"{"access_token":"a","token_type":"Bearer","expires_in":3600,"scope":"groups:read posts:write"}"#.utf8),
    requested: [try Scope("groups:read"), try Scope("posts:write")], now: Date())
/// Stores `tokenCount` tokens in `target`, 10,000 per commit.
func fill(_ target: any SecureStore) throws {
    var filled = 0
    while filled < tokenCount {
        let batch = min(10_000, tokenCount - filled)
        try target.perform((filled..<filled + batch).map { index in
            var token = token
            token.accessToken = "access-\(index)"
            let item = StoredToken(service: "news", account: "user\(index)", token: token)
            return .create(item.attributes, secret: item.secret)
        })
        filled += batch
    }
}
let fillStart = now()
try fill(store)
print("stored \(tokenCount) tokens in \(ms(now() - fillStart)) (batches of 10,000)")
/// Where a bulk revocation's time goes: the scan alone (records read and decrypted), then the
/// dry run (the scan, and each token decoded and checked), the rest being the write.
func phases(_ target: any SecureStore, _ name: String) throws {
    var scanned = 0
    let scanStart = now()
    try target.forEachRecord(matching: ItemQuery(service: "news", recordType: .oauthToken), chunkSize: 4096) { records, _ in scanned += records.count }
    let scan = now() - scanStart
    let dryStart = now()
    let dry = try TokenKeeper(store: target).revoke(scope: try Scope("posts:write"), matching: TokenFilter(), reason: "bench", dryRun: true)
    print("\(name): scan of \(scanned) token records \(ms(scan)); dry run of the revocation (\(dry.changed) tokens) \(ms(now() - dryStart))")
}
try phases(store, "PostgreSQL")
/// A store that times its commits: what of a bulk revocation is the store's write.
final class TimedCommits: SecureStore, @unchecked Sendable {
    let inner: any SecureStore
    var committing: UInt64 = 0
    init(_ inner: any SecureStore) { self.inner = inner }
    var storeDescription: String { inner.storeDescription }
    var isolation: StoreIsolation { inner.isolation }
    var limits: StoreLimits { inner.limits }
    func read(_ key: ItemKey) throws -> SecureRecord? { try inner.read(key) }
    func read(_ keys: [ItemKey]) throws -> [SecureRecord?] { try inner.read(keys) }
    func search(_ query: ItemQuery) throws -> [ItemInfo] { try inner.search(query) }
    func forEachRecord(matching query: ItemQuery, chunkSize: Int, _ body: ([SecureRecord], ScanProgress) throws -> Void) throws {
        try inner.forEachRecord(matching: query, chunkSize: chunkSize, body)
    }
    func perform(_ operations: [StoreOperation]) throws {
        let start = now()
        defer { committing += now() - start }
        try inner.perform(operations)
    }
}
let timed = TimedCommits(store)
let keeper = TokenKeeper(store: timed)
let revokeStart = now()
let report = try keeper.revoke(scope: try Scope("posts:write"), matching: TokenFilter(), reason: "bench")
print("bulk revocation of one scope across \(report.changed) tokens (one transaction): \(ms(now() - revokeStart)), of which the commit \(ms(timed.committing))")

// The same revocation on a file vault, in the same run (the machine is shared: compare the two).
let vaultDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("keysmith-bench-\(UUID().uuidString)")
defer { try? FileManager.default.removeItem(at: vaultDirectory) }
let vault = try FileVault.create(at: vaultDirectory.path, credential: .key([UInt8](repeating: 7, count: 32)), anchorDirectory: nil)
try fill(vault)
try phases(vault, "file vault")
let vaultRevokeStart = now()
let timedVault = TimedCommits(vault)
let vaultReport = try TokenKeeper(store: timedVault).revoke(scope: try Scope("posts:write"), matching: TokenFilter(), reason: "bench")
print("the same on a file vault: \(vaultReport.changed) tokens: \(ms(now() - vaultRevokeStart)), of which the commit \(ms(timedVault.committing))")

if bulkOnly { exit(0) }

// `token import --batch`: 20,000 token responses in one commit, new, then again (each an update).
let importCount = 20_000
let imports = (0..<importCount).map { index in
    TokenImport(service: "imported", account: "user\(index)",
                response: Data(#"{"access_token":"i\#(index)","token_type":"Bearer","expires_in":3600,"scope":"groups:read posts:write"}"#.utf8),
                requested: [try! Scope("groups:read"), try! Scope("posts:write")])
}
for (name, target) in [("PostgreSQL", store as any SecureStore), ("file vault", vault as any SecureStore)] {
    let importer = TokenKeeper(store: target)
    let importStart = now()
    let first = try importer.importBatch(imports)
    let importTime = now() - importStart
    let updateStart = now()
    let second = try importer.importBatch(imports)
    print("\(name): batch import of \(first.imported.count) new tokens \(ms(importTime)); again, \(second.updated.count) updated \(ms(now() - updateStart))")
}

// Propagation: 8 `keysmith watch` processes (the built command, --keysmith PATH), a revocation
// committed here, the time until each process has printed it; then `revoke --wait`'s overhead.
if let index = arguments.firstIndex(of: "--keysmith"), index + 1 < arguments.count {
    let binary = arguments[index + 1]
    let keyfile = FileManager.default.temporaryDirectory.appendingPathComponent("bench-master-\(UUID().uuidString)").path
    try (String(repeating: "09", count: 32) + "\n").write(toFile: keyfile, atomically: true, encoding: .utf8)
    defer { try? FileManager.default.removeItem(atPath: keyfile) }
    var environment = ProcessInfo.processInfo.environment
    environment["KEYSMITH_DATABASE_URL"] = url
    environment["KEYSMITH_KEYFILE"] = keyfile
    environment["KEYSMITH_NAMESPACE"] = namespace
    environment["KEYSMITH_BACKEND"] = "postgres"
    final class Arrivals: @unchecked Sendable {
        let lock = NSLock()
        var times: [Int: [UInt64]] = [:]   // revocation round → arrival times
    }
    let arrivals = Arrivals()
    var watchers: [Process] = []
    for number in 0..<8 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = ["watch", "--name", "bench-\(number)"]
        process.environment = environment
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle.nullDevice
        try process.run()
        watchers.append(process)
        let handle = pipe.fileHandleForReading
        Thread.detachNewThread {
            var buffer = Data()
            var seen: Set<Int> = []
            while true {
                let chunk = handle.availableData
                if chunk.isEmpty { return }
                buffer += chunk
                while let newline = buffer.firstIndex(of: 10) {
                    let line = String(decoding: buffer[buffer.startIndex..<newline], as: UTF8.self)
                    buffer = Data(buffer[(newline + 1)...])
                    // Round n revokes scope "r<n>" of token "prop": each round a line first shows as revoked counts once per watcher.
                    guard line.contains("\"account\":\"prop\"") else { continue }
                    let arrived = now()
                    var rest = Substring(line)
                    while let range = rest.range(of: #""scope":"r(\d+)","state":"revoked""#, options: .regularExpression) {
                        if let round = Int(rest[range].filter(\.isNumber)), seen.insert(round).inserted {
                            arrivals.lock.lock()
                            arrivals.times[round, default: []].append(arrived)
                            arrivals.lock.unlock()
                        }
                        rest = rest[range.upperBound...]
                    }
                }
            }
        }
    }
    defer { for process in watchers { process.terminate() } }
    let rounds = 50
    let scopeList = (0..<rounds).map { "r\($0)" }.joined(separator: " ")
    let tokenStore = TokenKeeper(store: store)
    _ = try tokenStore.importResponse(Data(#"{"access_token":"p","token_type":"Bearer","scope":"\#(scopeList)"}"#.utf8),
                                      service: "prop", account: "prop", requested: [])
    // Wait until all 8 have registered: every live watcher is "pending" for a sequence none reached.
    while try store.waitForWatchers(through: Int64.max, timeout: .zero).count < 8 { usleep(50_000) }
    var latencies: [UInt64] = []
    for round in 0..<rounds {
        let committed = now()
        try tokenStore.revoke([try Scope("r\(round)")], service: "prop", account: "prop", reason: "bench")
        var done = false
        let deadline = now() + 10_000_000_000
        while !done && now() < deadline {
            arrivals.lock.lock()
            done = arrivals.times[round]?.count == 8
            arrivals.lock.unlock()
            if !done { usleep(200) }
        }
        guard done else { print("round \(round): not every watcher printed the revocation within 10 s"); break }
        arrivals.lock.lock()
        latencies += arrivals.times[round]!.map { $0 - committed }
        arrivals.lock.unlock()
    }
    print("propagation to 8 watching processes (commit to printed, \(rounds) revocations): p50 \(ms(percentile(latencies, 0.5))), p99 \(ms(percentile(latencies, 0.99))), max \(ms(latencies.max()!))")
    // revoke --wait overhead: the same revocation through the command, with and without --wait.
    func timeCommand(_ extra: [String], scope: String) throws -> UInt64 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = ["revoke", "--scope", scope, "--service", "prop"] + extra
        process.environment = environment
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        let start = now()
        try process.run()
        process.waitUntilExit()
        return now() - start
    }
    _ = try tokenStore.importResponse(Data(#"{"access_token":"p","token_type":"Bearer","scope":"\#((0..<40).map { "w\($0)" }.joined(separator: " "))"}"#.utf8),
                                      service: "prop", account: "prop", requested: [], replacing: true)
    var plain: [UInt64] = [], waited: [UInt64] = []
    for round in 0..<20 {
        plain.append(try timeCommand([], scope: "w\(round * 2)"))
        waited.append(try timeCommand(["--wait"], scope: "w\(round * 2 + 1)"))
    }
    print("keysmith revoke (whole process, 20 each, interleaved): plain p50 \(ms(percentile(plain, 0.5))), --wait p50 \(ms(percentile(waited, 0.5))) (8 watchers)")
}
