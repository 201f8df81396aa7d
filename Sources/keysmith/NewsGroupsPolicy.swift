// The news-groups policy of docs/examples/news-groups.json, built into the command for its
// walkthrough and for `keysmith policy example`. A test checks the two are identical.
let newsGroupsPolicy = #"""
{
  "roles": [
    "anyone",
    "authenticated",
    "member",
    { "name": "admin", "inherits": ["member"] },
    "super-admin"
  ],
  "actions": ["browse", "post", "delete"],
  "attributes": {
    "resource": { "public": "bool" }
  },
  "policies": [
    {
      "name": "browse-public",
      "description": "Anyone, even an anonymous user, can browse a public group.",
      "effect": "permit",
      "roles": ["anyone"],
      "actions": ["browse"],
      "when": [{ "resource": "public", "equals": true }]
    },
    {
      "name": "member-browse-post",
      "description": "A group's members (and its admins, who inherit member) browse and post in it.",
      "effect": "permit",
      "roles": ["member"],
      "actions": ["browse", "post"]
    },
    {
      "name": "admin-delete",
      "description": "A group's admins delete posts in it.",
      "effect": "permit",
      "roles": ["admin"],
      "actions": ["delete"]
    },
    {
      "name": "super-admin",
      "description": "A super admin browses, posts and deletes in any group.",
      "effect": "permit",
      "roles": ["super-admin"],
      "actions": ["browse", "post", "delete"]
    },
    {
      "name": "scope-browse",
      "description": "A signed-in principal browses only with groups:read; overrides every permit.",
      "effect": "forbid",
      "roles": ["authenticated"],
      "actions": ["browse"],
      "scopes": ["groups:read"]
    },
    {
      "name": "scope-post",
      "description": "A signed-in principal posts only with posts:write.",
      "effect": "forbid",
      "roles": ["authenticated"],
      "actions": ["post"],
      "scopes": ["posts:write"]
    },
    {
      "name": "scope-delete",
      "description": "A signed-in principal deletes only with posts:delete.",
      "effect": "forbid",
      "roles": ["authenticated"],
      "actions": ["delete"],
      "scopes": ["posts:delete"]
    }
  ]
}
"""#
