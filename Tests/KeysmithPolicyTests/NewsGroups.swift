import Foundation
import KeysmithPolicy
import KeysmithTokens

/// The news-groups scenario of ../shared/cases/README.md, written once in Swift (this file, as
/// in docs/guide.md) and once as a policy file (docs/examples/news-groups.json).
enum NewsGroups {
    static let browse = Action("browse"), post = Action("post"), delete = Action("delete")
    static let member = Role("member"), admin = Role("admin"), superAdmin = Role("super-admin")
    static let groupsRead = try! Scope("groups:read"), postsWrite = try! Scope("posts:write"), postsDelete = try! Scope("posts:delete")

    static func engine() throws -> PolicyEngine {
        try PolicyEngine(
            roles: [
                RoleDefinition(.anyone), RoleDefinition(.authenticated), RoleDefinition(member),
                RoleDefinition(admin, inherits: [member]), RoleDefinition(superAdmin),
            ],
            actions: [browse, post, delete],
            policies: [
                Role.anyone.shouldBeAbleTo(browse).when(.resourceAttribute("public", equals: .bool(true))).named("browse-public"),
                member.shouldBeAbleTo(browse, post).named("member-browse-post"),
                admin.shouldBeAbleTo(delete).named("admin-delete"),
                superAdmin.shouldBeAbleTo(browse, post, delete).named("super-admin"),
                Role.authenticated.shouldNotBeAbleTo(browse).unlessGranted([groupsRead]).named("scope-browse"),
                Role.authenticated.shouldNotBeAbleTo(post).unlessGranted([postsWrite]).named("scope-post"),
                Role.authenticated.shouldNotBeAbleTo(delete).unlessGranted([postsDelete]).named("scope-delete"),
            ])
    }

    static let policyFile = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("docs/examples/news-groups.json")

    static func fileEngine() throws -> PolicyEngine {
        try PolicyFile.engine(from: Array(try Data(contentsOf: policyFile)))
    }

    /// One case of ../shared/cases/*.expected.jsonl.
    struct Case: Decodable {
        struct Group: Decodable { var id: String; var `public`: Bool }
        struct Who: Decodable {
            var id: String
            var anonymous: Bool
            var member_of: [String]
            var admin_of: [String]
            var super_admin: Bool
            var scopes: [String]
        }
        var action: String
        var expected: String
        var cedar_reasons: [String]
        var group: Group
        var principal: Who

        var request: Request {
            let resource = Resource(type: "group", id: group.id, attributes: ["public": .bool(group.public)])
            let principal: Principal
            if self.principal.anonymous {
                principal = .anonymous(id: self.principal.id)
            } else {
                var held: [String: Set<Role>] = [:]
                for group in self.principal.member_of { held[group, default: []].insert(NewsGroups.member) }
                for group in self.principal.admin_of { held[group, default: []].insert(NewsGroups.admin) }
                principal = Principal(
                    id: self.principal.id, roles: self.principal.super_admin ? [NewsGroups.superAdmin] : [],
                    resourceRoles: held, scopes: .fixed(Set(self.principal.scopes.map { try! Scope($0) })))
            }
            return Request(principal: principal, action: Action(action), resource: resource)
        }
    }

    /// A copy of ../shared/cases (its README says where the expected answers come from).
    static let casesDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Cases")

    static func cases(_ file: String) throws -> [Case] {
        let text = try String(contentsOf: casesDirectory.appendingPathComponent(file), encoding: .utf8)
        return try text.split(separator: "\n").map { try JSONDecoder().decode(Case.self, from: Data($0.utf8)) }
    }
}
