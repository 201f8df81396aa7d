// A process that races others on one store, for the conformance suite's cross-process tests.
// Not a product: it exists so the tests can run real processes against a real store.
//
//   store-race vault PATH | secret-service NAMESPACE | postgres NAMESPACE   then one of:
//     increment SERVICE ACCOUNT COUNT   read, add one, write back conditionally; retry on conflict
//     create PREFIX COUNT               try to create PREFIX-0 … PREFIX-(COUNT-1); print each one won
//     revoke SERVICE ACCOUNT SCOPE…     revoke each scope of one token through the TokenKeeper
//     lock NAME                         try the store's named lock once: print "held" or "busy"
//     fresh SERVICE ACCOUNT SECONDS     a token valid for SECONDS through ProviderTokens (refreshing
//                                       at the provider kept in the store); print it
//
// For the crash tests, $STORE_RACE_PAUSE names a step of a refresh at which the process stops,
// creates the file $STORE_RACE_PAUSED and waits to be killed: `locked` (the grant's lock just
// taken, nothing sent), `answered` (the provider's answer in hand, nothing written) or
// `committed` (the new tokens written, not yet handed out). The steps are seen from outside
// the library, through the store it is given (``PausingStore``): the library has no hook.
//
// Every mode waits for the file named by $STORE_RACE_START to exist before it begins, so that
// the racers start together. It prints one line per result and exits 0, or prints the error
// and exits 1.
import Foundation
import Synchronization
import Keysmith
import KeysmithPostgres
import KeysmithProvider
import KeysmithSecretService
import KeysmithTokens
import KeysmithVault

func openStore(_ backend: String, _ location: String) throws -> any SecureStore {
    switch backend {
    case "vault": return try FileVault.open(at: location, credential: .key([UInt8](repeating: 7, count: 32)))
    case "secret-service": return try SecretServiceStore(namespace: location, timeout: .seconds(20))
    case "postgres":
        // The test server's URL (scripts/with-postgres.sh) and the conformance suite's master key.
        let settings = try PostgresConnectionSettings(url: ProcessInfo.processInfo.environment["KEYSMITH_TEST_DATABASE_URL"] ?? "")
        return try PostgresStore(settings, namespace: location, masterKey: .key([UInt8](repeating: 9, count: 32)))
    default: throw KeysmithError.invalidArgument("unknown backend \(backend)")
    }
}

/// A store that forwards everything to another and stops the process at one step of a refresh
/// (see the header): at the lock's taking, or just before or after the write of a token record.
final class PausingStore: ExclusiveLocking, @unchecked Sendable {
    let inner: any ExclusiveLocking
    let step: String
    let marker: String

    init(_ inner: any ExclusiveLocking, step: String, marker: String) {
        self.inner = inner
        self.step = step
        self.marker = marker
    }

    /// Tells the test this process is at its step, then waits for the SIGKILL.
    func pause(at reached: String) {
        guard reached == step else { return }
        _ = FileManager.default.createFile(atPath: marker, contents: Data(reached.utf8))
        while true { sleep(60) }
    }

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
        func isToken(_ key: ItemKey) -> Bool {
            if case .keysmithRecord(let record) = key { return record.recordType == .oauthToken }
            return false
        }
        let writesToken = operations.contains { operation in
            switch operation {
            case .create(let attributes, _), .update(let attributes, _, _), .upsert(let attributes, _): isToken(attributes.key)
            case .replace(let record): isToken(record.key)
            default: false
            }
        }
        if writesToken { pause(at: "answered") }
        try inner.perform(operations)
        if writesToken { pause(at: "committed") }
    }

    func tryExclusiveLock(named name: String) throws -> (any HeldLock)? {
        let lock = try inner.tryExclusiveLock(named: name)
        if lock != nil { pause(at: "locked") }
        return lock
    }
}

func waitForStart() {
    guard let path = ProcessInfo.processInfo.environment["STORE_RACE_START"] else { return }
    while !FileManager.default.fileExists(atPath: path) { usleep(1_000) }
}

func increment(_ store: any SecureStore, key: ItemKey, count: Int) throws {
    var conflicts = 0
    for _ in 0..<count {
        while true {
            do {
                if let record = try store.read(key) {
                    let value = Int(String(decoding: record.secret, as: UTF8.self)) ?? -1_000_000
                    try store.update(ItemAttributes(key: key), secret: Data(String(value + 1).utf8), ifVersion: record.info.version)
                } else {
                    try store.create(ItemAttributes(key: key), secret: Data("1".utf8))
                }
                break
            } catch let error as KeysmithError where error.code == .writeConflict || error.code == .duplicateItem {
                conflicts += 1
            }
        }
    }
    print("conflicts \(conflicts)")
}

do {
    let arguments = CommandLine.arguments
    guard arguments.count >= 4 else { throw KeysmithError.invalidArgument("usage: store-race BACKEND LOCATION MODE ARGS…") }
    let store = try openStore(arguments[1], arguments[2])
    let rest = Array(arguments[4...])
    waitForStart()
    switch arguments[3] {
    case "increment" where rest.count == 3:
        try increment(store, key: .genericPassword(service: rest[0], account: rest[1]), count: Int(rest[2]) ?? 0)
    case "create" where rest.count == 2:
        let me = String(ProcessInfo.processInfo.processIdentifier)
        for index in 0..<(Int(rest[1]) ?? 0) {
            do {
                try store.create(ItemAttributes(key: .genericPassword(service: "race", account: "\(rest[0])-\(index)")), secret: Data(me.utf8))
                print("won \(index) \(me)")
            } catch let error as KeysmithError where error.code == .duplicateItem {
                print("lost \(index)")
            }
        }
    case "lock" where rest.count == 1:
        guard let locking = store as? any ExclusiveLocking else { throw KeysmithError.invalidArgument("the store takes no locks") }
        if let lock = try locking.tryExclusiveLock(named: rest[0]) {
            print("held")
            lock.release()
        } else {
            print("busy")
        }
    case "fresh" where rest.count == 3:
        var base = store
        if let step = ProcessInfo.processInfo.environment["STORE_RACE_PAUSE"], let locking = store as? any ExclusiveLocking {
            base = PausingStore(locking, step: step, marker: ProcessInfo.processInfo.environment["STORE_RACE_PAUSED"] ?? "paused")
        }
        let tokens = try ProviderTokens(keeper: TokenKeeper(store: base))
        let done = DispatchSemaphore(value: 0)
        let outcome = Mutex<Result<OAuthToken, any Error>?>(nil)
        // Detached: top-level code runs on the main actor, which waits on `done` below.
        Task.detached {
            let result: Result<OAuthToken, any Error>
            do {
                result = .success(try await tokens.freshToken(service: rest[0], account: rest[1], minValidity: .seconds(Int(rest[2]) ?? 60)))
            } catch {
                result = .failure(error)
            }
            outcome.withLock { $0 = result }
            done.signal()
        }
        done.wait()
        print("token \(try outcome.withLock { $0! }.get().accessToken)")
    case "revoke" where rest.count >= 3:
        let keeper = TokenKeeper(store: store)
        for scope in rest[2...] {
            try keeper.revoke([try Scope(scope)], service: rest[0], account: rest[1], reason: "race \(ProcessInfo.processInfo.processIdentifier)")
        }
        print("revoked \(rest.count - 2)")
    default:
        throw KeysmithError.invalidArgument("unknown mode or wrong arguments: \(arguments[3...].joined(separator: " "))")
    }
} catch let error as ProviderError {
    print("error provider \(error.kind) \(error.oauthError ?? "-"): \(error)")
    exit(1)
} catch {
    print("error \(error)")
    exit(1)
}
