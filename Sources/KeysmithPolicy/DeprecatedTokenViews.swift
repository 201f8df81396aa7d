// Deprecated forwards, for one release: a Keysmith token or permission manager becomes a
// `TokenView` through the adapter module, KeysmithTokenPolicy. This file is the only one in
// KeysmithPolicy that imports KeysmithTokens (docs/architecture.md; ModuleMapTests holds it so);
// it goes with the forwards, and the arrow with it.
public import FoundationEssentials
public import KeysmithTokens

extension TokenView {
    /// A token's scopes at `date`: `TokenView(token:at:)` in KeysmithTokenPolicy.
    @available(*, deprecated, message: "import KeysmithTokenPolicy and use TokenView(token:at:)")
    public static func token(_ token: OAuthToken, at date: Date) -> TokenView {
        TokenView(scopes: token.decisionStatuses(at: date))
    }

    /// A permission manager, read at every decision: `TokenView(watching:)` in KeysmithTokenPolicy.
    @available(*, deprecated, message: "import KeysmithTokenPolicy and use TokenView(watching:)")
    public static func live(_ manager: PermissionManager) -> TokenView {
        .live(grantedNames: { Set(manager.permissions.map(\.rawValue)) })
    }

    /// A fixed set of granted scopes: `TokenView(granted:)` in KeysmithTokenPolicy.
    @available(*, deprecated, message: "import KeysmithTokenPolicy and use TokenView(granted:), or TokenView.granted(names:)")
    public static func granted(_ scopes: Set<Scope>) -> TokenView {
        .granted(names: Set(scopes.map(\.rawValue)))
    }
}
