// A process that races others on one store, for the conformance suite's cross-process tests.
// Not a product: it exists so the tests can run real processes against a real store.
//
//   store-race vault PATH | secret-service NAMESPACE | postgres NAMESPACE   then one of:
//     increment SERVICE ACCOUNT COUNT   read, add one, write back conditionally; retry on conflict
//     create PREFIX COUNT               try to create PREFIX-0 … PREFIX-(COUNT-1); print each one won
//     revoke SERVICE ACCOUNT SCOPE…     revoke each scope of one token through the TokenKeeper
//     lock NAME                         try the store's named lock once: print "held" or "busy"
//
// Every mode waits for the file named by $STORE_RACE_START to exist before it begins, so that
// the racers start together. It prints one line per result and exits 0, or prints the error
// and exits 1.
import Foundation
import Keysmith
import KeysmithPostgres
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
    case "revoke" where rest.count >= 3:
        let keeper = TokenKeeper(store: store)
        for scope in rest[2...] {
            try keeper.revoke([try Scope(scope)], service: rest[0], account: rest[1], reason: "race \(ProcessInfo.processInfo.processIdentifier)")
        }
        print("revoked \(rest.count - 2)")
    default:
        throw KeysmithError.invalidArgument("unknown mode or wrong arguments: \(arguments[3...].joined(separator: " "))")
    }
} catch {
    print("error \(error)")
    exit(1)
}
