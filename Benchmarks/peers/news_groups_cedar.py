"""The news-groups rules written for Cedar, with scopes and the anonymous flag as principal
attributes (Cedar has no token): used by peers.py and decide.py."""

CEDAR_POLICIES = """
@id("browse-public") permit(principal, action == Action::"browse", resource) when { resource.public };
@id("member-browse-post") permit(principal, action in [Action::"browse", Action::"post"], resource)
  when { principal.member_of.contains(resource) || principal.admin_of.contains(resource) };
@id("admin-delete") permit(principal, action == Action::"delete", resource) when { principal.admin_of.contains(resource) };
@id("super-admin") permit(principal, action, resource) when { principal.super_admin };
@id("scope-browse") forbid(principal, action == Action::"browse", resource) when { !principal.anonymous && !principal.scopes.contains("groups:read") };
@id("scope-post") forbid(principal, action == Action::"post", resource) when { !principal.anonymous && !principal.scopes.contains("posts:write") };
@id("scope-delete") forbid(principal, action == Action::"delete", resource) when { !principal.anonymous && !principal.scopes.contains("posts:delete") };
"""
