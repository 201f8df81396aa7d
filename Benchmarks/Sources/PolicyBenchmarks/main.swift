// Policy decisions per second on the news-groups scenario (1,000 groups, 1,000 users): the
// engine beside the same rules hand-written as plain Swift `if`s, in one run, one core.
import Foundation
import KeysmithPolicy
import KeysmithTokens

let groupCount = 1000, userCount = 1000, requestCount = 2_000_000
let browse = Action("browse"), post = Action("post"), delete = Action("delete")
let member = Role("member"), admin = Role("admin"), superAdmin = Role("super-admin")
let allScopes = [try Scope("groups:read"), try Scope("posts:write"), try Scope("posts:delete")]

let engine = try PolicyEngine(
    roles: [RoleDefinition(.anyone), RoleDefinition(.authenticated), RoleDefinition(member),
            RoleDefinition(admin, inherits: [member]), RoleDefinition(superAdmin)],
    actions: [browse, post, delete],
    policies: [
        Role.anyone.shouldBeAbleTo(browse).when(.resourceAttribute("public", equals: .bool(true))).named("browse-public"),
        member.shouldBeAbleTo(browse, post).named("member-browse-post"),
        admin.shouldBeAbleTo(delete).named("admin-delete"),
        superAdmin.shouldBeAbleTo(browse, post, delete).named("super-admin"),
        Role.authenticated.shouldNotBeAbleTo(browse).unlessGranted([allScopes[0]]).named("scope-browse"),
        Role.authenticated.shouldNotBeAbleTo(post).unlessGranted([allScopes[1]]).named("scope-post"),
        Role.authenticated.shouldNotBeAbleTo(delete).unlessGranted([allScopes[2]]).named("scope-delete"),
    ])

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
let resources = groups.map { Resource(type: "group", id: $0.id, attributes: ["public": .bool($0.isPublic)]) }
var handUsers: [HandUser] = []
var principals: [PreparedPrincipal] = []
for index in 0..<userCount {
    let anonymous = index % 10 == 0
    let memberOf = Set((0..<3).map { _ in groups[Int.random(in: 0..<groupCount, using: &generator)].id })
    let adminOf = Set((0..<1).map { _ in groups[Int.random(in: 0..<groupCount, using: &generator)].id })
    let scopes = allScopes.filter { _ in Int.random(in: 0..<10, using: &generator) < 8 }
    let isSuperAdmin = index % 97 == 0
    handUsers.append(HandUser(anonymous: anonymous, superAdmin: isSuperAdmin, memberOf: memberOf, adminOf: adminOf,
                              read: scopes.contains(allScopes[0]), write: scopes.contains(allScopes[1]), delete: scopes.contains(allScopes[2])))
    var held: [String: Set<Role>] = [:]
    for group in memberOf { held[group, default: []].insert(member) }
    for group in adminOf { held[group, default: []].insert(admin) }
    let principal = anonymous
        ? Principal.anonymous(id: "u\(index)")
        : Principal(id: "u\(index)", roles: isSuperAdmin ? [superAdmin] : [], resourceRoles: held, scopes: .fixed(Set(scopes)))
    principals.append(engine.prepare(principal))
}
let actions = [browse, post, delete]
let requests = (0..<requestCount).map { _ in
    (Int.random(in: 0..<userCount, using: &generator), Int.random(in: 0..<3, using: &generator), Int.random(in: 0..<groupCount, using: &generator))
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

func rate(_ label: String, _ body: () -> Int) -> Double {
    let start = DispatchTime.now().uptimeNanoseconds
    let allowed = body()
    let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
    let perSecond = Double(requestCount) / seconds
    print("\(label): \(String(format: "%.2f", perSecond / 1e6)) million decisions/s (\(String(format: "%.0f", seconds * 1e9 / Double(requestCount))) ns each; \(allowed) allowed)")
    return perSecond
}

var agree = 0
for (user, action, group) in requests.prefix(100_000)
where engine.decide(principals[user], actions[action], resources[group]).isAllowed == handWritten(handUsers[user], action, groups[group]) {
    agree += 1
}
print("engine and hand-written agree on \(agree) of 100000 requests")

for round in 1...2 {
    print("-- round \(round)")
    let hand = rate("hand-written ifs") {
        var allowed = 0
        for (user, action, group) in requests where handWritten(handUsers[user], action, groups[group]) { allowed += 1 }
        return allowed
    }
    let engineRate = rate("engine (prepared principals)") {
        var allowed = 0
        for (user, action, group) in requests where engine.decide(principals[user], actions[action], resources[group]).isAllowed { allowed += 1 }
        return allowed
    }
    print("engine / hand-written: \(String(format: "%.2f", hand / engineRate))× slower")
}
