import Foundation
import KeysmithPolicy
import KeysmithTokens

/// The news-groups scenario of ../shared/cases/README.md, written once with the Swift builders
/// (this file, as in docs/guide.md) and once as a policy file (docs/examples/news-groups/policies.cedar).
enum NewsGroups {
    static func built() throws -> Policies {
        try Policies {
            Principals.anyone.shouldBeAbleTo("browse").on("Group").when("resource.public").named("browse-public")
            Principals.ofType("User").shouldBeAbleTo("browse", "post").on("Group")
                .when("principal.member_of.contains(resource) || principal.admin_of.contains(resource)").named("member-browse-post")
            Principals.ofType("User").shouldBeAbleTo("delete").on("Group").when("principal.admin_of.contains(resource)").named("admin-delete")
            Principals.ofType("User").shouldBeAbleTo().on("Group").when("principal.super_admin").named("super-admin")
            for (action, scope) in [("browse", "groups:read"), ("post", "posts:write"), ("delete", "posts:delete")] {
                Principals.ofType("User").shouldNotBeAbleTo(action).unlessGranted(scope).named("scope-\(action)")
            }
        }
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
    }

    /// A copy of ../shared/cases (its README says where the expected answers come from).
    static let casesDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Cases")

    static func cases(_ file: String) throws -> [Case] {
        let text = try String(contentsOf: casesDirectory.appendingPathComponent(file), encoding: .utf8)
        return try text.split(separator: "\n").map { try JSONDecoder().decode(Case.self, from: Data($0.utf8)) }
    }
}
