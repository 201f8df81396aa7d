// A report service that keeps its callers' API keys in Keysmith's PostgreSQL store and authorizes
// each request with Keysmith's policy engine from the caller's token scopes. The scopes follow the
// change feed (`WatchedTokens`), so a revocation made by any process on any machine (`keysmith
// token revoke …`) is enforced here within the watcher's poll interval, and a watcher that cannot
// confirm it is current denies everything.
//
//   ReportService setup --clients 64 --out clients.json   # API keys and tokens for client-0 … client-63
//   ReportService serve [--port 8080] [--connections 16] [--name WATCHER]
//
// Both read KEYSMITH_DATABASE_URL, KEYSMITH_KEYFILE (the master key: 64 hex digits) and
// KEYSMITH_NAMESPACE (default `report-service`). A request names its caller and proves it:
//   curl -H 'X-Client: client-7' -H "Authorization: Bearer $KEY" http://127.0.0.1:8080/reports/42
// 200 with the report; 401 for an unknown caller or a wrong key; 403 when the policies deny
// (`reports:read` for GET, `reports:write` for PUT, revoked, expired, or the feed not current).
import Foundation
import Glibc
import HTTPTypes
import Hummingbird
import Keysmith
import KeysmithCredentials
import KeysmithPolicy
import KeysmithPostgres
import KeysmithTokenPolicy
import KeysmithTokens
import Logging

let environment = ProcessInfo.processInfo.environment
let arguments = Array(CommandLine.arguments.dropFirst())

func option(_ name: String) -> String? {
    arguments.firstIndex(of: name).flatMap { $0 + 1 < arguments.count ? arguments[$0 + 1] : nil }
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("ReportService: \(message)\n".utf8))
    exit(64)
}

guard let url = environment["KEYSMITH_DATABASE_URL"] else { fail("set KEYSMITH_DATABASE_URL (postgresql://…)") }
guard let keyfile = environment["KEYSMITH_KEYFILE"] else { fail("set KEYSMITH_KEYFILE (the master key, 64 hex digits)") }
let settings = try PostgresConnectionSettings(url: url)
let masterKey = PostgresMasterKey.keyfile(path: keyfile)
let namespace = environment["KEYSMITH_NAMESPACE"] ?? "report-service"
/// Where the callers' API keys are kept: a generic password per caller.
let keyService = "report-service-keys"
/// Where the callers' tokens are kept: a token per caller, its scopes checked by the policies.
let tokenService = "reports"

switch arguments.first {
case "setup":
    let count = option("--clients").flatMap(Int.init) ?? 64
    guard let out = option("--out") else { fail("setup needs --out FILE (the callers' API keys, written 0600)") }
    try PostgresStore.initialize(settings, masterKey: masterKey)
    let store = try PostgresStore(settings, namespace: namespace, masterKey: masterKey)
    var callers: [[String: String]] = []
    var operations: [StoreOperation] = []
    for index in 0..<count {
        let client = "client-\(index)"
        var bytes = [UInt8](repeating: 0, count: 32)
        for position in bytes.indices { bytes[position] = UInt8.random(in: 0...255) }  // SystemRandomNumberGenerator
        let apiKey = bytes.map { String(format: "%02x", $0) }.joined()
        operations.append(.upsert(ItemAttributes(key: .genericPassword(service: keyService, account: client)), secret: Data(apiKey.utf8)))
        callers.append(["client": client, "key": apiKey])
    }
    try store.perform(operations)
    try TokenKeeper(store: store).importBatch((0..<count).map { index in
        TokenImport(service: tokenService, account: "client-\(index)",
                    response: Data(#"{"access_token":"upstream-\#(index)","token_type":"Bearer","scope":"reports:read reports:write"}"#.utf8),
                    requested: [])
    }, replacing: true)
    // Created 0600 from the start, and never over an existing file or through a link.
    let descriptor = open(out, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
    guard descriptor >= 0 else { fail("cannot create \(out) (it must not exist yet): errno \(errno)") }
    let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
    try handle.write(contentsOf: try JSONSerialization.data(withJSONObject: callers))
    print("set up \(count) callers in namespace \(namespace); their keys are in \(out)")

case "serve":
    let port = option("--port").flatMap(Int.init) ?? 8080
    let connections = option("--connections").flatMap(Int.init) ?? 16
    let store = try PostgresStore(settings, namespace: namespace, masterKey: masterKey, connections: connections)
    // The watcher's name is its registration (`keysmith revoke --wait` waits for each): one per
    // instance, so the host's name and the process, unless given.
    let watcherName = option("--name") ?? "report-service-\(ProcessInfo.processInfo.hostName)-\(ProcessInfo.processInfo.processIdentifier)"
    let watcher = try PostgresWatcher(settings, namespace: namespace, masterKey: masterKey, name: String(watcherName.prefix(200)))
    let tokens = try WatchedTokens(watcher: watcher, store: store, service: tokenService)
    tokens.start(pollInterval: .milliseconds(20))
    let policies = try Policies(text: """
        permit (principal, action == Action::"read", resource)
          when { context has token && context.token.granted.contains("reports:read") };
        permit (principal, action == Action::"write", resource)
          when { context has token && context.token.granted.contains("reports:write") };
        """, file: "report-service.cedar")
    let entities = try EntityStore()
    let clientHeader = HTTPField.Name("X-Client")!

    /// The caller, once its API key is checked against the one Keysmith keeps (an async read:
    /// the handler holds no thread while the database answers).
    @Sendable func caller(_ request: Request) async throws -> String {
        guard let client = request.headers[clientHeader], let authorization = request.headers[.authorization],
              authorization.hasPrefix("Bearer ") else { throw HTTPError(.unauthorized) }
        let presented = Array(authorization.utf8.dropFirst(7))
        let key = ItemKey.genericPassword(service: keyService, account: client)
        // A name no item can have (empty, too long, a control character) is an unknown caller.
        guard (try? key.validate()) != nil else { throw HTTPError(.unauthorized) }
        let kept = try await store.read(key)
        guard let kept, kept.secretMatches(presented) else { throw HTTPError(.unauthorized) }
        return client
    }

    @Sendable func authorize(_ client: String, _ action: String, report: String) throws {
        let request = AuthorizationRequest(principal: EntityUID(type: "Client", id: client), action: EntityUID(type: "Action", id: action),
                                           resource: EntityUID(type: "Report", id: report),
                                           token: tokens.permissions(account: client).map { TokenView(watching: $0) })
        guard policies.isAllowed(request, entities: entities) else { throw HTTPError(.forbidden) }
    }

    let router = Router()
    router.get("health") { _, _ in
        if tokens.watcher.isCurrent { return "current\n" }
        // Why the watch ended, if it did (a damaged feed, a rotated master key): never a secret.
        return tokens.failure.map { "stopped: \($0.message)\n" } ?? "stale\n"
    }
    router.get("reports/:id") { request, context -> String in
        let client = try await caller(request)
        let id = context.parameters.get("id") ?? ""
        try authorize(client, "read", report: id)
        return "report \(id) for \(client)\n"
    }
    router.put("reports/:id") { request, context -> String in
        let client = try await caller(request)
        let id = context.parameters.get("id") ?? ""
        try authorize(client, "write", report: id)
        return "report \(id) written by \(client)\n"
    }
    var logger = Logger(label: "report-service")
    logger.logLevel = .warning
    let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: port)), logger: logger)
    print("serving on 127.0.0.1:\(port), namespace \(namespace), \(connections) connections, watcher \(watcherName)")
    try await app.runService()  // until SIGTERM or SIGINT
    tokens.stop()  // removes the watcher's registration

default:
    fail("usage: ReportService setup --clients N --out FILE | serve [--port P] [--connections N]")
}
