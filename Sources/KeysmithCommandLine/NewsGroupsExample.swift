// The news-groups example of docs/examples/news-groups/, built into the command for its
// walkthrough and for `keysmith policy example`. A test checks these are the files, byte for byte.
enum NewsGroupsExample {
    static let policies = #"""
// The news-groups scenario (../../../Tests/KeysmithPolicyTests/Cases/README.md) in Keysmith's policy language.
// Signed-in principals are User entities with a token; anonymous ones are Anonymous entities
// with none. Actions: browse, post, delete; the resource is always a Group.

// 1. Anyone, even an anonymous user, can browse a public group.
@id("browse-public")
permit (principal, action == Action::"browse", resource is Group)
when { resource.public };

// 2, 3. Members browse and post; an admin of a group counts as a member of it.
@id("member-browse-post")
permit (principal is User, action in [Action::"browse", Action::"post"], resource is Group)
when { principal.member_of.contains(resource) || principal.admin_of.contains(resource) };

// 3. Only a group's admins delete posts in it.
@id("admin-delete")
permit (principal is User, action == Action::"delete", resource is Group)
when { principal.admin_of.contains(resource) };

// 4. A super admin can do anything to any group.
@id("super-admin")
permit (principal is User, action, resource is Group)
when { principal.super_admin };

// 5. Each action needs its scope from every signed-in user's token, super admins included; a
//    user with no token at all is denied too. Anonymous visitors have no token and are exempt.
@id("scope-browse")
forbid (principal is User, action == Action::"browse", resource)
unless { context has token && context.token.granted.contains("groups:read") };

@id("scope-post")
forbid (principal is User, action == Action::"post", resource)
unless { context has token && context.token.granted.contains("posts:write") };

@id("scope-delete")
forbid (principal is User, action == Action::"delete", resource)
unless { context has token && context.token.granted.contains("posts:delete") };
"""#

    static let schema = #"""
// The news-groups scenario's schema: signed-in users and anonymous visitors, groups, three actions.
entity Group { public: Bool };
entity User { member_of: Set<Group>, admin_of: Set<Group>, super_admin: Bool };
entity Anonymous { member_of: Set<Group>, admin_of: Set<Group>, super_admin: Bool };
action browse, post, delete appliesTo { principal: [User, Anonymous], resource: [Group] };
"""#

    static let entities = #"""
[
  {"uid": {"type": "Group", "id": "g1"}, "attrs": {"public": false}},
  {"uid": {"type": "Group", "id": "g2"}, "attrs": {"public": true}},
  {"uid": {"type": "User", "id": "alice"}, "attrs": {"member_of": [{"__entity": {"type": "Group", "id": "g1"}}], "admin_of": [], "super_admin": false}},
  {"uid": {"type": "User", "id": "bob"}, "attrs": {"member_of": [], "admin_of": [{"__entity": {"type": "Group", "id": "g1"}}], "super_admin": false}},
  {"uid": {"type": "User", "id": "root"}, "attrs": {"member_of": [], "admin_of": [], "super_admin": true}},
  {"uid": {"type": "Anonymous", "id": "visitor"}, "attrs": {"member_of": [], "admin_of": [], "super_admin": false}}
]
"""#
}
