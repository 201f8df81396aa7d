// Policy decisions per second on the news-groups scenario (1,000 groups, 1,000 users): the
// policy language (docs/examples/news-groups/policies.cedar) beside the same rules hand-written as
// plain Swift `if`s, in one run, one core; then memory while deciding requests that name 600,000
// distinct actions (nothing is interned: memory must stay flat); then the other applications of
// docs/examples/ (todo, photo-sharing, repositories).
import Foundation
import KeysmithPolicy
import KeysmithTokenPolicy
import KeysmithTokens

let groupCount = 1000, userCount = 1000
let requestCount = Int(ProcessInfo.processInfo.environment["KEYSMITH_POLICY_REQUESTS"] ?? "") ?? 300_000
let scopeNames = ["groups:read", "posts:write", "posts:delete"]
let actionNames = ["browse", "post", "delete"]

let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()
let policies = try Policies(text: try String(contentsOf: root.appendingPathComponent("docs/examples/news-groups/policies.cedar"), encoding: .utf8))

// A deterministic population.
struct Generator: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
var generator = Generator(state: 7)

struct HandUser {
    var anonymous: Bool
    var superAdmin: Bool
    var memberOf: Set<String>
    var adminOf: Set<String>
    var read: Bool, write: Bool, delete: Bool
}
struct HandGroup { var id: String; var isPublic: Bool }

let groups = (0..<groupCount).map { HandGroup(id: "g\($0)", isPublic: Bool.random(using: &generator)) }
var handUsers: [HandUser] = []
var entities: [Entity] = groups.map { Entity(uid: EntityUID(type: "Group", id: $0.id), attributes: ["public": .bool($0.isPublic)]) }
var users: [(EntityUID, TokenView?)] = []
for index in 0..<userCount {
    let anonymous = index % 10 == 0
    let memberOf = Set((0..<3).map { _ in groups[Int.random(in: 0..<groupCount, using: &generator)].id })
    let adminOf = Set((0..<1).map { _ in groups[Int.random(in: 0..<groupCount, using: &generator)].id })
    let scopes = scopeNames.filter { _ in Int.random(in: 0..<10, using: &generator) < 8 }
    let isSuperAdmin = index % 97 == 0
    handUsers.append(HandUser(anonymous: anonymous, superAdmin: isSuperAdmin, memberOf: memberOf, adminOf: adminOf,
                              read: scopes.contains(scopeNames[0]), write: scopes.contains(scopeNames[1]), delete: scopes.contains(scopeNames[2])))
    let uid = EntityUID(type: anonymous ? "Anonymous" : "User", id: "u\(index)")
    let set = { (ids: Set<String>) in PolicyValue.set(PolicyValueSet(ids.sorted().map { .entity(EntityUID(type: "Group", id: $0)) })) }
    entities.append(Entity(uid: uid, attributes: ["member_of": set(memberOf), "admin_of": set(adminOf), "super_admin": .bool(isSuperAdmin)]))
    users.append((uid, anonymous ? nil : TokenView(granted: Set(scopes.map { try! Scope($0) }))))
}
let store = try EntityStore(entities)
let requests = (0..<requestCount).map { _ in
    (Int.random(in: 0..<userCount, using: &generator), Int.random(in: 0..<3, using: &generator), Int.random(in: 0..<groupCount, using: &generator))
}
let prepared = requests.map { user, action, group in
    AuthorizationRequest(principal: users[user].0, action: EntityUID(type: "Action", id: actionNames[action]),
                         resource: EntityUID(type: "Group", id: groups[group].id), token: users[user].1)
}

@inline(never)
func handWritten(_ user: HandUser, _ action: Int, _ group: HandGroup) -> Bool {
    if user.anonymous { return action == 0 && group.isPublic }
    switch action {
    case 0: if !user.read { return false }
    case 1: if !user.write { return false }
    default: if !user.delete { return false }
    }
    if user.superAdmin { return true }
    if action == 0 && group.isPublic { return true }
    let isAdmin = user.adminOf.contains(group.id)
    if action == 2 { return isAdmin }
    return isAdmin || user.memberOf.contains(group.id)
}

// The same ifs as a service would run them: the request names the user, the action and the
// group by id (the same prepared requests the policy language decides), and the code looks
// the user and the group up by id first.
let handUsersByID = Dictionary(uniqueKeysWithValues: users.indices.map { (users[$0].0.id, handUsers[$0]) })
let groupsByID = Dictionary(uniqueKeysWithValues: groups.map { ($0.id, $0) })

@inline(never)
func handWrittenByID(_ request: AuthorizationRequest) -> Bool {
    guard let user = handUsersByID[request.principal.id], request.principal.type == (user.anonymous ? "Anonymous" : "User"),
          request.resource.type == "Group", let group = groupsByID[request.resource.id], request.action.type == "Action"
    else { return false }
    let action: Int
    switch request.action.id {
    case "browse": action = 0
    case "post": action = 1
    case "delete": action = 2
    default: return false
    }
    return handWritten(user, action, group)
}

func rate(_ label: String, _ body: () -> Int) -> Double {
    let start = DispatchTime.now().uptimeNanoseconds
    let allowed = body()
    let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
    let perSecond = Double(requestCount) / seconds
    print("\(label): \(String(format: "%.3f", perSecond / 1e6)) million decisions/s (\(String(format: "%.0f", seconds * 1e9 / Double(requestCount))) ns each; \(allowed) allowed)")
    return perSecond
}

// KEYSMITH_POLICY_PROFILE=name decides only that application (news-groups, todo,
// photo-sharing, repositories), for 20 rounds (for perf).
let profiled = ProcessInfo.processInfo.environment["KEYSMITH_POLICY_PROFILE"]
// KEYSMITH_POLICY_ONLY_ALLOWED=1 (with a profiled application, news-groups included) measures
// `isAllowed` alone.
let onlyIsAllowed = ProcessInfo.processInfo.environment["KEYSMITH_POLICY_ONLY_ALLOWED"]
// KEYSMITH_POLICY_PROFILE=fixed decides the news-groups requests with no policies, 20 rounds.
if profiled == "fixed" {
    let noPolicies = try Policies(text: "")
    for _ in 1...20 {
        _ = rate("no policies, isAllowed (the fixed cost of a decision)") {
            var allowed = 0
            for request in prepared where noPolicies.isAllowed(request, entities: store) { allowed += 1 }
            return allowed
        }
    }
}
if profiled == nil || profiled == "news-groups" {
var agree = 0
for (index, (user, action, group)) in requests.prefix(100_000).enumerated()
where policies.isAuthorized(prepared[index], entities: store).isAllowed == handWritten(handUsers[user], action, groups[group])
    && handWrittenByID(prepared[index]) == handWritten(handUsers[user], action, groups[group]) {
    agree += 1
}
print("policy language and both hand-written versions agree on \(agree) of \(min(100_000, requestCount)) requests")

for round in 1...(profiled == nil ? 3 : 20) {
    print("-- round \(round)")
    if onlyIsAllowed != nil && profiled != nil {
        _ = rate("policy language, isAllowed (the answer only)") {
            var allowed = 0
            for request in prepared where policies.isAllowed(request, entities: store) { allowed += 1 }
            return allowed
        }
        continue
    }
    let hand = rate("hand-written ifs") {
        var allowed = 0
        for (user, action, group) in requests where handWritten(handUsers[user], action, groups[group]) { allowed += 1 }
        return allowed
    }
    let engineRate = rate("policy language") {
        var allowed = 0
        for request in prepared where policies.isAuthorized(request, entities: store).isAllowed { allowed += 1 }
        return allowed
    }
    let handByID = rate("hand-written ifs, looking the user and the group up by id") {
        var allowed = 0
        for request in prepared where handWrittenByID(request) { allowed += 1 }
        return allowed
    }
    print("policy language / hand-written: \(String(format: "%.1f", hand / engineRate))× slower; " +
          "/ hand-written by id: \(String(format: "%.1f", handByID / engineRate))× slower")
    let answerRate = rate("policy language, isAllowed (the answer only)") {
        var allowed = 0
        for request in prepared where policies.isAllowed(request, entities: store) { allowed += 1 }
        return allowed
    }
    print("isAllowed / hand-written: \(String(format: "%.1f", hand / answerRate))× slower; " +
          "/ hand-written by id: \(String(format: "%.1f", handByID / answerRate))× slower")
    // What every decision costs before any policy: finding the principal and the resource,
    // taking the request and giving it back.
    let noPolicies = try Policies(text: "")
    _ = rate("no policies, isAllowed (the fixed cost of a decision)") {
        var allowed = 0
        for request in prepared where noPolicies.isAllowed(request, entities: store) { allowed += 1 }
        return allowed
    }
}

func residentMB() -> Double {
    guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8),
          let pages = text.split(separator: " ").dropFirst().first.flatMap({ Double($0) }) else { return 0 }
    return pages * 4096 / 1_048_576
}
if profiled == nil {
let before = residentMB()
var denied = 0
for index in 0..<600_000 {
    let request = AuthorizationRequest(principal: users[index % userCount].0, action: EntityUID(type: "Action", id: "action-\(index)"),
                                       resource: EntityUID(type: "Group", id: groups[index % groupCount].id), token: users[index % userCount].1)
    if !policies.isAuthorized(request, entities: store).isAllowed { denied += 1 }
}
print("600,000 requests naming distinct actions: resident memory \(String(format: "%.1f", before)) MB before, \(String(format: "%.1f", residentMB())) MB after (\(denied) denied)")
}
}

// The other applications of docs/examples/ (their policies and schemas; the population and
// requests of Tests/KeysmithPolicyTests/Oracle/applications.py, which the Cedar agreement test
// uses too), each request with its token, prepared once and decided in-process.
func applicationRequests(_ name: String) throws -> (Policies, EntityStore, [AuthorizationRequest]) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = ["python3", root.appendingPathComponent("Tests/KeysmithPolicyTests/Oracle/applications.py").path,
                         "1", String(requestCount), name, "--no-oracle"]
    let pipe = Pipe()
    process.standardOutput = pipe
    try process.run()
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    let document = try JSONSerialization.jsonObject(with: data) as! [String: Any]
    let folder = root.appendingPathComponent("docs/examples/\(name)")
    let policies = try Policies(text: try String(contentsOf: folder.appendingPathComponent("policies.cedar"), encoding: .utf8))
    let schema = try Schema(text: try String(contentsOf: folder.appendingPathComponent("schema.cedarschema"), encoding: .utf8))
    try schema.validate(policies)
    var store = try EntityStore(json: Array(try JSONSerialization.data(withJSONObject: document["entities"]!)))
    try store.add(schema.actionEntities)
    let now = Date(timeIntervalSince1970: 1_795_860_000)
    let requests = try (document["requests"] as! [[String: Any]]).map { item -> AuthorizationRequest in
        var body = item
        let token = body.removeValue(forKey: "token") as? [String: [Any]]
        var request = try AuthorizationRequest(json: Array(try JSONSerialization.data(withJSONObject: body)))
        try schema.validate(request)
        if let token {
            var scopes: [Scope: ScopeStatus] = [:]
            for (name, pair) in token {
                let state = ScopeState(rawValue: pair[0] as! String)!
                scopes[try Scope(name)] = ScopeStatus(state: state, changedAt: Date(timeIntervalSince1970: (pair[1] as! NSNumber).doubleValue), reason: "")
            }
            request.token = TokenView(token: OAuthToken(accessToken: "benchmark", issuedAt: now, scopes: scopes), at: now)
        }
        return request
    }
    return (policies, store, requests)
}

for name in ["todo", "photo-sharing", "repositories"] where profiled == nil || profiled == name {
    let (appPolicies, appStore, appRequests) = try applicationRequests(name)
    for round in 1...(profiled == nil ? 3 : 20) {
        if onlyIsAllowed == nil { _ = rate("\(name), round \(round), isAuthorized") {
            var allowed = 0
            for request in appRequests where appPolicies.isAuthorized(request, entities: appStore).isAllowed { allowed += 1 }
            return allowed
        } }
        _ = rate("\(name), round \(round), isAllowed") {
            var allowed = 0
            for request in appRequests where appPolicies.isAllowed(request, entities: appStore) { allowed += 1 }
            return allowed
        }
    }
}
